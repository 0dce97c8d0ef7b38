//! Memory another Python library owns, adopted as an offload `Buffer` without a copy
//! (`offload.from_dlpack(x, device=d)`): a NumPy array's data by a host device (through the
//! buffer protocol), a CuPy array's or PyTorch tensor's device memory by a CUDA, HIP or
//! Level Zero device (through its DLPack capsule, whose tensor's deleter is the owner).
//!
//! The buffer holds the array through a buffer-protocol view of its bytes (which also keeps
//! NumPy from resizing it) until offload releases the memory: the buffer's last handle, or
//! its runtime's shutdown, after the queued work that uses it. That release may run on one
//! of offload's threads, so giving the view back takes the GIL — unless the interpreter is
//! exiting or finalised, or this is a forked child: then the view is left to the process's
//! end, never released without the GIL (`runtime::with_python`).

use std::ffi::c_void;
use std::mem::ManuallyDrop;

use offload::MemKind;
use pyo3::buffer::PyBuffer as View;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::buffer::PyBuffer;
use crate::calls::{blocking, check, with_python};
use crate::dlpack::{
    self, CAPSULE, CAPSULE_VERSIONED, DL_FLAG_READ_ONLY, DlManagedTensor, DlManagedTensorVersioned,
    DlTensor, format_of,
};
use crate::errors::{IntoPy, UnsupportedError, invalid};
use crate::objects::PyDevice;

/// The owner of adopted memory: the view that keeps it alive.
struct Owned(ManuallyDrop<View<u8>>);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again.
        let mut view = Some(unsafe { ManuallyDrop::take(&mut self.0) });
        // The view's own drop releases it under the GIL; without Python it is forgotten.
        with_python(|| drop(view.take()));
        std::mem::forget(view);
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

/// What keeps a DLPack producer's memory alive: its managed tensor, whose deleter runs when
/// offload releases the buffer — under the GIL, which a producer's deleter (CuPy's,
/// PyTorch's) may need; left to the process's end where Python must not be called.
struct Tensor {
    managed: *mut c_void,
    versioned: bool,
}

// SAFETY: the pointer is only handed to the tensor's deleter, once, from `drop` (under the
// GIL); DLPack lets the consumer call it from any thread.
unsafe impl Send for Tensor {}
// SAFETY: nothing is reachable through `&Tensor`.
unsafe impl Sync for Tensor {}

impl Tensor {
    /// Calls the deleter.
    ///
    /// # Safety
    /// Once, with the GIL held, on a tensor the consumer took from its capsule.
    unsafe fn delete(&self) {
        // SAFETY: `managed` is the capsule's tensor of the kind `versioned` says, taken by
        // renaming the capsule, so its deleter is ours to call, once (the caller's promise).
        unsafe {
            if self.versioned {
                let m = self.managed.cast::<DlManagedTensorVersioned>();
                if let Some(deleter) = (*m).deleter {
                    deleter(m);
                }
            } else {
                let m = self.managed.cast::<DlManagedTensor>();
                if let Some(deleter) = (*m).deleter {
                    deleter(m);
                }
            }
        }
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: once (drop), with the GIL (`with_python` holds it while this runs).
        with_python(|| unsafe { self.delete() });
    }
}

/// The capsule's tensor as this consumer reads it: its address, size, layout and device.
struct Described {
    address: u64,
    len: usize,
    format: char,
    itemsize: usize,
    shape: Vec<usize>,
    device: (i32, i32),
}

/// Reads `tensor`: a C-contiguous array of one-lane numbers.
///
/// # Safety
/// `tensor` points to a live DLPack tensor whose shape (and strides, if not null) hold
/// `ndim` entries.
unsafe fn describe(tensor: *const DlTensor, call: &str) -> PyResult<Described> {
    // SAFETY: the caller's promise.
    let t = unsafe { &*tensor };
    let (format, itemsize) = format_of(&t.dtype).ok_or_else(|| {
        invalid(
            call,
            format!(
                "DLPack data type (code {}, {} bits, {} lanes) has no buffer format",
                t.dtype.code, t.dtype.bits, t.dtype.lanes
            ),
        )
    })?;
    let ndim = usize::try_from(t.ndim).map_err(|_| invalid(call, "negative ndim"))?;
    let shape: Vec<usize> = (0..ndim)
        // SAFETY: `ndim` entries (the caller's promise).
        .map(|i| usize::try_from(unsafe { *t.shape.add(i) }).unwrap_or(0))
        .collect();
    if !t.strides.is_null() {
        let mut want = 1i64;
        for i in (0..ndim).rev() {
            // SAFETY: as above.
            let stride = unsafe { *t.strides.add(i) };
            if shape[i] > 1 && stride != want {
                return Err(UnsupportedError::new_err(format!(
                    "{call}: unsupported: the memory is strided (not C-contiguous): adopt a \
                     contiguous copy"
                )));
            }
            want *= shape[i] as i64;
        }
    }
    let len = shape.iter().product::<usize>() * itemsize;
    Ok(Described {
        address: (t.data as u64).wrapping_add(t.byte_offset),
        len,
        format,
        itemsize,
        shape,
        device: (t.device.device_type, t.device.device_id),
    })
}

/// `Device._adopt_dlpack(obj)`: a buffer over the memory of a DLPack producer of this
/// device (a CuPy array, a PyTorch tensor on CUDA), no copy; with its format, item size
/// and shape, for the Python side to set.
pub(crate) fn adopt_dlpack(
    py: Python<'_>,
    device: &PyDevice,
    obj: &Bound<'_, PyAny>,
) -> PyResult<(PyBuffer, String, usize, Vec<usize>)> {
    const CALL: &str = "offload.from_dlpack";
    check(CALL)?;
    let backend = device.inner.backend();
    let want = match dlpack::device_type(backend) {
        Some(t) => (t, device.inner.index() as i32),
        None => {
            return Err(UnsupportedError::new_err(format!(
                "{}: {CALL}: unsupported: DLPack has no device for this backend's memory",
                backend.name()
            )));
        }
    };
    // A DLPack 1.x producer gives the versioned capsule; an older one refuses the keyword.
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1, 0))?;
    let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
        Err(e) => return Err(e),
    };
    let capsule = capsule.downcast_into::<PyCapsule>()?;
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live capsule (held by `capsule`); its name is read, and its pointer
    // taken only under the name DLPack gives that structure.
    let (managed, versioned) = unsafe {
        if ffi::PyCapsule_IsValid(raw, CAPSULE_VERSIONED.as_ptr()) == 1 {
            (
                ffi::PyCapsule_GetPointer(raw, CAPSULE_VERSIONED.as_ptr()),
                true,
            )
        } else if ffi::PyCapsule_IsValid(raw, CAPSULE.as_ptr()) == 1 {
            (ffi::PyCapsule_GetPointer(raw, CAPSULE.as_ptr()), false)
        } else {
            return Err(invalid(
                CALL,
                "__dlpack__ gave no unused DLPack capsule (\"dltensor\" or \"dltensor_versioned\")",
            ));
        }
    };
    // SAFETY: a valid capsule of that name holds a live managed tensor of that kind.
    let (tensor, read_only) = unsafe {
        if versioned {
            let m = managed.cast::<DlManagedTensorVersioned>();
            if (*m).version[0] != 1 {
                return Err(UnsupportedError::new_err(format!(
                    "{CALL}: unsupported: DLPack version {}.{}",
                    (*m).version[0],
                    (*m).version[1]
                )));
            }
            (
                &raw const (*m).dl_tensor,
                (*m).flags & DL_FLAG_READ_ONLY != 0,
            )
        } else {
            (
                &raw const (*managed.cast::<DlManagedTensor>()).dl_tensor,
                false,
            )
        }
    };
    // SAFETY: the tensor is live while the capsule is, and DLPack's shape and strides hold
    // `ndim` entries.
    let described = unsafe { describe(tensor, CALL) }?;
    if described.device != want {
        return Err(invalid(
            CALL,
            format!(
                "the memory is DLPack device {:?}; {} is {want:?}",
                described.device,
                backend.name()
            ),
        ));
    }
    if read_only || described.len == 0 {
        return Err(UnsupportedError::new_err(format!(
            "{CALL}: unsupported: read-only or empty memory cannot be adopted"
        )));
    }
    // The consumer's part of the capsule protocol: rename it, so its destructor leaves the
    // tensor to us; from here on the tensor's deleter is ours to call.
    let used = if versioned {
        c"used_dltensor_versioned"
    } else {
        c"used_dltensor"
    };
    // SAFETY: a live capsule; the name is a static string, as the capsule requires.
    if unsafe { ffi::PyCapsule_SetName(raw, used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let owner = Tensor { managed, versioned };
    let Described {
        address,
        len,
        format,
        itemsize,
        shape,
        ..
    } = described;
    let buffer = blocking(py, || {
        // SAFETY: `len` bytes of this device's memory (DLPack says which device; checked),
        // C-contiguous and writable (checked), kept by the producer until its deleter, which
        // `owner` calls when offload releases the buffer.
        unsafe { device.inner.adopt(address, len, MemKind::Device, owner) }
    })
    .py_err()?;
    Ok((
        PyBuffer::new(buffer, device.cell.clone()),
        format.to_string(),
        itemsize,
        shape,
    ))
}
