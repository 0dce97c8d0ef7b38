//! Each buffer's memory sits behind a standard `RwLock` (L7). The lifecycle holds around
//! it: a shutdown on another thread while a thread copies drains the copy in flight and
//! frees the memory after it (L3/L4); buffers move between threads; a call on a buffer from
//! inside `with_mapped` is a typed error at once, not a deadlock; and a write (a launch, a
//! free) gets the lock within 50 ms (p99) while four threads keep taking it shared. Every
//! test runs under a watchdog, since a broken lock hangs.

mod common;

use common::watchdog;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use offload::{Error, MemKind, Offload};

fn assert_nested_refused(buf: &offload::Buffer) {
    buf.with_mapped(|bytes| {
        bytes[0] = 7;
        let mut out = [0u8; 4];
        match buf.read(0, &mut out) {
            Err(Error::InvalidArgument { reason, .. }) => {
                assert!(
                    reason.contains("inside Buffer::with_mapped's closure"),
                    "{reason}"
                )
            }
            other => panic!("a read inside with_mapped gave {other:?}"),
        }
        assert!(buf.write(0, &[1]).is_err());
    })
    .unwrap();
    let mut out = [0u8; 1];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [7]);
}

#[test]
fn a_call_inside_with_mapped_on_the_same_buffer_is_refused_on_any_thread() {
    let _serial = common::serial(); // the host's allocation count is the process's
    let _dog = watchdog(Duration::from_secs(60), "nested with_mapped");
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc(16, MemKind::Host).unwrap();
    assert_nested_refused(&buf); // the allocating thread
    std::thread::scope(|s| {
        s.spawn(|| assert_nested_refused(&buf)); // another thread
    });
    assert_nested_refused(&buf);
    drop(buf);
    rt.shutdown().unwrap();
}

/// The allocating thread copies 1 MiB again and again; another thread shuts the runtime
/// down meanwhile. Every copy either completes or answers `ShutDown`, and the memory is
/// freed once the copy in flight has finished (fails if the shutdown freed memory under a
/// copy: the copy would crash or read freed pages; fails if it never drained: watchdog).
#[test]
fn a_shutdown_on_another_thread_drains_the_allocating_threads_copies() {
    let _serial = common::serial();
    let _dog = watchdog(Duration::from_secs(120), "shutdown under copies");
    let before = offload::host::stats().live_allocations;
    for _ in 0..40 {
        let rt = Offload::init().unwrap();
        let dev = rt.devices().unwrap().remove(0);
        let a = dev.alloc(1 << 20, MemKind::Host).unwrap();
        let b = dev.alloc(1 << 20, MemKind::Host).unwrap();
        a.fill(0, 1 << 20, 0x5A).unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let go = started.clone();
        let closer = std::thread::spawn(move || {
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            rt.shutdown().unwrap();
        });
        let mut copies = 0;
        loop {
            started.store(true, Ordering::Release);
            match b.copy_from(0, &a, 0, 1 << 20) {
                Ok(()) => copies += 1,
                Err(Error::ShutDown { .. }) => break,
                Err(other) => panic!("a copy during shutdown gave {other}"),
            }
        }
        closer.join().unwrap();
        assert!(copies >= 1);
        assert_eq!(offload::host::stats().live_allocations, before);
    }
}

/// Buffers made on one thread, used by others (copies and fills), then by the
/// allocating thread again: every call works and sees the others' writes.
#[test]
fn buffers_move_between_threads() {
    let _serial = common::serial();
    let _dog = watchdog(Duration::from_secs(60), "buffers between threads");
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let a = dev.alloc(64, MemKind::Host).unwrap();
    let b = dev.alloc(64, MemKind::Host).unwrap();
    a.write(0, &[3; 64]).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let (a, b) = (&a, &b);
            s.spawn(move || {
                for _ in 0..200 {
                    b.copy_from(0, a, 0, 64).unwrap();
                    a.fill(usize::from(t), 1, 3).unwrap();
                }
            });
        }
    });
    let mut out = [0u8; 64];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [3; 64]);
    b.write(0, &[9; 64]).unwrap();
    a.copy_from(0, &b, 0, 64).unwrap();
    a.read(0, &mut out).unwrap();
    assert_eq!(out, [9; 64]);
    drop((a, b));
    rt.shutdown().unwrap();
}

/// Writer fairness: four threads each hold the buffer's lock shared for about 1 ms in a
/// loop (8 MiB reads); meanwhile another thread writes 64 bytes 100 times (the exclusive
/// hold a launch, a free or a write takes). The lock is the standard library's, which on
/// Linux lets no new reader in while a writer waits: p99 of the writes' waits stays under
/// 50 ms (a reader-preferring lock let a writer wait 1.14 s behind 4 readers).
#[test]
fn a_write_gets_in_while_four_threads_keep_reading() {
    const BIG: usize = 8 << 20;
    let _serial = common::serial();
    let _dog = watchdog(Duration::from_secs(120), "writer fairness");
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc(BIG, MemKind::Host).unwrap();
    let stop = AtomicBool::new(false);
    let mut waits = Vec::new();
    let mut held = Duration::ZERO;
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (buf, stop) = (&buf, &stop);
                s.spawn(move || {
                    let mut out = vec![0u8; BIG];
                    let (mut reads, started) = (0u32, Instant::now());
                    while !stop.load(Ordering::Relaxed) {
                        buf.read(0, &mut out).unwrap();
                        reads += 1;
                    }
                    started.elapsed() / reads.max(1)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..100 {
            let asked = Instant::now();
            buf.write(0, &[1; 64]).unwrap();
            waits.push(asked.elapsed());
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, Ordering::Relaxed);
        held = readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .max()
            .unwrap();
    });
    waits.sort();
    let p99 = waits[98];
    eprintln!(
        "writer fairness: 100 writes beside 4 readers holding the lock {held:?} per read: \
         median {:?}, p99 {p99:?}, max {:?}",
        waits[50], waits[99]
    );
    assert!(p99 < Duration::from_millis(50), "p99 {p99:?}");
    drop(buf);
    rt.shutdown().unwrap();
}
