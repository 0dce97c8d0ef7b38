//! # offload-liboffload
//!
//! `libLLVMOffload.so.22.1` over offload (issue 47): LLVM liboffload 22's C ABI — the 35
//! `ol*` functions and their `…WithCodeLoc` twins, 70 symbols of version `VERS1.0`, the
//! SONAME `libLLVMOffload.so.22.1` — implemented over offload's Rust API, with offload's
//! lifecycle: `olInit`/`olShutDown` reference counted, really deinitialising at zero,
//! re-initialisable; a handle of a finished generation refused with a documented
//! `ol_errc_t`, never a crash; a failed `olInit` leaves nothing behind.
//!
//! The ABI is generated at build time from the system's `OffloadAPI.h` (Debian's
//! `liboffload-22-dev`), and every exported function is checked at compile time against the
//! header's declaration of it. docs/liboffload.md says how to run a liboffload program on
//! offload, which functions work (and which answer `OL_ERRC_UNSUPPORTED` for now), the
//! backend mapping and the error codes.
//!
//! No panic crosses into C: every function runs its body under `catch_unwind`.

// The library's name is liboffload's: libLLVMOffload.so.
#![allow(non_snake_case)]

mod abi;
mod info;
mod result;
mod state;

use std::ffi::{c_char, c_void};

use abi::*;
use result::{Fail, Res, guard, stat};
use state::{
    Alloc, DevKind, Live, device_handle, device_index, fail, listed, live, platform_index, state,
};

/// Defines an exported function and its `…WithCodeLoc` twin (which ignores the location).
macro_rules! entry {
    ($(#[$doc:meta])* $name:ident / $loc:ident ($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// Every pointer argument is NULL or valid for what `OffloadAPI.h` says of it.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ol_result_t {
            guard(|| $body)
        }

        #[doc = concat!("`", stringify!($name), "` with a source location, which is not read.")]
        ///
        /// # Safety
        #[doc = concat!("As for `", stringify!($name), "`.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $loc($($arg: $ty,)* _code_location: *mut ol_code_location_t) -> ol_result_t {
            // SAFETY: the caller's promises are those of the function without a location.
            unsafe { $name($($arg),*) }
        }

        // The definitions have the header's types (a mismatch does not compile).
        const _: () = {
            let _ = [abi::$name, $name];
            let _ = [abi::$loc, $loc];
        };
    };
}

/// Functions not implemented yet: `OL_ERRC_UNSUPPORTED`, with details naming the function.
macro_rules! not_yet {
    ($($name:ident / $loc:ident ($($arg:ident: $ty:ty),*);)*) => {$(
        entry! {
            #[doc = concat!("Not implemented yet by offload's libLLVMOffload: answers `OL_ERRC_UNSUPPORTED` (docs/liboffload.md).")]
            $name / $loc ($($arg: $ty),*) {
                let _ = ($($arg,)*);
                Err(&stat!(
                    OL_ERRC_UNSUPPORTED,
                    concat!(stringify!($name), " is not implemented yet by offload's libLLVMOffload (issue 47; docs/liboffload.md lists what works)")
                ).0)
            }
        }
    )*};
}

entry! {
    /// Takes a reference to the runtime; the first starts offload (a fresh generation).
    olInit / olInitWithCodeLoc () {
        let mut st = state();
        if st.refs > 0 {
            st.refs += 1;
            return Ok(());
        }
        let epoch = st.epoch.wrapping_add(1);
        match Live::start(epoch) {
            Ok(live) => {
                st.epoch = epoch;
                st.live = Some(live);
                st.refs = 1;
                Ok(())
            }
            Err(e) => {
                let e = e.for_call(offload::Caller::Liboffload, "olInit");
                Err(st.init_fail.set(state::errc(&e), &e.to_string()))
            }
        }
    }
}

entry! {
    /// Drops a reference; the last frees what is still allocated and shuts offload down.
    olShutDown / olShutDownWithCodeLoc () {
        let mut st = state();
        if st.refs == 0 {
            return Err(&stat!(
                OL_ERRC_UNINITIALIZED,
                "olShutDown: not initialised (every olInit was already matched by an olShutDown)"
            ).0);
        }
        st.refs -= 1;
        if st.refs > 0 {
            return Ok(());
        }
        let Some(live) = st.live.take() else { return Ok(()) };
        let mut errors = Vec::new();
        for (_, alloc) in live.allocs {
            if let Err(e) = alloc.buffer.free() {
                errors.push(e.for_call(offload::Caller::Liboffload, "olShutDown").to_string());
            }
        }
        drop(live.devices);
        if let Err(e) = live.rt.shutdown() {
            errors.push(offload::Error::from(e).for_call(offload::Caller::Liboffload, "olShutDown").to_string());
        }
        if errors.is_empty() {
            return Ok(());
        }
        let text = format!("olShutDown: offload shut down with errors: {}", errors.join("; "));
        Err(st.shutdown_fail.set(ol_errc_t::OL_ERRC_BACKEND_FAILURE, &text))
    }
}

entry! {
    /// Calls `Callback` for each device (liboffload's HOST endpoint first, then offload's),
    /// without holding the library's lock.
    olIterateDevices / olIterateDevicesWithCodeLoc (Callback: ol_device_iterate_cb_t, UserData: *mut c_void) {
        // The handles follow from the generation and the number of devices: nothing to
        // allocate per call.
        let mut listing = None;
        state::with_state(|st| {
            let Some(callback) = Callback else {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "Callback is NULL").into());
            };
            let live = listed(st)?;
            listing = Some((callback, live.epoch, live.devices.len()));
            Ok(())
        })?;
        let Some((callback, epoch, count)) = listing else {
            return Ok(());
        };
        for handle in (0..count).map(|i| device_handle(epoch, i)) {
            // SAFETY: the caller's function, called as the header documents.
            if !unsafe { callback(handle, UserData) } {
                break;
            }
        }
        Ok(())
    }
}

entry! {
    /// A device property.
    olGetDeviceInfo / olGetDeviceInfoWithCodeLoc (Device: ol_device_handle_t, PropName: ol_device_info_t, PropSize: usize, PropValue: *mut c_void) {
        state::with_state(|st| {
            let live = listed(st)?;
            let value = info::device(live, device_index(live, Device)?, PropName)?;
            // SAFETY: the caller promises PropSize writable bytes at PropValue.
            unsafe { info::write(&value, PropSize, PropValue) }
        })
    }
}

entry! {
    /// A device property's size.
    olGetDeviceInfoSize / olGetDeviceInfoSizeWithCodeLoc (Device: ol_device_handle_t, PropName: ol_device_info_t, PropSizeRet: *mut usize) {
        state::with_state(|st| {
            let live = listed(st)?;
            let value = info::device(live, device_index(live, Device)?, PropName)?;
            // SAFETY: the caller promises a writable size_t at PropSizeRet.
            unsafe { info::write_size(&value, PropSizeRet) }
        })
    }
}

entry! {
    /// A platform property.
    olGetPlatformInfo / olGetPlatformInfoWithCodeLoc (Platform: ol_platform_handle_t, PropName: ol_platform_info_t, PropSize: usize, PropValue: *mut c_void) {
        state::with_state(|st| {
            let live = listed(st)?;
            let value = info::platform(live, platform_index(live, Platform)?, PropName)?;
            // SAFETY: the caller promises PropSize writable bytes at PropValue.
            unsafe { info::write(&value, PropSize, PropValue) }
        })
    }
}

entry! {
    /// A platform property's size.
    olGetPlatformInfoSize / olGetPlatformInfoSizeWithCodeLoc (Platform: ol_platform_handle_t, PropName: ol_platform_info_t, PropSizeRet: *mut usize) {
        state::with_state(|st| {
            let live = listed(st)?;
            let value = info::platform(live, platform_index(live, Platform)?, PropName)?;
            // SAFETY: the caller promises a writable size_t at PropSizeRet.
            unsafe { info::write_size(&value, PropSizeRet) }
        })
    }
}

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
            live.allocs.insert(base, Alloc { buffer, size: Size, device: index, ty: Type, host_visible });
            // SAFETY: non-null (checked above); the caller promises a writable pointer.
            unsafe { AllocationOut.write(std::ptr::without_provenance_mut(base)) };
            Ok(())
        })
    }
}

entry! {
    /// Frees an allocation `olMemAlloc` made.
    olMemFree / olMemFreeWithCodeLoc (Address: *mut c_void) {
        state::with_state(|st| {
            let live = live(st)?;
            if Address.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "Address is NULL").into());
            }
            let Some(alloc) = live.allocs.remove(&Address.addr()) else {
                return Err(stat!(
                    OL_ERRC_NOT_FOUND,
                    "olMemFree: not an address olMemAlloc returned in this generation (or freed already)"
                ).into());
            };
            alloc.buffer.free().map_err(|e| fail("olMemFree", e))
        })
    }
}

/// One side of a copy: an allocation (at an offset) or plain host memory.
enum Side {
    Alloc(usize, usize),
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
        return Ok(Side::Alloc(ptr - offset, offset));
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
    /// A copy, synchronous (a queue is not supported yet).
    olMemcpy / olMemcpyWithCodeLoc (Queue: ol_queue_handle_t, DstPtr: *mut c_void, DstDevice: ol_device_handle_t, SrcPtr: *const c_void, SrcDevice: ol_device_handle_t, Size: usize) {
        state::with_state(|st| {
            let live = listed(st)?;
            if DstDevice.is_null() || SrcDevice.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_HANDLE, "olMemcpy: DstDevice or SrcDevice is NULL").into());
            }
            if DstPtr.is_null() || SrcPtr.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olMemcpy: DstPtr or SrcPtr is NULL").into());
            }
            if !Queue.is_null() {
                return Err(stat!(OL_ERRC_UNSUPPORTED, "olMemcpy: queues are not implemented yet by offload's libLLVMOffload; pass a NULL queue (a synchronous copy)").into());
            }
            // Host to host through the HOST device (index 0) with no allocation to look
            // through: liboffload's commonest small copy, straight to memmove.
            if live.allocs.is_empty()
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
            if Size == 0 {
                return Ok(());
            }
            match (dst, src) {
                // SAFETY: host memory on both sides, which the caller promises holds Size
                // bytes at each pointer (`copy` allows overlap).
                (Side::Host, Side::Host) => unsafe {
                    std::ptr::copy(SrcPtr.cast::<u8>(), DstPtr.cast::<u8>(), Size);
                    Ok(())
                },
                (Side::Alloc(base, off), Side::Host) => {
                    // SAFETY: the caller promises Size readable bytes at SrcPtr.
                    let bytes = unsafe { std::slice::from_raw_parts(SrcPtr.cast::<u8>(), Size) };
                    live.allocs[&base].buffer.write(off, bytes).map_err(|e| fail("olMemcpy", e))
                }
                (Side::Host, Side::Alloc(base, off)) => {
                    // SAFETY: the caller promises Size writable bytes at DstPtr, which no
                    // one else uses during the call.
                    let bytes = unsafe { std::slice::from_raw_parts_mut(DstPtr.cast::<u8>(), Size) };
                    live.allocs[&base].buffer.read(off, bytes).map_err(|e| fail("olMemcpy", e))
                }
                (Side::Alloc(db, doff), Side::Alloc(sb, soff)) => live.allocs[&db]
                    .buffer
                    .copy_from(doff, &live.allocs[&sb].buffer, soff, Size)
                    .map_err(|e| fail("olMemcpy", e)),
            }
        })
    }
}

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
    /// A property of the allocation holding `Ptr`.
    olGetMemInfo / olGetMemInfoWithCodeLoc (Ptr: *const c_void, PropName: ol_mem_info_t, PropSize: usize, PropValue: *mut c_void) {
        state::with_state(|st| {
            let value = mem_value(live(st)?, Ptr, PropName)?;
            // SAFETY: the caller promises PropSize writable bytes at PropValue.
            unsafe { info::write(&value, PropSize, PropValue) }
        })
    }
}

entry! {
    /// The size of a property of the allocation holding `Ptr`.
    olGetMemInfoSize / olGetMemInfoSizeWithCodeLoc (Ptr: *const c_void, PropName: ol_mem_info_t, PropSizeRet: *mut usize) {
        state::with_state(|st| {
            let value = mem_value(live(st)?, Ptr, PropName)?;
            // SAFETY: the caller promises a writable size_t at PropSizeRet.
            unsafe { info::write_size(&value, PropSizeRet) }
        })
    }
}

entry! {
    /// Fills an allocation with copies of a pattern, synchronously (a queue is not
    /// supported yet).
    olMemFill / olMemFillWithCodeLoc (Queue: ol_queue_handle_t, Ptr: *mut c_void, PatternSize: usize, PatternPtr: *const c_void, FillSize: usize) {
        state::with_state(|st| {
            let live = live(st)?;
            if Ptr.is_null() || PatternPtr.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olMemFill: Ptr or PatternPtr is NULL").into());
            }
            if PatternSize == 0 || FillSize % PatternSize != 0 {
                return Err(stat!(OL_ERRC_INVALID_SIZE, "olMemFill: FillSize is not a multiple of PatternSize (or PatternSize is 0)").into());
            }
            if !Queue.is_null() {
                return Err(stat!(OL_ERRC_UNSUPPORTED, "olMemFill: queues are not implemented yet by offload's libLLVMOffload; pass a NULL queue (a synchronous fill)").into());
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
            // SAFETY: the caller promises PatternSize readable bytes at PatternPtr.
            let pattern = unsafe { std::slice::from_raw_parts(PatternPtr.cast::<u8>(), PatternSize) };
            let buffer = &alloc.buffer;
            if pattern.iter().all(|&b| b == pattern[0]) {
                return buffer.fill(offset, FillSize, pattern[0]).map_err(|e| fail("olMemFill", e));
            }
            // Whole patterns, at most about 1 MiB at a time.
            let per_chunk = ((1 << 20) / PatternSize).max(1) * PatternSize;
            let chunk: Vec<u8> = pattern.iter().copied().cycle().take(per_chunk.min(FillSize)).collect();
            let mut done = 0;
            while done < FillSize {
                let n = (FillSize - done).min(chunk.len());
                buffer.write(offset + done, &chunk[..n]).map_err(|e| fail("olMemFill", e))?;
                done += n;
            }
            Ok(())
        })
    }
}

entry! {
    /// Whether a device could load a program image, without loading it (offload's
    /// `Device::validate`). liboffload's HOST endpoint loads nothing: always false.
    olIsValidBinary / olIsValidBinaryWithCodeLoc (Device: ol_device_handle_t, ProgData: *const c_void, ProgDataSize: usize, Valid: *mut bool) {
        state::with_state(|st| {
            let live = listed(st)?;
            let index = device_index(live, Device)?;
            if ProgData.is_null() || Valid.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olIsValidBinary: ProgData or Valid is NULL").into());
            }
            let valid = match &live.devices[index].kind {
                DevKind::Endpoint => false,
                DevKind::Offload(dev) => {
                    // SAFETY: the caller promises ProgDataSize readable bytes at ProgData.
                    let image = unsafe { std::slice::from_raw_parts(ProgData.cast::<u8>(), ProgDataSize) };
                    match dev.0.validate(image) {
                        Ok(()) => true,
                        Err(offload::Error::InvalidBinary { .. } | offload::Error::Unsupported { .. }) => false,
                        Err(e) => return Err(fail("olIsValidBinary", e)),
                    }
                }
            };
            // SAFETY: non-null (checked above); the caller promises a writable bool.
            unsafe { Valid.write(valid) };
            Ok(())
        })
    }
}

not_yet! {
    olCalculateOptimalOccupancy / olCalculateOptimalOccupancyWithCodeLoc (Device: ol_device_handle_t, Kernel: ol_symbol_handle_t, SharedMemory: usize, GroupSize: *mut usize);
    olCreateEvent / olCreateEventWithCodeLoc (Queue: ol_queue_handle_t, Event: *mut ol_event_handle_t);
    olCreateProgram / olCreateProgramWithCodeLoc (Device: ol_device_handle_t, ProgData: *const c_void, ProgDataSize: usize, Program: *mut ol_program_handle_t);
    olCreateQueue / olCreateQueueWithCodeLoc (Device: ol_device_handle_t, Queue: *mut ol_queue_handle_t);
    olDestroyEvent / olDestroyEventWithCodeLoc (Event: ol_event_handle_t);
    olDestroyProgram / olDestroyProgramWithCodeLoc (Program: ol_program_handle_t);
    olDestroyQueue / olDestroyQueueWithCodeLoc (Queue: ol_queue_handle_t);
    olGetEventInfo / olGetEventInfoWithCodeLoc (Event: ol_event_handle_t, PropName: ol_event_info_t, PropSize: usize, PropValue: *mut c_void);
    olGetEventInfoSize / olGetEventInfoSizeWithCodeLoc (Event: ol_event_handle_t, PropName: ol_event_info_t, PropSizeRet: *mut usize);
    olGetQueueInfo / olGetQueueInfoWithCodeLoc (Queue: ol_queue_handle_t, PropName: ol_queue_info_t, PropSize: usize, PropValue: *mut c_void);
    olGetQueueInfoSize / olGetQueueInfoSizeWithCodeLoc (Queue: ol_queue_handle_t, PropName: ol_queue_info_t, PropSizeRet: *mut usize);
    olGetSymbol / olGetSymbolWithCodeLoc (Program: ol_program_handle_t, Name: *const c_char, Kind: ol_symbol_kind_t, Symbol: *mut ol_symbol_handle_t);
    olGetSymbolInfo / olGetSymbolInfoWithCodeLoc (Symbol: ol_symbol_handle_t, PropName: ol_symbol_info_t, PropSize: usize, PropValue: *mut c_void);
    olGetSymbolInfoSize / olGetSymbolInfoSizeWithCodeLoc (Symbol: ol_symbol_handle_t, PropName: ol_symbol_info_t, PropSizeRet: *mut usize);
    olLaunchHostFunction / olLaunchHostFunctionWithCodeLoc (Queue: ol_queue_handle_t, Callback: ol_host_function_cb_t, UserData: *mut c_void);
    olLaunchKernel / olLaunchKernelWithCodeLoc (Queue: ol_queue_handle_t, Device: ol_device_handle_t, Kernel: ol_symbol_handle_t, ArgumentsData: *const c_void, ArgumentsSize: usize, LaunchSizeArgs: *const ol_kernel_launch_size_args_t);
    olMemRegister / olMemRegisterWithCodeLoc (Device: ol_device_handle_t, Ptr: *mut c_void, Size: usize, Flags: ol_memory_register_flags_t, PinnedPtr: *mut *mut c_void);
    olMemUnregister / olMemUnregisterWithCodeLoc (Device: ol_device_handle_t, Ptr: *mut c_void);
    olSyncEvent / olSyncEventWithCodeLoc (Event: ol_event_handle_t);
    olSyncQueue / olSyncQueueWithCodeLoc (Queue: ol_queue_handle_t);
    olWaitEvents / olWaitEventsWithCodeLoc (Queue: ol_queue_handle_t, Events: *mut ol_event_handle_t, NumEvents: usize);
}
