//! L6 by exhaustion: every offload call in every place where offload runs user code.
//!
//! A cell is (context, action, whether the user code then panics). The context is where
//! offload runs the user code: a host function, the drop of a value a host function
//! captured, `on_setup`, or `on_teardown` during `unload()`, during the last `Module` drop
//! or during `shutdown()`. The action is the offload call made there. Each cell runs on a
//! thread of its own under a 10 s watchdog (a cell that does not finish fails the suite,
//! naming it), must give the documented outcome (the same on every backend:
//! [`expected`]), and must leave a runtime that a fresh `init` can use.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::{Check, Fixtures, first_device, init, variant};
use offload_core::{
    Buffer, Device, Error, MemKind, Module, Offload, Platforms, Program, Queue, Ready,
};

/// Where offload runs the user code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Context {
    HostFn,
    CapturedDrop,
    Setup,
    TeardownUnload,
    TeardownLastDrop,
    TeardownShutdown,
}

/// The offload call the user code makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Drop the last `Offload<Ready>` (in the shutdown context: of a runtime it starts).
    DropLast,
    /// `shutdown()` the last one.
    Shutdown,
    /// `init`, use a device, shut that reference down.
    Init,
    /// Load the program whose callback runs (elsewhere: a loaded one) on the device.
    LoadSame,
    LoadOther,
    /// Unload its own module (elsewhere: a loaded one).
    UnloadOwn,
    /// `sync` its own queue (the one running it; elsewhere a queue with work).
    SyncOwn,
    SyncOther,
    /// Record an event on its own queue and wait for it.
    RecordWaitOwn,
    /// Free a buffer its queue wrote.
    FreeUsed,
    /// Drop its own queue (the last handle to it).
    DropOwnQueue,
    /// Enqueue a write and a host function on its own queue.
    EnqueueOwn,
    /// Spawn a thread that calls `init` (and uses and shuts down that runtime), join it.
    SpawnInit,
}

const CONTEXTS: [Context; 6] = [
    Context::HostFn,
    Context::CapturedDrop,
    Context::Setup,
    Context::TeardownUnload,
    Context::TeardownLastDrop,
    Context::TeardownShutdown,
];

const ACTIONS: [Action; 13] = [
    Action::DropLast,
    Action::Shutdown,
    Action::Init,
    Action::LoadSame,
    Action::LoadOther,
    Action::UnloadOwn,
    Action::SyncOwn,
    Action::SyncOther,
    Action::RecordWaitOwn,
    Action::FreeUsed,
    Action::DropOwnQueue,
    Action::EnqueueOwn,
    Action::SpawnInit,
];

/// The documented outcome of a cell (docs/contract.md, L6), the same on every backend:
/// `action=<ok | error variant>; <what the call that ran the user code returned>`.
pub(super) fn expected(context: Context, action: Action, panics: bool) -> String {
    use Action::*;
    use Context::*;
    let host_fn = matches!(context, HostFn | CapturedDrop);
    let action_result = match (context, action) {
        // It would wait for itself.
        (HostFn | CapturedDrop, SyncOwn | RecordWaitOwn) => "InvalidArgument",
        // No new loads once shutdown has begun.
        (TeardownShutdown, LoadSame | LoadOther) => "ShutDown",
        // The module is not ready before its setup returns, and going away in teardown.
        (Setup | TeardownUnload | TeardownLastDrop, LoadSame) => "InvalidArgument",
        _ => "ok",
    };
    let outer = match context {
        // A host function that drops its own queue and then panics: nobody can sync the
        // queue, so its drop hands the panic to the next shutdown (L8), the test's own.
        _ if host_fn && action == DropOwnQueue && panics => "-; final=Callback",
        // The runtime may be gone by the time the test syncs: not asserted.
        _ if host_fn && matches!(action, DropLast | Shutdown | DropOwnQueue) => "-",
        _ if host_fn && panics => "sync=Callback",
        _ if host_fn => "sync=ok",
        Setup if panics => "load=Callback",
        // A setup that unloads its own module fails the load.
        Setup if action == UnloadOwn => "load=InvalidArgument",
        Setup => "load=ok",
        TeardownUnload if panics => "unload=Callback",
        TeardownUnload => "unload=ok",
        // A drop cannot report: its teardown's error comes with the next shutdown.
        // (Where the action gave back the last reference, the helper's teardown reports
        // it later: `take_unreported_errors`.)
        TeardownLastDrop if panics && !matches!(action, DropLast | Shutdown) => {
            "drop=done; final=Callback"
        }
        TeardownLastDrop => "drop=done",
        TeardownShutdown if panics => "shutdown=Callback",
        TeardownShutdown => "shutdown=ok",
        HostFn | CapturedDrop => unreachable!(),
    };
    format!("action={action_result}; {outer}")
}

/// What the user code can reach.
struct Scene<P: Platforms> {
    /// A reference the action may give back (the last one, for DropLast and Shutdown).
    rt: Mutex<Option<Offload<Ready, P>>>,
    dev: Device,
    image: Vec<u8>,
    /// A loaded module of the fixture, and its program.
    loaded: Program,
    /// The program whose callback runs the action (callback contexts).
    callback_program: Mutex<Option<Program>>,
    module: Mutex<Option<Module>>,
    own_queue: Mutex<Option<Arc<Queue>>>,
    other_queue: Queue,
    buffer: Mutex<Option<Buffer>>,
    /// What the action returned.
    outcome: Mutex<Option<String>>,
    /// Told when the action has run.
    done: Mutex<Option<mpsc::Sender<()>>>,
}

fn take<T>(m: &Mutex<Option<T>>) -> Option<T> {
    m.lock().unwrap_or_else(PoisonError::into_inner).take()
}

fn result_text<T>(r: offload_core::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => variant(&e),
    }
}

impl<P: Platforms> Scene<P> {
    /// Runs `action` as user code with `own` the module of the running callback, if any.
    fn act(&self, action: Action, own: Option<&Module>, panics: bool) {
        let outcome = self.run(action, own);
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        if let Some(done) = take(&self.done) {
            let _ = done.send(());
        }
        if panics {
            panic!("a planted panic in user code");
        }
    }

    fn run(&self, action: Action, own: Option<&Module>) -> String {
        let own_queue = || {
            self.own_queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        };
        match action {
            Action::DropLast => match take(&self.rt) {
                Some(rt) => {
                    drop(rt);
                    "ok".into()
                }
                None => result_text(Offload::<Ready, P>::init().map(drop)),
            },
            Action::Shutdown => {
                let rt = take(&self.rt).map_or_else(Offload::<Ready, P>::init, Ok);
                result_text(rt.and_then(|rt| rt.shutdown().map_err(Error::from)))
            }
            Action::Init => result_text(use_a_runtime::<P>()),
            Action::LoadSame => {
                let program = match own {
                    // Its own program (a clone would keep the module of a last-drop context).
                    Some(module) => module.program(),
                    None => self.loaded.clone(),
                };
                result_text(program.load(&self.dev))
            }
            Action::LoadOther => result_text(Program::new(&self.image).load(&self.dev)),
            Action::UnloadOwn => match own {
                Some(module) => result_text(module.clone().unload()),
                None => match take(&self.module) {
                    Some(module) => result_text(module.unload()),
                    None => "no module".into(),
                },
            },
            Action::SyncOwn => match own_queue() {
                Some(q) => result_text(q.sync()),
                None => "no queue".into(),
            },
            Action::SyncOther => result_text(self.other_queue.sync()),
            Action::RecordWaitOwn => match own_queue() {
                Some(q) => result_text(q.record().and_then(|e| e.sync())),
                None => "no queue".into(),
            },
            Action::FreeUsed => match take(&self.buffer) {
                Some(b) => result_text(b.free()),
                None => "no buffer".into(),
            },
            Action::DropOwnQueue => {
                drop(take(&self.own_queue));
                "ok".into()
            }
            Action::EnqueueOwn => match own_queue() {
                Some(q) => {
                    let written = self
                        .buffer
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .as_ref()
                        .map(|b| q.write(b, 0, &[1, 2, 3, 4]));
                    result_text(
                        written
                            .unwrap_or(Ok(()))
                            .and_then(|()| q.enqueue_host_fn(|| {})),
                    )
                }
                None => "no queue".into(),
            },
            Action::SpawnInit => match std::thread::spawn(use_a_runtime::<P>).join() {
                Ok(r) => result_text(r),
                Err(_) => "the thread panicked".into(),
            },
        }
    }
}

/// `init`, one allocation, `shutdown`.
fn use_a_runtime<P: Platforms>() -> offload_core::Result<()> {
    let rt = Offload::<Ready, P>::init()?;
    let dev = rt
        .devices()?
        .into_iter()
        .next()
        .ok_or_else(|| Error::ShutDown {
            call: "Offload::devices",
            object: "a runtime with no device left".into(),
            caller: offload_core::Caller::Rust,
        })?;
    dev.alloc(64, MemKind::Device)?.free()?;
    drop(dev);
    rt.shutdown().map(drop).map_err(Error::from)
}

/// Runs `f` on its own thread; `Err` naming `what` if it has not finished in 10 s (the
/// thread is left behind: the suite fails anyway).
fn watched<T: Send + 'static>(what: String, f: impl FnOnce() -> T + Send + 'static) -> Check<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err(format!("{what}: the cell panicked (see above)")),
        Err(_) => Err(format!("{what}: did not finish within 10 s (a hang)")),
    }
}

/// One cell: sets the scene, runs the context, returns its outcome line.
fn cell<P: Platforms>(
    fixtures: &Fixtures,
    context: Context,
    action: Action,
    panics: bool,
) -> Check<String> {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let loaded = Program::new(&fixtures.image);
    let module = loaded
        .load(&dev)
        .map_err(|e| format!("Program::load: {e}"))?;
    let buffer = dev.alloc(64, MemKind::Device).map_err(|e| e.to_string())?;
    let own_queue = Arc::new(dev.queue().map_err(|e| e.to_string())?);
    own_queue
        .write(&buffer, 0, &[7; 64])
        .map_err(|e| e.to_string())?;
    let other_queue = dev.queue().map_err(|e| e.to_string())?;
    other_queue
        .write(&buffer, 0, &[8; 4])
        .map_err(|e| e.to_string())?;
    let (done_tx, done_rx) = mpsc::channel();
    let gives_back_last = matches!(action, Action::DropLast | Action::Shutdown)
        && context != Context::TeardownShutdown;
    let scene = Arc::new(Scene::<P> {
        rt: Mutex::new(Some(rt.clone())),
        dev: dev.clone(),
        image: fixtures.image.clone(),
        loaded: loaded.clone(),
        callback_program: Mutex::new(None),
        module: Mutex::new(Some(module)),
        own_queue: Mutex::new(Some(own_queue.clone())),
        other_queue,
        buffer: Mutex::new(Some(buffer)),
        outcome: Mutex::new(None),
        done: Mutex::new(Some(done_tx)),
    });
    // The test keeps its own reference only where the action does not give back the last.
    let mut rt = Some(rt);
    if gives_back_last {
        drop(rt.take());
    } else {
        drop(take(&scene.rt));
    }
    let weak: Weak<Scene<P>> = Arc::downgrade(&scene);
    let callback = move |m: &Module| -> Result<(), offload_core::CallbackError> {
        if let Some(scene) = weak.upgrade() {
            scene.act(action, Some(m), panics);
        }
        Ok(())
    };
    let wait_done = |what: &str| -> Check {
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| format!("{what}: the user code did not run"))
    };
    let outer = match context {
        Context::HostFn | Context::CapturedDrop => {
            let q = own_queue;
            let acting = scene.clone();
            if context == Context::HostFn {
                q.enqueue_host_fn(move || acting.act(action, None, panics))
            } else {
                let guard = OnDrop(Some(move || acting.act(action, None, panics)));
                q.enqueue_host_fn(move || {
                    let _keep = &guard;
                })
            }
            .map_err(|e| format!("Queue::enqueue_host_fn: {e}"))?;
            if matches!(action, Action::DropOwnQueue) {
                // The scene's handle is the last one once the test drops its own: the host
                // function drops it. An event after it makes every backend run it.
                let after = q.record().map_err(|e| format!("Queue::record: {e}"))?;
                drop(q);
                after.sync().map_err(|e| format!("Event::sync: {e}"))?;
                wait_done("the host function")?;
                "-".to_string()
            } else {
                let synced = q.sync();
                wait_done("the host function")?;
                if gives_back_last {
                    "-".to_string()
                } else {
                    format!("sync={}", result_text(synced))
                }
            }
        }
        Context::Setup => {
            let program = with_callback(&scene, |p| p.on_setup(callback));
            let loaded = program.load(&dev);
            format!("load={}", result_text(loaded))
        }
        Context::TeardownUnload => {
            let program = with_callback(&scene, |p| p.on_teardown(callback));
            let module = program.load(&dev).map_err(|e| e.to_string())?;
            format!("unload={}", result_text(module.unload()))
        }
        Context::TeardownLastDrop => {
            let program = with_callback(&scene, |p| p.on_teardown(callback));
            let module = program.load(&dev).map_err(|e| e.to_string())?;
            drop((module, program));
            // The program keeps its module (P2): the last drop is of its last clone.
            drop(take(&scene.callback_program));
            "drop=done".to_string()
        }
        Context::TeardownShutdown => {
            let program = with_callback(&scene, |p| p.on_teardown(callback));
            // Kept loaded: its teardown runs in the shutdown.
            let _kept = program.load(&dev).map_err(|e| e.to_string())?;
            let shut = rt
                .take()
                .ok_or("the test holds no reference")?
                .shutdown()
                .map(drop)
                .map_err(Error::from);
            format!("shutdown={}", result_text(shut))
        }
    };
    let action_result = take(&scene.outcome).unwrap_or_else(|| "not run".into());
    drop(scene);
    drop(dev);
    let mut line = format!("action={action_result}; {outer}");
    if let Some(rt) = rt {
        if let Err(e) = rt.shutdown() {
            line.push_str(&format!("; final={}", variant(&Error::from(e))));
        }
    }
    Ok(line)
}

/// A program of its own for the callback (the scene's loaded module stays as it is), kept
/// by the scene until the test lets it go.
fn with_callback<P: Platforms>(scene: &Scene<P>, f: impl FnOnce(Program) -> Program) -> Program {
    let program = f(Program::new(&scene.image));
    *scene
        .callback_program
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(program.clone());
    program
}

/// Runs its closure when dropped.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// The whole table: every cell within 10 s with its documented outcome, and a fresh runtime
/// usable after each.
///
/// `OFFLOAD_REENTRY_ONLY=<prefix>` runs only the cells whose name starts with it (e.g.
/// `HostFn x DropLast`), for a look at one cell.
pub(super) fn reentrancy<P: Platforms>(fixtures: &Fixtures) -> Check {
    let only = std::env::var("OFFLOAD_REENTRY_ONLY").ok();
    let mut failures = Vec::new();
    for context in CONTEXTS {
        for action in ACTIONS {
            for panics in [false, true] {
                let name = format!(
                    "{context:?} x {action:?}{}",
                    if panics { " (panics)" } else { "" }
                );
                if !only.as_deref().is_none_or(|o| name.starts_with(o)) {
                    continue;
                }
                let image = fixtures.image.clone();
                let got = watched(name.clone(), move || {
                    cell::<P>(&Fixtures { image }, context, action, panics)
                })
                .and_then(|r| r);
                let want = expected(context, action, panics);
                match got {
                    Ok(line) if line == want => {}
                    Ok(line) => failures.push(format!("{name}: got `{line}`, documented `{want}`")),
                    Err(e) => failures.push(e),
                }
                if let Err(e) = watched(
                    format!("{name}: the fresh init after it"),
                    use_a_runtime::<P>,
                )
                .and_then(|r| r.map_err(|e| e.to_string()))
                {
                    failures.push(e);
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} re-entrancy cells failed:\n  {}",
            failures.len(),
            CONTEXTS.len() * ACTIONS.len() * 2,
            failures.join("\n  ")
        ))
    }
}
