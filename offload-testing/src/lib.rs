//! # offload-testing
//!
//! The test machinery every backend's tests share, kept out of the product crates (not
//! published; a dev-dependency only):
//!
//! - [`conformance`]: the backend-independent conformance suite — fixed tests of every
//!   call's contract and a proptest state machine of random operation sequences on
//!   several threads — that every backend runs against its own fixtures.
//! - [`faults`]: fault injection over the `hal` traits (one backend error at every call
//!   site, panics, slow calls) and the workloads every backend's fault-mode test runs.
//! - [`fake`]: the fake-driver harness of the stream-based and Level Zero backends: fake
//!   drivers built from C with the system compiler, cases run in child processes, and the
//!   probe and real-driver cycles the GPU kit reuses.
//! - [`child`]: the one child-process runner of the workspace's tests: a test of the same
//!   binary (or any program) in a child under a watchdog, or spoken to line by line.
//! - [`watchdog()`]: the in-process watchdog a test that could hang holds.
//! - [`serial()`]: the lock that serialises the tests of one test binary that share
//!   process-wide state.
//!
//! Test support: a failed check panics, which is what a test harness reports.
//!
//! ```
//! use offload_core::reference::{self, Only};
//! use offload_testing::conformance::{self, Fixtures, SuiteConfig};
//! let fixtures = Fixtures { image: reference::fixture_image() };
//! conformance::run::<Only>(&fixtures, SuiteConfig { cases: 2, max_threads: 2 });
//! ```
#![warn(missing_docs)]

pub mod child;
pub mod conformance;
pub mod fake;
pub mod faults;
mod serial;
mod watchdog;

pub use serial::serial;
pub use watchdog::{Watchdog, watchdog};

/// Locks `m`, taking over a lock poisoned by a failed check on another thread: the check
/// already reported the failure.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
