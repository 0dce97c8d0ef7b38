//! CUDA memory: device (`cuMemAlloc`), page-locked host (`cuMemAllocHost`), managed
//! (`cuMemAllocManaged`) and imported IPC memory, and the host's copies in and out of it.
//!
//! Queued work on a buffer (Q1) is remembered by stream ([`Uses`]): a host access, a free
//! or an export first synchronises the streams that used the buffer (possibly waiting for
//! later work on them too, never for less). The driver's synchronous copies and fills run
//! on the legacy default stream, which offload's non-blocking streams do not wait for, so
//! each is followed by a synchronisation of that stream: when one returns, its bytes are
//! where they belong, for the host and for every queue.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::{BackendKind, Error, MemKind, Result};

use crate::context::{Context, driver_error};
use crate::ffi::sys::CuDevicePtr;
use crate::queue::QueueShared;

/// Where a buffer's memory comes from.
#[derive(Debug)]
pub(crate) enum Origin {
    /// `cuMemAlloc`: device memory (exportable to other processes).
    Device,
    /// `cuMemAllocHost`: page-locked host memory at this host address (which is also its
    /// device address: unified addressing).
    Pinned(*mut c_void),
    /// `cuMemAllocManaged`.
    Managed,
    /// Another process's memory, opened through IPC (`cuIpcOpenMemHandle`).
    Imported,
}

/// The streams whose queued work uses a buffer or a module.
pub(crate) type Uses = offload_driver::Uses<QueueShared>;

/// One allocation: freed when its last buffer is gone (an exportable allocation can have
/// several: its owner, and the imports of it in this same process, which alias it).
#[derive(Debug)]
pub(crate) struct Allocation {
    pub(crate) context: Arc<Context>,
    pub(crate) ptr: CuDevicePtr,
    len: usize,
    pub(crate) origin: Origin,
    /// The queued work that uses the memory.
    pub(crate) uses: Uses,
    /// For an import from another process: the IPC mapping, held open while it lives.
    _mapping: Option<Arc<crate::ipc::Mapping>>,
}

// SAFETY: the allocation owns its memory exclusively; the only non-`Send` member is a
// pinned allocation's host address, which points into that memory. CUDA calls may come
// from any thread (the context is bound before each).
unsafe impl Send for Allocation {}
// SAFETY: through `&Allocation` nothing is touched but through driver calls.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        const CALL: &str = "Buffer::free";
        // A wait that fails (a lost device) leaves the memory allocated: freeing it under
        // work that may still run would be worse than the leak.
        if self.uses.wait(CALL).is_ok() && self.context.bind(CALL).is_ok() {
            let driver = &self.context.driver;
            match self.origin {
                // SAFETY: a live allocation of the bound context, freed once (here), with
                // no queued work on it (waited) and no buffer left over it.
                Origin::Device | Origin::Managed => {
                    let _ = unsafe { driver.mem_free(self.ptr) };
                }
                // SAFETY: as above, for memory of cuMemAllocHost.
                Origin::Pinned(host) => {
                    let _ = unsafe { driver.mem_free_host(host) };
                }
                // The mapping closes with its last user (`ipc::Mapping`'s drop).
                Origin::Imported => {}
            }
        }
        self.context.destroyed();
    }
}

/// An allocation of the CUDA backend.
#[derive(Debug)]
pub struct CudaBuffer {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    kind: MemKind,
    pub(crate) exportable: bool,
}

fn out_of_range(call: &'static str, offset: usize, len: usize, size: usize) -> Error {
    Error::InvalidArgument {
        call,
        reason: format!(
            "cuda buffer: range {offset}..{} is outside its {size} bytes",
            offset as u128 + len as u128
        ),
    }
}

impl CudaBuffer {
    /// Allocates `size` (> 0) bytes of `kind` memory in `context`.
    pub(crate) fn new(
        context: &Arc<Context>,
        size: usize,
        kind: MemKind,
        exportable: bool,
        call: &'static str,
    ) -> Result<CudaBuffer> {
        if size == 0 {
            return Err(Error::InvalidArgument {
                call,
                reason: "zero-size allocation on a CUDA device".into(),
            });
        }
        context.bind(call)?;
        let driver = &context.driver;
        let oom = |failure: offload_driver::Failure| {
            if failure.code == i64::from(crate::ffi::sys::CUDA_ERROR_OUT_OF_MEMORY) {
                Error::OutOfMemory {
                    backend: BackendKind::Cuda,
                    call,
                    requested: size as u64,
                    reason: failure.message(),
                }
            } else {
                failure.into_error(BackendKind::Cuda, call)
            }
        };
        let (ptr, origin) = match (kind, exportable) {
            (MemKind::Device, _) | (_, true) => {
                (driver.mem_alloc(size).map_err(oom)?, Origin::Device)
            }
            (MemKind::Host, false) => {
                let host = driver.mem_alloc_host(size).map_err(oom)?;
                (host as CuDevicePtr, Origin::Pinned(host))
            }
            (MemKind::Shared, false) => match driver.mem_alloc_managed(size) {
                Some(made) => (made.map_err(oom)?, Origin::Managed),
                None => {
                    return Err(Error::Unsupported {
                        backend: BackendKind::Cuda,
                        call,
                        reason: "the driver has no cuMemAllocManaged (managed memory)".into(),
                    });
                }
            },
            (other, false) => {
                return Err(Error::Unsupported {
                    backend: BackendKind::Cuda,
                    call,
                    reason: format!("memory kind {other:?}"),
                });
            }
        };
        context.made();
        let alloc = Arc::new(Allocation {
            context: context.clone(),
            ptr,
            len: size,
            origin,
            uses: Uses::default(),
            _mapping: None,
        });
        if exportable {
            context.exported(&alloc);
        }
        Ok(CudaBuffer {
            alloc,
            len: size,
            kind,
            exportable,
        })
    }

    /// A buffer over memory another process exported, mapped by `mapping`.
    pub(crate) fn imported(
        context: &Arc<Context>,
        mapping: Arc<crate::ipc::Mapping>,
        len: usize,
    ) -> CudaBuffer {
        context.made();
        CudaBuffer {
            alloc: Arc::new(Allocation {
                context: context.clone(),
                ptr: mapping.ptr,
                len,
                origin: Origin::Imported,
                uses: Uses::default(),
                _mapping: Some(mapping),
            }),
            len,
            kind: MemKind::Device,
            exportable: false,
        }
    }

    /// A buffer over an allocation of this process (an import of a handle this process
    /// exported): it shares the allocation, which lives until both are gone.
    pub(crate) fn alias(alloc: Arc<Allocation>, len: usize) -> CudaBuffer {
        CudaBuffer {
            alloc,
            len,
            kind: MemKind::Device,
            exportable: false,
        }
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.alloc.context
    }

    pub(crate) fn ptr(&self) -> CuDevicePtr {
        self.alloc.ptr
    }

    pub(crate) fn uses(&self) -> &Uses {
        &self.alloc.uses
    }

    /// Size in bytes.
    ///
    /// ```
    /// use offload_core::hal::{Device as _, Platform as _};
    /// use offload_core::{Config, MemKind};
    /// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else { return Ok(()) };
    /// let dev = cuda.devices().remove(0);
    /// let buf = dev.alloc(10, MemKind::Device)?;
    /// assert_eq!(buf.len(), 10);
    /// dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: CUDA buffers are never empty.
    ///
    /// ```
    /// fn empty(b: &offload_cuda::CudaBuffer) -> bool { b.is_empty() }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// fn kind(b: &offload_cuda::CudaBuffer) -> offload_core::MemKind { b.kind() }
    /// ```
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// Checks that `offset..offset + len` lies inside the buffer; the device address of
    /// `offset`.
    pub(crate) fn at(&self, call: &'static str, offset: usize, len: usize) -> Result<CuDevicePtr> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.alloc.ptr + offset as u64),
            _ => Err(out_of_range(call, offset, len, self.len)),
        }
    }

    /// Binds the context and waits for the queued work on the buffer.
    fn quiesce(&self, call: &'static str) -> Result<()> {
        self.alloc.uses.wait(call)?;
        self.alloc.context.bind(call)
    }

    /// Waits for the legacy default stream, where the synchronous copies and fills run.
    fn settle(&self, call: &'static str) -> Result<()> {
        // SAFETY: the null stream is the context's legacy default stream, always live.
        unsafe {
            self.alloc
                .context
                .driver
                .stream_synchronize(std::ptr::null_mut())
        }
        .map_err(driver_error(call))
    }

    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        const CALL: &str = "Buffer::read";
        let src = self.at(CALL, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.quiesce(CALL)?;
        // SAFETY: the range lies inside this live allocation (checked) of the bound
        // context; no queued work on it runs (waited).
        unsafe { self.alloc.context.driver.memcpy_dtoh(dst, src) }.map_err(driver_error(CALL))
    }

    pub(crate) fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Buffer::write";
        let dst = self.at(CALL, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.quiesce(CALL)?;
        // SAFETY: as in `read`; `&mut self` excludes every other host access.
        unsafe { self.alloc.context.driver.memcpy_htod(dst, src) }.map_err(driver_error(CALL))?;
        self.settle(CALL)
    }

    pub(crate) fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()> {
        const CALL: &str = "Buffer::fill";
        let dst = self.at(CALL, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.quiesce(CALL)?;
        // SAFETY: as in `write`.
        unsafe { self.alloc.context.driver.memset_d8(dst, value, len) }
            .map_err(driver_error(CALL))?;
        self.settle(CALL)
    }

    /// Copies from `src` (another buffer of the same context, or this one: the ranges may
    /// overlap, staged then through the host).
    pub(crate) fn copy_from(
        &mut self,
        dst_offset: usize,
        src: &CudaBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Buffer::copy_from";
        let from = src.at(CALL, src_offset, len)?;
        let to = self.at(CALL, dst_offset, len)?;
        if !Arc::ptr_eq(&self.alloc.context, &src.alloc.context) {
            return Err(Error::InvalidArgument {
                call: CALL,
                reason: "the cuda buffers are on different devices".into(),
            });
        }
        if len == 0 {
            return Ok(());
        }
        src.alloc.uses.wait(CALL)?;
        self.quiesce(CALL)?;
        // SAFETY: both ranges lie inside live allocations of the bound context (checked);
        // no queued work on either runs (waited); they are different allocations (`&mut
        // self` and `&src` cannot alias) so the ranges do not overlap.
        unsafe { self.alloc.context.driver.memcpy_dtod(to, from, len) }
            .map_err(driver_error(CALL))?;
        self.settle(CALL)
    }

    /// A copy inside the buffer; overlapping ranges are staged through the host.
    pub(crate) fn copy_within(
        &mut self,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Buffer::copy_from";
        let from = self.at(CALL, src_offset, len)?;
        let to = self.at(CALL, dst_offset, len)?;
        if len == 0 || from == to {
            return Ok(());
        }
        if src_offset.abs_diff(dst_offset) < len {
            let mut staged = vec![0u8; len];
            self.read(src_offset, &mut staged)?;
            return self.write(dst_offset, &staged);
        }
        self.quiesce(CALL)?;
        // SAFETY: both ranges lie inside this live allocation (checked) and do not overlap
        // (checked above); no queued work on it runs (waited).
        unsafe { self.alloc.context.driver.memcpy_dtod(to, from, len) }
            .map_err(driver_error(CALL))?;
        self.settle(CALL)
    }

    /// The bytes in place, for pinned and managed memory (the host reaches them directly),
    /// after the queued work on them.
    pub(crate) fn mapped_bytes(&mut self) -> Result<&mut [u8]> {
        const CALL: &str = "Buffer::with_mapped";
        let base = match self.alloc.origin {
            Origin::Pinned(host) => host.cast::<u8>(),
            Origin::Managed => self.alloc.ptr as *mut u8,
            Origin::Device | Origin::Imported => {
                return Err(Error::Unsupported {
                    backend: BackendKind::Cuda,
                    call: CALL,
                    reason: "device memory is not host-visible: allocate MemKind::Host \
                             (pinned) or MemKind::Shared (managed) to touch it in place"
                        .into(),
                });
            }
        };
        self.quiesce(CALL)?;
        self.settle(CALL)?;
        // SAFETY: pinned and managed allocations are host-addressable for their whole `len`
        // bytes while the buffer lives; no queued work on it runs and the legacy stream is
        // idle (waited), none can be queued while `&mut self` is borrowed, and no other
        // process maps it (not exportable: exportable memory is `Origin::Device`).
        Ok(unsafe { std::slice::from_raw_parts_mut(base, self.len) })
    }

    /// Lets go of the memory: freed once no buffer and no queued work uses it.
    pub(crate) fn free(self) -> Result<()> {
        if Arc::strong_count(&self.alloc) == 1 {
            // The last user: wait here, so a failure is reported (the drop only ignores it).
            self.alloc.uses.wait("Buffer::free")?;
        }
        drop(self);
        Ok(())
    }
}
