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
//! offload, how each function differs from liboffload 22's, the backend mapping and the
//! error codes.
//!
//! The modules: `state` (the generation, its devices, platforms and allocations, under
//! the one lock), `objects` (queues, events, programs and symbols in the shared handle
//! table), `memory`, `queue` and `program` (the functions over them), `info` (the property
//! answers), `result` (`ol_result_t` and the panic guard), `abi` (bindgen's types).
//!
//! No panic crosses into C: every function runs its body under `catch_unwind`.

// The library's name is liboffload's: libLLVMOffload.so.
#![allow(non_snake_case)]

mod abi;
mod info;
mod result;
mod state;

use std::ffi::c_void;

use abi::*;
use result::stat;
use state::{Live, device_handle, device_index, listed, platform_index, state};

/// Defines an exported function and its `…WithCodeLoc` twin (which ignores the location).
macro_rules! entry {
    ($(#[$doc:meta])* $name:ident / $loc:ident ($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// Every pointer argument is NULL or valid for what `OffloadAPI.h` says of it.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ol_result_t {
            if $crate::queue::inside_host_fn() {
                return &$crate::result::stat!(
                    OL_ERRC_INVALID_ARGUMENT,
                    concat!(stringify!($name), " was called from inside an olLaunchHostFunction callback, which must not call liboffload (OffloadAPI.h); offload refuses it rather than risk a deadlock")
                ).0;
            }
            $crate::result::guard(|| $body)
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
            let _ = [$crate::abi::$name, $name];
            let _ = [$crate::abi::$loc, $loc];
        };
    };
}

/// Defines a property query and its size query (`olGet…Info`, `olGet…InfoSize`) over a
/// function giving the property's value (which lets the state's lock go before returning:
/// the result of a failure is kept under it afterwards).
macro_rules! info_query {
    ($what:literal, $name:ident / $loc:ident, $size:ident / $size_loc:ident, $handle:ident: $hty:ty, $prop:ty, $value:path) => {
        entry! {
            #[doc = concat!("A ", $what, " property.")]
            $name / $loc ($handle: $hty, PropName: $prop, PropSize: usize, PropValue: *mut c_void) {
                let written = $value($handle, PropName)
                    // SAFETY: the caller promises PropSize writable bytes at PropValue.
                    .and_then(|value| unsafe { $crate::info::write(&value, PropSize, PropValue) });
                $crate::state::finish(written)
            }
        }

        entry! {
            #[doc = concat!("The size of a ", $what, " property.")]
            $size / $size_loc ($handle: $hty, PropName: $prop, PropSizeRet: *mut usize) {
                let written = $value($handle, PropName)
                    // SAFETY: the caller promises a writable size_t at PropSizeRet.
                    .and_then(|value| unsafe { $crate::info::write_size(&value, PropSizeRet) });
                $crate::state::finish(written)
            }
        }
    };
}

mod memory;
mod objects;
mod program;
mod queue;

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
                objects::begin_generation();
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
        // Queues, events, programs and symbols first (a queue's drop finishes its work;
        // a host function that calls the library meanwhile is refused, never waited for).
        drop(objects::end_generation());
        for (_, alloc) in live.allocs {
            // An allocation another thread's call still holds is freed when it returns.
            if let Ok(alloc) = std::sync::Arc::try_unwrap(alloc)
                && let Err(e) = alloc.buffer.free()
            {
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

/// A device property's value (under the state's lock, let go on return).
fn device_value(device: ol_device_handle_t, prop: ol_device_info_t) -> result::Res<info::Value> {
    let mut st = state();
    let live = listed(&mut st)?;
    info::device(live, device_index(live, device)?, prop)
}

/// A platform property's value (under the state's lock, let go on return).
fn platform_value(
    platform: ol_platform_handle_t,
    prop: ol_platform_info_t,
) -> result::Res<info::Value> {
    let mut st = state();
    let live = listed(&mut st)?;
    info::platform(live, platform_index(live, platform)?, prop)
}

info_query!("device", olGetDeviceInfo / olGetDeviceInfoWithCodeLoc, olGetDeviceInfoSize / olGetDeviceInfoSizeWithCodeLoc, Device: ol_device_handle_t, ol_device_info_t, device_value);
info_query!("platform", olGetPlatformInfo / olGetPlatformInfoWithCodeLoc, olGetPlatformInfoSize / olGetPlatformInfoSizeWithCodeLoc, Platform: ol_platform_handle_t, ol_platform_info_t, platform_value);
