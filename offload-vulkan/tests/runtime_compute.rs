//! Programs, queues and launches through the offload runtime on Vulkan, with the
//! validation layer on: eight threads launching on their own queues at once, shutdown and
//! unload with work in flight, and 100 init → load → launch → shutdown cycles that leave
//! nothing behind. These tests read process-wide counters, so they take `serial()`.

mod common;

use common::{Validated, assert_no_validation_errors, kernels, serial, skip_or_fail, words};
use offload_core::{
    Arg, BackendKind, Dims, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Program, Ready,
    Uninit,
};
use offload_vulkan::stats;

type Runtime = Offload<Ready, NoPlatforms>;

/// Starts a runtime with only the (validated) Vulkan platform, or skips (fails in CI).
fn start(test: &str) -> Option<Runtime> {
    match Offload::<Uninit, NoPlatforms>::builder()
        .platform(PlatformEntry::with_ipc::<Validated>())
        .start()
    {
        Ok(rt) => Some(rt),
        Err(e) => skip_or_fail(test, e).map(|never| match never {}),
    }
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn assert_all_released(what: &str) {
    let s = stats();
    assert_eq!(s.live_allocations, 0, "{what}: {s:?}");
    assert_eq!(s.live_modules, 0, "{what}: {s:?}");
    assert_eq!(s.live_shader_modules, 0, "{what}: {s:?}");
    assert_eq!(s.live_pipelines, 0, "{what}: {s:?}");
    assert_eq!(s.live_queues, 0, "{what}: {s:?}");
    assert_eq!(s.live_events, 0, "{what}: {s:?}");
    assert_eq!(s.live_devices, 0, "{what}: {s:?}");
    assert_eq!(s.live_instances, 0, "{what}: {s:?}");
}

fn read_words(buf: &offload_core::Buffer) -> Vec<u32> {
    let mut out = vec![0u8; buf.len()];
    buf.read(0, &mut out).unwrap();
    words(&out)
}

#[test]
fn eight_threads_launch_on_their_own_queues_at_once() {
    let _serial = serial();
    let Some(rt) = start("eight_threads_launch_on_their_own_queues_at_once") else {
        return;
    };
    let dev = rt.devices().unwrap().remove(0);
    assert_eq!(dev.backend(), BackendKind::Vulkan);
    let program = Program::new(kernels());
    let held = program.load(&dev).unwrap();
    const THREADS: u32 = 8;
    const WORDS: u32 = 1 << 16;
    const ROUNDS: u32 = 25;
    let barrier = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (dev, program, barrier) = (&dev, &program, &barrier);
            s.spawn(move || {
                // Every thread loads the same program: one module (P2).
                let module = program.load(dev).unwrap();
                let add_one = module.kernel("add_one").unwrap();
                let fill = module.kernel("fill").unwrap();
                let queue = dev.queue().unwrap();
                let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
                barrier.wait();
                let block = [64, 32, 128, 16][t as usize % 4];
                let dims = Dims::grid([WORDS / block, 1, 1]).block([block, 1, 1]);
                // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
                unsafe {
                    queue.launch(
                        &fill,
                        dims,
                        &[Arg::buffer(&buf), Arg::scalar(&t), Arg::scalar(&WORDS)],
                    )
                }
                .unwrap();
                for _ in 0..ROUNDS {
                    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
                    unsafe {
                        queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)])
                    }
                    .unwrap();
                }
                queue.sync().unwrap();
                let got = read_words(&buf);
                assert!(got.iter().all(|&w| w == t + ROUNDS), "thread {t}");
            });
        }
    });
    assert_eq!(stats().live_modules, 1, "one module for all threads");
    drop((held, program));
    assert!(rt.shutdown().unwrap().was_last());
    assert_all_released("after eight threads");
    assert_no_validation_errors("eight_threads_launch_on_their_own_queues_at_once");
}

#[test]
fn unload_and_shutdown_with_work_in_flight_are_clean() {
    let _serial = serial();
    let Some(rt) = start("unload_and_shutdown_with_work_in_flight_are_clean") else {
        return;
    };
    let dev = rt.devices().unwrap().remove(0);
    const WORDS: u32 = 1 << 20;
    let dims = Dims::grid([WORDS / 64, 1, 1]).block([64, 1, 1]);
    let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
    buf.fill(0, WORDS as usize * 4, 0).unwrap();
    let queue = dev.queue().unwrap();

    // Unload with launches still running: it waits for them.
    let module = Program::new(kernels()).load(&dev).unwrap();
    let add_one = module.kernel("add_one").unwrap();
    for _ in 0..6 {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) }.unwrap();
    }
    let event = queue.record().unwrap();
    module.unload().unwrap();
    assert!(matches!(
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) },
        Err(Error::InvalidArgument { .. })
    ));
    drop(add_one);
    event.sync().unwrap();
    assert!(read_words(&buf).iter().all(|&w| w == 6));

    // Shutdown with launches still running: queues drain, modules unload, buffers free.
    let module = Program::new(kernels()).load(&dev).unwrap();
    let add_one = module.kernel("add_one").unwrap();
    let other = dev.alloc(WORDS as usize * 4, MemKind::Host).unwrap();
    for _ in 0..6 {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) }.unwrap();
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&other), Arg::scalar(&WORDS)]) }
            .unwrap();
    }
    let down = rt.shutdown().unwrap();
    assert!(down.was_last());
    assert!(matches!(
        buf.read(0, &mut [0; 4]),
        Err(Error::ShutDown { .. })
    ));
    drop((add_one, module, queue, buf, other, event));
    assert_all_released("after shutdown with work in flight");
    assert_no_validation_errors("unload_and_shutdown_with_work_in_flight_are_clean");
}

#[test]
fn hundred_init_load_launch_shutdown_cycles() {
    let _serial = serial();
    // Warm-up: the first cycle loads the driver's libraries and threads.
    let Some(rt) = start("hundred_init_load_launch_shutdown_cycles") else {
        return;
    };
    rt.shutdown().unwrap();
    let threads_before = threads();
    let started = std::time::Instant::now();
    const WORDS: u32 = 4096;
    let image = kernels();
    for cycle in 0..100u32 {
        let rt = start("hundred_init_load_launch_shutdown_cycles").unwrap();
        let dev = rt.devices().unwrap().remove(0);
        let add_one = Program::new(&image)
            .load(&dev)
            .unwrap()
            .kernel("add_one")
            .unwrap();
        let queue = dev.queue().unwrap();
        let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
        buf.fill(0, WORDS as usize * 4, 0).unwrap();
        let dims = Dims::grid([WORDS / 64, 1, 1]).block([64, 1, 1]);
        for _ in 0..=cycle % 3 {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) }
                .unwrap();
        }
        let got = read_words(&buf);
        assert!(got.iter().all(|&w| w == cycle % 3 + 1), "cycle {cycle}");
        // Half the cycles shut down with the launches of the last round still in flight.
        if cycle % 2 == 0 {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) }
                .unwrap();
        }
        assert!(rt.shutdown().unwrap().was_last(), "cycle {cycle}");
        drop((add_one, queue, buf));
        assert_all_released("after a cycle");
    }
    let elapsed = started.elapsed();
    println!(
        "100 init/load/launch/shutdown cycles in {elapsed:?} ({:?} each); threads {threads_before} -> {}",
        elapsed / 100,
        threads()
    );
    assert!(threads() <= threads_before, "cycles leave no thread behind");
    assert_no_validation_errors("hundred_init_load_launch_shutdown_cycles");
}
