//! `Offload` and `Device` for Python: their methods (the classes are objects.rs's, named by
//! everything made from them), the interpreter's exit and a forked child's, and the stats.
//! The rules every call follows across the boundary are calls.rs's.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use offload::{BackendKind, MemKind, Offload};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::PyBuffer;
use crate::calls::{
    EXITING, FINALISING, FINALISING_THREAD, Held, IN_FLIGHT, LIVE, RETURNING, RtCell, blocking,
    check, forked, lock,
};
use crate::errors::{IntoPy, ShutDownError, invalid};
use crate::objects::{PyDevice, PyOffload};
use crate::queue::PyQueue;

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
            // Its refusals advise in Python's words (`offload.Offload(backends=[...])`).
            let mut b = Offload::builder().caller(offload::Caller::Python);
            if let Some(kinds) = kinds {
                b = b.backends(kinds);
            }
            if let Some(n) = host_devices {
                b = b.host_devices(n);
            }
            b.start()
        })
        .py_err()?;
        Ok(PyOffload {
            cell: RtCell::started(rt),
        })
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
        // The fixes its launch refusals suggest are written in Python (a tuple, dims).
        let q = q.for_caller(offload::Caller::Python);
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
