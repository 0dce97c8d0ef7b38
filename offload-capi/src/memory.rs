//! Buffers: allocation (every memory kind, exportable or not), free, and the blocking
//! read/write/fill/copy. The queued forms are in `queue.rs`.

use offload::{Buffer, Device, MemKind};

use crate::ffi::{bytes, bytes_mut, out};
use crate::runtime::offload_device_t;
use crate::status::{Fail, Res, guard, offload_status_t};
use crate::table;
use offload::Error;

/// A buffer of device memory.
#[allow(non_camel_case_types)]
pub type offload_buffer_t = u64;

/// Where a buffer lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum offload_mem_kind_t {
    /// Memory of the device, fastest for kernels.
    OFFLOAD_MEM_DEVICE = 0,
    /// Host memory the device can reach (pinned / host-visible).
    OFFLOAD_MEM_HOST = 1,
    /// Memory both sides use directly (managed / shared).
    OFFLOAD_MEM_SHARED = 2,
}

fn mem_kind(call: &'static str, n: u32) -> Res<MemKind> {
    Ok(match n {
        0 => MemKind::Device,
        1 => MemKind::Host,
        2 => MemKind::Shared,
        _ => {
            return Err(Fail::from(Error::invalid(
                call,
                format!("{n} is no offload_mem_kind_t"),
            )));
        }
    })
}

fn alloc(
    call: &'static str,
    device: offload_device_t,
    size: usize,
    kind: u32,
    buffer: *mut offload_buffer_t,
    exportable: bool,
) -> offload_status_t {
    guard(call, || {
        let o = out(call, "buffer", buffer)?;
        let kind = mem_kind(call, kind)?;
        let d = table::get::<Device>(call, device)?;
        let b = if exportable {
            d.alloc_exportable(size, kind)?
        } else {
            d.alloc(size, kind)?
        };
        o.set(table::insert(call, table::epoch_of(device), b)?);
        Ok(())
    })
}

/// Allocates `size` bytes of `kind` (an `offload_mem_kind_t`) on `device`
/// (liboffload's `olMemAlloc`). Give it back with `offload_buffer_free`; whatever is not
/// freed is freed by the last `offload_shutdown` (L4).
///
/// # Safety
/// `buffer` must point to a writable `offload_buffer_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_buffer_alloc(
    device: offload_device_t,
    size: usize,
    kind: u32,
    buffer: *mut offload_buffer_t,
) -> offload_status_t {
    alloc("offload_buffer_alloc", device, size, kind, buffer, false)
}

/// Like `offload_buffer_alloc`, in memory another process can map
/// (`offload_ipc_export`, I1).
///
/// # Safety
/// `buffer` must point to a writable `offload_buffer_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_buffer_alloc_exportable(
    device: offload_device_t,
    size: usize,
    kind: u32,
    buffer: *mut offload_buffer_t,
) -> offload_status_t {
    alloc(
        "offload_buffer_alloc_exportable",
        device,
        size,
        kind,
        buffer,
        true,
    )
}

/// Frees a buffer (liboffload's `olMemFree`); its handle is dead from now on, whatever the
/// status. Memory sent to IPC peers is released only once they unmapped it (I3):
/// `OFFLOAD_ERROR_QUARANTINED` when a live peer did not in time.
#[unsafe(no_mangle)]
pub extern "C" fn offload_buffer_free(buffer: offload_buffer_t) -> offload_status_t {
    const CALL: &str = "offload_buffer_free";
    guard(CALL, || {
        let b = table::remove::<Buffer>(CALL, buffer)?;
        match b {
            table::Removed::Owned(b) => b.free()?,
            // Another thread is in a call with this buffer right now: it is freed when
            // that call returns (its drop frees; errors go to the next shutdown).
            table::Removed::InUse(_) => {}
        }
        Ok(())
    })
}

/// The buffer's size in bytes and its memory kind (either output may be null).
///
/// # Safety
/// `size` must be null or point to a writable `size_t`; `kind` null or to a writable
/// `offload_mem_kind_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_buffer_info(
    buffer: offload_buffer_t,
    size: *mut usize,
    kind: *mut offload_mem_kind_t,
) -> offload_status_t {
    const CALL: &str = "offload_buffer_info";
    guard(CALL, || {
        let b = table::get::<Buffer>(CALL, buffer)?;
        // A dead buffer says ShutDown, as every other call on it does.
        b.read(0, &mut [])?;
        if !size.is_null() {
            // SAFETY: non-null; the caller promises a writable size_t.
            unsafe { size.write(b.len()) };
        }
        if !kind.is_null() {
            let k = match b.kind() {
                MemKind::Device => offload_mem_kind_t::OFFLOAD_MEM_DEVICE,
                MemKind::Host => offload_mem_kind_t::OFFLOAD_MEM_HOST,
                _ => offload_mem_kind_t::OFFLOAD_MEM_SHARED,
            };
            // SAFETY: non-null; the caller promises a writable offload_mem_kind_t.
            unsafe { kind.write(k) };
        }
        Ok(())
    })
}

/// Copies `len` bytes of `buffer` at `offset` into `dst`, waiting for the device.
///
/// # Safety
/// `dst` must point to `len` writable bytes (null is refused unless `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_buffer_read(
    buffer: offload_buffer_t,
    offset: usize,
    dst: *mut u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_buffer_read";
    guard(CALL, || {
        // SAFETY: the caller promises `len` writable bytes at `dst`.
        let dst = unsafe { bytes_mut(CALL, "dst", dst, len) }?;
        table::get::<Buffer>(CALL, buffer)?.read(offset, dst)?;
        Ok(())
    })
}

/// Copies `len` bytes from `src` into `buffer` at `offset`, waiting for the device.
///
/// # Safety
/// `src` must point to `len` readable bytes (null is refused unless `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_buffer_write(
    buffer: offload_buffer_t,
    offset: usize,
    src: *const u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_buffer_write";
    guard(CALL, || {
        // SAFETY: the caller promises `len` readable bytes at `src`.
        let src = unsafe { bytes(CALL, "src", src, len) }?;
        table::get::<Buffer>(CALL, buffer)?.write(offset, src)?;
        Ok(())
    })
}

/// Sets `len` bytes of `buffer` at `offset` to `value`, waiting for the device.
#[unsafe(no_mangle)]
pub extern "C" fn offload_buffer_fill(
    buffer: offload_buffer_t,
    offset: usize,
    len: usize,
    value: u8,
) -> offload_status_t {
    const CALL: &str = "offload_buffer_fill";
    guard(CALL, || {
        table::get::<Buffer>(CALL, buffer)?.fill(offset, len, value)?;
        Ok(())
    })
}

/// Copies `len` bytes of `src` at `src_offset` into `dst` at `dst_offset` (the same
/// buffer or another, on any devices), waiting for the devices.
#[unsafe(no_mangle)]
pub extern "C" fn offload_buffer_copy(
    dst: offload_buffer_t,
    dst_offset: usize,
    src: offload_buffer_t,
    src_offset: usize,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_buffer_copy";
    guard(CALL, || {
        let d = table::get::<Buffer>(CALL, dst)?;
        let s = table::get::<Buffer>(CALL, src)?;
        d.copy_from(dst_offset, &s, src_offset, len)?;
        Ok(())
    })
}
