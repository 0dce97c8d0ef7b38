//! Raw HIP runtime API: the types, constants and entry points offload uses, exactly as
//! `hip/hip_runtime_api.h` declares them (ROCm 5 to 7), gathered in one table of function
//! pointers.
//!
//! The table is filled through a lookup closure (`dlsym` on the real library, or a test's
//! own), in the style of ash's loaders. A required symbol that is missing is an error naming
//! it; an optional one is `None`. Nothing here calls the runtime. Only calls whose arguments
//! are scalars or plain buffers are used: `hipDeviceProp_t` changed layout in ROCm 6
//! (`hipGetDevicePropertiesR0600`), so the name, memory and compute units are read one by
//! one instead.

#[cfg(test)]
use std::ffi::c_void;
use std::ffi::{c_char, c_int, c_uint};

/// `hipError_t`: a C enum, `int`-sized.
pub(crate) type HipError = c_int;
/// `hipDevice_t` (`typedef int hipDevice_t`).
pub(crate) type HipDevice = c_int;
/// `hipDeviceAttribute_t`: a C enum, `int`-sized.
pub(crate) type HipDeviceAttribute = c_int;

/// `hipSuccess`.
pub(crate) const HIP_SUCCESS: HipError = 0;
/// `hipErrorNoDevice`: the runtime found no HIP device.
pub(crate) const HIP_ERROR_NO_DEVICE: HipError = 100;
/// `hipDeviceAttributeMultiprocessorCount`: 63 in the ROCm 5.2 and ROCm 7 headers alike (the
/// enum's CUDA-compatible range keeps its numbering: removed entries became `Unused`).
pub(crate) const HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: HipDeviceAttribute = 63;

/// Names of the `hipError_t` codes the calls here can return, for a runtime without
/// `hipGetErrorName` (every release has it, so this is a fallback only).
pub(crate) const KNOWN_ERRORS: &[(HipError, &str)] = &[
    (0, "hipSuccess"),
    (1, "hipErrorInvalidValue"),
    (2, "hipErrorOutOfMemory"),
    (3, "hipErrorNotInitialized"),
    (4, "hipErrorDeinitialized"),
    (35, "hipErrorInsufficientDriver"),
    (100, "hipErrorNoDevice"),
    (101, "hipErrorInvalidDevice"),
    (304, "hipErrorOperatingSystem"),
    (801, "hipErrorNotSupported"),
    (999, "hipErrorUnknown"),
];

offload_driver::functions! {
    api = "HIP runtime";
    required {
        hip_init = "hipInit": fn(c_uint) -> HipError;
        hip_get_device_count = "hipGetDeviceCount": fn(*mut c_int) -> HipError;
        hip_device_get = "hipDeviceGet": fn(*mut HipDevice, c_int) -> HipError;
        hip_device_get_name = "hipDeviceGetName": fn(*mut c_char, c_int, HipDevice) -> HipError;
        hip_device_total_mem = "hipDeviceTotalMem": fn(*mut usize, HipDevice) -> HipError;
        hip_device_get_attribute =
            "hipDeviceGetAttribute": fn(*mut c_int, HipDeviceAttribute, c_int) -> HipError;
    }
    optional {
        hip_runtime_get_version = "hipRuntimeGetVersion": fn(*mut c_int) -> HipError;
        hip_get_error_name = "hipGetErrorName": fn(HipError) -> *const c_char;
        hip_get_error_string = "hipGetErrorString": fn(HipError) -> *const c_char;
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
                if name == "hipDeviceGetAttribute" {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        assert_eq!(missing.err(), Some("hipDeviceGetAttribute"));
        // SAFETY: nothing is found, so nothing is converted.
        let nothing = unsafe { Functions::load(|_| std::ptr::null()) };
        assert_eq!(nothing.err(), Some("hipInit"));
    }

    #[test]
    fn missing_optional_symbols_are_none() {
        let stub = stub as *const c_void;
        // SAFETY: the table is only inspected for which entries are present, never called.
        let table = unsafe {
            Functions::load(|name| {
                if name.starts_with("hipGetError") {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        let Ok(table) = table else {
            panic!("every required symbol was given");
        };
        assert!(table.hip_get_error_name.is_none());
        assert!(table.hip_get_error_string.is_none());
        assert!(table.hip_runtime_get_version.is_some());
    }
}
