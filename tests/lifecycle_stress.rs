//! L1: 16 threads × 1,000 iterations of init → alloc → write/read → shutdown, interleaved
//! at random. No deadlock, no error, and the host backend opened and deinitialised exactly
//! once per 0→1 / 1→0 transition.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use offload::{BackendKind, MemKind, Offload};

const THREADS: usize = 16;
const ITERATIONS: usize = 1_000;

#[test]
fn sixteen_threads_interleave_init_work_shutdown() {
    let _serial = common::serial();
    let before = offload::host::stats();
    let generations = Arc::new(Mutex::new(HashSet::new()));
    let barrier = Arc::new(Barrier::new(THREADS));
    let started = Instant::now();

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let generations = generations.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut rng = common::Rng::new(t as u64 + 1);
                let mut lasts = 0usize;
                barrier.wait();
                for i in 0..ITERATIONS {
                    let rt = Offload::init().expect("init");
                    generations.lock().unwrap().insert(rt.generation());
                    let dev = rt
                        .devices()
                        .expect("devices")
                        .into_iter()
                        .find(|d| d.backend() == BackendKind::Host)
                        .expect("a host device");
                    let size = 1 + rng.below(4096) as usize;
                    let buf = dev.alloc(size, MemKind::Device).expect("alloc");
                    let pattern: Vec<u8> = (0..size).map(|k| (k + i + t) as u8).collect();
                    buf.write(0, &pattern).expect("write");
                    match rng.below(4) {
                        0 => std::thread::yield_now(),
                        1 => std::thread::sleep(Duration::from_micros(rng.below(50))),
                        _ => {}
                    }
                    let mut out = vec![0u8; size];
                    buf.read(0, &mut out).expect("read");
                    assert_eq!(out, pattern, "thread {t} iteration {i}");
                    // Free explicitly half the time, by drop the other half.
                    if rng.below(2) == 0 {
                        buf.free().expect("free");
                    } else {
                        drop(buf);
                    }
                    if rt.shutdown().expect("shutdown").was_last() {
                        lasts += 1;
                    }
                    // Time outside the runtime lets the count reach zero now and then, so
                    // the run crosses many 0→1 and 1→0 transitions, not just one.
                    if rng.below(2) == 0 {
                        std::thread::sleep(Duration::from_micros(rng.below(200)));
                    }
                }
                lasts
            })
        })
        .collect();

    let lasts: usize = workers
        .into_iter()
        .map(|w| w.join().expect("worker panicked"))
        .sum();
    let after = offload::host::stats();
    let generations = generations.lock().unwrap().len();
    let opened = after.opened - before.opened;
    let deinitialised = after.deinitialised - before.deinitialised;
    println!(
        "{} iterations in {:?}: {generations} generations, {opened} opens, {deinitialised} deinits",
        THREADS * ITERATIONS,
        started.elapsed()
    );
    assert!(generations > 1, "the run should cross several transitions");
    assert_eq!(opened, generations, "one open per 0→1 transition");
    assert_eq!(deinitialised, generations, "one deinit per 1→0 transition");
    assert_eq!(lasts, generations, "one last shutdown per generation");
    assert_eq!(
        after.live_allocations, before.live_allocations,
        "nothing leaked"
    );
    assert!(offload::take_unreported_errors().is_empty());
}

#[test]
fn concurrent_first_inits_share_one_generation() {
    let _serial = common::serial();
    let before = offload::host::stats();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let rt = Offload::init().expect("init");
                // Concurrent first uses open the host platform once.
                rt.device(BackendKind::Host).expect("host device");
                rt
            })
        })
        .collect();
    let runtimes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ids: HashSet<u64> = runtimes.iter().map(|r| r.generation()).collect();
    assert_eq!(
        ids.len(),
        1,
        "concurrent callers waited for one initialisation"
    );
    assert_eq!(offload::host::stats().opened - before.opened, 1);
    let lasts = runtimes
        .into_iter()
        .map(|r| r.shutdown().unwrap().was_last())
        .filter(|&l| l)
        .count();
    assert_eq!(lasts, 1);
    assert_eq!(
        offload::host::stats().deinitialised - before.deinitialised,
        1
    );
}

#[test]
fn dropping_the_last_reference_shuts_down_like_shutdown() {
    let _serial = common::serial();
    let before = offload::host::stats();
    let rt = Offload::init().unwrap();
    rt.device(BackendKind::Host).unwrap();
    let other = rt.clone();
    drop(rt);
    assert_eq!(
        offload::host::stats().deinitialised,
        before.deinitialised,
        "a reference remains"
    );
    drop(other);
    assert_eq!(
        offload::host::stats().deinitialised,
        before.deinitialised + 1
    );
    assert!(offload::take_unreported_errors().is_empty());
}
