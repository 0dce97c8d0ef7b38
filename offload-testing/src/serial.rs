//! The one lock that serialises a test binary's tests: tests of one binary run on threads
//! of one process, and those that share process-wide state (the runtime, its counters, a
//! loaded library, an MPI job) take [`serial()`] first. Each test binary is its own
//! process with its own copy of the lock, so binaries never wait for each other.

use std::sync::{Mutex, MutexGuard, PoisonError};

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds off the other tests of this test binary that also take it, until the guard is
/// dropped. A test that failed while holding it does not poison it for the others.
///
/// ```
/// let _serial = offload_testing::serial();
/// // … this test alone among those of its binary that take the lock …
/// ```
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}
