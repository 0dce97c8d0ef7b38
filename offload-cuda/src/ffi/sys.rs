//! Raw CUDA driver API: the types, constants and entry points offload uses, exactly as
//! `cuda.h` declares them, gathered in one table of function pointers.
//!
//! The table is filled through a lookup closure (`dlsym` on the real library, or a test's
//! own), in the style of ash's loaders. A required symbol that is missing is an error naming
//! it; an optional one is `None`. Nothing here calls the driver.

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};

/// `CUresult`: a C enum, `int`-sized.
pub(crate) type CuResult = c_int;
/// `CUdevice`: a device ordinal handle (`typedef int CUdevice_v1`).
pub(crate) type CuDevice = c_int;
/// `CUdevice_attribute`: a C enum, `int`-sized.
pub(crate) type CuDeviceAttribute = c_int;
/// `CUdeviceptr`: a device address (`unsigned long long` on 64-bit hosts).
pub(crate) type CuDevicePtr = u64;
/// `CUcontext`, an opaque handle.
pub(crate) type CuContext = *mut c_void;
/// `CUmodule`, an opaque handle.
pub(crate) type CuModule = *mut c_void;
/// `CUfunction`, an opaque handle.
pub(crate) type CuFunction = *mut c_void;
/// `CUstream`, an opaque handle (null: the legacy default stream, which offload never uses).
pub(crate) type CuStream = *mut c_void;
/// `CUevent`, an opaque handle.
pub(crate) type CuEvent = *mut c_void;
/// `CUjit_option`: a C enum, `int`-sized.
pub(crate) type CuJitOption = c_int;
/// `CUpointer_attribute`: a C enum, `int`-sized.
pub(crate) type CuPointerAttribute = c_int;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value to `cuIpcOpenMemHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CuIpcMemHandle {
    pub(crate) reserved: [u8; 64],
}

/// `CUuuid`: 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CuUuid {
    pub(crate) bytes: [u8; 16],
}

/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
/// `CUDA_ERROR_INVALID_IMAGE`: the driver refused a module image.
pub(crate) const CUDA_ERROR_INVALID_IMAGE: CuResult = 200;
/// `CUDA_ERROR_ALREADY_MAPPED`: an IPC handle is already open in this context.
pub(crate) const CUDA_ERROR_ALREADY_MAPPED: CuResult = 208;
/// `CUDA_ERROR_NO_BINARY_FOR_GPU`.
pub(crate) const CUDA_ERROR_NO_BINARY_FOR_GPU: CuResult = 209;
/// `CUDA_ERROR_INVALID_PTX`.
pub(crate) const CUDA_ERROR_INVALID_PTX: CuResult = 218;
/// `CUDA_ERROR_NOT_FOUND`: a named symbol (a global) that the module does not have.
pub(crate) const CUDA_ERROR_NOT_FOUND: CuResult = 500;
/// `CUDA_ERROR_NOT_READY`: a stream or event query found work still running.
pub(crate) const CUDA_ERROR_NOT_READY: CuResult = 600;

/// `CU_STREAM_NON_BLOCKING`: a stream that does not synchronise with the legacy default
/// stream.
pub(crate) const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DEFAULT`: an event that records timing.
pub(crate) const CU_EVENT_DEFAULT: c_uint = 0;
/// `CU_MEM_ATTACH_GLOBAL`: managed memory any stream may access.
pub(crate) const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub(crate) const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;
/// `CU_JIT_ERROR_LOG_BUFFER`: where the JIT writes its error log.
pub(crate) const CU_JIT_ERROR_LOG_BUFFER: CuJitOption = 5;
/// `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`: that buffer's size (in), the log's length (out).
pub(crate) const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: CuJitOption = 6;
/// `CU_POINTER_ATTRIBUTE_BUFFER_ID`: a process-unique id of the allocation.
pub(crate) const CU_POINTER_ATTRIBUTE_BUFFER_ID: CuPointerAttribute = 7;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` (MINOR is 76).
pub(crate) const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CuDeviceAttribute = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub(crate) const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CuDeviceAttribute = 76;

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
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (218, "CUDA_ERROR_INVALID_PTX"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
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
        cu_device_primary_ctx_retain =
            "cuDevicePrimaryCtxRetain": fn(*mut CuContext, CuDevice) -> CuResult;
        cu_device_primary_ctx_release =
            "cuDevicePrimaryCtxRelease_v2": fn(CuDevice) -> CuResult;
        cu_ctx_set_current = "cuCtxSetCurrent": fn(CuContext) -> CuResult;
        cu_ctx_get_current = "cuCtxGetCurrent": fn(*mut CuContext) -> CuResult;
        cu_mem_alloc = "cuMemAlloc_v2": fn(*mut CuDevicePtr, usize) -> CuResult;
        cu_mem_free = "cuMemFree_v2": fn(CuDevicePtr) -> CuResult;
        cu_mem_alloc_host = "cuMemAllocHost_v2": fn(*mut *mut c_void, usize) -> CuResult;
        cu_mem_free_host = "cuMemFreeHost": fn(*mut c_void) -> CuResult;
        cu_memcpy_htod = "cuMemcpyHtoD_v2": fn(CuDevicePtr, *const c_void, usize) -> CuResult;
        cu_memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
        cu_memcpy_dtod = "cuMemcpyDtoD_v2": fn(CuDevicePtr, CuDevicePtr, usize) -> CuResult;
        cu_memcpy_htod_async = "cuMemcpyHtoDAsync_v2":
            fn(CuDevicePtr, *const c_void, usize, CuStream) -> CuResult;
        cu_memcpy_dtod_async = "cuMemcpyDtoDAsync_v2":
            fn(CuDevicePtr, CuDevicePtr, usize, CuStream) -> CuResult;
        cu_memset_d8 = "cuMemsetD8_v2": fn(CuDevicePtr, u8, usize) -> CuResult;
        cu_memset_d8_async = "cuMemsetD8Async": fn(CuDevicePtr, u8, usize, CuStream) -> CuResult;
        cu_memset_d16_async =
            "cuMemsetD16Async": fn(CuDevicePtr, u16, usize, CuStream) -> CuResult;
        cu_memset_d32_async =
            "cuMemsetD32Async": fn(CuDevicePtr, u32, usize, CuStream) -> CuResult;
        cu_stream_create = "cuStreamCreate": fn(*mut CuStream, c_uint) -> CuResult;
        cu_stream_destroy = "cuStreamDestroy_v2": fn(CuStream) -> CuResult;
        cu_stream_synchronize = "cuStreamSynchronize": fn(CuStream) -> CuResult;
        cu_stream_query = "cuStreamQuery": fn(CuStream) -> CuResult;
        cu_stream_wait_event = "cuStreamWaitEvent": fn(CuStream, CuEvent, c_uint) -> CuResult;
        cu_event_create = "cuEventCreate": fn(*mut CuEvent, c_uint) -> CuResult;
        cu_event_record = "cuEventRecord": fn(CuEvent, CuStream) -> CuResult;
        cu_event_synchronize = "cuEventSynchronize": fn(CuEvent) -> CuResult;
        cu_event_query = "cuEventQuery": fn(CuEvent) -> CuResult;
        cu_event_elapsed_time =
            "cuEventElapsedTime": fn(*mut c_float, CuEvent, CuEvent) -> CuResult;
        cu_event_destroy = "cuEventDestroy_v2": fn(CuEvent) -> CuResult;
        cu_module_load_data_ex = "cuModuleLoadDataEx": fn(
            *mut CuModule,
            *const c_void,
            c_uint,
            *mut CuJitOption,
            *mut *mut c_void
        ) -> CuResult;
        cu_module_unload = "cuModuleUnload": fn(CuModule) -> CuResult;
        cu_module_get_function =
            "cuModuleGetFunction": fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
        cu_module_get_global = "cuModuleGetGlobal_v2":
            fn(*mut CuDevicePtr, *mut usize, CuModule, *const c_char) -> CuResult;
        cu_launch_kernel = "cuLaunchKernel": fn(
            CuFunction,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            CuStream,
            *mut *mut c_void,
            *mut *mut c_void
        ) -> CuResult;
        cu_pointer_get_attribute = "cuPointerGetAttribute":
            fn(*mut c_void, CuPointerAttribute, CuDevicePtr) -> CuResult;
    }
    optional {
        cu_mem_alloc_managed =
            "cuMemAllocManaged": fn(*mut CuDevicePtr, usize, c_uint) -> CuResult;
        cu_device_get_uuid = "cuDeviceGetUuid": fn(*mut CuUuid, CuDevice) -> CuResult;
        cu_ipc_get_mem_handle =
            "cuIpcGetMemHandle": fn(*mut CuIpcMemHandle, CuDevicePtr) -> CuResult;
        cu_ipc_open_mem_handle = "cuIpcOpenMemHandle_v2":
            fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult;
        cu_ipc_close_mem_handle = "cuIpcCloseMemHandle": fn(CuDevicePtr) -> CuResult;
        cu_driver_get_version = "cuDriverGetVersion": fn(*mut c_int) -> CuResult;
        cu_get_error_name = "cuGetErrorName": fn(CuResult, *mut *const c_char) -> CuResult;
        cu_get_error_string = "cuGetErrorString": fn(CuResult, *mut *const c_char) -> CuResult;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_symbols_are_named_or_none() {
        let probe = |t: &super::Functions| {
            t.cu_get_error_name.is_none()
                && t.cu_get_error_string.is_none()
                && t.cu_driver_get_version.is_some()
        };
        // SAFETY: the tables are only inspected, never called.
        let checked = unsafe {
            offload_driver::check_symbol_table("cuDeviceTotalMem_v2", "cuInit", "cuGetError", probe)
        };
        assert_eq!(checked, Ok(()));
    }
}
