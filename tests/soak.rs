//! Soak (issue 13): long runs that must leave the process as they found it. Off unless
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
