//! The lifecycle: reference-counted, re-initialisable runtime generations (L1–L5) — the
//! process-wide state behind the typestate runtime users hold (`crate::typestate`), which
//! starts generations here (`acquire`), takes references (`retain`) and gives them back
//! (`release`).
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
//! the model check, `src/model/`; regression scenarios there and in
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

use crate::sync::{Arc, Condvar, JoinHandle, Mutex, Ordering, lock, spawn, statics, wait};
use std::cell::Cell;

use crate::config::{Config, Overrides};
use crate::erased::PlatformEntry;
use crate::error::{Caller, Error, Result};
use crate::hal::BackendKind;
use crate::runtime::generation::{Generation, MakeExtension, loading_here};
use crate::runtime::reentry;

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
    /// Threads waiting on `TORN_DOWN` (a teardown's end tells the condition variable only
    /// when some are: telling it costs a system call, most of a quiet init → shutdown).
    waiting: usize,
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
        waiting: 0,
    });

    /// Signalled whenever a teardown ends.
    static TORN_DOWN: Condvar = Condvar::new();

}

/// Acquires a reference to the live generation, starting one if there is none; a refusal
/// advises in `caller`'s words.
pub(crate) fn acquire(
    caller: Caller,
    set: &Overrides,
    builtin: Vec<PlatformEntry>,
    extra: &[PlatformEntry],
    extensions: &[MakeExtension],
) -> Result<Arc<Generation>> {
    crate::runtime::fork::refuse("Offload::init")?;
    crate::runtime::fork::started();
    let mut state = lock(&LIFECYCLE);
    state = reap(state);
    // L2/L3: a fresh generation starts only after the previous one released its backend
    // objects, so no driver is opened by one generation while another deinitialises it.
    // A teardown still running user code is not waited for (that code may be what calls
    // this, or wait for a thread that does: L6), nor is any by user code offload runs.
    while state.current.is_none() && state.releasing > 0 && !inside_teardown_or_load() {
        state = wait_torn_down(state);
    }
    if let Some(current) = &state.current {
        // L1/L5: later inits share the generation and its configuration, unless they ask
        // explicitly for settings it does not have: sharing would silently give them
        // something else.
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
                            // Each failure is kept in its slot and listed by `unavailable()`.
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
            return Err(conflict(caller, current.id, &mismatches));
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
    let generation = Arc::new(Generation::start(
        state.next_id,
        config,
        &entries,
        extensions,
    )?);
    if !state.exit_hook {
        // Registered after the platforms opened their drivers, so it runs before their
        // library destructors (exit handlers run newest first).
        state.exit_hook = crate::runtime::exit_hook::register(shutdown_at_exit);
    }
    state.current = Some(generation.clone());
    Ok(generation)
}

/// The error of a `start` that asks explicitly for settings the live runtime lacks.
/// Its advice is in `caller`'s words.
fn conflict(caller: Caller, generation: u64, mismatches: &[String]) -> Error {
    Error::invalid(
        "Offload::start",
        format!(
            "an offload runtime is already live in this process (generation {generation}, \
             started by an earlier init, perhaps another library's), and the first init \
             fixes the configuration (L5); this request asks explicitly for settings it does \
             not have: {}. Shut the other runtime down first ({}), ask for what is in \
             force{}, or leave these settings unset to share the live runtime",
            mismatches.join("; "),
            caller.runtime_references(),
            caller.config_in_force(),
        ),
    )
}

crate::sync::thread_local! {
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
        let result = tracing::info_span!(
            target: "offload::shutdown",
            "shutdown",
            generation = generation.id
        )
        .in_scope(|| {
            generation.teardown(&|| {
                lock(&LIFECYCLE).releasing += 1;
                self.releasing.set(true);
            })
        });
        // After the span closed, so that the trace holds the whole shutdown.
        crate::trace::write(generation.config.trace.as_deref());
        result
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
        // Read under the lock: a waiter counts itself there before it waits, and one that
        // counts itself later sees the teardown ended before it waits.
        let waiting = state.waiting > 0;
        drop(state);
        if waiting {
            TORN_DOWN.notify_all();
        }
    }
}

/// Waits on `TORN_DOWN`, counted in `waiting` meanwhile.
fn wait_torn_down(
    mut state: crate::sync::MutexGuard<'static, Lifecycle>,
) -> crate::sync::MutexGuard<'static, Lifecycle> {
    state.waiting += 1;
    let mut state = wait(&TORN_DOWN, state);
    state.waiting -= 1;
    state
}

/// Takes the helper threads that have finished out of `state` (joining them returns at
/// once).
fn finished_helpers(state: &mut Lifecycle) -> Vec<JoinHandle> {
    let (done, running) = std::mem::take(&mut state.helpers)
        .into_iter()
        .partition(JoinHandle::is_finished);
    state.helpers = running;
    done
}

/// Joins the helper threads that have finished, and tears down the generations whose
/// helper could not start (with the lock released meanwhile). Returns the lock.
fn reap(
    mut state: crate::sync::MutexGuard<'static, Lifecycle>,
) -> crate::sync::MutexGuard<'static, Lifecycle> {
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
        helper.join();
    }
    for (generation, tearing_down) in pending.iter().zip(tearing) {
        crate::runtime::unreported::report_later(tearing_down.run(generation));
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
        crate::runtime::unreported::report_later(tearing_down.run(&on_helper));
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
                finished.join();
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
pub(crate) fn release(generation: &Arc<Generation>) -> Result<bool> {
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
            crate::runtime::unreported::report_later(tearing_down.run(&generation));
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
        drop(wait_torn_down(state));
        true
    } else if !state.helpers.is_empty() {
        // Every teardown ended; its helper is returning. Join it.
        let helpers = std::mem::take(&mut state.helpers);
        drop(state);
        for helper in helpers {
            helper.join();
        }
        true
    } else {
        false
    }
}

/// Takes another reference to `generation` (L1), when it is still the live one: `false`
/// for a generation whose last reference was given back, or that the exit hook shut down.
/// Such a generation hands out dead references: their calls answer `ShutDown` (L3), and
/// giving them back is a no-op.
pub(crate) fn retain(generation: &Arc<Generation>) -> bool {
    let state = lock(&LIFECYCLE);
    let holds = state
        .current
        .as_ref()
        .is_some_and(|c| Arc::ptr_eq(c, generation));
    if holds {
        generation.refs.fetch_add(1, Ordering::Relaxed);
    }
    holds
}
