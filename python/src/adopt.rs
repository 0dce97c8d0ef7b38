//! Memory another Python library owns (a NumPy array's data), adopted by a host device as
//! an offload `Buffer` without a copy (`offload.from_dlpack(array, device=host)`).
//!
//! The buffer holds the array through a buffer-protocol view of its bytes (which also keeps
//! NumPy from resizing it) until offload releases the memory: the buffer's last handle, or
//! its runtime's shutdown, after the queued work that uses it. That release may run on one
//! of offload's threads, so giving the view back takes the GIL — unless the interpreter is
//! exiting or finalised, or this is a forked child: then the view is left to the process's
//! end, never released without the GIL ([`PythonCall`]).

use std::mem::ManuallyDrop;

use offload::MemKind;
use pyo3::buffer::PyBuffer as View;
use pyo3::prelude::*;

use crate::buffer::PyBuffer;
use crate::errors::{IntoPy, invalid};
use crate::runtime::{PyDevice, PythonCall, blocking, check};

/// The owner of adopted memory: the view that keeps it alive.
struct Owned(ManuallyDrop<View<u8>>);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again.
        let view = unsafe { ManuallyDrop::take(&mut self.0) };
        match PythonCall::enter() {
            // The view's own drop releases it under the GIL.
            Some(_call) => Python::with_gil(|_| drop(view)),
            None => std::mem::forget(view),
        }
    }
}

/// `Device._adopt(bytes_view)`: a buffer over the bytes of `obj`, a C-contiguous, writable
/// object with the buffer protocol and one-byte items (`memoryview(array).cast("B")`).
pub(crate) fn adopt(
    py: Python<'_>,
    device: &PyDevice,
    obj: &Bound<'_, PyAny>,
) -> PyResult<PyBuffer> {
    const CALL: &str = "Device._adopt";
    check(CALL)?;
    let view = View::<u8>::get(obj)?;
    if view.readonly() || !view.is_c_contiguous() || view.len_bytes() == 0 {
        return Err(invalid(
            CALL,
            "the memory must be writable, C-contiguous and not empty to be adopted",
        ));
    }
    let address = view.buf_ptr() as u64;
    let len = view.len_bytes();
    let owner = Owned(ManuallyDrop::new(view));
    let buffer = blocking(py, || {
        // SAFETY: `len` bytes of this process's memory, writable and C-contiguous (checked),
        // kept valid by the view in `owner` (the exporter may not free or resize it while a
        // view is held) until offload drops the owner; Python code that writes the array
        // while queued work uses it races as it would with any buffer.
        unsafe { device.inner.adopt(address, len, MemKind::Host, owner) }
    })
    .py_err()?;
    Ok(PyBuffer::new(buffer, device.cell.clone()))
}
