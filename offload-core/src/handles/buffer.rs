//! [`Buffer`]: memory on a device, and its synchronous copies.
//!
//! A buffer keeps its backend allocation behind its own `RwLock<Option<_>>`: every call
//! holds it shared, and teardown takes it exclusively, which drains the calls in flight.
//! Per-buffer locks keep a long copy on one buffer from stalling work on others. Whether
//! two concurrent copies into the same bytes are sound is the backend's business (each
//! backend's safe API must make it so on its own).

use std::fmt;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use crate::erased::DynBuffer;
use crate::error::{Error, Result};
use crate::hal::{BackendKind, MemKind};
use crate::handles::Device;
use crate::runtime::generation::{DeviceKey, Generation, Kind, Resource, ResourceKey};
use crate::sync::{read, write};

/// The live part of a buffer: its backend allocation, with its platform.
pub(crate) struct Allocation {
    raw: Box<dyn DynBuffer>,
}

impl Allocation {
    /// The backend buffer, for a launch's arguments.
    pub(crate) fn raw(&self) -> &(dyn DynBuffer + 'static) {
        &*self.raw
    }
}

/// A buffer's shared state, also listed in its generation's buffer table.
pub(crate) struct BufferEntry {
    device: DeviceKey,
    backend: BackendKind,
    size: usize,
    kind: MemKind,
    allocation: RwLock<Option<Allocation>>,
}

impl BufferEntry {
    /// Frees the allocation if it is still there (waits for copies in flight).
    fn free(&self) -> Result<()> {
        match write(&self.allocation).take() {
            Some(a) => a.raw.free(),
            None => Ok(()),
        }
    }
}

impl Resource for BufferEntry {
    fn release(self: Arc<Self>) -> Result<()> {
        self.free()
    }
}

/// Memory on a device. Owning: dropping it frees the memory (errors met then are returned
/// by the runtime's `shutdown`); [`Buffer::free`] frees it and returns the error directly.
///
/// Copies are synchronous. Every call after the runtime shut down returns `Error::ShutDown`.
///
/// ```
/// use offload_core::{MemKind, reference::Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let buf = dev.alloc(8, MemKind::Device)?;
/// buf.write(0, &[1, 2, 3, 4, 5, 6, 7, 8])?;
/// let mut out = [0u8; 4];
/// buf.read(2, &mut out)?;
/// assert_eq!(out, [3, 4, 5, 6]);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Buffer {
    generation: Arc<Generation>,
    key: ResourceKey,
    entry: Arc<BufferEntry>,
}

impl Buffer {
    /// Allocates on `device` and lists the buffer in its generation.
    pub(crate) fn alloc(device: &Device, size: usize, kind: MemKind) -> Result<Buffer> {
        let generation = device.generation();
        generation.with_live(|live| {
            let raw_device = live.device(device.key())?;
            if size == 0 {
                return Err(Error::invalid(
                    "Device::alloc",
                    format!("zero-size allocation on {device}"),
                ));
            }
            let raw = raw_device.clone().alloc(size, kind)?;
            let entry = Arc::new(BufferEntry {
                device: device.key(),
                backend: device.backend(),
                size,
                kind,
                allocation: RwLock::new(Some(Allocation { raw })),
            });
            let (key, entry) = live.register(Kind::Buffer, |_| entry)?;
            Ok(Buffer {
                generation: generation.clone(),
                key,
                entry,
            })
        })
    }

    /// Size in bytes (fixed at allocation; valid after shutdown too).
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(100, offload_core::MemKind::Host)?;
    /// assert_eq!(buf.len(), 100);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.entry.size
    }

    /// Always false: offload never makes an empty buffer.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert!(!dev.alloc(1, offload_core::MemKind::Device)?.is_empty());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.entry.size == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// use offload_core::MemKind;
    /// assert_eq!(dev.alloc(1, MemKind::Shared)?.kind(), MemKind::Shared);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn kind(&self) -> MemKind {
        self.entry.kind
    }

    /// The device it lives on.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(1, offload_core::MemKind::Device)?;
    /// assert_eq!(buf.device(), dev);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn device(&self) -> Device {
        Device::new(
            self.generation.clone(),
            self.entry.device,
            self.entry.backend,
        )
    }

    pub(crate) fn entry_ptr(&self) -> *const () {
        Arc::as_ptr(&self.entry).cast()
    }

    pub(crate) fn device_key(&self) -> DeviceKey {
        self.entry.device
    }

    pub(crate) fn same_generation(&self, generation: &Arc<Generation>) -> bool {
        Arc::ptr_eq(&self.generation, generation)
    }

    /// The allocation, held exclusively (for a launch that may write it).
    pub(crate) fn lock_exclusive(&self) -> RwLockWriteGuard<'_, Option<Allocation>> {
        write(&self.entry.allocation)
    }

    fn check_range(&self, call: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.entry.size => Ok(()),
            _ => Err(Error::invalid(
                call,
                format!(
                    "range {offset}..{} is outside {self} ({} bytes)",
                    offset as u128 + len as u128,
                    self.entry.size
                ),
            )),
        }
    }

    /// Runs `f` on the live allocation, shared with other readers; teardown cannot free it
    /// under the call.
    fn with_raw<T>(&self, f: impl FnOnce(&dyn DynBuffer) -> Result<T>) -> Result<T> {
        let guard = read(&self.entry.allocation);
        let a = guard.as_ref().ok_or(Error::ShutDown)?;
        f(&*a.raw)
    }

    /// Runs `f` on the live allocation with exclusive access (the backend gets `&mut`).
    fn with_raw_mut<T>(&self, f: impl FnOnce(&mut dyn DynBuffer) -> Result<T>) -> Result<T> {
        let mut guard = write(&self.entry.allocation);
        let a = guard.as_mut().ok_or(Error::ShutDown)?;
        f(&mut *a.raw)
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload_core::MemKind::Device)?;
    /// let mut out = [9u8; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0; 4]); // new memory reads as zero on the reference backend
    /// assert!(buf.read(1, &mut out).is_err()); // 1..5 is outside
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.with_raw(|raw| {
            self.check_range("Buffer::read", offset, dst.len())?;
            raw.read(offset, dst)
        })
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload_core::MemKind::Device)?;
    /// buf.write(2, &[1, 2])?;
    /// assert!(buf.write(3, &[1, 2]).is_err());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.with_raw_mut(|raw| {
            self.check_range("Buffer::write", offset, src.len())?;
            raw.write(offset, src)
        })
    }

    /// Sets `len` bytes from `offset` to `value`.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload_core::MemKind::Device)?;
    /// buf.fill(1, 2, 0xAB)?;
    /// let mut out = [0u8; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0, 0xAB, 0xAB, 0]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.with_raw_mut(|raw| {
            self.check_range("Buffer::fill", offset, len)?;
            raw.fill(offset, len, value)
        })
    }

    /// Copies `len` bytes from `src` at `src_offset` into this buffer at `dst_offset`.
    /// Both buffers must be on the same device (`InvalidArgument` otherwise); `src` may be
    /// this buffer, with overlapping ranges.
    ///
    /// ```
    /// use offload_core::MemKind;
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let a = dev.alloc(4, MemKind::Device)?;
    /// let b = dev.alloc(4, MemKind::Device)?;
    /// a.write(0, &[1, 2, 3, 4])?;
    /// b.copy_from(0, &a, 1, 3)?;
    /// let mut out = [0u8; 4];
    /// b.read(0, &mut out)?;
    /// assert_eq!(out, [2, 3, 4, 0]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn copy_from(
        &self,
        dst_offset: usize,
        src: &Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Buffer::copy_from";
        if Arc::ptr_eq(&self.entry, &src.entry) {
            return self.with_raw_mut(|raw| {
                self.check_range(CALL, dst_offset, len)?;
                self.check_range(CALL, src_offset, len)?;
                raw.copy_within(src_offset, dst_offset, len)
            });
        }
        if !Arc::ptr_eq(&self.generation, &src.generation) || self.entry.device != src.entry.device
        {
            // A buffer of a finished generation is shut down whatever else is wrong.
            src.with_raw(|_| Ok(()))?;
            self.with_raw(|_| Ok(()))?;
            return Err(Error::invalid(
                CALL,
                format!("source {src} and destination {self} are on different devices"),
            ));
        }
        src.check_range(CALL, src_offset, len)?;
        self.check_range(CALL, dst_offset, len)?;
        // Two locks, taken in address order so opposite copies cannot deadlock; teardown
        // holds at most one buffer lock at a time, so it cannot deadlock with this either.
        let (src_guard, mut dst_guard) = if Arc::as_ptr(&src.entry) < Arc::as_ptr(&self.entry) {
            let s = read(&src.entry.allocation);
            (s, write(&self.entry.allocation))
        } else {
            let d = write(&self.entry.allocation);
            (read(&src.entry.allocation), d)
        };
        let (Some(s), Some(d)) = (src_guard.as_ref(), dst_guard.as_mut()) else {
            return Err(Error::ShutDown);
        };
        d.raw.copy_from(dst_offset, &*s.raw, src_offset, len)
    }

    /// Frees the memory now and returns any error. After shutdown it returns
    /// `Error::ShutDown` (teardown already freed the memory).
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload_core::MemKind::Device)?;
    /// buf.free()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn free(self) -> Result<()> {
        // The drop that follows finds nothing left to free.
        self.release()
    }

    /// Forgets the buffer in its generation and frees it, holding the generation so a
    /// concurrent teardown cannot deinitialise the platform in between.
    fn release(&self) -> Result<()> {
        self.generation.with_live(|live| {
            live.forget(Kind::Buffer, self.key);
            self.entry.free()
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match self.release() {
            Ok(()) | Err(Error::ShutDown) => {}
            Err(e) => self.generation.defer(Err(e)),
        }
    }
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} buffer {:?} of generation {}",
            self.entry.backend, self.key, self.generation.id
        )
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("backend", &self.entry.backend)
            .field("key", &self.key)
            .field("len", &self.entry.size)
            .field("kind", &self.entry.kind)
            .finish()
    }
}
