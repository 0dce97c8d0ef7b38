//! The handles users hold: `Device` and `Buffer`.
//!
//! A handle is an owning, non-`Copy` wrapper: a generational key (slotmap) plus a reference
//! to the runtime generation that made it. It never holds a driver object directly: those
//! live in the generation and are released by its teardown, so a handle that outlives its
//! runtime only ever sees `Error::ShutDown` (L3), and dropping it then does nothing.
//!
//! A buffer keeps its backend allocation behind its own `RwLock<Option<_>>`: every call
//! holds it shared, and teardown takes it exclusively, which drains the calls in flight.
//! Per-buffer locks keep a long copy on one buffer from stalling work on others. Whether
//! two concurrent copies into the same bytes are sound is the backend's business (each
//! backend's safe API must make it so on its own).

use std::any::Any;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use crate::backend::{BackendKind, DeviceInfo, MemKind};
use crate::dynamic::DynBuffer;
use crate::error::{Error, Result};
use crate::runtime::{self, Generation};
use crate::sync::{read, write};

slotmap::new_key_type! {
    /// Key of a device in its generation.
    pub(crate) struct DeviceKey;
    /// Key of a buffer in its generation.
    pub(crate) struct BufferKey;
}

/// A device of a live runtime. Cheap to clone; all clones name the same device.
///
/// ```
/// use offload_core::{BackendKind, MemKind, reference::Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// assert_eq!(dev.backend(), BackendKind::Reference);
/// let buf = dev.alloc(16, MemKind::Device)?;
/// assert_eq!(buf.len(), 16);
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    generation: Arc<Generation>,
    key: DeviceKey,
    backend: BackendKind,
}

impl Device {
    pub(crate) fn new(generation: Arc<Generation>, key: DeviceKey, backend: BackendKind) -> Self {
        Device {
            generation,
            key,
            backend,
        }
    }

    pub(crate) fn generation(&self) -> &Arc<Generation> {
        &self.generation
    }

    pub(crate) fn key(&self) -> DeviceKey {
        self.key
    }

    /// The backend that drives this device. Works after shutdown too (it is identity, not
    /// state).
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.backend().name(), "reference");
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// What the device says about itself.
    ///
    /// ```
    /// let rt = offload_core::reference::Offload::init()?;
    /// let info = rt.devices()?[0].info()?;
    /// assert!(info.memory > 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn info(&self) -> Result<DeviceInfo> {
        runtime::device_info(self)
    }

    /// Allocates `size` bytes of `kind` memory. A zero size is `InvalidArgument`; more
    /// than the device has is `OutOfMemory`.
    ///
    /// ```
    /// use offload_core::{Error, MemKind};
    /// let rt = offload_core::reference::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert!(matches!(dev.alloc(0, MemKind::Device), Err(Error::InvalidArgument { .. })));
    /// assert!(matches!(dev.alloc(1 << 62, MemKind::Device), Err(Error::OutOfMemory { .. })));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn alloc(&self, size: usize, kind: MemKind) -> Result<Buffer> {
        runtime::alloc(self, size, kind)
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.generation, &other.generation) && self.key == other.key
    }
}

impl Eq for Device {}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} device {:?} of generation {}",
            self.backend, self.key, self.generation.id
        )
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The live part of a buffer: its backend allocation, with its platform.
pub(crate) struct Allocation {
    raw: Box<dyn DynBuffer>,
}

impl Allocation {
    /// The backend buffer, for a launch's arguments.
    pub(crate) fn raw(&self) -> &(dyn Any + Send + Sync) {
        self.raw.as_any()
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
    pub(crate) fn new(
        device: DeviceKey,
        backend: BackendKind,
        size: usize,
        kind: MemKind,
        raw: Box<dyn DynBuffer>,
    ) -> Self {
        BufferEntry {
            device,
            backend,
            size,
            kind,
            allocation: RwLock::new(Some(Allocation { raw })),
        }
    }

    /// Frees the allocation if it is still there (waits for copies in flight).
    pub(crate) fn release(&self) -> Result<()> {
        match write(&self.allocation).take() {
            Some(a) => a.raw.free(),
            None => Ok(()),
        }
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
    key: BufferKey,
    entry: Arc<BufferEntry>,
}

impl Buffer {
    pub(crate) fn new(
        generation: Arc<Generation>,
        key: BufferKey,
        entry: Arc<BufferEntry>,
    ) -> Self {
        Buffer {
            generation,
            key,
            entry,
        }
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
        runtime::free(&self.generation, self.key, &self.entry)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match runtime::free(&self.generation, self.key, &self.entry) {
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
