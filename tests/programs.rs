//! P1–P4 and kernel execution on the host backend: one module per (program, device)
//! whatever the concurrency, setup/teardown exactly once, typed errors for bad images and
//! launches, and images really unloaded.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use offload::host::fixtures::{KERNELS, KERNELS_STEP2};
use offload::{Arg, Dims, Error, MemKind, Offload, Program};

fn host() -> (Offload, offload::Device) {
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    (rt, dev)
}

fn u32s(buf: &offload::Buffer) -> Vec<u32> {
    let mut bytes = vec![0u8; buf.len()];
    buf.read(0, &mut bytes).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn add_one_runs_over_many_blocks_on_worker_threads() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS).load(&dev).unwrap();
    let add_one = module.kernel("add_one").unwrap();
    let n = 1000u32; // not a multiple of the block size: the kernel checks i < n
    let buf = dev.alloc(4 * 1024, MemKind::Device).unwrap();
    let queue = dev.queue().unwrap();
    let dims = Dims::grid([16, 1, 1]).block([64, 1, 1]);
    for _ in 0..3 {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&n)]) }.unwrap();
    }
    queue.sync().unwrap();
    let words = u32s(&buf);
    assert!(words[..1000].iter().all(|&w| w == 3), "{:?}", &words[..8]);
    assert!(
        words[1000..].iter().all(|&w| w == 0),
        "threads past n wrote"
    );
    rt.shutdown().unwrap();
}

#[test]
fn sixty_four_threads_load_once_and_share_the_module() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let before = offload::host::stats();
    let setups = Arc::new(AtomicUsize::new(0));
    let counter = setups.clone();
    let program = Program::new(KERNELS).on_setup(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20)); // widen the window for a race
        Ok(())
    });
    let barrier = Barrier::new(64);
    let ids: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let m = program.load(&dev).unwrap();
                    let id = m.id();
                    // Keep the module until every thread has loaded it.
                    (id, m)
                })
            })
            .collect();
        let modules: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        modules.iter().map(|(id, _)| *id).collect()
    });
    assert!(
        ids.iter().all(|&id| id == ids[0]),
        "all 64 got the same module"
    );
    assert_eq!(setups.load(Ordering::SeqCst), 1, "setup ran once");
    assert_eq!(
        offload::host::stats().loads - before.loads,
        1,
        "the backend loaded once"
    );
    rt.shutdown().unwrap();
}

#[test]
fn different_programs_load_in_parallel() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let spans = Arc::new(Mutex::new(Vec::new()));
    let programs: Vec<Program> = (0..8)
        .map(|_| {
            let spans = spans.clone();
            Program::new(KERNELS).on_setup(move |_| {
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(100));
                spans.lock().unwrap().push((start, Instant::now()));
                Ok(())
            })
        })
        .collect();
    let barrier = Barrier::new(8);
    let started = Instant::now();
    std::thread::scope(|s| {
        for p in &programs {
            let (barrier, dev) = (&barrier, &dev);
            s.spawn(move || {
                barrier.wait();
                p.load(dev).unwrap()
            });
        }
    });
    let took = started.elapsed();
    let spans = spans.lock().unwrap();
    let latest_start = spans.iter().map(|s| s.0).max().unwrap();
    let earliest_end = spans.iter().map(|s| s.1).min().unwrap();
    println!("8 loads with 100 ms setups took {took:?}");
    assert!(
        latest_start < earliest_end,
        "all eight setups ran at the same time"
    );
    assert!(
        took < Duration::from_millis(8 * 100 / 2),
        "loads were not serialised: {took:?}"
    );
    rt.shutdown().unwrap();
}

#[test]
fn failing_setup_unloads_and_returns_callback() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let before = offload::host::stats();
    let teardowns = Arc::new(AtomicUsize::new(0));
    let t = teardowns.clone();
    let program = Program::new(KERNELS)
        .on_setup(|_| Err("device not ready".into()))
        .on_teardown(move |_| {
            t.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
    match program.load(&dev) {
        Err(Error::Callback { callback, source }) => {
            assert_eq!(callback, "on_setup");
            assert_eq!(source.to_string(), "device not ready");
        }
        other => panic!("expected Error::Callback, got {other:?}"),
    }
    let after = offload::host::stats();
    assert_eq!(after.loads - before.loads, 1);
    assert_eq!(after.unloads - before.unloads, 1, "the module was unloaded");
    assert_eq!(
        teardowns.load(Ordering::SeqCst),
        0,
        "no teardown for a setup that failed"
    );
    assert!(rt.shutdown().unwrap().was_last());
}

#[test]
fn teardown_runs_once_whichever_way_the_module_goes() {
    let _serial = common::serial();
    let count = Arc::new(AtomicUsize::new(0));
    let program = |count: &Arc<AtomicUsize>| {
        let c = count.clone();
        Program::new(KERNELS).on_teardown(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    };
    let (rt, dev) = host();
    // By unload(), with another handle still alive.
    let m = program(&count).load(&dev).unwrap();
    let other = m.clone();
    m.unload().unwrap();
    assert_eq!(count.swap(0, Ordering::SeqCst), 1);
    drop(other);
    assert_eq!(
        count.swap(0, Ordering::SeqCst),
        0,
        "not again at the last drop"
    );
    // By the last drop (a kernel keeps the module alive until then).
    let m = program(&count).load(&dev).unwrap();
    let k = m.kernel("noop").unwrap();
    drop(m);
    assert_eq!(count.load(Ordering::SeqCst), 0, "the kernel still holds it");
    drop(k);
    assert_eq!(count.swap(0, Ordering::SeqCst), 1);
    // By shutdown.
    let _m = program(&count).load(&dev).unwrap();
    rt.shutdown().unwrap();
    assert_eq!(count.swap(0, Ordering::SeqCst), 1);
    drop(_m);
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

#[test]
fn teardown_order_is_lifo_and_failing_teardowns_are_reported() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let before = offload::host::stats();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut modules = Vec::new();
    for i in 0..3 {
        let order = order.clone();
        let p = Program::new(KERNELS).on_teardown(move |_| {
            order.lock().unwrap().push(i);
            if i == 1 || i == 2 {
                Err(format!("teardown {i} failed").into())
            } else {
                Ok(())
            }
        });
        modules.push(p.load(&dev).unwrap());
    }
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    let result = rt.shutdown().map_err(Error::from);
    assert_eq!(
        *order.lock().unwrap(),
        vec![2, 1, 0],
        "newest setup tears down first"
    );
    match result {
        Err(Error::Multiple(v)) => {
            let text: Vec<String> = v.iter().map(|e| e.to_string()).collect();
            assert_eq!(v.len(), 2, "{text:?}");
            assert!(v.iter().all(|e| matches!(
                e,
                Error::Callback {
                    callback: "on_teardown",
                    ..
                }
            )));
            assert!(
                text[0].contains("teardown 2 failed"),
                "newest first: {text:?}"
            );
            assert!(text[1].contains("teardown 1 failed"), "{text:?}");
        }
        other => panic!("expected both teardown errors in Error::Multiple, got {other:?}"),
    }
    // The rest of shutdown still ran: modules unloaded, buffer freed, platform deinitialised.
    let after = offload::host::stats();
    assert_eq!(after.unloads - before.unloads, 3);
    assert_eq!(
        after.live_allocations, before.live_allocations,
        "the buffer was freed"
    );
    assert_eq!(after.deinitialised - before.deinitialised, 1);
    assert!(matches!(
        buf.read(0, &mut [0; 4]),
        Err(Error::ShutDown { .. })
    ));
}

#[test]
fn globals_and_setup_that_writes_them() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS)
        .on_setup(|m| Ok(m.write_global("g", 0, &1234u32.to_ne_bytes())?))
        .load(&dev)
        .unwrap();
    let g = module.global("g").unwrap();
    assert_eq!(g.size, 4);
    assert_ne!(g.address, 0);
    let buf = dev.alloc(4, MemKind::Device).unwrap();
    let q = dev.queue().unwrap();
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        q.launch(
            &module.kernel("read_global").unwrap(),
            Dims::grid([1, 1, 1]),
            &[Arg::buffer(&buf)],
        )
    }
    .unwrap();
    assert_eq!(u32s(&buf), vec![1234], "the kernel saw what setup wrote");
    assert!(matches!(
        module.write_global("g", 2, &[0; 4]),
        Err(Error::InvalidArgument { .. })
    ));
    match module.write_global("read_only_constant", 0, &[0; 4]) {
        Err(e @ Error::InvalidArgument { .. }) => {
            assert!(e.to_string().contains("read-only"), "{e}")
        }
        other => panic!("writing const data gave {other:?}"),
    }
    assert!(matches!(
        module.global("nothing"),
        Err(Error::SymbolNotFound { .. })
    ));
    rt.shutdown().unwrap();
}

#[test]
fn bad_launches_are_typed_errors() {
    let _serial = common::serial();
    let rt = Offload::builder().host_devices(2).start().unwrap();
    let devices = rt.devices().unwrap();
    let (dev, other) = (&devices[0], &devices[1]);
    let module = Program::new(KERNELS).load(dev).unwrap();
    let add_one = module.kernel("add_one").unwrap();
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    let foreign = other.alloc(64, MemKind::Device).unwrap();
    let q = dev.queue().unwrap();
    let one = Dims::grid([1, 1, 1]);
    let invalid = |r: offload::Result<()>, what: &str| match r {
        Err(Error::InvalidArgument { .. }) => {}
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    };
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&add_one, one, &[Arg::buffer(&buf)]) },
        "too few arguments",
    );
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe {
            q.launch(
                &add_one,
                one,
                &[Arg::buffer(&buf), Arg::scalar(&1u32), Arg::scalar(&1u32)],
            )
        },
        "too many",
    );
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&add_one, one, &[Arg::buffer(&buf), Arg::scalar(&1u64)]) },
        "wrong scalar size",
    );
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&add_one, one, &[Arg::scalar(&1u32), Arg::buffer(&buf)]) },
        "swapped kinds",
    );
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&add_one, one, &[Arg::buffer(&foreign), Arg::scalar(&1u32)]) },
        "buffer of another device",
    );
    let other_queue = other.queue().unwrap();
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { other_queue.launch(&add_one, one, &[Arg::buffer(&foreign), Arg::scalar(&1u32)]) },
        "kernel of another device",
    );
    // A missing kernel: the error lists the module's kernels.
    match module.kernel("nope") {
        Err(e @ Error::SymbolNotFound { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`nope`"), "{text}");
            assert!(text.contains("add_one") && text.contains("fill"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A function without its parameter declaration points at OFFLOAD_KERNEL.
    match module.kernel("undeclared") {
        Err(e @ Error::SymbolNotFound { .. }) => {
            let text = e.to_string();
            assert!(text.contains("offload_params_undeclared"), "{text}");
            assert!(text.contains("OFFLOAD_KERNEL(undeclared"), "{text}");
        }
        other => panic!("a kernel without a parameter declaration gave {other:?}"),
    }
    // The module unloaded under a kernel.
    let module2 = module.clone();
    module2.unload().unwrap();
    invalid(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&add_one, one, &[Arg::buffer(&buf), Arg::scalar(&1u32)]) },
        "unloaded module",
    );
    // The runtime shut down under everything.
    let fresh = Program::new(KERNELS)
        .load(dev)
        .unwrap()
        .kernel("noop")
        .unwrap();
    drop(other_queue);
    rt.shutdown().unwrap();
    assert!(matches!(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { q.launch(&fresh, one, &[]) },
        Err(Error::ShutDown { .. })
    ));
    assert!(matches!(q.sync(), Err(Error::ShutDown { .. })));
    assert!(matches!(
        Program::new(KERNELS).load(dev),
        Err(Error::ShutDown { .. })
    ));
    assert!(matches!(dev.queue(), Err(Error::ShutDown { .. })));
}

#[test]
fn corrupt_images_are_invalid_binaries() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let before = offload::host::stats();
    let mut wrong_machine = KERNELS.to_vec();
    wrong_machine[18] = 40; // EM_ARM
    let mut executable = KERNELS.to_vec();
    executable[16] = 2; // ET_EXEC
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("zero length", vec![]),
        (
            "random bytes",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("ELF magic only", b"\x7fELF".to_vec()),
        ("truncated to the header", KERNELS[..64].to_vec()),
        ("truncated in half", KERNELS[..KERNELS.len() / 2].to_vec()),
        (
            "missing the last byte",
            KERNELS[..KERNELS.len() - 1].to_vec(),
        ),
        ("wrong machine", wrong_machine),
        ("an executable", executable),
    ];
    for (what, image) in cases {
        match Program::new(&image).load(&dev) {
            Err(e @ Error::InvalidBinary { .. }) => println!("{what}: {e}"),
            other => panic!("{what}: expected InvalidBinary, got {other:?}"),
        }
    }
    assert_eq!(
        offload::host::stats().loads,
        before.loads,
        "nothing reached dlopen"
    );
    rt.shutdown().unwrap();
}

#[test]
fn an_image_loaded_after_another_runs_its_own_code() {
    // glibc matches loaded libraries by path; images loaded one after the other through
    // /proc/self/fd/N must not get the previous image's code.
    let _serial = common::serial();
    let (rt, dev) = host();
    let buf = dev.alloc(4, MemKind::Device).unwrap();
    let q = dev.queue().unwrap();
    for (image, step) in [
        (KERNELS, 1u32),
        (KERNELS_STEP2, 2),
        (KERNELS, 1),
        (KERNELS_STEP2, 2),
    ] {
        buf.fill(0, 4, 0).unwrap();
        let module = Program::new(image).load(&dev).unwrap();
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe {
            q.launch(
                &module.kernel("add_one").unwrap(),
                Dims::grid([1, 1, 1]),
                &[Arg::buffer(&buf), Arg::scalar(&1u32)],
            )
        }
        .unwrap();
        assert_eq!(u32s(&buf), vec![step]);
        module.unload().unwrap();
    }
    rt.shutdown().unwrap();
}

fn mapped_modules() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("offload-module"))
        .count()
}

/// Thread ids of this process's host-backend workers. A new thread names itself when it
/// first runs, so wait a little for it.
fn workers() -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let found: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| {
                let path = t.ok()?.path();
                let name = std::fs::read_to_string(path.join("comm")).ok()?;
                name.starts_with("offload-host")
                    .then(|| path.display().to_string())
            })
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn shutdown_unmaps_images_and_joins_workers() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS).load(&dev).unwrap();
    assert!(mapped_modules() > 0, "the image is mapped from its memfd");
    let buf = dev.alloc(4 * 4096, MemKind::Device).unwrap();
    let q = dev.queue().unwrap();
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        q.launch(
            &module.kernel("add_one").unwrap(),
            Dims::grid([64, 1, 1]).block([64, 1, 1]),
            &[Arg::buffer(&buf), Arg::scalar(&4096u32)],
        )
    }
    .unwrap();
    let started = workers();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        assert!(!started.is_empty(), "a parallel launch started workers");
    }
    drop((q, buf));
    assert!(rt.shutdown().unwrap().was_last());
    assert_eq!(
        mapped_modules(),
        0,
        "dlclose unmapped the image (and nothing is on disk)"
    );
    for worker in started {
        assert!(
            !std::path::Path::new(&worker).exists(),
            "shutdown joined worker {worker}"
        );
    }
    drop(module);
}

#[test]
fn events_measure_time_in_queue_order() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS).load(&dev).unwrap();
    let fill = module.kernel("fill").unwrap();
    let n = 1u32 << 20;
    let buf = dev.alloc(4 << 20, MemKind::Device).unwrap();
    let q = dev.queue().unwrap();
    let start = q.record().unwrap();
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        q.launch(
            &fill,
            Dims::grid([n / 256, 1, 1]).block([256, 1, 1]),
            &[Arg::buffer(&buf), Arg::scalar(&7u32), Arg::scalar(&n)],
        )
    }
    .unwrap();
    let end = q.record().unwrap();
    end.sync().unwrap();
    let took = end.elapsed_since(&start).unwrap();
    assert!(took > Duration::ZERO, "filling 4 MiB takes time");
    let other = dev.queue().unwrap();
    other.wait(&end).unwrap();
    let mut word = [0u8; 4];
    other.read(&buf, 4 * (n as usize - 1), &mut word).unwrap();
    assert_eq!(u32::from_ne_bytes(word), 7);
    rt.shutdown().unwrap();
}

mod random_images {
    use super::*;
    use proptest::prelude::*;

    fn load_result(image: &[u8]) -> offload::Result<offload::Module> {
        let rt = Offload::init().unwrap();
        let dev = rt.devices().unwrap().remove(0);
        Program::new(image).load(&dev)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Random bytes, with and without a valid-looking ELF header in front.
        #[test]
        fn random_bytes_are_invalid_binaries(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            header in 0usize..3,
        ) {
            let _serial = common::serial();
            match header {
                0 => {}
                1 => bytes.splice(0..0, b"\x7fELF".iter().copied()).for_each(drop),
                _ => bytes.splice(0..0, KERNELS[..64].iter().copied()).for_each(drop),
            }
            let invalid = matches!(load_result(&bytes), Err(Error::InvalidBinary { .. }));
            prop_assert!(invalid, "random bytes were not rejected as InvalidBinary");
        }

        /// The real image cut short anywhere.
        #[test]
        fn truncated_images_are_invalid_binaries(len in 0usize..KERNELS.len()) {
            let _serial = common::serial();
            let invalid = matches!(load_result(&KERNELS[..len]), Err(Error::InvalidBinary { .. }));
            prop_assert!(invalid, "an image cut to {} bytes was not rejected", len);
        }
    }
}
