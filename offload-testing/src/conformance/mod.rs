//! The backend-independent conformance suite.
//!
//! Every backend runs the same checks of the contract in docs/contract.md (L1–L4, L6, P1–P4) on its own
//! devices, with a few lines:
//!
//! ```no_run
//! use offload_testing::conformance::{self, Fixtures, SuiteConfig};
//! use offload_core::reference;
//!
//! // In a test of its own binary (see "One at a time" below):
//! conformance::run::<reference::Only>(
//!     &Fixtures { image: reference::fixture_image() },
//!     SuiteConfig::default(),
//! );
//! ```
//!
//! [`run`] first runs fixed lifecycle tests (each a named step; the first failure panics
//! with the step's name and what went wrong), then a proptest state machine:
//!
//! - **Fixed tests.** 100 init/shutdown cycles, each a fresh generation; concurrent `init`
//!   from several threads shares one generation and exactly one `shutdown` is the last (L1);
//!   the fixture kernels' parameters and results; every handle of generation N answers
//!   `Error::ShutDown` in generation N+1 and dropping it is harmless (L3); wrong launch
//!   arguments (count, kind, scalar size, another device) are `InvalidArgument` and change
//!   nothing; an unknown kernel is `SymbolNotFound`; an empty image, random bytes (proptest)
//!   and the fixture with its first bytes flipped are `InvalidBinary` (P4); out-of-range
//!   copies and a zero-size allocation are `InvalidArgument`, an impossible one `OutOfMemory`
//!   (or `InvalidArgument`); a kernel of an unloaded module is `InvalidArgument` on launch;
//!   a failing setup is `Error::Callback` and the load can be retried; teardown runs exactly
//!   once, while the module is still loaded, whether by `unload()`, the last drop or
//!   shutdown, newest module first at shutdown; a failing teardown at shutdown is returned
//!   and the rest of the shutdown still ran; 8 threads loading one program at once get one
//!   module whose setup ran once (P2, P3); and L3 by exhaustion
//!   ([`after_shutdown`]): every public method of every handle type, called after the last
//!   shutdown and again with the next generation live, answers as its table says.
//! - **State machine.** Each case runs 1 to [`SuiteConfig::max_threads`] real threads at
//!   once, each executing its own random list of operations (init, shutdown, alloc —
//!   exportable or not —, free, write, read, load, unload, launch of `add_one` / `fill` /
//!   `noop`, sync, and IPC: export + import of a range, or a send of a range from one of
//!   the thread's endpoints to the other, where the thread reads the view, checks it
//!   against the model and writes through it) against its own model: the bytes of every buffer it allocated and the modules it holds. While a thread
//!   holds an `Offload<Ready>`, every operation on the handles it made under it must succeed
//!   with the model's result, and out-of-range operations must be `InvalidArgument` and change
//!   nothing. Threads load one shared program (so modules are shared across threads; P2 is
//!   checked whenever two threads of one live generation hold it at once) and one private
//!   program each (which they also unload explicitly). After a thread's shutdown its old
//!   handles may answer `Error::ShutDown` or still work (other threads may hold the runtime):
//!   any other error fails, and a read that works must still match the model. Every buffer
//!   is read back whole and compared with the model before it is freed and before most
//!   shutdowns (always before a thread's last one). Every setup and teardown callback is
//!   recorded: each module set up must be torn down exactly once, after its setup, and both
//!   must see the module loaded. At the end of each case every thread has shut down, so
//!   `init()` must work and its `shutdown()` must be the last. A failure is shrunk by
//!   proptest and reported with the minimal list of operations per thread.
//!
//! The suite never frees a buffer or unloads a module while its own launches may still be
//! running (it syncs first), but it does shut down with work in flight (L4 drains queues).
//!
//! # Fixtures
//!
//! A backend provides one image ([`Fixtures::image`]) in its own format with three kernels,
//! where thread `i` is `block_id.x * block.x + thread.x` (the suite launches grids of 1–4
//! blocks of 1–64 threads in x only):
//!
//! - `add_one(buf: u32[], n: u32)`: `buf[i] += 1` (wrapping) for `i < n`;
//! - `fill(buf: u32[], value: u32, n: u32)`: `buf[i] = value` for `i < n`;
//! - `noop()`: does nothing.
//!
//! Kernels never see an `n` larger than their buffer holds. The reference backend's
//! [`offload_core::reference::fixture_image`] is such an image.
//!
//! # One at a time
//!
//! The runtime is process-global. [`run`] needs it to itself: nothing else in the same test
//! binary may use offload while it runs (put it in a test binary of its own, or in the only
//! test of its binary that touches offload). It checks this at the start and fails with a
//! clear message if something else holds the runtime. `P` should open only the backend
//! under test: the suite uses the first device of the runtime.
//!
//! # Cases
//!
//! [`SuiteConfig::cases`] state-machine cases run (default 256); the environment variable
//! `OFFLOAD_CONFORMANCE_CASES` ([`CASES_ENV`]) overrides it, e.g. `100000` for a soak run.
//! `PROPTEST_RNG_SEED` fixes proptest's seed to replay a run. `OFFLOAD_CONFORMANCE_PART`
//! ([`PART_ENV`]) runs one half only, `fixed` or `state-machine`, so a backend whose suite is
//! slow can run the halves in two processes at once (the Vulkan test does).

// The suite launches the fixture kernels the backend under test ships: that backend vouches
// for them, which is the contract `Queue::launch` asks for.
#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestError, TestRunner};

use crate::lock;
use offload_core::hal::ScalarType::U32;
use offload_core::hal::panic_text;
use offload_core::ipc::{IpcEndpoint, IpcHandle, PeerId};
use offload_core::{
    Arg, Buffer, Device, Dims, Error, Kernel, MemKind, Module, Offload, ParamKind, Platforms,
    Program, Queue, Ready, Result, take_unreported_errors,
};

/// The environment variable that sets the number of state-machine cases, overriding
/// [`SuiteConfig::cases`] (`OFFLOAD_CONFORMANCE_CASES=100000` for a soak run).
///
/// ```
/// assert_eq!(offload_testing::conformance::CASES_ENV, "OFFLOAD_CONFORMANCE_CASES");
/// ```
pub const CASES_ENV: &str = "OFFLOAD_CONFORMANCE_CASES";

/// The environment variable that runs one half of the suite: `fixed` (the fixed tests only)
/// or `state-machine` (the cases only); unset or empty, both.
///
/// ```
/// assert_eq!(offload_testing::conformance::PART_ENV, "OFFLOAD_CONFORMANCE_PART");
/// ```
pub const PART_ENV: &str = "OFFLOAD_CONFORMANCE_PART";

/// State-machine cases when [`CASES_ENV`] is not set.
///
/// ```
/// assert_eq!(offload_testing::conformance::DEFAULT_CASES, 256);
/// ```
pub const DEFAULT_CASES: u32 = 256;

/// The most threads one state-machine case runs at once.
///
/// ```
/// assert_eq!(offload_testing::conformance::MAX_THREADS, 4);
/// ```
pub const MAX_THREADS: usize = 4;

/// What a backend gives the suite: a program image in its own format containing the kernels
/// `add_one(buf u32[], n u32)`, `fill(buf u32[], value u32, n u32)` and `noop()` (see the
/// [module documentation](self) for their semantics).
///
/// ```
/// use offload_core::reference;
/// use offload_testing::conformance::Fixtures;
/// let fixtures = Fixtures { image: reference::fixture_image() };
/// assert!(!fixtures.image.is_empty());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Fixtures {
    /// One image with the kernels `add_one`, `fill` and `noop`.
    pub image: Vec<u8>,
}

impl fmt::Debug for Fixtures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixtures")
            .field("image", &format_args!("{} bytes", self.image.len()))
            .finish()
    }
}

/// How much of the state machine [`run`] runs.
///
/// ```
/// use offload_testing::conformance::SuiteConfig;
/// // A quick run with at most two threads per case:
/// let config = SuiteConfig { cases: 16, max_threads: 2 };
/// assert_eq!(config.max_threads, 2);
/// // The default: 256 cases (or OFFLOAD_CONFORMANCE_CASES), up to 4 threads.
/// assert_eq!(SuiteConfig::default().max_threads, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuiteConfig {
    /// State-machine cases; the environment variable [`CASES_ENV`], when set, wins (so a
    /// soak run needs no code change). Default [`DEFAULT_CASES`].
    pub cases: u32,
    /// The most threads one case runs at once, 1 to [`MAX_THREADS`] (values outside are
    /// clamped). Default [`MAX_THREADS`].
    pub max_threads: usize,
}

impl Default for SuiteConfig {
    /// [`DEFAULT_CASES`] cases, or [`CASES_ENV`] if it is set to a number; [`MAX_THREADS`]
    /// threads.
    fn default() -> Self {
        SuiteConfig {
            cases: env_cases().and_then(|r| r.ok()).unwrap_or(DEFAULT_CASES),
            max_threads: MAX_THREADS,
        }
    }
}

/// `None` when the variable is unset or empty; `Err` with its text when it is not a number.
fn env_cases() -> Option<std::result::Result<u32, String>> {
    let value = std::env::var(CASES_ENV).ok()?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    Some(value.parse().map_err(|_| value.to_string()))
}

/// Runs the conformance suite on the runtime `Offload<Ready, P>` with `fixtures`: the fixed
/// lifecycle tests, then `config.cases` state-machine cases (see the
/// [module documentation](self) for everything it checks).
///
/// It is test code: it panics at the first failure, with the name of the fixed test or the
/// minimal failing operations of the state machine and what went wrong. It needs the
/// process-global runtime to itself: nothing else in the same test binary may use offload
/// while it runs, and `P` should open only the backend under test (the suite uses the
/// runtime's first device).
///
/// ```no_run
/// // tests/conformance.rs of a backend crate, alone in its test binary:
/// use offload_testing::conformance::{run, Fixtures, SuiteConfig};
/// use offload_core::reference::{self, Only};
///
/// #[test]
/// fn backend_passes_conformance() {
///     run::<Only>(&Fixtures { image: reference::fixture_image() }, SuiteConfig::default());
/// }
/// ```
pub fn run<P: Platforms>(fixtures: &Fixtures, config: SuiteConfig) {
    let cases = match env_cases() {
        None => config.cases,
        Some(Ok(n)) => n,
        Some(Err(text)) => panic!(
            "offload conformance: {CASES_ENV}={text:?} is not a number of cases (e.g. 100000)"
        ),
    };
    let max_threads = config.max_threads.clamp(1, MAX_THREADS);

    // `OFFLOAD_CONFORMANCE_ONLY=<name>`: only the fixed test of that name, no cases (a look
    // at one test, e.g. on a lent GPU where the whole suite does not fit the time).
    let only = std::env::var("OFFLOAD_CONFORMANCE_ONLY").ok();
    let part = std::env::var(PART_ENV).unwrap_or_default();
    let (fixed, machine) = match part.trim() {
        "" => (true, true),
        "fixed" => (true, false),
        "state-machine" => (false, true),
        other => panic!(
            "offload conformance: {PART_ENV}={other:?} is neither `fixed` nor `state-machine`"
        ),
    };
    for (name, test) in fixed_tests::<P>() {
        if !fixed {
            break;
        }
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        if let Err(message) = test(fixtures) {
            panic!("offload conformance: fixed test `{name}` failed: {message}");
        }
    }

    if only.is_some() {
        eprintln!("offload conformance: only the fixed test {only:?} (OFFLOAD_CONFORMANCE_ONLY)");
        return;
    }
    if !machine {
        eprintln!("offload conformance: the fixed tests passed ({PART_ENV}=fixed)");
        return;
    }
    let started = Instant::now();
    let mut runner = runner(cases);
    let strategy = vec(vec(op_strategy(), 0..=32), 1..=max_threads);
    let image = fixtures.image.as_slice();
    let result = runner.run(&strategy, |threads| {
        run_case::<P>(image, &threads).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, minimal)) => panic!(
            "offload conformance: the state machine failed: {reason}\n\
             minimal failing case (one list of operations per thread, run at once; a \
             concurrency failure may need the same interleaving to show again):\n{minimal:#?}"
        ),
        Err(TestError::Abort(reason)) => {
            panic!("offload conformance: the state machine was aborted: {reason}")
        }
    }
    eprintln!(
        "offload conformance: {}{cases} state-machine cases (up to {max_threads} threads) \
         passed; the state machine took {:.1?}",
        if fixed { "fixed tests and " } else { "" },
        started.elapsed()
    );
}

/// A proptest runner usable from library code: no failure files, no forking.
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        fork: false,
        timeout: 0,
        ..ProptestConfig::default()
    })
}

// ---------------------------------------------------------------------------------------
// Checking helpers

/// A check: `Err` says what went wrong.
mod reentry;

pub mod after_shutdown;

type Check<T = ()> = std::result::Result<T, String>;

macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err(format!($($message)+));
        }
    };
}

/// The variant name of an error (`Error`'s `Debug` prints its message, so it is matched).
fn variant(e: &Error) -> String {
    match e {
        Error::ShutDown { .. } => "ShutDown",
        Error::InvalidBinary { .. } => "InvalidBinary",
        Error::SymbolNotFound { .. } => "SymbolNotFound",
        Error::OutOfMemory { .. } => "OutOfMemory",
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::InvalidIpcHandle { .. } => "InvalidIpcHandle",
        Error::Callback { .. } => "Callback",
        Error::Multiple(_) => "Multiple",
        Error::DriverNotFound { .. } => "DriverNotFound",
        Error::NoDevice { .. } => "NoDevice",
        Error::Unsupported { .. } => "Unsupported",
        Error::Ipc { .. } => "Ipc",
        Error::Quarantined { .. } => "Quarantined",
        Error::Compile { .. } => "Compile",
        Error::Driver { .. } => "Driver",
        // `Error` is non-exhaustive: a variant added later prints through `Display`.
        _ => "(other)",
    }
    .to_string()
}

fn err_text(e: &Error) -> String {
    format!("Error::{} ({e})", variant(e))
}

/// `Err` saying `what` and the errors if `take_unreported_errors` has any.
fn nothing_unreported(what: &str) -> Check {
    let unreported = take_unreported_errors();
    if unreported.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = unreported.iter().map(err_text).collect();
    Err(format!("{what}: {}", texts.join("; ")))
}

fn describe<T>(r: &Result<T>) -> String {
    match r {
        Ok(_) => "success".into(),
        Err(e) => err_text(e),
    }
}

fn ok<T, E: Into<Error>>(what: impl fmt::Display, r: Result<T, E>) -> Check<T> {
    r.map_err(|e| format!("{what}: expected success, got {}", err_text(&e.into())))
}

fn expect_err<T>(
    what: impl fmt::Display,
    r: Result<T>,
    want: &str,
    pred: impl Fn(&Error) -> bool,
) -> Check {
    match r {
        Err(e) if pred(&e) => Ok(()),
        other => Err(format!("{what}: expected {want}, got {}", describe(&other))),
    }
}

fn invalid_arg<T>(what: impl fmt::Display, r: Result<T>) -> Check {
    expect_err(what, r, "Error::InvalidArgument", |e| {
        matches!(e, Error::InvalidArgument { .. })
    })
}

fn shut_down<T>(what: impl fmt::Display, r: Result<T>) -> Check {
    expect_err(what, r, "Error::ShutDown", |e| {
        matches!(e, Error::ShutDown { .. })
    })
}

/// A call on a handle whose reference this thread shut down: success or `ShutDown`.
fn stale<T>(what: &str, r: Result<T>) -> Check<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::ShutDown { .. }) => Ok(None),
        Err(e) => Err(format!(
            "{what} on a handle made under a reference this thread has shut down: expected \
             success or Error::ShutDown, got {}",
            err_text(&e)
        )),
    }
}

// The suite's parts, by concern (declared after `ensure!`, which they use).
mod bad_input;
mod callbacks;
mod kernels;
mod lifecycle;
mod machine;
mod programs;

use bad_input::*;
use callbacks::*;
use kernels::*;
use lifecycle::*;
use machine::*;
use programs::*;

// ---------------------------------------------------------------------------------------
// The fixed tests, in the order they run

type FixedTest = fn(&Fixtures) -> Check;

fn fixed_tests<P: Platforms>() -> [(&'static str, FixedTest); 17] {
    [
        ("runtime_is_free", runtime_is_free::<P>),
        ("init_shutdown_cycles", init_shutdown_cycles::<P>),
        ("concurrent_init", concurrent_init::<P>),
        ("fixture_kernels", fixture_kernels::<P>),
        (
            "handles_of_an_ended_generation",
            handles_of_an_ended_generation::<P>,
        ),
        ("wrong_launch_arguments", wrong_launch_arguments::<P>),
        ("unknown_kernel", unknown_kernel::<P>),
        ("invalid_images", invalid_images::<P>),
        ("out_of_range", out_of_range::<P>),
        ("kernel_of_unloaded_module", kernel_of_unloaded_module::<P>),
        ("failing_setup", failing_setup::<P>),
        ("teardown_exactly_once", teardown_exactly_once::<P>),
        (
            "teardown_order_at_shutdown",
            teardown_order_at_shutdown::<P>,
        ),
        (
            "failing_teardown_at_shutdown",
            failing_teardown_at_shutdown::<P>,
        ),
        ("concurrent_load", concurrent_load::<P>),
        ("reentrancy", reentry::reentrancy::<P>),
        (
            "handles_after_the_last_shutdown",
            after_shutdown::handles_after_the_last_shutdown::<P>,
        ),
    ]
}
