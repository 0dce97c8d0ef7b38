//! Memory: `olMemAlloc`, `olMemFree`, `olMemcpy`, `olMemFill` and `olGetMemInfo`.
//!
//! An allocation is found by any address inside it (the generation's `allocs`, by base
//! address). A copy or fill looks its allocations up under the state's lock and moves the
//! bytes after letting it go, holding the allocations (`Arc`): calls of several threads
//! copy at once, and a copy that waits for a queue never holds the lock a host function's
//! caller needs. With a queue, a copy or fill is enqueued on it (offload's `Queue::write`,
//! `copy`, `fill`); a copy into host memory waits for the queue (offload's `Queue::read`:
//! C's destination cannot be written by a queue after the call returns without a promise
//! offload cannot check).

use std::ffi::c_void;
use std::sync::Arc;

use crate::abi::*;
use crate::info;
use crate::objects;
use crate::result::{Fail, Res, stat};
use crate::state::{self, Alloc, DevKind, Live, device_handle, device_index, fail, listed, live};

/// Where fake addresses start: never a canonical x86-64/AArch64 user address, so C cannot
/// follow one (memory the host cannot address, as Vulkan's).
const FAKE_BASE: usize = 0xA000_0000_0000_0000;
const FAKE_SPAN: usize = 1 << 40;

entry! {
    /// Allocates on one of offload's devices (the HOST endpoint cannot allocate).
    olMemAlloc / olMemAllocWithCodeLoc (Device: ol_device_handle_t, Type: ol_alloc_type_t, Size: usize, AllocationOut: *mut *mut c_void) {
        state::with_state(|st| {
            let state::State { live, fake_next: st_fake, .. } = st;
            let live = live.as_mut().ok_or_else(state::uninit)?.list()?;
            let index = device_index(live, Device)?;
            if AllocationOut.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "AllocationOut is NULL").into());
            }
            if Size == 0 {
                return Err(stat!(OL_ERRC_INVALID_SIZE, "Size is 0").into());
            }
            let kind = match Type {
                ol_alloc_type_t::OL_ALLOC_TYPE_DEVICE => offload::MemKind::Device,
                ol_alloc_type_t::OL_ALLOC_TYPE_HOST => offload::MemKind::Host,
                ol_alloc_type_t::OL_ALLOC_TYPE_MANAGED => offload::MemKind::Shared,
                _ => return Err(stat!(OL_ERRC_INVALID_ENUMERATION, "Type names no ol_alloc_type_t").into()),
            };
            let DevKind::Offload(dev) = &live.devices[index].kind else {
                return Err(stat!(
                    OL_ERRC_UNSUPPORTED,
                    "olMemAlloc: the HOST platform's device is only a memcpy endpoint for host pointers (as in liboffload); allocate on one of offload's devices"
                ).into());
            };
            let buffer = dev.0.alloc(Size, kind).map_err(|e| fail("olMemAlloc", e))?;
            let (base, host_visible) = match buffer.address() {
                Ok(a) if dev.0.backend() == offload::BackendKind::Host => (a as usize, true),
                _ => {
                    if Size > FAKE_SPAN {
                        let _ = buffer.free();
                        return Err(Fail::Message(ol_errc_t::OL_ERRC_OUT_OF_RESOURCES, format!("olMemAlloc: {Size} bytes on a device without host addresses: at most {FAKE_SPAN} in one allocation")));
                    }
                    let mut base;
                    loop {
                        *st_fake = st_fake.wrapping_add(1);
                        base = FAKE_BASE + ((*st_fake as usize) % (1 << 20)) * FAKE_SPAN;
                        if !live.allocs.contains_key(&base) {
                            break;
                        }
                    }
                    (base, false)
                }
            };
            live.allocs.insert(base, Arc::new(Alloc { buffer, size: Size, device: index, ty: Type, host_visible, registered: false }));
            // SAFETY: non-null (checked above); the caller promises a writable pointer.
            unsafe { AllocationOut.write(std::ptr::without_provenance_mut(base)) };
            Ok(())
        })
    }
}

entry! {
    /// Frees an allocation `olMemAlloc` made (after the lock is let go; while another
    /// thread's copy still uses it, when that copy returns).
    olMemFree / olMemFreeWithCodeLoc (Address: *mut c_void) {
        let mut taken = None;
        state::with_state(|st| {
            let live = live(st)?;
            if Address.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "Address is NULL").into());
            }
            if live.allocs.get(&Address.addr()).is_some_and(|a| a.registered) {
                return Err(stat!(
                    OL_ERRC_INVALID_ARGUMENT,
                    "olMemFree: the address is host memory olMemRegister registered: olMemUnregister it"
                ).into());
            }
            let Some(alloc) = live.allocs.remove(&Address.addr()) else {
                return Err(stat!(
                    OL_ERRC_NOT_FOUND,
                    "olMemFree: not an address olMemAlloc returned in this generation (or freed already)"
                ).into());
            };
            taken = Some(alloc);
            Ok(())
        })?;
        match taken.map(Arc::try_unwrap) {
            Some(Ok(alloc)) => state::finish(alloc.buffer.free().map_err(|e| fail("olMemFree", e))),
            // Held by another thread's call: freed when it returns (a failure then is
            // offload's unreported error, L8).
            Some(Err(_)) | None => Ok(()),
        }
    }
}

/// One side of a copy: an allocation (held for the call) at an offset, or plain host
/// memory.
enum Side {
    Alloc(Arc<Alloc>, usize),
    Host,
}

fn side(live: &Live, ptr: usize, device: ol_device_handle_t, size: usize) -> Res<Side> {
    let dev = device_index(live, device)?;
    if let Some((offset, alloc)) = live.alloc_at(ptr) {
        if offset + size > alloc.size {
            return Err(Fail::Message(
                ol_errc_t::OL_ERRC_INVALID_SIZE,
                format!(
                    "olMemcpy: {size} bytes at offset {offset} run past the end of an allocation of {} bytes",
                    alloc.size
                ),
            ));
        }
        if alloc.host_visible && matches!(live.devices[dev].kind, DevKind::Endpoint) {
            return Ok(Side::Host);
        }
        return Ok(Side::Alloc(alloc.clone(), offset));
    }
    match live.devices[dev].kind {
        DevKind::Endpoint => Ok(Side::Host),
        DevKind::Offload(_) => Err(stat!(
            OL_ERRC_INVALID_ARGUMENT,
            "olMemcpy: the pointer is not inside an allocation of offload's device (for host memory, name the HOST platform's device)"
        ).into()),
    }
}

entry! {
    /// A copy: enqueued on `Queue`, or synchronous without one.
    olMemcpy / olMemcpyWithCodeLoc (Queue: ol_queue_handle_t, DstPtr: *mut c_void, DstDevice: ol_device_handle_t, SrcPtr: *const c_void, SrcDevice: ol_device_handle_t, Size: usize) {
        let mut sides = None;
        state::with_state(|st| {
            let live = listed(st)?;
            if DstDevice.is_null() || SrcDevice.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_HANDLE, "olMemcpy: DstDevice or SrcDevice is NULL").into());
            }
            if DstPtr.is_null() || SrcPtr.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olMemcpy: DstPtr or SrcPtr is NULL").into());
            }
            // Host to host through the HOST device (index 0) with no allocation to look
            // through and no queue: liboffload's commonest small copy, straight to memmove.
            if Queue.is_null()
                && live.allocs.is_empty()
                && matches!(device_index(live, DstDevice), Ok(0))
                && matches!(device_index(live, SrcDevice), Ok(0))
            {
                // SAFETY: host memory on both sides, which the caller promises holds Size
                // bytes at each pointer (`copy` allows overlap).
                unsafe { std::ptr::copy(SrcPtr.cast::<u8>(), DstPtr.cast::<u8>(), Size) };
                return Ok(());
            }
            let dst = side(live, DstPtr.addr(), DstDevice, Size)?;
            let src = side(live, SrcPtr.addr(), SrcDevice, Size)?;
            sides = Some((dst, src));
            Ok(())
        })?;
        let Some((dst, src)) = sides else { return Ok(()) };
        state::finish(copy(Queue, dst, DstPtr, src, SrcPtr, Size))
    }
}

/// The bytes of a copy, moved without the state's lock.
fn copy(
    queue: ol_queue_handle_t,
    dst: Side,
    dst_ptr: *mut c_void,
    src: Side,
    src_ptr: *const c_void,
    size: usize,
) -> Res {
    let queue = objects::optional_queue(queue)?;
    if size == 0 {
        return Ok(());
    }
    let q = queue.as_ref().map(|q| &q.queue);
    let done = match (dst, src) {
        (Side::Host, Side::Host) => {
            // After the queue's work, as a queued copy would be.
            if let Some(q) = q {
                q.sync().map_err(|e| fail("olMemcpy", e))?;
            }
            // SAFETY: host memory on both sides, which the caller promises holds `size`
            // bytes at each pointer (`copy` allows overlap).
            unsafe { std::ptr::copy(src_ptr.cast::<u8>(), dst_ptr.cast::<u8>(), size) };
            Ok(())
        }
        (Side::Alloc(alloc, off), Side::Host) => {
            // SAFETY: the caller promises `size` readable bytes at `src_ptr`.
            let bytes = unsafe { std::slice::from_raw_parts(src_ptr.cast::<u8>(), size) };
            match q {
                // Copied at once: C's source may change after the call returns.
                Some(q) => q.write(&alloc.buffer, off, bytes),
                None => alloc.buffer.write(off, bytes),
            }
        }
        (Side::Host, Side::Alloc(alloc, off)) => {
            // SAFETY: the caller promises `size` writable bytes at `dst_ptr`, which no one
            // else uses during the call.
            let bytes = unsafe { std::slice::from_raw_parts_mut(dst_ptr.cast::<u8>(), size) };
            match q {
                Some(q) => q.read(&alloc.buffer, off, bytes),
                None => alloc.buffer.read(off, bytes),
            }
        }
        (Side::Alloc(d, doff), Side::Alloc(s, soff)) => match q {
            Some(q) => q.copy(&s.buffer, soff, &d.buffer, doff, size),
            None => d.buffer.copy_from(doff, &s.buffer, soff, size),
        },
    };
    done.map_err(|e| fail("olMemcpy", e))
}

/// A property of the allocation holding `ptr` (under the state's lock, let go on return).
fn mem_info(ptr: *const c_void, prop: ol_mem_info_t) -> Res<info::Value> {
    mem_value(live(&mut state::state())?, ptr, prop)
}

info_query!("memory", olGetMemInfo / olGetMemInfoWithCodeLoc, olGetMemInfoSize / olGetMemInfoSizeWithCodeLoc, Ptr: *const c_void, ol_mem_info_t, mem_info);

fn mem_value(live: &Live, ptr: *const c_void, prop: ol_mem_info_t) -> Res<info::Value> {
    if ptr.is_null() {
        return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "Ptr is NULL").into());
    }
    let Some((offset, alloc)) = live.alloc_at(ptr.addr()) else {
        return Err(stat!(
            OL_ERRC_NOT_FOUND,
            "the memory was not allocated by olMemAlloc in this generation"
        )
        .into());
    };
    Ok(match prop {
        ol_mem_info_t::OL_MEM_INFO_DEVICE => {
            info::Value::Word(device_handle(live.epoch, alloc.device).addr())
        }
        ol_mem_info_t::OL_MEM_INFO_BASE => info::Value::Word(ptr.addr() - offset),
        ol_mem_info_t::OL_MEM_INFO_SIZE => info::Value::Word(alloc.size),
        ol_mem_info_t::OL_MEM_INFO_TYPE => info::Value::U32(alloc.ty.0),
        _ => return Err(info::bad_enum()),
    })
}

entry! {
    /// Fills an allocation with copies of a pattern: enqueued on `Queue`, or synchronous
    /// without one.
    olMemFill / olMemFillWithCodeLoc (Queue: ol_queue_handle_t, Ptr: *mut c_void, PatternSize: usize, PatternPtr: *const c_void, FillSize: usize) {
        let mut found = None;
        state::with_state(|st| {
            let live = live(st)?;
            if Ptr.is_null() || PatternPtr.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olMemFill: Ptr or PatternPtr is NULL").into());
            }
            if PatternSize == 0 || FillSize % PatternSize != 0 {
                return Err(stat!(OL_ERRC_INVALID_SIZE, "olMemFill: FillSize is not a multiple of PatternSize (or PatternSize is 0)").into());
            }
            let Some((offset, alloc)) = live.alloc_at(Ptr.addr()) else {
                return Err(stat!(OL_ERRC_NOT_FOUND, "olMemFill: Ptr is not inside an allocation olMemAlloc made in this generation").into());
            };
            if offset + FillSize > alloc.size {
                return Err(Fail::Message(
                    ol_errc_t::OL_ERRC_INVALID_SIZE,
                    format!("olMemFill: {FillSize} bytes at offset {offset} run past the end of an allocation of {} bytes", alloc.size),
                ));
            }
            found = Some((alloc.clone(), offset));
            Ok(())
        })?;
        let Some((alloc, offset)) = found else { return Ok(()) };
        // SAFETY: the caller promises PatternSize readable bytes at PatternPtr.
        let pattern = unsafe { std::slice::from_raw_parts(PatternPtr.cast::<u8>(), PatternSize) };
        state::finish(fill(Queue, &alloc, offset, pattern, FillSize))
    }
}

/// The fill, without the state's lock.
fn fill(queue: ol_queue_handle_t, alloc: &Alloc, offset: usize, pattern: &[u8], len: usize) -> Res {
    let buffer = &alloc.buffer;
    if let Some(q) = objects::optional_queue(queue)? {
        return q
            .queue
            .fill(buffer, offset, len, pattern)
            .map_err(|e| fail("olMemFill", e));
    }
    if pattern.iter().all(|&b| b == pattern[0]) {
        return buffer
            .fill(offset, len, pattern[0])
            .map_err(|e| fail("olMemFill", e));
    }
    // Whole patterns, at most about 1 MiB at a time.
    let per_chunk = ((1 << 20) / pattern.len()).max(1) * pattern.len();
    let chunk: Vec<u8> = pattern
        .iter()
        .copied()
        .cycle()
        .take(per_chunk.min(len))
        .collect();
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk.len());
        buffer
            .write(offset + done, &chunk[..n])
            .map_err(|e| fail("olMemFill", e))?;
        done += n;
    }
    Ok(())
}

entry! {
    /// Registers host memory with a device: on offload's host devices the memory is used
    /// as it is (the pinned pointer is `Ptr`; offload's `Device::adopt`), and can be named
    /// in copies, fills and launches like an allocation. Other devices cannot use host
    /// memory in place: `OL_ERRC_UNSUPPORTED`.
    olMemRegister / olMemRegisterWithCodeLoc (Device: ol_device_handle_t, Ptr: *mut c_void, Size: usize, Flags: ol_memory_register_flags_t, PinnedPtr: *mut *mut c_void) {
        let _ = Flags;
        state::with_state(|st| {
            let live = listed(st)?;
            let index = device_index(live, Device)?;
            if Ptr.is_null() || PinnedPtr.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olMemRegister: Ptr or PinnedPtr is NULL").into());
            }
            if Size == 0 {
                return Err(stat!(OL_ERRC_INVALID_SIZE, "olMemRegister: Size is 0").into());
            }
            let dev = match &live.devices[index].kind {
                DevKind::Offload(d) if d.0.backend() == offload::BackendKind::Host => d.0.clone(),
                _ => return Err(stat!(
                    OL_ERRC_UNSUPPORTED,
                    "olMemRegister: only offload's host devices can use host memory in place (liboffload's HOST device copies host pointers as they are)"
                ).into()),
            };
            let (start, end) = (Ptr.addr(), Ptr.addr().saturating_add(Size));
            let overlaps = live.alloc_at(start).is_some()
                || live.allocs.range(start..end).next().is_some();
            if overlaps {
                return Err(stat!(
                    OL_ERRC_INVALID_ARGUMENT,
                    "olMemRegister: the range overlaps memory already allocated or registered"
                ).into());
            }
            // SAFETY: liboffload's contract for olMemRegister: Size bytes of the caller's
            // host memory at Ptr, which stay valid until olMemUnregister; the host device's
            // kernels and copies use host memory directly. The owner is nothing: the
            // caller frees the memory after unregistering it.
            let buffer = unsafe { dev.adopt(start as u64, Size, offload::MemKind::Host, ()) }
                .map_err(|e| fail("olMemRegister", e))?;
            live.allocs.insert(start, Arc::new(Alloc {
                buffer,
                size: Size,
                device: index,
                ty: ol_alloc_type_t::OL_ALLOC_TYPE_HOST,
                host_visible: true,
                registered: true,
            }));
            // SAFETY: non-null (checked above); the caller promises a writable pointer.
            unsafe { PinnedPtr.write(Ptr) };
            Ok(())
        })
    }
}

entry! {
    /// Unregisters host memory `olMemRegister` registered (after the work queued on it).
    olMemUnregister / olMemUnregisterWithCodeLoc (Device: ol_device_handle_t, Ptr: *mut c_void) {
        let mut taken = None;
        state::with_state(|st| {
            let live = listed(st)?;
            let index = device_index(live, Device)?;
            if Ptr.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olMemUnregister: Ptr is NULL").into());
            }
            match live.allocs.get(&Ptr.addr()) {
                Some(a) if a.registered && a.device == index => {}
                _ => return Err(stat!(
                    OL_ERRC_NOT_FOUND,
                    "olMemUnregister: Ptr is not host memory olMemRegister registered with this device"
                ).into()),
            }
            taken = live.allocs.remove(&Ptr.addr());
            Ok(())
        })?;
        match taken.map(Arc::try_unwrap) {
            Some(Ok(alloc)) => state::finish(alloc.buffer.free().map_err(|e| fail("olMemUnregister", e))),
            Some(Err(_)) | None => Ok(()),
        }
    }
}
