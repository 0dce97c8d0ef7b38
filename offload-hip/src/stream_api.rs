//! The HIP runtime API as offload-driver's [`StreamApi`], whose generic backend makes its
//! calls: memory, streams, events, modules and IPC, each returning `Result` with the
//! runtime's names for a failure. The items of the trait that are no runtime call
//! (opening, describing a device, code objects) delegate to the modules that own them
//! (platform.rs, image.rs, program.rs); the calls that are one C call each come from the
//! table of offload-driver's `stream_api_calls!` over `ffi`'s symbol table; device
//! addresses travel as `u64` and become `void *` through `offload_driver::RawAddress`.
//! This is domain code over the bindings: `ffi/` never calls into it.

use std::ffi::{c_int, c_void};

use offload_core::{DeviceInfo, ParamKind};
use offload_driver::{Failure, OpenedApi, RawAddress, StreamApi, Word};

use crate::ffi::sys::{self, HipIpcMemHandle};
use crate::ffi::{Driver, HipEvent, HipFunction, HipModule, HipStream};
use crate::image::CodeObject;

// SAFETY: the calls are `hip_runtime_api.h`'s, as documented, with the arguments given.
// HIP handles work from any thread once `hipSetDevice` (`bind`) made the device current.
// A bad handle, ordinal or address is an error code, never a write elsewhere. Allocations
// and IPC opens give at least the bytes asked for; `hipHostMalloc` memory has one address
// for host and device (unified addressing on every ROCm GPU); managed memory is
// host-accessible. `module_bytes` is the code object `image::inspect` checked (headers,
// sections, notes inside the bytes); `kernel_params` are its metadata's explicit
// parameters, buffers and scalars of at most 8 bytes.
unsafe impl StreamApi for Driver {
    /// The device's ordinal: `hipSetDevice`'s argument.
    type Context = c_int;
    type Image = CodeObject;

    /// Loads the runtime, `hipInit(0)`, counts the devices (platform.rs).
    fn open() -> offload_core::Result<OpenedApi<Driver>> {
        crate::platform::open()
    }

    /// `hipSetDevice`.
    fn bind(&self, ordinal: &c_int) -> Result<(), Failure> {
        self.set_device(*ordinal)
    }

    /// HIP has no per-device state to let go of.
    unsafe fn release(&self, _ordinal: &c_int) {}

    fn device_info(&self, ordinal: &c_int) -> offload_core::Result<DeviceInfo> {
        crate::platform::info(self, *ordinal)
    }

    /// `hipDeviceGetUuid`; where the runtime lacks it, `offload-hip` and the ordinal
    /// (enough to tell this machine's devices apart in processes that see the same ones).
    fn uuid(&self, ordinal: &c_int, _: u32) -> [u8; 16] {
        let uuid = self
            .device(*ordinal)
            .ok()
            .and_then(|device| self.device_uuid(device));
        uuid.unwrap_or_else(|| {
            let mut uuid = *b"offload-hip\0\0\0\0\0";
            uuid[15] = *ordinal as u8;
            uuid
        })
    }

    /// An AMD GPU code object, or a clang offload bundle of one (image.rs).
    /// The code object (out of a bundle: the one for the device's architecture), checked
    /// against the device's `gcnArchName` where the runtime gave it.
    /// AMD GPU code objects (`EM_AMDGPU`, 224) and clang offload bundles of them.
    fn may_run(image: &[u8]) -> bool {
        use offload_core::hal::ImageFormat;
        matches!(
            ImageFormat::of(image),
            ImageFormat::Elf { machine: 224 } | ImageFormat::OffloadBundle
        )
    }

    fn inspect(&self, ordinal: &c_int, image: &[u8]) -> Result<CodeObject, String> {
        crate::image::inspect(image, self.arch(*ordinal))
    }

    fn image_kernels(object: &CodeObject) -> Vec<String> {
        object.kernels.iter().map(|k| k.name.clone()).collect()
    }

    fn image_globals(object: &CodeObject) -> Vec<String> {
        object.globals.clone()
    }

    /// The explicit parameters from the code object's metadata.
    fn kernel_params(
        object: &CodeObject,
        name: &str,
    ) -> Option<offload_core::Result<Vec<ParamKind>>> {
        let kernel = object.kernels.iter().find(|k| k.name == name)?;
        Some(Ok(kernel.params.clone()))
    }

    /// The code object itself, unpacked from a bundle (the entry inspection chose).
    fn module_bytes(image: &[u8], object: &CodeObject) -> Result<Vec<u8>, String> {
        image
            .get(object.range.clone())
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "the code object lies outside the image".to_string())
    }

    /// `hipModuleLoadData`; a refused code object is `InvalidBinary` naming its target.
    unsafe fn module_load(
        &self,
        bytes: &[u8],
        object: &CodeObject,
    ) -> offload_core::Result<HipModule> {
        // SAFETY: the caller's promise: an inspected code object, alive until unloaded.
        unsafe { self.module_load_raw(bytes) }
            .map_err(|failure| crate::program::refused(failure, object))
    }

    /// `hipMemGetAddressRange` must say the allocation starts at `ptr` and holds `len`
    /// bytes; the payload carries no id.
    fn ipc_identity(&self, ptr: u64, len: usize) -> offload_core::Result<Option<u64>> {
        crate::platform::check_range(self, RawAddress::from_address(ptr), len).map(|()| None)
    }

    /// `hipMemsetAsync` / `hipMemsetD16Async` / `hipMemsetD32Async` of `count` words.
    ///
    /// # Safety
    ///
    /// `count` words from `dst` (aligned to the word) lie inside one allocation that stays
    /// live until the stream passed the fill.
    unsafe fn memset_async(
        &self,
        dst: u64,
        word: Word,
        count: usize,
        stream: HipStream,
    ) -> Result<(), Failure> {
        let dst: *mut c_void = RawAddress::from_address(dst);
        // SAFETY: the caller's promise.
        let (name, code) = unsafe {
            match word {
                Word::W8(v) => (
                    "hipMemsetAsync",
                    (self.functions.hip_memset_async)(dst, c_int::from(v), count, stream),
                ),
                Word::W16(v) => (
                    "hipMemsetD16Async",
                    (self.functions.hip_memset_d16_async)(dst, v, count, stream),
                ),
                Word::W32(v) => (
                    "hipMemsetD32Async",
                    (self.functions.hip_memset_d32_async)(
                        dst,
                        c_int::from_ne_bytes(v.to_ne_bytes()),
                        count,
                        stream,
                    ),
                ),
            }
        };
        self.check(name, code)
    }

    offload_driver::stream_api_calls! {
        words: Hip "hip" "HIP" "Hip" "runtime";
        leak: "they are freed when they are dropped";
        // HIP has no `ALREADY_MAPPED` answer to recover from: no stale-mapping defence.
        codes: sys::HIP_ERROR_NOT_READY, sys::HIP_ERROR_OUT_OF_MEMORY, sys::HIP_ERROR_NOT_FOUND, None;
        ipc: b"OFHP" false;
        handles: HipStream, HipEvent, HipModule, HipFunction;
        alloc_device: hip_malloc() "hipMalloc";
        alloc_managed: hip_malloc_managed(sys::HIP_MEM_ATTACH_GLOBAL) "hipMallocManaged";
        alloc_host: hip_host_malloc(sys::HIP_HOST_MALLOC_DEFAULT) "hipHostMalloc";
        free_device: hip_free() "hipFree";
        free_host: hip_host_free() "hipHostFree";
        memcpy_htod: hip_memcpy(sys::HIP_MEMCPY_HOST_TO_DEVICE) "hipMemcpy";
        memcpy_dtoh: hip_memcpy(sys::HIP_MEMCPY_DEVICE_TO_HOST) "hipMemcpy";
        memcpy_dtod: hip_memcpy(sys::HIP_MEMCPY_DEVICE_TO_DEVICE) "hipMemcpy";
        memset_d8: hip_memset() "hipMemset";
        memcpy_htod_async: hip_memcpy_async(sys::HIP_MEMCPY_HOST_TO_DEVICE) "hipMemcpyAsync";
        memcpy_dtod_async: hip_memcpy_async(sys::HIP_MEMCPY_DEVICE_TO_DEVICE) "hipMemcpyAsync";
        stream_create: hip_stream_create_with_flags(sys::HIP_STREAM_NON_BLOCKING)
            "hipStreamCreateWithFlags";
        stream_destroy: hip_stream_destroy() "hipStreamDestroy";
        stream_synchronize: hip_stream_synchronize() "hipStreamSynchronize";
        stream_query: hip_stream_query() "hipStreamQuery";
        stream_wait_event: hip_stream_wait_event() "hipStreamWaitEvent";
        event_create: hip_event_create() "hipEventCreate";
        event_record: hip_event_record() "hipEventRecord";
        event_synchronize: hip_event_synchronize() "hipEventSynchronize";
        event_query: hip_event_query() "hipEventQuery";
        event_elapsed: hip_event_elapsed_time() "hipEventElapsedTime";
        event_destroy: hip_event_destroy() "hipEventDestroy";
        module_unload: hip_module_unload() "hipModuleUnload";
        module_function: hip_module_get_function() "hipModuleGetFunction";
        module_global: hip_module_get_global() "hipModuleGetGlobal";
        launch_kernel: hip_module_launch_kernel() "hipModuleLaunchKernel";
        ipc_get: hip_ipc_get_mem_handle(HipIpcMemHandle) "hipIpcGetMemHandle";
        ipc_open: hip_ipc_open_mem_handle(HipIpcMemHandle, sys::HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
            "hipIpcOpenMemHandle";
        ipc_close: hip_ipc_close_mem_handle() "hipIpcCloseMemHandle";
    }
}
