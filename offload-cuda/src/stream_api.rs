//! The CUDA driver API as offload-driver's [`StreamApi`], whose generic backend makes its
//! calls: memory, streams, events, modules and IPC, each returning `Result` with the
//! driver's names for a failure.
//!
//! Calls that take device addresses are `unsafe fn`: the driver cannot tell a device
//! address that lies inside a live allocation from one that does not (pinned host memory
//! has host addresses), so the caller promises it. Calls on handles (streams, events,
//! modules) are safe where a wrong handle can only make the driver return an error code;
//! their `# Safety` sections say where not. Every context-dependent call needs the
//! handle's context current on the calling thread ([`StreamApi::bind`]).
//! The calls that are one C call each come from the table at the end of the impl
//! (offload-driver's `stream_api_calls!`, over `ffi`'s symbol table, whose expansion
//! carries their `SAFETY` arguments); the items of the trait that are no driver call
//! (opening, describing a device, images) delegate to the modules that own them
//! (platform.rs, context.rs, program.rs, nvrtc.rs), and the calls that are more than one
//! C call to `ffi`'s. This is domain code over the bindings: `ffi/` never calls into it.

use offload_core::{BackendKind, CompilerId, DeviceInfo, Error, Language, ParamKind, Source};
use offload_driver::{Failure, OpenedApi, StreamApi, Word};

use crate::context::Context;
use crate::ffi::Driver;
use crate::ffi::sys::{self, CuDevicePtr, CuEvent, CuFunction, CuIpcMemHandle, CuModule, CuStream};
use crate::image::Inspected;

// SAFETY: every call below is the `cuda.h` function its documentation names, with the
// arguments given; CUDA handles may be used from any thread (the driver API is
// thread-safe, the current context is per-thread state that `bind` sets); the safe calls
// are sound for any argument (a bad handle or address is an error code); `cuMemAlloc`,
// `cuMemAllocManaged` and `cuIpcOpenMemHandle` return the base of at least the bytes
// asked for, `cuMemAllocHost` page-locked memory whose host address is its device address
// (unified addressing, every CUDA device offload runs on has it), managed memory is
// host-accessible; `module_bytes` are PTX ending in NUL or a cubin/fatbin whose headers
// `image::inspect` checked, and `kernel_params` are that inspection's, buffers and scalars
// of at most 8 bytes.
unsafe impl StreamApi for Driver {
    type Context = Context;
    type Image = Inspected;

    /// Loads the driver, `cuInit(0)`, counts the devices and retains each one's primary
    /// context (platform.rs).
    fn open() -> offload_core::Result<OpenedApi<Driver>> {
        crate::platform::open()
    }

    /// `cuCtxSetCurrent` of the device's primary context.
    fn bind(&self, context: &Context) -> Result<(), Failure> {
        self.set_current(context.raw)
    }

    /// `cuDevicePrimaryCtxRelease_v2`; nothing can be done about a failure (a lost
    /// device) but to go on.
    unsafe fn release(&self, context: &Context) {
        // SAFETY: the caller's promise: nothing made in the context is left, and it was
        // retained once (`Context::retain`).
        let _ = unsafe { self.release_primary(context.device) };
    }

    fn device_info(&self, context: &Context) -> offload_core::Result<DeviceInfo> {
        crate::platform::info(self, context)
    }

    /// `cuDeviceGetUuid`; where the driver lacks it, the ordinal in an otherwise zero UUID
    /// (enough to tell this machine's devices apart).
    fn uuid(&self, context: &Context, ordinal: u32) -> [u8; 16] {
        self.device_uuid(context.device).unwrap_or_else(|| {
            let mut uuid = [0u8; 16];
            uuid[15] = ordinal as u8;
            uuid
        })
    }

    /// CUDA C++: `nvrtc <version>` for `compute_<XY>` (see nvrtc.rs); a missing NVRTC is
    /// `Error::Compile` naming the libraries tried. No other language.
    fn compiler(
        &self,
        context: &Context,
        language: Language,
    ) -> offload_core::Result<Option<CompilerId>> {
        match language {
            Language::Cuda => crate::nvrtc::compiler_id(context.capability).map(Some),
            _ => Ok(None),
        }
    }

    /// CUDA C++ to PTX with NVRTC; `Error::Compile` with NVRTC's log on failure.
    fn compile(&self, context: &Context, source: &Source) -> offload_core::Result<Vec<u8>> {
        match source.language() {
            Language::Cuda => crate::nvrtc::compile(source, context.capability),
            other => Err(Error::Unsupported {
                backend: BackendKind::Cuda,
                call: "Program::load",
                reason: format!("the cuda backend compiles no {other} source"),
            }),
        }
    }

    /// PTX, cubin or fatbin for the device's compute capability (image/).
    /// PTX, cubins (`EM_CUDA`, 190) and fatbins.
    fn may_run(image: &[u8]) -> bool {
        use offload_core::hal::ImageFormat;
        matches!(
            ImageFormat::of(image),
            ImageFormat::Ptx | ImageFormat::Fatbin | ImageFormat::Elf { machine: 190 }
        )
    }

    fn inspect(&self, context: &Context, image: &[u8]) -> Result<Inspected, String> {
        crate::image::inspect(image, context.capability)
    }

    fn image_kernels(image: &Inspected) -> Vec<String> {
        image.entries.iter().map(|e| e.name.clone()).collect()
    }

    fn image_globals(image: &Inspected) -> Vec<String> {
        image.globals.iter().map(|g| g.name.clone()).collect()
    }

    fn kernel_params(
        image: &Inspected,
        name: &str,
    ) -> Option<offload_core::Result<Vec<ParamKind>>> {
        crate::program::kernel_params(image, name)
    }

    /// The image, NUL-terminated if it is PTX (the driver reads PTX as a C string).
    fn module_bytes(image: &[u8], inspected: &Inspected) -> Result<Vec<u8>, String> {
        Ok(crate::program::module_bytes(image, inspected))
    }

    /// `cuModuleLoadDataEx`; a refused image is `InvalidBinary` with the JIT log.
    unsafe fn module_load(
        &self,
        bytes: &[u8],
        _inspected: &Inspected,
    ) -> offload_core::Result<CuModule> {
        // SAFETY: the caller's promise: PTX ending in NUL, or a cubin/fatbin whose headers
        // and sections lie inside the bytes.
        unsafe { self.module_load_logged(bytes) }.map_err(crate::program::refused)
    }

    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`: the id the handle carries,
    /// which tells a reused address from the allocation that had it.
    fn ipc_identity(&self, ptr: u64, _len: usize) -> offload_core::Result<Option<u64>> {
        let id = self
            .buffer_id(ptr)
            .map_err(|f| f.into_error(BackendKind::Cuda, ""))?;
        Ok(Some(id))
    }

    /// `cuMemsetD8Async` / `D16` / `D32` for a 1-, 2- or 4-byte `word` repeated `count`
    /// times.
    ///
    /// # Safety
    /// `dst..dst + count × word size` lies inside a live allocation of the current
    /// context that outlives the fill on `stream`; `dst` is aligned to the word size.
    unsafe fn memset_async(
        &self,
        dst: CuDevicePtr,
        word: Word,
        count: usize,
        stream: CuStream,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let (function, code) = unsafe {
            match word {
                Word::W8(v) => (
                    "cuMemsetD8Async",
                    (self.functions.cu_memset_d8_async)(dst, v, count, stream),
                ),
                Word::W16(v) => (
                    "cuMemsetD16Async",
                    (self.functions.cu_memset_d16_async)(dst, v, count, stream),
                ),
                Word::W32(v) => (
                    "cuMemsetD32Async",
                    (self.functions.cu_memset_d32_async)(dst, v, count, stream),
                ),
            }
        };
        self.check(function, code)
    }

    offload_driver::stream_api_calls! {
        words: Cuda "cuda" "CUDA" "Cuda" "driver";
        leak: "their primary contexts stay retained until they are gone";
        codes: sys::CUDA_ERROR_NOT_READY, sys::CUDA_ERROR_OUT_OF_MEMORY, sys::CUDA_ERROR_NOT_FOUND,
            Some(sys::CUDA_ERROR_ALREADY_MAPPED as i64);
        ipc: b"OFCU" true;
        handles: CuStream, CuEvent, CuModule, CuFunction;
        alloc_device: cu_mem_alloc() "cuMemAlloc_v2";
        alloc_managed: cu_mem_alloc_managed(sys::CU_MEM_ATTACH_GLOBAL) "cuMemAllocManaged";
        alloc_host: cu_mem_alloc_host() "cuMemAllocHost_v2";
        free_device: cu_mem_free() "cuMemFree_v2";
        free_host: cu_mem_free_host() "cuMemFreeHost";
        memcpy_htod: cu_memcpy_htod() "cuMemcpyHtoD_v2";
        memcpy_dtoh: cu_memcpy_dtoh() "cuMemcpyDtoH_v2";
        memcpy_dtod: cu_memcpy_dtod() "cuMemcpyDtoD_v2";
        memset_d8: cu_memset_d8() "cuMemsetD8_v2";
        memcpy_htod_async: cu_memcpy_htod_async() "cuMemcpyHtoDAsync_v2";
        memcpy_dtod_async: cu_memcpy_dtod_async() "cuMemcpyDtoDAsync_v2";
        stream_create: cu_stream_create(sys::CU_STREAM_NON_BLOCKING) "cuStreamCreate";
        stream_destroy: cu_stream_destroy() "cuStreamDestroy_v2";
        stream_synchronize: cu_stream_synchronize() "cuStreamSynchronize";
        stream_query: cu_stream_query() "cuStreamQuery";
        stream_wait_event: cu_stream_wait_event() "cuStreamWaitEvent";
        event_create: cu_event_create(sys::CU_EVENT_DEFAULT) "cuEventCreate";
        event_record: cu_event_record() "cuEventRecord";
        event_synchronize: cu_event_synchronize() "cuEventSynchronize";
        event_query: cu_event_query() "cuEventQuery";
        event_elapsed: cu_event_elapsed_time() "cuEventElapsedTime";
        event_destroy: cu_event_destroy() "cuEventDestroy_v2";
        module_unload: cu_module_unload() "cuModuleUnload";
        module_function: cu_module_get_function() "cuModuleGetFunction";
        module_global: cu_module_get_global() "cuModuleGetGlobal_v2";
        launch_kernel: cu_launch_kernel() "cuLaunchKernel";
        ipc_get: cu_ipc_get_mem_handle(CuIpcMemHandle) "cuIpcGetMemHandle";
        ipc_open: cu_ipc_open_mem_handle(CuIpcMemHandle, sys::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
            "cuIpcOpenMemHandle_v2";
        ipc_close: cu_ipc_close_mem_handle() "cuIpcCloseMemHandle";
    }
}
