//! Raw HIP runtime API: the types, constants and entry points offload uses, exactly as
//! `hip/hip_runtime_api.h` declares them (ROCm 5 to 7), gathered in one table of function
//! pointers.
//!
//! The table is filled through a lookup closure (`dlsym` on the real library, or a test's
//! own), in the style of ash's loaders. A required symbol that is missing is an error naming
//! it; an optional one is `None`. Nothing here calls the runtime. No call takes a struct
//! whose layout changed between releases: `hipDeviceProp_t` did in ROCm 6
//! (`hipGetDevicePropertiesR0600`), so the device's properties are read one by one
//! (`hipDeviceGetName`, `hipDeviceTotalMem`, `hipDeviceGetAttribute`); the attribute
//! numbers below are the same in ROCm 5.2 to 7. Every required entry point is in ROCm 5.2
//! (tests/probe.rs opens Debian's); `hipMallocManaged` and `hipLaunchHostFunc` are optional.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `hipError_t`: a C enum, `int`-sized.
pub(crate) type HipError = c_int;
/// `hipStream_t`: an opaque pointer.
pub(crate) type HipStream = *mut c_void;
/// `hipEvent_t`: an opaque pointer.
pub(crate) type HipEvent = *mut c_void;
/// `hipModule_t`: an opaque pointer.
pub(crate) type HipModule = *mut c_void;
/// `hipFunction_t`: an opaque pointer.
pub(crate) type HipFunction = *mut c_void;
/// `hipIpcMemHandle_t`: 64 opaque bytes, passed by value to `hipIpcOpenMemHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HipIpcMemHandle {
    pub(crate) reserved: [u8; 64],
}
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

/// `hipErrorOutOfMemory` (`hipErrorMemoryAllocation`).
pub(crate) const HIP_ERROR_OUT_OF_MEMORY: HipError = 2;

/// `hipDeviceAttributeClockRate` (kHz). The numbers below are the positions in ROCm 5.2's
/// to ROCm 7's `hipDeviceAttribute_t` (the CUDA-compatible range, counted from 0).
pub(crate) const HIP_DEVICE_ATTRIBUTE_CLOCK_RATE: HipDeviceAttribute = 5;
/// `hipDeviceAttributeMaxBlockDimX` (Y and Z follow).
pub(crate) const HIP_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: HipDeviceAttribute = 26;
/// `hipDeviceAttributeMaxGridDimX` (Y and Z follow).
pub(crate) const HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: HipDeviceAttribute = 29;
/// `hipDeviceAttributeMaxThreadsPerBlock`.
pub(crate) const HIP_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: HipDeviceAttribute = 56;
/// `hipDeviceAttributeMaxSharedMemoryPerBlock`.
pub(crate) const HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: HipDeviceAttribute = 74;

/// `hipErrorInvalidImage`: the runtime refused a code object.
pub(crate) const HIP_ERROR_INVALID_IMAGE: HipError = 200;
/// `hipErrorNoBinaryForGpu`: no code object for the device's architecture.
pub(crate) const HIP_ERROR_NO_BINARY_FOR_GPU: HipError = 209;
/// `hipErrorNotFound`: no such symbol.
pub(crate) const HIP_ERROR_NOT_FOUND: HipError = 500;
/// `hipErrorNotReady`: a stream or event query found work still pending.
pub(crate) const HIP_ERROR_NOT_READY: HipError = 600;
/// `hipIpcMemLazyEnablePeerAccess`.
pub(crate) const HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;
/// `hipStreamNonBlocking`: the stream does not wait for the null stream.
pub(crate) const HIP_STREAM_NON_BLOCKING: c_uint = 1;

/// `hipMemcpyKind`: `hipMemcpyHostToDevice`.
pub(crate) const HIP_MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// `hipMemcpyDeviceToHost`.
pub(crate) const HIP_MEMCPY_DEVICE_TO_HOST: c_int = 2;
/// `hipMemcpyDeviceToDevice`.
pub(crate) const HIP_MEMCPY_DEVICE_TO_DEVICE: c_int = 3;
/// `hipHostMallocDefault`.
pub(crate) const HIP_HOST_MALLOC_DEFAULT: c_uint = 0;
/// `hipMemAttachGlobal`.
pub(crate) const HIP_MEM_ATTACH_GLOBAL: c_uint = 1;

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
        hip_set_device = "hipSetDevice": fn(c_int) -> HipError;
        hip_malloc = "hipMalloc": fn(*mut *mut c_void, usize) -> HipError;
        hip_free = "hipFree": fn(*mut c_void) -> HipError;
        hip_host_malloc = "hipHostMalloc": fn(*mut *mut c_void, usize, c_uint) -> HipError;
        hip_host_free = "hipHostFree": fn(*mut c_void) -> HipError;
        hip_memcpy = "hipMemcpy": fn(*mut c_void, *const c_void, usize, c_int) -> HipError;
        hip_memset = "hipMemset": fn(*mut c_void, c_int, usize) -> HipError;
        hip_stream_create_with_flags =
            "hipStreamCreateWithFlags": fn(*mut HipStream, c_uint) -> HipError;
        hip_stream_destroy = "hipStreamDestroy": fn(HipStream) -> HipError;
        hip_stream_synchronize = "hipStreamSynchronize": fn(HipStream) -> HipError;
        hip_stream_query = "hipStreamQuery": fn(HipStream) -> HipError;
        hip_stream_wait_event = "hipStreamWaitEvent": fn(HipStream, HipEvent, c_uint) -> HipError;
        hip_memcpy_async = "hipMemcpyAsync":
            fn(*mut c_void, *const c_void, usize, c_int, HipStream) -> HipError;
        hip_memset_async = "hipMemsetAsync": fn(*mut c_void, c_int, usize, HipStream) -> HipError;
        hip_memset_d16_async =
            "hipMemsetD16Async": fn(*mut c_void, u16, usize, HipStream) -> HipError;
        hip_memset_d32_async =
            "hipMemsetD32Async": fn(*mut c_void, c_int, usize, HipStream) -> HipError;
        hip_event_create = "hipEventCreate": fn(*mut HipEvent) -> HipError;
        hip_event_record = "hipEventRecord": fn(HipEvent, HipStream) -> HipError;
        hip_event_synchronize = "hipEventSynchronize": fn(HipEvent) -> HipError;
        hip_event_query = "hipEventQuery": fn(HipEvent) -> HipError;
        hip_event_elapsed_time =
            "hipEventElapsedTime": fn(*mut f32, HipEvent, HipEvent) -> HipError;
        hip_event_destroy = "hipEventDestroy": fn(HipEvent) -> HipError;
        hip_module_load_data = "hipModuleLoadData": fn(*mut HipModule, *const c_void) -> HipError;
        hip_module_unload = "hipModuleUnload": fn(HipModule) -> HipError;
        hip_module_get_function =
            "hipModuleGetFunction": fn(*mut HipFunction, HipModule, *const c_char) -> HipError;
        hip_module_get_global = "hipModuleGetGlobal":
            fn(*mut *mut c_void, *mut usize, HipModule, *const c_char) -> HipError;
        hip_module_launch_kernel = "hipModuleLaunchKernel": fn(
            HipFunction,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            HipStream,
            *mut *mut c_void,
            *mut *mut c_void
        ) -> HipError;
    }
    optional {
        hip_runtime_get_version = "hipRuntimeGetVersion": fn(*mut c_int) -> HipError;
        hip_get_error_name = "hipGetErrorName": fn(HipError) -> *const c_char;
        hip_get_error_string = "hipGetErrorString": fn(HipError) -> *const c_char;
        hip_malloc_managed = "hipMallocManaged": fn(*mut *mut c_void, usize, c_uint) -> HipError;
        hip_ipc_get_mem_handle =
            "hipIpcGetMemHandle": fn(*mut HipIpcMemHandle, *mut c_void) -> HipError;
        hip_ipc_open_mem_handle =
            "hipIpcOpenMemHandle": fn(*mut *mut c_void, HipIpcMemHandle, c_uint) -> HipError;
        hip_ipc_close_mem_handle = "hipIpcCloseMemHandle": fn(*mut c_void) -> HipError;
        hip_device_get_uuid = "hipDeviceGetUuid": fn(*mut [u8; 16], HipDevice) -> HipError;
        hip_mem_get_address_range =
            "hipMemGetAddressRange": fn(*mut *mut c_void, *mut usize, *mut c_void) -> HipError;
        // Only for `gcnArchName` (see Driver::device_arch): the struct's layout is ROCm 5's.
        hip_get_device_properties = "hipGetDeviceProperties": fn(*mut u8, c_int) -> HipError;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_symbols_are_named_or_none() {
        let probe = |t: &super::Functions| {
            t.hip_get_error_name.is_none()
                && t.hip_get_error_string.is_none()
                && t.hip_runtime_get_version.is_some()
        };
        // SAFETY: the tables are only inspected, never called.
        let checked = unsafe {
            offload_driver::check_symbol_table(
                "hipDeviceGetAttribute",
                "hipInit",
                "hipGetError",
                probe,
            )
        };
        assert_eq!(checked, Ok(()));
    }
}
