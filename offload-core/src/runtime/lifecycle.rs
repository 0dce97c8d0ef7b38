//! The lifecycle: reference-counted, re-initialisable runtime generations (L1–L5), and the
//! typestate runtime users hold ([`Offload`]).
//!
//! One const-initialised mutex (`LIFECYCLE`) serialises every 0→1 and 1→0 transition and
//! holds the live generation; nothing else is global. Handles hold their generation
//! directly, so the global is touched only by `init`, `clone` and shutdown, where the mutex
//! costs nothing measurable.
//!
//! A 0→1 transition (opening the platforms) runs under the mutex, so concurrent first
//! `init`s wait for it (L1). A 1→0 transition is decided under the mutex (the count drops
//! to zero and the generation stops being the live one, in one critical section, so
//! exactly one caller tears it down), but the teardown itself runs after the mutex is
//! released: it runs user code — `on_teardown` callbacks, host functions still queued,
//! and the `on_setup` of loads in flight, which it waits for — and that code may call
//! `init`, `clone` or drop a runtime of its own. Under the mutex that deadlocked (found by
//! the model check, `tests/model.rs`; regression tests there and in
//! `tests/model_regressions.rs`). An `init` meanwhile waits for the teardown to finish
//! before it starts a fresh generation, so an object of generation N is refused whenever
//! N+1 runs (L2, L3) — unless it is called from that user code (on a thread that is
//! tearing down, or inside a load), which cannot wait for the teardown that waits for
//! it: that `init` starts the fresh generation at once. The exit hook waits for
//! teardowns in progress likewise.
//!
//! Re-entrancy (L6): a teardown has two phases. The first runs user code (it drains
//! queues, whose host functions run, and calls `on_teardown`); the second only releases
//! backend objects. An `init` waits only for teardowns in their second phase, which always
//! end: user code of the first phase may spawn and join a thread that calls `init`, and
//! that thread must not wait for the teardown waiting for it. And the last reference given
//! back *in* user code that offload runs (a host function, the drop of what it captured,
//! a module callback: `reentry`) is not torn down there — that code may run on the
//! executor the teardown drains, or under a lock the teardown takes — but on a helper
//! thread, after it returned. Helper threads are joined by the next `init` and by the exit
//! hook, so none outlives the runtime (L2).
//!
//! Why not `arc-swap` for the live pointer, the usual choice: its read path registers
//! a thread-local destructor on every thread that loads, and such a destructor pins a
//! `dlclose`d library until that thread exits (measured; L2 forbids it).

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::erased::{NoPlatforms, PlatformEntry, Platforms};
use crate::error::{Error, Result};
use crate::hal::BackendKind;
use crate::handles::Device;
use crate::runtime::config::{Config, Overrides, list};
use crate::runtime::generation::{Generation, Live, Unavailable, loading_here};
use crate::runtime::platforms::PlatformSlot;
use crate::runtime::reentry;
use crate::runtime::sync::{
    Condvar, JoinHandle, Mutex, Ordering, finished, join, lock, spawn, statics, thread_local, wait,
};

/// The process-wide lifecycle state. Const-initialised; starts over whenever the library
/// that contains it is loaded again (L2).
struct Lifecycle {
    current: Option<Arc<Generation>>,
    next_id: u64,
    exit_hook: bool,
    /// Teardowns in progress (outside the mutex); the exit hook waits for them.
    teardowns: usize,
    /// Of those, the ones releasing backend objects (their second phase, which runs no
    /// user code); `init` waits for them.
    releasing: usize,
    /// Helper threads running teardowns decided in user code (L6); joined once finished.
    helpers: Vec<JoinHandle>,
    /// Generations whose helper thread could not be started: torn down by the next `init`
    /// or the exit hook.
    pending: Vec<Arc<Generation>>,
}

statics! {
    static LIFECYCLE: Mutex<Lifecycle> = Mutex::new(Lifecycle {
        current: None,
        next_id: 0,
        exit_hook: false,
        teardowns: 0,
        releasing: 0,
        helpers: Vec::new(),
        pending: Vec::new(),
    });

    /// Signalled whenever a teardown ends.
    static TORN_DOWN: Condvar = Condvar::new();

    /// Errors of shutdowns nobody could be told about (a runtime dropped without
    /// `shutdown`, or shut down at exit). Bounded; see [`take_unreported_errors`].
    static UNREPORTED: Mutex<Vec<Error>> = Mutex::new(Vec::new());
}
const UNREPORTED_MAX: usize = 64;

fn report_later(result: Result<()>) {
    if let Err(e) = result {
        let mut list = lock(&UNREPORTED);
        if list.len() < UNREPORTED_MAX {
            list.push(e);
        }
    }
}

/// Takes the errors of implicit shutdowns: the last `Offload<Ready>` dropped without
/// calling `shutdown`, or the exit hook. At most 64 are kept.
///
/// ```
/// assert!(offload_core::take_unreported_errors().is_empty());
/// ```
pub fn take_unreported_errors() -> Vec<Error> {
    std::mem::take(&mut *lock(&UNREPORTED))
}

/// Acquires a reference to the live generation, starting one if there is none.
fn acquire(
    set: &Overrides,
    builtin: Vec<PlatformEntry>,
    extra: &[PlatformEntry],
) -> Result<Arc<Generation>> {
    let mut state = lock(&LIFECYCLE);
    state = reap(state);
    // L2/L3: a fresh generation starts only after the previous one released its backend
    // objects, so no driver is opened by one generation while another deinitialises it.
    // A teardown still running user code is not waited for (that code may be what calls
    // this, or wait for a thread that does: L6), nor is any by user code offload runs.
    while state.current.is_none() && state.releasing > 0 && !inside_teardown_or_load() {
        state = wait(&TORN_DOWN, state);
    }
    if let Some(current) = &state.current {
        // L1/L5: later inits share the generation and its configuration, unless they ask
        // explicitly for settings it does not have: sharing would silently give them
        // something else (issue 11, point 6).
        // What is in force is what opens. A request that names backends where none were
        // named at the start is compared with every platform, so all open; one that adds
        // platforms, with the platforms of those backends only.
        let extra_kinds: Vec<BackendKind> = extra.iter().map(|e| e.kind()).collect();
        let every = set.backends.is_some() && current.config.backends.is_none();
        let open = if every || !extra_kinds.is_empty() {
            current
                .with_live(|live| {
                    for slot in &live.platforms {
                        if every || extra_kinds.contains(&slot.kind()) {
                            let _ = slot.open(&current.config);
                        }
                    }
                    Ok(live.opened_kinds())
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let mismatches = set.mismatches(&current.config, &open, &extra_kinds);
        if !mismatches.is_empty() {
            tracing::debug!(
                target: "offload::init",
                generation = current.id,
                "request conflicts with the configuration in force"
            );
            return Err(conflict(current.id, &mismatches));
        }
        let references = current.refs.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(
            target: "offload::init",
            generation = current.id,
            references,
            "sharing the live runtime and its configuration"
        );
        return Ok(current.clone());
    }
    let config = Config::resolve(set)?;
    let mut entries = Vec::new();
    for entry in builtin {
        let (open, named) = config.selects(entry.kind());
        if open {
            entries.push((entry, named));
        }
    }
    entries.extend(extra.iter().map(|&e| (e, true)));
    if let Some(named) = &config.backends {
        if let Some(missing) = named
            .iter()
            .find(|k| !entries.iter().any(|(e, _)| e.kind() == **k))
        {
            tracing::warn!(
                target: "offload::init",
                backend = %missing,
                reason = "not in this build",
                "platform unavailable, and named explicitly: init fails"
            );
            return Err(Error::Unsupported {
                backend: *missing,
                call: "Offload::init",
                reason: format!(
                    "no {missing} platform in this build (the cargo feature `{missing}` of \
                     offload is off, or the backend has no implementation yet)"
                ),
            });
        }
    }
    state.next_id += 1;
    let generation = Arc::new(Generation::start(state.next_id, config, &entries)?);
    if !state.exit_hook {
        // Registered after the platforms opened their drivers, so it runs before their
        // library destructors (exit handlers run newest first).
        state.exit_hook = crate::runtime::exit_hook::register();
    }
    state.current = Some(generation.clone());
    Ok(generation)
}

/// The error of a `start` that asks explicitly for settings the live runtime lacks.
fn conflict(generation: u64, mismatches: &[String]) -> Error {
    Error::invalid(
        "Offload::start",
        format!(
            "an offload runtime is already live in this process (generation {generation}, \
             started by an earlier `init`, perhaps another library's), and the first `init` \
             fixes the configuration; this request asks explicitly for settings it does not \
             have: {}. Shut the other runtime down first (every `Offload<Ready>` of it), ask \
             for what is in force (`Offload::config()` shows it), or leave these settings \
             unset to share the live runtime",
            mismatches.join("; ")
        ),
    )
}

thread_local! {
    /// Teardowns running on this thread. A const-initialised `Cell` with no destructor:
    /// it registers nothing that would pin a `dlclose`d library (L2).
    static TEARING_DOWN_HERE: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread runs user code that a teardown may be waiting for: a teardown
/// callback (this thread is tearing down) or a setup callback (this thread is inside a
/// load). Such code must not wait for a teardown to end.
fn inside_teardown_or_load() -> bool {
    TEARING_DOWN_HERE.with(Cell::get) > 0 || loading_here() || reentry::in_user_code()
}

/// A teardown in progress, counted in `Lifecycle::teardowns` (and, in its second phase,
/// `Lifecycle::releasing`) until it ends, also if a backend panics in it.
struct TearingDown {
    releasing: std::cell::Cell<bool>,
    /// Counted in this thread's `TEARING_DOWN_HERE` (by [`TearingDown::run`]).
    here: std::cell::Cell<bool>,
}

impl TearingDown {
    /// Counts a teardown; called under the lifecycle lock, in the critical section that
    /// takes the generation out of service.
    fn start(state: &mut Lifecycle) -> TearingDown {
        state.teardowns += 1;
        TearingDown {
            releasing: std::cell::Cell::new(false),
            here: std::cell::Cell::new(false),
        }
    }

    /// Runs the teardown on this thread (marked as tearing down), then ends the count.
    fn run(self, generation: &Arc<Generation>) -> Result<()> {
        TEARING_DOWN_HERE.with(|t| t.set(t.get() + 1));
        self.here.set(true);
        generation.teardown(&|| {
            lock(&LIFECYCLE).releasing += 1;
            self.releasing.set(true);
        })
    }
}

impl Drop for TearingDown {
    fn drop(&mut self) {
        if self.here.get() {
            TEARING_DOWN_HERE.with(|t| t.set(t.get() - 1));
        }
        let mut state = lock(&LIFECYCLE);
        state.teardowns -= 1;
        if self.releasing.get() {
            state.releasing -= 1;
        }
        drop(state);
        TORN_DOWN.notify_all();
    }
}

/// Takes the helper threads that have finished out of `state` (joining them returns at
/// once).
fn finished_helpers(state: &mut Lifecycle) -> Vec<JoinHandle> {
    let (done, running) = std::mem::take(&mut state.helpers)
        .into_iter()
        .partition(finished);
    state.helpers = running;
    done
}

/// Joins the helper threads that have finished, and tears down the generations whose
/// helper could not start (with the lock released meanwhile). Returns the lock.
fn reap(
    mut state: crate::runtime::sync::MutexGuard<'static, Lifecycle>,
) -> crate::runtime::sync::MutexGuard<'static, Lifecycle> {
    let done = finished_helpers(&mut state);
    let pending = std::mem::take(&mut state.pending);
    if done.is_empty() && pending.is_empty() {
        return state;
    }
    let tearing: Vec<TearingDown> = pending
        .iter()
        .map(|_| TearingDown::start(&mut state))
        .collect();
    drop(state);
    for helper in done {
        join(helper);
    }
    for (generation, tearing_down) in pending.iter().zip(tearing) {
        report_later(tearing_down.run(generation));
    }
    lock(&LIFECYCLE)
}

/// Tears `generation` down on a helper thread (L6: the last reference was given back in
/// user code that the teardown may wait for). Its errors are reported later
/// ([`take_unreported_errors`]). If no thread starts, the closure (and with it the count)
/// is dropped, and the generation waits in `pending` for the next `init` or the exit hook.
fn tear_down_later(generation: &Arc<Generation>, tearing_down: TearingDown) {
    let on_helper = generation.clone();
    if !run_later("offload-teardown", move || {
        report_later(tearing_down.run(&on_helper));
    }) {
        lock(&LIFECYCLE).pending.push(generation.clone());
    }
}

/// Runs `f` on a helper thread of the runtime (joined once finished: by the next helper,
/// the next `init` or the exit hook, so none outlives a `dlclose`, L2), for work that
/// cannot run where it was decided (L6). Returns `false`, with `f` dropped unrun, when no
/// thread starts: callers leave the work to the generation's teardown.
pub(crate) fn run_later(name: &str, f: impl FnOnce() + Send + 'static) -> bool {
    match spawn(name, f) {
        Ok(helper) => {
            let done = {
                let mut state = lock(&LIFECYCLE);
                state.helpers.push(helper);
                finished_helpers(&mut state)
            };
            for finished in done {
                join(finished);
            }
            true
        }
        Err(e) => {
            tracing::warn!(
                target: "offload::lifecycle",
                helper = name,
                error = %e,
                "no helper thread: the generation's teardown (or the next init) does its work"
            );
            false
        }
    }
}

/// Gives back one reference; the last one tears the generation down. Returns whether this
/// was the last reference.
///
/// L1: the count and the live generation change under the lifecycle lock, so exactly one
/// caller sees 1→0 and tears down. The teardown runs after the lock is released (see the
/// module comment): its callbacks may take and give back references of their own, and a
/// concurrent `init` waits for it (see [`acquire`]).
fn release(generation: &Arc<Generation>) -> Result<bool> {
    let tearing_down = {
        let mut state = lock(&LIFECYCLE);
        let before = generation
            .refs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(1));
        if before != Ok(1) {
            // Other references remain, or the exit hook already shut this generation down.
            tracing::info!(
                target: "offload::shutdown",
                generation = generation.id,
                deinitialised = false,
                "reference given back; the runtime stays up for its other references"
            );
            return Ok(false);
        }
        if state
            .current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, generation))
        {
            state.current = None;
        }
        TearingDown::start(&mut state)
    };
    if reentry::in_user_code() {
        tracing::info!(
            target: "offload::shutdown",
            generation = generation.id,
            "last reference given back in user code offload runs: teardown on a helper thread"
        );
        tear_down_later(generation, tearing_down);
        return Ok(true);
    }
    let result = tearing_down.run(generation);
    tracing::info!(
        target: "offload::shutdown",
        generation = generation.id,
        deinitialised = true,
        errors = result.as_ref().err().map_or(0, |e| e.iter().count()),
        "last reference given back: runtime deinitialised"
    );
    result.map(|()| true)
}

/// The exit hook: shuts down the live generation whoever still holds references, and
/// waits for teardowns in progress on other threads, so no driver is left initialised
/// when the drivers' own library destructors run. A generation a teardown callback
/// started meanwhile is shut down too.
pub(crate) fn shutdown_at_exit() {
    loop {
        let mut state = reap(lock(&LIFECYCLE));
        if let Some(generation) = state.current.take() {
            // L1 at exit: the references still held become dead ones.
            generation.refs.store(0, Ordering::Relaxed);
            let tearing_down = TearingDown::start(&mut state);
            drop(state);
            tracing::debug!(
                target: "offload::shutdown",
                generation = generation.id,
                "still live at exit: shutting down"
            );
            report_later(tearing_down.run(&generation));
            continue;
        }
        drop(state);
        if !settle_once() {
            return;
        }
    }
}

/// One step of waiting for the teardowns running on other threads: waits until one ends,
/// or joins the helper threads of those that ended (L2). `false` when there is nothing to
/// wait for (or this thread runs a teardown or load that those may wait for).
pub(crate) fn settle_once() -> bool {
    let mut state = reap(lock(&LIFECYCLE));
    if inside_teardown_or_load() {
        return false;
    }
    if state.teardowns > 0 {
        drop(wait(&TORN_DOWN, state));
        true
    } else if !state.helpers.is_empty() {
        // Every teardown ended; its helper is returning. Join it.
        let helpers = std::mem::take(&mut state.helpers);
        drop(state);
        for helper in helpers {
            join(helper);
        }
        true
    } else {
        false
    }
}

/// A platform of a live runtime.
///
/// ```
/// # use offload_core::reference::Offload;
/// let rt = Offload::init()?;
/// let p = &rt.platforms()?[0];
/// assert_eq!(p.backend, offload_core::BackendKind::Reference);
/// assert_eq!(p.devices, 1);
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlatformInfo {
    /// Its backend.
    pub backend: BackendKind,
    /// The platform's own name (driver or instance).
    pub name: String,
    /// How many devices it has.
    pub devices: usize,
}

/// Typestate: a runtime being configured. See [`Offload::builder`].
#[derive(Debug, Default)]
pub struct Uninit {
    set: Overrides,
    extra: Vec<PlatformEntry>,
}

/// Typestate: a reference to the live runtime. Dropping it gives the reference back.
pub struct Ready {
    generation: Arc<Generation>,
    /// False once this reference was given back (by `shutdown`).
    holds: bool,
}

/// Typestate: a reference that was shut down. It has no device methods.
#[derive(Debug)]
pub struct Shutdown {
    generation: u64,
    last: bool,
}

/// The offload runtime, in typestate `S` (`Uninit`, `Ready`, `Shutdown`), opening the
/// default platforms `P` (the facade `offload` fixes `P` to the backends compiled in).
///
/// `Offload::init()` is reference counted and thread-safe (L1): the first call opens the
/// platforms, concurrent callers wait for it, and every call returns its own `Offload<Ready>`.
/// The last `shutdown()` (or drop) deinitialises everything, and `init()` works again with
/// fresh state (L2).
///
/// ```standalone_crate
/// use offload_core::{MemKind, reference::Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let buf = dev.alloc(64, MemKind::Device)?;
/// buf.write(0, &[7; 64])?;
/// let down = rt.shutdown()?;
/// assert!(down.was_last());
/// assert!(matches!(buf.write(0, &[1]), Err(offload_core::Error::ShutDown { .. })));
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Offload<S = Ready, P = NoPlatforms> {
    state: S,
    platforms: PhantomData<fn() -> P>,
}

impl<P: Platforms> Offload<Uninit, P> {
    /// Starts configuring a runtime. Settings made here override the environment. The
    /// `start` that initialises the runtime fixes its configuration (L5); a later `start`
    /// while it is live shares it if it asks for nothing else, and fails with
    /// `Error::InvalidArgument` if a setting made here differs from the one in force
    /// (see [`start`](Self::start)).
    ///
    /// ```standalone_crate
    /// use offload_core::reference::Offload;
    /// let rt = Offload::builder().ipc_cache_size(4).start()?;
    /// assert_eq!(rt.config()?.ipc_cache_size, 4);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn builder() -> Self {
        Offload {
            state: Uninit::default(),
            platforms: PhantomData,
        }
    }

    /// Opens only these backends (like `OFFLOAD_BACKENDS`; platforms open in discovery
    /// order). A backend named here whose driver is missing makes `start` fail instead of
    /// being skipped.
    ///
    /// An empty list opens no built-in platform: it is meant for a runtime of platforms
    /// added with [`platform`](Self::platform) only, and without one `start` fails with
    /// `Error::InvalidArgument` (a runtime with no platform at all has nothing to offer).
    ///
    /// ```standalone_crate
    /// use offload_core::{BackendKind, reference::Offload};
    /// let rt = Offload::builder().backends([BackendKind::Reference]).start()?;
    /// assert_eq!(rt.config()?.backends, Some(vec![BackendKind::Reference]));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn backends(mut self, kinds: impl IntoIterator<Item = BackendKind>) -> Self {
        let mut list: Vec<BackendKind> = Vec::new();
        for k in kinds {
            if !list.contains(&k) {
                list.push(k);
            }
        }
        self.state.set.backends = Some(list);
        self
    }

    /// Sets the IPC cache capacity (like `OFFLOAD_IPC_CACHE_SIZE`; 0 disables the cache).
    ///
    /// ```standalone_crate
    /// let rt = offload_core::reference::Offload::builder().ipc_cache_size(0).start()?;
    /// assert_eq!(rt.config()?.ipc_cache_size, 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn ipc_cache_size(mut self, entries: usize) -> Self {
        self.state.set.ipc_cache_size = Some(entries);
        self
    }

    /// Sets how long freeing exported memory waits for its peers to unmap it before the
    /// memory is quarantined (like `OFFLOAD_IPC_UNMAP_TIMEOUT_MS`; I3).
    ///
    /// ```standalone_crate
    /// let rt = offload_core::reference::Offload::builder().ipc_unmap_timeout_ms(250).start()?;
    /// assert_eq!(rt.config()?.ipc_unmap_timeout_ms, 250);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn ipc_unmap_timeout_ms(mut self, ms: u64) -> Self {
        self.state.set.ipc_unmap_timeout_ms = Some(ms);
        self
    }

    /// Sets how many CPU devices the host backend exposes (like `OFFLOAD_HOST_DEVICES`).
    ///
    /// ```standalone_crate
    /// let rt = offload_core::reference::Offload::builder().host_devices(3).start()?;
    /// assert_eq!(rt.devices()?.len(), 3);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn host_devices(mut self, count: usize) -> Self {
        self.state.set.host_devices = Some(count);
        self
    }

    /// Sets where compiled programs are cached across processes (like
    /// `OFFLOAD_CACHE_DIR`); `None` disables the disk cache (like `OFFLOAD_CACHE=0`).
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::builder().compile_cache(None).start()?;
    /// assert_eq!(rt.config()?.compile_cache, None);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn compile_cache(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.state.set.compile_cache = Some(dir);
        self
    }

    /// Adds a platform to open besides the defaults (a test backend, a plugin). Its
    /// failure to open fails `start`.
    ///
    /// ```
    /// use offload_core::{Offload, PlatformEntry, reference::Reference};
    /// let rt: Offload = Offload::builder().platform(PlatformEntry::of::<Reference>()).start()?;
    /// assert_eq!(rt.devices()?.len(), 1);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn platform(mut self, entry: PlatformEntry) -> Self {
        self.state.extra.push(entry);
        self
    }

    /// Initialises the runtime with this configuration, or takes a reference to the one
    /// already live, whose configuration stays in force (L5).
    ///
    /// Joining a live runtime succeeds when every setting made on this builder
    /// ([`backends`](Self::backends), [`ipc_cache_size`](Self::ipc_cache_size),
    /// [`host_devices`](Self::host_devices), [`platform`](Self::platform)) matches what is
    /// in force; settings not made here are not compared. Otherwise `start` fails with
    /// `Error::InvalidArgument` naming each setting asked and in force: shut the other
    /// runtime down first, or ask for what [`Offload::config`] shows.
    ///
    /// ```standalone_crate
    /// use offload_core::{BackendKind, Error, reference::Offload};
    /// let first = Offload::builder().host_devices(2).start()?;
    /// // Asking for nothing explicit, or for what is in force, shares the live runtime.
    /// let shared = Offload::builder().start()?;
    /// let same = Offload::builder().host_devices(2).start()?;
    /// assert_eq!(same.generation(), first.generation());
    /// // Asking for something else while it is live is an error, not a silent share.
    /// let e = Offload::builder().host_devices(3).start().unwrap_err();
    /// assert!(matches!(e, Error::InvalidArgument { .. }));
    /// assert!(e.to_string().contains("host_devices: asked 3, in force 2"), "{e}");
    /// // An empty backend list with no added platform would have no devices.
    /// assert!(Offload::builder().backends([]).start().is_err());
    /// # drop((shared, same));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn start(self) -> Result<Offload<Ready, P>> {
        let _span = tracing::info_span!(target: "offload::init", "offload::init").entered();
        if self.state.set.backends.as_ref().is_some_and(Vec::is_empty)
            && self.state.extra.is_empty()
        {
            return Err(Error::invalid(
                "Offload::backends",
                "the backend list is empty and no platform was added with `platform(..)`, so \
                 the runtime would have no devices: name the backends to open, e.g. \
                 `Offload::builder().backends([BackendKind::Host])`, or leave `backends` \
                 unset to open every compiled-in backend whose driver is found",
            ));
        }
        let generation = acquire(&self.state.set, P::platforms(), &self.state.extra)?;
        Ok(Offload {
            state: Ready {
                generation,
                holds: true,
            },
            platforms: PhantomData,
        })
    }
}

impl<P: Platforms> Offload<Ready, P> {
    /// Initialises the runtime with the defaults and environment, or takes another
    /// reference to the live one. Thread-safe; concurrent first callers wait for one
    /// initialisation.
    ///
    /// ```standalone_crate
    /// use offload_core::reference::Offload;
    /// let a = Offload::init()?;
    /// let b = Offload::init()?;
    /// assert_eq!(a.generation(), b.generation());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn init() -> Result<Self> {
        Offload::<Uninit, P>::builder().start()
    }

    /// The first device of backend `kind`, in platform order.
    ///
    /// When there is none, the error (`Error::Unsupported`, naming the backend) says why:
    /// its platform is open but has no device; it is unavailable, with the reason (usually
    /// its driver was not found, as [`unavailable`](Self::unavailable) lists); it is not
    /// among the backends in force (`OFFLOAD_BACKENDS` or
    /// [`backends`](Offload::backends)); or it is not compiled into this build.
    ///
    /// ```
    /// use offload_core::{BackendKind, Error, reference::Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.device(BackendKind::Reference)?;
    /// assert_eq!(dev.backend(), BackendKind::Reference);
    /// let e = rt.device(BackendKind::Cuda).unwrap_err();
    /// assert!(matches!(e, Error::Unsupported { backend: BackendKind::Cuda, .. }));
    /// assert!(e.to_string().contains("not compiled into this build"), "{e}");
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn device(&self, kind: BackendKind) -> Result<Device> {
        // Only the platforms of `kind` are opened (each once per generation).
        let (opened, failed) = match self.live_call(|live, generation| {
            let mut failed = None;
            for (index, slot) in live.platforms.iter().enumerate() {
                if slot.kind() != kind {
                    continue;
                }
                if let Some((key, _)) = live.devices_of(index, &generation.config).next() {
                    return Ok(Device::new(generation.clone(), key, kind));
                }
                failed = failed.or_else(|| slot.failed().cloned());
            }
            Err((live.opened_kinds(), failed))
        })? {
            Ok(device) => return Ok(device),
            Err(none) => none,
        };
        let generation = &self.state.generation;
        let why = if opened.contains(&kind) {
            format!("the {kind} platform is open but has no devices")
        } else if let Some(u) = failed {
            format!("the {kind} platform is unavailable: {}", u.reason)
        } else if P::platforms().iter().any(|e| e.kind() == kind) {
            let in_force = generation.config.backends.as_deref().unwrap_or(&[]);
            format!(
                "{kind} is not among the backends in force {} (set by OFFLOAD_BACKENDS or \
                 `Offload::builder().backends(..)` at the first init): add it there",
                list(in_force)
            )
        } else {
            format!(
                "{kind} is not compiled into this build (enable the cargo feature `{kind}` \
                 of offload)"
            )
        };
        Err(Error::Unsupported {
            backend: kind,
            call: "Offload::device",
            reason: format!("no {kind} device: {why}; platforms open: {}", list(&opened)),
        })
    }
}

impl<P> Offload<Ready, P> {
    /// The generation this runtime reference holds.
    pub(crate) fn held(&self) -> &Arc<Generation> {
        &self.state.generation
    }

    fn live_call<T>(&self, f: impl FnOnce(&Live, &Arc<Generation>) -> T) -> Result<T> {
        let generation = &self.state.generation;
        generation.with_live(|live| Ok(f(live, generation)))
    }

    /// The devices of every platform, in platform order. Opens every platform not opened
    /// yet (once per generation; [`device`](Offload::device) opens only the one asked for).
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::init()?;
    /// for dev in rt.devices()? {
    ///     println!("{}: {}", dev.backend(), dev.info()?.name);
    /// }
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn devices(&self) -> Result<Vec<Device>> {
        let generation = &self.state.generation;
        Ok(generation
            .listed()?
            .iter()
            .map(|&(key, backend)| Device::new(generation.clone(), key, backend))
            .collect())
    }

    /// The platforms that opened, with their device counts. Opens every platform not
    /// tried yet, like [`devices`](Offload::devices).
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::init()?;
    /// assert_eq!(rt.platforms()?.len(), 1);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn platforms(&self) -> Result<Vec<PlatformInfo>> {
        self.live_call(|live, generation| {
            generation.open_all(live);
            platform_infos(live)
        })
    }

    /// The platforms opened so far in this generation, with their device counts; opens
    /// none. Platforms open when first needed: [`device`](Offload::device) opens those of
    /// its backend, [`devices`](Offload::devices) and [`platforms`](Offload::platforms)
    /// all of them, and a backend named at `init` (`OFFLOAD_BACKENDS`,
    /// [`backends`](Offload::backends)) opens there.
    ///
    /// ```
    /// use offload_core::{BackendKind, PlatformEntry, reference::Offload};
    /// let rt = Offload::init()?;
    /// assert!(rt.opened_platforms()?.is_empty());
    /// rt.device(BackendKind::Reference)?;
    /// assert_eq!(rt.opened_platforms()?[0].backend, BackendKind::Reference);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn opened_platforms(&self) -> Result<Vec<PlatformInfo>> {
        self.live_call(|live, _| platform_infos(live))
    }

    /// The backends that were looked for but did not open (driver not found), and why.
    /// Tries every platform not tried yet, like [`devices`](Offload::devices).
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::init()?;
    /// assert!(rt.unavailable()?.is_empty());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn unavailable(&self) -> Result<Vec<Unavailable>> {
        self.live_call(|live, generation| {
            generation.open_all(live);
            live.platforms
                .iter()
                .filter_map(|p| p.failed().cloned())
                .collect()
        })
    }

    /// The configuration in force: fixed by the `init` that started this generation (L5).
    /// A later `start` that asks for other settings fails; ask for these instead.
    ///
    /// ```standalone_crate
    /// let rt = offload_core::reference::Offload::init()?;
    /// assert_eq!(rt.config()?.host_devices, 1);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn config(&self) -> Result<Config> {
        self.live_call(|_, g| g.config.clone())
    }

    /// A new IPC endpoint: a Unix-domain socket in a private directory that peers of this
    /// user connect to by its name, to exchange buffer ranges through the process's one
    /// sender-side cache (see [`crate::ipc`]). Closed by dropping it or at shutdown.
    ///
    /// ```
    /// use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// let endpoint = rt.ipc_endpoint()?;
    /// println!("peers connect to {}", endpoint.name());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn ipc_endpoint(&self) -> Result<crate::ipc::IpcEndpoint> {
        crate::ipc::IpcEndpoint::bind(&self.state.generation)
    }

    /// A number that identifies this runtime generation; a new one after every full
    /// shutdown.
    ///
    /// ```standalone_crate
    /// use offload_core::reference::Offload;
    /// let first = Offload::init()?;
    /// let n = first.generation();
    /// first.shutdown()?;
    /// assert_ne!(Offload::init()?.generation(), n);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.state.generation.id
    }

    /// Gives this reference back. The last reference deinitialises everything in the L4
    /// order, runs every step whatever fails, and returns all errors; handles made by the
    /// runtime then return `Error::ShutDown`.
    ///
    /// Either way the reference is gone: `Ok` and the [`ShutdownError`] of `Err` both hold
    /// the `Offload<Shutdown>`, whose [`was_last`](Offload::was_last) says whether this
    /// call deinitialised the runtime. `?` turns a `ShutdownError` into its [`Error`].
    ///
    /// ```standalone_crate
    /// use offload_core::reference::Offload;
    /// let a = Offload::init()?;
    /// let b = a.clone();
    /// assert!(!a.shutdown()?.was_last());
    /// assert!(b.shutdown()?.was_last());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn shutdown(mut self) -> Result<Offload<Shutdown, P>, ShutdownError<P>> {
        self.state.holds = false;
        let generation = self.state.generation.clone();
        drop(self);
        let (last, error) = match release(&generation) {
            Ok(last) => (last, None),
            // Only the last reference tears down, so only it meets errors.
            Err(e) => (true, Some(e)),
        };
        let down = Offload {
            state: Shutdown {
                generation: generation.id,
                last,
            },
            platforms: PhantomData,
        };
        match error {
            None => Ok(down),
            Some(error) => Err(ShutdownError { down, error }),
        }
    }
}

impl<P> Clone for Offload<Ready, P> {
    /// Takes another reference to the same runtime (L1).
    fn clone(&self) -> Self {
        let state = lock(&LIFECYCLE);
        let generation = self.state.generation.clone();
        // A generation that is no longer the live one (its last reference was given back,
        // or the exit hook shut it down) hands out dead references: their calls answer
        // `ShutDown` (L3), and giving them back is a no-op.
        let holds = state
            .current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &generation));
        if holds {
            generation.refs.fetch_add(1, Ordering::Relaxed);
        }
        Offload {
            state: Ready { generation, holds },
            platforms: PhantomData,
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        if self.holds {
            self.holds = false;
            report_later(release(&self.generation).map(|_| ()));
        }
    }
}

impl<P> Offload<Shutdown, P> {
    /// Whether this shutdown was the last reference and deinitialised the runtime.
    ///
    /// ```standalone_crate
    /// let rt = offload_core::reference::Offload::init()?;
    /// assert!(rt.shutdown()?.was_last());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn was_last(&self) -> bool {
        self.state.last
    }

    /// The generation this reference belonged to.
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::init()?;
    /// let n = rt.generation();
    /// assert_eq!(rt.shutdown()?.generation(), n);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.state.generation
    }
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("generation", &self.generation.id)
            .finish()
    }
}

impl<S: std::fmt::Debug, P> std::fmt::Debug for Offload<S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offload")
            .field("state", &self.state)
            .finish()
    }
}

/// A shutdown that met errors. The reference was given back all the same: the error holds
/// the [`Offload<Shutdown>`](Offload) (so [`was_last`](Self::was_last) tells whether the
/// runtime was deinitialised; every step of L4 ran) and the errors of the steps that
/// failed ([`errors`](Self::errors), or [`into_parts`](Self::into_parts) for both).
///
/// `?` converts it into its [`Error`] (the only error, or `Error::Multiple`), so
/// `rt.shutdown()?` works in a function returning [`crate::Result`].
///
/// ```standalone_crate
/// use offload_core::{Error, Program, reference::{Offload, fixture_image}};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let _module = Program::new(fixture_image())
///     .on_teardown(|_| Err("cannot flush the log".into()))
///     .load(&dev)?;
/// match rt.shutdown() {
///     Ok(down) => unreachable!("the teardown callback failed, got {down:?}"),
///     Err(e) => {
///         assert!(e.was_last(), "deinitialised all the same");
///         assert!(e.errors().all(|e| matches!(e, Error::Callback { .. })));
///         println!("{e}");
///         let (down, error) = e.into_parts();
///         assert!(down.was_last());
///         assert!(error.to_string().contains("cannot flush the log"));
///     }
/// }
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct ShutdownError<P = NoPlatforms> {
    down: Offload<Shutdown, P>,
    error: Error,
}

impl<P> ShutdownError<P> {
    /// Whether this shutdown was the last reference and deinitialised the runtime (every
    /// step ran, whatever failed).
    ///
    /// ```standalone_crate
    /// # use offload_core::{Program, reference::{Offload, fixture_image}};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(fixture_image()).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let e = rt.shutdown().unwrap_err();
    /// assert!(e.was_last());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn was_last(&self) -> bool {
        self.down.was_last()
    }

    /// The generation the reference belonged to.
    ///
    /// ```standalone_crate
    /// # use offload_core::{Program, reference::{Offload, fixture_image}};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(fixture_image()).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let n = rt.generation();
    /// assert_eq!(rt.shutdown().unwrap_err().generation(), n);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.down.generation()
    }

    /// The error as one value: the only one, or `Error::Multiple` of all of them.
    ///
    /// ```standalone_crate
    /// # use offload_core::{Error, Program, reference::{Offload, fixture_image}};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(fixture_image()).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let e = rt.shutdown().unwrap_err();
    /// assert!(matches!(e.error(), Error::Callback { callback: "on_teardown", .. }));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// Every error, one per failed step (an `Error::Multiple` is flattened).
    ///
    /// ```standalone_crate
    /// # use offload_core::{Program, reference::{Offload, fixture_image}};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(fixture_image()).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let e = rt.shutdown().unwrap_err();
    /// for error in e.errors() {
    ///     eprintln!("shutdown step failed: {error}");
    /// }
    /// assert_eq!(e.errors().count(), 1);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn errors(&self) -> impl Iterator<Item = &Error> {
        self.error.iter()
    }

    /// The shut-down runtime and the error.
    ///
    /// ```standalone_crate
    /// # use offload_core::{Program, reference::{Offload, fixture_image}};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(fixture_image()).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let (down, error) = rt.shutdown().unwrap_err().into_parts();
    /// assert!(down.was_last());
    /// assert!(error.to_string().contains("on_teardown"));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn into_parts(self) -> (Offload<Shutdown, P>, Error) {
        (self.down, self.error)
    }
}

/// Like [`Error`]'s, it says what `Display` says (`main` returning `Err` prints `{:?}`).
impl<P> std::fmt::Debug for ShutdownError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl<P> std::fmt::Display for ShutdownError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.was_last() {
            "deinitialised the runtime"
        } else {
            "gave back its reference"
        };
        write!(
            f,
            "offload shutdown of generation {} {what}, with errors: {}",
            self.generation(),
            self.error
        )
    }
}

/// The errors are part of the message, so there is no separate source.
impl<P> std::error::Error for ShutdownError<P> {}

impl<P> From<ShutdownError<P>> for Error {
    /// Keeps the error, dropping the shut-down runtime.
    fn from(e: ShutdownError<P>) -> Error {
        e.error
    }
}

/// The opened platforms of `live`, with their device counts.
fn platform_infos(live: &Live) -> Vec<PlatformInfo> {
    live.platforms
        .iter()
        .filter_map(PlatformSlot::opened_with_kind)
        .map(|(backend, open)| PlatformInfo {
            backend,
            name: open.name.clone(),
            devices: open.devices.len(),
        })
        .collect()
}
