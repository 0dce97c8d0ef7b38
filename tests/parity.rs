//! What liboffload's API offers besides queues, on the host backend: typed device
//! properties, validating an image without loading it, listing a module's symbols, and
//! launches with dynamic shared memory.

mod common;

use offload::host::fixtures::KERNELS;
use offload::{Arg, BackendKind, Dims, Error, MemKind, Offload, Program};

fn host() -> (Offload, offload::Device) {
    let rt = Offload::init().unwrap();
    let dev = rt
        .devices()
        .unwrap()
        .into_iter()
        .find(|d| d.backend() == BackendKind::Host)
        .expect("the host device");
    (rt, dev)
}

#[test]
fn host_properties_are_typed_and_complete() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let info = dev.info().unwrap();
    assert!(info.name.starts_with("host cpu 0"), "{}", info.name);
    assert_eq!(info.backend, BackendKind::Host);
    assert!(info.memory > 0 && info.compute_units > 0);
    assert!(
        info.driver_version
            .as_deref()
            .unwrap()
            .contains("offload-host")
    );
    assert_eq!(info.max_block_threads, Some(u32::MAX));
    assert_eq!(info.max_grid, Some([u32::MAX; 3]));
    assert_eq!(info.max_alloc, Some(info.memory));
    assert_eq!(
        info.shared_memory,
        Some(u64::from(offload::host::MAX_SHARED_MEMORY))
    );
    assert_eq!(info.address_bits, Some(usize::BITS));
    // Read once: asking again gives the same, without reading /proc again.
    assert_eq!(dev.info().unwrap(), info);
    rt.shutdown().unwrap();
}

#[test]
fn validate_checks_an_image_without_loading_it() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let loads = offload::host::stats().loads;
    dev.validate(KERNELS).unwrap();
    assert_eq!(
        offload::host::stats().loads,
        loads,
        "validate loaded nothing"
    );
    match dev.validate(b"\x7fELF but not really") {
        Err(Error::InvalidBinary { backend, call, .. }) => {
            assert_eq!((backend, call), (BackendKind::Host, "Device::validate"));
        }
        other => panic!("expected InvalidBinary, got {other:?}"),
    }
    rt.shutdown().unwrap();
}

#[test]
fn a_module_lists_its_kernels_and_globals() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS).load(&dev).unwrap();
    let mut kernels = module.kernels().unwrap();
    kernels.sort();
    assert_eq!(
        kernels,
        ["add_one", "fill", "noop", "read_global", "shared_reverse"],
        "declared kernels only (`undeclared` has no parameter string)"
    );
    let mut globals = module.globals().unwrap();
    globals.sort();
    assert_eq!(globals, ["g", "read_only_constant"]);
    drop(module);
    rt.shutdown().unwrap();
}

#[test]
fn dynamic_shared_memory_is_per_block_and_bounded() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS).load(&dev).unwrap();
    let reverse = module.kernel("shared_reverse").unwrap();
    let (blocks, threads) = (64u32, 64u32);
    let n = (blocks * threads) as usize;
    let buf = dev.alloc(4 * n, MemKind::Device).unwrap();
    let input: Vec<u8> = (0..n as u32).flat_map(|x| x.to_ne_bytes()).collect();
    buf.write(0, &input).unwrap();
    let queue = dev.queue().unwrap();
    let dims = Dims::grid([blocks, 1, 1])
        .block([threads, 1, 1])
        .shared_memory(4 * threads);
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { queue.launch(&reverse, dims, &[Arg::buffer(&buf)]) }.unwrap();
    let mut out = vec![0u8; 4 * n];
    queue.read(&buf, 0, &mut out).unwrap();
    let got: Vec<u32> = out
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    for (i, &v) in got.iter().enumerate() {
        let (block, t) = (i as u32 / threads, i as u32 % threads);
        assert_eq!(v, block * threads + (threads - 1 - t), "element {i}");
    }
    let too_much = Dims::grid([1, 1, 1]).shared_memory(offload::host::MAX_SHARED_MEMORY + 1);
    assert!(matches!(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&reverse, too_much, &[Arg::buffer(&buf)]) },
        Err(Error::InvalidArgument { .. })
    ));
    drop((reverse, module, queue, buf));
    rt.shutdown().unwrap();
}

#[test]
fn copies_between_devices_are_staged_through_the_host() {
    let _serial = common::serial();
    let rt = Offload::builder().host_devices(2).start().unwrap();
    let hosts: Vec<offload::Device> = rt
        .devices()
        .unwrap()
        .into_iter()
        .filter(|d| d.backend() == BackendKind::Host)
        .collect();
    let (a, b) = (&hosts[0], &hosts[1]);
    let src = a.alloc(1000, MemKind::Device).unwrap();
    let dst = b.alloc(1000, MemKind::Device).unwrap();
    let data: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
    let qa = a.queue().unwrap();
    let qb = b.queue().unwrap();
    // Queued on the source's device, then copied by the destination's queue: the copy
    // reads after the queued write.
    qa.write(&src, 0, &data).unwrap();
    qb.copy(&src, 100, &dst, 0, 800).unwrap();
    let mut out = vec![0u8; 800];
    qb.read(&dst, 0, &mut out).unwrap();
    assert_eq!(out, data[100..900]);
    // From this queue's device to another: synced here, written there.
    qa.fill(&src, 0, 1000, &[9]).unwrap();
    qa.copy(&src, 0, &dst, 0, 1000).unwrap();
    dst.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 9));
    // The synchronous copy between devices too.
    src.write(0, &[1, 2, 3]).unwrap();
    dst.copy_from(997, &src, 0, 3).unwrap();
    let mut tail = [0u8; 3];
    dst.read(997, &mut tail).unwrap();
    assert_eq!(tail, [1, 2, 3]);
    // Neither buffer on the queue's device, or out of range: InvalidArgument.
    let c = a.alloc(8, MemKind::Device).unwrap();
    assert!(matches!(
        qb.copy(&src, 0, &c, 0, 8),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        qb.copy(&src, 999, &dst, 0, 2),
        Err(Error::InvalidArgument { .. })
    ));
    drop((qa, qb, src, dst, c, hosts));
    rt.shutdown().unwrap();
}

#[test]
fn host_memory_is_touched_in_place_but_shared_memory_is_not() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let buf = dev.alloc(16, MemKind::Host).unwrap();
    let queue = dev.queue().unwrap();
    queue.fill(&buf, 0, 16, &[5]).unwrap();
    // After the queued fill, in place.
    let sum = buf
        .with_mapped(|bytes| {
            bytes[0] = 100;
            bytes.iter().map(|&b| u32::from(b)).sum::<u32>()
        })
        .unwrap();
    assert_eq!(sum, 100 + 15 * 5);
    let mut first = [0u8; 1];
    buf.read(0, &mut first).unwrap();
    assert_eq!(first, [100]);
    let shared = dev.alloc_exportable(16, MemKind::Device).unwrap();
    assert!(matches!(
        shared.with_mapped(|_| ()),
        Err(Error::Unsupported { .. })
    ));
    drop((queue, buf, shared));
    rt.shutdown().unwrap();
}

/// Between platforms: host memory and a Vulkan device (lavapipe in CI).
#[cfg(feature = "vulkan")]
#[test]
fn copies_between_the_host_and_vulkan() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let devices = rt.devices().unwrap();
    let host = devices
        .iter()
        .find(|d| d.backend() == BackendKind::Host)
        .unwrap();
    let Some(vk) = devices.iter().find(|d| d.backend() == BackendKind::Vulkan) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but no Vulkan device"
        );
        println!("SKIP copies_between_the_host_and_vulkan: no Vulkan device");
        return;
    };
    let h = host.alloc(4096, MemKind::Device).unwrap();
    let v = vk.alloc(4096, MemKind::Device).unwrap();
    let data: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    h.write(0, &data).unwrap();
    let vq = vk.queue().unwrap();
    vq.copy(&h, 0, &v, 0, 4096).unwrap();
    let back = host.alloc(4096, MemKind::Device).unwrap();
    vq.copy(&v, 0, &back, 0, 4096).unwrap();
    let mut out = vec![0u8; 4096];
    back.read(0, &mut out).unwrap();
    assert_eq!(out, data);
    drop((vq, h, v, back, devices));
    rt.shutdown().unwrap();
}
