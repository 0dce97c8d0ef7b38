//! OpenCL-kernel reflection: the parameter mapping on a module with every kind of
//! parameter (tests/fixtures/params.cl), refusals with their reasons, and no panic on any
//! input (random bytes, and mutations of the Level Zero fixture).

use offload_core::{BackendKind, Error, ParamKind, ScalarType};
use offload_spirv::{GlobalVar, KernelModule, kernels, kernels_for};
use proptest::prelude::*;

const ZE_FIXTURE: &[u8] = include_bytes!("../../offload-ze/fixtures/kernels.spv");
const PARAMS: &[u8] = include_bytes!("fixtures/params.spv");
/// A Vulkan compute shader (offload-vulkan's fixture).
const VULKAN_SHADER: &[u8] = include_bytes!("../../offload-vulkan/tests/fixtures/kernels.spv");

fn reason(r: offload_core::Result<KernelModule>) -> String {
    match r {
        Err(Error::InvalidBinary {
            backend: BackendKind::Ze,
            reason,
            ..
        }) => reason,
        other => panic!("expected InvalidBinary from Ze, got {other:?}"),
    }
}

fn words(image: &[u8]) -> Vec<u32> {
    image
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

#[test]
fn every_kind_of_parameter_maps() {
    use ParamKind::{Buffer, Scalar, Typed};
    use ScalarType::*;
    let m = kernels(PARAMS).unwrap();
    let params = |name: &str| {
        m.kernels
            .iter()
            .find(|k| k.name == name)
            .unwrap_or_else(|| panic!("no kernel {name}"))
            .params
            .clone()
    };
    // OpenCL ints carry no signedness: char and uchar alike are u8.
    assert_eq!(
        params("scalars"),
        [
            Typed(U8),
            Typed(U8),
            Typed(U16),
            Typed(U16),
            Typed(U32),
            Typed(U32),
            Typed(U64),
            Typed(U64),
            Typed(F32),
            Typed(F64)
        ]
    );
    // global and constant pointers are buffers; a local pointer is an 8-byte scalar.
    assert_eq!(params("pointers"), [Buffer, Buffer, Scalar(8)]);
    // pair {char; int} by value: 8 bytes; packed: 5; float4: 16; int3: 16 (as int4);
    // half2: 4.
    assert_eq!(
        params("aggregates"),
        [Scalar(8), Scalar(5), Scalar(16), Scalar(16), Scalar(4)]
    );
    assert_eq!(params("uses_globals"), [Buffer]);
    assert_eq!(m.kernels.len(), 4);
    // Exported CrossWorkgroup variables only (`hidden` is in constant storage).
    let g = |name: &str, size| GlobalVar {
        name: name.into(),
        size,
    };
    assert_eq!(m.globals, [g("table", 12), g("shared_pair", 8)]);
}

#[test]
fn a_vulkan_shader_is_refused_as_such() {
    let r = reason(kernels(VULKAN_SHADER));
    assert!(r.contains("Vulkan shader"), "{r}");
    assert!(r.starts_with("SPIR-V: "), "{r}");
}

#[test]
fn the_backend_is_the_callers_and_the_call_is_left_to_the_handle() {
    match kernels_for(b"", BackendKind::Hip) {
        Err(Error::InvalidBinary {
            backend: BackendKind::Hip,
            call: "",
            reason,
        }) => assert!(reason.contains("empty"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// Sets word `at` of the first instruction with opcode `op` whose operand 1 is `operand1`
/// (any when `None`) to `value`.
fn patch(w: &mut [u32], op: u16, operand1: Option<u32>, at: usize, value: u32) {
    let mut i = 5;
    while i < w.len() {
        let count = (w[i] >> 16) as usize;
        if w[i] as u16 == op && operand1.is_none_or(|o| w[i + 1] == o) {
            w[i + at] = value;
            return;
        }
        i += count;
    }
    panic!("no opcode {op}");
}

#[test]
fn modules_of_other_flavours_and_malformed_ones_are_refused_with_the_reason() {
    let good = words(ZE_FIXTURE);
    let check = |w: &[u32], expect: &str| {
        let r = reason(kernels(&bytes(w)));
        assert!(r.contains(expect), "expected {expect:?}: {r}");
    };
    check(&good[..3], "header");
    let mut w = good.clone();
    w[0] = w[0].swap_bytes();
    check(&w, "byte-swapped");
    // No Kernel capability (Kernel -> Addresses, which the module declares anyway).
    let mut w = good.clone();
    patch(&mut w, 17, Some(6), 1, 4);
    check(&w, "no Kernel capability");
    // Physical32 addressing; the GLSL450 memory model.
    let mut w = good.clone();
    patch(&mut w, 14, None, 1, 1);
    check(&w, "Physical64");
    let mut w = good.clone();
    patch(&mut w, 14, None, 2, 1);
    check(&w, "not OpenCL");
    // Every entry point made GLCompute: no kernel left.
    let mut w = good.clone();
    for _ in 0..4 {
        patch(&mut w, 15, Some(6), 1, 5);
    }
    check(&w, "no Kernel entry point");
    // A bool parameter: add_one's u32 `n` retyped as the module's bool.
    let dis = offload_spirv::Context {
        backend: BackendKind::Ze,
        call: "t",
    };
    let module = dis.module(&good, dis.header(&good).unwrap()).unwrap();
    let bool_ty = *module
        .types
        .iter()
        .find(|(_, t)| **t == offload_spirv::Type::Bool)
        .unwrap()
        .0;
    let add_one = module
        .entry_points
        .iter()
        .find(|e| e.name == "add_one")
        .unwrap()
        .function;
    let n = module.functions[&add_one].params[1].1;
    let mut w2 = good.clone();
    let mut i = 5;
    while i < w2.len() {
        let count = (w2[i] >> 16) as usize;
        if w2[i] as u16 == 55 && w2[i + 2] == n {
            w2[i + 1] = bool_ty;
        }
        i += count;
    }
    let r = reason(kernels(&bytes(&w2)));
    assert!(
        r.contains("kernel `add_one`, parameter 1") && r.contains("bool"),
        "{r}"
    );
    // Truncated at every word boundary: refused, unless the cut falls right after a whole
    // function that no kernel needs (clang's `__clang_ocl_kern_imp_*` copies).
    let function_end = (1 << 16) | 56;
    for cut in 0..good.len() {
        match kernels(&bytes(&good[..cut])) {
            Ok(m) => {
                assert_eq!(good[cut - 1], function_end, "cut at {cut} accepted");
                assert_eq!(m.kernels.len(), 4);
            }
            Err(Error::InvalidBinary { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
}

/// Every Ok is self-consistent: at least one kernel, unique non-duplicated names, and
/// sizes that fit the module.
fn consistent(m: &KernelModule) {
    assert!(!m.kernels.is_empty());
    assert_eq!(m.version.0, 1);
    assert!(m.version.1 <= 6);
    let mut names: Vec<_> = m.kernels.iter().map(|k| &k.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), m.kernels.len(), "duplicate kernel names");
    let mut globals: Vec<_> = m.globals.iter().map(|g| &g.name).collect();
    globals.sort();
    globals.dedup();
    assert_eq!(globals.len(), m.globals.len(), "duplicate global names");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(image in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(m) = kernels(&image) {
            consistent(&m);
        }
    }

    #[test]
    fn random_words_behind_a_valid_header_never_panic(
        body in proptest::collection::vec(any::<u32>(), 0..64),
    ) {
        let mut w = words(ZE_FIXTURE)[..5].to_vec();
        w.extend(body);
        if let Ok(m) = kernels(&bytes(&w)) {
            consistent(&m);
        }
    }

    #[test]
    fn mutations_of_the_fixture_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u32>(), 0u8..4), 1..6),
    ) {
        let mut w = words(ZE_FIXTURE);
        for (at, value, how) in edits {
            let i = at % w.len();
            match how {
                0 => w[i] = value,
                1 => w[i] ^= 1 << (value % 32),
                2 => w[i] = (w[i] & 0xFFFF_0000) | (value % 400), // another opcode
                _ => w[i] = (w[i] & 0xFFFF) | ((value % 8) << 16), // another word count
            }
        }
        if let Ok(m) = kernels(&bytes(&w)) {
            consistent(&m);
        }
    }

    #[test]
    fn mutations_of_the_params_module_never_panic(
        at in any::<usize>(),
        value in any::<u32>(),
    ) {
        let mut w = words(PARAMS);
        let i = at % w.len();
        w[i] = value % 512;
        if let Ok(m) = kernels(&bytes(&w)) {
            consistent(&m);
        }
    }
}

/// A hand-written OpenCL module: kernel `k` taking one struct by value, whose type is
/// built by `types` (ids from 10 up; it returns the struct's id and the next free id).
fn by_value_kernel(types: impl FnOnce(&mut Vec<u32>) -> (u32, u32)) -> Vec<u32> {
    let mut body = Vec::new();
    let (strukt, next) = types(&mut body);
    let (ptr, fn_ty, param, label) = (next, next + 1, next + 2, next + 3);
    let mut w = vec![offload_spirv::MAGIC, 0x0001_0200, 0, next + 4, 0];
    push(&mut w, 17, &[6]); // Kernel
    push(&mut w, 17, &[4]); // Addresses
    push(&mut w, 14, &[2, 2]); // Physical64 OpenCL
    push(&mut w, 15, &[6, 1, u32::from_le_bytes(*b"k\0\0\0")]);
    push(&mut w, 71, &[param, 38, 2]); // FuncParamAttr ByVal
    push(&mut w, 19, &[2]); // void
    w.extend(body);
    push(&mut w, 32, &[ptr, 7, strukt]); // Function pointer to the struct
    push(&mut w, 33, &[fn_ty, 2, ptr]);
    push(&mut w, 54, &[2, 1, 0, fn_ty]);
    push(&mut w, 55, &[ptr, param]);
    push(&mut w, 248, &[label]);
    push(&mut w, 253, &[]);
    push(&mut w, 56, &[]);
    w
}

fn push(w: &mut Vec<u32>, op: u16, operands: &[u32]) {
    w.push(((operands.len() as u32 + 1) << 16) | u32::from(op));
    w.extend_from_slice(operands);
}

#[test]
fn a_struct_containing_itself_is_refused_not_a_stack_overflow() {
    // %10 = OpTypeStruct %11, %11 = OpTypeStruct %10 (forward references: malformed).
    let w = by_value_kernel(|w| {
        push(w, 30, &[10, 11]);
        push(w, 30, &[11, 10]);
        (10, 12)
    });
    let r = reason(kernels(&bytes(&w)));
    assert!(
        r.contains("kernel `k`, parameter 0") && r.contains("nested"),
        "{r}"
    );
}

#[test]
fn deeply_shared_structs_are_laid_out_once() {
    // %10 = u32; struct n+1 holds 64 of struct n, 8 levels: 4 * 64^8 bytes, computed in
    // linear time (without memoising, 64^8 visits).
    let w = by_value_kernel(|w| {
        push(w, 21, &[10, 32, 0]);
        for level in 0..8 {
            push(
                w,
                30,
                &[[11 + level].as_slice(), &[10 + level; 64]].concat(),
            );
        }
        (18, 19)
    });
    let m = kernels(&bytes(&w)).unwrap();
    assert_eq!(m.kernels[0].params, [ParamKind::Scalar(4 << 48)]);
}
