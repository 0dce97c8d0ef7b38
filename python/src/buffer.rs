//! `Buffer` for Python: copies in and out of any object with the buffer protocol, and
//! zero-copy views of host-device memory through the buffer protocol and DLPack.
//!
//! A view (a `memoryview`, a NumPy array, a DLPack capsule) holds an [`Export`]: the
//! Python `Buffer` (so its allocation is not dropped), a reference to the runtime (so no
//! shutdown frees the memory under it: the last reference is the export's, L1/L4), and a
//! count on the buffer that makes `free()` refuse while any view is alive. So a NumPy array
//! outliving `rt.shutdown()` stays valid; the runtime is deinitialised when the array goes.

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use offload::{BackendKind, Buffer, MemKind, Offload};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};

use crate::calls::{RtCell, blocking, check, lock, release};
use crate::dlpack::{
    CAPSULE, CAPSULE_VERSIONED, DL_CPU, DlDevice, DlManagedTensor, DlManagedTensorVersioned,
    DlTensor, dl_type,
};
use crate::errors::{IntoPy, UnsupportedError, invalid};
use crate::handle_service::{PyIpcHandle, service};
use crate::objects::PyDevice;

/// How views see the bytes: a struct-module format character, its size, and a C-order shape.
#[derive(Clone)]
struct Layout {
    format: String,
    itemsize: usize,
    shape: Vec<usize>,
}

/// The error of a call on a buffer after its `free()`: the caller's mistake, not a
/// runtime that ended (that is `ShutDownError`).
pub(crate) fn freed(call: &str) -> PyErr {
    invalid(
        call,
        "the buffer was freed (Buffer.free); allocate a new one (Device.alloc)",
    )
}

/// Device memory.
#[pyclass(name = "Buffer", module = "offload", frozen)]
pub(crate) struct PyBuffer {
    /// Shared with the IPC handle registry (`handle.rs`), which holds it weakly: a handle
    /// never keeps memory its `Buffer` gave back.
    inner: Arc<RwLock<Option<Buffer>>>,
    cell: Arc<RtCell>,
    size: usize,
    backend: BackendKind,
    /// The device's position on its platform (DLPack's `device_id`).
    device_index: u32,
    kind: MemKind,
    exports: AtomicUsize,
    /// Set when `free()` released the memory (not when it found the runtime shut down).
    user_freed: std::sync::atomic::AtomicBool,
    layout: Mutex<Layout>,
}

impl PyBuffer {
    /// DLPack's (device type, device id) of the memory; `UnsupportedError` for memory
    /// DLPack has no device for (Vulkan).
    fn dlpack_device(&self) -> PyResult<(i32, i32)> {
        match crate::dlpack::device_type(self.backend) {
            Some(DL_CPU) => Ok((DL_CPU, 0)),
            Some(t) => Ok((t, self.device_index as i32)),
            None => Err(UnsupportedError::new_err(format!(
                "{}: Buffer.__dlpack_device__: unsupported: DLPack has no device for this \
                 memory; copy with Buffer.read / Buffer.write (or numpy())",
                self.backend.name()
            ))),
        }
    }

    pub(crate) fn new(buffer: Buffer, cell: Arc<RtCell>) -> Self {
        let size = buffer.len();
        PyBuffer {
            device_index: buffer.device().index(),
            backend: buffer.device().backend(),
            kind: buffer.kind(),
            size,
            inner: Arc::new(RwLock::new(Some(buffer))),
            cell,
            exports: AtomicUsize::new(0),
            user_freed: std::sync::atomic::AtomicBool::new(false),
            layout: Mutex::new(Layout {
                format: "B".into(),
                itemsize: 1,
                shape: vec![size],
            }),
        }
    }

    /// Runs `f` on the buffer (read lock held, GIL released); `InvalidArgumentError` after
    /// `free()` ([`freed`]).
    pub(crate) fn with<T: Send>(
        &self,
        py: Python<'_>,
        call: &str,
        f: impl FnOnce(&Buffer) -> offload::Result<T> + Send,
    ) -> PyResult<T> {
        check(call)?;
        blocking(py, || {
            let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
            match guard.as_ref() {
                Some(b) => f(b).py_err(),
                None => Err(self.gone(call)),
            }
        })
    }

    /// Whether `free()` released the memory.
    pub(crate) fn is_freed(&self) -> bool {
        self.user_freed.load(Ordering::Acquire)
    }

    /// The error of `call` on a buffer whose handle is gone: freed by `Buffer.free`
    /// (`InvalidArgumentError`, [`freed`]), or given up by a `free()` that found its
    /// runtime shut down (`ShutDownError`).
    pub(crate) fn gone(&self, call: &str) -> PyErr {
        if self.is_freed() {
            freed(call)
        } else {
            crate::errors::ShutDownError::new_err(format!(
                "{call}: the buffer belongs to an offload runtime that has been shut down"
            ))
        }
    }

    pub(crate) fn size_of(&self) -> usize {
        self.size
    }

    /// The buffer's handle slot, for the IPC handle registry to hold weakly.
    pub(crate) fn slot(&self) -> std::sync::Weak<RwLock<Option<Buffer>>> {
        Arc::downgrade(&self.inner)
    }

    /// The runtime reference the buffer shares.
    pub(crate) fn cell(&self) -> &Arc<RtCell> {
        &self.cell
    }

    /// The read guard, for a launch that borrows several buffers at once.
    pub(crate) fn guard(&self) -> std::sync::RwLockReadGuard<'_, Option<Buffer>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A zero-copy export: the address of the bytes, with what keeps them valid.
    /// A view of host-device memory (the buffer protocol, DLPack on the CPU); with
    /// `device_memory`, also of the memory of a device DLPack names (CUDA, ROCm, oneAPI) by
    /// its address, for DLPack.
    fn export(slf: &Bound<'_, Self>, call: &str, device_memory: bool) -> PyResult<Export> {
        let py = slf.py();
        check(call)?;
        let this = slf.get();
        let on_device = device_memory
            && this.backend != BackendKind::Host
            && crate::dlpack::device_type(this.backend).is_some();
        if this.backend != BackendKind::Host && !on_device {
            return Err(UnsupportedError::new_err(format!(
                "{}: {call}: unsupported: zero-copy views exist for host-device memory only; \
                 copy with Buffer.read / Buffer.write (or numpy())",
                this.backend.name()
            )));
        }
        let pin = this.cell.pin(py, call)?;
        // Counted before the address is taken, so a concurrent free() sees the export.
        this.exports.fetch_add(1, Ordering::AcqRel);
        let export = Export {
            owner: Some(slf.clone().unbind()),
            pin: Some(pin),
            ptr: 0,
            layout: lock(&this.layout).clone(),
            shape: Vec::new(),
            strides: Vec::new(),
            format: CString::default(),
        };
        let addr = this.with(py, call, |b| {
            if on_device {
                // A host read waits for the queued work on the buffer (Q1): the memory is
                // ready, on any stream, when the consumer gets it.
                b.read(0, &mut [0u8; 1])?;
                b.address().map(|a| a as usize)
            } else {
                b.with_mapped(|bytes| bytes.as_mut_ptr() as usize)
            }
        });
        let mut export = export;
        export.ptr = addr?;
        export.format = CString::new(export.layout.format.clone())
            .map_err(|_| invalid(call, "the buffer's format has a NUL byte"))?;
        let item = export.layout.itemsize as i64;
        let mut stride = item;
        let mut strides = vec![0i64; export.layout.shape.len()];
        for (s, &n) in strides.iter_mut().zip(&export.layout.shape).rev() {
            *s = stride;
            stride *= n as i64;
        }
        export.shape = export.layout.shape.iter().map(|&n| n as i64).collect();
        export.strides = strides;
        Ok(export)
    }
}

/// What keeps a zero-copy view's memory valid (see the module comment).
struct Export {
    owner: Option<Py<PyBuffer>>,
    pin: Option<Offload>,
    ptr: usize,
    layout: Layout,
    shape: Vec<i64>,
    strides: Vec<i64>,
    format: CString,
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            owner.get().exports.fetch_sub(1, Ordering::AcqRel);
            // Dropped without the GIL, pyo3 defers the decref to the next holder of the GIL.
            drop(owner);
        }
        if let Some(pin) = self.pin.take() {
            release(pin);
        }
    }
}

/// The managed tensor's deleter: frees what `__dlpack__` allocated and drops the export.
unsafe extern "C" fn dl_deleter(managed: *mut DlManagedTensor) {
    if managed.is_null() {
        return;
    }
    // A panic must not cross DLPack's C boundary; freeing is all this does.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: `managed` and its context were made by `Box::into_raw` in `__dlpack__`, and
        // DLPack calls the deleter exactly once (the consumer, or our capsule destructor
        // when no consumer took the capsule).
        let managed = unsafe { Box::from_raw(managed) };
        // SAFETY: as above, for the context.
        drop(unsafe { Box::from_raw(managed.manager_ctx.cast::<Export>()) });
    });
}

/// The versioned tensor's deleter, as `dl_deleter`.
unsafe extern "C" fn dl_deleter_versioned(managed: *mut DlManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // A panic must not cross DLPack's C boundary; freeing is all this does.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: as in `dl_deleter`.
        let managed = unsafe { Box::from_raw(managed) };
        // SAFETY: as in `dl_deleter`.
        drop(unsafe { Box::from_raw(managed.manager_ctx.cast::<Export>()) });
    });
}

/// The capsule's destructor: a capsule no consumer took still owns its tensor.
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the GIL held on a live capsule; a consumer renames a
    // capsule it took ("used_dltensor"), so a valid "dltensor" one is still ours.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, CAPSULE.as_ptr());
            dl_deleter(managed.cast());
        }
    }
}

/// The versioned capsule's destructor, as `capsule_destructor`.
unsafe extern "C" fn capsule_destructor_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `capsule_destructor` ("used_dltensor_versioned" once taken).
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE_VERSIONED.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED.as_ptr());
            dl_deleter_versioned(managed.cast());
        }
    }
}

#[pymethods]
impl PyBuffer {
    /// Size in bytes.
    /// Whether `free()` released the memory (every later call raises
    /// `InvalidArgumentError`).
    #[getter]
    fn freed(&self) -> bool {
        self.is_freed()
    }

    /// Its size in bytes (NumPy's name).
    #[getter]
    fn nbytes(&self) -> usize {
        self.size
    }

    /// The shape views see (`(size,)` bytes until `view`, `zeros`, `empty` or `upload`
    /// gave it one).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        pyo3::types::PyTuple::new(py, lock(&self.layout).shape.iter().copied())
    }

    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    fn __len__(&self) -> usize {
        self.size
    }

    /// "host", "vulkan", … .
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend.name()
    }

    /// "device", "host" or "shared".
    #[getter]
    fn kind(&self) -> &'static str {
        match self.kind {
            MemKind::Host => "host",
            MemKind::Shared => "shared",
            _ => "device",
        }
    }

    /// The device the buffer is on.
    fn device(&self, py: Python<'_>) -> PyResult<PyDevice> {
        let d = self.with(py, "Buffer.device", |b| Ok(b.device()))?;
        Ok(PyDevice {
            inner: crate::calls::Held::new(d),
            cell: self.cell.clone(),
        })
    }

    /// Names the buffer in error messages.
    fn label(&self, py: Python<'_>, name: String) -> PyResult<()> {
        check("Buffer.label")?;
        // The write lock waits for calls in flight, which may need the GIL.
        blocking(py, || {
            let mut guard = self.inner.write().unwrap_or_else(|p| p.into_inner());
            if let Some(b) = guard.take() {
                *guard = Some(b.label(name));
            }
        });
        Ok(())
    }

    /// `nbytes` bytes from `offset` (all the rest by default), as `bytes`.
    #[pyo3(signature = (offset=0, nbytes=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: usize,
        nbytes: Option<usize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let n = nbytes.unwrap_or(self.size.saturating_sub(offset));
        if n > self.size {
            return Err(invalid(
                "Buffer.read",
                format!("{n} bytes asked of a {}-byte buffer", self.size),
            ));
        }
        let mut out = vec![0u8; n];
        self.with(py, "Buffer.read", |b| b.read(offset, &mut out))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Copies any C-contiguous object with the buffer protocol (bytes, NumPy arrays, …) in at
    /// `offset`.
    #[pyo3(signature = (data, offset=0))]
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let src = BorrowedBytes::new(data, "Buffer.write")?;
        let (addr, len) = (src.addr(), src.len());
        self.with(py, "Buffer.write", move |b| {
            // SAFETY: `src` holds the exporter's view until after this closure returns
            // (PyBuffer_Release in its drop), which keeps these bytes allocated and in place.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            b.write(offset, bytes)
        })?;
        drop(src);
        Ok(())
    }

    /// Copies the bytes into any writable C-contiguous object with the buffer protocol.
    #[pyo3(signature = (out, offset=0))]
    fn read_into(&self, py: Python<'_>, out: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let dst = BorrowedBytes::new_writable(out, "Buffer.read_into")?;
        let (addr, len) = (dst.addr(), dst.len());
        self.with(py, "Buffer.read_into", move |b| {
            // SAFETY: as in `write`; the view was asked writable (PyBUF_WRITABLE).
            let bytes = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            b.read(offset, bytes)
        })?;
        drop(dst);
        Ok(())
    }

    /// Sets `nbytes` bytes from `offset` (all by default) to `value`: `buf.fill(0)`, as
    /// NumPy's `ndarray.fill`; the range by keyword (`offset=`, `nbytes=`), so no call reads
    /// its numbers in another order than `Queue.fill(buffer, offset, nbytes, pattern)`.
    #[pyo3(signature = (value, *, offset=0, nbytes=None))]
    fn fill(
        &self,
        py: Python<'_>,
        value: u8,
        offset: usize,
        nbytes: Option<usize>,
    ) -> PyResult<()> {
        let n = nbytes.unwrap_or(self.size.saturating_sub(offset));
        self.with(py, "Buffer.fill", |b| b.fill(offset, n, value))
    }

    /// Frees the memory now; refused while a NumPy array, memoryview or DLPack capsule views
    /// it. Later calls on the buffer raise `InvalidArgumentError` naming `Buffer.free`.
    fn free(&self, py: Python<'_>) -> PyResult<()> {
        check("Buffer.free")?;
        blocking(py, || {
            let mut guard = self.inner.write().unwrap_or_else(|p| p.into_inner());
            if self.exports.load(Ordering::Acquire) > 0 {
                return Err(PyBufferError::new_err(format!(
                    "Buffer.free: {} zero-copy view(s) of the buffer are alive (NumPy arrays, \
                     memoryviews, DLPack capsules): drop them first",
                    self.exports.load(Ordering::Acquire)
                )));
            }
            match guard.take() {
                Some(b) => {
                    let out = b.free().py_err();
                    self.user_freed.store(out.is_ok(), Ordering::Release);
                    out
                }
                None => Ok(()),
            }
        })
    }

    /// How views see the bytes: a struct format character ("f", "d", "i", …), its size, and
    /// a shape whose product times the size is the buffer's size.
    fn _set_layout(&self, format: String, itemsize: usize, shape: Vec<usize>) -> PyResult<()> {
        let n: usize = shape.iter().product();
        if n.checked_mul(itemsize) != Some(self.size) || dl_type(&format, itemsize).is_none() {
            return Err(invalid(
                "Buffer.view",
                format!(
                    "format {format:?} of {itemsize} bytes with shape {shape:?} does not fit \
                     {} bytes",
                    self.size
                ),
            ));
        }
        *lock(&self.layout) = Layout {
            format,
            itemsize,
            shape,
        };
        Ok(())
    }

    /// (format, itemsize, shape) of the views.
    #[getter]
    fn _layout(&self) -> (String, usize, Vec<usize>) {
        let l = lock(&self.layout);
        (l.format.clone(), l.itemsize, l.shape.clone())
    }

    /// Live zero-copy views.
    #[getter]
    fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }

    /// A picklable handle to `nbytes` bytes from `offset` (the rest of the buffer by
    /// default) of exportable memory, which `IpcHandle.open()` maps in another process of
    /// this user (`handle_service.rs`).
    #[pyo3(signature = (offset=0, nbytes=None))]
    fn ipc_handle(
        slf: &Bound<'_, Self>,
        offset: usize,
        nbytes: Option<usize>,
    ) -> PyResult<PyIpcHandle> {
        const CALL: &str = "Buffer.ipc_handle";
        let py = slf.py();
        check(CALL)?;
        let this = slf.get();
        let size = this.size_of();
        let len = nbytes.unwrap_or(size.saturating_sub(offset));
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(invalid(
                CALL,
                format!("range {offset}..+{len} is empty or outside the {size}-byte buffer"),
            ));
        }
        let rt = this.cell().pin(py, CALL)?;
        let slot = this.slot();
        let made = this.with(py, CALL, |b| {
            let make = || {
                // I1: only exportable memory; this export also gives the allocation its
                // before-free hook (I3) before any process can ask for it.
                drop(b.export()?);
                let service = service(&rt, b.device().backend())?;
                let key = service.register(slot, offset, len);
                Ok((service.name.clone(), key, b.device().backend()))
            };
            make().map_err(|e: offload::Error| e.for_call(offload::Caller::Python, CALL))
        });
        release(rt);
        let (name, key, backend) = made?;
        Ok(PyIpcHandle {
            name,
            key,
            offset: offset as u64,
            nbytes: len as u64,
            backend: backend.name().to_string(),
            pid: std::process::id(),
        })
    }

    /// An IPC handle for the buffer (it must come from `alloc(..., exportable=True)`), as
    /// (bytes, file descriptor or None); the descriptor belongs to the caller.
    fn export_handle(&self, py: Python<'_>) -> PyResult<(Py<PyBytes>, Option<i32>)> {
        let h = self.with(py, "Buffer.export_handle", |b| b.export())?;
        let bytes = PyBytes::new(py, &h.to_bytes()).unbind();
        let fd = match h.fd() {
            Some(fd) => {
                use std::os::fd::IntoRawFd;
                let owned = fd.try_clone_to_owned().map_err(|e| {
                    invalid(
                        "Buffer.export_handle",
                        format!("duplicating the descriptor: {e}"),
                    )
                })?;
                Some(owned.into_raw_fd())
            }
            None => None,
        };
        Ok((bytes, fd))
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err(
                "Buffer.__getbuffer__: no view to fill",
            ));
        }
        let _ = flags; // writable, C-contiguous: every request is met
        let export = Box::new(PyBuffer::export(&slf, "Buffer.__getbuffer__", false)?);
        let ndim = export.shape.len() as c_int;
        let len = slf.get().size as ffi::Py_ssize_t;
        let itemsize = export.layout.itemsize as ffi::Py_ssize_t;
        let export = Box::into_raw(export);
        // SAFETY: `view` is the non-null view Python asked us to fill; `export` lives until
        // `__releasebuffer__` (it owns the shape, strides and format the view points at, and
        // keeps the memory valid); `obj` gets its own reference, which Python releases.
        unsafe {
            let e = &mut *export;
            (*view).obj = slf.clone().into_any().into_ptr();
            (*view).buf = e.ptr as *mut c_void;
            (*view).len = len;
            (*view).readonly = 0;
            (*view).itemsize = itemsize;
            (*view).format = e.format.as_ptr() as *mut c_char;
            (*view).ndim = ndim;
            (*view).shape = e.shape.as_mut_ptr().cast::<ffi::Py_ssize_t>();
            (*view).strides = e.strides.as_mut_ptr().cast::<ffi::Py_ssize_t>();
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = export.cast::<c_void>();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: `internal` is the `Export` that `__getbuffer__` boxed for this view, freed
        // exactly once here.
        unsafe {
            if !view.is_null() && !(*view).internal.is_null() {
                drop(Box::from_raw((*view).internal.cast::<Export>()));
                (*view).internal = std::ptr::null_mut();
            }
        }
    }

    /// DLPack producer: a capsule viewing the memory (host device only).
    #[pyo3(signature = (stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // The memory is ready on every stream before the capsule exists (`export` waited for
        // the queued work on it), so there is nothing to order against the consumer's.
        let _ = stream;
        let this = slf.get();
        let (device_type, device_id) = this.dlpack_device()?;
        // A consumer that reads DLPack 1.x gets the versioned capsule (writable); others the
        // legacy one.
        let versioned = match max_version {
            Some(v) => v
                .extract::<(u32, u32)>()
                .map(|(major, _)| major >= 1)
                .unwrap_or(false),
            None => false,
        };
        if let Some(asked) = dl_device {
            if asked != (device_type, device_id) {
                return Err(UnsupportedError::new_err(format!(
                    "Buffer.__dlpack__: device {asked:?} asked; this buffer is memory of \
                     DLPack device {:?} (no copies between devices here)",
                    (device_type, device_id)
                )));
            }
        }
        if copy == Some(true) {
            return Err(UnsupportedError::new_err(
                "Buffer.__dlpack__: copy=True is not supported: views are zero-copy",
            ));
        }
        let mut export = Box::new(PyBuffer::export(slf, "Buffer.__dlpack__", true)?);
        let dtype = dl_type(&export.layout.format, export.layout.itemsize).ok_or_else(|| {
            invalid(
                "Buffer.__dlpack__",
                "the buffer's format has no DLPack type",
            )
        })?;
        let tensor = DlTensor {
            data: export.ptr as *mut c_void,
            device: DlDevice {
                device_type,
                device_id,
            },
            ndim: export.shape.len() as i32,
            dtype,
            shape: export.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(), // C-contiguous
            byte_offset: 0,
        };
        let ctx = Box::into_raw(export).cast::<c_void>();
        let py = slf.py();
        if versioned {
            let managed = Box::into_raw(Box::new(DlManagedTensorVersioned {
                version: [1, 0],
                manager_ctx: ctx,
                deleter: Some(dl_deleter_versioned),
                flags: 0, // writable, not a copy
                dl_tensor: tensor,
            }));
            // SAFETY: as below, for the versioned capsule.
            unsafe {
                let capsule = ffi::PyCapsule_New(
                    managed.cast(),
                    CAPSULE_VERSIONED.as_ptr(),
                    Some(capsule_destructor_versioned),
                );
                if capsule.is_null() {
                    dl_deleter_versioned(managed);
                    return Err(PyErr::fetch(py));
                }
                return Ok(Bound::from_owned_ptr(py, capsule).downcast_into_unchecked());
            }
        }
        let managed = Box::into_raw(Box::new(DlManagedTensor {
            dl_tensor: tensor,
            manager_ctx: ctx,
            deleter: Some(dl_deleter),
        }));
        // SAFETY: the capsule takes `managed` (ours, from Box::into_raw) under DLPack's
        // capsule protocol; its destructor frees it unless a consumer took it. On failure
        // nothing owns it yet, so it is freed here.
        unsafe {
            let capsule =
                ffi::PyCapsule_New(managed.cast(), CAPSULE.as_ptr(), Some(capsule_destructor));
            if capsule.is_null() {
                dl_deleter(managed);
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, capsule).downcast_into_unchecked())
        }
    }

    /// (device type, device id): (1, 0), DLPack's CPU, for host memory; (2, ordinal) for
    /// CUDA, (10, ordinal) for HIP (ROCm), (14, index) for Level Zero (oneAPI).
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        self.dlpack_device()
    }

    fn __repr__(&self) -> String {
        // Never waits (the GIL is held): a buffer busy being freed reads as its size.
        match self.inner.try_read().as_deref() {
            Ok(Some(b)) => format!("<offload.Buffer {b}>"),
            Ok(None) => format!("<offload.Buffer ({} bytes, freed)>", self.size),
            Err(_) => format!("<offload.Buffer ({} bytes)>", self.size),
        }
    }
}

impl Drop for PyBuffer {
    fn drop(&mut self) {
        // The handle registry may hold the lock for a moment (never across a wait for
        // Python), so this takes it like any call.
        let inner = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(b) = inner {
            release(b);
        }
    }
}

/// A contiguous view of a Python object's bytes (PEP 3118), released on drop (GIL held).
pub(crate) struct BorrowedBytes {
    view: Box<ffi::Py_buffer>,
}

impl BorrowedBytes {
    pub(crate) fn new(obj: &Bound<'_, PyAny>, call: &str) -> PyResult<Self> {
        Self::get(obj, call, ffi::PyBUF_C_CONTIGUOUS)
    }

    fn new_writable(obj: &Bound<'_, PyAny>, call: &str) -> PyResult<Self> {
        Self::get(obj, call, ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_WRITABLE)
    }

    fn get(obj: &Bound<'_, PyAny>, call: &str, flags: c_int) -> PyResult<Self> {
        // SAFETY: an all-zero Py_buffer is the documented blank view for PyObject_GetBuffer.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object (GIL held); `view` is ours to fill.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
        if rc != 0 {
            let cause = PyErr::fetch(obj.py());
            let err = invalid(
                call,
                format!("expected a C-contiguous object with the buffer protocol: {cause}"),
            );
            err.set_cause(obj.py(), Some(cause));
            return Err(err);
        }
        Ok(BorrowedBytes { view })
    }

    pub(crate) fn addr(&self) -> usize {
        self.view.buf as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.view.len.max(0) as usize
    }
}

impl Drop for BorrowedBytes {
    fn drop(&mut self) {
        // SAFETY: the view was filled by PyObject_GetBuffer and is released exactly once;
        // every BorrowedBytes is dropped on a thread holding the GIL (never moved into
        // `blocking`, which gets its address only).
        unsafe { ffi::PyBuffer_Release(&mut *self.view) };
    }
}
