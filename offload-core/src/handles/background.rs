//! Compiling programs in the background (Proteus's asynchronous compilation,
//! `PROTEUS_ASYNC_COMPILATION` / `PROTEUS_ASYNC_THREADS`): the bounded pool of one
//! generation that compiles programs from source while the application goes on
//! ([`crate::Program::compile_in_background`]), and the task of one (program, device) that
//! `load` waits for and whose result it reuses.
//!
//! The pool is an extension of the generation, not a global: it lives and ends with its
//! generation. Its threads (plain pthreads, `offload-thread`, so none pins a `dlclose`d
//! library) start as work needs them, up to `Config::compile_threads`; the teardown's
//! `stop` abandons the compiles still queued, waits for the running ones (each removes its
//! temporary files when it ends) and joins every thread, before any device is dropped (L2:
//! no offload thread outlives the shutdown; L4: devices outlive the work that uses them).
//!
//! Compile once: a task asks [`Compiled::image`], the same per-key compile-once path a
//! `load` takes, so however tasks and loads interleave the compiler runs once per key.
//! `load` takes over a task still queued (compiling on its own thread rather than waiting
//! for a free one), waits for a running one, and returns the error of one that failed:
//! the compiler's own `Error::Compile`, log and all. This module runs no user code.
//!
//! It works on a program's parts (its source and its tasks), never a `Program`, so it sits
//! below `module` and `program`: the `Program` calls that start a compile and ask whether
//! it ended are in `program`.

use crate::sync::{Arc, Condvar, JoinHandle, Mutex, PoisonError, lock, spawn};
use std::collections::VecDeque;

use crate::compile::Compiled;
use crate::config::Config;
use crate::erased::DynDevice;
use crate::error::{Error, Result};
use crate::hal::{BackendKind, Source};
use crate::handles::Device;
use crate::runtime::generation::{DeviceKey, Extension};

/// Where one (program, device)'s compile stands.
#[derive(Debug)]
enum State {
    /// Waiting for a thread of the pool.
    Queued,
    /// Compiling, on a thread of the pool or in a `load` that took it over.
    Running,
    /// Compiled: the image is in the program's memory.
    Done,
    /// The compile failed; the first `load` returns this.
    Failed(Error),
    /// Dropped from the queue by a shutdown before it ran; `load` compiles itself.
    Abandoned,
}

/// One (program, device)'s compile: its state, and a signal when that changes.
pub(super) struct Task {
    state: Mutex<State>,
    changed: Condvar,
}

/// What `load` found of a task.
enum Found {
    /// It was queued: this load compiles now, and must [`Task::finish`] it.
    TakenOver,
    /// Compiled, or nothing to wait for: load as usual (a compile already done is found in
    /// memory).
    Nothing,
    /// The compile failed: this is its error.
    Failed(Error),
}

impl Task {
    fn new(state: State) -> Arc<Task> {
        Arc::new(Task {
            state: Mutex::new(state),
            changed: Condvar::new(),
        })
    }

    fn set(&self, state: State) {
        *lock(&self.state) = state;
        self.changed.notify_all();
    }

    /// Takes the task from the queue for a thread of the pool: `false` if a `load` took it
    /// over meanwhile (or it was abandoned).
    fn start(&self) -> bool {
        let mut state = lock(&self.state);
        let queued = matches!(*state, State::Queued);
        if queued {
            *state = State::Running;
        }
        queued
    }

    /// What `load` makes of the task: takes it over if queued, waits if running, takes its
    /// error if it failed.
    fn for_load(&self) -> Found {
        let mut state = lock(&self.state);
        loop {
            match &*state {
                State::Queued => {
                    *state = State::Running;
                    return Found::TakenOver;
                }
                // Ends: the pool's shutdown waits for running compiles, never abandons them.
                State::Running => {
                    state = self
                        .changed
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                State::Failed(_) => {
                    // Given to this load; a later one compiles again (as without the pool).
                    return match std::mem::replace(&mut *state, State::Abandoned) {
                        State::Failed(e) => Found::Failed(e),
                        _ => Found::Nothing,
                    };
                }
                State::Done | State::Abandoned => return Found::Nothing,
            }
        }
    }

    /// Ends a compile taken over by a load: `Done`, or (failed, the error went to that
    /// load) nothing pending.
    fn finish(&self, compiled: bool) {
        // Not `Running` for anyone else: the load waited for a running compile to end.
        self.set(if compiled {
            State::Done
        } else {
            State::Abandoned
        });
    }

    fn finished(&self) -> bool {
        matches!(*lock(&self.state), State::Done | State::Failed(_))
    }

    /// Queued, running, done or failed with an error no load took yet: scheduling it again
    /// would add nothing.
    fn pending_or_done(&self) -> bool {
        !matches!(*lock(&self.state), State::Abandoned)
    }
}

/// One compile on the pool.
pub(crate) struct Job {
    task: Arc<Task>,
    source: Source,
    compiled: Arc<Compiled>,
    device: Arc<dyn DynDevice>,
    backend: BackendKind,
    config: Config,
}

impl Job {
    fn run(self) {
        if !self.task.start() {
            return;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.compiled
                .image(&self.source, &self.device, &self.config)
        }));
        self.task.set(match outcome {
            Ok(Ok(_)) => State::Done,
            Ok(Err(e)) => State::Failed(e),
            // A backend's compiler panicked: the load that waits for it must still end.
            Err(_) => State::Failed(Error::Compile {
                backend: self.backend,
                call: "Program::load",
                language: self.source.language(),
                log: "the compiler panicked (in the background compile pool)".into(),
            }),
        });
    }
}

impl Drop for Job {
    /// A job dropped before it ran (the shutdown abandoned it): `load` compiles itself.
    fn drop(&mut self) {
        let mut state = lock(&self.task.state);
        if matches!(*state, State::Queued) {
            *state = State::Abandoned;
            drop(state);
            self.task.changed.notify_all();
        }
    }
}

/// The compile pool of one generation (its extension): at most `size` threads, started as
/// queued work needs them.
pub(crate) struct CompilePool {
    size: usize,
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    queue: VecDeque<Job>,
    /// Threads waiting for work.
    idle: usize,
    threads: Vec<JoinHandle>,
    /// Set by `stop`: nothing is queued from then on.
    stopped: bool,
}

/// Makes the compile pool of a generation of this configuration (no thread yet).
pub(crate) fn compile_pool(config: &Config) -> Box<dyn Extension> {
    Box::new(CompilePool {
        size: config.compile_threads,
        shared: Arc::new(Shared {
            state: Mutex::new(PoolState::default()),
            work: Condvar::new(),
        }),
    })
}

impl CompilePool {
    /// Queues `job`, starting a thread if none is free and the pool is not full. A thread
    /// that cannot start leaves the job queued: the first `load` then compiles it.
    fn submit(&self, job: Job) -> Result<()> {
        let mut state = lock(&self.shared.state);
        if state.stopped {
            // Dropped after the lock: the task is then abandoned.
            drop(state);
            drop(job);
            return Err(Error::shut_down());
        }
        state.queue.push_back(job);
        if state.idle < state.queue.len() && state.threads.len() < self.size {
            let shared = self.shared.clone();
            match spawn("offload-compile", move || work(&shared)) {
                Ok(thread) => state.threads.push(thread),
                Err(e) => {
                    tracing::debug!(target: "offload::compile", error = %e, "no compile thread started: the first load compiles");
                }
            }
        }
        drop(state);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Abandons the queued compiles, waits for the running ones and joins every thread
    /// (L2). Idempotent.
    fn shut(&self) {
        let (queue, threads) = {
            let mut state = lock(&self.shared.state);
            state.stopped = true;
            (
                std::mem::take(&mut state.queue),
                std::mem::take(&mut state.threads),
            )
        };
        // Only started threads wait on it (a notification is a system call).
        if !threads.is_empty() {
            self.shared.work.notify_all();
        }
        if !queue.is_empty() {
            tracing::debug!(target: "offload::compile", abandoned = queue.len(), "shutdown abandons queued background compiles");
        }
        drop(queue);
        for thread in threads {
            // A pool thread runs no user code, so it never tears its own generation down;
            // should it ever, joining itself would hang: it ends on its own instead.
            if !thread.is_current() {
                thread.join();
            }
        }
    }
}

/// A pool thread: runs queued compiles until the pool stops.
fn work(shared: &Shared) {
    let mut state = lock(&shared.state);
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            job.run();
            state = lock(&shared.state);
        } else if state.stopped {
            return;
        } else {
            state.idle += 1;
            state = shared
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.idle -= 1;
        }
    }
}

impl Extension for CompilePool {
    /// The teardown begins releasing: no compile may outlive the devices (L2, L4).
    fn stop(&self) {
        self.shut();
    }

    fn released(&self) {}

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for CompilePool {
    /// A generation dropped without its teardown still joins its threads (L2).
    fn drop(&mut self) {
        self.shut();
    }
}

/// The tasks of one program, by (generation, device).
pub(super) type Tasks = Mutex<Vec<((u64, DeviceKey), Arc<Task>)>>;

/// Whether the compile of a program (from source, whose background compiles are `tasks`)
/// for `device` has ended ([`Program::compile_finished`](crate::Program::compile_finished)).
pub(super) fn finished(tasks: &Tasks, device: &Device) -> bool {
    let key = (device.generation().id, device.key());
    lock(tasks)
        .iter()
        .find(|(k, _)| *k == key)
        .is_some_and(|(_, task)| task.finished())
}

/// Queues the compile of a program from `source` for `device` on its generation's pool
/// ([`Program::compile_in_background`](crate::Program::compile_in_background)); `tasks`
/// are the program's.
pub(super) fn schedule(
    source: &Option<(Source, Arc<Compiled>)>,
    tasks: &Tasks,
    device: &Device,
) -> Result<()> {
    let Some((source, compiled)) = source else {
        return Ok(());
    };
    let generation = device.generation();
    if generation.is_closing() {
        return Err(Error::shut_down());
    }
    let Some(pool) = generation
        .extension::<CompilePool>()
        .filter(|pool| pool.size > 0)
    else {
        return Ok(());
    };
    let raw = generation.with_live(|live| Ok(live.device(device.key())?.clone()))?;
    let key = (generation.id, device.key());
    let task = {
        let mut tasks = lock(tasks);
        // Tasks of ended generations are over (their pool was stopped): forget them.
        tasks.retain(|((id, _), _)| *id == generation.id);
        if let Some((_, task)) = tasks.iter().find(|(k, _)| *k == key) {
            if task.pending_or_done() {
                return Ok(());
            }
        }
        tasks.retain(|(k, _)| *k != key);
        let task = Task::new(State::Queued);
        tasks.push((key, task.clone()));
        task
    };
    pool.submit(Job {
        task,
        source: source.clone(),
        compiled: compiled.clone(),
        device: raw,
        backend: device.backend(),
        config: generation.config.clone(),
    })
}

/// The image of a program from source, whose background compiles are `tasks`, for `device`
/// at its load: waits for a background
/// compile running for it and uses its result or returns its error, takes over one still
/// queued; `compile` (the compile-once path) does the rest. Called under the program's
/// load lock for the device, so one load at a time gets here per (program, device).
pub(super) fn image_for_load(
    tasks: &Tasks,
    device: &Device,
    compile: impl FnOnce() -> Result<Arc<[u8]>>,
) -> Result<Arc<[u8]>> {
    let key = (device.generation().id, device.key());
    let task = lock(tasks)
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, task)| task.clone());
    let (task, taken_over) = match task.as_ref().map(|task| task.for_load()) {
        Some(Found::Failed(e)) => return Err(e),
        Some(Found::TakenOver) => (task, true),
        Some(Found::Nothing) | None => (task, false),
    };
    let image = compile();
    match (&task, &image) {
        (Some(task), Ok(_)) => task.finish(true),
        (Some(task), Err(_)) if taken_over => task.finish(false),
        // Compiled by this load: `compile_finished` says so from now on.
        (None, Ok(_)) => {
            let mut tasks = lock(tasks);
            tasks.retain(|((id, _), _)| *id == key.0);
            if !tasks.iter().any(|(k, _)| *k == key) {
                tasks.push((key, Task::new(State::Done)));
            }
        }
        _ => {}
    }
    image
}
