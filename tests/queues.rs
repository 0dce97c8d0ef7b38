//! Asynchronous queues on the host backend (Q1): enqueues return before the work runs,
//! events and `is_idle` tell without waiting, host functions run in order and their
//! panics are reported, freeing a buffer defers behind the work that uses it, and shutdown
//! drains (L4). The ordering properties themselves are in the conformance suite, on every
//! backend; these are the host's asynchronous behaviour, which a synchronous queue fails.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// A host function that blocks its queue until the returned sender is dropped or sends
/// (at most 10 s, so a broken queue fails the test instead of hanging it).
fn gate(queue: &offload::Queue) -> mpsc::Sender<()> {
    let (open, gate) = mpsc::channel::<()>();
    queue
        .enqueue_host_fn(move || {
            let _ = gate.recv_timeout(Duration::from_secs(10));
        })
        .unwrap();
    open
}

#[test]
fn launch_returns_before_the_work_runs_and_events_complete_later() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let module = Program::new(KERNELS).load(&dev).unwrap();
    let add_one = module.kernel("add_one").unwrap();
    let buf = dev.alloc(4 * 64, MemKind::Device).unwrap();
    let queue = dev.queue().unwrap();
    let open = gate(&queue);
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        queue.launch(
            &add_one,
            Dims::grid([1, 1, 1]).block([64, 1, 1]),
            &[Arg::buffer(&buf), Arg::scalar(&64u32)],
        )
    }
    .unwrap();
    let event = queue.record().unwrap();
    assert_eq!(event.queue_id(), queue.id());
    assert!(
        !queue.is_idle().unwrap(),
        "the launch waits behind the gate"
    );
    assert!(
        !event.is_complete().unwrap(),
        "the event waits behind the launch"
    );
    open.send(()).unwrap();
    event.sync().unwrap();
    assert!(event.is_complete().unwrap());
    assert!(queue.is_idle().unwrap());
    let mut out = [0u8; 4];
    buf.read(0, &mut out).unwrap();
    assert_eq!(u32::from_ne_bytes(out), 1);
    drop((add_one, module, queue, event, buf));
    rt.shutdown().unwrap();
}

#[test]
fn a_host_read_waits_for_the_queued_write_it_follows() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let buf = dev.alloc(16, MemKind::Device).unwrap();
    let queue = dev.queue().unwrap();
    let open = gate(&queue);
    queue.write(&buf, 0, &[7; 16]).unwrap();
    // Release the gate a little later, from another thread: the read below must wait.
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        open.send(()).unwrap();
    });
    let mut out = [0u8; 16];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [7; 16], "the host read saw the queued write");
    opener.join().unwrap();
    drop((queue, buf));
    rt.shutdown().unwrap();
}

#[test]
fn host_functions_run_in_order_and_a_panic_is_reported_at_the_next_sync() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let queue = dev.queue().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..100 {
        let log = log.clone();
        queue
            .enqueue_host_fn(move || log.lock().unwrap().push(i))
            .unwrap();
    }
    queue.enqueue_host_fn(|| panic!("on purpose")).unwrap();
    let after = Arc::new(AtomicBool::new(false));
    let flag = after.clone();
    queue
        .enqueue_host_fn(move || flag.store(true, Ordering::SeqCst))
        .unwrap();
    match queue.sync() {
        Err(Error::Callback { callback, source }) => {
            assert_eq!(callback, "Queue::enqueue_host_fn");
            assert!(source.to_string().contains("on purpose"), "{source}");
        }
        other => panic!("expected the panic as Error::Callback, got {other:?}"),
    }
    assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
    assert!(
        after.load(Ordering::SeqCst),
        "work after a panic still runs"
    );
    queue.sync().unwrap(); // reported once
    drop(queue);
    rt.shutdown().unwrap();
}

#[test]
fn a_host_function_that_waits_for_its_own_queue_gets_an_error_not_a_deadlock() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let queue = Arc::new(dev.queue().unwrap());
    let (tx, rx) = mpsc::channel();
    let q = queue.clone();
    queue
        .enqueue_host_fn(move || {
            q.enqueue_host_fn(|| {}).unwrap();
            tx.send(q.sync()).unwrap();
        })
        .unwrap();
    let inner = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no deadlock");
    assert!(
        matches!(inner, Err(Error::InvalidArgument { .. })),
        "{inner:?}"
    );
    queue.sync().unwrap();
    drop(queue);
    rt.shutdown().unwrap();
}

#[test]
fn a_host_function_may_drop_the_last_handle_of_its_queue() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let slot = Arc::new(Mutex::new(Some(dev.queue().unwrap())));
    let ran = Arc::new(AtomicBool::new(false));
    {
        let guard = slot.lock().unwrap();
        let queue = guard.as_ref().unwrap();
        let (slot, ran) = (slot.clone(), ran.clone());
        queue
            .enqueue_host_fn(move || {
                drop(slot.lock().unwrap().take());
                ran.store(true, Ordering::SeqCst);
            })
            .unwrap();
    }
    for _ in 0..1000 {
        if ran.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        ran.load(Ordering::SeqCst),
        "the host function ran to its end"
    );
    rt.shutdown().unwrap();
}

#[test]
fn freeing_a_buffer_defers_the_release_behind_queued_work() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let queue = dev.queue().unwrap();
    let buf = dev.alloc(4096, MemKind::Device).unwrap();
    let before = offload::host::stats().live_allocations;
    let open = gate(&queue);
    queue.fill(&buf, 0, 4096, &[1, 2, 3, 4]).unwrap();
    buf.free().unwrap(); // returns at once; the fill still holds the memory
    assert_eq!(
        offload::host::stats().live_allocations,
        before,
        "the memory is released only after the queued fill"
    );
    open.send(()).unwrap();
    queue.sync().unwrap();
    assert_eq!(offload::host::stats().live_allocations, before - 1);
    drop(queue);
    rt.shutdown().unwrap();
}

#[test]
fn shutdown_drains_queued_work() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let queue = dev.queue().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    queue
        .enqueue_host_fn(move || {
            std::thread::sleep(Duration::from_millis(50));
            flag.store(true, Ordering::SeqCst);
        })
        .unwrap();
    // The queue handle outlives the runtime: shutdown itself must drain it.
    assert!(rt.shutdown().unwrap().was_last());
    assert!(
        done.load(Ordering::SeqCst),
        "L4: shutdown ran the queued host function"
    );
    drop(queue);
}

/// Backpressure: a producer that never syncs cannot grow a host queue without
/// bound; it waits at `MAX_QUEUED` unfinished commands, and everything still runs in order.
#[test]
fn a_producer_that_never_syncs_is_held_at_the_queue_depth() {
    let _serial = common::serial();
    let (rt, dev) = host();
    let queue = dev.queue().unwrap();
    let max = offload::host::MAX_QUEUED;
    let ran = Arc::new(Mutex::new(Vec::new()));
    for i in 0..3 * max {
        let ran = ran.clone();
        queue
            .enqueue_host_fn(move || {
                // Slower than enqueueing, so without backpressure the backlog would grow.
                std::thread::sleep(std::time::Duration::from_micros(20));
                ran.lock().unwrap().push(i);
            })
            .unwrap();
    }
    let most = offload::host::stats().most_queued;
    assert!(
        most <= max + 1,
        "a host queue held {most} unfinished commands (depth {max})"
    );
    assert!(
        most >= max / 2,
        "the producer never got ahead ({most}): the test shows nothing"
    );
    queue.sync().unwrap();
    assert_eq!(*ran.lock().unwrap(), (0..3 * max).collect::<Vec<_>>());
    drop(queue);
    rt.shutdown().unwrap();
}
