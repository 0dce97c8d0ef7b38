//! Soak: long runs that must leave the process as they found it. Off unless
//! `OFFLOAD_SOAK` is set (they take minutes); `scripts/soak.sh` runs them all, in release:
//!
//! ```text
//! OFFLOAD_SOAK=1 cargo test --release --test soak -- --nocapture --test-threads=1
//! ```
//!
//! Each measures the resident set (`VmRSS` in `/proc/self/status`) and the open descriptors
//! (`/proc/self/fd`) after a warm-up and at the end: at most 1 MiB of growth and no new fd.

mod common;

use std::time::{Duration, Instant};

use offload::{BackendKind, Dims, MemKind, Offload, Program};

fn soak(name: &str) -> Option<u64> {
    match std::env::var("OFFLOAD_SOAK") {
        Ok(v) if !v.is_empty() && v != "0" => Some(v.parse().unwrap_or(1)),
        _ => {
            println!("{name}: skipped (set OFFLOAD_SOAK=1 to run the soak)");
            None
        }
    }
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

struct Usage {
    rss: u64,
    fds: usize,
    at: Instant,
}

fn usage() -> Usage {
    Usage {
        rss: rss_bytes(),
        fds: fds(),
        at: Instant::now(),
    }
}

fn report(name: &str, cycles: u64, start: &Usage) {
    let end = usage();
    let growth = end.rss as i64 - start.rss as i64;
    println!(
        "{name}: {cycles} cycles in {:.1} s; RSS {} KiB -> {} KiB ({:+} KiB); fds {} -> {}",
        (end.at - start.at).as_secs_f64(),
        start.rss / 1024,
        end.rss / 1024,
        growth / 1024,
        start.fds,
        end.fds
    );
    assert!(growth <= 1 << 20, "{name}: RSS grew by {growth} bytes");
    assert!(
        end.fds <= start.fds,
        "{name}: {} fds more",
        end.fds - start.fds
    );
}

/// One generation's worth of work: init, allocate, copy, load, launch, sync, shut down.
fn cycle() {
    let rt = Offload::builder()
        .backends([BackendKind::Host])
        .start()
        .unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let buf = dev.alloc_zeros::<u32>(1024).unwrap();
    let add_one = Program::new(offload::host::fixtures::KERNELS)
        .load(&dev)
        .unwrap()
        .kernel("add_one")
        .unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: add_one adds 1 to the first n u32s of its buffer, which holds 1024.
    unsafe {
        queue.launch(
            &add_one,
            Dims::for_num_elems(1024),
            &offload::args![&buf, 1024u32],
        )
    }
    .unwrap();
    queue.sync().unwrap();
    assert_eq!(buf.to_vec().unwrap()[1023], 1);
    drop((buf, add_one, queue, dev));
    assert!(rt.shutdown().unwrap().was_last());
}

#[test]
fn init_work_shutdown_100k_cycles() {
    let _serial = common::serial();
    let Some(scale) = soak("init_work_shutdown_100k_cycles") else {
        return;
    };
    for _ in 0..1000 {
        cycle();
    }
    let start = usage();
    let cycles = 100_000 * scale;
    for _ in 0..cycles {
        cycle();
    }
    report("init/work/shutdown", cycles, &start);
}

#[test]
fn ipc_alloc_send_free_10k_cycles() {
    let _serial = common::serial();
    let Some(scale) = soak("ipc_alloc_send_free_10k_cycles") else {
        return;
    };
    let rt = Offload::builder()
        .backends([BackendKind::Host])
        .start()
        .unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let (a, b) = (rt.ipc_endpoint().unwrap(), rt.ipc_endpoint().unwrap());
    let peer = a.connect(b.name()).unwrap();
    let one = |i: u64| {
        let buf = dev.alloc_exportable(4096, MemKind::Device).unwrap();
        buf.write(0, &i.to_ne_bytes()).unwrap();
        a.send(peer, &buf, 0, 64, i).unwrap();
        let got = b.recv().unwrap();
        let mut word = [0u8; 8];
        got.buffer().read(0, &mut word).unwrap();
        assert_eq!(u64::from_ne_bytes(word), i);
        drop(got);
        a.wait_answered(peer, Duration::from_secs(5)).unwrap();
        buf.free().unwrap(); // peers unmap first (I3)
    };
    for i in 0..100 {
        one(i);
    }
    let start = usage();
    let cycles = 10_000 * scale;
    for i in 0..cycles {
        one(i);
    }
    report("ipc alloc/send/free", cycles, &start);
    drop((a, b, dev));
    rt.shutdown().unwrap();
}

/// What each load thread is doing, for the watchdog's report.
struct Progress {
    /// Milliseconds since the start at the thread's last finished operation.
    at_ms: std::sync::atomic::AtomicU64,
    /// The operation it is in (an index into `OPS`).
    op: std::sync::atomic::AtomicUsize,
    ops_done: std::sync::atomic::AtomicU64,
}

const OPS: [&str; 8] = [
    "alloc+write+read",
    "launch+sync",
    "load+unload",
    "queue write+fill+copy",
    "event record+wait",
    "shared buffer launch",
    "host fn",
    "idle",
];

/// 64 threads × random operations for 60 s on the host device and (with the `vulkan`
/// feature and a device) lavapipe, sharing a program and buffers; a watchdog fails the run
/// if any thread makes no progress for 30 s, printing what every thread was doing.
#[test]
fn sixty_four_threads_of_random_operations_for_a_minute() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    let _serial = common::serial();
    let Some(scale) = soak("sixty_four_threads_of_random_operations_for_a_minute") else {
        return;
    };
    let rt = Offload::init().unwrap();
    let mut devices = vec![rt.device(BackendKind::Host).unwrap()];
    if let Ok(vk) = rt.device(BackendKind::Vulkan) {
        devices.push(vk);
    }
    let image = |d: &offload::Device| -> Vec<u8> {
        match d.backend() {
            BackendKind::Host => offload::host::fixtures::KERNELS.to_vec(),
            #[cfg(feature = "vulkan")]
            BackendKind::Vulkan => offload::vulkan::fixtures::KERNELS.to_vec(),
            _ => unreachable!("only host and vulkan devices are used"),
        }
    };
    let shared: Vec<(offload::Device, offload::Program, offload::TypedBuffer<u32>)> = devices
        .iter()
        .map(|d| {
            let p = Program::new(image(d));
            (d.clone(), p, d.alloc_zeros::<u32>(1024).unwrap())
        })
        .collect();
    let start = Instant::now();
    let run_for = Duration::from_secs(60 * scale);
    let progress: Vec<Progress> = (0..64)
        .map(|_| Progress {
            at_ms: AtomicU64::new(0),
            op: AtomicUsize::new(7),
            ops_done: AtomicU64::new(0),
        })
        .collect();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // The watchdog.
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(500));
                let now = start.elapsed().as_millis() as u64;
                let stuck: Vec<usize> = (0..64)
                    .filter(|&t| {
                        now.saturating_sub(progress[t].at_ms.load(Ordering::SeqCst)) > 30_000
                    })
                    .collect();
                if !stuck.is_empty() {
                    for (t, p) in progress.iter().enumerate() {
                        eprintln!(
                            "thread {t}: in {} for {} ms, {} ops done",
                            OPS[p.op.load(Ordering::SeqCst)],
                            now - p.at_ms.load(Ordering::SeqCst),
                            p.ops_done.load(Ordering::SeqCst)
                        );
                    }
                    eprintln!("watchdog: threads {stuck:?} made no progress for 30 s: a deadlock");
                    std::process::exit(101);
                }
            }
        });
        let workers: Vec<_> = (0..64u64)
            .map(|t| {
                let (shared, progress, start) = (&shared, &progress[t as usize], start);
                s.spawn(move || {
                    let mut rng = common::Rng::new(t + 1);
                    while start.elapsed() < run_for {
                        let (dev, program, common_buf) = &shared[(t as usize) % shared.len()];
                        let op = rng.below(7) as usize;
                        progress.op.store(op, Ordering::SeqCst);
                        let dims = offload::Dims::for_num_elems(256);
                        match op {
                            0 => {
                                let b = dev.alloc_zeros::<u32>(256).unwrap();
                                b.write(0, &[t as u32; 16]).unwrap();
                                assert_eq!(b.to_vec().unwrap()[..16], [t as u32; 16]);
                            }
                            1 => {
                                let b = dev.alloc_zeros::<u32>(256).unwrap();
                                let k = program.load(dev).unwrap().kernel("add_one").unwrap();
                                let q = dev.queue().unwrap();
                                // SAFETY: add_one adds 1 to the first 256 u32s of b (256).
                                unsafe { q.launch(&k, dims, &offload::args![&b, 256u32]) }.unwrap();
                                q.sync().unwrap();
                                assert_eq!(b.to_vec().unwrap()[255], 1);
                            }
                            2 => {
                                let m = Program::new(image(dev)).load(dev).unwrap();
                                m.kernel("noop").unwrap();
                                let _ = m.unload();
                            }
                            3 => {
                                let (a, b) = (
                                    dev.alloc(1024, MemKind::Device).unwrap(),
                                    dev.alloc(1024, MemKind::Device).unwrap(),
                                );
                                let q = dev.queue().unwrap();
                                q.write(&a, 0, &[1; 64]).unwrap();
                                q.fill(&a, 64, 64, &[2; 4]).unwrap();
                                q.copy(&a, 0, &b, 0, 128).unwrap();
                                let mut out = [0u8; 128];
                                q.read(&b, 0, &mut out).unwrap();
                                assert_eq!(out[..64], [1; 64]);
                            }
                            4 => {
                                let (q1, q2) = (dev.queue().unwrap(), dev.queue().unwrap());
                                let e = q1.record().unwrap();
                                q2.wait(&e).unwrap();
                                q2.sync().unwrap();
                                e.sync().unwrap();
                            }
                            5 => {
                                let k = program.load(dev).unwrap().kernel("add_one").unwrap();
                                let q = dev.queue().unwrap();
                                // SAFETY: add_one touches the first 1024 u32s of the shared
                                // buffer, which holds 1024; concurrent launches on it only
                                // race on values, which the test does not check.
                                unsafe { q.launch(&k, dims, &offload::args![common_buf, 1024u32]) }
                                    .unwrap();
                                q.sync().unwrap();
                            }
                            _ => {
                                let q = dev.queue().unwrap();
                                let hits = Arc::new(AtomicU64::new(0));
                                let h = hits.clone();
                                q.enqueue_host_fn(move || {
                                    h.fetch_add(1, Ordering::SeqCst);
                                })
                                .unwrap();
                                q.sync().unwrap();
                                assert_eq!(hits.load(Ordering::SeqCst), 1);
                            }
                        }
                        progress.op.store(7, Ordering::SeqCst);
                        progress.ops_done.fetch_add(1, Ordering::SeqCst);
                        progress
                            .at_ms
                            .store(start.elapsed().as_millis() as u64, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    let total: u64 = progress
        .iter()
        .map(|p| p.ops_done.load(Ordering::SeqCst))
        .sum();
    println!(
        "64 threads on {} device(s): {total} random operations in {:.0} s, no deadlock",
        shared.len(),
        start.elapsed().as_secs_f64()
    );
    drop(shared);
    rt.shutdown().unwrap();
}
