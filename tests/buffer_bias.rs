//! Each buffer's memory lock is biased to the thread that allocated it (`offload-thread`'s
//! `BiasedLock`): that thread's calls take it without atomic read-modify-writes, and the
//! first other thread revokes the bias. The lifecycle holds around it: a shutdown on
//! another thread while the allocating thread copies drains the copy in flight and frees the
//! memory after it (L3/L4); copies and fills from other threads work; a call on a buffer
//! from inside `with_mapped` on it is a typed error on either thread, not a deadlock. Every
//! test runs under a watchdog, since a broken revocation hangs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use offload::{Error, MemKind, Offload};

/// Aborts the test process with `what` if not dropped within `limit`.
struct Watchdog(Arc<AtomicBool>);

fn watchdog(limit: Duration, what: &'static str) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let until = Instant::now() + limit;
        while !flag.load(Ordering::Acquire) {
            if Instant::now() > until {
                eprintln!("watchdog: {what} did not finish within {limit:?}");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn assert_nested_refused(buf: &offload::Buffer) {
    buf.with_mapped(|bytes| {
        bytes[0] = 7;
        let mut out = [0u8; 4];
        match buf.read(0, &mut out) {
            Err(Error::InvalidArgument { reason, .. }) => {
                assert!(
                    reason.contains("already inside a call on this buffer"),
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
    assert_nested_refused(&buf); // the allocating thread: the fast path
    std::thread::scope(|s| {
        s.spawn(|| assert_nested_refused(&buf)); // another thread: the inner lock
    });
    assert_nested_refused(&buf); // the allocating thread again, bias revoked
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
