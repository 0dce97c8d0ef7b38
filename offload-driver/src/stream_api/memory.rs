//! Memory of a stream-based vendor API: device, page-locked host, managed and imported IPC
//! memory ([`StreamBuffer`]), its ranges and its release. The host's copies in and out of it
//! are the device's (`hal::Device` in device.rs), on the terms below; exporting and
//! importing it are IPC's (ipc.rs).
//!
//! Queued work on a buffer (Q1) is remembered by stream ([`Uses`](crate::Uses)): a host
//! access, a free or an export first synchronises the streams that used the buffer
//! (possibly waiting for later work on them too, never for less). The vendor's synchronous
//! copies and fills run on the legacy default (null) stream, which offload's non-blocking
//! streams do not wait for, so each is followed by a synchronisation of that stream: when
//! one returns, its bytes are where they belong, for the host and for every queue.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::{Error, MemKind, Result, hal};

use super::shared::{DeviceCore, Mapping};
use super::stream::Uses;
use super::{StreamApi, driver_error};

/// Where a buffer's memory comes from.
#[derive(Debug)]
pub(crate) enum Origin {
    /// Device memory (exportable to other processes).
    Device,
    /// Page-locked host memory at this host address (which is also its device address:
    /// unified addressing).
    Pinned(*mut c_void),
    /// Managed memory.
    Managed,
    /// Another process's memory, opened through IPC.
    Imported,
    /// Memory another library of this process allocated (`hal::Device::adopt`): never
    /// freed here; its owner, dropped with the allocation, lets it go.
    Adopted {
        /// Kept for its drop.
        _owner: Owner,
    },
}

/// What keeps adopted memory alive (`hal::Owner`), kept for its drop.
pub(crate) struct Owner(#[allow(dead_code, reason = "kept for its drop")] hal::Owner);

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Owner")
    }
}

/// One allocation: freed when its last buffer is gone (an exportable allocation can have
/// several: its owner, and the imports of it in this same process, which alias it).
pub(crate) struct Allocation<A: StreamApi> {
    pub(crate) core: Arc<DeviceCore<A>>,
    pub(crate) ptr: u64,
    len: usize,
    pub(crate) origin: Origin,
    /// The queued work that uses the memory.
    pub(crate) uses: Uses<A>,
    /// For an import from another process: the IPC mapping, held open while it lives.
    _mapping: Option<Arc<Mapping<A>>>,
}

// SAFETY: the allocation owns its memory exclusively; the only non-`Send` member is a
// pinned allocation's host address, which points into that memory. Vendor calls may come
// from any thread (the device is bound before each; `StreamApi`'s contract).
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for Allocation<A> {}
// SAFETY: through `&Allocation` nothing is touched but through vendor calls.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for Allocation<A> {}

impl<A: StreamApi> Allocation<A> {
    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<A: StreamApi> Drop for Allocation<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // A wait that fails (a lost device) leaves the memory allocated: freeing it under
        // work that may still run would be worse than the leak.
        if self.uses.wait().is_ok() && self.core.bind_to_release().is_ok() {
            let api = self.core.api();
            match self.origin {
                Origin::Device | Origin::Managed => {
                    // SAFETY: a live allocation of the bound device, freed once (here), with
                    // no queued work on it (waited) and no buffer left over it.
                    let _ = unsafe { api.free_device(self.ptr) };
                }
                Origin::Pinned(host) => {
                    // SAFETY: as above, for page-locked host memory.
                    let _ = unsafe { api.free_host(host) };
                }
                // The mapping closes with its last user (`Mapping`'s drop).
                Origin::Imported => {}
                // Not ours to free: the owner, dropped with the origin after this, lets it
                // go (after the queued work on it: waited above).
                Origin::Adopted { .. } => {}
            }
        }
        self.core.destroyed();
    }
}

impl<A: StreamApi> Drop for StreamBuffer<A> {
    /// Inside a host function the allocation is kept for a later release (L6,
    /// `DeviceCore::keep_if_in_host_fn`).
    fn drop(&mut self) {
        self.alloc.core.keep_if_in_host_fn(self.alloc.clone());
    }
}

/// An allocation of a stream-based vendor backend (`CudaBuffer`, `HipBuffer`).
///
/// ```
/// fn size<A: offload_driver::StreamApi>(b: &offload_driver::StreamBuffer<A>) -> usize {
///     b.len()
/// }
/// ```
pub struct StreamBuffer<A: StreamApi> {
    pub(crate) alloc: Arc<Allocation<A>>,
    len: usize,
    kind: MemKind,
    pub(crate) exportable: bool,
}

impl<A: StreamApi> std::fmt::Debug for StreamBuffer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&format!("{}Buffer", A::WORDS.prefix))
            .field("device", &self.alloc.core.ordinal())
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

fn out_of_range<A: StreamApi>(offset: usize, len: usize, size: usize) -> Error {
    Error::InvalidArgument {
        call: "",
        reason: format!(
            "{} buffer: range {offset}..{} is outside its {size} bytes",
            A::WORDS.name,
            offset as u128 + len as u128
        ),
    }
}

impl<A: StreamApi> StreamBuffer<A> {
    /// Allocates `size` (> 0) bytes of `kind` memory on `core`'s device.
    pub(crate) fn new(
        core: &Arc<DeviceCore<A>>,
        size: usize,
        kind: MemKind,
        exportable: bool,
    ) -> Result<StreamBuffer<A>> {
        core.settle();
        let words = A::WORDS;
        if size == 0 {
            return Err(Error::InvalidArgument {
                call: "",
                reason: format!("zero-size allocation on a {} device", words.title),
            });
        }
        core.bind()?;
        let api = core.api();
        let oom = |failure: crate::Failure| {
            if failure.code == A::OUT_OF_MEMORY {
                Error::OutOfMemory {
                    backend: A::KIND,
                    call: "",
                    requested: size as u64,
                    reason: failure.message(),
                }
            } else {
                driver_error::<A>(failure)
            }
        };
        let (ptr, origin) = match (kind, exportable) {
            (MemKind::Device, _) | (_, true) => {
                (api.alloc_device(size).map_err(oom)?, Origin::Device)
            }
            (MemKind::Host, false) => {
                let host = api.alloc_host(size).map_err(oom)?;
                (host as u64, Origin::Pinned(host))
            }
            (MemKind::Shared, false) => match api.alloc_managed(size) {
                Some(made) => (made.map_err(oom)?, Origin::Managed),
                None => {
                    return Err(Error::Unsupported {
                        backend: A::KIND,
                        call: "",
                        reason: format!(
                            "the {} has no {} (managed memory)",
                            words.driver, words.managed
                        ),
                    });
                }
            },
            (other, false) => {
                return Err(Error::Unsupported {
                    backend: A::KIND,
                    call: "",
                    reason: format!("memory kind {other:?}"),
                });
            }
        };
        core.made();
        let alloc = Arc::new(Allocation {
            core: core.clone(),
            ptr,
            len: size,
            origin,
            uses: Uses::default(),
            _mapping: None,
        });
        if exportable {
            core.exported(&alloc);
        }
        Ok(StreamBuffer {
            alloc,
            len: size,
            kind,
            exportable,
        })
    }

    /// A buffer over `len` bytes at `ptr` that another library of this process allocated on
    /// this device, kept alive by `owner` (`hal::Device::adopt`).
    pub(crate) fn adopted(
        core: &Arc<DeviceCore<A>>,
        ptr: u64,
        len: usize,
        kind: MemKind,
        owner: hal::Owner,
    ) -> StreamBuffer<A> {
        core.made();
        StreamBuffer {
            alloc: Arc::new(Allocation {
                core: core.clone(),
                ptr,
                len,
                origin: Origin::Adopted {
                    _owner: Owner(owner),
                },
                uses: Uses::default(),
                _mapping: None,
            }),
            len,
            kind,
            exportable: false,
        }
    }

    /// A buffer over memory another process exported, mapped by `mapping`.
    pub(crate) fn imported(
        core: &Arc<DeviceCore<A>>,
        mapping: Arc<Mapping<A>>,
        len: usize,
    ) -> StreamBuffer<A> {
        core.made();
        StreamBuffer {
            alloc: Arc::new(Allocation {
                core: core.clone(),
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
    pub(crate) fn alias(alloc: Arc<Allocation<A>>, len: usize) -> StreamBuffer<A> {
        StreamBuffer {
            alloc,
            len,
            kind: MemKind::Device,
            exportable: false,
        }
    }

    pub(crate) fn core(&self) -> &Arc<DeviceCore<A>> {
        &self.alloc.core
    }

    /// The device address of the first byte.
    pub(crate) fn ptr(&self) -> u64 {
        self.alloc.ptr
    }

    pub(crate) fn uses(&self) -> &Uses<A> {
        &self.alloc.uses
    }

    /// Size in bytes.
    ///
    /// ```
    /// fn size<A: offload_driver::StreamApi>(b: &offload_driver::StreamBuffer<A>) -> usize {
    ///     b.len()
    /// }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers are never empty.
    ///
    /// ```
    /// fn empty<A: offload_driver::StreamApi>(b: &offload_driver::StreamBuffer<A>) -> bool {
    ///     b.is_empty()
    /// }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// use offload_core::MemKind;
    /// fn kind<A: offload_driver::StreamApi>(b: &offload_driver::StreamBuffer<A>) -> MemKind {
    ///     b.kind()
    /// }
    /// ```
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// Checks that `offset..offset + len` lies inside the buffer; the device address of
    /// `offset`.
    pub(crate) fn at(&self, offset: usize, len: usize) -> Result<u64> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.alloc.ptr + offset as u64),
            _ => Err(out_of_range::<A>(offset, len, self.len)),
        }
    }

    /// Binds the device and waits for the queued work on the buffer.
    pub(crate) fn quiesce(&self) -> Result<()> {
        self.alloc.uses.wait()?;
        self.alloc.core.bind()
    }

    /// Waits for the stream the synchronous copies and fills run on.
    #[allow(unsafe_code)]
    pub(crate) fn settle(&self) -> Result<()> {
        // SAFETY: that stream is the bound device's own, always live.
        unsafe { self.alloc.core.api().stream_synchronize(None) }.map_err(driver_error::<A>)
    }

    /// The bytes in place, for pinned and managed memory (the host reaches them directly),
    /// after the queued work on them.
    #[allow(unsafe_code)]
    pub(crate) fn mapped_bytes(&mut self) -> Result<&mut [u8]> {
        let base = match self.alloc.origin {
            Origin::Pinned(host) => host.cast::<u8>(),
            Origin::Managed => std::ptr::with_exposed_provenance_mut::<u8>(self.alloc.ptr as usize),
            Origin::Device | Origin::Imported | Origin::Adopted { .. } => {
                return Err(Error::Unsupported {
                    backend: A::KIND,
                    call: "",
                    reason: "device memory is not host-visible: allocate MemKind::Host \
                             (pinned) or MemKind::Shared (managed) to touch it in place"
                        .into(),
                });
            }
        };
        self.quiesce()?;
        self.settle()?;
        // SAFETY: pinned and managed allocations are host-addressable for their whole `len`
        // bytes while the buffer lives (`StreamApi`'s contract); no queued work on it runs
        // and the synchronous stream is idle (waited), none can be queued while `&mut
        // self` is borrowed, and no other process maps it (not exportable: exportable
        // memory is `Origin::Device`).
        Ok(unsafe { std::slice::from_raw_parts_mut(base, self.len) })
    }
}
