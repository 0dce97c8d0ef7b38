//! Host memory: one zeroed, aligned heap allocation per buffer.
//!
//! All access goes through raw-pointer copies; no Rust reference to the bytes is ever
//! formed, so kernels (C code) may hold pointers into them. A per-buffer `RwLock<()>`
//! makes the safe API sound on its own: reads share it, writes take it exclusively, so two
//! threads never race on the same bytes through this API. Every method checks its range
//! before touching memory, whatever the caller checked.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::{PoisonError, RwLock};

use offload_core::{Error, Result};

/// Alignment of every host allocation, in bytes.
pub const ALIGNMENT: usize = 64;

/// An allocation of the host backend.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    lock: RwLock<()>,
}

// SAFETY: the buffer owns its allocation exclusively (like a `Box<[u8]>`); moving it to
// another thread moves that ownership.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access only reads or writes the bytes through raw pointers under `lock`
// (shared for reads, exclusive for writes), so concurrent `&HostBuffer` users never race.
unsafe impl Sync for HostBuffer {}

fn out_of_range(call: &'static str, offset: usize, len: usize, size: usize) -> Error {
    Error::InvalidArgument {
        call,
        reason: format!(
            "host buffer: range {offset}..{} is outside its {size} bytes",
            offset as u128 + len as u128
        ),
    }
}

impl HostBuffer {
    /// A zeroed allocation of `size` (> 0) bytes, or `None` if the allocator refuses.
    pub(crate) fn new(size: usize) -> Option<HostBuffer> {
        if size == 0 {
            return None;
        }
        let layout = Layout::from_size_align(size, ALIGNMENT).ok()?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(HostBuffer {
            ptr: NonNull::new(ptr)?,
            layout,
            lock: RwLock::new(()),
        })
    }

    /// Size in bytes.
    ///
    /// ```
    /// use offload_core::{Backend, Config, MemKind};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// let buf = host.alloc(&host.devices()[0], 10, MemKind::Device)?;
    /// assert_eq!(buf.len(), 10);
    /// # host.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: host buffers are never empty.
    ///
    /// ```
    /// use offload_core::{Backend, Config, MemKind};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// let buf = host.alloc(&host.devices()[0], 1, MemKind::Device)?;
    /// assert!(!buf.is_empty());
    /// # host.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }

    fn check(&self, call: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(out_of_range(call, offset, len, self.len())),
        }
    }

    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check("Buffer::read", offset, dst.len())?;
        let _shared = self.lock.read().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: offset + dst.len() <= len (checked), so the source range lies inside our
        // allocation; `dst` is a distinct exclusive borrow, so the ranges cannot overlap;
        // writers are excluded by the lock.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check("Buffer::write", offset, src.len())?;
        let _exclusive = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the destination range lies inside our allocation (checked); `src` is a
        // Rust slice, which cannot alias our allocation (we never hand out references to
        // it); the lock excludes every other access.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        };
        Ok(())
    }

    pub(crate) fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check("Buffer::fill", offset, len)?;
        let _exclusive = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the range lies inside our allocation (checked); the lock excludes every
        // other access.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), value, len) };
        Ok(())
    }

    pub(crate) fn copy(
        src: &HostBuffer,
        so: usize,
        dst: &HostBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        src.check("Buffer::copy_from", so, len)?;
        dst.check("Buffer::copy_from", d, len)?;
        let same = std::ptr::eq(src, dst);
        // Lock in address order so two opposite copies cannot deadlock.
        let (_a, _b);
        if same {
            _a = None;
            _b = Some(dst.lock.write().unwrap_or_else(PoisonError::into_inner));
        } else if (src as *const HostBuffer) < (dst as *const HostBuffer) {
            _a = Some(src.lock.read().unwrap_or_else(PoisonError::into_inner));
            _b = Some(dst.lock.write().unwrap_or_else(PoisonError::into_inner));
        } else {
            _b = Some(dst.lock.write().unwrap_or_else(PoisonError::into_inner));
            _a = Some(src.lock.read().unwrap_or_else(PoisonError::into_inner));
        }
        // SAFETY: both ranges lie inside their allocations (checked); `ptr::copy` allows
        // overlap (the same buffer); the locks exclude every other writer of `dst` and of
        // `src`.
        unsafe { std::ptr::copy(src.ptr.as_ptr().add(so), dst.ptr.as_ptr().add(d), len) };
        Ok(())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here, once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
