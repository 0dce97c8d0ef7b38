//! The raw CUDA driver side of offload-cuda's paired benchmarks (`raw_pair.rs`,
//! `babelstream.rs`, which include this file with `#[path]`): libcuda's entry points as it
//! exports them, opened at run time with nothing of offload in between, and device 0's
//! primary context (the one offload's CUDA backend uses too) current on the opening thread
//! with one non-blocking stream of its own. Not a benchmark itself; nothing to run.

// Each bench uses its own part of what is here.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type CuResult = c_int;
pub type Ptr = *mut c_void;

/// `CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE`: the peak memory clock, kHz.
pub const ATTRIBUTE_MEMORY_CLOCK_KHZ: c_int = 36;
/// `CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH`: the global memory bus, bits.
pub const ATTRIBUTE_MEMORY_BUS_BITS: c_int = 37;

/// The raw driver entry points the harnesses call, as libcuda exports them.
pub struct Raw {
    pub mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    pub mem_free: unsafe extern "C" fn(u64) -> CuResult,
    pub htod: unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult,
    pub dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult,
    pub dtod_async: unsafe extern "C" fn(u64, u64, usize, Ptr) -> CuResult,
    pub load: unsafe extern "C" fn(*mut Ptr, *const c_void) -> CuResult,
    pub unload: unsafe extern "C" fn(Ptr) -> CuResult,
    pub function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    pub launch: unsafe extern "C" fn(
        Ptr,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Ptr,
        *mut Ptr,
        *mut Ptr,
    ) -> CuResult,
    pub stream_sync: unsafe extern "C" fn(Ptr) -> CuResult,
    pub stream_create: unsafe extern "C" fn(*mut Ptr, c_uint) -> CuResult,
    pub stream_destroy: unsafe extern "C" fn(Ptr) -> CuResult,
    pub attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    pub name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult,
    pub release: unsafe extern "C" fn(c_int) -> CuResult,
    pub device: c_int,
    pub context: Ptr,
    pub stream: Ptr,
    _library: libloading::Library,
}

/// Panics naming the call unless it succeeded (a benchmark has no error path to report to).
pub fn check(call: &str, code: CuResult) {
    assert_eq!(code, 0, "{call} failed with CUresult {code}");
}

impl Raw {
    /// Opens libcuda, initialises it and makes device 0's primary context current on this
    /// thread (the one offload's CUDA backend uses too).
    pub fn open() -> Option<Raw> {
        // SAFETY: libcuda.so.1 is the CUDA driver; its initialisers only set up the driver.
        let library = unsafe { libloading::Library::new("libcuda.so.1") }.ok()?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field's type is the documented C signature of this entry point.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .unwrap_or_else(|e| panic!("libcuda has no {}: {e}", $name))
            };
        }
        let init: unsafe extern "C" fn(c_uint) -> CuResult = sym!("cuInit");
        let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult = sym!("cuDeviceGet");
        let retain: unsafe extern "C" fn(*mut Ptr, c_int) -> CuResult =
            sym!("cuDevicePrimaryCtxRetain");
        let set_current: unsafe extern "C" fn(Ptr) -> CuResult = sym!("cuCtxSetCurrent");
        let mut raw = Raw {
            mem_alloc: sym!("cuMemAlloc_v2"),
            mem_free: sym!("cuMemFree_v2"),
            htod: sym!("cuMemcpyHtoD_v2"),
            dtoh: sym!("cuMemcpyDtoH_v2"),
            dtod_async: sym!("cuMemcpyDtoDAsync_v2"),
            load: sym!("cuModuleLoadData"),
            unload: sym!("cuModuleUnload"),
            function: sym!("cuModuleGetFunction"),
            launch: sym!("cuLaunchKernel"),
            stream_sync: sym!("cuStreamSynchronize"),
            stream_create: sym!("cuStreamCreate"),
            stream_destroy: sym!("cuStreamDestroy_v2"),
            attribute: sym!("cuDeviceGetAttribute"),
            name: sym!("cuDeviceGetName"),
            release: sym!("cuDevicePrimaryCtxRelease_v2"),
            device: 0,
            context: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            _library: library,
        };
        // SAFETY: plain driver calls with out-pointers to locals; cuInit comes first.
        unsafe {
            if init(0) != 0 || device_get(&mut raw.device, 0) != 0 {
                return None;
            }
            check(
                "cuDevicePrimaryCtxRetain",
                retain(&mut raw.context, raw.device),
            );
            check("cuCtxSetCurrent", set_current(raw.context));
            check("cuStreamCreate", (raw.stream_create)(&mut raw.stream, 1));
        }
        Some(raw)
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the stream and the retained context are this harness's own.
        unsafe {
            (self.stream_destroy)(self.stream);
            (self.release)(self.device);
        }
    }
}
