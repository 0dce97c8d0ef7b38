//! Host memory: one zeroed, aligned heap allocation per buffer.
//!
//! All access goes through raw-pointer copies; no Rust reference to the bytes is ever
//! formed, so kernels (C code) may hold pointers into them. Reads take `&self`, mutation
//! takes `&mut self`, so the borrow checker rules out two threads racing on the same bytes
//! through this API, with no lock. Every method checks its range before touching memory,
//! whatever the caller checked.

use std::alloc::Layout;
use std::ptr::NonNull;

use offload_core::{Error, Result};

/// Alignment of every host allocation, in bytes.
pub const ALIGNMENT: usize = 64;

/// An allocation of the host backend.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer owns its allocation exclusively (like a `Box<[u8]>`); moving it to
// another thread moves that ownership.
unsafe impl Send for HostBuffer {}
// SAFETY: through `&HostBuffer` the bytes are only read; every write needs `&mut`, so
// concurrent `&HostBuffer` users never race with a writer.
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
        })
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
        self.layout.size()
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
        self.layout.size() == 0
    }

    /// Base address, for kernel arguments.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, call: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(out_of_range(call, offset, len, self.len())),
        }
    }

    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check("Buffer::read", offset, dst.len())?;
        // SAFETY: offset + dst.len() <= len (checked), so the source range lies inside our
        // allocation; `dst` is a Rust slice, which cannot alias our allocation (we never hand
        // out references to it); writers need `&mut self`, so none runs now.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    pub(crate) fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check("Buffer::write", offset, src.len())?;
        // SAFETY: the destination range lies inside our allocation (checked); `src` cannot
        // alias it (see `read`); `&mut self` excludes every other access.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        };
        Ok(())
    }

    pub(crate) fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check("Buffer::fill", offset, len)?;
        // SAFETY: the range lies inside our allocation (checked); `&mut self` excludes every
        // other access.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), value, len) };
        Ok(())
    }

    pub(crate) fn copy_from(
        &mut self,
        d: usize,
        src: &HostBuffer,
        so: usize,
        len: usize,
    ) -> Result<()> {
        src.check("Buffer::copy_from", so, len)?;
        self.check("Buffer::copy_from", d, len)?;
        // SAFETY: both ranges lie inside their allocations (checked); `self` is borrowed
        // mutably and `src` shared, so they are different allocations and cannot overlap,
        // and nobody else writes either.
        unsafe {
            std::ptr::copy_nonoverlapping(src.ptr.as_ptr().add(so), self.ptr.as_ptr().add(d), len)
        };
        Ok(())
    }

    pub(crate) fn copy_within(&mut self, so: usize, d: usize, len: usize) -> Result<()> {
        self.check("Buffer::copy_from", so, len)?;
        self.check("Buffer::copy_from", d, len)?;
        // SAFETY: both ranges lie inside our allocation (checked); `ptr::copy` allows them
        // to overlap; `&mut self` excludes every other access.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(so), self.ptr.as_ptr().add(d), len) };
        Ok(())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed only here, once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
