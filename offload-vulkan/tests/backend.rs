//! The Vulkan backend through the `hal` traits, on whatever Vulkan driver the machine has
//! (lavapipe in CI): device info, round trips on every memory kind at awkward sizes, both
//! the mapped and the staged path, a model-checked property test, typed errors, and leaks.

mod common;

use common::{both_paths, close, open, pattern};
use offload_core::hal::{Device as _, Platform as _};
use offload_core::{BackendKind, Error, MemKind};
use offload_vulkan::{VulkanDeviceType, VulkanPlatform};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

const KINDS: [MemKind; 3] = [MemKind::Device, MemKind::Host, MemKind::Shared];
const SIZES: [usize; 8] = [1, 3, 4, 5, 4097, 1 << 20, (1 << 20) + 3, (9 << 20) + 1];

#[test]
fn device_info_comes_from_the_driver() {
    let Some(vk) = open("device_info_comes_from_the_driver") else {
        return;
    };
    assert!(vk.name().starts_with("vulkan ("), "{}", vk.name());
    let devices = vk.devices();
    assert!(!devices.is_empty(), "an opened platform has devices");
    for dev in &devices {
        let info = dev.info().unwrap();
        let vinfo = dev.vulkan_info();
        println!("{info:?}\n{vinfo:#?}");
        assert_eq!(info.backend, BackendKind::Vulkan);
        assert!(!info.name.is_empty());
        assert_eq!(info.name, vinfo.name);
        assert!(info.memory > 0);
        assert_eq!(info.memory, vinfo.device_local_memory);
        assert!(info.compute_units >= 1);
        assert!(vinfo.max_workgroup_invocations >= 128, "Vulkan's minimum");
        assert!(vinfo.max_workgroup_size[0] >= 128, "Vulkan's minimum");
        assert!(vinfo.max_allocation_size > 0);
        assert!(vinfo.used_api_version <= vinfo.api_version);
        assert!(vinfo.used_api_version.minor >= 1 || vinfo.used_api_version.major > 1);
        // The typed properties are the driver's limits.
        assert_eq!(info.vendor_id, Some(vinfo.vendor_id));
        assert_eq!(
            info.max_block_threads,
            Some(vinfo.max_workgroup_invocations)
        );
        assert_eq!(info.max_block, Some(vinfo.max_workgroup_size));
        assert_eq!(info.max_grid, Some(vinfo.max_workgroup_count));
        assert!(
            info.shared_memory.is_some_and(|s| s >= 16384),
            "Vulkan's minimum"
        );
        assert!(info.max_alloc.is_some_and(|a| a > 0));
        assert!(info.driver_version.is_some());
        assert_eq!(
            (info.address_bits, info.clock_mhz),
            (None, None),
            "not in Vulkan"
        );
    }
    let lavapipe = devices.iter().find(|d| {
        let i = d.vulkan_info();
        i.device_type == VulkanDeviceType::Cpu && i.vendor_id == 0x10005
    });
    match lavapipe {
        Some(dev) => {
            let info = dev.info().unwrap();
            let vinfo = dev.vulkan_info();
            assert_eq!(info.vendor, "Mesa");
            assert_eq!(vinfo.driver_name, "llvmpipe");
            assert!(info.name.starts_with("llvmpipe"), "{}", info.name);
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            assert_eq!(info.compute_units as usize, cores);
        }
        None if common::in_ci() => panic!("CI=true but lavapipe is not among the devices"),
        None => common::skipped("the lavapipe checks: no lavapipe device here"),
    }
    close(vk);
}

/// Every operation on one buffer pair, checked against a `Vec<u8>` model.
fn round_trip(vk: &VulkanPlatform, path: &str, kind: MemKind, other: MemKind, size: usize) {
    let ctx = format!("{path} {kind:?}<-{other:?} size {size}");
    let dev = &vk.devices()[0];
    let mut a = dev.alloc(size, kind).unwrap();
    let mut b = dev.alloc(size, other).unwrap();
    assert_eq!(a.len(), size);

    // write + read, whole buffer
    let mut model = pattern(size, size as u64);
    dev.write(&mut a, 0, &model).unwrap();
    let mut out = vec![0u8; size];
    dev.read(&a, 0, &mut out).unwrap();
    assert!(out == model, "{ctx}: whole write/read");

    // write + read at an unaligned offset
    let off = size / 3;
    let part = pattern(size - off, 7);
    dev.write(&mut a, off, &part).unwrap();
    model[off..].copy_from_slice(&part);
    let mut out = vec![0u8; size - off];
    dev.read(&a, off, &mut out).unwrap();
    assert!(out == model[off..], "{ctx}: partial write/read");

    // fills: whole, unaligned head and tail, and tiny ranges
    let fills = [
        (0, size, 0x11),
        (1.min(size - 1), size - 1.min(size - 1), 0x22),
        (size / 2, size - size / 2, 0x33),
        (size / 5, (size / 2).saturating_sub(size / 5) + 1, 0x44),
        (size - 1, 1, 0x55),
    ];
    for (at, len, value) in fills {
        let len = len.min(size - at);
        dev.fill(&mut a, at, len, value).unwrap();
        model[at..at + len].fill(value);
    }
    let mut out = vec![0u8; size];
    dev.read(&a, 0, &mut out).unwrap();
    assert!(out == model, "{ctx}: fills");

    // copy to another buffer (of another kind), partial and unaligned
    let mut model_b = pattern(size, 99);
    dev.write(&mut b, 0, &model_b).unwrap();
    let (so, d) = (size / 7, size / 4);
    let len = (size - so).min(size - d);
    dev.copy(&a, so, &mut b, d, len).unwrap();
    model_b[d..d + len].copy_from_slice(&model[so..so + len]);
    dev.read(&b, 0, &mut out).unwrap();
    assert!(out == model_b, "{ctx}: copy");

    // copy_within: overlapping up, overlapping down, disjoint
    let shift = (size / 3).max(1);
    if size > shift {
        let len = size - shift;
        dev.copy_within(&mut a, 0, shift, len).unwrap();
        model.copy_within(0..len, shift);
        dev.copy_within(&mut a, shift, 0, len).unwrap();
        model.copy_within(shift..shift + len, 0);
    }
    if size >= 4 {
        let half = size / 2;
        dev.copy_within(&mut a, half, 0, half).unwrap();
        model.copy_within(half..half + half, 0);
    }
    dev.read(&a, 0, &mut out).unwrap();
    assert!(out == model, "{ctx}: copy_within");

    dev.free(a).unwrap();
    dev.free(b).unwrap();
}

#[test]
fn round_trips_on_every_kind_and_size() {
    let Some(platforms) = both_paths("round_trips_on_every_kind_and_size") else {
        return;
    };
    for (path, vk) in platforms {
        for kind in KINDS {
            for size in SIZES {
                round_trip(&vk, path, kind, MemKind::Device, size);
                round_trip(&vk, path, kind, MemKind::Host, size);
            }
        }
        close(vk);
    }
}

#[test]
fn device_memory_is_staged_only_when_asked() {
    let Some(platforms) = both_paths("device_memory_is_staged_only_when_asked") else {
        return;
    };
    for (path, vk) in platforms {
        let dev = &vk.devices()[0];
        let device = dev.alloc(8, MemKind::Device).unwrap();
        let host = dev.alloc(8, MemKind::Host).unwrap();
        assert!(host.is_mapped(), "host memory is always mapped");
        if path == "staged" {
            assert!(!device.is_mapped());
        }
        dev.free(device).unwrap();
        dev.free(host).unwrap();
        close(vk);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        buf: usize,
        at: usize,
        data: Vec<u8>,
    },
    Read {
        buf: usize,
        at: usize,
        len: usize,
    },
    Fill {
        buf: usize,
        at: usize,
        len: usize,
        value: u8,
    },
    Copy {
        src: usize,
        so: usize,
        dst: usize,
        d: usize,
        len: usize,
    },
}

fn op(size: usize) -> impl Strategy<Value = Op> {
    let range = (0..size).prop_flat_map(move |at| (Just(at), 0..=size - at));
    prop_oneof![
        (0..4usize, range.clone(), any::<u64>()).prop_map(|(buf, (at, len), seed)| Op::Write {
            buf,
            at,
            data: pattern(len, seed),
        }),
        (0..4usize, range.clone()).prop_map(|(buf, (at, len))| Op::Read { buf, at, len }),
        (0..4usize, range.clone(), any::<u8>()).prop_map(|(buf, (at, len), value)| Op::Fill {
            buf,
            at,
            len,
            value
        }),
        (0..4usize, 0..4usize, range, 0..size).prop_map(move |(src, dst, (so, len), d)| Op::Copy {
            src,
            so,
            dst,
            d: d.min(size - len),
            len,
        }),
    ]
}

/// Random operation sequences on four buffers (device and host memory, mapped and staged)
/// against a `Vec<u8>` model of each.
#[test]
fn operations_match_a_vec_model() {
    let Some(platforms) = both_paths("operations_match_a_vec_model") else {
        return;
    };
    const SIZE: usize = 1031;
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (0..2usize, proptest::collection::vec(op(SIZE), 1..24));
    let result = runner.run(&strategy, |(which, ops)| {
        let (path, vk) = &platforms[which];
        let dev = &vk.devices()[0];
        let kinds = [
            MemKind::Device,
            MemKind::Host,
            MemKind::Device,
            MemKind::Shared,
        ];
        let mut bufs: Vec<_> = kinds.iter().map(|&k| dev.alloc(SIZE, k).unwrap()).collect();
        let mut models = vec![vec![0u8; SIZE]; 4];
        for (i, b) in bufs.iter_mut().enumerate() {
            models[i] = pattern(SIZE, i as u64);
            dev.write(b, 0, &models[i]).unwrap();
        }
        for op in &ops {
            match op {
                Op::Write { buf, at, data } => {
                    dev.write(&mut bufs[*buf], *at, data).unwrap();
                    models[*buf][*at..*at + data.len()].copy_from_slice(data);
                }
                Op::Read { buf, at, len } => {
                    let mut out = vec![0u8; *len];
                    dev.read(&bufs[*buf], *at, &mut out).unwrap();
                    prop_assert_eq!(&out[..], &models[*buf][*at..*at + len], "{} {:?}", path, op);
                }
                Op::Fill {
                    buf,
                    at,
                    len,
                    value,
                } => {
                    dev.fill(&mut bufs[*buf], *at, *len, *value).unwrap();
                    models[*buf][*at..*at + len].fill(*value);
                }
                Op::Copy {
                    src,
                    so,
                    dst,
                    d,
                    len,
                } => {
                    if src == dst {
                        dev.copy_within(&mut bufs[*src], *so, *d, *len).unwrap();
                        models[*src].copy_within(*so..*so + len, *d);
                    } else {
                        let (s, t) = two(&mut bufs, *src, *dst);
                        dev.copy(s, *so, t, *d, *len).unwrap();
                        let bytes = models[*src][*so..*so + len].to_vec();
                        models[*dst][*d..*d + len].copy_from_slice(&bytes);
                    }
                }
            }
        }
        for (i, b) in bufs.into_iter().enumerate() {
            let mut out = vec![0u8; SIZE];
            dev.read(&b, 0, &mut out).unwrap();
            dev.free(b).unwrap();
            if out != models[i] {
                return Err(TestCaseError::fail(format!("{path}: buffer {i} differs")));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    for (_, vk) in platforms {
        close(vk);
    }
}

/// A shared reference to one element and a mutable one to another.
fn two<T>(v: &mut [T], shared: usize, exclusive: usize) -> (&T, &mut T) {
    assert_ne!(shared, exclusive);
    if shared < exclusive {
        let (lo, hi) = v.split_at_mut(exclusive);
        (&lo[shared], &mut hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(shared);
        (&hi[0], &mut lo[exclusive])
    }
}

#[test]
fn impossible_requests_are_typed_errors() {
    let Some(vk) = open("impossible_requests_are_typed_errors") else {
        return;
    };
    let dev = &vk.devices()[0];
    let info = dev.vulkan_info().clone();
    for kind in KINDS {
        assert!(matches!(
            dev.alloc(0, kind),
            Err(Error::InvalidArgument { .. })
        ));
        for size in [
            usize::MAX,
            1 << 62,
            info.max_allocation_size as usize + 1,
            info.memory_heaps.iter().map(|h| h.size).max().unwrap() as usize + 1,
        ] {
            match dev.alloc(size, kind) {
                Err(Error::OutOfMemory {
                    backend, requested, ..
                }) => {
                    assert_eq!(backend, BackendKind::Vulkan);
                    assert_eq!(requested, size as u64);
                }
                other => panic!("{kind:?} {size}: {other:?}"),
            }
        }
    }
    assert_eq!(vk.live_allocations(), 0, "failed allocations leave nothing");

    let mut buf = dev.alloc(16, MemKind::Device).unwrap();
    let mut out = [0u8; 4];
    let bad = |r: offload_core::Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(bad(dev.read(&buf, 13, &mut out)));
    assert!(bad(dev.read(&buf, usize::MAX, &mut out)));
    assert!(bad(dev.write(&mut buf, 16, &[1])));
    assert!(bad(dev.fill(&mut buf, 8, 9, 0)));
    assert!(bad(dev.fill(&mut buf, usize::MAX, 2, 0)));
    assert!(bad(dev.copy_within(&mut buf, 0, 9, 8)));
    // Empty ranges at the end are fine.
    dev.read(&buf, 16, &mut []).unwrap();
    dev.fill(&mut buf, 16, 0, 1).unwrap();

    // A buffer of another platform's device (another VkInstance) is refused, not confused.
    let other = open("impossible_requests_are_typed_errors").unwrap();
    let other_dev = other.devices().remove(0);
    let foreign = other_dev.alloc(16, MemKind::Device).unwrap();
    assert!(bad(dev.copy(&foreign, 0, &mut buf, 0, 4)));
    other_dev.free(foreign).unwrap();
    drop(other_dev);
    close(other);

    dev.free(buf).unwrap();
    close(vk);
}

#[test]
fn deinit_reports_leaks_and_late_frees_stay_sound() {
    let Some(vk) = open("deinit_reports_leaks_and_late_frees_stay_sound") else {
        return;
    };
    let dev = vk.devices().remove(0);
    let mut leaked = dev.alloc(4097, MemKind::Device).unwrap();
    dev.write(&mut leaked, 0, &[7; 4097]).unwrap();
    match vk.deinit() {
        Err(Error::Driver { code, message, .. }) => {
            assert_eq!(code, 1);
            assert!(message.contains("still live"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // After deinit: no devices, no allocations, a second deinit is harmless.
    assert!(vk.devices().is_empty());
    assert!(matches!(
        dev.alloc(4, MemKind::Device),
        Err(Error::ShutDown { .. })
    ));
    vk.deinit().unwrap();
    // The leaked buffer kept its device alive: it still works and frees cleanly.
    let mut out = [0u8; 4097];
    dev.read(&leaked, 0, &mut out).unwrap();
    assert_eq!(out, [7; 4097]);
    dev.free(leaked).unwrap();
    assert_eq!(vk.live_allocations(), 0);
}

#[test]
fn many_threads_share_one_platform() {
    let Some(platforms) = both_paths("many_threads_share_one_platform") else {
        return;
    };
    for (path, vk) in platforms {
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let vk = &vk;
                s.spawn(move || {
                    let dev = &vk.devices()[0];
                    for round in 0..20u64 {
                        let size = 1 + ((t * 131 + round * 977) % 70_000) as usize;
                        let kind = KINDS[(t + round) as usize % 3];
                        let mut buf = dev.alloc(size, kind).unwrap();
                        let data = pattern(size, t * 1000 + round);
                        dev.write(&mut buf, 0, &data).unwrap();
                        let mut out = vec![0u8; size];
                        dev.read(&buf, 0, &mut out).unwrap();
                        assert!(out == data, "{path} thread {t} round {round}");
                        dev.free(buf).unwrap();
                    }
                });
            }
        });
        close(vk);
    }
}
