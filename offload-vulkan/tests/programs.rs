//! Programs, kernels, queues and events through the `hal` traits, on whatever Vulkan
//! driver the machine has (lavapipe in CI), with the validation layer on: WGSL kernels
//! compiled by naga, launched over a mebiword and over every block size the CUDA model
//! allows, invalid SPIR-V that never reaches the driver, typed errors for everything the
//! argument convention refuses, and events that time and order work.

mod common;

// Every test holds `serial()`: some assert deltas of the backend's process-wide counters,
// which a test running beside them would move.

use common::{
    assert_no_validation_errors, both_paths_validated, bytes_of, close, kernels, open_validated,
    serial, spirv_of, words,
};
use offload_core::hal::{Device as _, Event as _, Platform as _, Program as _, Queue as _};
use offload_core::{Dims, Error, KernelArg, MemKind, ParamKind, ScalarType};
use offload_vulkan::{
    VulkanBuffer, VulkanDevice, VulkanKernel, VulkanModule, VulkanPlatform, VulkanQueue, stats,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

const MI: u32 = 1 << 20;

/// A scalar argument of the bytes of a `u32` (kept alive by the caller).
fn u32s(bytes: &[u8; 4]) -> KernelArg<'_, VulkanBuffer> {
    KernelArg::Scalar(bytes)
}

fn fill(q: &VulkanQueue, k: &VulkanKernel, buf: &VulkanBuffer, value: u32, n: u32, dims: Dims) {
    let (value, n) = (value.to_ne_bytes(), n.to_ne_bytes());
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { q.launch(k, &dims, &[KernelArg::Buffer(buf), u32s(&value), u32s(&n)]) }
        .unwrap_or_else(|e| panic!("fill {dims:?}: {e}"));
}

fn add_one(q: &VulkanQueue, k: &VulkanKernel, buf: &VulkanBuffer, n: u32, dims: Dims) {
    let n = n.to_ne_bytes();
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { q.launch(k, &dims, &[KernelArg::Buffer(buf), u32s(&n)]) }
        .unwrap_or_else(|e| panic!("add_one {dims:?}: {e}"));
}

fn read_words(dev: &VulkanDevice, buf: &VulkanBuffer) -> Vec<u32> {
    let mut out = vec![0u8; buf.len()];
    dev.read(buf, 0, &mut out).unwrap();
    words(&out)
}

#[test]
fn add_one_and_fill_over_a_mebiword() {
    let _serial = serial();
    let Some(platforms) = both_paths_validated("add_one_and_fill_over_a_mebiword") else {
        return;
    };
    for (path, vk) in platforms {
        let dev = vk.devices().remove(0);
        let module = dev.load(&kernels()).unwrap();
        let k_fill = module.kernel("fill").unwrap();
        let k_add = module.kernel("add_one").unwrap();
        assert_eq!(k_add.workgroup_size(), [64, 1, 1]);
        let q = dev.queue().unwrap();
        for kind in [MemKind::Device, MemKind::Host] {
            let mut buf = dev.alloc(MI as usize * 4, kind).unwrap();
            let start: Vec<u32> = (0..MI).map(|i| i.wrapping_mul(2_654_435_761)).collect();
            dev.write(&mut buf, 0, &bytes_of(&start)).unwrap();
            let grid = Dims::grid([MI / 64, 1, 1]).block([64, 1, 1]);
            add_one(&q, &k_add, &buf, MI, grid);
            q.sync().unwrap();
            let got = read_words(&dev, &buf);
            let want: Vec<u32> = start.iter().map(|w| w.wrapping_add(1)).collect();
            assert!(got == want, "{path} {kind:?}: add_one over 1 Mi words");

            // fill part, then add_one over all, without syncing in between: in order.
            fill(&q, &k_fill, &buf, 41, MI / 2, grid);
            add_one(&q, &k_add, &buf, MI, grid);
            // A host read waits for the launches that use the buffer (no sync here).
            let got = read_words(&dev, &buf);
            for (i, (&g, &s)) in got.iter().zip(&start).enumerate() {
                let want = if i < (MI / 2) as usize {
                    42
                } else {
                    s.wrapping_add(2)
                };
                assert_eq!(g, want, "{path} {kind:?}: word {i}");
            }
            // Freeing waits for the work that uses the buffer, too.
            add_one(&q, &k_add, &buf, MI, grid);
            dev.free(buf).unwrap();
        }
        q.destroy().unwrap();
        drop((k_fill, k_add));
        module.unload().unwrap();
        close(vk);
    }
    assert_no_validation_errors("add_one_and_fill_over_a_mebiword");
}

/// Every block size runs exactly `grid × block` threads, thread i being
/// `block_id * block + thread`, whatever the shader declares (64).
#[test]
fn any_block_size_runs_grid_times_block_threads() {
    let _serial = serial();
    let Some(vk) = open_validated("any_block_size_runs_grid_times_block_threads") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let max = dev.vulkan_info().max_workgroup_size[0].min(1024);
    let module = dev.load(&kernels()).unwrap();
    let k_add = module.kernel("add_one").unwrap();
    let q = dev.queue().unwrap();
    const WORDS: usize = 4096;
    let mut buf = dev.alloc(WORDS * 4, MemKind::Device).unwrap();
    dev.fill(&mut buf, 0, WORDS * 4, 0).unwrap();
    let mut model = vec![0u32; WORDS];
    let cases = [
        (1, 1, 1000),
        (3, 1, 2),
        (2, 5, 1000),
        (4, 16, 50),
        (1, 63, 63),
        (1, 64, 10),
        (2, 65, 1000),
        (3, 128, 300),
        (1, max, WORDS as u32),
        (1, 17, 17),
        (2, 17, 1000),
    ];
    for (grid, block, n) in cases {
        add_one(
            &q,
            &k_add,
            &buf,
            n,
            Dims::grid([grid, 1, 1]).block([block, 1, 1]),
        );
        let threads = (grid * block).min(n) as usize;
        for w in &mut model[..threads] {
            *w += 1;
        }
    }
    // A grid with a zero runs nothing.
    add_one(
        &q,
        &k_add,
        &buf,
        100,
        Dims::grid([0, 1, 1]).block([64, 1, 1]),
    );
    q.sync().unwrap();
    assert_eq!(read_words(&dev, &buf), model);
    dev.free(buf).unwrap();
    q.destroy().unwrap();
    drop(k_add);
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("any_block_size_runs_grid_times_block_threads");
}

/// naga writes SPIR-V 1.0 (BufferBlock, no interface globals) to 1.6 (StorageBuffer,
/// globals in the interface): reflection gives the same parameters, and they all run.
#[test]
fn every_spirv_version_reflects_the_same_parameters() {
    let _serial = serial();
    let Some(vk) = open_validated("every_spirv_version_reflects_the_same_parameters") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let q = dev.queue().unwrap();
    let mut buf = dev.alloc(256, MemKind::Device).unwrap();
    for minor in 0..=6u8 {
        let image = spirv_of(common::KERNELS_WGSL, (1, minor));
        let module = dev.load(&image).unwrap();
        assert_eq!(module.spirv_version(), (1, minor));
        let names: Vec<&str> = module.entry_points().collect();
        assert_eq!(names, ["add_one", "fill", "noop"]);
        let k_add = module.kernel("add_one").unwrap();
        let k_fill = module.kernel("fill").unwrap();
        let k_noop = module.kernel("noop").unwrap();
        assert_eq!(
            VulkanModule::params(&k_add),
            [ParamKind::Buffer, ParamKind::Typed(ScalarType::U32)]
        );
        assert_eq!(
            VulkanModule::params(&k_fill),
            [
                ParamKind::Buffer,
                ParamKind::Typed(ScalarType::U32),
                ParamKind::Typed(ScalarType::U32)
            ]
        );
        assert_eq!(VulkanModule::params(&k_noop), []);
        dev.fill(&mut buf, 0, 256, 0).unwrap();
        let dims = Dims::grid([1, 1, 1]).block([64, 1, 1]);
        fill(&q, &k_fill, &buf, u32::from(minor) + 10, 60, dims);
        add_one(&q, &k_add, &buf, 30, dims);
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&k_noop, &dims, &[]) }.unwrap();
        q.sync().unwrap();
        let got = read_words(&dev, &buf);
        let v = u32::from(minor) + 10;
        assert!(got[..30].iter().all(|&w| w == v + 1), "1.{minor}: {got:?}");
        assert!(got[30..60].iter().all(|&w| w == v), "1.{minor}");
        assert!(got[60..].iter().all(|&w| w == 0), "1.{minor}");
        drop((k_add, k_fill, k_noop));
        module.unload().unwrap();
    }
    dev.free(buf).unwrap();
    q.destroy().unwrap();
    close(vk);
    assert_no_validation_errors("every_spirv_version_reflects_the_same_parameters");
}

/// (opcode, index of its first word) of every instruction of a module.
fn instructions(w: &[u32]) -> impl Iterator<Item = (u32, usize)> + '_ {
    let mut at = 5;
    std::iter::from_fn(move || {
        let first = *w.get(at)?;
        let here = at;
        at += (first >> 16).max(1) as usize;
        Some((first & 0xFFFF, here))
    })
}

fn invalid_binary(vk: &VulkanPlatform, image: &[u8], what: &str) -> String {
    let dev = &vk.devices()[0];
    match dev.load(image) {
        Err(Error::InvalidBinary {
            backend, reason, ..
        }) => {
            assert_eq!(backend, offload_core::BackendKind::Vulkan);
            reason
        }
        Err(other) => panic!("{what}: expected InvalidBinary, got {other}"),
        Ok(_) => panic!("{what}: loaded"),
    }
}

/// Bad images are `InvalidBinary` with the reason, and the driver never sees one: no
/// `VkShaderModule` is created for any of them.
#[test]
fn invalid_spirv_never_reaches_the_driver() {
    let _serial = serial();
    let Some(vk) = open_validated("invalid_spirv_never_reaches_the_driver") else {
        return;
    };
    let good = kernels();
    let created = stats().shader_modules_created;

    let mut cases: Vec<(String, Vec<u8>, &str)> = vec![
        ("empty".into(), vec![], "empty"),
        ("3 bytes".into(), vec![3, 2, 35], "whole number"),
        (
            "odd size".into(),
            good[..good.len() - 2].to_vec(),
            "whole number",
        ),
        (
            "an ELF file".into(),
            b"\x7fELF\x02\x01\x01\0\0\0\0\0".to_vec(),
            "magic",
        ),
    ];
    let mut swapped = good.clone();
    for w in swapped.chunks_exact_mut(4) {
        w.reverse();
    }
    cases.push(("byte-swapped".into(), swapped, "byte-swapped"));
    let mut flipped = good.clone();
    flipped[..4].iter_mut().for_each(|b| *b ^= 0xFF);
    cases.push(("first word flipped".into(), flipped, "magic"));
    let mut future = good.clone();
    future[4..8].copy_from_slice(&0x0001_0700u32.to_ne_bytes());
    cases.push(("SPIR-V 1.7".into(), future, "version"));
    let mut unbound = good.clone();
    unbound[12..16].copy_from_slice(&3u32.to_ne_bytes());
    cases.push(("bound too small".into(), unbound, "bound"));
    let mut zero = good.clone();
    zero[20..24].copy_from_slice(&(17u32).to_ne_bytes()); // OpCapability, word count 0
    cases.push(("a zero word count".into(), zero, "word count of 0"));
    let mut long = good.clone();
    long[20..24].copy_from_slice(&((0xFFFFu32 << 16) | 17).to_ne_bytes());
    cases.push(("a word count past the end".into(), long, "truncated"));
    // An id operand past the bound (a corrupted OpName target crashes lavapipe 22.3).
    let mut w = words(&good);
    let name = instructions(&w).find(|&(op, _)| op == 5).unwrap().1;
    w[name + 1] = u32::MAX;
    cases.push((
        "an OpName target past the bound".into(),
        bytes_of(&w),
        "outside the bound",
    ));
    // Every truncation at a word boundary inside the instruction stream.
    for cut in (20..good.len()).step_by(4) {
        cases.push((
            format!("truncated to {cut} bytes"),
            good[..cut].to_vec(),
            "",
        ));
    }
    for (what, image, expect) in &cases {
        let reason = invalid_binary(&vk, image, what);
        assert!(reason.contains(expect), "{what}: {reason}");
    }

    // Random bytes, and random bytes behind a valid header.
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        proptest::collection::vec(any::<u32>(), 0..64),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(mut w, header)| {
            if header {
                let mut h = vec![0x0723_0203, 0x0001_0300, 0, 1000, 0];
                h.append(&mut w);
                w = h;
            }
            let dev = &vk.devices()[0];
            let result = dev.load(&bytes_of(&w));
            prop_assert!(
                matches!(result, Err(Error::InvalidBinary { .. })),
                "{:?}",
                result.map(|_| ())
            );
            Ok(())
        })
        .unwrap();

    assert_eq!(
        stats().shader_modules_created,
        created,
        "an invalid image reached vkCreateShaderModule"
    );
    // The platform is unharmed.
    let module = vk.devices()[0].load(&good).unwrap();
    assert!(module.kernel("noop").is_ok());
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("invalid_spirv_never_reaches_the_driver");
}

#[test]
fn missing_entry_points_and_globals_are_symbol_not_found() {
    let _serial = serial();
    let Some(vk) = open_validated("missing_entry_points_and_globals_are_symbol_not_found") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let module = dev.load(&kernels()).unwrap();
    for name in ["missing", "add_on", "add_one_", "ADD_ONE", "", "main"] {
        match module.kernel(name) {
            Err(Error::SymbolNotFound { symbol, call, .. }) => {
                assert_eq!(symbol, name);
                // The backend names no user call; the handle of the user's call does.
                assert_eq!(call, "");
            }
            other => panic!("{name:?}: {:?}", other.map(|_| ())),
        }
    }
    // SPIR-V for Vulkan has no host-reachable globals.
    for name in ["buf", "add_one_args", "g"] {
        assert!(matches!(
            module.global(name),
            Err(Error::SymbolNotFound { .. })
        ));
        assert!(matches!(
            module.read_global(name, 0, &mut [0; 4]),
            Err(Error::SymbolNotFound { .. })
        ));
        assert!(matches!(
            module.write_global(name, 0, &[0; 4]),
            Err(Error::SymbolNotFound { .. })
        ));
    }
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("missing_entry_points_and_globals_are_symbol_not_found");
}

fn invalid_argument(result: offload_core::Result<()>, what: &str) -> String {
    match result {
        Err(Error::InvalidArgument { reason, .. }) => reason,
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

/// Arguments that do not match the shader's bindings and push constants, and geometry the
/// device or the shader cannot run, are `InvalidArgument` and run nothing.
#[test]
fn mismatched_launches_are_invalid_argument() {
    let _serial = serial();
    let Some(vk) = open_validated("mismatched_launches_are_invalid_argument") else {
        return;
    };
    let Some(other) = open_validated("mismatched_launches_are_invalid_argument") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let module = dev.load(&kernels()).unwrap();
    let k_add = module.kernel("add_one").unwrap();
    let k_fill = module.kernel("fill").unwrap();
    let q = dev.queue().unwrap();
    let mut buf = dev.alloc(256, MemKind::Device).unwrap();
    dev.fill(&mut buf, 0, 256, 0x5A).unwrap();
    let other_dev = other.devices().remove(0);
    let foreign = other_dev.alloc(256, MemKind::Device).unwrap();
    let b = KernelArg::Buffer(&buf);
    let n = 64u32.to_ne_bytes();
    let n64 = 64u64.to_ne_bytes();
    let ok = Dims::grid([1, 1, 1]).block([64, 1, 1]);
    let cases: Vec<(&str, &VulkanKernel, Vec<KernelArg<'_, VulkanBuffer>>, Dims)> = vec![
        ("no arguments", &k_add, vec![], ok),
        (
            "one argument too many",
            &k_add,
            vec![b, u32s(&n), u32s(&n)],
            ok,
        ),
        ("a u64 count", &k_add, vec![b, KernelArg::Scalar(&n64)], ok),
        ("swapped", &k_add, vec![u32s(&n), b], ok),
        ("a buffer for a scalar", &k_add, vec![b, b], ok),
        ("fill without its count", &k_fill, vec![b, u32s(&n)], ok),
        (
            "a buffer of another platform",
            &k_add,
            vec![KernelArg::Buffer(&foreign), u32s(&n)],
            ok,
        ),
        (
            "a zero block",
            &k_add,
            vec![b, u32s(&n)],
            Dims::grid([1, 1, 1]).block([0, 1, 1]),
        ),
        (
            "a block past the device's limit",
            &k_add,
            vec![b, u32s(&n)],
            Dims::grid([1, 1, 1]).block([1 << 20, 1, 1]),
        ),
        (
            "too many threads per block",
            &k_add,
            vec![b, u32s(&n)],
            Dims::grid([1, 1, 1]).block([64, 64, 64]),
        ),
        (
            "a grid past the device's limit",
            &k_add,
            vec![b, u32s(&n)],
            Dims::grid([u32::MAX, 1, 1]).block([64, 1, 1]),
        ),
    ];
    let launches = stats().launches;
    for (what, k, args, dims) in &cases {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        let reason = invalid_argument(unsafe { q.launch(k, dims, args) }, what);
        println!("{what}: {reason}");
    }
    q.sync().unwrap();
    assert!(read_words(&dev, &buf).iter().all(|&w| w == 0x5A5A_5A5A));
    assert!(stats().launches >= launches);

    // A queue of another platform.
    let other_q = other_dev.queue().unwrap();
    invalid_argument(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { other_q.launch(&k_add, &ok, &[b, u32s(&n)]) },
        "foreign queue",
    );

    // The queue still works.
    add_one(&q, &k_add, &buf, 16, ok);
    q.sync().unwrap();
    let got = read_words(&dev, &buf);
    assert!(got[..16].iter().all(|&w| w == 0x5A5A_5A5B));
    assert!(got[16..].iter().all(|&w| w == 0x5A5A_5A5A));

    other_q.destroy().unwrap();
    other_dev.free(foreign).unwrap();
    drop(other_dev);
    close(other);
    dev.free(buf).unwrap();
    q.destroy().unwrap();
    drop((k_add, k_fill));
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("mismatched_launches_are_invalid_argument");
}

/// Valid shaders that use what the convention has no place for say so when asked for the
/// kernel; a shader with workgroup memory refuses blocks larger than it declares.
#[test]
fn unsupported_shapes_are_typed_errors() {
    let _serial = serial();
    let Some(vk) = open_validated("unsupported_shapes_are_typed_errors") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let uniform = r#"
        struct U { x: u32 }
        @group(0) @binding(0) var<uniform> u: U;
        @group(0) @binding(1) var<storage, read_write> out: array<u32>;
        @compute @workgroup_size(1) fn uses_uniform() { out[0] = u.x; }
        @group(0) @binding(2) var tex: texture_2d<f32>;
        @compute @workgroup_size(1)
        fn uses_texture() { out[0] = u32(textureLoad(tex, vec2<i32>(0, 0), 0).x); }
        @group(1) @binding(0) var<storage, read_write> other: array<u32>;
        @compute @workgroup_size(1) fn uses_set_one() { other[0] = 1u; }
        @group(1) @binding(1) var<uniform> other_u: U;
        @compute @workgroup_size(1) fn uses_uniform_in_set_one() { out[0] = other_u.x; }
        @compute @workgroup_size(1) fn plain() { out[0] = 2u; }
    "#;
    let module = dev.load(&spirv_of(uniform, (1, 3))).unwrap();
    // Uniform buffers are parameters of their own (see tests/shader_declarations.rs).
    let uses_uniform = module.kernel("uses_uniform").unwrap();
    assert_eq!(
        VulkanModule::params(&uses_uniform),
        [ParamKind::Uniform, ParamKind::Buffer]
    );
    drop(uses_uniform);
    for (name, expect) in [
        ("uses_texture", "image, sampler"),
        ("uses_set_one", "set 1"),
        (
            "uses_uniform_in_set_one",
            "a uniform buffer in descriptor set 1",
        ),
    ] {
        match module.kernel(name) {
            Err(Error::Unsupported { reason, .. }) => {
                assert!(reason.contains(expect), "{name}: {reason}")
            }
            other => panic!("{name}: {:?}", other.map(|_| ())),
        }
    }
    let plain = module.kernel("plain").unwrap();
    assert_eq!(VulkanModule::params(&plain), [ParamKind::Buffer]);
    drop(plain);
    module.unload().unwrap();

    // A binding number near u32::MAX (lavapipe crashes on such a set layout).
    let mut w = words(&kernels());
    let binding = instructions(&w)
        .find(|&(op, at)| op == 71 && w[at + 2] == 33)
        .unwrap()
        .1;
    w[binding + 3] = u32::MAX;
    let module = dev.load(&bytes_of(&w)).unwrap();
    match module.kernel("add_one") {
        Err(Error::Unsupported { reason, .. }) => assert!(reason.contains("binding"), "{reason}"),
        other => panic!("binding u32::MAX: {:?}", other.map(|_| ())),
    }
    module.unload().unwrap();

    let shared = r#"
        @group(0) @binding(0) var<storage, read_write> out: array<u32>;
        var<workgroup> tile: array<u32, 64>;
        @compute @workgroup_size(64)
        fn reverse(@builtin(local_invocation_index) i: u32, @builtin(workgroup_id) g: vec3<u32>) {
            tile[i] = out[g.x * 64u + i];
            workgroupBarrier();
            out[g.x * 64u + i] = tile[63u - i];
        }
    "#;
    let module = dev.load(&spirv_of(shared, (1, 3))).unwrap();
    let k = module.kernel("reverse").unwrap();
    let q = dev.queue().unwrap();
    let mut buf = dev.alloc(128 * 4, MemKind::Device).unwrap();
    let data: Vec<u32> = (0..128).collect();
    dev.write(&mut buf, 0, &bytes_of(&data)).unwrap();
    let reason = invalid_argument(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe {
            q.launch(
                &k,
                &Dims::grid([1, 1, 1]).block([128, 1, 1]),
                &[KernelArg::Buffer(&buf)],
            )
        },
        "a larger block with workgroup memory",
    );
    assert!(reason.contains("workgroup memory"), "{reason}");
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        q.launch(
            &k,
            &Dims::grid([2, 1, 1]).block([64, 1, 1]),
            &[KernelArg::Buffer(&buf)],
        )
    }
    .unwrap();
    q.sync().unwrap();
    let got = read_words(&dev, &buf);
    let want: Vec<u32> = (0..128).map(|i| (i / 64) * 64 + 63 - i % 64).collect();
    assert_eq!(got, want);
    dev.free(buf).unwrap();
    q.destroy().unwrap();
    drop(k);
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("unsupported_shapes_are_typed_errors");
}

/// Events time the work between them with device timestamps, and a queue that waits for
/// another queue's event runs after that queue's work.
#[test]
fn events_time_work_and_order_queues() {
    let _serial = serial();
    let Some(vk) = open_validated("events_time_work_and_order_queues") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let timestamps = dev.vulkan_info().timestamp_valid_bits > 0;
    let module = dev.load(&kernels()).unwrap();
    let k_add = module.kernel("add_one").unwrap();
    let k_fill = module.kernel("fill").unwrap();
    let (a, b) = (dev.queue().unwrap(), dev.queue().unwrap());
    let buf = dev.alloc(MI as usize * 4, MemKind::Device).unwrap();
    let grid = Dims::grid([MI / 64, 1, 1]).block([64, 1, 1]);
    // Warm up the pipelines (lavapipe compiles at the first dispatch).
    fill(&a, &k_fill, &buf, 0, MI, grid);
    add_one(&a, &k_add, &buf, MI, grid);
    a.sync().unwrap();

    let start = a.record().unwrap();
    assert_eq!(start.has_device_timestamp(), timestamps);
    fill(&a, &k_fill, &buf, 7, MI, grid);
    let filled = a.record().unwrap();
    b.wait_event(&filled).unwrap();
    add_one(&b, &k_add, &buf, MI, grid);
    let end = b.record().unwrap();
    end.sync().unwrap();
    let fill_time = filled.elapsed_since(&start).unwrap();
    let total = end.elapsed_since(&start).unwrap();
    println!("fill {fill_time:?}, fill + add_one {total:?} (device timestamps: {timestamps})");
    assert!(fill_time > std::time::Duration::ZERO);
    assert!(total >= fill_time);
    assert!(read_words(&dev, &buf).iter().all(|&w| w == 8));
    for e in [start, filled, end] {
        e.destroy().unwrap();
    }
    // Events recorded with nothing before them complete at once.
    let idle = dev.queue().unwrap();
    let e = idle.record().unwrap();
    e.sync().unwrap();
    e.destroy().unwrap();
    for q in [a, b, idle] {
        q.destroy().unwrap();
    }
    dev.free(buf).unwrap();
    drop((k_add, k_fill));
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("events_time_work_and_order_queues");
}

/// Unloading, destroying queues and events, freeing and deinit with work still running all
/// wait for it, and leave nothing behind.
#[test]
fn teardown_with_work_in_flight_is_clean() {
    let _serial = serial();
    let Some(vk) = open_validated("teardown_with_work_in_flight_is_clean") else {
        return;
    };
    let before = stats();
    let dev = vk.devices().remove(0);
    let module = dev.load(&kernels()).unwrap();
    let k_add = module.kernel("add_one").unwrap();
    let q = dev.queue().unwrap();
    let bufs: Vec<VulkanBuffer> = (0..4)
        .map(|_| {
            let mut b = dev.alloc(MI as usize * 4, MemKind::Device).unwrap();
            dev.fill(&mut b, 0, MI as usize * 4, 0).unwrap();
            b
        })
        .collect();
    for round in 0..8 {
        for buf in &bufs {
            // Odd block sizes too: their pipelines are destroyed with the module.
            let block = if round % 2 == 0 { 64 } else { 32 };
            add_one(
                &q,
                &k_add,
                buf,
                MI,
                Dims::grid([MI / block, 1, 1]).block([block, 1, 1]),
            );
        }
    }
    let event = q.record().unwrap();
    drop(k_add);
    module.unload().unwrap(); // waits for the launches
    for buf in bufs {
        assert!(read_words(&dev, &buf).iter().all(|&w| w == 8));
        dev.free(buf).unwrap();
    }
    event.destroy().unwrap();
    q.destroy().unwrap();
    let after = stats();
    assert_eq!(after.live_modules, before.live_modules);
    assert_eq!(after.live_pipelines, before.live_pipelines);
    assert_eq!(after.live_shader_modules, before.live_shader_modules);
    assert_eq!(after.live_queues, before.live_queues);
    assert_eq!(after.live_events, before.live_events);

    // Work in flight at deinit: everything is dropped first, then deinit waits idle.
    let module = dev.load(&kernels()).unwrap();
    let k_add = module.kernel("add_one").unwrap();
    let q = dev.queue().unwrap();
    let buf = dev.alloc(MI as usize * 4, MemKind::Device).unwrap();
    for _ in 0..8 {
        add_one(
            &q,
            &k_add,
            &buf,
            MI,
            Dims::grid([MI / 64, 1, 1]).block([64, 1, 1]),
        );
    }
    drop(k_add);
    drop(module);
    drop(q);
    drop(buf);
    close(vk);
    let after = stats();
    assert_eq!(after.live_modules, before.live_modules);
    assert_eq!(after.live_pipelines, before.live_pipelines);
    assert_eq!(after.live_queues, before.live_queues);
    assert_no_validation_errors("teardown_with_work_in_flight_is_clean");
}

/// Q1 on Vulkan: launches and queued copies are recorded into one batch and submitted when
/// something needs them (a sync, a host access, an event), in order, with the barriers
/// the validation layer asks for; queued fills take every pattern size, queued writes
/// every size and alignment.
#[test]
fn queued_work_is_batched_and_ordered() {
    let _serial = serial();
    let Some(platforms) = both_paths_validated("queued_work_is_batched_and_ordered") else {
        return;
    };
    for (path, vk) in platforms {
        let dev = vk.devices().remove(0);
        let module = dev.load(&kernels()).unwrap();
        let k_add = module.kernel("add_one").unwrap();
        let q = dev.queue().unwrap();
        let n = 4096usize;
        let buf = dev.alloc(4 * n, MemKind::Device).unwrap();
        let other = dev.alloc(4 * n, MemKind::Host).unwrap();
        let grid = Dims::grid([(n / 64) as u32, 1, 1]).block([64, 1, 1]);

        // Ten launches and a fill: recorded, not submitted, until the sync.
        let before = stats().submissions;
        q.enqueue_fill(&buf, 0, 4 * n, &[0]).unwrap();
        for _ in 0..10 {
            add_one(&q, &k_add, &buf, n as u32, grid);
        }
        assert_eq!(q.unsubmitted(), 11, "{path}");
        assert_eq!(stats().submissions, before, "{path}: nothing submitted yet");
        q.sync().unwrap();
        assert_eq!(stats().submissions, before + 1, "{path}: one submission");
        assert!(read_words(&dev, &buf).iter().all(|&w| w == 10), "{path}");

        // A host read submits the batch that uses the buffer, and sees its work.
        add_one(&q, &k_add, &buf, n as u32, grid);
        q.enqueue_copy(&buf, 0, &other, 0, 4 * n).unwrap();
        assert_eq!(q.unsubmitted(), 2);
        assert!(read_words(&dev, &other).iter().all(|&w| w == 11), "{path}");
        assert_eq!(q.unsubmitted(), 0, "{path}: the read submitted the batch");

        // Fills with every pattern size, at odd offsets, against a model.
        let mut model = vec![0u8; 4 * n];
        q.enqueue_fill(&buf, 0, 4 * n, &[0]).unwrap();
        let patterns: [&[u8]; 6] = [
            &[0xA1],
            &[1, 2],
            &[1, 2, 3, 4],
            &[8, 7, 6, 5, 4, 3, 2, 1],
            &[16; 16],
            &[3, 1, 4],
        ];
        for (i, pattern) in patterns.iter().enumerate() {
            let offset = 1 + i * 517;
            let len = pattern.len() * (50 + i);
            q.enqueue_fill(&buf, offset, len, pattern).unwrap();
            for (b, p) in model[offset..offset + len]
                .iter_mut()
                .zip(pattern.iter().cycle())
            {
                *b = *p;
            }
        }
        // Writes: inline (small, aligned), staged (unaligned, and over 64 KiB).
        let small: Vec<u8> = (0..64).collect();
        q.enqueue_write(&buf, 8192, small.clone()).unwrap();
        model[8192..8256].copy_from_slice(&small);
        let odd: Vec<u8> = (0..77).map(|x| x * 3).collect();
        q.enqueue_write(&buf, 9001, odd.clone()).unwrap();
        model[9001..9078].copy_from_slice(&odd);
        // A copy inside the buffer, after them.
        q.enqueue_copy(&buf, 0, &buf, 12000, 1000).unwrap();
        let moved = model[..1000].to_vec();
        model[12000..13000].copy_from_slice(&moved);
        let mut got = vec![0u8; 4 * n];
        dev.read(&buf, 0, &mut got).unwrap();
        assert!(
            got == model,
            "{path}: queued fills, writes and copy in order"
        );
        assert!(matches!(
            q.enqueue_copy(&buf, 0, &buf, 10, 100),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            q.enqueue_fill(&buf, 0, 7, &[1, 2]),
            Err(Error::InvalidArgument { .. })
        ));
        let big: Vec<u8> = (0..70_000u32).map(|x| x as u8).collect();
        let large = dev.alloc(big.len(), MemKind::Device).unwrap();
        q.enqueue_write(&large, 0, big.clone()).unwrap();
        let mut back = vec![0u8; big.len()];
        dev.read(&large, 0, &mut back).unwrap();
        assert!(back == big, "{path}: a staged 70,000-byte queued write");

        // A host function runs after the work before it, on the queue's thread, by the
        // next sync (tests/host_fn.rs checks the order and that enqueueing never waits).
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        add_one(&q, &k_add, &buf, 1, Dims::grid([1, 1, 1]).block([64, 1, 1]));
        let flag = seen.clone();
        q.enqueue_host_fn(Box::new(move || *flag.lock().unwrap() = Some(())))
            .unwrap();
        q.sync().unwrap();
        assert!(seen.lock().unwrap().is_some());
        assert!(q.is_idle().unwrap());

        // Dynamic shared memory: Vulkan declares workgroup memory in the shader.
        let n4 = (n as u32).to_ne_bytes();
        assert!(matches!(
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe {
                q.launch(
                    &k_add,
                    &grid.shared_memory(256),
                    &[KernelArg::Buffer(&buf), u32s(&n4)],
                )
            },
            Err(Error::Unsupported { .. })
        ));
        q.destroy().unwrap();
        for b in [buf, other, large] {
            dev.free(b).unwrap();
        }
        drop(k_add);
        module.unload().unwrap();
        close(vk);
    }
    assert_no_validation_errors("queued_work_is_batched_and_ordered");
}

/// `validate` checks an image as `load` would without loading it; a module lists its
/// entry points and (on Vulkan) no globals.
#[test]
fn validate_and_symbols() {
    let _serial = serial();
    let Some(vk) = open_validated("validate_and_symbols") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let created = stats().shader_modules_created;
    dev.validate(&kernels()).unwrap();
    match dev.validate(b"not SPIR-V at all") {
        Err(Error::InvalidBinary { call, .. }) => assert_eq!(call, ""),
        other => panic!("expected InvalidBinary, got {other:?}"),
    }
    assert_eq!(
        stats().shader_modules_created,
        created,
        "validate made nothing"
    );
    let module = dev.load(&kernels()).unwrap();
    let names = module.kernels();
    assert!(names.iter().any(|k| k == "add_one") && names.iter().any(|k| k == "fill"));
    assert!(module.globals().is_empty());
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors("validate_and_symbols");
}
