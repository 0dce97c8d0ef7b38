//! The model check of the lifecycle, compiled only with `--cfg offload_model`
//! (`scripts/model.sh`, run by the `offload-model` crate's tests): the crate's own code —
//! `runtime/` (lifecycle, generations, lazy platforms, re-entry), the handles (devices,
//! programs and their per-device load slot, modules and their callbacks, buffers and their
//! memory locks) and the exit hook — run by `shuttle` with 2–4 threads racing init, clone,
//! use, lazy platform opens, loads, copies, `with_mapped`, frees and shutdown, a thousand
//! schedules per scenario.
//!
//! # How the real code gets here
//!
//! Every lock, atomic, condition variable, thread-local and helper thread of the crate
//! comes from `crate::sync`; with `--cfg offload_model` those are shuttle's, so shuttle's
//! scheduler decides every interleaving of the lifecycle mutex, the reference counts, the
//! generation's `RwLock<Option<Live>>` and registries, the `closing` flag, the loads in
//! flight, each platform slot's opening lock, each program's load slot (P2: its `RwLock`,
//! the module's phase `Condvar`), and each buffer's memory lock (L7: the `RwLock` the
//! library uses, not a stand-in; [`Seed`] plants an ordering bug in `Buffer::copy_from` that
//! the check must catch, and `offload-model`'s tests show it does). The process-wide statics are declared with
//! `sync::statics!`, which makes them per execution here: every execution starts from the
//! state a freshly loaded library has, and a failed one cannot leave a held lock or a live
//! generation to the next. Thread-locals are shuttle's: one per model thread.
//!
//! Not real here, each for a stated reason:
//! - the backend ([`backend`]): a model platform with one device that loads programs and
//!   has host-memory buffers (no queues); it yields inside every driver call and panics on
//!   any use after its platform's `deinit`.
//! - `atexit`: not registered (`runtime::exit_hook`); scenarios call the hook,
//!   `lifecycle::shutdown_at_exit`, themselves.
//! - queues: the model backend has none; one scenario registers a stand-in queue resource
//!   whose drain waits for a host function, exactly where the real queue's drain waits.
//! - IPC and background compiles are not exercised (their threads would start only when
//!   used; `tests/ipc_progress.rs` and `tests/compile_background.rs` of the facade check
//!   their shutdown).
//!
//! # Why shuttle, not loom
//!
//! A lifecycle transition takes dozens of synchronisation steps, and loom explores
//! interleavings exhaustively (up to a preemption bound), so three threads racing whole
//! transitions are a state space whose exploration time is hard to bound for CI. Shuttle's
//! PCT scheduler gives a probabilistic guarantee instead — with `n` threads and `k` steps,
//! a bug that needs `d` ordering constraints is found with probability at least
//! 1/(n·k^(d−1)) per execution — and the iteration count bounds the time. The price:
//! shuttle models sequential consistency only. The lifecycle's `Relaxed` reference count
//! is changed only under the lifecycle mutex, and the load/shutdown handshake is `SeqCst`,
//! so no weak-memory behaviour is lost that the code relies on.
//!
//! # Checks
//!
//! Every execution ends with: each platform opened was deinitialised exactly once and
//! never used after; no module outlived its runtime; nothing was left unreported; and a
//! fresh `init` opens a new generation whose `shutdown` is the last reference (the count
//! went back to zero). Deadlocks (every thread blocked) and livelocks (the step bound) fail
//! the execution. Each scenario also checks that its schedules reached both sides of its
//! race ([`Scenario::must_see`]).
//!
//! # What it found
//!
//! The teardown once ran under the lifecycle mutex and waited there for loads in flight,
//! so an `on_teardown` callback calling `init` (same thread), an `on_setup` calling `init`
//! while another thread shut down, and an `on_setup` giving back the last reference all
//! hung; `callbacks_reenter_during_shutdown` and `setup_gives_back_the_last_reference` are
//! the regression scenarios (and `tests/model_regressions.rs`, on the real backends).
//!
//! # Bounds
//!
//! Each scenario runs `OFFLOAD_MODEL_ITERATIONS` executions (default 500) under the PCT
//! scheduler at depth 3 and as many under the uniformly random scheduler, each bounded to
//! 100,000 scheduling steps (beyond the bound it counts as a livelock). A failure prints
//! the schedule to pass to `shuttle::replay`.

mod backend;
mod scenarios;

pub use crate::sync::seed::Seed;
use crate::sync::seed::plant;

/// Runs scenario `name` with `seed` planted: `Ok` with the model check's failure message
/// when it caught the bug, `Err` when every execution passed (the check is blind to it).
pub fn check_catches(name: &str, seed: Seed) -> std::result::Result<String, String> {
    let Some(scenario) = SCENARIOS.iter().find(|s| s.name == name) else {
        panic!("no model scenario `{name}`");
    };
    let result = {
        let _serial = one_at_a_time();
        plant(seed);
        let caught = std::panic::catch_unwind(|| run_locked(scenario));
        plant(Seed::None);
        caught
    };
    match result {
        Ok(()) => Err(format!("{name} passed with {seed:?} planted")),
        Err(panic) => Ok(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_default()),
    }
}

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;

use backend::{DEINITS, LIVE_PROGRAMS, Model, OPENS};

use crate::typestate::{Offload, Ready};

/// The runtime of the model: the typestate runtime on the model backend.
type Rt = Offload<Ready, Model>;

/// One race of the model check.
pub struct Scenario {
    /// Its name, for [`check`].
    pub name: &'static str,
    /// One execution: spawns the racing threads and joins them.
    run: fn(),
    /// Outcomes some execution must reach (both sides of the race).
    pub must_see: &'static [&'static str],
}

/// Every scenario, in the order `offload-model` runs them.
pub const SCENARIOS: &[Scenario] = scenarios::ALL;

/// Runs the scenario `name` (see [`SCENARIOS`]) under PCT (depth 3) and the random
/// scheduler; panics with the failing schedule if an execution breaks a check.
pub fn check(name: &str) {
    let Some(scenario) = SCENARIOS.iter().find(|s| s.name == name) else {
        panic!("no model scenario `{name}`");
    };
    run(scenario);
}

fn iterations() -> usize {
    std::env::var("OFFLOAD_MODEL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

/// Outcomes the executions of the running scenario reached, with how often (the harness's
/// own bookkeeping, outside the model: a std lock).
static SEEN: std::sync::Mutex<BTreeMap<&'static str, usize>> =
    std::sync::Mutex::new(BTreeMap::new());

fn seen_map() -> std::sync::MutexGuard<'static, BTreeMap<&'static str, usize>> {
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records that an execution reached `outcome`.
fn seen(outcome: &'static str) {
    *seen_map().entry(outcome).or_default() += 1;
}

/// The lifecycle's statics and the counters are process-wide: one scenario at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run(scenario: &Scenario) {
    let _serial = one_at_a_time();
    run_locked(scenario);
}

fn run_locked(scenario: &Scenario) {
    let n = iterations();
    seen_map().clear();
    let started = std::time::Instant::now();
    let body = scenario.run;
    let execution = move || {
        backend::reset();
        body();
        finish();
    };
    let mut config = shuttle::Config::new();
    config.silence_warnings = true;
    config.max_steps = shuttle::MaxSteps::FailAfter(100_000);
    let pct = shuttle::scheduler::PctScheduler::new(3, n);
    shuttle::Runner::new(pct, config.clone()).run(execution);
    let random = shuttle::scheduler::RandomScheduler::new(n);
    shuttle::Runner::new(random, config).run(execution);
    let seen = std::mem::take(&mut *seen_map());
    eprintln!(
        "model {}: {n} PCT (depth 3) + {n} random executions in {:.1?}; outcomes: {seen:?}",
        scenario.name,
        started.elapsed()
    );
    for outcome in scenario.must_see {
        assert!(
            seen.contains_key(outcome),
            "{}: no schedule reached \"{outcome}\" (seen: {seen:?})",
            scenario.name
        );
    }
}

/// The invariants every execution ends with (after its threads joined and every handle
/// was dropped or shut down).
fn finish() {
    // Teardowns decided in user code run on helper threads of the runtime (L6); wait for
    // them and join them, as the exit hook does.
    while crate::runtime::lifecycle::settle_once() {}
    assert!(
        crate::runtime::unreported::take_unreported_errors().is_empty(),
        "an implicit shutdown met errors"
    );
    assert_eq!(
        LIVE_PROGRAMS.load(SeqCst),
        0,
        "a module outlived its runtime"
    );
    assert_eq!(
        backend::LIVE_BUFFERS.load(SeqCst),
        0,
        "a buffer outlived its runtime"
    );
    assert_eq!(
        OPENS.load(SeqCst),
        DEINITS.load(SeqCst),
        "every init's platform is deinitialised exactly once (L1)"
    );
    // Nothing is left live: a fresh init opens a new generation (L2), and its shutdown is
    // the last reference (the count went back to zero).
    let before = OPENS.load(SeqCst);
    let rt = Rt::init().expect("init after everything was given back");
    // Platforms open on first use: the device list opens it.
    rt.devices().expect("devices of a fresh generation");
    assert_eq!(OPENS.load(SeqCst), before + 1, "a generation was left live");
    let down = rt.shutdown().expect("shutdown");
    assert!(down.was_last(), "a reference was left behind");
    assert_eq!(DEINITS.load(SeqCst), before + 1);
}
