//! `Offload` and `Device` for Python, and the three rules every other object of the package
//! follows across the boundary:
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

use offload::{BackendKind, Device, MemKind, Offload};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::PyBuffer;
use crate::errors::{ForkedError, IntoPy, ShutDownError, invalid};
use crate::queue::PyQueue;

/// The process that first started a runtime through this package (0: none yet). A forked
/// child has another pid and inherits this value: that is how it knows.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

/// Set by the `atexit` handler once it has shut every runtime down: Python callbacks are
/// not called after it (the interpreter is finalising).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Set by the `atexit` handler once no Python callback runs on offload's threads any more:
/// from then on a thread other than the finalising one never takes the GIL back.
static FINALISING: AtomicBool = AtomicBool::new(false);

/// Threads between leaving a call made without the GIL and having the GIL back.
static RETURNING: AtomicUsize = AtomicUsize::new(0);

/// Python callbacks (host functions, setup, teardown) running on offload's threads now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

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
static LIVE: Mutex<Vec<Weak<RtCell>>> = Mutex::new(Vec::new());

/// Set in a child forked (by any `fork()`) from a process whose runtime was started.
static FORKED: AtomicBool = AtomicBool::new(false);

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
    static FINALISING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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
    rt: Mutex<Option<Offload>>,
    generation: u64,
}

impl RtCell {
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
    fn take(&self) -> Option<Offload> {
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

/// The errors of shutdowns nobody could be told about — the last runtime reference
/// collected without `shutdown()`, a queue dropped with a host function's exception nobody
/// synced — each once (L8). What is still unreported when the interpreter exits is printed
/// then, as Python prints an exception it had to ignore.
///
/// ```python
/// import offload
/// assert offload.take_unreported_errors() == []
/// ```
#[pyfunction]
pub(crate) fn take_unreported_errors(py: Python<'_>) -> Vec<PyObject> {
    offload::take_unreported_errors()
        .into_iter()
        .map(|e| crate::errors::to_py(e).into_value(py).into_any())
        .collect()
}

/// Prints `e` through `sys.unraisablehook` ("Exception ignored in: ..."), naming `what`.
fn print_ignored(py: Python<'_>, e: offload::Error, what: &str) {
    let obj = pyo3::types::PyString::new(py, what);
    crate::errors::to_py(e).write_unraisable(py, Some(&obj));
}

/// Shuts down every runtime reference still held, with the GIL released, while the
/// interpreter still runs (Python's `atexit`): host functions and teardown callbacks still
/// pending then run normally. Errors no call could return — these shutdowns', and those
/// still in `take_unreported_errors()` — are printed as Python prints an exception it
/// ignored (L8: nothing is lost).
#[pyfunction]
pub(crate) fn _at_exit(py: Python<'_>) {
    FINALISING_THREAD.with(|t| t.set(true));
    if forked() {
        // The inherited runtime is not touched, and no thread of offload's (nor any other)
        // was copied into the child: nothing to wait for.
        EXITING.store(true, Ordering::SeqCst);
        FINALISING.store(true, Ordering::SeqCst);
        return;
    }
    let cells: Vec<Arc<RtCell>> = lock(&LIVE).drain(..).filter_map(|w| w.upgrade()).collect();
    for cell in cells {
        if let Some(rt) = cell.take() {
            let shut = blocking(py, move || {
                rt.shutdown().map(|_| ()).map_err(offload::Error::from)
            });
            if let Err(e) = shut {
                print_ignored(py, e, "offload runtime shut down at interpreter exit");
            }
        }
    }
    for e in offload::take_unreported_errors() {
        print_ignored(py, e, "offload (an error no call could return)");
    }
    // No new Python callback starts; those running (a runtime NumPy views still pin is not
    // shut down above) finish first, as Python waits for its non-daemon threads.
    EXITING.store(true, Ordering::SeqCst);
    py.allow_threads(|| {
        while IN_FLIGHT.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    FINALISING.store(true, Ordering::SeqCst);
    // Threads already on their way back to the GIL get it before the interpreter starts
    // finalising (CPython would end them inside that acquisition, in a Rust frame).
    py.allow_threads(|| {
        while RETURNING.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}

unsafe extern "C" {
    /// glibc: registers `f(status, arg)` to run at `exit`, before the handlers registered
    /// earlier (offload's exit hook among them).
    fn on_exit(
        f: extern "C" fn(std::ffi::c_int, *mut std::ffi::c_void),
        arg: *mut std::ffi::c_void,
    ) -> std::ffi::c_int;
    fn fflush(stream: *mut std::ffi::c_void) -> std::ffi::c_int;
    fn _exit(status: std::ffi::c_int) -> !;
}

/// A forked child's last exit handler: ends the process before offload's exit hook would
/// tear down the inherited runtime (whose threads and locks did not survive the fork, so
/// that teardown could wait forever), as `os._exit` does for multiprocessing's children.
extern "C" fn exit_child(status: std::ffi::c_int, _arg: *mut std::ffi::c_void) {
    // SAFETY: flushing every C stream and ending the process are the documented way out of
    // an exit handler; nothing of the process runs after `_exit`.
    unsafe {
        fflush(std::ptr::null_mut());
        _exit(status)
    }
}

/// Called in a child right after `os.fork()` (registered with `os.register_at_fork`): if the
/// parent had started offload, the child's `exit` skips offload's exit hook.
#[pyfunction]
pub(crate) fn _after_fork_child() {
    if forked() {
        // SAFETY: `exit_child` is a plain function of this library, which stays loaded (an
        // extension module is never unloaded); the argument is unused.
        let _ = unsafe { on_exit(exit_child, std::ptr::null_mut()) };
    }
}

/// The offload runtime: `with offload.Offload() as rt: ...` or `rt.shutdown()`.
#[pyclass(name = "Offload", module = "offload", frozen)]
pub(crate) struct PyOffload {
    pub(crate) cell: Arc<RtCell>,
}

fn parse_backend(name: &str) -> PyResult<BackendKind> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "host" => BackendKind::Host,
        "vulkan" => BackendKind::Vulkan,
        "cuda" => BackendKind::Cuda,
        "hip" => BackendKind::Hip,
        "ze" | "level-zero" | "levelzero" => BackendKind::Ze,
        other => {
            return Err(invalid(
                "Offload",
                format!("unknown backend {other:?}; one of host, vulkan, cuda, hip, ze"),
            ));
        }
    })
}

pub(crate) fn parse_kind(call: &str, name: &str) -> PyResult<MemKind> {
    Ok(match name {
        "device" => MemKind::Device,
        "host" => MemKind::Host,
        "shared" => MemKind::Shared,
        other => {
            return Err(invalid(
                call,
                format!("memory kind {other:?}; one of device, host, shared"),
            ));
        }
    })
}

impl PyOffload {
    /// Whether `shutdown()` was called on this object.
    pub(crate) fn is_shut_down_now(&self) -> bool {
        lock(&self.cell.rt).is_none()
    }

    fn rt(&self, call: &str) -> PyResult<Offload> {
        check(call)?;
        lock(&self.cell.rt).as_ref().cloned().ok_or_else(|| {
            ShutDownError::new_err(format!("{call}: this Offload has been shut down"))
        })
    }

    /// `Offload(backends, host_devices)`: starts (or joins, L1) the runtime.
    pub(crate) fn start(
        py: Python<'_>,
        backends: Option<Vec<String>>,
        host_devices: Option<usize>,
    ) -> PyResult<Self> {
        check("Offload")?;
        let kinds = backends
            .map(|names| {
                names
                    .iter()
                    .map(|n| parse_backend(n))
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?;
        let rt = blocking(py, move || {
            if kinds.is_none() && host_devices.is_none() {
                return Offload::init();
            }
            let mut b = Offload::builder();
            if let Some(kinds) = kinds {
                b = b.backends(kinds);
            }
            if let Some(n) = host_devices {
                b = b.host_devices(n);
            }
            b.start()
        })
        .py_err()?;
        let _ =
            OWNER_PID.compare_exchange(0, std::process::id(), Ordering::AcqRel, Ordering::Relaxed);
        let cell = Arc::new(RtCell {
            generation: rt.generation(),
            rt: Mutex::new(Some(rt)),
        });
        let mut live = lock(&LIVE);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&cell));
        Ok(PyOffload { cell })
    }
}

#[pymethods]
impl PyOffload {
    /// Starts (or joins, L1) the runtime. `backends` (names) and `host_devices` configure
    /// the first start; a later one asking for something else is refused (L5).
    #[new]
    #[pyo3(signature = (backends=None, host_devices=None))]
    fn new(
        py: Python<'_>,
        backends: Option<Vec<String>>,
        host_devices: Option<usize>,
    ) -> PyResult<Self> {
        Self::start(py, backends, host_devices)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }

    /// Gives this reference back, with the GIL released; True if it was the last one (the
    /// runtime was deinitialised, L1/L4). A second call does nothing and returns False.
    fn shutdown(&self, py: Python<'_>) -> PyResult<bool> {
        check("Offload.shutdown")?;
        let Some(rt) = self.cell.take() else {
            return Ok(false);
        };
        match blocking(py, move || rt.shutdown()) {
            Ok(down) => Ok(down.was_last()),
            Err(e) => {
                let (_, error) = e.into_parts();
                Err(crate::errors::to_py(error))
            }
        }
    }

    /// The runtime generation this reference belongs to.
    #[getter]
    fn generation(&self) -> u64 {
        self.cell.generation
    }

    /// Whether `shutdown()` was called on this object.
    #[getter]
    fn is_shut_down(&self) -> bool {
        lock(&self.cell.rt).is_none()
    }

    /// Every device of the opened platforms.
    fn devices(&self, py: Python<'_>) -> PyResult<Vec<PyDevice>> {
        let rt = self.rt("Offload.devices")?;
        let devices = blocking(py, move || {
            let out = rt.devices();
            drop(rt);
            out
        })
        .py_err()?;
        Ok(devices
            .into_iter()
            .map(|d| PyDevice {
                inner: Held::new(d),
                cell: self.cell.clone(),
            })
            .collect())
    }

    /// The first device of `backend` ("host", "vulkan", "cuda", "hip", "ze").
    #[pyo3(signature = (backend="host"))]
    fn device(&self, py: Python<'_>, backend: &str) -> PyResult<PyDevice> {
        let kind = parse_backend(backend)?;
        let rt = self.rt("Offload.device")?;
        let d = blocking(py, move || rt.device(kind)).py_err()?;
        Ok(PyDevice {
            inner: Held::new(d),
            cell: self.cell.clone(),
        })
    }

    /// Platforms that could not be opened, and why, as (backend, message) pairs.
    fn unavailable(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let rt = self.rt("Offload.unavailable")?;
        let list = blocking(py, move || rt.unavailable()).py_err()?;
        Ok(list
            .into_iter()
            .map(|u| (u.backend.name().to_string(), u.reason))
            .collect())
    }

    /// A new IPC endpoint of this runtime (I2, I4).
    fn ipc_endpoint(&self, py: Python<'_>) -> PyResult<crate::ipc::PyEndpoint> {
        let rt = self.rt("Offload.ipc_endpoint")?;
        let ep = blocking(py, move || rt.ipc_endpoint()).py_err()?;
        Ok(crate::ipc::PyEndpoint::new(ep, self.cell.clone()))
    }

    fn __repr__(&self) -> String {
        let state = if self.is_shut_down() {
            "shut down"
        } else {
            "ready"
        };
        format!(
            "<offload.Offload generation {} ({state})>",
            self.cell.generation
        )
    }
}

/// A device of the runtime.
#[pyclass(name = "Device", module = "offload", frozen)]
pub(crate) struct PyDevice {
    pub(crate) inner: Held<Device>,
    pub(crate) cell: Arc<RtCell>,
}

#[pymethods]
impl PyDevice {
    /// "host", "vulkan", "cuda", "hip" or "ze".
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.backend().name()
    }

    /// The device's description (`DeviceInfo`).
    fn info(&self, py: Python<'_>) -> PyResult<PyDeviceInfo> {
        check("Device.info")?;
        let info = blocking(py, || self.inner.info()).py_err()?;
        Ok(PyDeviceInfo::from(info))
    }

    /// `size` bytes of memory of `kind` ("device", "host", "shared").
    #[pyo3(signature = (size, kind="device", exportable=false))]
    fn alloc(
        &self,
        py: Python<'_>,
        size: usize,
        kind: &str,
        exportable: bool,
    ) -> PyResult<PyBuffer> {
        check("Device.alloc")?;
        let kind = parse_kind("Device.alloc", kind)?;
        let buf = blocking(py, || {
            if exportable {
                self.inner.alloc_exportable(size, kind)
            } else {
                self.inner.alloc(size, kind)
            }
        })
        .py_err()?;
        Ok(PyBuffer::new(buf, self.cell.clone()))
    }

    /// A buffer over the bytes of `view` (writable, C-contiguous, one-byte items), no copy:
    /// `offload.from_dlpack(array, device=host)` uses it. Host devices only.
    fn _adopt(&self, py: Python<'_>, view: &Bound<'_, PyAny>) -> PyResult<PyBuffer> {
        crate::adopt::adopt(py, self, view)
    }

    /// A buffer over a DLPack producer's memory on this device (a CuPy array, a PyTorch
    /// tensor), no copy, with its format, item size and shape: `offload.from_dlpack` uses
    /// it for device memory.
    fn _adopt_dlpack(
        &self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
    ) -> PyResult<(PyBuffer, String, usize, Vec<usize>)> {
        crate::adopt::adopt_dlpack(py, self, obj)
    }

    /// A new queue.
    fn queue(&self, py: Python<'_>) -> PyResult<PyQueue> {
        check("Device.queue")?;
        let q = blocking(py, || self.inner.queue()).py_err()?;
        Ok(PyQueue::new(q, self.cell.clone()))
    }

    fn __eq__(&self, other: &Self) -> bool {
        *self.inner == *other.inner
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.to_string().hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        format!("<offload.Device {}>", *self.inner)
    }
}

/// What a device is (`offload::DeviceInfo`), as typed attributes.
#[pyclass(name = "DeviceInfo", module = "offload", frozen, get_all)]
pub(crate) struct PyDeviceInfo {
    name: String,
    vendor: String,
    backend: &'static str,
    memory: u64,
    compute_units: u32,
    vendor_id: Option<u32>,
    driver_version: Option<String>,
    max_block_threads: Option<u32>,
    max_block: Option<(u32, u32, u32)>,
    max_grid: Option<(u32, u32, u32)>,
    max_alloc: Option<u64>,
}

impl From<offload::DeviceInfo> for PyDeviceInfo {
    fn from(i: offload::DeviceInfo) -> Self {
        let t = |a: [u32; 3]| (a[0], a[1], a[2]);
        PyDeviceInfo {
            name: i.name,
            vendor: i.vendor,
            backend: i.backend.name(),
            memory: i.memory,
            compute_units: i.compute_units,
            vendor_id: i.vendor_id,
            driver_version: i.driver_version,
            max_block_threads: i.max_block_threads,
            max_block: i.max_block.map(t),
            max_grid: i.max_grid.map(t),
            max_alloc: i.max_alloc,
        }
    }
}

#[pymethods]
impl PyDeviceInfo {
    fn __repr__(&self) -> String {
        format!(
            "DeviceInfo(name={:?}, vendor={:?}, backend={:?}, memory={}, compute_units={})",
            self.name, self.vendor, self.backend, self.memory, self.compute_units
        )
    }
}

/// The compile counters (`offload::compile_stats()`) as a dict.
#[pyfunction]
pub(crate) fn compile_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = offload::compile_stats();
    let d = PyDict::new(py);
    d.set_item("compiles", s.compiles)?;
    d.set_item("memory_hits", s.memory_hits)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("disk_writes", s.disk_writes)?;
    d.set_item("corrupt", s.corrupt)?;
    d.set_item("evicted", s.evicted)?;
    Ok(d)
}

/// The host backend's counters (`offload::host::stats()`) as a dict.
#[pyfunction]
pub(crate) fn host_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = offload::host::stats();
    let d = PyDict::new(py);
    d.set_item("opened", s.opened)?;
    d.set_item("deinitialised", s.deinitialised)?;
    d.set_item("live_allocations", s.live_allocations)?;
    d.set_item("loads", s.loads)?;
    d.set_item("unloads", s.unloads)?;
    Ok(d)
}

/// offload's IPC counters for this process (`offload::ipc::stats()`): what the endpoints and
/// the picklable handles did — exports, imports (mappings opened), the sender-side cache's
/// hits, misses and one-shots (I2), unmaps sent, acknowledged and obeyed (I3), rejected
/// messages (I4), quarantine.
///
/// ```python
/// import offload
/// assert offload.ipc_stats()["imports"] >= offload.ipc_stats()["live_imports"]
/// ```
#[pyfunction]
pub(crate) fn ipc_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = offload::ipc::stats();
    let d = PyDict::new(py);
    for (name, value) in [
        ("exports", s.exports),
        ("imports", s.imports),
        ("live_imports", s.live_imports),
        ("cache_hits", s.cache_hits),
        ("cache_misses", s.cache_misses),
        ("one_shots", s.one_shots),
        ("evictions", s.evictions),
        ("unmaps_sent", s.unmaps_sent),
        ("unmaps_acked", s.unmaps_acked),
        ("unmaps_received", s.unmaps_received),
        ("rejected", s.rejected),
        ("peers_refused", s.peers_refused),
        ("quarantined", s.quarantined),
        ("quarantined_bytes", s.quarantined_bytes),
    ] {
        d.set_item(name, value)?;
    }
    Ok(d)
}
