//! `IpcHandle`'s Python methods: pickling, its range, and `open()`, which maps the range in
//! this process through the sender's handle service (handle_service.rs has the mechanism
//! and its guarantees, I1–I5).

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::buffer::PyBuffer;
use crate::calls::{RtCell, blocking, check, lock, release};
use crate::errors::{InvalidIpcHandleError, IpcError, to_py};
use crate::handle_service::{
    ANSWER_TIMEOUT, FREED, KEY_BITS, OpenError, PyIpcHandle, STATE_VERSION,
};
use crate::objects::PyOffload;

/// The runtime `open()` starts when given none, kept for the process (the package's exit
/// handler shuts it down).
static DEFAULT_RT: Mutex<Option<Py<PyOffload>>> = Mutex::new(None);

#[pymethods]
impl PyIpcHandle {
    /// What pickle stores: (version, the sender's endpoint name, key, offset, nbytes,
    /// backend, sender pid).
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let rebuild = py.import("offload")?.getattr("_rebuild_ipc_handle")?;
        let args = PyTuple::new(py, [self.state().into_pyobject(py)?])?;
        Ok((rebuild, args))
    }

    /// The handle a pickled state describes (what unpickling calls; not for users).
    #[staticmethod]
    fn _from_state(state: (u32, String, u64, u64, u64, String, u32)) -> PyResult<Self> {
        let (version, name, key, offset, nbytes, backend, pid) = state;
        if version != STATE_VERSION || key & !KEY_BITS != 0 || nbytes == 0 {
            return Err(InvalidIpcHandleError::new_err(format!(
                "IpcHandle: invalid IPC handle: pickled state version {version} (this offload \
                 reads version {STATE_VERSION}), or a malformed key or range"
            )));
        }
        Ok(PyIpcHandle {
            name,
            key,
            offset,
            nbytes,
            backend,
            pid,
        })
    }

    /// Where the range starts in the exporter's buffer.
    #[getter]
    fn offset(&self) -> u64 {
        self.offset
    }

    /// How many bytes it names.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// "host", "vulkan", … : the memory's backend.
    #[getter]
    fn backend(&self) -> &str {
        &self.backend
    }

    /// The process that made the handle (and frees the memory).
    #[getter]
    fn pid(&self) -> u32 {
        self.pid
    }

    /// A `Buffer` viewing the range, mapped in this process (through the runtime `rt`,
    /// else one the package starts and keeps for the process). It answers
    /// `InvalidIpcHandleError` once the exporting process freed the memory (I3); it has no
    /// zero-copy view (`read`/`write`/`numpy()` copy).
    #[pyo3(signature = (rt=None))]
    fn open(&self, py: Python<'_>, rt: Option<&Bound<'_, PyOffload>>) -> PyResult<PyBuffer> {
        const CALL: &str = "IpcHandle.open";
        check(CALL)?;
        let cell = match rt {
            Some(rt) => rt.get().cell.clone(),
            None => default_cell(py)?,
        };
        let offload = cell.pin(py, CALL)?;
        let asked = blocking(py, || self.ask(&offload));
        release(offload);
        match asked {
            // The view holds the reference of the runtime it was opened through, as every
            // object made from an `Offload` does.
            Ok(buffer) => Ok(PyBuffer::new(buffer, cell)),
            Err(OpenError::Offload(e)) => Err(to_py(e.for_call(offload::Caller::Python, CALL))),
            Err(OpenError::Gone(e)) => Err(InvalidIpcHandleError::new_err(format!(
                "{CALL}: invalid IPC handle: process {} that made it cannot be reached (it \
                 exited, or the offload runtime that made the handle was shut down): {}",
                self.pid,
                e.for_call(offload::Caller::Python, CALL)
            ))),
            Err(OpenError::Refused(why)) => Err(InvalidIpcHandleError::new_err(format!(
                "{CALL}: invalid IPC handle: {}",
                match why {
                    FREED => format!(
                        "the buffer it names was freed (or collected) in process {}",
                        self.pid
                    ),
                    _ => format!(
                        "process {} has no such handle (its offload runtime was shut down \
                         since it made it, or the handle was forged)",
                        self.pid
                    ),
                }
            ))),
            Err(OpenError::NoAnswer) => Err(IpcError::new_err(format!(
                "{CALL}: process {} did not answer within {} s",
                self.pid,
                ANSWER_TIMEOUT.as_secs()
            ))),
        }
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .downcast::<PyIpcHandle>()
            .is_ok_and(|o| o.get().state() == self.state())
    }

    fn __hash__(&self) -> u64 {
        self.key
    }

    fn __repr__(&self) -> String {
        format!(
            "<offload.IpcHandle {} bytes at {} of {} memory of pid {}>",
            self.nbytes, self.offset, self.backend, self.pid
        )
    }
}

/// The runtime reference `open()` uses when given none.
fn default_cell(py: Python<'_>) -> PyResult<Arc<RtCell>> {
    let mut slot = lock(&DEFAULT_RT);
    if let Some(rt) = slot.as_ref() {
        if !rt.get().is_shut_down_now() {
            return Ok(rt.get().cell.clone());
        }
    }
    let rt = Py::new(py, PyOffload::start(py, None, None)?)?;
    let cell = rt.get().cell.clone();
    *slot = Some(rt);
    Ok(cell)
}
