//! L8: every error is delivered exactly once. A host function's panic goes to its queue's
//! next `sync`; if nobody syncs the queue, to the queue's drop and then the runtime's next
//! `shutdown` (in its `ShutdownError`); if the runtime ends by its last reference's drop, to
//! `take_unreported_errors()`. Before, a panic nobody synced vanished at shutdown.

mod common;

use std::time::Duration;

use offload::{BackendKind, Error, Offload, Queue};

fn panics_in_a_host_function(queue: &Queue) {
    queue
        .enqueue_host_fn(|| panic!("failed on purpose"))
        .unwrap();
    // Let it run: nothing else waits for it.
    std::thread::sleep(Duration::from_millis(50));
}

/// Whether `e` is (or holds) the host function's `Callback` error.
fn is_the_panic(e: &Error) -> bool {
    e.iter()
        .any(|e| matches!(e, Error::Callback { .. }) && e.to_string().contains("failed on purpose"))
}

#[test]
fn a_panic_nobody_synced_comes_back_from_the_shutdown() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let queue = rt.device(BackendKind::Host).unwrap().queue().unwrap();
    panics_in_a_host_function(&queue);
    let error = rt.shutdown().unwrap_err();
    assert!(is_the_panic(error.error()), "{}", error.error());
    // Delivered once: the queue's handle now answers ShutDown, not the panic again.
    assert!(matches!(queue.sync(), Err(Error::ShutDown { .. })));
    assert!(offload::take_unreported_errors().is_empty());
}

#[test]
fn a_panic_of_a_dropped_queue_comes_back_from_the_next_shutdown() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let queue = rt.device(BackendKind::Host).unwrap().queue().unwrap();
    panics_in_a_host_function(&queue);
    drop(queue);
    let error = rt.shutdown().unwrap_err();
    assert!(is_the_panic(error.error()), "{}", error.error());
}

#[test]
fn a_panic_of_an_implicit_shutdown_goes_to_take_unreported_errors() {
    let _serial = common::serial();
    let _ = offload::take_unreported_errors();
    let rt = Offload::init().unwrap();
    let queue = rt.device(BackendKind::Host).unwrap().queue().unwrap();
    panics_in_a_host_function(&queue);
    drop(queue);
    drop(rt); // the last reference: an implicit shutdown
    let unreported = offload::take_unreported_errors();
    assert!(
        unreported.iter().any(is_the_panic),
        "take_unreported_errors gave {unreported:?}"
    );
    assert!(offload::take_unreported_errors().is_empty(), "taken once");
}

#[test]
fn a_synced_panic_is_delivered_once() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let queue = rt.device(BackendKind::Host).unwrap().queue().unwrap();
    panics_in_a_host_function(&queue);
    assert!(is_the_panic(&queue.sync().unwrap_err()));
    queue.sync().unwrap();
    drop(queue);
    rt.shutdown().unwrap();
}
