//! The CUDA driver, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every driver call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! NVRTC, the runtime compiler behind CUDA source programs, is opened the same way
//! ([`nvrtc`]).
//!
//! This module (with [`sys`], the raw table) is the crate's FFI: every call into the
//! driver, most of them generated from tables by offload-driver's `device_calls!` and
//! `stream_api_calls!`, and the `unsafe impl` of `offload_driver::StreamApi` ([`calls`]);
//! the crate's only other `unsafe` code is context.rs's (a context handle's `Send`/`Sync`,
//! the device record that releases it). It decides nothing: which failures mean "no CUDA
//! here" is the platform's call (`crate::platform::open`), and how a failure reads as an
//! offload error is `offload_driver::Failure`'s.

pub(crate) mod calls;
pub(crate) mod nvrtc;
pub(crate) mod sys;

use std::ffi::{c_char, c_int};

use offload_driver::{Failure, LoadError, Loaded, static_text};

pub(crate) use sys::{CUDA_ERROR_NO_DEVICE, CuDevice, CuResult};

/// The library the backend opens: the CUDA driver (never the runtime `libcudart`).
pub(crate) const LIBRARY: &str = "libcuda.so.1";

/// The CUDA driver API, opened: the library and its entry points (the table kept beside
/// the library guard, so it never outlives the library it points into). It is the
/// `offload_driver::StreamApi` the generic backend calls ([`CudaPlatform`](crate::CudaPlatform)
/// is `StreamPlatform<CudaApi>`); only the platform opens it.
///
/// ```
/// use offload_driver::StreamApi;
/// assert_eq!(<offload_cuda::CudaApi as StreamApi>::WORDS.title, "CUDA");
/// ```
pub struct Driver {
    functions: Loaded<sys::Functions>,
}

impl Driver {
    /// Opens [`LIBRARY`] and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        // SAFETY: dlopen runs the driver's initialisers, which only set up its own state and
        // are sound to run at any time (it stays mapped: `RTLD_NODELETE`, as after cuInit
        // its own threads run its code). Every address comes from libcuda for a name `sys`
        // declares with the signature `cuda.h` gives it.
        let functions = unsafe { Loaded::open(&[LIBRARY]) }?;
        Ok(Driver { functions })
    }

    offload_driver::device_calls! {
        device: CuDevice, attribute: sys::CuDeviceAttribute,
        multiprocessors: sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        init: cu_init "cuInit";
        device_count: cu_device_get_count "cuDeviceGetCount";
        device: cu_device_get "cuDeviceGet";
        device_name: cu_device_get_name "cuDeviceGetName";
        total_memory: cu_device_total_mem "cuDeviceTotalMem_v2";
        attribute: cu_device_get_attribute "cuDeviceGetAttribute";
    }

    /// `cuDriverGetVersion` (`1000 × major + 10 × minor`), where the driver has it.
    pub(crate) fn driver_version(&self) -> Option<c_int> {
        let get = self.functions.cu_driver_get_version?;
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid, writable int; the call needs no cuInit.
        let code = unsafe { get(&mut version) };
        (code == sys::CUDA_SUCCESS).then_some(version)
    }

    /// `Ok` for `CUDA_SUCCESS`, else the failure with the driver's names for `code`.
    fn check(&self, function: &'static str, code: CuResult) -> Result<(), Failure> {
        if code == sys::CUDA_SUCCESS {
            return Ok(());
        }
        let name = result_text(self.functions.cu_get_error_name, code)
            .or_else(|| {
                sys::KNOWN_RESULTS
                    .iter()
                    .find(|(known, _)| *known == code)
                    .map(|(_, name)| (*name).to_string())
            })
            .unwrap_or_else(|| "unknown CUresult".into());
        Err(Failure::new(function, code, name)
            .with_description(result_text(self.functions.cu_get_error_string, code)))
    }
}

/// `cuGetErrorName` / `cuGetErrorString` for `code`, where the driver has them and knows it.
fn result_text(
    get: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    code: CuResult,
) -> Option<String> {
    let get = get?;
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: `text` is a valid out-pointer; the call needs no cuInit.
    let status = unsafe { get(code, &mut text) };
    if status != sys::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: on success the driver points `text` at a static NUL-terminated string.
    unsafe { static_text(text) }
}
