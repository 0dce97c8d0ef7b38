//! The driver calls behind memory, streams, events, modules and IPC, each returning
//! `Result` with the driver's names for a failure (cudarc's `result` layer).
//!
//! Calls that take device addresses are `unsafe fn`: the driver cannot tell a device
//! address that lies inside a live allocation from one that does not (pinned host memory
//! has host addresses), so the caller promises it. Calls on handles (streams, events,
//! modules) are safe where a wrong handle can only make the driver return an error code;
//! their `# Safety` sections say where not. Every context-dependent call needs the
//! handle's context current on the calling thread (`set_current`).

use std::ffi::{CStr, c_uint, c_void};

use offload_driver::Failure;

use super::Driver;
use super::sys::{
    self, CuContext, CuDevice, CuDevicePtr, CuEvent, CuFunction, CuHostFn, CuIpcMemHandle,
    CuModule, CuStream, CuUuid,
};

/// A failed module load: the driver's failure and its JIT error log.
pub(crate) struct LoadFailure {
    pub(crate) failure: Failure,
    pub(crate) log: String,
}

impl Driver {
    /// `cuDevicePrimaryCtxRetain`.
    pub(crate) fn retain_primary(&self, device: CuDevice) -> Result<CuContext, Failure> {
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer; a bad device is an error code.
        let code = unsafe { (self.functions.cu_device_primary_ctx_retain)(&mut context, device) };
        self.check("cuDevicePrimaryCtxRetain", code)
            .map(|()| context)
    }

    /// `cuDevicePrimaryCtxRelease_v2`.
    ///
    /// # Safety
    /// Every object made in the context is gone, and it is released once per retain.
    pub(crate) unsafe fn release_primary(&self, device: CuDevice) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_device_primary_ctx_release)(device) };
        self.check("cuDevicePrimaryCtxRelease_v2", code)
    }

    /// `cuCtxSetCurrent`: binds `context` to the calling thread.
    pub(crate) fn set_current(&self, context: CuContext) -> Result<(), Failure> {
        // SAFETY: the context is a retained primary context (callers hold it); binding it
        // only changes the driver's thread-local state.
        let code = unsafe { (self.functions.cu_ctx_set_current)(context) };
        self.check("cuCtxSetCurrent", code)
    }

    /// `cuDeviceGetUuid`, where the driver has it.
    pub(crate) fn uuid(&self, device: CuDevice) -> Option<[u8; 16]> {
        let get = self.functions.cu_device_get_uuid?;
        let mut uuid = CuUuid::default();
        // SAFETY: `uuid` is a valid out-pointer of the declared type.
        let code = unsafe { get(&mut uuid, device) };
        (code == sys::CUDA_SUCCESS).then_some(uuid.bytes)
    }

    /// `cuMemAlloc_v2`.
    pub(crate) fn mem_alloc(&self, bytes: usize) -> Result<CuDevicePtr, Failure> {
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the current context owns the allocation.
        let code = unsafe { (self.functions.cu_mem_alloc)(&mut ptr, bytes) };
        self.check("cuMemAlloc_v2", code).map(|()| ptr)
    }

    /// `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`; `None` where the driver lacks it.
    pub(crate) fn mem_alloc_managed(&self, bytes: usize) -> Option<Result<CuDevicePtr, Failure>> {
        let alloc = self.functions.cu_mem_alloc_managed?;
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the flag is a documented value.
        let code = unsafe { alloc(&mut ptr, bytes, sys::CU_MEM_ATTACH_GLOBAL) };
        Some(self.check("cuMemAllocManaged", code).map(|()| ptr))
    }

    /// `cuMemAllocHost_v2`: page-locked host memory the device reaches.
    pub(crate) fn mem_alloc_host(&self, bytes: usize) -> Result<*mut c_void, Failure> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        let code = unsafe { (self.functions.cu_mem_alloc_host)(&mut ptr, bytes) };
        self.check("cuMemAllocHost_v2", code).map(|()| ptr)
    }

    /// `cuMemFree_v2`.
    ///
    /// # Safety
    /// `ptr` is a live allocation of the current context, freed once, unused by pending
    /// work.
    pub(crate) unsafe fn mem_free(&self, ptr: CuDevicePtr) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_mem_free)(ptr) };
        self.check("cuMemFree_v2", code)
    }

    /// `cuMemFreeHost`.
    ///
    /// # Safety
    /// As for [`Driver::mem_free`], for memory of `cuMemAllocHost`.
    pub(crate) unsafe fn mem_free_host(&self, ptr: *mut c_void) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_mem_free_host)(ptr) };
        self.check("cuMemFreeHost", code)
    }

    /// `cuMemcpyHtoD_v2`.
    ///
    /// # Safety
    /// `dst..dst + src.len()` lies inside a live allocation of the current context that
    /// no pending work uses.
    pub(crate) unsafe fn memcpy_htod(&self, dst: CuDevicePtr, src: &[u8]) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller; `src` is readable for its length.
        let code = unsafe { (self.functions.cu_memcpy_htod)(dst, src.as_ptr().cast(), src.len()) };
        self.check("cuMemcpyHtoD_v2", code)
    }

    /// `cuMemcpyDtoH_v2`.
    ///
    /// # Safety
    /// `src..src + dst.len()` lies inside a live allocation of the current context.
    pub(crate) unsafe fn memcpy_dtoh(
        &self,
        dst: &mut [u8],
        src: CuDevicePtr,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller; `dst` is writable for its length and cannot
        // alias device memory offload owns (no reference to it is ever handed out).
        let code =
            unsafe { (self.functions.cu_memcpy_dtoh)(dst.as_mut_ptr().cast(), src, dst.len()) };
        self.check("cuMemcpyDtoH_v2", code)
    }

    /// `cuMemcpyDtoD_v2`.
    ///
    /// # Safety
    /// Both ranges of `len` bytes lie inside live allocations of the current context.
    pub(crate) unsafe fn memcpy_dtod(
        &self,
        dst: CuDevicePtr,
        src: CuDevicePtr,
        len: usize,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_memcpy_dtod)(dst, src, len) };
        self.check("cuMemcpyDtoD_v2", code)
    }

    /// `cuMemsetD8_v2`.
    ///
    /// # Safety
    /// `dst..dst + len` lies inside a live allocation of the current context.
    pub(crate) unsafe fn memset_d8(
        &self,
        dst: CuDevicePtr,
        value: u8,
        len: usize,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_memset_d8)(dst, value, len) };
        self.check("cuMemsetD8_v2", code)
    }

    /// `cuMemcpyHtoDAsync_v2`.
    ///
    /// # Safety
    /// As for [`Driver::memcpy_htod`], and `src` stays alive and unchanged until `stream`
    /// has passed this copy.
    pub(crate) unsafe fn memcpy_htod_async(
        &self,
        dst: CuDevicePtr,
        src: &[u8],
        stream: CuStream,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe {
            (self.functions.cu_memcpy_htod_async)(dst, src.as_ptr().cast(), src.len(), stream)
        };
        self.check("cuMemcpyHtoDAsync_v2", code)
    }

    /// `cuMemcpyDtoDAsync_v2`.
    ///
    /// # Safety
    /// As for [`Driver::memcpy_dtod`], and both allocations outlive the copy on `stream`.
    pub(crate) unsafe fn memcpy_dtod_async(
        &self,
        dst: CuDevicePtr,
        src: CuDevicePtr,
        len: usize,
        stream: CuStream,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_memcpy_dtod_async)(dst, src, len, stream) };
        self.check("cuMemcpyDtoDAsync_v2", code)
    }

    /// `cuMemsetD8Async` / `D16` / `D32` for a 1-, 2- or 4-byte `word` repeated `count`
    /// times.
    ///
    /// # Safety
    /// `dst..dst + count × word size` lies inside a live allocation of the current
    /// context that outlives the fill on `stream`; `dst` is aligned to the word size.
    pub(crate) unsafe fn memset_async(
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

    /// `cuStreamCreate(CU_STREAM_NON_BLOCKING)`.
    pub(crate) fn stream_create(&self) -> Result<CuStream, Failure> {
        let mut stream: CuStream = std::ptr::null_mut();
        // SAFETY: `stream` is a valid out-pointer; the flag is a documented value.
        let code =
            unsafe { (self.functions.cu_stream_create)(&mut stream, sys::CU_STREAM_NON_BLOCKING) };
        self.check("cuStreamCreate", code).map(|()| stream)
    }

    /// `cuStreamDestroy_v2`.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context, destroyed once.
    pub(crate) unsafe fn stream_destroy(&self, stream: CuStream) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_stream_destroy)(stream) };
        self.check("cuStreamDestroy_v2", code)
    }

    /// `cuStreamSynchronize`.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context.
    pub(crate) unsafe fn stream_synchronize(&self, stream: CuStream) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_stream_synchronize)(stream) };
        self.check("cuStreamSynchronize", code)
    }

    /// `cuStreamQuery`: whether everything enqueued on `stream` has finished.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context.
    pub(crate) unsafe fn stream_query(&self, stream: CuStream) -> Result<bool, Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_stream_query)(stream) };
        self.ready("cuStreamQuery", code)
    }

    /// `cuStreamWaitEvent`.
    ///
    /// # Safety
    /// Both are live objects of the current context.
    pub(crate) unsafe fn stream_wait_event(
        &self,
        stream: CuStream,
        event: CuEvent,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller; 0 is the only documented flag value.
        let code = unsafe { (self.functions.cu_stream_wait_event)(stream, event, 0) };
        self.check("cuStreamWaitEvent", code)
    }

    /// `cuLaunchHostFunc`; `None` where the driver lacks it (before CUDA 10).
    ///
    /// # Safety
    /// `stream` is a live stream of the current context; `function` may be called with
    /// `data` once, on a driver thread, and must make no CUDA call.
    pub(crate) unsafe fn launch_host_func(
        &self,
        stream: CuStream,
        function: CuHostFn,
        data: *mut c_void,
    ) -> Option<Result<(), Failure>> {
        let launch = self.functions.cu_launch_host_func?;
        // SAFETY: guaranteed by the caller.
        let code = unsafe { launch(stream, function, data) };
        Some(self.check("cuLaunchHostFunc", code))
    }

    /// `cuEventCreate(CU_EVENT_DEFAULT)` (with timing).
    pub(crate) fn event_create(&self) -> Result<CuEvent, Failure> {
        let mut event: CuEvent = std::ptr::null_mut();
        // SAFETY: `event` is a valid out-pointer; the flag is a documented value.
        let code = unsafe { (self.functions.cu_event_create)(&mut event, sys::CU_EVENT_DEFAULT) };
        self.check("cuEventCreate", code).map(|()| event)
    }

    /// `cuEventRecord`.
    ///
    /// # Safety
    /// Both are live objects of the current context.
    pub(crate) unsafe fn event_record(
        &self,
        event: CuEvent,
        stream: CuStream,
    ) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_event_record)(event, stream) };
        self.check("cuEventRecord", code)
    }

    /// `cuEventSynchronize`.
    ///
    /// # Safety
    /// `event` is a live event of the current context.
    pub(crate) unsafe fn event_synchronize(&self, event: CuEvent) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_event_synchronize)(event) };
        self.check("cuEventSynchronize", code)
    }

    /// `cuEventQuery`: whether the work before the event has finished.
    ///
    /// # Safety
    /// `event` is a live event of the current context.
    pub(crate) unsafe fn event_query(&self, event: CuEvent) -> Result<bool, Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_event_query)(event) };
        self.ready("cuEventQuery", code)
    }

    /// `cuEventElapsedTime`, in milliseconds.
    ///
    /// # Safety
    /// Both are live, completed events of the current context.
    pub(crate) unsafe fn event_elapsed(
        &self,
        start: CuEvent,
        end: CuEvent,
    ) -> Result<f32, Failure> {
        let mut ms: f32 = 0.0;
        // SAFETY: guaranteed by the caller; `ms` is a valid out-pointer.
        let code = unsafe { (self.functions.cu_event_elapsed_time)(&mut ms, start, end) };
        self.check("cuEventElapsedTime", code).map(|()| ms)
    }

    /// `cuEventDestroy_v2`.
    ///
    /// # Safety
    /// `event` is a live event of the current context, destroyed once.
    pub(crate) unsafe fn event_destroy(&self, event: CuEvent) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_event_destroy)(event) };
        self.check("cuEventDestroy_v2", code)
    }

    /// `cuModuleLoadDataEx` with a JIT error log of up to 8 KiB.
    ///
    /// # Safety
    /// `image` is an image the driver accepts to parse: PTX text ending in NUL, or a
    /// cubin/fatbin whose headers were validated (the driver trusts its sizes).
    pub(crate) unsafe fn module_load(&self, image: &[u8]) -> Result<CuModule, LoadFailure> {
        let mut log = vec![0u8; 8192];
        let mut options = [
            sys::CU_JIT_ERROR_LOG_BUFFER,
            sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let mut module: CuModule = std::ptr::null_mut();
        // SAFETY: guaranteed by the caller for `image`; the options are documented ones
        // whose values are a writable buffer and its size (passed by value in the pointer,
        // as cuda.h specifies), both alive across the call.
        let code = unsafe {
            (self.functions.cu_module_load_data_ex)(
                &mut module,
                image.as_ptr().cast(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        self.check("cuModuleLoadDataEx", code)
            .map(|()| module)
            .map_err(|failure| LoadFailure {
                failure,
                log: offload_driver::text_of(
                    &log.iter()
                        .map(|&b| b as std::ffi::c_char)
                        .collect::<Vec<_>>(),
                )
                .trim()
                .to_string(),
            })
    }

    /// `cuModuleUnload`.
    ///
    /// # Safety
    /// `module` is a live module of the current context, unloaded once, unused by pending
    /// work.
    pub(crate) unsafe fn module_unload(&self, module: CuModule) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_module_unload)(module) };
        self.check("cuModuleUnload", code)
    }

    /// `cuModuleGetFunction`.
    ///
    /// # Safety
    /// `module` is a live module of the current context.
    pub(crate) unsafe fn module_function(
        &self,
        module: CuModule,
        name: &CStr,
    ) -> Result<CuFunction, Failure> {
        let mut function: CuFunction = std::ptr::null_mut();
        // SAFETY: guaranteed by the caller; `name` is NUL-terminated; `function` is a valid
        // out-pointer.
        let code = unsafe {
            (self.functions.cu_module_get_function)(&mut function, module, name.as_ptr())
        };
        self.check("cuModuleGetFunction", code).map(|()| function)
    }

    /// `cuModuleGetGlobal_v2`: address and size of a global.
    ///
    /// # Safety
    /// `module` is a live module of the current context.
    pub(crate) unsafe fn module_global(
        &self,
        module: CuModule,
        name: &CStr,
    ) -> Result<(CuDevicePtr, usize), Failure> {
        let (mut ptr, mut size): (CuDevicePtr, usize) = (0, 0);
        // SAFETY: guaranteed by the caller; both out-pointers are valid.
        let code = unsafe {
            (self.functions.cu_module_get_global)(&mut ptr, &mut size, module, name.as_ptr())
        };
        self.check("cuModuleGetGlobal_v2", code)
            .map(|()| (ptr, size))
    }

    /// `cuLaunchKernel`.
    ///
    /// # Safety
    /// `function` is a live kernel of the current context; `params` holds one pointer per
    /// kernel parameter, to a value of that parameter's size, alive across the call (the
    /// driver copies them); every buffer address among them lies in a live allocation that
    /// outlives the launch on `stream`. The kernel is device code the caller chose to run.
    pub(crate) unsafe fn launch_kernel(
        &self,
        function: CuFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: CuStream,
        params: &mut [*mut c_void],
    ) -> Result<(), Failure> {
        let params_ptr = if params.is_empty() {
            std::ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        // SAFETY: guaranteed by the caller; `extra` is null (parameters come in `params`).
        let code = unsafe {
            (self.functions.cu_launch_kernel)(
                function,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared,
                stream,
                params_ptr,
                std::ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", code)
    }

    /// `cuIpcGetMemHandle`; `None` where the driver lacks IPC.
    ///
    /// # Safety
    /// `ptr` is the base of a live `cuMemAlloc` allocation of the current context.
    pub(crate) unsafe fn ipc_get(&self, ptr: CuDevicePtr) -> Option<Result<[u8; 64], Failure>> {
        let get = self.functions.cu_ipc_get_mem_handle?;
        let mut handle = CuIpcMemHandle { reserved: [0; 64] };
        // SAFETY: guaranteed by the caller; `handle` is a valid out-pointer.
        let code = unsafe { get(&mut handle, ptr) };
        Some(
            self.check("cuIpcGetMemHandle", code)
                .map(|()| handle.reserved),
        )
    }

    /// `cuIpcOpenMemHandle_v2` with lazy peer access; `None` where the driver lacks IPC.
    /// The driver checks the handle's bytes (a forged one is an error code).
    pub(crate) fn ipc_open(&self, handle: [u8; 64]) -> Option<Result<CuDevicePtr, Failure>> {
        let open = self.functions.cu_ipc_open_mem_handle?;
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the handle is passed by value; the flag is
        // a documented value; the current context receives the mapping.
        let code = unsafe {
            open(
                &mut ptr,
                CuIpcMemHandle { reserved: handle },
                sys::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            )
        };
        Some(self.check("cuIpcOpenMemHandle_v2", code).map(|()| ptr))
    }

    /// `cuIpcCloseMemHandle`.
    ///
    /// # Safety
    /// `ptr` came from `ipc_open` in the current context, closed once, unused by pending
    /// work.
    pub(crate) unsafe fn ipc_close(&self, ptr: CuDevicePtr) -> Option<Result<(), Failure>> {
        let close = self.functions.cu_ipc_close_mem_handle?;
        // SAFETY: guaranteed by the caller.
        let code = unsafe { close(ptr) };
        Some(self.check("cuIpcCloseMemHandle", code))
    }

    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`: the allocation's
    /// process-unique id.
    pub(crate) fn buffer_id(&self, ptr: CuDevicePtr) -> Result<u64, Failure> {
        let mut id: u64 = 0;
        // SAFETY: the attribute's value is a 64-bit integer, written into `id`; a pointer
        // the driver does not know is an error code.
        let code = unsafe {
            (self.functions.cu_pointer_get_attribute)(
                (&raw mut id).cast(),
                sys::CU_POINTER_ATTRIBUTE_BUFFER_ID,
                ptr,
            )
        };
        self.check("cuPointerGetAttribute", code).map(|()| id)
    }

    /// `Ok(true)` for `CUDA_SUCCESS`, `Ok(false)` for `CUDA_ERROR_NOT_READY`.
    fn ready(&self, function: &'static str, code: sys::CuResult) -> Result<bool, Failure> {
        if code == sys::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check(function, code).map(|()| true)
    }
}

/// A fill pattern the driver fills with natively.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Word {
    W8(u8),
    W16(u16),
    W32(u32),
}
