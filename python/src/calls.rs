//! The three rules every object of the package follows across the boundary, and what each
//! holds of its runtime ([`RtCell`], L1):
//!
//! - **Blocking work runs without the GIL** ([`blocking`]): a host function or a setup or
//!   teardown callback that needs the GIL can then take it on whatever thread offload runs
//!   it (L6), so no call waits for a thread that waits for the GIL held by the caller.
//! - **A handle is released without the GIL** ([`release`]): dropping a queue, a module or
//!   the last `Offload` may drain queues and run Python teardown callbacks.
//! - **A forked child never touches the inherited runtime** ([`check`]): its threads did not
//!   survive the fork, so a call would wait for them forever. Every call answers
//!   `ForkedError`, and the child's finalizers forget their handles instead of releasing
//!   them.
//!
//! It must not hold a lock of its own while calling offload or Python.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use offload::Offload;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::{ForkedError, IntoPy, ShutDownError};

/// The process that first started a runtime through this package (0: none yet). A forked
/// child has another pid and inherits this value: that is how it knows.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

/// Set by the `atexit` handler once it has shut every runtime down: Python callbacks are
/// not called after it (the interpreter is finalising).
pub(crate) static EXITING: AtomicBool = AtomicBool::new(false);

/// Set by the `atexit` handler once no Python callback runs on offload's threads any more:
/// from then on a thread other than the finalising one never takes the GIL back.
pub(crate) static FINALISING: AtomicBool = AtomicBool::new(false);

/// Threads between leaving a call made without the GIL and having the GIL back.
pub(crate) static RETURNING: AtomicUsize = AtomicUsize::new(0);

/// Python callbacks (host functions, setup, teardown) running on offload's threads now.
pub(crate) static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Held while offload's thread runs Python code: the `atexit` handler waits for these
/// before the interpreter goes on finalising (which would end such a thread inside the
/// GIL's acquisition, aborting the process).
pub(crate) struct PythonCall(());

impl PythonCall {
    /// `None` when Python must not be called (exiting, finalised, or a forked child).
    pub(crate) fn enter() -> Option<PythonCall> {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        // SAFETY: Py_IsInitialized reads a flag; it may be called without the GIL, at any time.
        if forked() || EXITING.load(Ordering::SeqCst) || unsafe { ffi::Py_IsInitialized() } == 0 {
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(PythonCall(()))
    }
}

/// Runs `f` under the GIL when Python may be called ([`PythonCall::enter`]), and not at
/// all otherwise: what `f` would release is then left to the process's end, never released
/// without the GIL.
pub(crate) fn with_python(f: impl FnOnce()) {
    if let Some(_call) = PythonCall::enter() {
        Python::with_gil(|_| f());
    }
}

impl Drop for PythonCall {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every runtime reference the package handed out, for the `atexit` handler.
pub(crate) static LIVE: Mutex<Vec<Weak<RtCell>>> = Mutex::new(Vec::new());

/// Set in a child forked (by any `fork()`) from a process whose runtime was started.
pub(crate) static FORKED: AtomicBool = AtomicBool::new(false);

/// True in a child forked from a process whose runtime was started.
pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

unsafe extern "C" {
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> std::ffi::c_int;
}

/// Runs in the child of every `fork()`: atomic stores only (async-signal-safe, as a child
/// of a threaded process requires).
unsafe extern "C" fn in_forked_child() {
    // The parent's callbacks in flight, and its threads on their way back to the GIL, are
    // threads the child does not have.
    IN_FLIGHT.store(0, Ordering::SeqCst);
    RETURNING.store(0, Ordering::SeqCst);
    if OWNER_PID.load(Ordering::SeqCst) != 0 {
        FORKED.store(true, Ordering::SeqCst);
    }
}

/// Registers the fork handler (module import).
pub(crate) fn watch_forks() {
    // SAFETY: `in_forked_child` is a plain function of this library, which stays loaded
    // (an extension module is never unloaded); it only stores atomics.
    let _ = unsafe { pthread_atfork(None, None, Some(in_forked_child)) };
}

/// `ForkedError` for `call` in a forked child, else `Ok`.
pub(crate) fn check(call: &str) -> PyResult<()> {
    if forked() {
        return Err(ForkedError::new_err(format!(
            "{call}: this process (pid {}) was forked from one whose offload runtime (started \
             by pid {}) it inherited; a forked child cannot use that runtime (its threads did not survive \
             the fork) nor start another: start offload in a fresh process instead \
             (multiprocessing's 'spawn' or 'forkserver' start method)",
            std::process::id(),
            OWNER_PID.load(Ordering::Relaxed)
        )));
    }
    Ok(())
}

thread_local! {
    /// Set on the thread that runs the `atexit` handler (the main thread): it goes on
    /// finalising the interpreter, so it must get the GIL back.
    pub(crate) static FINALISING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the GIL released, and takes the GIL back — except on a thread that would
/// take it back after the interpreter began exiting (a daemon thread): CPython ends such a
/// thread with `pthread_exit` inside that call, whose forced unwinding through Rust frames
/// aborts the process. That thread waits instead until the process ends, as CPython 3.14
/// itself makes such threads do.
pub(crate) fn without_gil<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    let out = py.allow_threads(move || {
        let out = f();
        // Counted before the flag is read, so the `atexit` handler, which sets the flag
        // and then waits for the count to fall to zero, sees every thread that read it
        // clear and is about to take the GIL back.
        RETURNING.fetch_add(1, Ordering::SeqCst);
        if FINALISING.load(Ordering::SeqCst) && !FINALISING_THREAD.with(|t| t.get()) {
            RETURNING.fetch_sub(1, Ordering::SeqCst);
            loop {
                std::thread::park();
            }
        }
        out
    });
    RETURNING.fetch_sub(1, Ordering::SeqCst);
    out
}

/// Runs blocking `f` with the GIL released (see [`without_gil`]).
pub(crate) fn blocking<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    without_gil(py, f)
}

/// Gives a handle back: without the GIL where the interpreter runs (its release may drain
/// queues whose host functions take the GIL), forgotten in a forked child (releasing it
/// would wait for threads the fork did not copy).
pub(crate) fn release<T: Send>(value: T) {
    if forked() {
        std::mem::forget(value);
        return;
    }
    // SAFETY: Py_IsInitialized reads a flag; it may be called without the GIL, at any time.
    if unsafe { ffi::Py_IsInitialized() } != 0 {
        Python::with_gil(|py| without_gil(py, move || drop(value)));
    } else {
        drop(value);
    }
}

/// A handle a Python object owns, given back by [`release`] when the object is finalised.
pub(crate) struct Held<T: Send>(ManuallyDrop<T>);

impl<T: Send> Held<T> {
    pub(crate) fn new(value: T) -> Self {
        Held(ManuallyDrop::new(value))
    }
}

impl<T: Send> Held<T> {
    /// The value, no longer held (the caller gives it back itself).
    pub(crate) fn into_inner(self) -> T {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the value is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.0) }
    }
}

impl<T: Send> std::ops::Deref for Held<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Send> Drop for Held<T> {
    fn drop(&mut self) {
        // SAFETY: taken exactly once, here, and `self.0` is never used again.
        let value = unsafe { ManuallyDrop::take(&mut self.0) };
        release(value);
    }
}

/// Locks, ignoring poison: every critical section here only moves an `Option`.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One runtime reference (`offload::Offload`), shared by the Python `Offload` and every
/// object made from it (devices, buffers, queues, events, modules, kernels, endpoints), as
/// CuPy's arrays hold their context: the reference is given back when the last of them is
/// collected (so a device of a temporary `Offload()` works, and `del rt` leaves buffers
/// working), or by `Offload.shutdown()` / leaving its `with`, which gives back the hold of
/// every object made from that `Offload` too (L1: the runtime ends when no reference is
/// left, and its handles then raise `ShutDownError`).
pub(crate) struct RtCell {
    pub(crate) rt: Mutex<Option<Offload>>,
    pub(crate) generation: u64,
}

impl RtCell {
    /// The cell of a runtime reference this package's `Offload()` just started or joined,
    /// listed for the `atexit` handler; the first makes this process the runtime's owner (a
    /// forked child tells itself apart by that).
    pub(crate) fn started(rt: Offload) -> Arc<RtCell> {
        let _ =
            OWNER_PID.compare_exchange(0, std::process::id(), Ordering::AcqRel, Ordering::Relaxed);
        let cell = Arc::new(RtCell {
            generation: rt.generation(),
            rt: Mutex::new(Some(rt)),
        });
        let mut live = lock(&LIVE);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&cell));
        cell
    }

    /// Another reference to this runtime, to keep memory a NumPy array views mapped: from
    /// this cell while it holds one, else from `init` when that joins the same generation
    /// (L1); `ShutDownError` when the generation is over.
    pub(crate) fn pin(&self, py: Python<'_>, call: &str) -> PyResult<Offload> {
        if let Some(rt) = lock(&self.rt).as_ref() {
            return Ok(rt.clone());
        }
        let joined = blocking(py, Offload::init).py_err()?;
        if joined.generation() == self.generation {
            return Ok(joined);
        }
        release(joined);
        Err(ShutDownError::new_err(format!(
            "{call}: the object's offload runtime (generation {}) has been shut down",
            self.generation
        )))
    }

    /// Takes the reference out (shutdown).
    pub(crate) fn take(&self) -> Option<Offload> {
        lock(&self.rt).take()
    }
}

impl Drop for RtCell {
    fn drop(&mut self) {
        // The last object holding the reference is gone (L1): given back without the GIL,
        // since it may drain queues whose host functions need it.
        let rt = self.rt.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rt) = rt {
            release(rt);
        }
    }
}
