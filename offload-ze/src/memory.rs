//! Level Zero memory: device (`zeMemAllocDevice`), host (`zeMemAllocHost`) and shared
//! (`zeMemAllocShared`) allocations of the driver's context, their ranges and their release.
//! The host's copies in and out of them are the device's (`hal::Device` in device.rs):
//! they go through the device's synchronous immediate command list
//! (`zeCommandListAppendMemoryCopy` / `...MemoryFill`, each returning once done).
//!
//! Queued work on a buffer (Q1) is remembered by queue (`offload_driver::Uses`): a host
//! access or a free first waits for the queues that used the buffer.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::{BackendKind, Error, MemKind, Result};

use crate::ffi::{MemoryKind, sys};
use crate::shared::{DeviceShared, Mapping, driver_error};
use crate::stream::Uses;

/// Where a buffer's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Made by this process (`zeMemAlloc*`).
    Made(MemoryKind),
    /// Another process's memory, opened through IPC (`zeMemOpenIpcHandle`).
    Imported,
    /// Memory another library of this process allocated (`hal::Device::adopt`): never
    /// freed here; the allocation's owner lets it go.
    Adopted,
}

/// One allocation, released (`zeMemFree`, or `zeMemCloseIpcHandle` for an import) when its
/// buffer is gone and no queued work uses it.
pub(crate) struct Allocation {
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) ptr: *mut c_void,
    pub(crate) origin: Origin,
    /// The queued work that uses the memory.
    pub(crate) uses: Uses,
    /// For an import: the IPC mapping, held open while it lives.
    _mapping: Option<Arc<Mapping>>,
    /// For adopted memory: what keeps it alive, dropped with the allocation (after the
    /// queued work on it, which the drop waits for).
    _owner: Option<offload_core::hal::Owner>,
}

// SAFETY: the allocation owns its memory exclusively; the raw address is only handed to
// the driver (free-threaded calls, command lists behind their locks) or, for host-visible
// memory, turned into a slice under a buffer's `&mut self`.
unsafe impl Send for Allocation {}
// SAFETY: through `&Allocation` the memory is only reached through driver calls.
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        let driver = self.device.driver();
        let context = self.device.context();
        // A wait that fails (a lost device) leaves the memory allocated: freeing it under
        // work that may still run would be worse than the leak.
        if self.uses.wait().is_ok() {
            if let Origin::Made(_) = self.origin {
                // SAFETY: a live allocation of this context, freed once, here, with no
                // queued work on it (waited). (A mapping closes with its last user:
                // `shared::Mapping`'s drop.)
                let _ = unsafe { driver.free(context, self.ptr) };
            }
        }
        self.device.destroyed();
    }
}

/// An allocation of the Level Zero backend.
pub struct ZeBuffer {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    kind: MemKind,
    pub(crate) exportable: bool,
}

impl std::fmt::Debug for ZeBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeBuffer")
            .field("device", &self.alloc.device.ordinal)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

fn out_of_range(offset: usize, len: usize, size: usize) -> Error {
    Error::InvalidArgument {
        call: "",
        reason: format!(
            "ze buffer: range {offset}..{} is outside its {size} bytes",
            offset as u128 + len as u128
        ),
    }
}

impl ZeBuffer {
    /// Allocates `size` (> 0) bytes of `kind` memory on `device` (exportable ones are
    /// device memory whatever `kind` says: Level Zero shares only device allocations).
    pub(crate) fn new(
        device: &Arc<DeviceShared>,
        size: usize,
        kind: MemKind,
        exportable: bool,
    ) -> Result<ZeBuffer> {
        if size == 0 {
            return Err(Error::InvalidArgument {
                call: "",
                reason: "zero-size allocation on a Level Zero device".into(),
            });
        }
        let memory = match (kind, exportable) {
            (MemKind::Device, _) | (_, true) => MemoryKind::Device,
            (MemKind::Host, false) => MemoryKind::Host,
            (MemKind::Shared, false) => MemoryKind::Shared,
            (other, false) => {
                return Err(Error::Unsupported {
                    backend: BackendKind::Ze,
                    call: "",
                    reason: format!("memory kind {other:?}"),
                });
            }
        };
        let oom = |failure: offload_driver::Failure| {
            let out_of_memory = [
                sys::ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
                sys::ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY,
            ];
            if out_of_memory.iter().any(|&c| i64::from(c) == failure.code) {
                Error::OutOfMemory {
                    backend: BackendKind::Ze,
                    call: "",
                    requested: size as u64,
                    reason: failure.message(),
                }
            } else {
                driver_error(failure)
            }
        };
        let ptr = device
            .driver()
            .alloc(device.context(), device.handle, memory, size)
            .map_err(oom)?;
        device.made();
        Ok(ZeBuffer {
            alloc: Arc::new(Allocation {
                device: device.clone(),
                ptr,
                origin: Origin::Made(memory),
                uses: Uses::default(),
                _mapping: None,
                _owner: None,
            }),
            len: size,
            kind,
            exportable,
        })
    }

    /// A buffer over `len` bytes at `ptr` that another library of this process allocated
    /// on this device, kept alive by `owner` (`hal::Device::adopt`).
    pub(crate) fn adopted(
        device: &Arc<DeviceShared>,
        ptr: *mut c_void,
        len: usize,
        kind: MemKind,
        owner: offload_core::hal::Owner,
    ) -> ZeBuffer {
        device.made();
        ZeBuffer {
            alloc: Arc::new(Allocation {
                device: device.clone(),
                ptr,
                origin: Origin::Adopted,
                uses: Uses::default(),
                _mapping: None,
                _owner: Some(owner),
            }),
            len,
            kind,
            exportable: false,
        }
    }

    /// A buffer over another process's memory, mapped by `mapping` (closed with its last
    /// buffer).
    pub(crate) fn imported(
        device: &Arc<DeviceShared>,
        mapping: Arc<Mapping>,
        len: usize,
    ) -> ZeBuffer {
        device.made();
        ZeBuffer {
            alloc: Arc::new(Allocation {
                device: device.clone(),
                ptr: mapping.ptr,
                origin: Origin::Imported,
                uses: Uses::default(),
                _mapping: Some(mapping),
                _owner: None,
            }),
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
    /// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else { return Ok(()) };
    /// let dev = ze.devices().remove(0);
    /// let buf = dev.alloc(10, MemKind::Device)?;
    /// assert_eq!(buf.len(), 10);
    /// dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: Level Zero buffers are never empty.
    ///
    /// ```
    /// fn empty(b: &offload_ze::ZeBuffer) -> bool { b.is_empty() }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// fn kind(b: &offload_ze::ZeBuffer) -> offload_core::MemKind { b.kind() }
    /// ```
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// The driver's identity of the allocation (`zeMemGetAllocProperties().id`): unique
    /// among the context's live allocations, never its address.
    ///
    /// ```
    /// use offload_core::hal::{Device as _, Platform as _};
    /// use offload_core::{Config, MemKind};
    /// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else { return Ok(()) };
    /// let dev = ze.devices().remove(0);
    /// let (a, b) = (dev.alloc(8, MemKind::Device)?, dev.alloc(8, MemKind::Device)?);
    /// assert_ne!(a.allocation_id()?, b.allocation_id()?);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn allocation_id(&self) -> Result<u64> {
        let device = &self.alloc.device;
        device
            .driver()
            .alloc_id(device.context(), self.alloc.ptr)
            .map_err(driver_error)
    }

    /// The device address of the first byte.
    pub(crate) fn address(&self) -> u64 {
        self.alloc.ptr as u64
    }

    pub(crate) fn device(&self) -> &Arc<DeviceShared> {
        &self.alloc.device
    }

    /// Checks that `offset..offset + len` lies inside the buffer; the address of `offset`.
    pub(crate) fn at(&self, offset: usize, len: usize) -> Result<*mut c_void> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {
                Ok(self.alloc.ptr.cast::<u8>().wrapping_add(offset).cast())
            }
            _ => Err(out_of_range(offset, len, self.len)),
        }
    }

    /// The bytes in place, for host and shared memory (the host reaches them directly).
    pub(crate) fn mapped_bytes(&mut self) -> Result<&mut [u8]> {
        if !matches!(
            self.alloc.origin,
            Origin::Made(MemoryKind::Host | MemoryKind::Shared)
        ) {
            return Err(Error::Unsupported {
                backend: BackendKind::Ze,
                call: "",
                reason: "device memory is not host-visible: allocate MemKind::Host or \
                         MemKind::Shared to touch it in place"
                    .into(),
            });
        }
        self.alloc.uses.wait()?;
        // SAFETY: host and shared allocations are host-addressable for their whole `len`
        // bytes while the buffer lives; no queued work on it runs (waited), and none can be
        // queued while `&mut self` is borrowed; the host's own copies are synchronous.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.cast::<u8>(), self.len) })
    }
}
