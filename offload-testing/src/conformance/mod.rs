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
//!   module whose setup ran once (P2, P3).
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
//! `PROPTEST_RNG_SEED` fixes proptest's seed to replay a run.

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

    for (name, test) in fixed_tests::<P>() {
        if let Err(message) = test(fixtures) {
            panic!("offload conformance: fixed test `{name}` failed: {message}");
        }
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
        "offload conformance: fixed tests and {cases} state-machine cases (up to {max_threads} \
         threads) passed; the state machine took {:.1?}",
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

// ---------------------------------------------------------------------------------------
// Fixture kernels and their model

/// The fixture kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelKind {
    AddOne,
    Fill,
    Noop,
}

impl KernelKind {
    const ALL: [KernelKind; 3] = [KernelKind::AddOne, KernelKind::Fill, KernelKind::Noop];

    fn name(self) -> &'static str {
        match self {
            KernelKind::AddOne => "add_one",
            KernelKind::Fill => "fill",
            KernelKind::Noop => "noop",
        }
    }

    fn params(self) -> &'static [ParamKind] {
        match self {
            KernelKind::AddOne => &[ParamKind::Buffer, ParamKind::Typed(U32)],
            KernelKind::Fill => &[
                ParamKind::Buffer,
                ParamKind::Typed(U32),
                ParamKind::Typed(U32),
            ],
            KernelKind::Noop => &[],
        }
    }

    /// Whether a backend's declaration matches: the same kinds, each scalar a `u32` or
    /// 4 bytes declared by size only.
    fn declared_by(self, params: &[ParamKind]) -> bool {
        params.len() == self.params().len()
            && params.iter().zip(self.params()).all(|(got, want)| {
                got == want || (*want == ParamKind::Typed(U32) && *got == ParamKind::Scalar(4))
            })
    }

    /// The right arguments (a buffer is needed for `add_one` and `fill`).
    fn args(self, buffer: Option<&Buffer>, value: u32, n: u32) -> Vec<Arg<'_>> {
        match (self, buffer) {
            (KernelKind::AddOne, Some(b)) => vec![Arg::buffer(b), Arg::scalar(&n)],
            (KernelKind::Fill, Some(b)) => {
                vec![Arg::buffer(b), Arg::scalar(&value), Arg::scalar(&n)]
            }
            _ => Vec::new(),
        }
    }

    /// What the kernel does to `model` when launched with `threads` threads.
    fn apply(self, model: &mut [u8], value: u32, n: u32, threads: u64) {
        let count = usize::try_from(u64::from(n).min(threads)).unwrap_or(usize::MAX);
        for word in model.chunks_exact_mut(4).take(count) {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(word);
            let new = match self {
                KernelKind::AddOne => u32::from_ne_bytes(bytes).wrapping_add(1),
                KernelKind::Fill => value,
                KernelKind::Noop => return,
            };
            word.copy_from_slice(&new.to_ne_bytes());
        }
    }
}

fn dims(grid: u32, block: u32) -> Dims {
    Dims::grid([grid, 1, 1]).block([block, 1, 1])
}

/// Launches `kind` and, on success, applies it to `model`.
#[allow(clippy::too_many_arguments)]
fn launch_checked(
    what: &str,
    queue: &Queue,
    kernel: &Kernel,
    kind: KernelKind,
    buffer: &Buffer,
    model: &mut [u8],
    value: u32,
    n: u32,
    (grid, block): (u32, u32),
) -> Check {
    let args = kind.args(Some(buffer), value, n);
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    ok(what, unsafe {
        queue.launch(kernel, dims(grid, block), &args)
    })?;
    kind.apply(model, value, n, u64::from(grid) * u64::from(block));
    Ok(())
}

fn read_all(what: &str, buffer: &Buffer) -> Check<Vec<u8>> {
    let mut out = vec![0u8; buffer.len()];
    ok(what, buffer.read(0, &mut out))?;
    Ok(out)
}

fn same_bytes(what: &str, got: &[u8], want: &[u8]) -> Check {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
    Err(format!(
        "{what}: the bytes differ from the model, first at byte {at} (word {}): got {:?}, \
         expected {:?}",
        at / 4,
        got,
        want
    ))
}

// ---------------------------------------------------------------------------------------
// Setup / teardown accounting

/// A global no fixture defines: looking it up tells whether a module is loaded
/// (`SymbolNotFound`) without cloning the module handle.
const PROBE: &str = "__offload_conformance_probe__";

/// What one callback saw.
#[derive(Clone, Copy, Debug)]
struct CallbackRun {
    /// The module was loaded (the probe answered `SymbolNotFound`); otherwise the error.
    loaded: std::result::Result<(), &'static str>,
    /// Setups of the module completed before this callback began.
    setups_before: usize,
}

/// The setup and the teardown callbacks that ran for one module.
type Runs = (Vec<CallbackRun>, Vec<CallbackRun>);

/// Records every setup and teardown callback per module id and what it saw.
#[derive(Default)]
struct Tracker {
    runs: Mutex<HashMap<u64, Runs>>,
}

impl Tracker {
    fn record(&self, module: &Module, teardown: bool) {
        let loaded = match module.global(PROBE) {
            Ok(_) | Err(Error::SymbolNotFound { .. }) => Ok(()),
            Err(Error::ShutDown { .. }) => Err("Error::ShutDown"),
            Err(Error::InvalidArgument { .. }) => Err("Error::InvalidArgument"),
            Err(_) => Err("another error"),
        };
        let mut runs = lock(&self.runs);
        let (setups, teardowns) = runs.entry(module.id()).or_default();
        let run = CallbackRun {
            loaded,
            setups_before: setups.len(),
        };
        if teardown {
            teardowns.push(run)
        } else {
            setups.push(run)
        }
    }

    fn teardowns_of(&self, id: u64) -> usize {
        lock(&self.runs).get(&id).map_or(0, |r| r.1.len())
    }

    fn setups_of(&self, id: u64) -> usize {
        lock(&self.runs).get(&id).map_or(0, |r| r.0.len())
    }

    /// Once everything is shut down: every module set up was torn down exactly once, setup
    /// came first, and both saw the module loaded (P3) — also when threads use handles of
    /// a reference they gave back while another thread ends the generation.
    fn finish(&self) -> Check {
        for (id, (setups, teardowns)) in lock(&self.runs).iter() {
            ensure!(
                setups.len() == 1 && teardowns.len() == 1,
                "P3: module {id} was set up {} times and torn down {} times by the end \
                 (expected exactly once each, everything having been shut down)",
                setups.len(),
                teardowns.len()
            );
            let (setup, teardown) = (setups[0], teardowns[0]);
            if let Err(e) = setup.loaded {
                return Err(format!(
                    "P3: module {id}: its setup callback ran while it was not loaded ({e})"
                ));
            }
            ensure!(
                teardown.setups_before > 0,
                "P3: module {id}: its teardown callback ran before its setup"
            );
            if let Err(e) = teardown.loaded {
                return Err(format!(
                    "P3: module {id}: its teardown callback ran while it was not loaded ({e})"
                ));
            }
        }
        Ok(())
    }
}

/// A program whose callbacks report to `tracker`.
fn tracked_program(image: &[u8], tracker: &Arc<Tracker>) -> Program {
    let (s, t) = (tracker.clone(), tracker.clone());
    Program::new(image)
        .on_setup(move |m| {
            s.record(m, false);
            Ok(())
        })
        .on_teardown(move |m| {
            t.record(m, true);
            Ok(())
        })
}

// ---------------------------------------------------------------------------------------
// Fixed lifecycle tests

type FixedTest = fn(&Fixtures) -> Check;

fn fixed_tests<P: Platforms>() -> [(&'static str, FixedTest); 16] {
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
    ]
}

fn init<P: Platforms>() -> Check<Offload<Ready, P>> {
    ok("Offload::init", Offload::<Ready, P>::init())
}

fn first_device<P>(rt: &Offload<Ready, P>) -> Check<Device> {
    let devices = ok("Offload::devices", rt.devices())?;
    devices
        .into_iter()
        .next()
        .ok_or_else(|| "the runtime has no device: the conformance suite needs one".to_string())
}

/// Shuts down a reference that must be the last one.
fn last<P>(rt: Offload<Ready, P>) -> Check {
    let down = ok("Offload::shutdown", rt.shutdown())?;
    ensure!(
        down.was_last(),
        "shutdown of the only reference this test took was not the last: something else holds \
         the runtime (run the conformance suite alone in its test binary)"
    );
    Ok(())
}

/// Nothing else holds the runtime (the suite needs it to itself).
fn runtime_is_free<P: Platforms>(_: &Fixtures) -> Check {
    take_unreported_errors();
    last(init::<P>()?)
}

/// L1/L2: 100 cycles, each a fresh generation that works.
fn init_shutdown_cycles<P: Platforms>(_: &Fixtures) -> Check {
    let mut seen = HashSet::new();
    for cycle in 0..100 {
        let rt = init::<P>()?;
        ensure!(
            seen.insert(rt.generation()),
            "cycle {cycle}: init gave generation {} again after a full shutdown (expected a \
             fresh generation)",
            rt.generation()
        );
        let dev = first_device(&rt)?;
        let buf = ok("Device::alloc", dev.alloc(4, MemKind::Device))?;
        ok("Buffer::write", buf.write(0, &[cycle as u8; 4]))?;
        same_bytes(
            "Buffer::read",
            &read_all("Buffer::read", &buf)?,
            &[cycle as u8; 4],
        )?;
        last(rt).map_err(|e| format!("cycle {cycle}: {e}"))?;
        shut_down(
            "Buffer::read after the last shutdown",
            buf.read(0, &mut [0; 4]),
        )?;
    }
    Ok(())
}

/// L1: concurrent inits share one generation; exactly one shutdown is the last.
fn concurrent_init<P: Platforms>(_: &Fixtures) -> Check {
    const THREADS: usize = 4;
    for round in 0..20 {
        let barrier = Barrier::new(THREADS);
        let results: Vec<Check<(u64, bool)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let rt = init::<P>()?;
                        let generation = rt.generation();
                        barrier.wait(); // all hold a reference before any gives it back
                        let down = ok("Offload::shutdown", rt.shutdown())?;
                        Ok((generation, down.was_last()))
                    })
                })
                .collect();
            join_all(handles)
        });
        let results = results.into_iter().collect::<Check<Vec<_>>>()?;
        let generations: HashSet<u64> = results.iter().map(|r| r.0).collect();
        ensure!(
            generations.len() == 1,
            "round {round}: {THREADS} threads holding the runtime at once got different \
             generations {generations:?} (L1: they must share one)"
        );
        let lasts = results.iter().filter(|r| r.1).count();
        ensure!(
            lasts == 1,
            "round {round}: {lasts} of {THREADS} shutdowns said they were the last (expected 1)"
        );
    }
    Ok(())
}

fn join_all<T>(handles: Vec<std::thread::ScopedJoinHandle<'_, Check<T>>>) -> Vec<Check<T>> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            h.join()
                .unwrap_or_else(|p| Err(format!("thread {i} panicked: {}", panic_text(&*p))))
        })
        .collect()
}

/// The fixture kernels exist with the right parameters and compute what the model says.
fn fixture_kernels<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let module = ok(
        "Program::load of the fixture image",
        Program::new(&fixtures.image).load(&dev),
    )?;
    let mut kernels = Vec::new();
    for kind in KernelKind::ALL {
        let k = ok(
            format!("Module::kernel({:?})", kind.name()),
            module.kernel(kind.name()),
        )?;
        ensure!(
            kind.declared_by(k.params()),
            "fixture kernel `{}` declares parameters {:?}, expected {:?}",
            kind.name(),
            k.params(),
            kind.params()
        );
        kernels.push(k);
    }
    let [add_one, fill, noop] = [&kernels[0], &kernels[1], &kernels[2]];
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(256, MemKind::Device))?;
    ok("Buffer::fill", buf.fill(0, 256, 0))?;
    let mut model = vec![0u8; 256];
    let steps = [
        (fill, KernelKind::Fill, 7, 40, (2, 16)),
        (add_one, KernelKind::AddOne, 0, 64, (4, 16)),
        (add_one, KernelKind::AddOne, 0, 10, (1, 64)),
        (fill, KernelKind::Fill, u32::MAX, 3, (3, 1)),
        (add_one, KernelKind::AddOne, 0, 5, (1, 5)),
    ];
    for (k, kind, value, n, geometry) in steps {
        let what = format!(
            "launch of {}(value {value}, n {n}) on {geometry:?}",
            kind.name()
        );
        launch_checked(&what, &queue, k, kind, &buf, &mut model, value, n, geometry)?;
    }
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    ok("launch of noop", unsafe {
        queue.launch(noop, dims(1, 1), &[])
    })?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "after fill/add_one launches",
        &read_all("Buffer::read", &buf)?,
        &model,
    )?;

    // A buffer whose size is not a multiple of 4: the bytes past the last word stay.
    let odd = ok("Device::alloc", dev.alloc(10, MemKind::Device))?;
    ok("Buffer::write", odd.write(0, &[9; 10]))?;
    let mut odd_model = vec![9u8; 10];
    launch_checked(
        "add_one n=2",
        &queue,
        add_one,
        KernelKind::AddOne,
        &odd,
        &mut odd_model,
        0,
        2,
        (1, 4),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "10-byte buffer after add_one",
        &read_all("Buffer::read", &odd)?,
        &odd_model,
    )?;
    drop((kernels, module, queue, buf, odd));
    last(rt)
}

/// L3: every handle of generation N answers `ShutDown` in generation N+1; dropping is a no-op.
fn handles_of_an_ended_generation<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let old_generation = rt.generation();
    let dev = first_device(&rt)?;
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    let program = Program::new(&fixtures.image);
    let module = ok("Program::load", program.load(&dev))?;
    let kernel = ok("Module::kernel", module.kernel("add_one"))?;
    let event = ok("Queue::record", queue.record())?;
    last(rt)?;

    let rt2 = init::<P>()?;
    ensure!(
        rt2.generation() != old_generation,
        "init after the last shutdown gave the same generation {old_generation}"
    );
    let dev2 = first_device(&rt2)?;
    let queue2 = ok("Device::queue (new generation)", dev2.queue())?;
    let buf2 = ok(
        "Device::alloc (new generation)",
        dev2.alloc(16, MemKind::Device),
    )?;
    let module2 = ok("Program::load (new generation)", program.load(&dev2))?;
    ensure!(
        module2.id() != module.id(),
        "loading the program in a new generation gave the old generation's module {}",
        module.id()
    );
    let kernel2 = ok("Module::kernel (new generation)", module2.kernel("add_one"))?;
    let n = 4u32;

    let old = "a handle of the previous generation";
    shut_down(format!("Buffer::read on {old}"), buf.read(0, &mut [0; 4]))?;
    shut_down(format!("Buffer::write on {old}"), buf.write(0, &[1; 4]))?;
    shut_down(format!("Buffer::fill on {old}"), buf.fill(0, 4, 1))?;
    shut_down(
        format!("Device::alloc on {old}"),
        dev.alloc(4, MemKind::Device),
    )?;
    shut_down(format!("Device::queue on {old}"), dev.queue())?;
    shut_down(format!("Device::info on {old}"), dev.info())?;
    shut_down(format!("Program::load on {old}"), program.load(&dev))?;
    shut_down(format!("Module::kernel on {old}"), module.kernel("noop"))?;
    shut_down(format!("Queue::sync on {old}"), queue.sync())?;
    shut_down(format!("Queue::record on {old}"), queue.record())?;
    shut_down(format!("Event::sync on {old}"), event.sync())?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    shut_down(format!("Queue::launch with everything of {old}"), unsafe {
        queue.launch(&kernel, dims(1, 4), &[Arg::buffer(&buf), Arg::scalar(&n)])
    })?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    shut_down(format!("Queue::launch of a kernel of {old}"), unsafe {
        queue2.launch(&kernel, dims(1, 4), &[Arg::buffer(&buf2), Arg::scalar(&n)])
    })?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    shut_down(format!("Queue::launch with a buffer of {old}"), unsafe {
        queue2.launch(&kernel2, dims(1, 4), &[Arg::buffer(&buf), Arg::scalar(&n)])
    })?;
    shut_down(
        format!("Buffer::copy_from from {old}"),
        buf2.copy_from(0, &buf, 0, 4),
    )?;
    // Teardown already ran and the module is gone: unloading again may say ShutDown or Ok.
    stale("Module::unload", module.unload())?;
    shut_down(format!("Buffer::free on {old}"), buf.free())?;
    drop((kernel, event, queue, dev));

    // The new generation is unaffected.
    ok("Buffer::fill", buf2.fill(0, 16, 0))?;
    let mut model = vec![0u8; 16];
    launch_checked(
        "launch in the new generation",
        &queue2,
        &kernel2,
        KernelKind::AddOne,
        &buf2,
        &mut model,
        0,
        n,
        (1, 4),
    )?;
    ok("Queue::sync", queue2.sync())?;
    same_bytes(
        "new generation after add_one",
        &read_all("Buffer::read", &buf2)?,
        &model,
    )?;
    drop((kernel2, module2, queue2, buf2));
    last(rt2)
}

/// P4: wrong launch arguments are `InvalidArgument` and change nothing.
fn wrong_launch_arguments<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let devices = ok("Offload::devices", rt.devices())?;
    let dev = first_device(&rt)?;
    let module = ok("Program::load", Program::new(&fixtures.image).load(&dev))?;
    let add_one = ok("Module::kernel", module.kernel("add_one"))?;
    let fill = ok("Module::kernel", module.kernel("fill"))?;
    let noop = ok("Module::kernel", module.kernel("noop"))?;
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(64, MemKind::Device))?;
    ok("Buffer::fill", buf.fill(0, 64, 0x5A))?;
    let (n, v) = (16u32, 3u32);
    let b = || Arg::buffer(&buf);
    let cases: Vec<(&str, &Kernel, Vec<Arg<'_>>)> = vec![
        ("add_one with 1 argument", &add_one, vec![b()]),
        ("add_one with no argument", &add_one, vec![]),
        (
            "add_one with 3 arguments",
            &add_one,
            vec![b(), Arg::scalar(&n), Arg::scalar(&n)],
        ),
        (
            "add_one with a u64 count",
            &add_one,
            vec![b(), Arg::scalar(&u64::from(n))],
        ),
        (
            "add_one with a u16 count",
            &add_one,
            vec![b(), Arg::scalar(&(n as u16))],
        ),
        (
            "add_one with the arguments swapped",
            &add_one,
            vec![Arg::scalar(&n), b()],
        ),
        (
            "add_one with a scalar for the buffer",
            &add_one,
            vec![Arg::scalar(&0u64), Arg::scalar(&n)],
        ),
        (
            "add_one with a buffer for the count",
            &add_one,
            vec![b(), b()],
        ),
        ("fill with 2 arguments", &fill, vec![b(), Arg::scalar(&v)]),
        (
            "fill with a u8 value",
            &fill,
            vec![b(), Arg::scalar(&1u8), Arg::scalar(&n)],
        ),
        (
            "fill with an f64 count",
            &fill,
            vec![b(), Arg::scalar(&v), Arg::scalar(&1.0f64)],
        ),
        ("noop with 1 argument", &noop, vec![Arg::scalar(&n)]),
        ("noop with a buffer", &noop, vec![b()]),
    ];
    for (what, kernel, args) in &cases {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        invalid_arg(format!("Queue::launch of {what}"), unsafe {
            queue.launch(kernel, dims(1, 16), args)
        })?;
    }
    if let Some(other) = devices.get(1) {
        // A buffer or a kernel of another device.
        let foreign = ok(
            "Device::alloc on the second device",
            other.alloc(64, MemKind::Device),
        )?;
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        invalid_arg("Queue::launch with a buffer of another device", unsafe {
            queue.launch(
                &add_one,
                dims(1, 16),
                &[Arg::buffer(&foreign), Arg::scalar(&n)],
            )
        })?;
        let other_module = ok(
            "Program::load on the second device",
            Program::new(&fixtures.image).load(other),
        )?;
        let other_kernel = ok("Module::kernel", other_module.kernel("add_one"))?;
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        invalid_arg("Queue::launch of a kernel of another device", unsafe {
            queue.launch(&other_kernel, dims(1, 16), &[b(), Arg::scalar(&n)])
        })?;
    }
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after rejected launches",
        &read_all("Buffer::read", &buf)?,
        &[0x5A; 64],
    )?;
    // The queue still works.
    let mut model = vec![0x5A; 64];
    launch_checked(
        "a correct launch after rejected ones",
        &queue,
        &add_one,
        KernelKind::AddOne,
        &buf,
        &mut model,
        0,
        n,
        (1, 16),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after a correct launch",
        &read_all("Buffer::read", &buf)?,
        &model,
    )?;
    drop(cases);
    drop((add_one, fill, noop, module, queue, buf));
    last(rt)
}

/// P4: a kernel the module lacks is `SymbolNotFound` (names are matched exactly).
fn unknown_kernel<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let module = ok("Program::load", Program::new(&fixtures.image).load(&dev))?;
    for name in ["no_such_kernel", "add_on", "add_one_", "ADD_ONE"] {
        expect_err(
            format!("Module::kernel({name:?})"),
            module.kernel(name),
            "Error::SymbolNotFound",
            |e| matches!(e, Error::SymbolNotFound { .. }),
        )?;
    }
    ok(
        "Module::kernel after failed lookups",
        module.kernel("add_one"),
    )?;
    drop(module);
    last(rt)
}

fn invalid_binary<T>(what: impl fmt::Display, r: Result<T>) -> Check {
    expect_err(what, r, "Error::InvalidBinary", |e| {
        matches!(e, Error::InvalidBinary { .. })
    })
}

/// P4: empty, random and corrupted images are `InvalidBinary`; nothing breaks.
fn invalid_images<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    invalid_binary(
        "Program::load of an empty image",
        Program::new([]).load(&dev),
    )?;
    let mut flipped = fixtures.image.clone();
    for byte in flipped.iter_mut().take(4) {
        *byte ^= 0xFF;
    }
    invalid_binary(
        "Program::load of the fixture with its first 4 bytes flipped",
        Program::new(&flipped).load(&dev),
    )?;
    let result = runner(64).run(&vec(any::<u8>(), 1..=512), |bytes| {
        invalid_binary(
            "Program::load of random bytes",
            Program::new(&bytes).load(&dev),
        )
        .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, bytes)) => {
            return Err(format!("{reason} (minimal image: {bytes:?})"));
        }
        Err(TestError::Abort(reason)) => return Err(format!("aborted: {reason}")),
    }
    let module = ok(
        "Program::load of the fixture after invalid images",
        Program::new(&fixtures.image).load(&dev),
    )?;
    ok("Module::kernel", module.kernel("noop"))?;
    drop(module);
    last(rt)
}

/// P4: out-of-range copies and zero-size allocations are `InvalidArgument` and change
/// nothing; an impossible allocation is `OutOfMemory` (or `InvalidArgument`).
fn out_of_range<P: Platforms>(_: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    invalid_arg("Device::alloc(0)", dev.alloc(0, MemKind::Device))?;
    let huge = usize::MAX / 2;
    expect_err(
        format!("Device::alloc({huge})"),
        dev.alloc(huge, MemKind::Device),
        "Error::OutOfMemory or Error::InvalidArgument",
        |e| matches!(e, Error::OutOfMemory { .. } | Error::InvalidArgument { .. }),
    )?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    let pattern: Vec<u8> = (1..=16).collect();
    ok("Buffer::write", buf.write(0, &pattern))?;
    let mut out = [0u8; 8];
    for offset in [9, 16, 17, usize::MAX - 3, usize::MAX] {
        invalid_arg(
            format!("Buffer::read of 8 bytes at {offset}"),
            buf.read(offset, &mut out),
        )?;
        invalid_arg(
            format!("Buffer::write of 8 bytes at {offset}"),
            buf.write(offset, &[0; 8]),
        )?;
        invalid_arg(
            format!("Buffer::fill of 8 bytes at {offset}"),
            buf.fill(offset, 8, 0),
        )?;
    }
    invalid_arg("Buffer::read of 17 bytes", buf.read(0, &mut [0; 17]))?;
    invalid_arg("Buffer::write of 17 bytes", buf.write(0, &[0; 17]))?;
    ok("Buffer::read of 0 bytes at the end", buf.read(16, &mut []))?;
    ok("Buffer::write of 0 bytes at the end", buf.write(16, &[]))?;
    same_bytes(
        "buffer after rejected copies",
        &read_all("Buffer::read", &buf)?,
        &pattern,
    )?;
    drop(buf);
    last(rt)
}

/// A kernel whose module was unloaded is `InvalidArgument` on launch; loading again works.
fn kernel_of_unloaded_module<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    ok("Buffer::fill", buf.fill(0, 16, 0))?;
    let program = Program::new(&fixtures.image);
    let module = ok("Program::load", program.load(&dev))?;
    let old_id = module.id();
    let add_one = ok("Module::kernel", module.kernel("add_one"))?;
    let noop = ok("Module::kernel", module.kernel("noop"))?;
    let other_handle = module.clone();
    ok("Module::unload", module.unload())?;
    let n = 4u32;
    invalid_arg(
        "Queue::launch of add_one whose module was unloaded",
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&add_one, dims(1, 4), &[Arg::buffer(&buf), Arg::scalar(&n)]) },
    )?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    invalid_arg("Queue::launch of noop whose module was unloaded", unsafe {
        queue.launch(&noop, dims(1, 1), &[])
    })?;
    invalid_arg(
        "Module::kernel on another handle of an unloaded module",
        other_handle.kernel("noop"),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after launches of an unloaded module",
        &read_all("Buffer::read", &buf)?,
        &[0; 16],
    )?;

    let again = ok("Program::load after unload", program.load(&dev))?;
    ensure!(
        again.id() != old_id,
        "loading the program after Module::unload gave back the unloaded module {old_id}"
    );
    let k = ok("Module::kernel", again.kernel("add_one"))?;
    let mut model = vec![0u8; 16];
    launch_checked(
        "launch after reloading",
        &queue,
        &k,
        KernelKind::AddOne,
        &buf,
        &mut model,
        0,
        n,
        (1, 4),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "buffer after reloading",
        &read_all("Buffer::read", &buf)?,
        &model,
    )?;
    drop((add_one, noop, other_handle, again, k, queue, buf));
    last(rt)
}

/// P3: a failing setup is `Error::Callback`, and the load can be retried.
fn failing_setup<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let attempts = Arc::new(AtomicUsize::new(0));
    let tracker = Arc::new(Tracker::default());
    let (a, t) = (attempts.clone(), tracker.clone());
    let program = Program::new(&fixtures.image)
        .on_setup(move |m| {
            if a.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err("the first setup fails on purpose".into());
            }
            t.record(m, false);
            Ok(())
        })
        .on_teardown({
            let t = tracker.clone();
            move |m| {
                t.record(m, true);
                Ok(())
            }
        });
    expect_err(
        "Program::load whose setup fails",
        program.load(&dev),
        "Error::Callback",
        |e| matches!(e, Error::Callback { .. }),
    )?;
    let module = ok(
        "Program::load again after a failed setup",
        program.load(&dev),
    )?;
    ensure!(
        attempts.load(Ordering::SeqCst) == 2,
        "setup ran {} times for two loads (expected 2)",
        attempts.load(Ordering::SeqCst)
    );
    let id = module.id();
    let noop = ok("Module::kernel", module.kernel("noop"))?;
    let queue = ok("Device::queue", dev.queue())?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    ok("launch after a retried load", unsafe {
        queue.launch(&noop, dims(1, 1), &[])
    })?;
    ok("Queue::sync", queue.sync())?;
    drop((noop, module));
    ensure!(
        tracker.teardowns_of(id) == 0,
        "teardown ran {} times after the module's handles were dropped while its program lives \
         (expected 0: the program keeps its module, P2)",
        tracker.teardowns_of(id)
    );
    drop(program);
    ensure!(
        tracker.teardowns_of(id) == 1,
        "teardown ran {} times after the last handle of the module and its program were \
         dropped (expected 1)",
        tracker.teardowns_of(id)
    );
    drop(queue);
    last(rt)?;
    tracker.finish()
}

/// P3: teardown runs exactly once, with the module loaded, whether by `unload()`, by the
/// last drop, or by shutdown.
fn teardown_exactly_once<P: Platforms>(fixtures: &Fixtures) -> Check {
    let tracker = Arc::new(Tracker::default());
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let expect = |how: &str, id: u64, n: usize| -> Check {
        let got = tracker.teardowns_of(id);
        ensure!(got == n, "{how}: teardown ran {got} times, expected {n}");
        Ok(())
    };

    // By unload(), with other handles and a kernel still held.
    let m = ok(
        "Program::load",
        tracked_program(&fixtures.image, &tracker).load(&dev),
    )?;
    let id = m.id();
    ensure!(
        tracker.setups_of(id) == 1,
        "setup ran {} times on load",
        tracker.setups_of(id)
    );
    let (other, kernel) = (m.clone(), ok("Module::kernel", m.kernel("noop"))?);
    expect("before unload()", id, 0)?;
    ok("Module::unload", m.unload())?;
    expect("by unload()", id, 1)?;
    drop((other, kernel));
    expect("by unload(), after dropping the other handles", id, 1)?;

    // By the last drop (the last handle is a kernel).
    let m = ok(
        "Program::load",
        tracked_program(&fixtures.image, &tracker).load(&dev),
    )?;
    let id = m.id();
    let other = m.clone();
    let kernel = ok("Module::kernel", other.kernel("add_one"))?;
    drop(m);
    expect("after dropping one of three handles", id, 0)?;
    drop(other);
    expect("after dropping two of three handles", id, 0)?;
    drop(kernel);
    expect("by the last drop", id, 1)?;

    // P2: the program keeps its module: loads after every handle went find it (no load,
    // no setup); dropping the program lets it go.
    let program = tracked_program(&fixtures.image, &tracker);
    let id = ok("Program::load", program.load(&dev))?.id();
    for round in 0..3 {
        let again = ok("Program::load after every handle went", program.load(&dev))?;
        ensure!(
            again.id() == id,
            "round {round}: a load after every Module handle was dropped loaded a new module \
             (the program keeps its module, P2)"
        );
    }
    ensure!(
        tracker.setups_of(id) == 1,
        "setup ran {} times for 4 loads of one program (expected 1, P2)",
        tracker.setups_of(id)
    );
    expect("while its program lives", id, 0)?;
    drop(program);
    expect("by dropping the program", id, 1)?;

    // By shutdown; using the handles afterwards runs nothing again.
    let m = ok(
        "Program::load",
        tracked_program(&fixtures.image, &tracker).load(&dev),
    )?;
    let id = m.id();
    let kernel = ok("Module::kernel", m.kernel("noop"))?;
    let other = m.clone();
    last(rt)?;
    expect("by shutdown", id, 1)?;
    stale("Module::unload after shutdown", m.unload())?;
    drop((kernel, other));
    expect(
        "by shutdown, after unload() and drops of the old handles",
        id,
        1,
    )?;
    tracker.finish()
}

/// P3/L4: at shutdown, teardowns run newest module first.
fn teardown_order_at_shutdown<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut modules = Vec::new();
    for name in ["first", "second", "third"] {
        let o = order.clone();
        let program = Program::new(&fixtures.image).on_teardown(move |_| {
            lock(&o).push(name);
            Ok(())
        });
        modules.push(ok("Program::load", program.load(&dev))?);
    }
    last(rt)?;
    let got = lock(&order).clone();
    ensure!(
        got == ["third", "second", "first"],
        "teardowns at shutdown ran in the order {got:?}, expected newest setup first \
         [\"third\", \"second\", \"first\"]"
    );
    drop(modules);
    ensure!(
        lock(&order).len() == 3,
        "teardown ran again when old handles were dropped"
    );
    Ok(())
}

/// P3/L4: a failing teardown at shutdown is returned, and the rest of shutdown still ran.
fn failing_teardown_at_shutdown<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let program = Program::new(&fixtures.image).on_teardown(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        Err("teardown fails on purpose".into())
    });
    let module = ok("Program::load", program.load(&dev))?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    ok("Buffer::write", buf.write(0, &[1; 16]))?;
    let queue = ok("Device::queue", dev.queue())?;
    match rt.shutdown() {
        Ok(_) => {
            return Err(
                "shutdown returned Ok although a teardown callback failed (L4/P3: \
                             its error must be returned)"
                    .into(),
            );
        }
        Err(e) => {
            let e = Error::from(e);
            let callbacks = e
                .iter()
                .filter(|x| matches!(x, Error::Callback { .. }))
                .count();
            ensure!(
                callbacks == 1 && e.iter().count() == 1,
                "shutdown with one failing teardown returned {} (expected exactly that one \
                 Error::Callback)",
                err_text(&e)
            );
        }
    }
    shut_down(
        "Buffer::read after a shutdown whose teardown failed",
        buf.read(0, &mut [0; 4]),
    )?;
    shut_down(
        "Queue::sync after a shutdown whose teardown failed",
        queue.sync(),
    )?;
    drop((module, buf, queue));
    ensure!(
        calls.load(Ordering::SeqCst) == 1,
        "the failing teardown ran {} times (expected once)",
        calls.load(Ordering::SeqCst)
    );
    // The runtime is free and fresh.
    last(init::<P>()?)
}

/// P2/P3: threads loading one program at once get one module, set up once.
fn concurrent_load<P: Platforms>(fixtures: &Fixtures) -> Check {
    const THREADS: usize = 32;
    const ROUNDS: usize = 100;
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let tracker = Arc::new(Tracker::default());
    // P2: 32 threads × 100 rounds of (load, launch, drop the module) on one program: one
    // backend load (every backend load is a new module, with a new id) and one setup for
    // the program's lifetime, however often every handle went.
    let program = tracked_program(&fixtures.image, &tracker);
    let barrier = Barrier::new(THREADS);
    let results: Vec<Check<HashSet<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let queue = ok("Device::queue", dev.queue())?;
                    let mut ids = HashSet::new();
                    for _ in 0..ROUNDS {
                        barrier.wait();
                        let module = ok("Program::load", program.load(&dev))?;
                        let noop = ok("Module::kernel", module.kernel("noop"))?;
                        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
                        ok("Queue::launch", unsafe {
                            queue.launch(&noop, dims(1, 1), &[])
                        })?;
                        ids.insert(module.id());
                    }
                    ok("Queue::sync", queue.sync())?;
                    Ok(ids)
                })
            })
            .collect();
        join_all(handles)
    });
    let mut ids = HashSet::new();
    for r in results {
        ids.extend(r?);
    }
    ensure!(
        ids.len() == 1,
        "{THREADS} threads × {ROUNDS} rounds of (load, launch, drop) on one program got \
         modules {ids:?} (P2: one module per program and device while the program lives)"
    );
    let id = *ids.iter().next().unwrap_or(&0);
    ensure!(
        tracker.setups_of(id) == 1,
        "setup ran {} times for {THREADS} × {ROUNDS} loads of one program (P2, P3: once)",
        tracker.setups_of(id)
    );
    ensure!(
        tracker.teardowns_of(id) == 0,
        "teardown ran while the program lives (P2)"
    );
    drop(program);
    ensure!(
        tracker.teardowns_of(id) == 1,
        "teardown ran {} times after the program and every handle were dropped (expected 1)",
        tracker.teardowns_of(id)
    );
    // Fresh programs loaded at once by 8 threads: one module each, set up once.
    for round in 0..5 {
        let program = tracked_program(&fixtures.image, &tracker);
        let barrier = Barrier::new(8);
        let results: Vec<Check<Module>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        ok("Program::load", program.load(&dev))
                    })
                })
                .collect();
            join_all(handles)
        });
        let modules = results.into_iter().collect::<Check<Vec<Module>>>()?;
        let ids: HashSet<u64> = modules.iter().map(Module::id).collect();
        ensure!(
            ids.len() == 1,
            "round {round}: 8 threads loading one program at once got modules {ids:?} \
             (P2: one module per program and device)"
        );
        let id = modules[0].id();
        ensure!(
            tracker.setups_of(id) == 1,
            "round {round}: setup ran {} times for 8 concurrent loads (P3: once)",
            tracker.setups_of(id)
        );
        drop((modules, program));
        ensure!(
            tracker.teardowns_of(id) == 1,
            "round {round}: teardown ran {} times after every handle and the program were \
             dropped",
            tracker.teardowns_of(id)
        );
    }
    // Different programs loaded at once are different modules.
    let programs: Vec<Program> = (0..4)
        .map(|_| tracked_program(&fixtures.image, &tracker))
        .collect();
    let barrier = Barrier::new(programs.len());
    let results: Vec<Check<Module>> = std::thread::scope(|s| {
        let handles: Vec<_> = programs
            .iter()
            .map(|p| {
                let (barrier, dev) = (&barrier, &dev);
                s.spawn(move || {
                    barrier.wait();
                    ok("Program::load", p.load(dev))
                })
            })
            .collect();
        join_all(handles)
    });
    let modules = results.into_iter().collect::<Check<Vec<Module>>>()?;
    let ids: HashSet<u64> = modules.iter().map(Module::id).collect();
    ensure!(
        ids.len() == programs.len(),
        "{} different programs loaded at once gave only {} distinct modules",
        programs.len(),
        ids.len()
    );
    drop(modules);
    last(rt)?;
    tracker.finish()
}

// ---------------------------------------------------------------------------------------
// The state machine

/// One operation of a thread. Indices are taken modulo the number of live objects when the
/// operation runs (so shrinking keeps every list valid); operations that need a runtime
/// while the thread holds none, or an object it does not have, are skipped.
#[derive(Clone, Debug)]
enum Op {
    /// Take a reference: `init()` when the thread holds none; otherwise a second one
    /// (`clone()` or `init()`) that must be of the same generation and not the last.
    Init { clone: bool },
    /// Give the reference back, then use every old handle once (`ShutDown` or success) and
    /// drop them. With `verify`, first read every buffer back and compare it with the model;
    /// without, shut down with launches possibly in flight (L4 drains them).
    Shutdown { verify: bool },
    /// Allocate `size` bytes (0 must be `InvalidArgument`), exportable to other processes
    /// where the backend can, and fill them with `pattern`.
    Alloc {
        size: u16,
        pattern: u8,
        exportable: bool,
    },
    /// Share a range of an exportable buffer: export it and import it again
    /// (`Buffer::export` + `Device::import`), or send it from one of this thread's
    /// endpoints to the other; read the view against the model, write `byte` through it.
    Share {
        buffer: u8,
        offset: u16,
        len: u16,
        via_endpoint: bool,
        byte: u8,
    },
    /// Free a buffer: `free()` or drop. Unless `racing`, first sync and compare it with
    /// the model; `racing` frees it while queued work may still use it (Q1: the release
    /// waits for, or defers behind, that work).
    Free {
        buffer: u8,
        explicit: bool,
        racing: bool,
    },
    /// Write `data` at `offset % (len + 9)` (or near `usize::MAX` if `huge`): queued on the
    /// first or `second` queue (`via_queue`), or from the host, which must order after the
    /// queued work on the buffer (Q1).
    Write {
        buffer: u8,
        offset: u16,
        data: Vec<u8>,
        huge: bool,
        via_queue: bool,
        second: bool,
    },
    /// Queue a fill of `len % 65` bytes at `offset % (size + 9)` with `pattern` (1–16
    /// bytes; a length it does not divide must be `InvalidArgument`).
    Fill {
        buffer: u8,
        offset: u16,
        len: u16,
        pattern: Vec<u8>,
        second: bool,
    },
    /// Queue a copy of `len % 65` bytes between two buffers (or two ranges of one, which
    /// must not overlap).
    Copy {
        src: u8,
        dst: u8,
        src_offset: u16,
        dst_offset: u16,
        len: u16,
        second: bool,
    },
    /// Queue a host function that checks it runs after every host function enqueued
    /// before it, on either queue.
    HostFn { second: bool },
    /// Read `len` bytes at `offset % (len + 9)` (or near `usize::MAX` if `huge`): through
    /// the first queue, or from the host, which must see the queued work (Q1).
    Read {
        buffer: u8,
        offset: u16,
        len: u8,
        huge: bool,
        via_queue: bool,
    },
    /// Load the program shared by all threads, or this thread's own.
    Load { shared: bool },
    /// Drop a module handle (shared program), or `unload()` it (own program).
    Unload { module: u8 },
    /// Launch a kernel of a held module on a buffer, on the first or `second` queue; `n` is
    /// taken modulo the buffer's words + 1; `cached` reuses a `Kernel` looked up before.
    Launch {
        module: u8,
        kernel: KernelKind,
        buffer: u8,
        n: u16,
        value: u32,
        grid: u8,
        block: u8,
        cached: bool,
        second: bool,
    },
    /// Sync both queues (`Queue::sync`, or the first through an event), then check that
    /// they are idle, the event complete, and every host function ran in order.
    Sync { event: bool },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let kernel = prop_oneof![
        Just(KernelKind::AddOne),
        Just(KernelKind::Fill),
        Just(KernelKind::Noop)
    ];
    let size = prop_oneof![1 => Just(0u16), 24 => 1u16..=256];
    let huge = proptest::bool::weighted(0.05);
    let pattern = prop_oneof![
        (0usize..5).prop_flat_map(|k| vec(any::<u8>(), 1usize << k)),
        vec(any::<u8>(), 1..=16),
    ];
    prop_oneof![
        3 => any::<bool>().prop_map(|clone| Op::Init { clone }),
        2 => any::<bool>().prop_map(|verify| Op::Shutdown { verify }),
        6 => (size, any::<u8>(), any::<bool>())
            .prop_map(|(size, pattern, exportable)| Op::Alloc { size, pattern, exportable }),
        3 => (any::<u8>(), any::<u16>(), any::<u16>(), any::<bool>(), any::<u8>())
            .prop_map(|(buffer, offset, len, via_endpoint, byte)| Op::Share {
                buffer, offset, len, via_endpoint, byte,
            }),
        2 => (any::<u8>(), any::<bool>(), any::<bool>())
            .prop_map(|(buffer, explicit, racing)| Op::Free { buffer, explicit, racing }),
        5 => (any::<u8>(), any::<u16>(), vec(any::<u8>(), 0..=32), huge, any::<bool>(), any::<bool>())
            .prop_map(|(buffer, offset, data, huge, via_queue, second)| Op::Write {
                buffer, offset, data, huge, via_queue, second,
            }),
        3 => (any::<u8>(), any::<u16>(), any::<u16>(), pattern, any::<bool>())
            .prop_map(|(buffer, offset, len, pattern, second)| Op::Fill {
                buffer, offset, len, pattern, second,
            }),
        3 => (any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>(), any::<u16>(), any::<bool>())
            .prop_map(|(src, dst, src_offset, dst_offset, len, second)| Op::Copy {
                src, dst, src_offset, dst_offset, len, second,
            }),
        2 => any::<bool>().prop_map(|second| Op::HostFn { second }),
        5 => (any::<u8>(), any::<u16>(), 0u8..=64, huge, any::<bool>())
            .prop_map(|(buffer, offset, len, huge, via_queue)| Op::Read {
                buffer, offset, len, huge, via_queue,
            }),
        3 => any::<bool>().prop_map(|shared| Op::Load { shared }),
        2 => any::<u8>().prop_map(|module| Op::Unload { module }),
        8 => (any::<u8>(), kernel, any::<u8>(), any::<u16>(), any::<u32>(), 1u8..=4, 1u8..=64, (any::<bool>(), any::<bool>()))
            .prop_map(|(module, kernel, buffer, n, value, grid, block, (cached, second))| Op::Launch {
                module, kernel, buffer, n, value, grid, block, cached, second,
            }),
        3 => any::<bool>().prop_map(|event| Op::Sync { event }),
    ]
}

/// What the threads of one case share.
struct CaseShared<'a> {
    image: &'a [u8],
    /// The program every thread loads (modules shared across threads).
    program: Program,
    tracker: Arc<Tracker>,
    /// Per generation: the id of the shared program's module and how many threads hold a
    /// handle to it under a live reference (P2: while any does, every load gives that id).
    registry: Mutex<HashMap<u64, (u64, usize)>>,
}

/// A thread's live reference and what it made first.
struct Held<P> {
    rt: Offload<Ready, P>,
    generation: u64,
    dev: Device,
    queue: Queue,
    /// A second queue of the same device: work on one queue after work on the other waits
    /// for an event of the other first, so the model stays sequential.
    queue2: Queue,
    /// Two endpoints, the first connected to the second (made at the first send).
    ipc: Option<(IpcEndpoint, IpcEndpoint, PeerId)>,
}

impl<P> Held<P> {
    fn q(&self, i: usize) -> &Queue {
        if i == 0 { &self.queue } else { &self.queue2 }
    }
}

struct BufferModel {
    buffer: Buffer,
    model: Vec<u8>,
    exportable: bool,
}

struct ModuleSlot {
    id: u64,
    shared: bool,
    /// `None` once this handle was consumed by `unload()`.
    module: Option<Module>,
    kernels: Vec<(KernelKind, Kernel)>,
    /// The module was unloaded explicitly (through this or another handle).
    unloaded: bool,
}

/// One thread of a case, with its model.
struct Worker<'a, P> {
    shared: &'a CaseShared<'a>,
    /// This thread's own program.
    private: Program,
    held: Option<Held<P>>,
    buffers: Vec<BufferModel>,
    modules: Vec<ModuleSlot>,
    /// Work may be queued on each queue (no sync since).
    pending: [bool; 2],
    /// Host functions this thread enqueued, ran, and whether one ran out of order.
    host_fns: (u64, Arc<AtomicU64>, Arc<AtomicBool>),
    /// The generation in which this thread counts as a holder of the shared module.
    registered: Option<u64>,
}

fn resolve_offset(offset: u16, huge: bool, size: usize) -> usize {
    if huge {
        usize::MAX - usize::from(offset % 64)
    } else {
        usize::from(offset) % (size + 9)
    }
}

fn in_range(offset: usize, len: usize, size: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

impl<'a, P: Platforms> Worker<'a, P> {
    fn new(shared: &'a CaseShared<'a>) -> Self {
        Worker {
            shared,
            private: tracked_program(shared.image, &shared.tracker),
            held: None,
            buffers: Vec::new(),
            modules: Vec::new(),
            pending: [false; 2],
            host_fns: Default::default(),
            registered: None,
        }
    }

    fn register(&mut self, generation: u64, id: u64) -> Check {
        let mut registry = lock(&self.shared.registry);
        match registry.get_mut(&generation) {
            Some((held_id, holders)) => {
                ensure!(
                    *held_id == id,
                    "P2: load gave module {id} while module {held_id} of the same program and \
                     device is held in generation {generation} by {holders} thread(s)"
                );
                if self.registered.is_none() {
                    *holders += 1;
                }
            }
            None => {
                registry.insert(generation, (id, 1));
            }
        }
        self.registered = Some(generation);
        Ok(())
    }

    fn deregister(&mut self) {
        if let Some(generation) = self.registered.take() {
            let mut registry = lock(&self.shared.registry);
            if let Some(entry) = registry.get_mut(&generation) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    registry.remove(&generation);
                }
            }
        }
    }

    fn sync_if_pending(&mut self) -> Check {
        if let Some(h) = &self.held {
            for (i, q) in [&h.queue, &h.queue2].into_iter().enumerate() {
                if self.pending[i] {
                    ok("Queue::sync", q.sync())?;
                }
            }
        }
        self.pending = [false; 2];
        self.check_host_fns()
    }

    /// With both queues synced: every host function enqueued ran, each after the ones
    /// enqueued before it.
    fn check_host_fns(&self) -> Check {
        let (issued, ran, out_of_order) = &self.host_fns;
        ensure!(
            !out_of_order.load(Ordering::SeqCst),
            "Q1: a host function ran before one enqueued earlier (same or other queue, \
             ordered by an event)"
        );
        let ran = ran.load(Ordering::SeqCst);
        ensure!(
            ran == *issued,
            "Q1: {ran} of {issued} host functions had run when both queues were synced"
        );
        Ok(())
    }

    /// The queue for work on queue `second`, after making it wait for the other queue's
    /// pending work through an event (so the model stays sequential).
    fn queue_for(&mut self, second: bool) -> Check<usize> {
        let (i, j) = if second { (1, 0) } else { (0, 1) };
        if self.pending[j] {
            if let Some(h) = &self.held {
                let (qi, qj) = if second {
                    (&h.queue2, &h.queue)
                } else {
                    (&h.queue, &h.queue2)
                };
                let e = ok("Queue::record", qj.record())?;
                ensure!(
                    e.queue_id() == qj.id(),
                    "Event::queue_id is {}, recorded on queue {}",
                    e.queue_id(),
                    qj.id()
                );
                ok("Queue::wait for the other queue's event", qi.wait(&e))?;
            }
        }
        Ok(i)
    }

    fn step(&mut self, op: &Op) -> Check {
        match *op {
            Op::Init { clone } => self.init(clone),
            Op::Shutdown { verify } => self.shutdown(verify),
            Op::Alloc {
                size,
                pattern,
                exportable,
            } => {
                let Some(h) = &self.held else { return Ok(()) };
                let size = usize::from(size);
                let (r, exportable) = if exportable {
                    match h.dev.alloc_exportable(size, MemKind::Device) {
                        // A backend without IPC: an ordinary buffer, and no sharing.
                        Err(Error::Unsupported { .. }) => {
                            (h.dev.alloc(size, MemKind::Device), false)
                        }
                        r => (r, true),
                    }
                } else {
                    (h.dev.alloc(size, MemKind::Device), false)
                };
                if size == 0 {
                    return invalid_arg("Device::alloc(0)", r);
                }
                let buffer = ok("Device::alloc", r)?;
                ensure!(
                    buffer.len() == size,
                    "Buffer::len is {}, allocated {size}",
                    buffer.len()
                );
                ok(
                    "Buffer::fill of a new buffer",
                    buffer.fill(0, size, pattern),
                )?;
                self.buffers.push(BufferModel {
                    buffer,
                    model: vec![pattern; size],
                    exportable,
                });
                Ok(())
            }
            Op::Share {
                buffer,
                offset,
                len,
                via_endpoint,
                byte,
            } => self.share(buffer, offset, len, via_endpoint, byte),
            Op::Free {
                buffer,
                explicit,
                racing,
            } => {
                if self.held.is_none() || self.buffers.is_empty() {
                    return Ok(());
                }
                let index = usize::from(buffer) % self.buffers.len();
                if !racing {
                    self.sync_if_pending()?;
                    self.verify(index)?;
                }
                let b = self.buffers.remove(index);
                if explicit {
                    ok("Buffer::free", b.buffer.free())?;
                }
                Ok(())
            }
            Op::Write {
                buffer,
                offset,
                ref data,
                huge,
                via_queue,
                second,
            } => {
                if self.held.is_none() || self.buffers.is_empty() {
                    return Ok(());
                }
                let q = if via_queue {
                    self.queue_for(second)?
                } else {
                    0
                };
                let Some(h) = &self.held else { return Ok(()) };
                let index = usize::from(buffer) % self.buffers.len();
                let b = &mut self.buffers[index];
                let offset = resolve_offset(offset, huge, b.model.len());
                let what = format!(
                    "write of {} bytes at {offset} into buffer {index} ({} bytes)",
                    data.len(),
                    b.model.len()
                );
                let r = if via_queue {
                    h.q(q).write(&b.buffer, offset, data)
                } else {
                    b.buffer.write(offset, data)
                };
                if !in_range(offset, data.len(), b.model.len()) {
                    return invalid_arg(what, r);
                }
                ok(what, r)?;
                b.model[offset..offset + data.len()].copy_from_slice(data);
                if via_queue {
                    self.pending[q] = true;
                }
                Ok(())
            }
            Op::Fill {
                buffer,
                offset,
                len,
                ref pattern,
                second,
            } => self.fill(buffer, offset, len, pattern, second),
            Op::Copy {
                src,
                dst,
                src_offset,
                dst_offset,
                len,
                second,
            } => self.copy(src, dst, (src_offset, dst_offset), len, second),
            Op::HostFn { second } => {
                if self.held.is_none() {
                    return Ok(());
                }
                let q = self.queue_for(second)?;
                let Some(h) = &self.held else { return Ok(()) };
                let (issued, ran, out_of_order) = &mut self.host_fns;
                let (n, ran, out_of_order) = (*issued, ran.clone(), out_of_order.clone());
                ok(
                    "Queue::enqueue_host_fn",
                    h.q(q).enqueue_host_fn(move || {
                        if ran
                            .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
                            .is_err()
                        {
                            out_of_order.store(true, Ordering::SeqCst);
                        }
                    }),
                )?;
                self.host_fns.0 += 1;
                self.pending[q] = true;
                Ok(())
            }
            Op::Read {
                buffer,
                offset,
                len,
                huge,
                via_queue,
            } => {
                let Some(h) = &self.held else { return Ok(()) };
                if self.buffers.is_empty() {
                    return Ok(());
                }
                let index = usize::from(buffer) % self.buffers.len();
                let b = &self.buffers[index];
                let offset = resolve_offset(offset, huge, b.model.len());
                let mut out = vec![0xEEu8; usize::from(len)];
                let what = format!(
                    "read of {len} bytes at {offset} from buffer {index} ({} bytes)",
                    b.model.len()
                );
                let use_queue = via_queue;
                let r = if use_queue {
                    h.queue.read(&b.buffer, offset, &mut out)
                } else {
                    b.buffer.read(offset, &mut out)
                };
                if !in_range(offset, out.len(), b.model.len()) {
                    return invalid_arg(what, r);
                }
                ok(&what, r)?;
                same_bytes(&what, &out, &b.model[offset..offset + out.len()])?;
                if use_queue {
                    self.pending[0] = false;
                }
                Ok(())
            }
            Op::Load { shared } => self.load(shared),
            Op::Unload { module } => self.unload(module),
            Op::Launch {
                module,
                kernel,
                buffer,
                n,
                value,
                grid,
                block,
                cached,
                second,
            } => {
                if self.held.is_none() {
                    return Ok(());
                }
                let q = self.queue_for(second)?;
                self.launch(module, kernel, buffer, n, value, (grid, block), cached, q)
            }
            Op::Sync { event } => {
                let Some(h) = &self.held else { return Ok(()) };
                if event {
                    let e = ok("Queue::record", h.queue.record())?;
                    ok("Event::sync", e.sync())?;
                    ensure!(
                        ok("Event::is_complete", e.is_complete())?,
                        "Event::is_complete is false after Event::sync"
                    );
                } else {
                    ok("Queue::sync", h.queue.sync())?;
                }
                ok("Queue::sync", h.queue2.sync())?;
                for q in [&h.queue, &h.queue2] {
                    ensure!(
                        ok("Queue::is_idle", q.is_idle())?,
                        "Queue::is_idle is false after the queue was synced"
                    );
                }
                self.pending = [false; 2];
                self.check_host_fns()
            }
        }
    }

    fn init(&mut self, clone: bool) -> Check {
        if let Some(h) = &self.held {
            let extra = if clone {
                h.rt.clone()
            } else {
                ok(
                    "Offload::init while holding a reference",
                    Offload::<Ready, P>::init(),
                )?
            };
            ensure!(
                extra.generation() == h.generation,
                "L1: a second reference taken while this thread holds generation {} is of \
                 generation {}",
                h.generation,
                extra.generation()
            );
            let down = ok("Offload::shutdown of a second reference", extra.shutdown())?;
            ensure!(
                !down.was_last(),
                "L1: shutting down a second reference said it was the last while this thread \
                 still holds one"
            );
            return Ok(());
        }
        let rt = ok("Offload::init", Offload::<Ready, P>::init())?;
        let dev = first_device(&rt)?;
        let queue = ok("Device::queue", dev.queue())?;
        let queue2 = ok("Device::queue", dev.queue())?;
        let generation = rt.generation();
        self.held = Some(Held {
            rt,
            generation,
            dev,
            queue,
            queue2,
            ipc: None,
        });
        Ok(())
    }

    /// `Op::Share`: a range of an exportable buffer through `export` + `import`, or through
    /// an endpoint; the view must hold the model's bytes, and a write through it must be
    /// seen by the buffer.
    fn share(&mut self, buffer: u8, offset: u16, len: u16, via_endpoint: bool, byte: u8) -> Check {
        if self.held.is_none() {
            return Ok(());
        }
        let Some(index) = (0..self.buffers.len())
            .map(|i| (i + usize::from(buffer)) % self.buffers.len())
            .find(|&i| self.buffers[i].exportable)
        else {
            return Ok(());
        };
        // Kernels still running on the buffer would race the view's reads.
        self.sync_if_pending()?;
        let Some(h) = &mut self.held else {
            return Ok(());
        };
        let b = &mut self.buffers[index];
        let size = b.model.len();
        let offset = usize::from(offset) % size;
        let len = usize::from(len) % (size - offset) + 1;
        let what = format!("{len} bytes at {offset} of exportable buffer {index} ({size} bytes)");
        let view = if via_endpoint {
            if h.ipc.is_none() {
                let a = ok("Offload::ipc_endpoint", h.rt.ipc_endpoint())?;
                let b = ok("Offload::ipc_endpoint", h.rt.ipc_endpoint())?;
                let peer = ok("IpcEndpoint::connect", a.connect(b.name()))?;
                h.ipc = Some((a, b, peer));
            }
            let Some((a, b_end, peer)) = &h.ipc else {
                return Ok(());
            };
            ok(
                format!("IpcEndpoint::send of {what}"),
                a.send(*peer, &b.buffer, offset, len, index as u64),
            )?;
            let got = ok(
                "IpcEndpoint::recv",
                b_end.recv_timeout(std::time::Duration::from_secs(10)),
            )?;
            let Some(got) = got else {
                return Err(format!(
                    "IpcEndpoint::recv: nothing arrived for a send of {what}"
                ));
            };
            ensure!(
                got.tag() == index as u64,
                "the view came with tag {}",
                got.tag()
            );
            got.into_buffer()
        } else {
            let handle = ok(format!("Buffer::export of {what}"), b.buffer.export())?;
            let handle = ok("IpcHandle::range", handle.range(offset as u64, len as u64))?;
            let (bytes, fd) = handle.into_parts();
            let handle = ok("IpcHandle::from_parts", IpcHandle::from_parts(&bytes, fd))?;
            ok(format!("Device::import of {what}"), h.dev.import(handle))?
        };
        ensure!(
            view.len() == len,
            "the view of {what} has {} bytes",
            view.len()
        );
        let mut out = vec![0u8; len];
        ok(
            format!("read of the view of {what}"),
            view.read(0, &mut out),
        )?;
        same_bytes(
            &format!("view of {what}"),
            &out,
            &b.model[offset..offset + len],
        )?;
        ok(
            format!("write through the view of {what}"),
            view.write(0, &[byte]),
        )?;
        b.model[offset] = byte;
        drop(view);
        Ok(())
    }

    fn load(&mut self, shared: bool) -> Check {
        let Some(h) = &self.held else { return Ok(()) };
        let program = if shared {
            &self.shared.program
        } else {
            &self.private
        };
        let which = if shared {
            "the shared program"
        } else {
            "this thread's program"
        };
        let module = ok(format!("Program::load of {which}"), program.load(&h.dev))?;
        let id = module.id();
        ensure!(
            module.device() == h.dev,
            "Module::device is not the device it was loaded on"
        );
        for slot in self.modules.iter().filter(|s| s.shared == shared) {
            if slot.unloaded {
                ensure!(
                    slot.id != id,
                    "loading {which} after Module::unload gave back the unloaded module {id}"
                );
            } else {
                ensure!(
                    slot.id == id,
                    "P2: this thread holds module {} of {which}, and loading it again gave \
                     module {id}",
                    slot.id
                );
            }
        }
        let generation = h.generation;
        if shared {
            self.register(generation, id)?;
        }
        self.modules.push(ModuleSlot {
            id,
            shared,
            module: Some(module),
            kernels: Vec::new(),
            unloaded: false,
        });
        Ok(())
    }

    fn unload(&mut self, module: u8) -> Check {
        if self.held.is_none() || self.modules.is_empty() {
            return Ok(());
        }
        // No sync: unloading while launches of the module are queued must wait for (or
        // defer behind) them.
        let index = usize::from(module) % self.modules.len();
        if self.modules[index].shared {
            let slot = self.modules.remove(index);
            if !self.modules.iter().any(|s| s.shared) {
                // Before the handle goes: the registry must never count a holder that is not.
                self.deregister();
            }
            drop(slot);
        } else if let Some(m) = self.modules[index].module.take() {
            let id = self.modules[index].id;
            ok("Module::unload", m.unload())?;
            for slot in self.modules.iter_mut().filter(|s| !s.shared && s.id == id) {
                slot.unloaded = true;
            }
        } else {
            self.modules.remove(index);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        &mut self,
        module: u8,
        kind: KernelKind,
        buffer: u8,
        n: u16,
        value: u32,
        (grid, block): (u8, u8),
        cached: bool,
        q: usize,
    ) -> Check {
        let Some(h) = &self.held else { return Ok(()) };
        if self.modules.is_empty() {
            return Ok(());
        }
        let target = match kind {
            KernelKind::Noop => None,
            _ if self.buffers.is_empty() => return Ok(()),
            _ => Some(usize::from(buffer) % self.buffers.len()),
        };
        let count = self.modules.len();
        let slot = &mut self.modules[usize::from(module) % count];
        let known = slot
            .kernels
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, k)| k.clone());
        let kernel = match (known, &slot.module) {
            (Some(k), _) if cached || slot.module.is_none() => k,
            (_, Some(m)) => {
                let r = m.kernel(kind.name());
                if slot.unloaded {
                    return invalid_arg(
                        format!("Module::kernel({:?}) of an unloaded module", kind.name()),
                        r,
                    );
                }
                let k = ok(format!("Module::kernel({:?})", kind.name()), r)?;
                ensure!(
                    kind.declared_by(k.params()),
                    "kernel `{}` declares {:?}, expected {:?}",
                    kind.name(),
                    k.params(),
                    kind.params()
                );
                if cached {
                    slot.kernels.push((kind, k.clone()));
                }
                k
            }
            (_, None) => return Ok(()),
        };
        let (grid, block) = (u32::from(grid), u32::from(block));
        let b = target.map(|i| &self.buffers[i]);
        let words = b.map_or(0, |b| b.model.len() / 4) as u32;
        let n = u32::from(n) % (words + 1);
        let args = kind.args(b.map(|b| &b.buffer), value, n);
        let what = format!(
            "launch of {}(value {value}, n {n}) on {grid}x{block} threads{}",
            kind.name(),
            target.map_or(String::new(), |i| format!(" on buffer {i}"))
        );
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        let r = unsafe { h.q(q).launch(&kernel, dims(grid, block), &args) };
        drop(args);
        if slot.unloaded {
            return invalid_arg(format!("{what} (its module was unloaded)"), r);
        }
        ok(&what, r)?;
        if let Some(i) = target {
            kind.apply(
                &mut self.buffers[i].model,
                value,
                n,
                u64::from(grid) * u64::from(block),
            );
        }
        self.pending[q] = true;
        Ok(())
    }

    /// `Op::Fill`.
    fn fill(&mut self, buffer: u8, offset: u16, len: u16, pattern: &[u8], second: bool) -> Check {
        if self.held.is_none() || self.buffers.is_empty() {
            return Ok(());
        }
        let q = self.queue_for(second)?;
        let Some(h) = &self.held else { return Ok(()) };
        let index = usize::from(buffer) % self.buffers.len();
        let b = &mut self.buffers[index];
        let offset = usize::from(offset) % (b.model.len() + 9);
        let len = usize::from(len) % 65;
        let what = format!(
            "queued fill of {len} bytes at {offset} of buffer {index} ({} bytes) with a \
             {}-byte pattern",
            b.model.len(),
            pattern.len()
        );
        let r = h.q(q).fill(&b.buffer, offset, len, pattern);
        if !in_range(offset, len, b.model.len()) || len % pattern.len() != 0 {
            return invalid_arg(what, r);
        }
        ok(what, r)?;
        for (byte, p) in b.model[offset..offset + len]
            .iter_mut()
            .zip(pattern.iter().cycle())
        {
            *byte = *p;
        }
        self.pending[q] = true;
        Ok(())
    }

    /// `Op::Copy`.
    fn copy(&mut self, src: u8, dst: u8, offsets: (u16, u16), len: u16, second: bool) -> Check {
        if self.held.is_none() || self.buffers.is_empty() {
            return Ok(());
        }
        let q = self.queue_for(second)?;
        let Some(h) = &self.held else { return Ok(()) };
        let (s, d) = (
            usize::from(src) % self.buffers.len(),
            usize::from(dst) % self.buffers.len(),
        );
        let (ss, ds) = (self.buffers[s].model.len(), self.buffers[d].model.len());
        let so = usize::from(offsets.0) % (ss + 9);
        let dof = usize::from(offsets.1) % (ds + 9);
        let len = usize::from(len) % 65;
        let what = format!(
            "queued copy of {len} bytes from {so} of buffer {s} ({ss} bytes) to {dof} of \
             buffer {d} ({ds} bytes)"
        );
        let r = h.q(q).copy(
            &self.buffers[s].buffer,
            so,
            &self.buffers[d].buffer,
            dof,
            len,
        );
        let overlap = s == d && so.abs_diff(dof) < len;
        if !in_range(so, len, ss) || !in_range(dof, len, ds) || overlap {
            return invalid_arg(what, r);
        }
        ok(what, r)?;
        let bytes = self.buffers[s].model[so..so + len].to_vec();
        self.buffers[d].model[dof..dof + len].copy_from_slice(&bytes);
        self.pending[q] = true;
        Ok(())
    }

    /// Reads buffer `index` back whole and compares it with the model.
    fn verify(&self, index: usize) -> Check {
        let Some(h) = &self.held else { return Ok(()) };
        let b = &self.buffers[index];
        let mut out = vec![0u8; b.model.len()];
        let what = format!("read of all of buffer {index} ({} bytes)", out.len());
        ok(&what, h.queue.read(&b.buffer, 0, &mut out))?;
        same_bytes(&what, &out, &b.model)
    }

    /// Gives the reference back (with `verify`, after comparing every buffer with the
    /// model), then uses every old handle once and drops them.
    fn shutdown(&mut self, verify: bool) -> Check {
        if verify {
            for index in 0..self.buffers.len() {
                self.verify(index)?;
            }
        }
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        self.deregister();
        let Held {
            rt,
            generation,
            dev,
            queue,
            queue2,
            ipc,
        } = held;
        let down = ok("Offload::shutdown", rt.shutdown())?;
        // From here on this thread only uses and drops stale handles.
        ensure!(
            down.generation() == generation,
            "Offload<Shutdown>::generation is {}, the reference was of generation {generation}",
            down.generation()
        );
        self.pending = [false; 2];
        self.host_fns = Default::default();
        let buffers = std::mem::take(&mut self.buffers);
        let modules = std::mem::take(&mut self.modules);

        for (i, b) in buffers.iter().enumerate() {
            let mut out = vec![0u8; b.model.len()];
            if stale("Queue::read", queue.read(&b.buffer, 0, &mut out))?.is_some() {
                same_bytes(
                    &format!(
                        "buffer {i} read after this thread's shutdown (the runtime is still held elsewhere)"
                    ),
                    &out,
                    &b.model,
                )?;
            }
            stale("Buffer::write", b.buffer.write(0, &[0xA5]))?;
        }
        stale("Queue::sync", queue.sync())?;
        stale("Queue::sync of the second queue", queue2.sync())?;
        stale("Device::alloc", dev.alloc(8, MemKind::Device))?;
        stale("Device::queue", dev.queue())?;
        for slot in &modules {
            let Some(m) = &slot.module else { continue };
            let r = m.kernel(KernelKind::Noop.name());
            if slot.unloaded {
                expect_err(
                    "Module::kernel of an unloaded module after this thread's shutdown",
                    r,
                    "Error::InvalidArgument or Error::ShutDown",
                    |e| matches!(e, Error::InvalidArgument { .. } | Error::ShutDown { .. }),
                )?;
            } else if let Some(k) = stale("Module::kernel", r)? {
                // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
                stale("Queue::launch", unsafe {
                    queue.launch(&k, dims(1, 1), &[])
                })?;
            }
        }
        stale("Program::load", self.shared.program.load(&dev))?;
        if let Some((a, b, peer)) = ipc {
            stale("IpcEndpoint::poll", a.poll())?;
            if let Some(first) = buffers.iter().find(|b| b.exportable) {
                if stale("IpcEndpoint::send", a.send(peer, &first.buffer, 0, 1, 0))?.is_some() {
                    drop(stale(
                        "IpcEndpoint::recv",
                        b.recv_timeout(Default::default()),
                    )?);
                }
            }
            drop((a, b));
        }
        for (i, b) in buffers.into_iter().enumerate() {
            if i % 2 == 0 {
                stale("Buffer::free", b.buffer.free())?;
            }
        }
        for slot in modules {
            if let (false, Some(m)) = (slot.shared, slot.module) {
                stale("Module::unload", m.unload())?;
            }
        }
        Ok(())
    }
}

fn run_thread<P: Platforms>(index: usize, ops: &[Op], shared: &CaseShared<'_>) -> Check {
    let mut worker = Worker::<P>::new(shared);
    // Every thread starts by taking a reference, at about the same time as the others.
    worker
        .init(false)
        .map_err(|e| format!("thread {index}, first init: {e}"))?;
    for (k, op) in ops.iter().enumerate() {
        worker
            .step(op)
            .map_err(|e| format!("thread {index}, operation {k} {op:?}: {e}"))?;
    }
    worker
        .shutdown(true)
        .map_err(|e| format!("thread {index}, final shutdown: {e}"))
}

/// One case: every thread runs its operations at once; then the runtime must be free.
fn run_case<P: Platforms>(image: &[u8], threads: &[Vec<Op>]) -> Check {
    take_unreported_errors();
    let tracker = Arc::new(Tracker::default());
    let shared = CaseShared {
        image,
        program: tracked_program(image, &tracker),
        tracker: tracker.clone(),
        registry: Mutex::new(HashMap::new()),
    };
    let start = Barrier::new(threads.len());
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = threads
            .iter()
            .enumerate()
            .map(|(index, ops)| {
                let (shared, start) = (&shared, &start);
                s.spawn(move || {
                    start.wait();
                    run_thread::<P>(index, ops, shared)
                })
            })
            .collect();
        join_all(handles)
    });
    let errors: Vec<String> = results.into_iter().filter_map(|r| r.err()).collect();
    ensure!(errors.is_empty(), "{}", errors.join("\n"));

    // Every thread has shut down: nothing holds the runtime, and it works again.
    let rt = ok(
        "Offload::init after every thread shut down",
        Offload::<Ready, P>::init(),
    )?;
    let down = ok(
        "Offload::shutdown after every thread shut down",
        rt.shutdown(),
    )?;
    ensure!(
        down.was_last(),
        "after every thread shut down, init + shutdown was not the last reference: a \
         reference leaked"
    );
    ensure!(
        lock(&shared.registry).is_empty(),
        "internal: the P2 registry still lists holders"
    );
    tracker.finish()?;
    let unreported = take_unreported_errors();
    ensure!(
        unreported.is_empty(),
        "implicit shutdowns reported errors: {}",
        unreported
            .iter()
            .map(err_text)
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}
