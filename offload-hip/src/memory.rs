//! HIP memory: device (`hipMalloc`), page-locked host (`hipHostMalloc`) and managed
//! (`hipMallocManaged`), and the host's copies in and out of it with `hipMemcpy` of the
//! kind each direction has, fills with `hipMemset`.
//!
//! Queued work on a buffer (Q1) is remembered by stream (`offload_driver::Uses`): a host
//! access or a free first synchronises the streams that used the buffer. The runtime's
//! synchronous copies and fills run on the null stream, which offload's non-blocking
//! streams do not wait for, so each is followed by a synchronisation of that stream: when
//! one returns, its bytes are where they belong, for the host and for every queue.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::{BackendKind, Error, MemKind, Result};

use crate::platform::{DeviceShared, driver_error};
use crate::queue::QueueShared;

/// The streams whose queued work uses a buffer.
pub(crate) type Uses = offload_driver::Uses<QueueShared>;

/// Where a buffer's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `hipMalloc` (exportable to other processes).
    Device,
    /// `hipHostMalloc`: page-locked host memory (its host address is also its device
    /// address).
    Pinned,
    /// `hipMallocManaged`.
    Managed,
    /// Another process's memory, opened through IPC (`hipIpcOpenMemHandle`).
    Imported,
}

/// One allocation: freed when its last buffer is gone (an exportable allocation can have
/// several: its owner, and the imports of it in this same process, which alias it).
pub(crate) struct Allocation {
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) ptr: *mut c_void,
    len: usize,
    pub(crate) origin: Origin,
    /// The queued work that uses the memory.
    pub(crate) uses: Uses,
    /// For an import from another process: the IPC mapping, held open while it lives.
    _mapping: Option<Arc<crate::ipc::Mapping>>,
}

// SAFETY: the allocation owns its memory exclusively; the raw address is only handed to
// the runtime (thread-safe, the device bound before each call) or, for host-visible
// memory, turned into a slice under a buffer's `&mut self`.
unsafe impl Send for Allocation {}
// SAFETY: through `&Allocation` the memory is only reached through runtime calls.
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
        let driver = &self.device.driver;
        // A wait that fails (a lost device) leaves the memory allocated: freeing it under
        // work that may still run would be worse than the leak.
        if self.uses.wait(CALL).is_ok() && self.device.bind(CALL).is_ok() {
            // SAFETY: a live allocation of this device, freed once (here) with the call its
            // origin needs, with no queued work on it (waited) and no buffer left over it.
            let _ = match self.origin {
                Origin::Device | Origin::Managed => unsafe { driver.free(self.ptr) },
                Origin::Pinned => unsafe { driver.host_free(self.ptr) },
                // The mapping closes with its last user (`ipc::Mapping`'s drop).
                Origin::Imported => Ok(()),
            };
        }
        self.device.destroyed();
    }
}

/// An allocation of the HIP backend.
pub struct HipBuffer {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    kind: MemKind,
    pub(crate) exportable: bool,
}

impl std::fmt::Debug for HipBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipBuffer")
            .field("device", &self.alloc.device.ordinal)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

fn out_of_range(call: &'static str, offset: usize, len: usize, size: usize) -> Error {
    Error::InvalidArgument {
        call,
        reason: format!(
            "hip buffer: range {offset}..{} is outside its {size} bytes",
            offset as u128 + len as u128
        ),
    }
}

impl HipBuffer {
    /// Allocates `size` (> 0) bytes of `kind` memory on `device`.
    pub(crate) fn new(
        device: &Arc<DeviceShared>,
        size: usize,
        kind: MemKind,
        exportable: bool,
        call: &'static str,
    ) -> Result<HipBuffer> {
        if size == 0 {
            return Err(Error::InvalidArgument {
                call,
                reason: "zero-size allocation on a HIP device".into(),
            });
        }
        device.bind(call)?;
        let driver = &device.driver;
        let oom = |failure: offload_driver::Failure| {
            if failure.code == i64::from(crate::ffi::sys::HIP_ERROR_OUT_OF_MEMORY) {
                Error::OutOfMemory {
                    backend: BackendKind::Hip,
                    call,
                    requested: size as u64,
                    reason: failure.message(),
                }
            } else {
                failure.into_error(BackendKind::Hip, call)
            }
        };
        let (ptr, origin) = match (kind, exportable) {
            (MemKind::Device, _) | (_, true) => (driver.malloc(size).map_err(oom)?, Origin::Device),
            (MemKind::Host, false) => (driver.host_malloc(size).map_err(oom)?, Origin::Pinned),
            (MemKind::Shared, false) => match driver.malloc_managed(size) {
                Some(made) => (made.map_err(oom)?, Origin::Managed),
                None => {
                    return Err(Error::Unsupported {
                        backend: BackendKind::Hip,
                        call,
                        reason: "the runtime has no hipMallocManaged (managed memory)".into(),
                    });
                }
            },
            (other, false) => {
                return Err(Error::Unsupported {
                    backend: BackendKind::Hip,
                    call,
                    reason: format!("memory kind {other:?}"),
                });
            }
        };
        device.made();
        let alloc = Arc::new(Allocation {
            device: device.clone(),
            ptr,
            len: size,
            origin,
            uses: Uses::default(),
            _mapping: None,
        });
        if exportable {
            device.exported(&alloc);
        }
        Ok(HipBuffer {
            alloc,
            len: size,
            kind,
            exportable,
        })
    }

    /// A buffer over memory another process exported, mapped by `mapping`.
    pub(crate) fn imported(
        device: &Arc<DeviceShared>,
        mapping: Arc<crate::ipc::Mapping>,
        len: usize,
    ) -> HipBuffer {
        device.made();
        HipBuffer {
            alloc: Arc::new(Allocation {
                device: device.clone(),
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
    pub(crate) fn alias(alloc: Arc<Allocation>, len: usize) -> HipBuffer {
        HipBuffer {
            alloc,
            len,
            kind: MemKind::Device,
            exportable: false,
        }
    }

    pub(crate) fn uses(&self) -> &Uses {
        &self.alloc.uses
    }

    /// Size in bytes.
    ///
    /// ```
    /// use offload_core::hal::{Device as _, Platform as _};
    /// use offload_core::{Config, MemKind};
    /// let Ok(hip) = offload_hip::HipPlatform::open(&Config::default()) else { return Ok(()) };
    /// let dev = hip.devices().remove(0);
    /// let buf = dev.alloc(10, MemKind::Device)?;
    /// assert_eq!(buf.len(), 10);
    /// dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: HIP buffers are never empty.
    ///
    /// ```
    /// fn empty(b: &offload_hip::HipBuffer) -> bool { b.is_empty() }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// fn kind(b: &offload_hip::HipBuffer) -> offload_core::MemKind { b.kind() }
    /// ```
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// The device address of the first byte.
    pub(crate) fn address(&self) -> u64 {
        self.alloc.ptr as u64
    }

    pub(crate) fn device(&self) -> &Arc<DeviceShared> {
        &self.alloc.device
    }

    /// Checks that `offset..offset + len` lies inside the buffer; the address of `offset`.
    pub(crate) fn at(&self, call: &'static str, offset: usize, len: usize) -> Result<*mut c_void> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {
                Ok(self.alloc.ptr.cast::<u8>().wrapping_add(offset).cast())
            }
            _ => Err(out_of_range(call, offset, len, self.len)),
        }
    }

    /// Binds the device and waits for the queued work on the buffer.
    fn quiesce(&self, call: &'static str) -> Result<()> {
        self.alloc.uses.wait(call)?;
        self.alloc.device.bind(call)
    }

    /// Waits for the null stream, where the synchronous copies and fills run.
    fn settle(&self, call: &'static str) -> Result<()> {
        // SAFETY: the null stream is the current device's, always live.
        unsafe {
            self.alloc
                .device
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
        // SAFETY: the range lies inside this live allocation (checked); no queued work on
        // it runs (waited).
        unsafe { self.alloc.device.driver.memcpy_dtoh(dst, src) }.map_err(driver_error(CALL))
    }

    pub(crate) fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Buffer::write";
        let dst = self.at(CALL, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.quiesce(CALL)?;
        // SAFETY: as in `read`; `&mut self` excludes every other host access.
        unsafe { self.alloc.device.driver.memcpy_htod(dst, src) }.map_err(driver_error(CALL))?;
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
        unsafe { self.alloc.device.driver.memset(dst, value, len) }.map_err(driver_error(CALL))?;
        self.settle(CALL)
    }

    /// Copies from `src`, another buffer of the same device.
    pub(crate) fn copy_from(
        &mut self,
        dst_offset: usize,
        src: &HipBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Buffer::copy_from";
        let from = src.at(CALL, src_offset, len)?;
        let to = self.at(CALL, dst_offset, len)?;
        if !Arc::ptr_eq(&self.alloc.device, &src.alloc.device) {
            return Err(Error::InvalidArgument {
                call: CALL,
                reason: "the hip buffers are on different devices".into(),
            });
        }
        if len == 0 {
            return Ok(());
        }
        src.alloc.uses.wait(CALL)?;
        self.quiesce(CALL)?;
        // SAFETY: both ranges lie inside live allocations (checked); no queued work on
        // either runs (waited); they are different allocations (`&mut self` and `&src`
        // cannot alias), so they do not overlap.
        unsafe { self.alloc.device.driver.memcpy_dtod(to, from, len) }
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
        unsafe { self.alloc.device.driver.memcpy_dtod(to, from, len) }
            .map_err(driver_error(CALL))?;
        self.settle(CALL)
    }

    /// The bytes in place, for pinned and managed memory (the host reaches them directly).
    pub(crate) fn mapped_bytes(&mut self) -> Result<&mut [u8]> {
        const CALL: &str = "Buffer::with_mapped";
        if matches!(self.alloc.origin, Origin::Device | Origin::Imported) {
            return Err(Error::Unsupported {
                backend: BackendKind::Hip,
                call: CALL,
                reason: "device memory is not host-visible: allocate MemKind::Host (pinned) \
                         or MemKind::Shared (managed) to touch it in place"
                    .into(),
            });
        }
        self.quiesce(CALL)?;
        self.settle(CALL)?;
        // SAFETY: pinned and managed allocations are host-addressable for their whole `len`
        // bytes while the buffer lives; no queued work on it runs and the null stream is
        // idle (waited), and none can be queued while `&mut self` is borrowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.cast::<u8>(), self.len) })
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
