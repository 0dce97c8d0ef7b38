//! The synchronisation primitives the lifecycle ([`super::lifecycle`]) and the generation
//! ([`super::generation`]) are written with, named in one place.
//!
//! In the library they are std's (and the poison-tolerant helpers of `crate::sync`). The
//! model check (`offload-core/tests/model.rs`) compiles those two files, unchanged, into a
//! test crate whose `runtime::sync` gives the same names to `shuttle`'s primitives, so
//! its scheduler controls every lock, atomic and wait of the lifecycle. No cargo feature
//! switches this: the library always uses std.

pub(crate) use std::sync::MutexGuard;
use std::sync::PoisonError;
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
pub(crate) use std::sync::{Condvar, Mutex, RwLock};
pub(crate) use std::thread_local;

pub(crate) use crate::sync::{lock, read, write};

/// Waits on `condvar`, releasing `guard` meanwhile; poison-tolerant like [`lock`].
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Declares the lifecycle's process-wide statics. In the library they are plain
/// const-initialised statics (L2: nothing runs to create them, nothing to destroy them);
/// the model check declares them per execution instead, so each of its runs starts from
/// the state a freshly loaded library has.
macro_rules! statics {
    ($($(#[$meta:meta])* static $name:ident: $ty:ty = $init:expr;)*) => {
        $($(#[$meta])* static $name: $ty = $init;)*
    };
}
pub(crate) use statics;

/// Lets another thread run while this one waits for it (teardown waiting for the loads in
/// flight): a short sleep.
pub(crate) fn backoff() {
    std::thread::sleep(std::time::Duration::from_micros(100));
}

/// A helper thread: a plain pthread (`offload-thread`), so starting one never pins a
/// library that is `dlclose`d later (L2).
pub(crate) type JoinHandle = offload_thread::Thread;

/// Starts one of the runtime's helper threads: a teardown that cannot run on the thread
/// that decided it (L6). The lifecycle joins it (`lifecycle::reap`), so none outlives the
/// runtime or a `dlclose` (L2).
pub(crate) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle> {
    offload_thread::spawn(name, f)
}

/// Waits for a helper thread to end (one that panicked has nothing more to report).
pub(crate) fn join(helper: JoinHandle) {
    helper.join();
}

/// Whether a helper thread has finished (so joining it returns at once).
pub(crate) fn finished(helper: &JoinHandle) -> bool {
    helper.is_finished()
}
