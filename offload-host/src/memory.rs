//! Host memory: one zeroed, aligned heap allocation per buffer, or, for memory other
//! processes may map, a sealed memfd mapped shared (see [`HostBuffer::exportable`]).
//!
//! The bytes are device memory, not Rust memory: no Rust reference to them is ever formed,
//! every access is a raw copy, and kernels (C code) hold pointers into them. A buffer is an
//! `Arc` of its [`Memory`]: queued work holds the memory too, so `free` defers the release
//! behind the queued work that uses it (Q1), and [`Uses`] records that work so that a host
//! read, write, fill or copy waits for it first. Every method checks its range before
//! touching memory, whatever the caller checked.
//!
//! Like device memory on a GPU, bytes that queued work and the host (or two queues) touch
//! without ordering between them hold unspecified values; no access leaves the allocation.

use std::alloc::Layout;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use offload_core::{BackendKind, Error, Result, hal};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

use crate::stream::Uses;

/// Alignment of every host allocation, in bytes.
pub const ALIGNMENT: usize = 64;

/// The name every exportable host allocation's memfd has (it shows in /proc/PID/maps as
/// `/memfd:offload-host-ipc (deleted)`).
pub const MEMFD_NAME: &str = "offload-host-ipc";

/// What backs a host buffer.
enum Backing {
    /// `alloc_zeroed` with this layout.
    Heap(Layout),
    /// A shared mapping of a memfd: ours to export (we keep its fd), or another process's
    /// (imported; the fd was closed once mapped).
    Shared { fd: Option<OwnedFd> },
    /// Memory another library of this process allocated (`hal::Device::adopt`): never
    /// freed here; its owner, dropped with the memory, lets it go.
    Adopted {
        /// Kept for its drop.
        _owner: hal::Owner,
    },
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::Heap(layout) => f.debug_tuple("Heap").field(layout).finish(),
            Backing::Shared { fd } => f.debug_struct("Shared").field("fd", fd).finish(),
            Backing::Adopted { .. } => f.write_str("Adopted"),
        }
    }
}

/// One allocation: released when the buffer and every queued command using it are gone.
#[derive(Debug)]
pub(crate) struct Memory {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// The queued work that uses these bytes.
    pub(crate) uses: Uses,
    /// The platform whose live count this allocation is in (decremented at release).
    owner: Option<Arc<crate::platform::Shared>>,
}

// SAFETY: the memory owns its allocation exclusively (like a `Box<[u8]>`); moving it to
// another thread moves that ownership.
unsafe impl Send for Memory {}
// SAFETY: shared access only ever copies bytes through raw pointers inside the allocation
// (checked ranges); no `&`/`&mut` to the bytes exists, and the allocation itself is
// released only in `drop`, when no other owner is left.
unsafe impl Sync for Memory {}

/// An allocation of the host backend.
#[derive(Debug)]
pub struct HostBuffer {
    pub(crate) mem: Arc<Memory>,
}

#[cold]
#[inline(never)]
fn out_of_range(offset: usize, len: usize, size: usize) -> Error {
    Error::InvalidArgument {
        call: "",
        reason: format!(
            "host buffer: range {offset}..{} is outside its {size} bytes",
            offset as u128 + len as u128
        ),
    }
}

impl HostBuffer {
    fn wrap(ptr: NonNull<u8>, len: usize, backing: Backing) -> HostBuffer {
        HostBuffer {
            mem: Arc::new(Memory {
                ptr,
                len,
                backing,
                uses: Uses::default(),
                owner: None,
            }),
        }
    }

    /// A buffer over `len` (> 0) bytes at `ptr` that another library allocated, kept alive
    /// by `owner` (`hal::Device::adopt`).
    ///
    /// # Safety
    /// As `hal::Device::adopt`: `ptr..ptr + len` is this process's memory, readable and
    /// writable, valid until `owner` is dropped, and used by nothing that races this
    /// buffer's uses.
    pub(crate) unsafe fn adopted(ptr: NonNull<u8>, len: usize, owner: hal::Owner) -> HostBuffer {
        HostBuffer::wrap(ptr, len, Backing::Adopted { _owner: owner })
    }

    /// The address of the first byte (the pointer kernels get).
    pub(crate) fn address(&self) -> u64 {
        self.mem.ptr.as_ptr() as u64
    }

    /// A zeroed allocation of `size` (> 0) bytes, or `None` if the allocator refuses.
    pub(crate) fn new(size: usize) -> Option<HostBuffer> {
        if size == 0 {
            return None;
        }
        let layout = Layout::from_size_align(size, ALIGNMENT).ok()?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(HostBuffer::wrap(
            NonNull::new(ptr)?,
            size,
            Backing::Heap(layout),
        ))
    }

    /// A zeroed allocation of `size` (> 0) bytes that another process can map: a memfd,
    /// sized, then sealed against shrinking and growing (so no mapping of it can ever fault
    /// on a truncated file), and mapped shared. Costs four system calls more than
    /// [`HostBuffer::new`].
    pub(crate) fn exportable(size: usize) -> std::io::Result<HostBuffer> {
        let fd =
            rustix::fs::memfd_create(MEMFD_NAME, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, size as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let ptr = map_shared(&fd, size)?;
        Ok(HostBuffer::wrap(
            ptr,
            size,
            Backing::Shared { fd: Some(fd) },
        ))
    }

    /// Maps `size` bytes of another process's exportable allocation, after checking that
    /// `fd` is one: a regular file of exactly `size` bytes sealed against shrinking (a file
    /// that could shrink would fault our accesses). The fd is closed whatever happens.
    pub(crate) fn import(fd: OwnedFd, size: usize) -> Result<HostBuffer> {
        let bad = |reason: String| Error::InvalidIpcHandle {
            backend: Some(BackendKind::Host),
            call: "",
            reason,
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| bad(format!("fstat: {e}")))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(bad("the descriptor is not a memory file".into()));
        }
        if stat.st_size != size as i64 {
            return Err(bad(format!(
                "the memory file has {} bytes, the handle says {size}",
                stat.st_size
            )));
        }
        let seals = rustix::fs::fcntl_get_seals(&fd)
            .map_err(|e| bad(format!("not a sealed memfd ({e})")))?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
            return Err(bad(
                "the memfd is not sealed against resizing: it could fault our accesses".into(),
            ));
        }
        let ptr = map_shared(&fd, size).map_err(|e| Error::OutOfMemory {
            backend: BackendKind::Host,
            call: "",
            requested: size as u64,
            reason: format!("mmap: {e}"),
        })?;
        drop(fd); // the mapping keeps the memory
        Ok(HostBuffer::wrap(ptr, size, Backing::Shared { fd: None }))
    }

    /// Counts the buffer as live on `owner` until its memory is released.
    pub(crate) fn counted(mut self, owner: Arc<crate::platform::Shared>) -> HostBuffer {
        owner.live.fetch_add(1, Ordering::SeqCst);
        crate::stats::LIVE_ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        if let Some(mem) = Arc::get_mut(&mut self.mem) {
            mem.owner = Some(owner);
        }
        self
    }

    /// The bytes as a slice, when only this process can reach them (heap memory, not a
    /// memfd another process may map), after the queued work that uses them.
    pub(crate) fn exclusive_bytes(&mut self) -> Option<&mut [u8]> {
        self.mem.uses.wait();
        match self.mem.backing {
            Backing::Heap(_) => {
                // SAFETY: the allocation is `len` initialised (zeroed, then only written)
                // bytes owned by the memory; `&mut self` is the only handle to them (queued
                // commands hold the memory too, but the ones using it have finished —
                // waited above — and none can be queued while this borrow lives); heap
                // memory is mapped by no other process. So nothing else reads or writes the
                // bytes while the slice lives.
                Some(unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.as_ptr(), self.mem.len) })
            }
            Backing::Adopted { .. } => {
                // SAFETY: as for the heap: `len` bytes of this process's memory that the
                // adopter promised are readable and writable, and used by nothing that races
                // this buffer (`hal::Device::adopt`'s contract), until the owner in the
                // backing is dropped — with the memory, after this borrow.
                Some(unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.as_ptr(), self.mem.len) })
            }
            Backing::Shared { .. } => None,
        }
    }

    /// Whether this is a mapping of another process's memory (`Device::import`).
    pub(crate) fn is_mapping(&self) -> bool {
        matches!(self.mem.backing, Backing::Shared { fd: None })
    }

    /// The memfd of an exportable allocation (`None` for heap or imported memory).
    pub(crate) fn memfd(&self) -> Option<&OwnedFd> {
        match &self.mem.backing {
            Backing::Shared { fd } => fd.as_ref(),
            Backing::Heap(_) | Backing::Adopted { .. } => None,
        }
    }

    /// Size in bytes.
    ///
    /// ```
    /// use offload_core::hal::{Device, Platform};
    /// use offload_core::{Config, MemKind};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// let dev = &host.devices()[0];
    /// let buf = dev.alloc(10, MemKind::Device)?;
    /// assert_eq!(buf.len(), 10);
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// Always false: host buffers are never empty.
    ///
    /// ```
    /// use offload_core::hal::{Device, Platform};
    /// use offload_core::{Config, MemKind};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// let dev = &host.devices()[0];
    /// let buf = dev.alloc(1, MemKind::Device)?;
    /// assert!(!buf.is_empty());
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.mem.len == 0
    }
}

impl Memory {
    /// Base address, for kernel arguments.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Checks that `offset..offset + len` lies inside the allocation.
    #[inline]
    pub(crate) fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(out_of_range(offset, len, self.len)),
        }
    }

    #[inline]
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        // SAFETY: offset + dst.len() <= len (checked), so the source range lies inside our
        // allocation; `dst` is a Rust slice, which cannot alias our allocation (no reference
        // to it is ever handed out).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    #[inline]
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        // SAFETY: the destination range lies inside our allocation (checked); `src` cannot
        // alias it (see `read`).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        };
        Ok(())
    }

    /// Fills `len` bytes at `offset` with `pattern` repeated (`len` a multiple of its
    /// length, which is not zero).
    pub(crate) fn fill(&self, offset: usize, len: usize, pattern: &[u8]) -> Result<()> {
        self.check(offset, len)?;
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(Error::InvalidArgument {
                call: "",
                reason: format!(
                    "a {}-byte pattern cannot fill {len} bytes exactly",
                    pattern.len()
                ),
            });
        }
        let base = self.ptr.as_ptr();
        if let [byte] = pattern {
            // SAFETY: the range lies inside our allocation (checked).
            unsafe { std::ptr::write_bytes(base.add(offset), *byte, len) };
            return Ok(());
        }
        if len == 0 {
            return Ok(());
        }
        // One copy of the pattern, then double the filled prefix until the range is full.
        // SAFETY: `pattern.len() <= len` (a non-zero multiple), so the first copy lies inside
        // the checked range; each doubling copies `n <= len - filled` bytes from the filled
        // prefix to just after it, both inside the range and not overlapping.
        unsafe {
            std::ptr::copy_nonoverlapping(pattern.as_ptr(), base.add(offset), pattern.len());
            let mut filled = pattern.len();
            while filled < len {
                let n = filled.min(len - filled);
                std::ptr::copy_nonoverlapping(base.add(offset), base.add(offset + filled), n);
                filled += n;
            }
        }
        Ok(())
    }

    /// Copies `len` bytes from `src` at `so` to `self` at `d`; the two may be the same
    /// allocation, with overlapping ranges.
    #[inline]
    pub(crate) fn copy_from(&self, d: usize, src: &Memory, so: usize, len: usize) -> Result<()> {
        src.check(so, len)?;
        self.check(d, len)?;
        // SAFETY: both ranges lie inside their allocations (checked); `ptr::copy` allows
        // them to overlap (when `src` is `self`).
        unsafe { std::ptr::copy(src.ptr.as_ptr().add(so), self.ptr.as_ptr().add(d), len) };
        Ok(())
    }
}

/// Maps `len` bytes of `fd` read-write and shared.
fn map_shared(fd: &OwnedFd, len: usize) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel (null hint) overlaps nothing of ours; the
    // file is at least `len` bytes long (callers sized or checked it) and sealed against
    // shrinking, so every page of the mapping stays backed.
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    }?;
    NonNull::new(ptr.cast()).ok_or_else(|| std::io::Error::other("mmap returned null"))
}

impl Drop for Memory {
    fn drop(&mut self) {
        match &self.backing {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed only here, once.
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), *layout) },
            Backing::Shared { .. } => {
                // SAFETY: `ptr` is the start of our own mapping of `len` bytes, unmapped only
                // here, once; no owner is left to refer into it. A failure would leave a
                // mapping behind, never unmap anything else.
                let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
            }
            // Not ours to free: the owner, dropped with the backing after this, lets it go.
            Backing::Adopted { .. } => {}
        }
        if let Some(owner) = &self.owner {
            owner.live.fetch_sub(1, Ordering::SeqCst);
            crate::stats::LIVE_ALLOCATIONS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
