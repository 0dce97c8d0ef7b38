//! IPC endpoints for Python (I2–I5): connect to another process's endpoint by name, send
//! buffer ranges, receive them as buffers. Every wait releases the GIL. Peers are numbered
//! in the order this endpoint met them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use offload::ipc::IpcEndpoint;
use pyo3::prelude::*;

use crate::buffer::PyBuffer;
use crate::calls::{Held, RtCell, blocking, check, lock, release};
use crate::errors::{IntoPy, ShutDownError, invalid};

/// A Unix-socket endpoint of the runtime.
#[pyclass(name = "IpcEndpoint", module = "offload", frozen)]
pub(crate) struct PyEndpoint {
    /// Calls clone the `Arc` and let go of the lock before they wait, so no call waits
    /// for another's lock while holding the GIL; `close()` takes it out.
    inner: Mutex<Option<Arc<Held<IpcEndpoint>>>>,
    peers: Mutex<Vec<offload::ipc::PeerId>>,
    cell: Arc<RtCell>,
}

impl PyEndpoint {
    pub(crate) fn new(ep: IpcEndpoint, cell: Arc<RtCell>) -> Self {
        PyEndpoint {
            inner: Mutex::new(Some(Arc::new(Held::new(ep)))),
            peers: Mutex::new(Vec::new()),
            cell,
        }
    }

    fn peer_index(&self, peer: offload::ipc::PeerId) -> usize {
        let mut peers = lock(&self.peers);
        match peers.iter().position(|p| *p == peer) {
            Some(i) => i,
            None => {
                peers.push(peer);
                peers.len() - 1
            }
        }
    }

    fn with<T: Send>(
        &self,
        py: Python<'_>,
        call: &str,
        f: impl FnOnce(&IpcEndpoint) -> offload::Result<T> + Send,
    ) -> PyResult<T> {
        check(call)?;
        let Some(ep) = lock(&self.inner).clone() else {
            return Err(ShutDownError::new_err(format!(
                "{call}: the endpoint was closed"
            )));
        };
        let out = blocking(py, || f(&ep)).py_err();
        release(ep);
        out
    }
}

#[pymethods]
impl PyEndpoint {
    /// The name other processes connect to.
    #[getter]
    fn name(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, "IpcEndpoint.name", |ep| Ok(ep.name().to_string()))
    }

    /// Connects to the endpoint `name` of another process; returns its peer number.
    fn connect(&self, py: Python<'_>, name: String) -> PyResult<usize> {
        let peer = self.with(py, "IpcEndpoint.connect", |ep| ep.connect(&name))?;
        Ok(self.peer_index(peer))
    }

    /// Sends `nbytes` of `buffer` from `offset` (exportable memory) to peer `peer`.
    #[pyo3(signature = (peer, buffer, offset=0, nbytes=None, tag=0))]
    fn send(
        &self,
        py: Python<'_>,
        peer: usize,
        buffer: &PyBuffer,
        offset: usize,
        nbytes: Option<usize>,
        tag: u64,
    ) -> PyResult<()> {
        // One guard, dropped before the error is made: the error used to take the lock
        // again inside the same expression, and a send to an unknown peer hung for good.
        let (id, met) = {
            let peers = lock(&self.peers);
            (peers.get(peer).copied(), peers.len())
        };
        let id = id.ok_or_else(|| {
            invalid(
                "IpcEndpoint.send",
                format!("peer {peer}: this endpoint has met {met} peers"),
            )
        })?;
        let n = nbytes.unwrap_or(buffer.size_of().saturating_sub(offset));
        self.with(py, "IpcEndpoint.send", |ep| {
            let guard = buffer.guard();
            match guard.as_ref() {
                Some(b) => ep.send(id, b, offset, n, tag),
                None => Err(offload::Error::invalid(
                    "IpcEndpoint.send",
                    "the buffer was freed (Buffer.free); allocate a new one (Device.alloc)",
                )),
            }
        })
    }

    /// The next buffer range a peer sent, as (peer, tag, Buffer); None after `timeout`
    /// seconds (None: wait as long as it takes).
    #[pyo3(signature = (timeout=None))]
    fn recv(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
    ) -> PyResult<Option<(usize, u64, PyBuffer)>> {
        let got = match timeout {
            Some(t) => {
                let d = Duration::try_from_secs_f64(t.max(0.0))
                    .map_err(|e| invalid("IpcEndpoint.recv", format!("timeout {t}: {e}")))?;
                self.with(py, "IpcEndpoint.recv", |ep| ep.recv_timeout(d))?
            }
            None => Some(self.with(py, "IpcEndpoint.recv", |ep| ep.recv())?),
        };
        Ok(got.map(|r| {
            let (peer, tag) = (self.peer_index(r.peer()), r.tag());
            (peer, tag, PyBuffer::new(r.into_buffer(), self.cell.clone()))
        }))
    }

    /// Makes progress on every connection (accepts peers, answers unmap notices).
    fn poll(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, "IpcEndpoint.poll", |ep| ep.poll())
    }

    /// Closes the endpoint (peers are told; I3); later calls raise `ShutDownError`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        check("IpcEndpoint.close")?;
        let Some(ep) = lock(&self.inner).take() else {
            return Ok(());
        };
        match Arc::try_unwrap(ep) {
            Ok(held) => blocking(py, move || held.into_inner().close()).py_err(),
            Err(shared) => {
                // A call on another thread still uses it: it closes when that call returns
                // (the endpoint's drop closes it), and later calls here raise ShutDownError.
                release(shared);
                Ok(())
            }
        }
    }
}

impl Drop for PyEndpoint {
    fn drop(&mut self) {
        if let Some(ep) = self
            .inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            release(ep);
        }
    }
}
