//! Raw Level Zero API: the types, structures, constants and entry points offload uses,
//! exactly as `level_zero/ze_api.h` (1.x) declares them, gathered in one table of function
//! pointers.
//!
//! The table is filled through a lookup closure (`dlsym` on the loader, or a test's own), in
//! the style of ash's loaders. A required symbol that is missing is an error naming it; an
//! optional one is `None`. Nothing here calls the loader. The structures are the
//! specification's own (extended only through `pNext`, which offload leaves null), and the
//! layout of those the driver writes is checked against the header's at compile time.

use std::ffi::{c_char, c_void};

/// `ze_result_t`: a C enum of 32-bit values.
pub(crate) type ZeResult = u32;
/// `ze_driver_handle_t`: an opaque handle.
pub(crate) type ZeDriverHandle = *mut c_void;
/// `ze_device_handle_t`: an opaque handle.
pub(crate) type ZeDeviceHandle = *mut c_void;
/// `ze_api_version_t`: `major << 16 | minor`.
pub(crate) type ZeApiVersion = u32;
/// `ze_context_handle_t`.
pub(crate) type ZeContext = *mut c_void;
/// `ze_command_list_handle_t`.
pub(crate) type ZeCommandList = *mut c_void;
/// `ze_event_pool_handle_t`.
pub(crate) type ZeEventPool = *mut c_void;
/// `ze_event_handle_t`.
pub(crate) type ZeEvent = *mut c_void;
/// `ze_module_handle_t`.
pub(crate) type ZeModule = *mut c_void;
/// `ze_module_build_log_handle_t`.
pub(crate) type ZeBuildLog = *mut c_void;
/// `ze_kernel_handle_t`.
pub(crate) type ZeKernel = *mut c_void;

/// `ZE_RESULT_SUCCESS`.
pub(crate) const ZE_RESULT_SUCCESS: ZeResult = 0;
/// `ZE_RESULT_ERROR_UNINITIALIZED`: what the loader's `zeInit` answers when no driver
/// could be initialised.
pub(crate) const ZE_RESULT_ERROR_UNINITIALIZED: ZeResult = 0x7800_0001;
/// `ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES`.
pub(crate) const ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES: u32 = 0x3;
/// `ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES`.
pub(crate) const ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES: u32 = 0x7;
/// `ZE_RESULT_NOT_READY`.
pub(crate) const ZE_RESULT_NOT_READY: ZeResult = 1;
/// `ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY`.
pub(crate) const ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY: ZeResult = 0x7000_0002;
/// `ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY`.
pub(crate) const ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY: ZeResult = 0x7000_0003;
/// `ZE_RESULT_ERROR_MODULE_BUILD_FAILURE`.
pub(crate) const ZE_RESULT_ERROR_MODULE_BUILD_FAILURE: ZeResult = 0x7000_0004;
/// `ZE_RESULT_ERROR_INVALID_NATIVE_BINARY`.
pub(crate) const ZE_RESULT_ERROR_INVALID_NATIVE_BINARY: ZeResult = 0x7800_000f;
/// `ZE_RESULT_ERROR_INVALID_GLOBAL_NAME`.
pub(crate) const ZE_RESULT_ERROR_INVALID_GLOBAL_NAME: ZeResult = 0x7800_0010;
/// `ZE_RESULT_ERROR_INVALID_KERNEL_NAME`.
pub(crate) const ZE_RESULT_ERROR_INVALID_KERNEL_NAME: ZeResult = 0x7800_0011;
/// `ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES`.
pub(crate) const ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES: u32 = 0x4;
/// `ZE_STRUCTURE_TYPE_CONTEXT_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_CONTEXT_DESC: u32 = 0xd;
/// `ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC: u32 = 0xe;
/// `ZE_STRUCTURE_TYPE_EVENT_POOL_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_EVENT_POOL_DESC: u32 = 0x10;
/// `ZE_STRUCTURE_TYPE_EVENT_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_EVENT_DESC: u32 = 0x11;
/// `ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC: u32 = 0x15;
/// `ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC: u32 = 0x16;
/// `ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES`.
pub(crate) const ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES: u32 = 0x17;
/// `ZE_STRUCTURE_TYPE_MODULE_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_MODULE_DESC: u32 = 0x1b;
/// `ZE_STRUCTURE_TYPE_KERNEL_DESC`.
pub(crate) const ZE_STRUCTURE_TYPE_KERNEL_DESC: u32 = 0x1d;
/// `ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS`.
pub(crate) const ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS: u32 = 1;
/// `ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS`.
pub(crate) const ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS: u32 = 2;
/// `ZE_EVENT_POOL_FLAG_HOST_VISIBLE`.
pub(crate) const ZE_EVENT_POOL_FLAG_HOST_VISIBLE: u32 = 0x1;
/// `ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP`.
pub(crate) const ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP: u32 = 0x4;
/// `ZE_EVENT_SCOPE_FLAG_HOST`.
pub(crate) const ZE_EVENT_SCOPE_FLAG_HOST: u32 = 0x4;
/// `ZE_MODULE_FORMAT_IL_SPIRV`.
pub(crate) const ZE_MODULE_FORMAT_IL_SPIRV: u32 = 0;
/// `ZE_MODULE_FORMAT_NATIVE`.
pub(crate) const ZE_MODULE_FORMAT_NATIVE: u32 = 1;
/// `ZE_MAX_IPC_HANDLE_SIZE`.
pub(crate) const ZE_MAX_IPC_HANDLE_SIZE: usize = 64;
/// `ZE_MAX_DEVICE_NAME`.
pub(crate) const ZE_MAX_DEVICE_NAME: usize = 256;

/// The names of every `ze_result_t` of the 1.x specification (Level Zero has no call that
/// names a code without a driver).
pub(crate) const RESULTS: &[(ZeResult, &str)] = &[
    (0, "ZE_RESULT_SUCCESS"),
    (1, "ZE_RESULT_NOT_READY"),
    (0x7000_0001, "ZE_RESULT_ERROR_DEVICE_LOST"),
    (0x7000_0002, "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY"),
    (0x7000_0003, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"),
    (0x7000_0004, "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE"),
    (0x7000_0005, "ZE_RESULT_ERROR_MODULE_LINK_FAILURE"),
    (0x7000_0006, "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET"),
    (0x7000_0007, "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE"),
    (0x7001_0000, "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS"),
    (0x7001_0001, "ZE_RESULT_ERROR_NOT_AVAILABLE"),
    (0x7002_0000, "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE"),
    (0x7002_0001, "ZE_RESULT_WARNING_DROPPED_DATA"),
    (0x7800_0001, "ZE_RESULT_ERROR_UNINITIALIZED"),
    (0x7800_0002, "ZE_RESULT_ERROR_UNSUPPORTED_VERSION"),
    (0x7800_0003, "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"),
    (0x7800_0004, "ZE_RESULT_ERROR_INVALID_ARGUMENT"),
    (0x7800_0005, "ZE_RESULT_ERROR_INVALID_NULL_HANDLE"),
    (0x7800_0006, "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE"),
    (0x7800_0007, "ZE_RESULT_ERROR_INVALID_NULL_POINTER"),
    (0x7800_0008, "ZE_RESULT_ERROR_INVALID_SIZE"),
    (0x7800_0009, "ZE_RESULT_ERROR_UNSUPPORTED_SIZE"),
    (0x7800_000a, "ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT"),
    (
        0x7800_000b,
        "ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT",
    ),
    (0x7800_000c, "ZE_RESULT_ERROR_INVALID_ENUMERATION"),
    (0x7800_000d, "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION"),
    (0x7800_000e, "ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT"),
    (0x7800_000f, "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY"),
    (0x7800_0010, "ZE_RESULT_ERROR_INVALID_GLOBAL_NAME"),
    (0x7800_0011, "ZE_RESULT_ERROR_INVALID_KERNEL_NAME"),
    (0x7800_0012, "ZE_RESULT_ERROR_INVALID_FUNCTION_NAME"),
    (0x7800_0013, "ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION"),
    (
        0x7800_0014,
        "ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION",
    ),
    (0x7800_0015, "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX"),
    (0x7800_0016, "ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE"),
    (
        0x7800_0017,
        "ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE",
    ),
    (0x7800_0018, "ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED"),
    (0x7800_0019, "ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE"),
    (0x7800_001a, "ZE_RESULT_ERROR_OVERLAPPING_REGIONS"),
    (0x7800_001b, "ZE_RESULT_WARNING_ACTION_REQUIRED"),
    (0x7fff_fffe, "ZE_RESULT_ERROR_UNKNOWN"),
];

/// `ze_device_properties_t` (stype `ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES`). Every field of
/// the specification's structure is here, read or not: the driver writes them all.
#[repr(C)]
#[allow(dead_code)]
#[derive(Clone, Copy)]
pub(crate) struct DeviceProperties {
    pub(crate) stype: u32,
    pub(crate) p_next: *mut c_void,
    pub(crate) device_type: u32,
    pub(crate) vendor_id: u32,
    pub(crate) device_id: u32,
    pub(crate) flags: u32,
    pub(crate) subdevice_id: u32,
    pub(crate) core_clock_rate: u32,
    pub(crate) max_mem_alloc_size: u64,
    pub(crate) max_hardware_contexts: u32,
    pub(crate) max_command_queue_priority: u32,
    pub(crate) num_threads_per_eu: u32,
    pub(crate) physical_eu_simd_width: u32,
    pub(crate) num_eus_per_subslice: u32,
    pub(crate) num_subslices_per_slice: u32,
    pub(crate) num_slices: u32,
    pub(crate) timer_resolution: u64,
    pub(crate) timestamp_valid_bits: u32,
    pub(crate) kernel_timestamp_valid_bits: u32,
    pub(crate) uuid: [u8; 16],
    pub(crate) name: [c_char; ZE_MAX_DEVICE_NAME],
}

impl DeviceProperties {
    /// An empty structure, ready for `zeDeviceGetProperties`.
    pub(crate) fn new() -> Self {
        DeviceProperties {
            stype: ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES,
            p_next: std::ptr::null_mut(),
            device_type: 0,
            vendor_id: 0,
            device_id: 0,
            flags: 0,
            subdevice_id: 0,
            core_clock_rate: 0,
            max_mem_alloc_size: 0,
            max_hardware_contexts: 0,
            max_command_queue_priority: 0,
            num_threads_per_eu: 0,
            physical_eu_simd_width: 0,
            num_eus_per_subslice: 0,
            num_subslices_per_slice: 0,
            num_slices: 0,
            timer_resolution: 0,
            timestamp_valid_bits: 0,
            kernel_timestamp_valid_bits: 0,
            uuid: [0; 16],
            name: [0; ZE_MAX_DEVICE_NAME],
        }
    }
}

/// `ze_device_memory_properties_t` (stype `ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES`).
/// Every field of the specification's structure is here, read or not.
#[repr(C)]
#[allow(dead_code)]
#[derive(Clone, Copy)]
pub(crate) struct DeviceMemoryProperties {
    pub(crate) stype: u32,
    pub(crate) p_next: *mut c_void,
    pub(crate) flags: u32,
    pub(crate) max_clock_rate: u32,
    pub(crate) max_bus_width: u32,
    pub(crate) total_size: u64,
    pub(crate) name: [c_char; ZE_MAX_DEVICE_NAME],
}

impl DeviceMemoryProperties {
    /// An empty structure, ready for `zeDeviceGetMemoryProperties`.
    pub(crate) fn new() -> Self {
        DeviceMemoryProperties {
            stype: ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES,
            p_next: std::ptr::null_mut(),
            flags: 0,
            max_clock_rate: 0,
            max_bus_width: 0,
            total_size: 0,
            name: [0; ZE_MAX_DEVICE_NAME],
        }
    }
}

/// `ze_device_compute_properties_t` (stype `ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceComputeProperties {
    pub(crate) stype: u32,
    pub(crate) p_next: *mut c_void,
    pub(crate) max_total_group_size: u32,
    pub(crate) max_group_size: [u32; 3],
    pub(crate) max_group_count: [u32; 3],
    pub(crate) max_shared_local_memory: u32,
    pub(crate) num_sub_group_sizes: u32,
    pub(crate) sub_group_sizes: [u32; 8],
}

impl DeviceComputeProperties {
    /// An empty structure, ready for `zeDeviceGetComputeProperties`.
    pub(crate) fn new() -> Self {
        DeviceComputeProperties {
            stype: ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES,
            p_next: std::ptr::null_mut(),
            max_total_group_size: 0,
            max_group_size: [0; 3],
            max_group_count: [0; 3],
            max_shared_local_memory: 0,
            num_sub_group_sizes: 0,
            sub_group_sizes: [0; 8],
        }
    }
}

/// `ze_context_desc_t`.
#[repr(C)]
pub(crate) struct ContextDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) flags: u32,
}

/// `ze_device_mem_alloc_desc_t`.
#[repr(C)]
pub(crate) struct DeviceMemAllocDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) flags: u32,
    pub(crate) ordinal: u32,
}

/// `ze_host_mem_alloc_desc_t`.
#[repr(C)]
pub(crate) struct HostMemAllocDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) flags: u32,
}

/// `ze_memory_allocation_properties_t` (written by the driver).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoryAllocationProperties {
    pub(crate) stype: u32,
    pub(crate) p_next: *mut c_void,
    pub(crate) memory_type: u32,
    pub(crate) id: u64,
    pub(crate) page_size: u64,
}

/// `ze_command_queue_desc_t` (an immediate command list's `altdesc`).
#[repr(C)]
pub(crate) struct CommandQueueDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) ordinal: u32,
    pub(crate) index: u32,
    pub(crate) flags: u32,
    pub(crate) mode: u32,
    pub(crate) priority: u32,
}

/// `ze_event_pool_desc_t`.
#[repr(C)]
pub(crate) struct EventPoolDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) flags: u32,
    pub(crate) count: u32,
}

/// `ze_event_desc_t`.
#[repr(C)]
pub(crate) struct EventDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) index: u32,
    pub(crate) signal: u32,
    pub(crate) wait: u32,
}

/// `ze_kernel_timestamp_result_t`: `global` and `context` (start, end) ticks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KernelTimestampResult {
    pub(crate) global: [u64; 2],
    pub(crate) context: [u64; 2],
}

/// `ze_module_desc_t`.
#[repr(C)]
pub(crate) struct ModuleDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) format: u32,
    pub(crate) input_size: usize,
    pub(crate) input: *const u8,
    pub(crate) build_flags: *const c_char,
    pub(crate) constants: *const c_void,
}

/// `ze_kernel_desc_t`.
#[repr(C)]
pub(crate) struct KernelDesc {
    pub(crate) stype: u32,
    pub(crate) p_next: *const c_void,
    pub(crate) flags: u32,
    pub(crate) name: *const c_char,
}

/// `ze_group_count_t`.
#[repr(C)]
pub(crate) struct GroupCount {
    pub(crate) x: u32,
    pub(crate) y: u32,
    pub(crate) z: u32,
}

/// `ze_ipc_mem_handle_t`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct IpcMemHandle {
    pub(crate) data: [u8; ZE_MAX_IPC_HANDLE_SIZE],
}

// The layout `ze_api.h` 1.8 gives on 64-bit Linux (measured with offsetof): the driver
// writes these structures, so a mismatch would be memory corruption, not a wrong value.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<DeviceProperties>() == 368);
    assert!(offset_of!(DeviceProperties, device_type) == 16);
    assert!(offset_of!(DeviceProperties, max_mem_alloc_size) == 40);
    assert!(offset_of!(DeviceProperties, num_slices) == 72);
    assert!(offset_of!(DeviceProperties, timer_resolution) == 80);
    assert!(offset_of!(DeviceProperties, uuid) == 96);
    assert!(offset_of!(DeviceProperties, name) == 112);
    assert!(size_of::<DeviceMemoryProperties>() == 296);
    assert!(offset_of!(DeviceMemoryProperties, total_size) == 32);
    assert!(offset_of!(DeviceMemoryProperties, name) == 40);
    assert!(size_of::<DeviceComputeProperties>() == 88);
    assert!(offset_of!(DeviceComputeProperties, max_shared_local_memory) == 44);
    assert!(size_of::<MemoryAllocationProperties>() == 40);
    assert!(offset_of!(MemoryAllocationProperties, id) == 24);
    assert!(size_of::<CommandQueueDesc>() == 40);
    assert!(size_of::<ModuleDesc>() == 56);
    assert!(size_of::<KernelTimestampResult>() == 32);
    assert!(size_of::<IpcMemHandle>() == 64);
};

offload_driver::functions! {
    api = "Level Zero";
    required {
        ze_init = "zeInit": fn(u32) -> ZeResult;
        ze_driver_get = "zeDriverGet": fn(*mut u32, *mut ZeDriverHandle) -> ZeResult;
        ze_device_get =
            "zeDeviceGet": fn(ZeDriverHandle, *mut u32, *mut ZeDeviceHandle) -> ZeResult;
        ze_device_get_properties =
            "zeDeviceGetProperties": fn(ZeDeviceHandle, *mut DeviceProperties) -> ZeResult;
        ze_device_get_memory_properties = "zeDeviceGetMemoryProperties":
            fn(ZeDeviceHandle, *mut u32, *mut DeviceMemoryProperties) -> ZeResult;
        ze_device_get_compute_properties = "zeDeviceGetComputeProperties":
            fn(ZeDeviceHandle, *mut DeviceComputeProperties) -> ZeResult;
        ze_context_create =
            "zeContextCreate": fn(ZeDriverHandle, *const ContextDesc, *mut ZeContext) -> ZeResult;
        ze_context_destroy = "zeContextDestroy": fn(ZeContext) -> ZeResult;
        ze_mem_alloc_device = "zeMemAllocDevice": fn(
            ZeContext, *const DeviceMemAllocDesc, usize, usize, ZeDeviceHandle, *mut *mut c_void
        ) -> ZeResult;
        ze_mem_alloc_host = "zeMemAllocHost":
            fn(ZeContext, *const HostMemAllocDesc, usize, usize, *mut *mut c_void) -> ZeResult;
        ze_mem_alloc_shared = "zeMemAllocShared": fn(
            ZeContext,
            *const DeviceMemAllocDesc,
            *const HostMemAllocDesc,
            usize,
            usize,
            ZeDeviceHandle,
            *mut *mut c_void
        ) -> ZeResult;
        ze_mem_free = "zeMemFree": fn(ZeContext, *mut c_void) -> ZeResult;
        ze_mem_get_alloc_properties = "zeMemGetAllocProperties": fn(
            ZeContext, *const c_void, *mut MemoryAllocationProperties, *mut ZeDeviceHandle
        ) -> ZeResult;
        ze_mem_get_address_range = "zeMemGetAddressRange":
            fn(ZeContext, *const c_void, *mut *mut c_void, *mut usize) -> ZeResult;
        ze_mem_get_ipc_handle = "zeMemGetIpcHandle":
            fn(ZeContext, *const c_void, *mut IpcMemHandle) -> ZeResult;
        ze_mem_open_ipc_handle = "zeMemOpenIpcHandle":
            fn(ZeContext, ZeDeviceHandle, IpcMemHandle, u32, *mut *mut c_void) -> ZeResult;
        ze_mem_close_ipc_handle =
            "zeMemCloseIpcHandle": fn(ZeContext, *const c_void) -> ZeResult;
        ze_command_list_create_immediate = "zeCommandListCreateImmediate": fn(
            ZeContext, ZeDeviceHandle, *const CommandQueueDesc, *mut ZeCommandList
        ) -> ZeResult;
        ze_command_list_destroy = "zeCommandListDestroy": fn(ZeCommandList) -> ZeResult;
        ze_command_list_append_memory_copy = "zeCommandListAppendMemoryCopy": fn(
            ZeCommandList, *mut c_void, *const c_void, usize, ZeEvent, u32, *mut ZeEvent
        ) -> ZeResult;
        ze_command_list_append_memory_fill = "zeCommandListAppendMemoryFill": fn(
            ZeCommandList, *mut c_void, *const c_void, usize, usize, ZeEvent, u32, *mut ZeEvent
        ) -> ZeResult;
        ze_command_list_append_barrier = "zeCommandListAppendBarrier":
            fn(ZeCommandList, ZeEvent, u32, *mut ZeEvent) -> ZeResult;
        ze_command_list_append_launch_kernel = "zeCommandListAppendLaunchKernel": fn(
            ZeCommandList, ZeKernel, *const GroupCount, ZeEvent, u32, *mut ZeEvent
        ) -> ZeResult;
        ze_event_pool_create = "zeEventPoolCreate": fn(
            ZeContext, *const EventPoolDesc, u32, *mut ZeDeviceHandle, *mut ZeEventPool
        ) -> ZeResult;
        ze_event_pool_destroy = "zeEventPoolDestroy": fn(ZeEventPool) -> ZeResult;
        ze_event_create =
            "zeEventCreate": fn(ZeEventPool, *const EventDesc, *mut ZeEvent) -> ZeResult;
        ze_event_destroy = "zeEventDestroy": fn(ZeEvent) -> ZeResult;
        ze_event_host_signal = "zeEventHostSignal": fn(ZeEvent) -> ZeResult;
        ze_event_host_synchronize = "zeEventHostSynchronize": fn(ZeEvent, u64) -> ZeResult;
        ze_event_query_status = "zeEventQueryStatus": fn(ZeEvent) -> ZeResult;
        ze_event_host_reset = "zeEventHostReset": fn(ZeEvent) -> ZeResult;
        ze_event_query_kernel_timestamp = "zeEventQueryKernelTimestamp":
            fn(ZeEvent, *mut KernelTimestampResult) -> ZeResult;
        ze_module_create = "zeModuleCreate": fn(
            ZeContext, ZeDeviceHandle, *const ModuleDesc, *mut ZeModule, *mut ZeBuildLog
        ) -> ZeResult;
        ze_module_destroy = "zeModuleDestroy": fn(ZeModule) -> ZeResult;
        ze_module_build_log_destroy = "zeModuleBuildLogDestroy": fn(ZeBuildLog) -> ZeResult;
        ze_module_build_log_get_string = "zeModuleBuildLogGetString":
            fn(ZeBuildLog, *mut usize, *mut c_char) -> ZeResult;
        ze_module_get_global_pointer = "zeModuleGetGlobalPointer":
            fn(ZeModule, *const c_char, *mut usize, *mut *mut c_void) -> ZeResult;
        ze_module_get_kernel_names = "zeModuleGetKernelNames":
            fn(ZeModule, *mut u32, *mut *const c_char) -> ZeResult;
        ze_kernel_create =
            "zeKernelCreate": fn(ZeModule, *const KernelDesc, *mut ZeKernel) -> ZeResult;
        ze_kernel_destroy = "zeKernelDestroy": fn(ZeKernel) -> ZeResult;
        ze_kernel_set_group_size =
            "zeKernelSetGroupSize": fn(ZeKernel, u32, u32, u32) -> ZeResult;
        ze_kernel_set_argument_value = "zeKernelSetArgumentValue":
            fn(ZeKernel, u32, usize, *const c_void) -> ZeResult;
    }
    optional {
        ze_driver_get_api_version =
            "zeDriverGetApiVersion": fn(ZeDriverHandle, *mut ZeApiVersion) -> ZeResult;
        // Level Zero 1.6; the Debian loader (1.8.x) does not export it. Without it a handle
        // is released with its allocation.
        ze_mem_put_ipc_handle = "zeMemPutIpcHandle": fn(ZeContext, IpcMemHandle) -> ZeResult;
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
                if name == "zeDeviceGetMemoryProperties" {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        assert_eq!(missing.err(), Some("zeDeviceGetMemoryProperties"));
        // SAFETY: nothing is found, so nothing is converted.
        let nothing = unsafe { Functions::load(|_| std::ptr::null()) };
        assert_eq!(nothing.err(), Some("zeInit"));
    }

    #[test]
    fn missing_optional_symbols_are_none() {
        let stub = stub as *const c_void;
        // SAFETY: the table is only inspected for which entries are present, never called.
        let table = unsafe {
            Functions::load(|name| {
                if name == "zeDriverGetApiVersion" {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        let Ok(table) = table else {
            panic!("every required symbol was given");
        };
        assert!(table.ze_driver_get_api_version.is_none());
    }

    #[test]
    fn every_result_has_one_name() {
        for (i, (code, name)) in RESULTS.iter().enumerate() {
            assert!(name.starts_with("ZE_RESULT_"));
            assert!(
                RESULTS[i + 1..].iter().all(|(other, _)| other != code),
                "{name}"
            );
        }
    }
}
