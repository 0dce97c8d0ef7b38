//! [`Buffer`]: memory on a device, its synchronous copies, and its export and import (I1).
//!
//! A buffer's allocation ([`BufferEntry`]) keeps its backend memory behind its own lock, the
//! standard library's `RwLock` (writer-preferring on Linux, model-checked as it is under
//! `--cfg offload_model`): reads hold it shared, writes, launches and teardown exclusively,
//! so teardown drains the calls in flight (L3, L4). Per-allocation locks keep a long copy
//! on one buffer from stalling work on others.
//!
//! No wait can close a cycle (L7): a call that locks several buffers (a copy, a launch, a
//! queued copy) takes their locks in one order, by allocation address, whatever each
//! lock's mode; teardown holds one buffer lock at a time; and the one place user code runs
//! under a buffer's lock, `with_mapped`'s closure, may make no offload call that waits
//! (`runtime::reentry::refuse_in_mapped`).
//!
//! A `Buffer` handle is a window on an allocation. Most own theirs (dropping them frees
//! it); an IPC endpoint hands out *views* of a mapping it owns, which tell it when they are
//! dropped, and whose calls answer `Error::InvalidIpcHandle` once the sending process
//! unmapped the memory (I3).

use crate::sync::{
    Arc, AtomicBool, AtomicU64, OnceLock, Ordering, RwLock, RwLockReadGuard, RwLockWriteGuard,
    read, statics, write,
};
use smallvec::SmallVec;
use std::fmt;

use crate::erased::DynBuffer;
use crate::error::{Error, Result};
use crate::hal::{BackendKind, MemKind};
use crate::handles::Device;
use crate::runtime::generation::{DeviceKey, Generation, Kind, Live, Resource, ResourceKey};
use crate::runtime::reentry;

/// Bytes a copy between two devices stages through host memory at a time.
pub const STAGING_CHUNK: usize = 8 << 20;

statics! {
    /// Source of allocation ids: unique among the allocations of this process, never reused
    /// (const-initialised, so it starts over with the library; the IPC process token tells
    /// loads apart).
    static NEXT_ALLOCATION: AtomicU64 = AtomicU64::new(1);
}

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

/// Where an allocation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `Device::alloc`.
    Allocated,
    /// `Device::alloc_exportable`: it can be exported.
    Exportable,
    /// `Device::import` or an IPC endpoint: another process's memory, mapped here.
    Imported,
    /// `Device::adopt`: memory another library of this process allocated.
    Adopted,
}

/// The owner of adopted memory (`Device::adopt`), whose drop runs as user code (L6).
struct UserOwned(crate::hal::Owner);

impl Drop for UserOwned {
    fn drop(&mut self) {
        let _user = crate::runtime::reentry::enter(None);
        drop(std::mem::replace(&mut self.0, Box::new(())));
    }
}

/// One allocation, shared by the handles on it and listed in its generation.
pub(crate) struct BufferEntry {
    /// Unique in this process: the allocation's identity in IPC handles and the cache.
    pub(crate) id: u64,
    pub(crate) device: DeviceKey,
    pub(crate) backend: BackendKind,
    size: usize,
    kind: MemKind,
    pub(crate) origin: Origin,
    /// What sharing it with other processes adds (IPC's state of it): set once, at its
    /// first export or at its import; unset for memory never shared.
    shared: OnceLock<Box<dyn SharedMemory>>,
    /// Work that uses it may be queued (set by every launch and queued copy under its
    /// exclusive lock, cleared by a host access that found none pending under its lock): a
    /// host access asks the backend only while it is set.
    queued: AtomicBool,
    /// The user's name for it ([`Buffer::label`]), for messages.
    label: RwLock<Option<Arc<str>>>,
    /// The memory, shared by calls that read it, taken by those that write it and by
    /// teardown.
    allocation: RwLock<Option<Allocation>>,
}

impl BufferEntry {
    /// Frees the allocation if it is still there (waits for copies in flight).
    pub(crate) fn free(&self) -> Result<()> {
        crate::runtime::fork::refuse("Buffer::free")?;
        reentry::refuse_in_mapped("Buffer::free")?;
        let mut allocation = write(&self.allocation);
        match allocation.take() {
            Some(a) => {
                if let Some(shared) = self.shared.get() {
                    shared.freed();
                }
                a.raw.free().map_err(|e| e.in_call("Buffer::free"))
            }
            None => Ok(()),
        }
    }

    /// Forgets the allocation (listed in `generation` as `key`) and frees it, under the
    /// generation's lock: a teardown in between would find it in no registry and
    /// deinitialise its platform with it still allocated. `ShutDown` once the teardown
    /// took the state (it frees what is listed).
    pub(crate) fn forget_and_free(&self, generation: &Generation, key: ResourceKey) -> Result<()> {
        generation.with_live(|live| {
            live.forget(Kind::Buffer, key);
            self.free()
        })
    }

    /// An imported mapping's sender unmapped it: release it; every view answers
    /// `InvalidIpcHandle` from now on.
    pub(crate) fn revoke(&self) -> Result<()> {
        if let Some(shared) = self.shared.get() {
            shared.revoke();
        }
        self.free()
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn backend(&self) -> BackendKind {
        self.backend
    }

    pub(crate) fn origin(&self) -> Origin {
        self.origin
    }

    /// The allocation is shared with other processes (exported, or imported): `shared`
    /// is IPC's state of it from now on. The first set stays: a second export finds the
    /// state its first one set.
    pub(crate) fn share(&self, shared: impl FnOnce() -> Box<dyn SharedMemory>) {
        let _ = self.shared.get_or_init(shared);
    }

    /// The error of a call on this allocation once it is gone.
    fn gone(&self, call: &'static str) -> Error {
        if self.shared.get().is_some_and(|s| s.revoked()) {
            Error::InvalidIpcHandle {
                backend: Some(self.backend),
                call,
                reason: "the process that shared this memory unmapped it (freed or evicted)".into(),
            }
        } else {
            Error::shut_down()
        }
    }

    /// Makes, and lists in the generation, an allocation from `raw`.
    pub(crate) fn register(
        live: &Live,
        device: &Device,
        size: usize,
        kind: MemKind,
        origin: Origin,
        raw: Box<dyn DynBuffer>,
    ) -> Result<(ResourceKey, Arc<BufferEntry>)> {
        let entry = Arc::new(BufferEntry {
            id: NEXT_ALLOCATION.fetch_add(1, Ordering::Relaxed),
            device: device.key(),
            backend: device.backend(),
            size,
            kind,
            origin,
            shared: OnceLock::new(),
            queued: AtomicBool::new(false),
            label: RwLock::new(None),
            allocation: RwLock::new(Some(Allocation { raw })),
        });
        live.register(Kind::Buffer, |_| entry)
    }
}

/// Buffers held exclusively by [`Buffer::lock_all_exclusive`].
pub(crate) struct LockedAll<'a> {
    order: SmallVec<[&'a Buffer; 8]>,
    guards: SmallVec<[RwLockWriteGuard<'a, Option<Allocation>>; 8]>,
}

impl LockedAll<'_> {
    /// The live allocation of `buffer` (one of those locked), or the error of `call` on it
    /// once its memory is gone.
    pub(crate) fn allocation(&self, call: &'static str, buffer: &Buffer) -> Result<&Allocation> {
        let at = self
            .order
            .iter()
            .position(|b| b.entry_ptr() == buffer.entry_ptr())
            .unwrap_or(0);
        self.guards[at].as_ref().ok_or_else(|| buffer.gone(call))
    }
}

/// Whoever owns the allocation a view looks at (an IPC endpoint's mapping), told when the
/// view is dropped.
pub(crate) trait ViewOwner: Send + Sync {
    fn view_dropped(&self);
}

/// What a handle does with its allocation when it goes.
enum Role {
    /// Frees the allocation (and forgets it in the generation).
    Owner(ResourceKey),
    /// Tells the allocation's owner.
    View(Arc<dyn ViewOwner>),
    /// Already done (by `free`).
    Released,
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
/// use offload::{MemKind, Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let buf = dev.alloc(8, MemKind::Device)?;
/// buf.write(0, &[1, 2, 3, 4, 5, 6, 7, 8])?;
/// let mut out = [0u8; 4];
/// buf.read(2, &mut out)?;
/// assert_eq!(out, [3, 4, 5, 6]);
/// # Ok::<(), offload::Error>(())
/// ```
pub struct Buffer {
    pub(crate) generation: Arc<Generation>,
    entry: Arc<BufferEntry>,
    /// The bytes of the allocation this handle covers: `offset..offset + len`.
    pub(crate) offset: usize,
    pub(crate) len: usize,
    role: Role,
}

/// What sharing an allocation with other processes adds to it: IPC's state of an
/// exported or imported allocation, which its [`BufferEntry`] owns (set once, see
/// [`BufferEntry::share`]) and asks at the points of its life where sharing matters.
/// Defined here and implemented by IPC, so the handles need not know IPC.
pub(crate) trait SharedMemory: Send + Sync {
    /// An owner is about to free the allocation (listed in `generation` as `key`;
    /// `object` names it for messages), outside the generation's lock: exported memory is
    /// unmapped from every peer first (I3). `Some(error)`: it must not be freed now (it
    /// was quarantined), and the free returns that error.
    fn before_free(
        &self,
        generation: &Arc<Generation>,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        object: &dyn fmt::Display,
    ) -> Option<Error>;
    /// The allocation's memory is being freed (under its lock).
    fn freed(&self);
    /// The process that exported the memory unmapped it: this mapping of it goes.
    fn revoke(&self);
    /// Whether [`revoke`](Self::revoke) was called: calls answer a typed error then.
    fn revoked(&self) -> bool;
}

impl Buffer {
    /// Allocates on `device` (exportable or not) and lists the buffer in its generation.
    pub(crate) fn alloc(
        device: &Device,
        size: usize,
        kind: MemKind,
        exportable: bool,
    ) -> Result<Buffer> {
        let call = if exportable {
            "Device::alloc_exportable"
        } else {
            "Device::alloc"
        };
        let generation = device.generation();
        generation.with_live(|live| {
            let raw_device = live.device(device.key())?;
            if size == 0 {
                return Err(Error::invalid(
                    call,
                    format!("zero-size allocation on {device}"),
                ));
            }
            let (raw, origin) = if exportable {
                let raw = raw_device.clone().alloc_exportable(size, kind)?;
                (raw, Origin::Exportable)
            } else {
                (raw_device.clone().alloc(size, kind)?, Origin::Allocated)
            };
            let (key, entry) = BufferEntry::register(live, device, size, kind, origin, raw)?;
            Ok(Buffer::owner(generation.clone(), key, entry))
        })
    }

    /// `Device::adopt`: a buffer over memory another library allocated.
    ///
    /// # Safety
    /// As `Device::adopt`.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn adopt(
        device: &Device,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: crate::hal::Owner,
    ) -> Result<Buffer> {
        const CALL: &str = "Device::adopt";
        if len == 0 || address == 0 {
            return Err(Error::invalid(
                CALL,
                format!("{len} bytes at address {address:#x}: nothing to adopt on {device}"),
            ));
        }
        let generation = device.generation();
        generation.with_live(|live| {
            let raw_device = live.device(device.key())?;
            // The owner's drop is user code offload runs (L6): it may give back the last
            // reference of a runtime — this one's, even — while the backend releases the
            // memory under this buffer's locks; that teardown then runs on a helper thread.
            let owner: crate::hal::Owner = Box::new(UserOwned(owner));
            // SAFETY: the caller's promise, passed on.
            let raw = unsafe { raw_device.clone().adopt(address, len, kind, owner) }
                .map_err(|e| e.in_call(CALL))?;
            let (key, entry) =
                BufferEntry::register(live, device, len, kind, Origin::Adopted, raw)?;
            Ok(Buffer::owner(generation.clone(), key, entry))
        })
    }

    /// A handle that owns the whole of `entry`.
    pub(crate) fn owner(
        generation: Arc<Generation>,
        key: ResourceKey,
        entry: Arc<BufferEntry>,
    ) -> Buffer {
        let len = entry.size;
        Buffer {
            generation,
            entry,
            offset: 0,
            len,
            role: Role::Owner(key),
        }
    }

    /// A view of `len` bytes at `offset` of an allocation `owner` keeps (checked by the
    /// caller to lie inside it).
    pub(crate) fn view(
        generation: Arc<Generation>,
        entry: Arc<BufferEntry>,
        offset: usize,
        len: usize,
        owner: Arc<dyn ViewOwner>,
    ) -> Buffer {
        Buffer {
            generation,
            entry,
            offset,
            len,
            role: Role::View(owner),
        }
    }

    /// The allocation under this handle.
    pub(crate) fn entry(&self) -> &Arc<BufferEntry> {
        &self.entry
    }

    /// Where this handle's bytes start in its allocation.
    pub(crate) fn offset_in_allocation(&self) -> usize {
        self.offset
    }

    /// Names the buffer, as wgpu's `label:` does: errors and logs call it by this name
    /// (`buffer "weights" (4096 bytes, host)`) instead of by its kind and size. The label
    /// belongs to the allocation, so every handle on it shows it.
    ///
    /// ```
    /// # use offload::{Error, MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let weights = rt.devices()?[0].alloc(64, MemKind::Device)?.label("weights");
    /// let err = weights.write(60, &[0; 8]).unwrap_err();
    /// assert!(err.to_string().contains(r#"buffer "weights""#), "{err}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn label(self, label: impl Into<String>) -> Self {
        *write(&self.entry.label) = Some(Arc::from(label.into()));
        self
    }

    /// The buffer's label, if it was given one.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let buf = rt.devices()?[0].alloc(4, offload::MemKind::Device)?;
    /// assert_eq!(buf.label_text(), None);
    /// assert_eq!(buf.label("x").label_text().as_deref(), Some("x"));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn label_text(&self) -> Option<Arc<str>> {
        read(&self.entry.label).clone()
    }

    /// Size in bytes (fixed at allocation; valid after shutdown too).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(100, offload::MemKind::Host)?;
    /// assert_eq!(buf.len(), 100);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: offload never makes an empty buffer.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert!(!dev.alloc(1, offload::MemKind::Device)?.is_empty());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// use offload::MemKind;
    /// assert_eq!(dev.alloc(1, MemKind::Shared)?.kind(), MemKind::Shared);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn kind(&self) -> MemKind {
        self.entry.kind
    }

    /// The device it lives on.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(1, offload::MemKind::Device)?;
    /// assert_eq!(buf.device(), dev);
    /// # Ok::<(), offload::Error>(())
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

    /// The allocation, held shared; refused inside `with_mapped`'s closure (L7).
    #[inline(always)]
    fn lock_shared(&self, call: &'static str) -> Result<RwLockReadGuard<'_, Option<Allocation>>> {
        crate::runtime::fork::refuse(call)?;
        reentry::refuse_in_mapped(call).map_err(|e| e.on(call, self))?;
        Ok(read(&self.entry.allocation))
    }

    /// The allocation, held exclusively (for a launch that may write it); refused inside
    /// `with_mapped`'s closure (L7).
    #[inline(always)]
    fn lock_exclusive(
        &self,
        call: &'static str,
    ) -> Result<RwLockWriteGuard<'_, Option<Allocation>>> {
        crate::runtime::fork::refuse(call)?;
        reentry::refuse_in_mapped(call).map_err(|e| e.on(call, self))?;
        Ok(write(&self.entry.allocation))
    }

    /// Locks the allocations of `buffers` exclusively, each once, in address order (so two
    /// calls locking the same buffers cannot deadlock); on the stack for up to 8.
    pub(crate) fn lock_all_exclusive<'a>(
        call: &'static str,
        buffers: impl IntoIterator<Item = &'a Buffer>,
    ) -> Result<LockedAll<'a>> {
        let mut order: SmallVec<[&'a Buffer; 8]> = buffers.into_iter().collect();
        order.sort_unstable_by_key(|b| b.entry_ptr());
        order.dedup_by_key(|b| b.entry_ptr());
        let guards: SmallVec<[_; 8]> = order
            .iter()
            .map(|b| b.lock_exclusive(call))
            .collect::<Result<_>>()?;
        // The caller queues work on them (a launch, a queued copy): host accesses ask the
        // backend from now on (`Buffer::pending`).
        for b in &order {
            b.entry.queued.store(true, Ordering::Relaxed);
        }
        Ok(LockedAll { order, guards })
    }

    /// The error of a call on this buffer once its memory is gone.
    #[cold]
    #[inline(never)]
    pub(crate) fn gone(&self, call: &'static str) -> Error {
        // L3 before the IPC words: a teardown revokes imported mappings too, and a handle
        // of a finished generation answers `ShutDown` whatever released its memory. (A
        // flag, not the state's lock: a buffer's lock may be held here, and teardown takes
        // the state before buffers.)
        if self.generation.is_closing() {
            return Error::shut_down().on(call, self);
        }
        self.entry.gone(call).on(call, self)
    }

    /// Checks `len` bytes at `offset` of this handle and gives their offset in the
    /// allocation.
    #[inline(always)]
    pub(crate) fn check_range(
        &self,
        call: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.offset + offset),
            _ => Err(self.out_of_range(call, offset, len)),
        }
    }

    /// [`check_range`](Self::check_range)'s error (out of line: calls in range should not
    /// carry it).
    #[cold]
    #[inline(never)]
    fn out_of_range(&self, call: &'static str, offset: usize, len: usize) -> Error {
        let end = offset as u128 + len as u128;
        Error::invalid(call, format!("bytes {offset}..{end} are outside {self}"))
    }

    /// Runs `f` on the live allocation, shared with other readers, after the queued work
    /// that uses it; teardown cannot free it under the call.
    pub(crate) fn with_raw<T>(
        &self,
        call: &'static str,
        f: impl FnOnce(&dyn DynBuffer) -> Result<T>,
    ) -> Result<T> {
        let guard = self.settled(call, Self::lock_shared)?;
        let a = guard.as_ref().ok_or_else(|| self.gone(call))?;
        f(&*a.raw).map_err(|e| e.on(call, self))
    }

    /// Runs `f` on the live allocation with exclusive access (the backend gets `&mut`),
    /// after the queued work that uses it.
    fn with_raw_mut<T>(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut dyn DynBuffer) -> Result<T>,
    ) -> Result<T> {
        let mut guard = self.settled(call, Self::lock_exclusive)?;
        let a = guard.as_mut().ok_or_else(|| self.gone(call))?;
        f(&mut *a.raw).map_err(|e| e.on(call, self))
    }

    /// The allocation locked by `lock`, with no queued work on it left to wait for: while
    /// the backend says some is pending, the lock is let go, the work waited for, and the
    /// lock taken again (L7: a host function queued before that work may be waiting for
    /// this very buffer; launches and queued copies take the lock, so none can be queued on
    /// it while it is held).
    fn settled<'a, G>(
        &'a self,
        call: &'static str,
        lock: impl Fn(&'a Self, &'static str) -> Result<G>,
    ) -> Result<G>
    where
        G: std::ops::Deref<Target = Option<Allocation>>,
    {
        loop {
            let guard = lock(self, call)?;
            let Some(wait) = self.pending(&guard) else {
                return Ok(guard);
            };
            let _counted = self.generation.host_wait().map_err(|e| e.on(call, self))?;
            drop(guard);
            wait().map_err(|e| e.on(call, self))?;
        }
    }

    /// The backend's wait for the queued work on this allocation, if any may be queued;
    /// `guard` is its lock, held (so no work can be queued meanwhile, and a `None` clears
    /// the flag that says some may be).
    #[inline(always)]
    fn pending(&self, guard: &Option<Allocation>) -> Option<crate::hal::Pending> {
        if !self.entry.queued.load(Ordering::Relaxed) {
            return None;
        }
        let wait = guard.as_ref().and_then(|a| a.raw.pending());
        if wait.is_none() {
            self.entry.queued.store(false, Ordering::Relaxed);
        }
        wait
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload::MemKind::Device)?;
    /// buf.write(0, &[1, 2, 3, 4])?;
    /// let mut out = [9u8; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// assert!(buf.read(1, &mut out).is_err()); // 1..5 is outside
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.read_as("Buffer::read", offset, dst)
    }

    /// [`Buffer::read`] for the user's `call` (a typed buffer's or a view's read).
    pub(crate) fn read_as(&self, call: &'static str, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.with_raw(call, |raw| {
            let at = self.check_range(call, offset, dst.len())?;
            raw.read(at, dst)
        })
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload::MemKind::Device)?;
    /// buf.write(2, &[1, 2])?;
    /// assert!(buf.write(3, &[1, 2]).is_err());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.write_as("Buffer::write", offset, src)
    }

    /// [`Buffer::write`] for the user's `call` (a typed buffer's or a view's write).
    pub(crate) fn write_as(&self, call: &'static str, offset: usize, src: &[u8]) -> Result<()> {
        self.with_raw_mut(call, |raw| {
            let at = self.check_range(call, offset, src.len())?;
            raw.write(at, src)
        })
    }

    /// Sets `len` bytes from `offset` to `value`.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload::MemKind::Device)?;
    /// buf.fill(1, 2, 0xAB)?;
    /// let mut out = [0u8; 4];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out, [0, 0xAB, 0xAB, 0]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        const CALL: &str = "Buffer::fill";
        self.with_raw_mut(CALL, |raw| {
            let at = self.check_range(CALL, offset, len)?;
            raw.fill(at, len, value)
        })
    }

    /// Copies `len` bytes from `src` at `src_offset` into this buffer at `dst_offset`.
    /// `src` may be this buffer, with overlapping ranges. Between devices (of one
    /// platform or two) the copy is staged through host memory, in chunks of
    /// [`STAGING_CHUNK`] bytes; buffers of different runtimes are `InvalidArgument`.
    ///
    /// ```
    /// use offload::MemKind;
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let a = dev.alloc(4, MemKind::Device)?;
    /// let b = dev.alloc(4, MemKind::Device)?;
    /// a.write(0, &[1, 2, 3, 4])?;
    /// b.copy_from(0, &a, 1, 3)?;
    /// let mut out = [0u8; 4];
    /// b.read(0, &mut out)?;
    /// assert_eq!(out, [2, 3, 4, 0]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    #[inline]
    pub fn copy_from(
        &self,
        dst_offset: usize,
        src: &Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Buffer::copy_from";
        // Inlined into the caller (a C API call, a hot loop) for the common case, two
        // buffers of one device; the rest is out of line.
        if Arc::ptr_eq(&self.entry, &src.entry)
            || !Arc::ptr_eq(&self.generation, &src.generation)
            || self.entry.device != src.entry.device
        {
            return self.copy_from_elsewhere(dst_offset, src, src_offset, len);
        }
        let from = src.check_range(CALL, src_offset, len)?;
        let to = self.check_range(CALL, dst_offset, len)?;
        // Two locks, taken in address order so opposite copies cannot deadlock (L7);
        // teardown holds at most one buffer lock at a time, so it cannot deadlock with this
        // either.
        let src_first = Arc::as_ptr(&src.entry) < Arc::as_ptr(&self.entry);
        // The model check's planted bug: argument order (it must find the deadlock).
        #[cfg(offload_model)]
        let src_first = src_first
            || crate::sync::seed::planted(crate::sync::seed::Seed::CopyLocksInArgumentOrder);
        let (src_guard, mut dst_guard) = loop {
            let (s, d) = if src_first {
                let s = src.lock_shared(CALL)?;
                (s, self.lock_exclusive(CALL)?)
            } else {
                let d = self.lock_exclusive(CALL)?;
                (src.lock_shared(CALL)?, d)
            };
            // Queued work on either is waited for with neither held (see `settled`).
            match (src.pending(&s), self.pending(&d)) {
                (None, None) => break (s, d),
                waits => {
                    let _counted = self.generation.host_wait().map_err(|e| e.on(CALL, self))?;
                    drop((s, d));
                    for wait in [waits.0, waits.1].into_iter().flatten() {
                        wait()?;
                    }
                }
            }
        };
        let s = src_guard.as_ref().ok_or_else(|| src.gone(CALL))?;
        let d = dst_guard.as_mut().ok_or_else(|| self.gone(CALL))?;
        d.raw.copy_from(to, &*s.raw, from, len)
    }

    /// [`copy_from`](Self::copy_from) within one buffer, between runtimes (an error) or
    /// between devices (staged).
    #[inline(never)]
    fn copy_from_elsewhere(
        &self,
        dst_offset: usize,
        src: &Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Buffer::copy_from";
        if Arc::ptr_eq(&self.entry, &src.entry) {
            return self.with_raw_mut(CALL, |raw| {
                let to = self.check_range(CALL, dst_offset, len)?;
                let from = src.check_range(CALL, src_offset, len)?;
                raw.copy_within(from, to, len)
            });
        }
        if !Arc::ptr_eq(&self.generation, &src.generation) {
            // A buffer of a finished generation is shut down whatever else is wrong.
            src.with_raw(CALL, |_| Ok(()))?;
            self.with_raw(CALL, |_| Ok(()))?;
            return Err(Error::invalid(
                CALL,
                format!("source {src} and destination {self} are of different runtimes"),
            ));
        }
        src.check_range(CALL, src_offset, len)?;
        self.check_range(CALL, dst_offset, len)?;
        self.copy_staged(dst_offset, src, src_offset, len)
    }

    /// The address of the buffer's first byte as the device's driver and the other
    /// libraries of the process name it: a host pointer on the host device, a
    /// `CUdeviceptr`/`hipDeviceptr_t` on CUDA and HIP, the USM pointer on Level Zero (what
    /// DLPack hands over), for memory this runtime allocated or adopted
    /// ([`Device::adopt`]). The address is valid while the buffer is (a handle of it alive
    /// and its runtime not shut down); what another library does with it is outside
    /// offload's checks. `Error::Unsupported` where the backend has no such address
    /// (Vulkan).
    ///
    /// ```
    /// use offload::{MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc(64, MemKind::Device)?;
    /// let at = buf.address()?;
    /// assert_ne!(at, 0);
    /// assert_eq!(at % 64, 0); // host allocations are 64-byte aligned
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn address(&self) -> Result<u64> {
        const CALL: &str = "Buffer::address";
        let guard = self.lock_shared(CALL)?;
        let a = guard.as_ref().ok_or_else(|| self.gone(CALL))?;
        let base = a.raw.address().map_err(|e| e.on(CALL, self))?;
        Ok(base + self.offset as u64)
    }

    /// Runs `f` on the buffer's bytes in place, where the host can reach them directly —
    /// host memory, or device memory the driver maps — after the work queued on the
    /// buffer; no copy is made. `Error::Unsupported` where the backend cannot (memory the
    /// host cannot map, or memory shared with other processes): use `read`/`write` then.
    /// Queued work and other host accesses to the buffer wait until `f` returns.
    ///
    /// `f` runs holding the buffer's memory, so inside it every offload call that could
    /// wait — on this or any other buffer, a queue, an event, an allocation, a load, a
    /// sync — is refused at once with `Error::InvalidArgument` (what it waited for could be
    /// waiting for this buffer: L7, no deadlock by construction). Read and write the bytes
    /// in `f`; make offload calls after it returns. Leaving `f` by `longjmp` or
    /// `pthread_exit` (from C code it calls) is undefined behaviour, as for any Rust
    /// closure.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload::MemKind::Host)?;
    /// buf.with_mapped(|bytes| bytes.copy_from_slice(&[1, 2, 3, 4]))?;
    /// let sum = buf.with_mapped(|bytes| bytes.iter().map(|&b| u32::from(b)).sum::<u32>())?;
    /// assert_eq!(sum, 10);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn with_mapped<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        const CALL: &str = "Buffer::with_mapped";
        let (start, len) = (self.check_range(CALL, 0, self.len())?, self.len());
        let mut f = Some(f);
        let mut out = None;
        self.with_raw_mut(CALL, |raw| {
            raw.with_mapped(&mut |bytes| {
                if let (Some(f), Some(view)) = (f.take(), bytes.get_mut(start..start + len)) {
                    let _mapped = reentry::enter_mapped();
                    out = Some(f(view));
                }
            })
        })?;
        out.ok_or_else(|| Error::invalid(CALL, format!("{self} lies outside its allocation")))
    }

    /// A copy between buffers of two devices through host memory: each chunk is read
    /// (after the queued work on `src`) and written (after the queued work on `self`).
    pub(crate) fn copy_staged(
        &self,
        dst_offset: usize,
        src: &Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        let mut chunk = vec![0u8; len.min(STAGING_CHUNK)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(STAGING_CHUNK);
            src.read(src_offset + done, &mut chunk[..n])?;
            self.write(dst_offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Frees the memory now and returns any error. After shutdown it returns
    /// `Error::ShutDown` (teardown already freed the memory). Memory that was exported is
    /// first unmapped from every process that mapped it (I3). A view an IPC endpoint
    /// handed out frees nothing: it gives the view back.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, offload::MemKind::Device)?;
    /// buf.free()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn free(mut self) -> Result<()> {
        // The drop that follows finds nothing left to do.
        self.release()
    }

    /// An owner forgets the allocation in its generation and frees it (after unmapping it
    /// from its IPC peers), holding the generation so a concurrent teardown cannot
    /// deinitialise the platform in between; a view tells its owner. Idempotent.
    fn release(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.role, Role::Released) {
            Role::Owner(key) => {
                // Not under the generation's lock: it may wait for peers (bounded). Memory a
                // live peer has not unmapped yet is quarantined, not freed (I3).
                let this: &Buffer = self;
                if let Some(shared) = self.entry.shared.get()
                    && let Some(quarantined) =
                        shared.before_free(&self.generation, &self.entry, key, this)
                {
                    return Err(quarantined);
                }
                self.entry.forget_and_free(&self.generation, key)
            }
            Role::View(owner) => {
                owner.view_dropped();
                Ok(())
            }
            Role::Released => Ok(()),
        }
    }
}

// The calls of a `Device` that make buffers on it: here, so that `device` names no buffer.
impl Device {
    /// Allocates `size` bytes of `kind` memory. A zero size is `InvalidArgument`; more
    /// than the device has is `OutOfMemory`.
    ///
    /// ```
    /// use offload::{Error, MemKind};
    /// let rt = offload::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert!(matches!(dev.alloc(0, MemKind::Device), Err(Error::InvalidArgument { .. })));
    /// assert!(matches!(dev.alloc(1 << 62, MemKind::Device), Err(Error::OutOfMemory { .. })));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn alloc(&self, size: usize, kind: MemKind) -> Result<Buffer> {
        Buffer::alloc(self, size, kind, false).map_err(|e| e.on("Device::alloc", self))
    }

    /// Allocates `size` bytes that other processes can map: [`Buffer::export`] describes
    /// them, and `Device::import` (or an IPC endpoint) maps them elsewhere. Asked for at
    /// allocation because Vulkan must declare exportable memory then, and on the host such
    /// memory is a memfd (several system calls) rather than a heap block. A backend without
    /// IPC answers `Error::Unsupported`.
    ///
    /// ```
    /// use offload::{MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc_exportable(4096, MemKind::Device)?;
    /// let handle = buf.export()?;
    /// assert_eq!(handle.size(), 4096);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<Buffer> {
        Buffer::alloc(self, size, kind, true).map_err(|e| e.on("Device::alloc_exportable", self))
    }

    /// Adopts `len` bytes at `address` that another library of this process allocated on
    /// this device (a NumPy array's data, a CuPy or PyTorch tensor's `CUdeviceptr`, as
    /// DLPack hands them over) as a buffer of this runtime, without copying: reads, writes,
    /// copies and launches use that memory. offload never frees it: `owner`, whatever keeps
    /// the memory alive (the other library's handle of it), is dropped when the buffer is
    /// released — the last handle dropped, or its runtime shut down — after the queued work
    /// that uses it. `Error::Unsupported` where the backend cannot adopt memory (Vulkan);
    /// see [`Buffer::address`] for the other direction.
    ///
    /// # Safety
    /// `address..address + len` must be memory of `kind` that this device's kernels and
    /// driver can read and write (host memory for the host device, device memory of this
    /// device for CUDA and HIP), and stay so until `owner` is dropped; nothing else may use
    /// it in a way that races this buffer's uses.
    ///
    /// ```
    /// use offload::{MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// // Memory another library allocated: here a boxed slice whose box is the owner.
    /// let mut theirs = vec![7u8; 64].into_boxed_slice();
    /// let address = theirs.as_mut_ptr() as u64;
    /// // SAFETY: 64 bytes of host memory, alive until the owner (the box) is dropped, and
    /// // not touched through `theirs` any more (it moved into the buffer).
    /// let buf = unsafe { dev.adopt(address, 64, MemKind::Host, theirs) }?;
    /// buf.fill(0, 8, 1)?;
    /// let mut back = [0u8; 9];
    /// buf.read(0, &mut back)?;
    /// assert_eq!(back, [1, 1, 1, 1, 1, 1, 1, 1, 7]);
    /// assert_eq!(buf.address()?, address);
    /// # Ok::<(), offload::Error>(())
    /// ```
    #[allow(unsafe_code)]
    pub unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: impl std::any::Any + Send + Sync,
    ) -> Result<Buffer> {
        // SAFETY: the caller's promise, passed on.
        unsafe { Buffer::adopt(self, address, len, kind, Box::new(owner)) }
            .map_err(|e| e.on("Device::adopt", self))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // In a forked child the handle is forgotten, its allocation with it (L9).
        if crate::runtime::fork::forget_in_child(&self.generation) {
            crate::runtime::fork::forget_in_child(&self.entry);
            return;
        }
        match self.release() {
            // Quarantined memory is counted in `ipc::stats()` and logged; by the shutdown it
            // is usually released, so it is not reported there.
            Ok(()) | Err(Error::ShutDown { .. } | Error::Quarantined { .. }) => {}
            Err(e) => self.generation.defer(Err(e)),
        }
    }
}

/// In the user's words: `buffer "weights" (4096 bytes, vulkan)` when labelled, else
/// `a 4096-byte vulkan device buffer`; a view adds where it lies in its allocation.
impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.entry.kind {
            MemKind::Device => "device",
            MemKind::Host => "host-memory",
            MemKind::Shared => "shared-memory",
        };
        match read(&self.entry.label).as_deref() {
            Some(label) => write!(
                f,
                "buffer \"{label}\" ({} bytes, {})",
                self.len, self.entry.backend
            )?,
            None => write!(
                f,
                "a {}-byte {} {kind} buffer",
                self.len, self.entry.backend
            )?,
        }
        if self.len != self.entry.size {
            write!(
                f,
                " (bytes {}..{} of a {}-byte allocation)",
                self.offset,
                self.offset + self.len,
                self.entry.size
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("backend", &self.entry.backend)
            .field("allocation", &self.entry.id)
            .field("range", &(self.offset..self.offset + self.len))
            .field("kind", &self.entry.kind)
            .field("origin", &self.entry.origin)
            .finish()
    }
}
