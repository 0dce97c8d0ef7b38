//! Model check of the lifecycle: the real `runtime/lifecycle.rs`,
//! `runtime/generation.rs`, `runtime/platforms.rs` and `runtime/config.rs`, run by
//! `shuttle` with 2–3 threads racing init, clone, use, lazy platform opens, load and
//! shutdown, thousands of schedules per scenario.
//!
//! # How the real code gets here
//!
//! Those files are compiled into this test crate with `#[path]`, unchanged, together
//! with the real `error.rs`, `hal/` and `erased/`. They name their locks, condition
//! variable, atomics, thread-locals and the teardown's wait through `crate::runtime::sync`; in the library that module re-exports
//! std's (`src/runtime/sync.rs`), here it is [`runtime::sync`] below, which re-exports
//! shuttle's. So shuttle's scheduler decides every interleaving of the lifecycle mutex, the
//! reference counts, the generation's `RwLock<Option<Live>>`, its resource registries,
//! the `closing` flag, the count of loads in flight and each platform slot's opening lock
//! (its `OnceLock` is set only under that lock, so shuttle sees every race on it). No cargo feature switches
//! anything: `cargo test --workspace --all-features` runs this file with the library on std.
//!
//! Stand-ins, each equivalent for what the lifecycle does with it:
//! - `handles::Device`: the real one's fields, constructor and `info` (the lifecycle only
//!   constructs devices; `info` goes through `Generation::with_live` exactly as the real
//!   handle does). The other handles (buffers, queues) are not in the model.
//! - loads ([`load`], [`unload`]): the runtime-facing steps of `handles/program.rs`'s
//!   `load` and `release` — `begin_load` and its guard, `is_live`, `with_live` around the
//!   backend load and `register(Kind::Module)`, a yield while the guard is held (where
//!   `on_setup` runs), and unload under `with_live` after `forget`. The per-(program,
//!   device) load slot of P2 is not in the model: `handles/program.rs` waits on std's
//!   `RwLock` and `Condvar` directly, which shuttle cannot schedule (a follow-up: route
//!   it through `runtime::sync` too and include it here).
//! - `ipc`: an empty extension and `IpcEndpoint::bind` only (IPC is not in the model).
//! - `handles::compile_pool`: an empty extension (compiles in the background are not in
//!   the model; `tests/compile_background.rs` of the facade checks the pool's shutdown).
//! - `runtime::exit_hook::register`: answers "registered" without calling `atexit`; the
//!   exit hook itself (`lifecycle::shutdown_at_exit`) is real and one scenario races it.
//! - the backend ([`ModelPlatform`]): counts opens, deinits and live programs, yields
//!   inside every driver call, and panics if any device or program is used after its
//!   platform's `deinit` (what a real driver would answer with undefined behaviour).
//!
//! # Statics
//!
//! The lifecycle's statics (`LIFECYCLE`, `TORN_DOWN`, `UNREPORTED`) are declared through
//! `runtime::sync::statics!`: plain const-initialised `static`s in the library (L2),
//! shuttle `lazy_static`s here, which shuttle creates on first use in each execution and
//! drops at its end. So every execution starts from the state a freshly loaded library
//! has, and a failed one cannot leave a held lock or a live generation to the next. The
//! thread-locals (`LOADING`, `TEARING_DOWN_HERE`) are shuttle's `thread_local!` here: one
//! per model thread, as std's are one per OS thread.
//! [`finish`] still checks that each execution gives everything back: a fresh `init` must
//! open a new generation (so none was left live) whose `shutdown` is the last reference,
//! and no error was left unreported. The backend's counters are std atomics, reset at the
//! start of each execution (shuttle runs an execution's threads one at a time on one OS
//! thread, so they are exact); scenarios run one at a time.
//!
//! # Why shuttle, not loom
//!
//! A lifecycle transition takes dozens of synchronisation steps (a generation start takes
//! the lifecycle lock, creates its locks and atomics, and teardown walks five registries),
//! and loom explores interleavings exhaustively (up to a preemption bound), so three
//! threads racing whole transitions are a state space whose exploration time is hard to
//! bound for CI (not measured here). Shuttle's PCT scheduler gives a probabilistic
//! guarantee instead — with `n` threads and `k` steps, a bug that needs `d` ordering
//! constraints is found with probability at least 1/(n·k^(d−1)) per execution — and the
//! iteration count bounds the time. The price: shuttle models sequential consistency
//! only. The lifecycle's `Relaxed` reference count is changed only under the lifecycle
//! mutex, and the load/shutdown handshake is `SeqCst`, so no weak-memory behaviour is lost
//! that the code relies on.
//!
//! # Scenarios (2–3 threads each)
//!
//! init ∥ init ∥ init; init ∥ last shutdown ∥ drop; clone and device use ∥ last shutdown;
//! the exit hook ∥ clone, use and shutdown; loads and unload ∥ last shutdown; setup and
//! teardown callbacks that call `init`/`clone`/drop ∥ last shutdown; a setup callback
//! that gives back the last reference ∥ device use; generation N's device ∥ N's shutdown
//! and N+1's init; shutdown ∥ shutdown ∥ shutdown; a host function that gives back the last
//! reference on the executor its queue's drain waits for (the teardown, whose module
//! callback calls `init`, goes to a helper thread) ∥ init and device use (L6); two first
//! uses of a lazy platform ∥ the exit hook (opened at most once, never after teardown).
//! Every execution ends with: each platform opened was deinitialised exactly once and never used after, no module
//! outlived its runtime, nothing left unreported, and a fresh `init` opens a new
//! generation whose `shutdown` is the last reference (the count went back to zero).
//! Deadlocks (every thread blocked) and livelocks (the step bound) fail the execution.
//! Each scenario also checks that its schedules reached both sides of its race.
//!
//! # What it found
//!
//! The teardown ran under the lifecycle mutex and waited there for loads in flight, so
//! an `on_teardown` callback calling `init` (same thread), an `on_setup` calling `init`
//! while another thread shut down, and an `on_setup` giving back the last reference (the
//! teardown waited for its own load) all hung. Fixed in `lifecycle.rs` and
//! `generation.rs`; scenarios `callbacks_reenter_during_shutdown` and
//! `setup_gives_back_the_last_reference` here, and `tests/model_regressions.rs` on the
//! real handles, are the regression tests.
//!
//! # Bounds
//!
//! Each scenario runs `OFFLOAD_MODEL_ITERATIONS` executions (default 500) under the PCT
//! scheduler at depth 3 and as many under the uniformly random scheduler, each execution
//! bounded to 100,000 scheduling steps (the executions take under 1,500; beyond the bound
//! it counts as a livelock). A failure prints the schedule to pass to `shuttle::replay`.
//! Default: 9 scenarios × 1,000 executions, about 10 s in a debug build. Deep run,
//! `OFFLOAD_MODEL_ITERATIONS=20000` (360,000 executions): all passed in 387 s (debug,
//! 2-core VM).

#![allow(dead_code, unused_imports, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

#[path = "../src/config.rs"]
mod config;
#[path = "../src/erased/mod.rs"]
mod erased;
#[path = "../src/error.rs"]
mod error;
#[path = "../src/hal/mod.rs"]
mod hal;
#[path = "../src/runtime/generation.rs"]
mod runtime_generation;
#[path = "../src/runtime/lifecycle.rs"]
mod runtime_lifecycle;
#[path = "../src/runtime/platforms.rs"]
mod runtime_platforms;
#[path = "../src/runtime/reentry.rs"]
mod runtime_reentry;
#[path = "../src/trace.rs"]
mod trace;
#[path = "../src/typestate/mod.rs"]
mod typestate;
#[path = "../src/vocab/mod.rs"]
mod vocab;

pub use error::{Error, Result};
pub use hal::{BackendKind, DeviceInfo, Dims, GlobalInfo, KernelArg, MemKind, ParamKind};

/// `crate::runtime` as the lifecycle files see it.
mod runtime {
    pub(crate) use super::runtime_generation as generation;
    pub(crate) use super::runtime_lifecycle as lifecycle;
    pub(crate) use super::runtime_platforms as platforms;
    pub(crate) use super::runtime_reentry as reentry;

    /// The model's `runtime::sync`: the names of `src/runtime/sync.rs`, given to shuttle's
    /// primitives.
    pub(crate) mod sync {
        pub(crate) use shuttle::sync::MutexGuard;
        pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
        pub(crate) use shuttle::sync::{Condvar, Mutex, RwLock};
        use shuttle::sync::{RwLockReadGuard, RwLockWriteGuard};
        pub(crate) type JoinHandle = shuttle::thread::JoinHandle<()>;
        pub(crate) use shuttle::thread_local;

        pub(crate) fn join(helper: JoinHandle) {
            let _ = helper.join();
        }

        /// Shuttle's handles cannot tell: a helper is joined by the exit hook.
        pub(crate) fn finished(_: &JoinHandle) -> bool {
            false
        }

        /// The library's helper threads, as shuttle threads.
        pub(crate) fn spawn(
            name: &str,
            f: impl FnOnce() + Send + 'static,
        ) -> std::io::Result<JoinHandle> {
            shuttle::thread::Builder::new().name(name.into()).spawn(f)
        }
        use std::sync::PoisonError;

        pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
            m.lock().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
            l.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn wait<'a, T>(
            condvar: &Condvar,
            guard: MutexGuard<'a, T>,
        ) -> MutexGuard<'a, T> {
            condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
            l.write().unwrap_or_else(PoisonError::into_inner)
        }

        /// Per execution: shuttle drops a `lazy_static` when its execution ends.
        macro_rules! statics {
            ($($(#[$meta:meta])* static $name:ident: $ty:ty = $init:expr;)*) => {
                shuttle::lazy_static! {
                    $($(#[$meta])* static ref $name: $ty = $init;)*
                }
            };
        }
        pub(crate) use statics;

        /// The library sleeps 100 µs; here the waiting thread yields to the scheduler.
        pub(crate) fn backoff() {
            shuttle::thread::yield_now();
        }
    }

    /// Stand-in: the model registers no `atexit` hook; scenarios call
    /// `lifecycle::shutdown_at_exit` themselves.
    pub(crate) mod exit_hook {
        pub(crate) fn register() -> bool {
            true
        }

        pub(crate) fn after_open(_: crate::hal::BackendKind) {}
    }
}

/// Stand-in for `handles/device.rs`'s `Device` (its lifecycle-facing part, verbatim).
mod handles {
    use std::sync::Arc;

    use crate::error::Result;
    use crate::hal::{BackendKind, DeviceInfo};
    use crate::runtime::generation::{DeviceKey, Generation};

    #[derive(Clone)]
    pub struct Device {
        generation: Arc<Generation>,
        key: DeviceKey,
        backend: BackendKind,
    }

    impl Device {
        pub(crate) fn new(
            generation: Arc<Generation>,
            key: DeviceKey,
            backend: BackendKind,
        ) -> Self {
            Device {
                generation,
                key,
                backend,
            }
        }

        pub(crate) fn generation(&self) -> &Arc<Generation> {
            &self.generation
        }

        pub(crate) fn key(&self) -> DeviceKey {
            self.key
        }

        pub fn info(&self) -> Result<DeviceInfo> {
            self.generation
                .with_live(|live| live.device(self.key)?.info())
        }
    }

    /// The compile pool a generation carries: nothing to stop here.
    struct NoPool;

    impl crate::runtime::generation::Extension for NoPool {
        fn stop(&self) {}

        fn released(&self) {}

        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    pub(crate) fn compile_pool(
        _: &crate::config::Config,
    ) -> Box<dyn crate::runtime::generation::Extension> {
        Box::new(NoPool)
    }
}

/// Stand-in: IPC is not in the model.
mod ipc {
    use std::sync::Arc;

    use crate::config::Config;
    use crate::error::{Error, Result};
    use crate::runtime::generation::{Extension, Generation};

    pub struct IpcEndpoint;

    impl IpcEndpoint {
        pub(crate) fn bind(_: &Arc<Generation>) -> Result<IpcEndpoint> {
            Err(Error::invalid("IpcEndpoint::bind", "no IPC in the model"))
        }
    }

    /// The IPC state a generation carries: nothing to stop or release here.
    struct NoIpc;

    impl Extension for NoIpc {
        fn stop(&self) {}

        fn released(&self) {}

        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    pub(crate) fn extension(_: &Config) -> Box<dyn Extension> {
        Box::new(NoIpc)
    }
}

use erased::{DynProgram, PlatformEntry, Platforms};
use handles::Device;
use runtime::generation::{Generation, Kind, Resource, ResourceKey};
use runtime::lifecycle::{shutdown_at_exit, take_unreported_errors};
use runtime::sync::{Mutex, lock};
use typestate::{Offload, Ready};

// ---------------------------------------------------------------------------------------
// The model backend.

/// Per-execution counters (reset by [`model`]; shuttle runs one thread at a time).
static OPENS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static DEINITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static LIVE_PROGRAMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One platform instance (one generation's driver).
struct ModelPlatform {
    deinitialised: Arc<std::sync::atomic::AtomicBool>,
}

struct ModelDevice {
    deinitialised: Arc<std::sync::atomic::AtomicBool>,
}

struct ModelProgram {
    deinitialised: Arc<std::sync::atomic::AtomicBool>,
}

fn driver_call(deinitialised: &std::sync::atomic::AtomicBool, call: &str) {
    // A preemption point inside every driver call.
    shuttle::thread::yield_now();
    assert!(
        !deinitialised.load(SeqCst),
        "{call} after the platform's deinit (L4: everything before deinit)"
    );
}

impl hal::Platform for ModelPlatform {
    type Device = ModelDevice;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(_: &config::Config) -> Result<Self> {
        shuttle::thread::yield_now();
        OPENS.fetch_add(1, SeqCst);
        Ok(ModelPlatform {
            deinitialised: Arc::default(),
        })
    }

    fn name(&self) -> String {
        "model".into()
    }

    fn devices(&self) -> Vec<ModelDevice> {
        vec![ModelDevice {
            deinitialised: self.deinitialised.clone(),
        }]
    }

    fn deinit(&self) -> Result<()> {
        shuttle::thread::yield_now();
        assert!(
            !self.deinitialised.swap(true, SeqCst),
            "platform deinitialised twice (L1: once per init)"
        );
        DEINITS.fetch_add(1, SeqCst);
        Ok(())
    }
}

impl hal::Device for ModelDevice {
    type Buffer = hal::Never;
    type Program = ModelProgram;
    type Queue = hal::Never;
    type Event = hal::Never;

    fn info(&self) -> Result<DeviceInfo> {
        driver_call(&self.deinitialised, "Device::info");
        Ok(DeviceInfo::new(
            "model",
            "model",
            BackendKind::Reference,
            1 << 20,
            1,
        ))
    }
    fn alloc(&self, _: usize, _: MemKind) -> Result<hal::Never> {
        Err(Error::invalid("Device::alloc", "no memory in the model"))
    }
    fn free(&self, b: hal::Never) -> Result<()> {
        b.absurd()
    }
    fn read(&self, b: &hal::Never, _: usize, _: &mut [u8]) -> Result<()> {
        b.absurd()
    }
    fn write(&self, b: &mut hal::Never, _: usize, _: &[u8]) -> Result<()> {
        b.absurd()
    }
    fn fill(&self, b: &mut hal::Never, _: usize, _: usize, _: u8) -> Result<()> {
        b.absurd()
    }
    fn copy(&self, b: &hal::Never, _: usize, _: &mut hal::Never, _: usize, _: usize) -> Result<()> {
        b.absurd()
    }
    fn copy_within(&self, b: &mut hal::Never, _: usize, _: usize, _: usize) -> Result<()> {
        b.absurd()
    }
    fn with_mapped(&self, b: &mut hal::Never, _: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        b.absurd()
    }
    fn load(&self, _image: &[u8]) -> Result<ModelProgram> {
        driver_call(&self.deinitialised, "Device::load");
        LIVE_PROGRAMS.fetch_add(1, SeqCst);
        Ok(ModelProgram {
            deinitialised: self.deinitialised.clone(),
        })
    }
    fn validate(&self, _image: &[u8]) -> Result<()> {
        Ok(())
    }
    crate::no_compute!(BackendKind::Reference);
}

impl hal::Program for ModelProgram {
    type Kernel = hal::Never;

    fn kernel(&self, name: &str) -> Result<hal::Never> {
        Err(Error::invalid(
            "Module::kernel",
            format!("no kernel {name} in the model"),
        ))
    }
    fn params(kernel: &hal::Never) -> &[ParamKind] {
        kernel.absurd()
    }
    fn kernels(&self) -> Vec<String> {
        Vec::new()
    }
    fn globals(&self) -> Vec<String> {
        Vec::new()
    }
    fn global(&self, name: &str) -> Result<GlobalInfo> {
        Err(Error::invalid(
            "Module::global",
            format!("no global {name} in the model"),
        ))
    }
    fn read_global(&self, _: &str, _: usize, _: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn write_global(&self, _: &str, _: usize, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn unload(self) -> Result<()> {
        driver_call(&self.deinitialised, "Program::unload");
        LIVE_PROGRAMS.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// The model's default platforms: one model platform with one device.
struct Model;

impl Platforms for Model {
    fn platforms() -> Vec<PlatformEntry> {
        vec![PlatformEntry::of::<ModelPlatform>()]
    }
}

type Rt = Offload<Ready, Model>;

// ---------------------------------------------------------------------------------------
// Loads: the runtime-facing steps of `handles/program.rs` (see the module comment).

/// A loaded module as its generation lists it.
struct ModelModule {
    key: Mutex<Option<ResourceKey>>,
    raw: Mutex<Option<Box<dyn DynProgram>>>,
    /// Its teardown callback calls into the lifecycle (see [`reenter`]).
    reenters: bool,
    /// The generation it was loaded in.
    generation: u64,
}

impl Resource for ModelModule {
    /// The `on_teardown` callbacks: shutdown runs them on its own thread, before it locks
    /// the generation.
    fn prepare(self: Arc<Self>, _generation: &Arc<Generation>) -> Result<()> {
        if self.reenters {
            reenter("teardown callback", self.generation);
        }
        Ok(())
    }

    fn release(self: Arc<Self>) -> Result<()> {
        let raw = lock(&self.raw).take();
        raw.map_or(Ok(()), |raw| raw.unload())
    }
}

const IMAGE: &[u8] = b"model image";

/// What a callback (`on_setup`, `on_teardown`, a host function) may do: take a runtime
/// reference of its own, use it, and give it back.
fn reenter(callback: &'static str, generation: u64) {
    let rt = Rt::init().expect("init from a callback");
    seen(match (callback, rt.generation() == generation) {
        ("setup callback", true) => "setup callback: shared its live runtime",
        ("setup callback", false) => "setup callback: fresh runtime, its own shutting down",
        (_, true) => panic!("a teardown callback got the runtime being torn down"),
        (_, false) => "teardown callback: fresh runtime",
    });
    let _ = rt.devices().map(|d| use_device(&d[0]));
    let other = rt.clone();
    drop(other);
    drop(rt);
}

/// `Program::load` as the runtime sees it.
fn load(device: &Device) -> Result<Arc<ModelModule>> {
    load_with(device, false, || ())
}

/// A load whose setup runs `setup`, and whose setup and teardown callbacks call into the
/// lifecycle ([`reenter`]) when `reenters`.
fn load_with(device: &Device, reenters: bool, setup: impl FnOnce()) -> Result<Arc<ModelModule>> {
    let generation = device.generation();
    let _in_flight = generation.begin_load().ok_or_else(Error::shut_down)?;
    if !generation.is_live() {
        return Err(Error::shut_down());
    }
    let module = generation.with_live(|live| {
        let raw = live.device(device.key())?.clone().load(IMAGE)?;
        let (key, module) = live.register(Kind::Module, |_| {
            Arc::new(ModelModule {
                key: Mutex::new(None),
                raw: Mutex::new(Some(raw)),
                reenters,
                generation: generation.id,
            })
        })?;
        *lock(&module.key) = Some(key);
        Ok(module)
    })?;
    // Setup callbacks run here, with the load still counted in flight.
    shuttle::thread::yield_now();
    if reenters {
        reenter("setup callback", generation.id);
    }
    setup();
    Ok(module)
}

/// `Module::unload` / the last drop as the runtime sees it: unloads under the generation's
/// read lock, so a shutdown cannot deinitialise the platform in between; after shutdown
/// the teardown has unloaded it.
fn unload(generation: &Generation, module: &Arc<ModelModule>) -> Result<()> {
    let key = lock(&module.key).expect("registered");
    match generation.with_live(|live| {
        live.forget(Kind::Module, key);
        Ok(module.clone().release())
    }) {
        Ok(unloaded) => unloaded,
        Err(Error::ShutDown { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------------------------------
// The harness.

fn iterations() -> usize {
    std::env::var("OFFLOAD_MODEL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
}

/// Outcomes the executions of the running scenario reached, with how often.
static SEEN: std::sync::Mutex<std::collections::BTreeMap<&'static str, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Records that an execution reached `outcome` (so the run can show, and check, that the
/// schedules explored reach both sides of each race).
fn seen(outcome: &'static str) {
    *SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(outcome)
        .or_default() += 1;
}

/// Runs `scenario` under PCT (depth 3) and the random scheduler, `iterations()` times each,
/// with the end-of-execution checks of [`finish`]; then checks that every outcome in
/// `must_see` was reached.
fn model(name: &str, scenario: fn(), must_see: &[&str]) {
    // The lifecycle's statics and the counters are process-wide: one scenario at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = iterations();
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
    let started = std::time::Instant::now();
    let body = move || {
        OPENS.store(0, SeqCst);
        DEINITS.store(0, SeqCst);
        LIVE_PROGRAMS.store(0, SeqCst);
        scenario();
        finish();
    };
    let mut config = shuttle::Config::new();
    config.silence_warnings = true;
    // Executions here take under 1,500 steps (measured); one that takes 100,000 is
    // spinning (a livelock: a teardown waiting for a load that waits for it), and fails.
    config.max_steps = shuttle::MaxSteps::FailAfter(100_000);
    let pct = shuttle::scheduler::PctScheduler::new(3, n);
    shuttle::Runner::new(pct, config.clone()).run(body);
    let random = shuttle::scheduler::RandomScheduler::new(n);
    shuttle::Runner::new(random, config).run(body);
    let seen = std::mem::take(
        &mut *SEEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    eprintln!(
        "model {name}: {n} PCT (depth 3) + {n} random executions in {:.1?}; outcomes: {seen:?}",
        started.elapsed()
    );
    for outcome in must_see {
        assert!(
            seen.contains_key(outcome),
            "{name}: no schedule reached \"{outcome}\" (seen: {seen:?})"
        );
    }
}

/// The invariants every execution ends with (after its threads joined and every handle
/// was dropped or shut down).
fn finish() {
    assert!(
        take_unreported_errors().is_empty(),
        "an implicit shutdown met errors"
    );
    assert_eq!(
        LIVE_PROGRAMS.load(SeqCst),
        0,
        "a module outlived its runtime"
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

fn is_shut_down<T>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::ShutDown { .. }))
}

/// A use of a device: succeeds while its generation runs, `ShutDown` after (L3), never
/// anything else.
fn use_device(device: &Device) -> bool {
    match device.info() {
        Ok(_) => {
            seen("use: ok");
            true
        }
        Err(Error::ShutDown { .. }) => {
            seen("use: ShutDown");
            false
        }
        Err(e) => panic!("use of a device answered {e:?}, not Ok or ShutDown"),
    }
}

fn spawn(f: impl FnOnce() + Send + 'static) -> shuttle::thread::JoinHandle<()> {
    shuttle::thread::spawn(f)
}

fn join(threads: Vec<shuttle::thread::JoinHandle<()>>) {
    for t in threads {
        t.join().expect("a model thread panicked");
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios.

/// L1: three first `init`s race; one opens the platforms, the others wait for it and share
/// that generation or start a later one; each uses a device, then shuts down.
fn init_init_init() {
    let threads = (0..3)
        .map(|_| {
            spawn(|| {
                let rt = Rt::init().expect("init");
                let device = rt.devices().expect("devices").remove(0);
                assert!(use_device(&device), "a device of a held runtime works");
                rt.shutdown().expect("shutdown");
                // Ok while another thread still holds the generation, `ShutDown` after.
                let _ = use_device(&device);
            })
        })
        .collect();
    join(threads);
    seen(if OPENS.load(SeqCst) == 1 {
        "init: one generation shared by all"
    } else {
        "init: a later generation after a last shutdown"
    });
}

/// L1/L2: a last shutdown races an init (which must either share the generation before it
/// ends or start a fresh one after) and an implicit shutdown by drop.
fn init_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let dropped = rt.clone();
    let first = rt.generation();
    let a = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    let b = spawn(move || {
        let rt = Rt::init().expect("init while another shuts down");
        assert!(rt.generation() >= first);
        seen(if rt.generation() == first {
            "init: joined the live generation"
        } else {
            "init: fresh generation after the teardown"
        });
        let device = rt.devices().expect("devices").remove(0);
        assert!(use_device(&device), "the runtime init returned is live");
        drop(rt);
        let _ = use_device(&device);
    });
    let c = spawn(move || drop(dropped));
    join(vec![a, b, c]);
}

/// L3: handles used and the runtime cloned while the last reference shuts down; a use is
/// `Ok` before and `ShutDown` after, never a panic or a use of a deinitialised driver.
fn clone_use_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let other = rt.clone();
    let device = rt.devices().expect("devices").remove(0);
    let d2 = device.clone();
    let a = spawn(move || {
        let down = rt.shutdown().expect("shutdown");
        let _ = down.was_last();
    });
    let b = spawn(move || {
        let third = other.clone();
        drop(other);
        let mut gone = false;
        for _ in 0..2 {
            let works = use_device(&d2);
            assert!(!(gone && works), "a device worked again after ShutDown");
            gone |= !works;
        }
        let _ = third.devices().map(|d| d.len());
        third.shutdown().expect("shutdown");
    });
    let c = spawn(move || {
        let works = use_device(&device);
        let after = use_device(&device);
        assert!(works || !after, "ShutDown, then Ok");
    });
    join(vec![a, b, c]);
}

/// Whether a runtime is live, as far as the model backend can tell (opened more than
/// deinitialised).
fn other_live_probe() -> &'static str {
    if OPENS.load(SeqCst) > DEINITS.load(SeqCst) {
        "exit hook: found a live runtime"
    } else {
        "exit hook: nothing live"
    }
}

/// L1 with the exit hook: it shuts the generation down while references are still held,
/// cloned and given back.
fn exit_hook_vs_clone_and_shutdown() {
    let rt = Rt::init().expect("init");
    let other = rt.clone();
    let device = rt.devices().expect("devices").remove(0);
    let a = spawn(move || {
        let live = other_live_probe();
        shutdown_at_exit();
        seen(live);
    });
    let b = spawn(move || {
        let third = other.clone();
        let _ = use_device(&device);
        drop(third);
        other.shutdown().expect("shutdown");
    });
    let c = spawn(move || {
        let _ = rt.devices();
        drop(rt);
    });
    join(vec![a, b, c]);
}

/// L4/P2/P3: loads race the last shutdown: a load either completes before teardown (which
/// then unloads its module, after the load's setup and before the platform's deinit) or
/// gets `ShutDown`; an explicit unload races the teardown's.
fn load_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let d2 = device.clone();
    let a = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    let b = spawn(move || match load(&device) {
        Ok(module) => {
            seen("load: loaded");
            match unload(device.generation(), &module) {
                Ok(()) if lock(&module.raw).is_none() => seen("unload: done"),
                // The teardown has taken the generation and unloads it next.
                Ok(()) => seen("unload: left to the teardown in progress"),
                Err(e) => panic!("unload answered {e:?}"),
            }
        }
        Err(e) => {
            assert!(matches!(e, Error::ShutDown { .. }), "load answered {e:?}");
            seen("load: ShutDown");
        }
    });
    let c = spawn(move || {
        // A module kept past shutdown: the teardown unloads it.
        let kept = load(&d2);
        assert!(
            kept.is_ok() || is_shut_down(&kept),
            "load answered {:?}",
            kept.err()
        );
    });
    join(vec![a, b, c]);
}

/// Callbacks that call into the lifecycle while the last reference shuts down: a setup
/// (of a load in flight, which the shutdown waits for) and a teardown callback (which the
/// shutdown runs) each take and give back a runtime reference of their own. Neither may
/// deadlock; the runtime they get is live.
fn callbacks_reenter_during_shutdown() {
    let rt = Rt::init().expect("init");
    let other = rt.clone();
    let device = rt.devices().expect("devices").remove(0);
    let a = spawn(move || {
        // Kept: the teardown runs its callback.
        let loaded = load_with(&device, true, || ());
        assert!(
            loaded.is_ok() || is_shut_down(&loaded),
            "load answered {:?}",
            loaded.err()
        );
    });
    let b = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    let c = spawn(move || drop(other));
    join(vec![a, b, c]);
}

/// A setup callback gives back the last reference of its own runtime while another thread
/// uses a device: the teardown runs inside the load, so it must not wait for that load.
fn setup_gives_back_the_last_reference() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let d2 = device.clone();
    let held = Arc::new(Mutex::new(Some(rt)));
    let a = spawn(move || {
        let loaded = load_with(&device, false, move || drop(lock(&held).take()));
        if let Ok(module) = loaded {
            unload(device.generation(), &module).expect("unload");
        }
        seen(if device.generation().is_live() {
            "setup: runtime still live"
        } else {
            "setup: ended the runtime inside its load"
        });
    });
    let b = spawn(move || {
        let works = use_device(&d2);
        let after = use_device(&d2);
        assert!(works || !after, "ShutDown, then Ok");
    });
    join(vec![a, b]);
}

/// L2/L3: generations. Devices of generation N are refused (`ShutDown`) in generation
/// N+1, while N+1 runs and its own devices work.
fn generations() {
    let rt = Rt::init().expect("init");
    let old = rt.devices().expect("devices").remove(0);
    let first = rt.generation();
    let a = spawn(move || {
        let last = rt.shutdown().expect("shutdown").was_last();
        let rt = Rt::init().expect("re-init");
        if last {
            assert!(
                rt.generation() > first,
                "a new generation after the last shutdown"
            );
        }
        assert!(rt.generation() >= first);
        let new = rt.devices().expect("devices").remove(0);
        assert!(use_device(&new));
        rt.shutdown().expect("shutdown");
    });
    let b = spawn(move || {
        let rt = Rt::init().expect("init");
        let works = use_device(&old);
        if rt.generation() != first {
            // L6: a new generation may start while the old one still drains (its teardown's
            // first phase runs user code that may itself need `init`); the old devices then
            // work until it releases them, and never reach a deinitialised driver (the
            // model backend panics if they do).
            seen(if works {
                "generations: old device used while its generation drained"
            } else {
                "generations: old device refused in a new generation"
            });
        }
        let new = rt.devices().expect("devices").remove(0);
        assert!(use_device(&new));
        drop(rt);
        let _ = load(&old).map(|m| unload(old.generation(), &m));
    });
    join(vec![a, b]);
}

/// A queue as teardown sees it: its `prepare` drains it, which waits until the host
/// function its executor runs has returned (what the real queue's sync does).
struct ModelQueue {
    returned: Arc<(Mutex<bool>, shuttle::sync::Condvar)>,
}

impl Resource for ModelQueue {
    fn prepare(self: Arc<Self>, _generation: &Arc<Generation>) -> Result<()> {
        let (returned, told) = &*self.returned;
        let mut done = lock(returned);
        while !*done {
            done = told
                .wait(done)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        Ok(())
    }

    fn release(self: Arc<Self>) -> Result<()> {
        Ok(())
    }
}

/// L6: a host function gives back the last reference on the executor thread its queue's
/// drain waits for, while another thread inits and uses a device. The teardown must not
/// run on the executor (it would wait for itself): it runs on a helper thread once the
/// function returned, and its module's teardown callback calls `init` there (a fresh
/// runtime: the one being torn down is not handed out).
fn last_reference_on_an_executor() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let generation = device.generation().id;
    // Kept loaded: the teardown runs its callback, which calls `init`.
    let _module = load_with(&device, true, || ()).expect("load");
    let returned = Arc::new((Mutex::new(false), shuttle::sync::Condvar::new()));
    device
        .generation()
        .with_live(|live| {
            live.register(Kind::Queue, |_| {
                Arc::new(ModelQueue {
                    returned: returned.clone(),
                })
            })
        })
        .expect("queue");
    let executor = spawn(move || {
        // What the core's host-function wrapper does around the user's function.
        let user = runtime::reentry::enter(Some((generation, 1)));
        drop(rt);
        drop(user);
        let (done, told) = &*returned;
        *lock(done) = true;
        told.notify_all();
    });
    let other = spawn(move || {
        let rt = Rt::init().expect("init beside the teardown");
        seen(if rt.generation() == generation {
            "executor: init shared the live runtime"
        } else {
            "executor: init got a fresh runtime"
        });
        let d = rt.devices().expect("devices").remove(0);
        assert!(use_device(&d));
        drop(rt);
    });
    join(vec![executor, other]);
    // The helper's teardown ends on its own; wait for it (as the exit hook would).
    while runtime::lifecycle::settle_once() {}
}

/// L1: three references shut down at once: exactly one is the last, and it deinitialises.
fn shutdown_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let counted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let refs = [rt.clone(), rt.clone(), rt];
    let threads = refs
        .into_iter()
        .map(|rt| {
            let counted = counted.clone();
            spawn(move || {
                if rt.shutdown().expect("shutdown").was_last() {
                    counted.fetch_add(1, SeqCst);
                }
            })
        })
        .collect();
    join(threads);
    assert_eq!(counted.load(SeqCst), 1, "exactly one shutdown is the last");
}

/// Lazy platforms: two first uses (`device(kind)`, `devices()`) race each other and the
/// exit hook (which tears down whoever holds references). The platform opens at most once
/// in the generation, never after teardown took its state (the backend would count an open
/// that is never deinitialised, and `finish` fails), and each use gets a working device or
/// `ShutDown`.
fn lazy_open_vs_exit_hook() {
    let rt = Rt::init().expect("init");
    assert_eq!(
        OPENS.load(SeqCst),
        0,
        "init opened a platform nobody asked for"
    );
    let users: Vec<_> = (0..2)
        .map(|i| {
            let rt = rt.clone();
            spawn(move || {
                let device = if i == 0 {
                    rt.device(BackendKind::Reference)
                } else {
                    rt.devices().map(|mut all| all.remove(0))
                };
                drop(rt);
                match device {
                    Ok(device) => {
                        let _ = use_device(&device);
                    }
                    Err(e) => assert!(
                        matches!(e, Error::ShutDown { .. }),
                        "a first use answered {e:?}, not a device or ShutDown"
                    ),
                }
            })
        })
        .collect();
    drop(rt);
    let hook = spawn(shutdown_at_exit);
    join(users);
    join(vec![hook]);
    let opens = OPENS.load(SeqCst);
    assert!(
        opens <= 1,
        "one generation opened its platform {opens} times"
    );
    seen(if opens == 1 {
        "lazy: opened once by the first uses"
    } else {
        "lazy: the exit hook came first"
    });
}

#[test]
fn model_lazy_open_races_the_exit_hook() {
    model(
        "lazy_open_vs_exit_hook",
        lazy_open_vs_exit_hook,
        &[
            "lazy: opened once by the first uses",
            "lazy: the exit hook came first",
            "use: ok",
        ],
    );
}

#[test]
fn model_init_races_init() {
    model(
        "init_init_init",
        init_init_init,
        &[
            "init: one generation shared by all",
            "init: a later generation after a last shutdown",
        ],
    );
}

#[test]
fn model_init_races_shutdown() {
    model(
        "init_vs_shutdown",
        init_vs_shutdown,
        &[
            "init: joined the live generation",
            "init: fresh generation after the teardown",
        ],
    );
}

#[test]
fn model_clone_and_use_race_shutdown() {
    model(
        "clone_use_vs_shutdown",
        clone_use_vs_shutdown,
        &["use: ok", "use: ShutDown"],
    );
}

#[test]
fn model_exit_hook_races_clone_and_shutdown() {
    model(
        "exit_hook_vs_clone_and_shutdown",
        exit_hook_vs_clone_and_shutdown,
        &[
            "exit hook: found a live runtime",
            "use: ok",
            "use: ShutDown",
        ],
    );
}

#[test]
fn model_load_races_shutdown() {
    model(
        "load_vs_shutdown",
        load_vs_shutdown,
        &["load: loaded", "load: ShutDown", "unload: done"],
    );
}

#[test]
fn model_callbacks_reenter_the_lifecycle_during_shutdown() {
    model(
        "callbacks_reenter_during_shutdown",
        callbacks_reenter_during_shutdown,
        &[
            "setup callback: shared its live runtime",
            "setup callback: fresh runtime, its own shutting down",
            "teardown callback: fresh runtime",
        ],
    );
}

#[test]
fn model_setup_gives_back_the_last_reference() {
    model(
        "setup_gives_back_the_last_reference",
        setup_gives_back_the_last_reference,
        &[
            "setup: ended the runtime inside its load",
            "use: ok",
            "use: ShutDown",
        ],
    );
}

#[test]
fn model_generations() {
    model(
        "generations",
        generations,
        &[
            "generations: old device refused in a new generation",
            "use: ok",
            "use: ShutDown",
        ],
    );
}

#[test]
fn model_last_reference_on_an_executor() {
    model(
        "last_reference_on_an_executor",
        last_reference_on_an_executor,
        &[
            "executor: init shared the live runtime",
            "executor: init got a fresh runtime",
            "teardown callback: fresh runtime",
        ],
    );
}

#[test]
fn model_shutdown_races_shutdown() {
    model("shutdown_vs_shutdown", shutdown_vs_shutdown, &[]);
}
