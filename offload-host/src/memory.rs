//! Host memory: one zeroed, aligned heap allocation per buffer (a private mapping of its
//! own for a large one, see [`HostBuffer::new`]), or, for memory other processes may map,
//! a sealed memfd mapped shared (see [`HostBuffer::exportable`]).
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

use crate::uses::Uses;

/// Alignment of every host allocation, in bytes.
pub const ALIGNMENT: usize = 64;

/// From this size on, a buffer is a private anonymous mapping of its own, aligned to and
/// rounded up to this size (2 MiB, the x86-64 and common AArch64 huge-page size).
///
/// Why not the heap: a 64-byte-aligned zeroed heap allocation is zeroed by the allocating
/// thread (the system allocator's `calloc` serves 16-byte alignment only), which writes
/// every page first: the pages then live on that thread's memory node, and the allocation
/// costs a pass over all of it (~30 ms for 256 MiB). A fresh mapping reads as zero
/// without being written, so its pages are placed where the threads that first use them
/// run (the device's workers, for a kernel that initialises the buffer: first touch). The
/// alignment lets the kernel back it with huge pages where it is set to.
pub(crate) const MAP_THRESHOLD: usize = 2 << 20;

/// The name every exportable host allocation's memfd has (it shows in /proc/PID/maps as
/// `/memfd:offload-host-ipc (deleted)`).
pub const MEMFD_NAME: &str = "offload-host-ipc";

/// What backs a host buffer.
enum Backing {
    /// `alloc_zeroed` with this layout.
    Heap(Layout),
    /// A private anonymous mapping of this many bytes at the buffer's address (the buffer's
    /// size rounded up to [`MAP_THRESHOLD`]).
    Mapped(usize),
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
            Backing::Mapped(len) => f.debug_tuple("Mapped").field(len).finish(),
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
    owner: Option<Arc<crate::shared::Shared>>,
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

    /// A zeroed allocation of `size` (> 0) bytes, or `None` if the allocator refuses: from
    /// the heap, or from [`MAP_THRESHOLD`] on a mapping of its own.
    pub(crate) fn new(size: usize) -> Option<HostBuffer> {
        if size == 0 {
            return None;
        }
        if size >= MAP_THRESHOLD {
            return HostBuffer::mapped(size);
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

    /// A private anonymous mapping of at least `size` bytes, aligned to [`MAP_THRESHOLD`]:
    /// a larger one is mapped, then the parts before and after the aligned range unmapped.
    fn mapped(size: usize) -> Option<HostBuffer> {
        let len = size.checked_next_multiple_of(MAP_THRESHOLD)?;
        let reserve = len.checked_add(MAP_THRESHOLD)?;
        // SAFETY: a fresh private mapping chosen by the kernel (null hint) overlaps nothing
        // of ours.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                reserve,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .ok()?;
        let head = (base as usize).next_multiple_of(MAP_THRESHOLD) - base as usize;
        let tail = reserve - head - len;
        // SAFETY: `base..base + head` and the `tail` bytes after `base + head + len` lie in
        // the mapping just made, which nothing else knows of; what stays mapped is the
        // aligned `len` bytes in between. A failed unmap leaves a part mapped (a leak of
        // address space), never unmaps anything else.
        unsafe {
            let base = base.cast::<u8>();
            if head > 0 {
                let _ = rustix::mm::munmap(base.cast(), head);
            }
            if tail > 0 {
                let _ = rustix::mm::munmap(base.add(head + len).cast(), tail);
            }
        }
        // SAFETY: the start of the `len` bytes just kept.
        let ptr = unsafe { base.cast::<u8>().add(head) };
        Some(HostBuffer::wrap(
            NonNull::new(ptr)?,
            size,
            Backing::Mapped(len),
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
    pub(crate) fn counted(mut self, owner: Arc<crate::shared::Shared>) -> HostBuffer {
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
            Backing::Heap(_) | Backing::Mapped(_) => {
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
            Backing::Heap(_) | Backing::Mapped(_) | Backing::Adopted { .. } => None,
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
        offload_core::hal::check_fill(len, pattern)?;
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
            Backing::Mapped(len) => {
                // SAFETY: as for a shared mapping: our own private mapping of `len` bytes at
                // `ptr`, unmapped only here, once.
                let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), *len) };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether /proc/self/maps has a mapping starting at `address`, and its length.
    fn mapping_at(address: usize) -> Option<usize> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().find_map(|line| {
            let (start, end) = line.split_whitespace().next()?.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (start == address).then_some(end - start)
        })
    }

    /// The process's address space, in bytes (`VmSize` of /proc/self/status).
    fn virtual_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
        let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }

    #[test]
    fn a_large_buffer_is_an_aligned_zeroed_mapping_of_its_own_and_unmapped_when_freed() {
        let size = MAP_THRESHOLD * 3 + 5;
        let mut buf = HostBuffer::new(size).unwrap();
        let address = buf.address() as usize;
        assert_eq!(address % MAP_THRESHOLD, 0);
        assert!(matches!(buf.mem.backing, Backing::Mapped(len) if len == MAP_THRESHOLD * 4));
        // The kernel may merge it with a neighbour's mapping of the same kind, so at least
        // its own length starts here.
        assert!(mapping_at(address).is_some_and(|len| len >= MAP_THRESHOLD * 4));
        let mut bytes = vec![1u8; size];
        buf.mem.read(0, &mut bytes).unwrap();
        assert!(bytes.iter().all(|&b| b == 0));
        buf.mem.write(size - 3, &[7, 8, 9]).unwrap();
        assert!(buf.mem.write(size - 2, &[7, 8, 9]).is_err());
        assert_eq!(&buf.exclusive_bytes().unwrap()[size - 4..], &[0, 7, 8, 9]);
        drop(buf);
        // Unmapped when dropped: eight gibibytes mapped and dropped in turn leave the
        // address space no larger (by far more than other tests' threads could map
        // meanwhile; looking for the address itself would race them).
        let before = virtual_size();
        for _ in 0..8 {
            let big = HostBuffer::new(1 << 30).unwrap();
            big.mem.write(0, &[1]).unwrap();
        }
        let grown = virtual_size().saturating_sub(before);
        assert!(grown < 2 << 30, "the address space grew by {grown} bytes");
        // A small one stays on the heap.
        let small = HostBuffer::new(MAP_THRESHOLD - 1).unwrap();
        assert!(matches!(small.mem.backing, Backing::Heap(_)));
    }
}
