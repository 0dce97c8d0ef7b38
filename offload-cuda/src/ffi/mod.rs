//! The CUDA driver, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every driver call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! NVRTC, the runtime compiler behind CUDA source programs, is opened the same way
//! ([`nvrtc`]).
//!
//! This module (with [`sys`], the raw table) is the crate's only `unsafe` code. It decides
//! nothing: which failures mean "no CUDA here" is the platform's call (`crate::open`), and
//! how a failure reads as an offload error is `offload_driver::Failure`'s.

pub(crate) mod calls;
pub(crate) mod nvrtc;
pub(crate) mod sys;

use std::ffi::{c_char, c_int};

use offload_driver::{Failure, LoadError, Loaded, static_text, text_of};

pub(crate) use sys::{CUDA_ERROR_NO_DEVICE, CuDevice, CuResult};

/// The library the backend opens: the CUDA driver (never the runtime `libcudart`).
pub(crate) const LIBRARY: &str = "libcuda.so.1";

/// The opened driver library and its entry points (the table kept beside the library
/// guard, so it never outlives the library it points into).
pub(crate) struct Driver {
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

    /// The name the driver was found under.
    pub(crate) fn library(&self) -> &'static str {
        self.functions.library().name()
    }

    /// `cuInit(0)`.
    pub(crate) fn init(&self) -> Result<(), Failure> {
        // SAFETY: cuInit takes its flags by value; 0 is the documented value.
        let code = unsafe { (self.functions.cu_init)(0) };
        self.check("cuInit", code)
    }

    /// `cuDeviceGetCount`.
    pub(crate) fn device_count(&self) -> Result<c_int, Failure> {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid, writable int for the duration of the call.
        let code = unsafe { (self.functions.cu_device_get_count)(&mut count) };
        self.check("cuDeviceGetCount", code).map(|()| count)
    }

    /// `cuDeviceGet`: the handle of device `ordinal`.
    pub(crate) fn device(&self, ordinal: c_int) -> Result<CuDevice, Failure> {
        let mut device: CuDevice = 0;
        // SAFETY: `device` is a valid, writable CUdevice; a bad ordinal is an error code.
        let code = unsafe { (self.functions.cu_device_get)(&mut device, ordinal) };
        self.check("cuDeviceGet", code).map(|()| device)
    }

    /// `cuDeviceGetName`.
    pub(crate) fn device_name(&self, device: CuDevice) -> Result<String, Failure> {
        let mut name: [c_char; 256] = [0; 256];
        let len = c_int::try_from(name.len()).unwrap_or(c_int::MAX);
        // SAFETY: the driver writes at most `len` bytes, its NUL included, into `name`,
        // which has exactly that many.
        let code = unsafe { (self.functions.cu_device_get_name)(name.as_mut_ptr(), len, device) };
        self.check("cuDeviceGetName", code).map(|()| text_of(&name))
    }

    /// `cuDeviceTotalMem_v2`, in bytes.
    pub(crate) fn total_memory(&self, device: CuDevice) -> Result<u64, Failure> {
        let mut bytes: usize = 0;
        // SAFETY: `bytes` is a valid, writable size_t for the duration of the call.
        let code = unsafe { (self.functions.cu_device_total_mem)(&mut bytes, device) };
        self.check("cuDeviceTotalMem_v2", code)
            .map(|()| bytes as u64)
    }

    /// `cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)`.
    pub(crate) fn multiprocessor_count(&self, device: CuDevice) -> Result<c_int, Failure> {
        self.attribute(device, sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    }

    /// `cuDeviceGetAttribute(attribute)`.
    pub(crate) fn attribute(
        &self,
        device: CuDevice,
        attribute: sys::CuDeviceAttribute,
    ) -> Result<c_int, Failure> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid, writable int; an attribute the driver does not know
        // is an error code, never a write elsewhere.
        let code =
            unsafe { (self.functions.cu_device_get_attribute)(&mut value, attribute, device) };
        self.check("cuDeviceGetAttribute", code).map(|()| value)
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
