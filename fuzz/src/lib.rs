//! The fuzz checks of every parser of untrusted bytes, written once: the `cargo fuzz`
//! targets (fuzz/fuzz_targets/) and the stable soak (the root package's
//! tests/fuzz_corpus.rs, which takes this package without libFuzzer) both call these
//! functions. Each one feeds its input to one parser and asserts the parser's invariants:
//! it returns instead of panicking, and what it accepts is self-consistent (the checks are
//! listed on each function). A failed check panics, which is what both harnesses report;
//! otherwise a check returns whether the parser accepted the input (the soak counts both
//! outcomes).
//!
//! The parsers are ordinary dependencies: each backend crate exposes its parser of untrusted
//! bytes as a hidden public module (not part of its API) that depends on nothing but
//! `offload_core` — fuzzing them needs no driver and no GPU.

#![allow(clippy::missing_panics_doc)]

use offload_cuda::image as cuda_image;
use offload_hip::image as hip_image;
use offload_host::elf;
use offload_vulkan::spirv as vulkan_spirv;

use std::os::fd::OwnedFd;

/// A check: feeds its input to a parser, panics where an invariant does not hold, and
/// says whether the parser accepted the input.
pub type Check = fn(&[u8]) -> bool;

/// The targets: their names (as in fuzz/fuzz_targets/ and fuzz/corpus/) and checks.
pub const TARGETS: &[(&str, Check)] = &[
    ("host_elf", host_elf),
    ("cuda_image", cuda_image),
    ("amd_code_object", amd_code_object),
    ("ipc_wire", ipc_wire),
    ("spirv", spirv),
];

/// The host backend's ELF check (offload-host/src/elf.rs, all that `Program::load` reads
/// before `dlopen`). An accepted image is a 64-bit little-endian shared object (`ET_DYN`);
/// its symbols have names without NUL that look up a symbol; and appending bytes changes
/// nothing (every structure is at an absolute offset and was checked to lie inside the
/// image).
pub fn host_elf(data: &[u8]) -> bool {
    let Ok(image) = elf::validate(data) else {
        return false;
    };
    assert!(data.len() >= 64 && data.starts_with(b"\x7fELF"));
    assert_eq!((data[4], data[5], data[16], data[17]), (2, 1, 3, 0));
    for s in &image.symbols {
        assert!(!s.name.contains('\0'), "{s:?}");
        assert!(image.symbol(&s.name).is_some());
    }
    let mut longer = data.to_vec();
    longer.extend_from_slice(&[0xa5; 64]);
    let again = elf::validate(&longer).expect("appending bytes keeps an ELF image valid");
    assert_eq!(
        format!("{:?}", image.symbols),
        format!("{:?}", again.symbols)
    );
    true
}

/// The CUDA image check (offload-cuda/src/image/: PTX, cubin, fatbin), for an sm_86 and an
/// sm_90 device. An accepted image is of the form its first bytes say; it runs on the
/// device (PTX and fatbins: an arch no newer; cubins: same major, no newer minor); PTX and
/// cubins have kernels; every kernel has a name; every parameter has a size and a
/// power-of-two alignment, and a pointer is 8 bytes; only PTX has an ISA version.
pub fn cuda_image(data: &[u8]) -> bool {
    use cuda_image::ImageKind;
    let mut accepted = false;
    for device in [(8, 6), (9, 0)] {
        let Ok(i) = cuda_image::inspect(data, device) else {
            continue;
        };
        accepted = true;
        let magic = data
            .get(..4)
            .map(|m| u32::from_le_bytes(m.try_into().unwrap()));
        let kind = if data.starts_with(b"\x7fELF") {
            ImageKind::Cubin
        } else if magic == Some(0xBA55_ED50) {
            ImageKind::Fatbin
        } else {
            ImageKind::Ptx
        };
        assert_eq!(i.kind, kind, "{i:?}");
        let arch = i.arch.expect("an accepted image names its arch");
        match i.kind {
            ImageKind::Ptx => {
                assert!(arch <= device, "{i:?}");
                assert!(i.ptx_version.is_some(), "{i:?}");
                assert!(!i.entries.is_empty(), "{i:?}");
            }
            ImageKind::Cubin => {
                assert!(arch.0 == device.0 && arch.1 <= device.1, "{i:?}");
                assert!(i.ptx_version.is_none(), "{i:?}");
                assert!(!i.entries.is_empty(), "{i:?}");
            }
            ImageKind::Fatbin => assert!(arch <= device, "{i:?}"),
        }
        for e in &i.entries {
            assert!(!e.name.is_empty(), "{i:?}");
            for p in &e.params {
                assert!(p.size > 0 && p.align.is_power_of_two(), "{p:?}");
                if p.pointer == Some(true) {
                    assert_eq!(p.size, 8, "{p:?}");
                }
            }
        }
        for g in &i.globals {
            assert!(!g.name.is_empty(), "{g:?}");
        }
    }
    accepted
}

/// The AMD code object reader (offload-hip/src/image.rs) and its MessagePack reader. The
/// code object of a bundle lies inside the bundle, for any device architecture. An
/// accepted object names a known `gfx` target and where it lies; its parameters are
/// buffers or scalars of 1 to 8 bytes; its globals are sorted, named, and not kernel
/// descriptors; a plain code object is accepted for a device of its own target, the same,
/// and for an unknown one never; appending bytes changes nothing. The input is also read
/// as metadata on its own.
pub fn amd_code_object(data: &[u8]) -> bool {
    use offload_core::ParamKind;
    let _ = hip_image::msgpack(data);
    for arch in [None, Some("gfx90a:sramecc+:xnack-"), Some("gfx1100")] {
        if let Ok(range) = hip_image::code_object(data, arch) {
            assert!(
                range.start <= range.end && range.end <= data.len(),
                "{range:?}"
            );
        }
    }
    assert!(hip_image::inspect(data, Some("gfx000")).is_err());
    let Ok(object) = hip_image::inspect(data, None) else {
        return false;
    };
    assert!(object.target.starts_with("gfx"), "{object:?}");
    assert_eq!(Ok(object.range.clone()), hip_image::code_object(data, None));
    for k in &object.kernels {
        for p in &k.params {
            assert!(
                matches!(p, ParamKind::Buffer | ParamKind::Scalar(1..=8)),
                "{object:?}"
            );
        }
    }
    assert!(object.globals.is_sorted(), "{object:?}");
    for g in &object.globals {
        assert!(!g.is_empty() && !g.ends_with(".kd"), "{object:?}");
    }
    let bundle = data.starts_with(b"__CLANG_OFFLOAD_BUNDLE__");
    if !bundle {
        let device = format!("{}:sramecc+:xnack-", object.target);
        let same = hip_image::inspect(data, Some(&device))
            .expect("a code object is accepted for a device of its target");
        assert_eq!(same, object);
    }
    let mut longer = data.to_vec();
    longer.extend_from_slice(&[0xa5; 64]);
    let again =
        hip_image::inspect(&longer, None).expect("appending bytes keeps a code object valid");
    assert_eq!(
        (&again.target, &again.kernels, &again.globals),
        (&object.target, &object.kernels, &object.globals)
    );
    let range = if bundle {
        object.range
    } else {
        0..longer.len()
    };
    assert_eq!(again.range, range);
    true
}

/// The IPC wire decoder (`offload_core::ipc::wire::decode`) and the handle reader
/// (`IpcHandle::from_parts`), each without and with a descriptor. A decoded message
/// re-encodes to exactly the bytes it came from (decoding checks every byte) and decodes
/// again; an accepted handle's range lies inside its allocation and it writes back its
/// bytes. Descriptors of refused input are closed (the soak counts open descriptors).
pub fn ipc_wire(data: &[u8]) -> bool {
    use offload_core::ipc::{IpcHandle, wire};
    let mut accepted = false;
    for with_fd in [false, true] {
        let fds: Vec<OwnedFd> = if with_fd {
            vec![dev_null()]
        } else {
            Vec::new()
        };
        if let Ok(message) = wire::decode(data, fds) {
            accepted = true;
            let (bytes, fd) = message.encode();
            assert_eq!(bytes, data, "a decoded message re-encodes to its bytes");
            assert_eq!(
                fd.is_some(),
                with_fd,
                "the descriptor goes with the message"
            );
            if let Err(e) = wire::decode(&bytes, fd.into_iter().collect()) {
                panic!("a re-encoded message is refused: {e:?}");
            }
        }
        let fd = with_fd.then(dev_null);
        if let Ok(handle) = IpcHandle::from_parts(data, fd) {
            accepted = true;
            assert!(handle.len() > 0 && handle.offset() + handle.len() <= handle.size());
            assert_eq!(handle.fd().is_some(), with_fd);
            assert_eq!(handle.to_bytes(), data, "a handle writes back its bytes");
        }
    }
    accepted
}

fn dev_null() -> OwnedFd {
    OwnedFd::from(std::fs::File::open("/dev/null").expect("open /dev/null"))
}

/// The SPIR-V readers: offload-spirv's public entry point (`kernels`, the OpenCL-kernel
/// reflection of Level Zero, on its generic module reader) and the Vulkan backend's
/// `reflect` (offload-vulkan/src/spirv.rs, on the same reader), for the newest version.
///
/// An accepted OpenCL module has a SPIR-V 1.x version, kernels and globals with unique
/// names, and scalar parameters of a non-zero size. An accepted Vulkan module keeps its
/// words as given; each entry point has ascending bindings in 0..=4095 with one minimum
/// size each, and push-constant leaves inside its (4-byte rounded) push size; a copy with
/// another `LocalSize` and a copy marked bounds-checked are accepted with the same
/// reflection otherwise. No kernel, entry point or global is named "" (nothing could look
/// it up: fuzz/corpus/spirv/*-named-empty.spv are refused).
pub fn spirv(data: &[u8]) -> bool {
    use offload_core::ParamKind;
    use vulkan_spirv::{SpirvVersion, WorkgroupSize};
    let mut accepted = false;
    if let Ok(module) = offload_spirv::kernels(data) {
        accepted = true;
        assert!(module.version.0 == 1 && module.version.1 <= 6, "{module:?}");
        let mut names = std::collections::HashSet::new();
        for k in &module.kernels {
            assert!(!k.name.is_empty() && names.insert(&k.name), "{module:?}");
            for p in &k.params {
                assert!(!matches!(p, ParamKind::Scalar(0)), "{module:?}");
            }
        }
        let mut names = std::collections::HashSet::new();
        for g in &module.globals {
            assert!(!g.name.is_empty() && names.insert(&g.name), "{module:?}");
        }
    }
    let newest = SpirvVersion { major: 1, minor: 6 };
    let Ok(r) = vulkan_spirv::reflect(data, newest, "fuzz") else {
        return accepted;
    };
    assert_eq!(r.words.len() * 4, data.len());
    assert!(r.version <= newest);
    for e in &r.entry_points {
        assert!(!e.name.is_empty(), "{e:?}");
        assert!(
            e.bindings.is_sorted() && e.bindings.iter().all(|&b| b <= 4095),
            "{e:?}"
        );
        assert!(e.bindings.windows(2).all(|w| w[0] < w[1]), "{e:?}");
        assert_eq!(e.min_sizes.len(), e.bindings.len(), "{e:?}");
        assert_eq!(e.push_size % 4, 0, "{e:?}");
        for leaf in &e.push {
            assert!(leaf.size > 0, "{e:?}");
            assert!(u64::from(leaf.offset) + u64::from(leaf.size) <= u64::from(e.push_size));
        }
        assert_eq!(e.params().len(), e.bindings.len() + e.push.len());
    }
    let bytes = |words: &[u32]| {
        words
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect::<Vec<u8>>()
    };
    for (i, e) in r.entry_points.iter().enumerate() {
        if let Some(words) = r.with_local_size(i, [2, 3, 4]) {
            let again = vulkan_spirv::reflect(&bytes(&words), newest, "fuzz")
                .expect("another LocalSize keeps a module valid");
            let a = &again.entry_points[i];
            assert!(matches!(
                a.workgroup,
                WorkgroupSize::Literal {
                    size: [2, 3, 4],
                    ..
                }
            ));
            assert_eq!(
                (&a.name, &a.bindings, &a.push),
                (&e.name, &e.bindings, &e.push)
            );
        }
    }
    if !r.bounds_checked {
        let mut words = r.words.clone();
        vulkan_spirv::mark_bounds_checked(&mut words, None);
        let marked = vulkan_spirv::reflect(&bytes(&words), newest, "fuzz")
            .expect("marking keeps a module valid");
        assert!(marked.bounds_checked);
        assert_eq!(marked.entry_points.len(), r.entry_points.len());
    }
    true
}
