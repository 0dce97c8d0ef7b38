//! Raw CUDA driver API: the types, constants and entry points offload uses, exactly as
//! `cuda.h` declares them, gathered in one table of function pointers.
//!
//! The table is filled through a lookup closure (`dlsym` on the real library, or a test's
//! own), in the style of ash's loaders. A required symbol that is missing is an error naming
//! it; an optional one is `None`. Nothing here calls the driver.

#[cfg(test)]
use std::ffi::c_void;
use std::ffi::{c_char, c_int, c_uint};

/// `CUresult`: a C enum, `int`-sized.
pub(crate) type CuResult = c_int;
/// `CUdevice`: a device ordinal handle (`typedef int CUdevice_v1`).
pub(crate) type CuDevice = c_int;
/// `CUdevice_attribute`: a C enum, `int`-sized.
pub(crate) type CuDeviceAttribute = c_int;

/// `CUDA_SUCCESS`.
pub(crate) const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_NO_DEVICE`: the driver found no CUDA-capable device.
pub(crate) const CUDA_ERROR_NO_DEVICE: CuResult = 100;
/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub(crate) const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CuDeviceAttribute = 16;
/// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CuDeviceAttribute = 1;
/// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X` (Y and Z follow: 3, 4).
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: CuDeviceAttribute = 2;
/// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X` (Y and Z follow: 6, 7).
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: CuDeviceAttribute = 5;
/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK`, in bytes.
pub(crate) const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: CuDeviceAttribute = 8;
/// `CU_DEVICE_ATTRIBUTE_CLOCK_RATE`, in kHz.
pub(crate) const CU_DEVICE_ATTRIBUTE_CLOCK_RATE: CuDeviceAttribute = 13;

/// Names of the `CUresult` codes the calls here can return, for drivers without
/// `cuGetErrorName` (it exists since CUDA 6.0, so this is a fallback only).
pub(crate) const KNOWN_RESULTS: &[(CuResult, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (35, "CUDA_ERROR_INSUFFICIENT_DRIVER"),
    (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

offload_driver::functions! {
    api = "CUDA driver";
    required {
        cu_init = "cuInit": fn(c_uint) -> CuResult;
        cu_device_get_count = "cuDeviceGetCount": fn(*mut c_int) -> CuResult;
        cu_device_get = "cuDeviceGet": fn(*mut CuDevice, c_int) -> CuResult;
        cu_device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CuDevice) -> CuResult;
        cu_device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CuDevice) -> CuResult;
        cu_device_get_attribute =
            "cuDeviceGetAttribute": fn(*mut c_int, CuDeviceAttribute, CuDevice) -> CuResult;
    }
    optional {
        cu_driver_get_version = "cuDriverGetVersion": fn(*mut c_int) -> CuResult;
        cu_get_error_name = "cuGetErrorName": fn(CuResult, *mut *const c_char) -> CuResult;
        cu_get_error_string = "cuGetErrorString": fn(CuResult, *mut *const c_char) -> CuResult;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stands in for every entry point in the tests below; never called.
    extern "C" fn stub() {}

    #[test]
    fn a_missing_required_symbol_is_named() {
        let stub = stub as *const c_void;
        // SAFETY: the table is only inspected for which symbol failed, never called.
        let missing = unsafe {
            Functions::load(|name| {
                if name == "cuDeviceTotalMem_v2" {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        assert_eq!(missing.err(), Some("cuDeviceTotalMem_v2"));
        // SAFETY: nothing is found, so nothing is converted.
        let nothing = unsafe { Functions::load(|_| std::ptr::null()) };
        assert_eq!(nothing.err(), Some("cuInit"));
    }

    #[test]
    fn missing_optional_symbols_are_none() {
        let stub = stub as *const c_void;
        // SAFETY: the table is only inspected for which entries are present, never called.
        let table = unsafe {
            Functions::load(|name| {
                if name.starts_with("cuGetError") {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        let Ok(table) = table else {
            panic!("every required symbol was given");
        };
        assert!(table.cu_get_error_name.is_none());
        assert!(table.cu_get_error_string.is_none());
        assert!(table.cu_driver_get_version.is_some());
    }
}
