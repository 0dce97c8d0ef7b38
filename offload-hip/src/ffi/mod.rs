//! The HIP runtime, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every HIP call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! This module (with [`sys`], the raw table) is the crate's only `unsafe` code. It decides
//! nothing: which failures mean "no HIP here" is the platform's call (`crate::open`), and
//! how a failure reads as an offload error is `offload_driver::Failure`'s.

pub(crate) mod sys;

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use offload_driver::{Failure, LoadError, Loaded, static_text, text_of};

pub(crate) use sys::{
    HIP_ERROR_NO_DEVICE, HipDevice, HipDeviceAttribute, HipError, HipEvent, HipFunction, HipModule,
    HipStream,
};

/// A fill word: `hipMemsetAsync`, `hipMemsetD16Async` or `hipMemsetD32Async`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Word {
    W8(u8),
    W16(u16),
    W32(u32),
}

/// The names the HIP runtime is looked for under, in order: the development link, then the
/// ROCm 7, 6 and 5 sonames.
pub(crate) const LIBRARIES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// The opened HIP runtime and its entry points. Whatever calls HIP holds this in an `Arc`,
/// so the table never outlives the library it points into.
pub(crate) struct Driver {
    functions: Loaded<sys::Functions>,
}

impl Driver {
    /// Opens the first of [`LIBRARIES`] that loads and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        // SAFETY: dlopen runs the runtime's initialisers, which only set up its own state
        // and are sound to run at any time (it stays mapped: `RTLD_NODELETE`, as after
        // hipInit its threads, and ROCr's, run its code). Every address comes from the HIP
        // runtime for a name `sys` declares with the signature `hip_runtime_api.h` gives it.
        let functions = unsafe { Loaded::open(&LIBRARIES) }?;
        Ok(Driver { functions })
    }

    /// The name the runtime was found under (`libamdhip64.so.6`, …).
    pub(crate) fn library(&self) -> &'static str {
        self.functions.library().name()
    }

    /// `hipInit(0)`.
    pub(crate) fn init(&self) -> Result<(), Failure> {
        // SAFETY: hipInit takes its flags by value; 0 is the documented value.
        let code = unsafe { (self.functions.hip_init)(0) };
        self.check("hipInit", code)
    }

    /// `hipGetDeviceCount`.
    pub(crate) fn device_count(&self) -> Result<c_int, Failure> {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid, writable int for the duration of the call.
        let code = unsafe { (self.functions.hip_get_device_count)(&mut count) };
        self.check("hipGetDeviceCount", code).map(|()| count)
    }

    /// `hipDeviceGet`: the handle of device `ordinal`.
    pub(crate) fn device(&self, ordinal: c_int) -> Result<HipDevice, Failure> {
        let mut device: HipDevice = 0;
        // SAFETY: `device` is a valid, writable hipDevice_t; a bad ordinal is an error code.
        let code = unsafe { (self.functions.hip_device_get)(&mut device, ordinal) };
        self.check("hipDeviceGet", code).map(|()| device)
    }

    /// `hipDeviceGetName`.
    pub(crate) fn device_name(&self, device: HipDevice) -> Result<String, Failure> {
        let mut name: [c_char; 256] = [0; 256];
        let len = c_int::try_from(name.len()).unwrap_or(c_int::MAX);
        // SAFETY: the runtime writes at most `len` bytes, its NUL included, into `name`,
        // which has exactly that many.
        let code = unsafe { (self.functions.hip_device_get_name)(name.as_mut_ptr(), len, device) };
        self.check("hipDeviceGetName", code)
            .map(|()| text_of(&name))
    }

    /// `hipDeviceTotalMem`, in bytes.
    pub(crate) fn total_memory(&self, device: HipDevice) -> Result<u64, Failure> {
        let mut bytes: usize = 0;
        // SAFETY: `bytes` is a valid, writable size_t for the duration of the call.
        let code = unsafe { (self.functions.hip_device_total_mem)(&mut bytes, device) };
        self.check("hipDeviceTotalMem", code).map(|()| bytes as u64)
    }

    /// `hipDeviceGetAttribute(hipDeviceAttributeMultiprocessorCount)` of device `ordinal`
    /// (this call takes the ordinal, not a `hipDevice_t`).
    pub(crate) fn multiprocessor_count(&self, ordinal: c_int) -> Result<c_int, Failure> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid, writable int; the attribute is a documented one.
        let code = unsafe {
            (self.functions.hip_device_get_attribute)(
                &mut value,
                sys::HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                ordinal,
            )
        };
        self.check("hipDeviceGetAttribute", code).map(|()| value)
    }

    /// `hipDeviceGetAttribute(attribute)` of device `ordinal`.
    pub(crate) fn attribute(
        &self,
        ordinal: c_int,
        attribute: HipDeviceAttribute,
    ) -> Result<c_int, Failure> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid, writable int; an unknown attribute is an error code.
        let code =
            unsafe { (self.functions.hip_device_get_attribute)(&mut value, attribute, ordinal) };
        self.check("hipDeviceGetAttribute", code).map(|()| value)
    }

    /// `hipSetDevice`: makes device `ordinal` the calling thread's current device.
    pub(crate) fn set_device(&self, ordinal: c_int) -> Result<(), Failure> {
        // SAFETY: the ordinal is passed by value; a bad one is an error code.
        let code = unsafe { (self.functions.hip_set_device)(ordinal) };
        self.check("hipSetDevice", code)
    }

    /// `hipMalloc` on the current device.
    pub(crate) fn malloc(&self, size: usize) -> Result<*mut c_void, Failure> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid, writable pointer for the duration of the call.
        let code = unsafe { (self.functions.hip_malloc)(&mut ptr, size) };
        self.check("hipMalloc", code).map(|()| ptr)
    }

    /// `hipHostMalloc` (page-locked host memory, `hipHostMallocDefault`).
    pub(crate) fn host_malloc(&self, size: usize) -> Result<*mut c_void, Failure> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: as in `malloc`.
        let code = unsafe {
            (self.functions.hip_host_malloc)(&mut ptr, size, sys::HIP_HOST_MALLOC_DEFAULT)
        };
        self.check("hipHostMalloc", code).map(|()| ptr)
    }

    /// `hipMallocManaged(hipMemAttachGlobal)`; `None` where the runtime lacks it.
    pub(crate) fn malloc_managed(&self, size: usize) -> Option<Result<*mut c_void, Failure>> {
        let managed = self.functions.hip_malloc_managed?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: as in `malloc`.
        let code = unsafe { managed(&mut ptr, size, sys::HIP_MEM_ATTACH_GLOBAL) };
        Some(self.check("hipMallocManaged", code).map(|()| ptr))
    }

    /// `hipFree`.
    ///
    /// # Safety
    ///
    /// `ptr` is a live allocation of `hipMalloc` or `hipMallocManaged`, freed once, with no
    /// work on it left.
    pub(crate) unsafe fn free(&self, ptr: *mut c_void) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_free)(ptr) };
        self.check("hipFree", code)
    }

    /// `hipHostFree`.
    ///
    /// # Safety
    ///
    /// `ptr` is a live allocation of `hipHostMalloc`, freed once, with no work on it left.
    pub(crate) unsafe fn host_free(&self, ptr: *mut c_void) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_host_free)(ptr) };
        self.check("hipHostFree", code)
    }

    /// `hipMemcpy(hipMemcpyHostToDevice)`.
    ///
    /// # Safety
    ///
    /// `dst..dst + src.len()` lies inside one live allocation nothing else touches now.
    pub(crate) unsafe fn memcpy_htod(&self, dst: *mut c_void, src: &[u8]) -> Result<(), Failure> {
        // SAFETY: the caller's promise for `dst`; `src` is a valid slice.
        let code = unsafe {
            (self.functions.hip_memcpy)(
                dst,
                src.as_ptr().cast(),
                src.len(),
                sys::HIP_MEMCPY_HOST_TO_DEVICE,
            )
        };
        self.check("hipMemcpy", code)
    }

    /// `hipMemcpy(hipMemcpyDeviceToHost)`.
    ///
    /// # Safety
    ///
    /// `src..src + dst.len()` lies inside one live allocation nothing writes to now.
    pub(crate) unsafe fn memcpy_dtoh(
        &self,
        dst: &mut [u8],
        src: *const c_void,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise for `src`; `dst` is a valid, writable slice.
        let code = unsafe {
            (self.functions.hip_memcpy)(
                dst.as_mut_ptr().cast(),
                src,
                dst.len(),
                sys::HIP_MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.check("hipMemcpy", code)
    }

    /// `hipMemcpy(hipMemcpyDeviceToDevice)`.
    ///
    /// # Safety
    ///
    /// Both ranges of `len` bytes lie inside live allocations, do not overlap, and nothing
    /// else touches them now.
    pub(crate) unsafe fn memcpy_dtod(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code =
            unsafe { (self.functions.hip_memcpy)(dst, src, len, sys::HIP_MEMCPY_DEVICE_TO_DEVICE) };
        self.check("hipMemcpy", code)
    }

    /// `hipMemset` of `len` bytes to `value`.
    ///
    /// # Safety
    ///
    /// `dst..dst + len` lies inside one live allocation nothing else touches now.
    pub(crate) unsafe fn memset(
        &self,
        dst: *mut c_void,
        value: u8,
        len: usize,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_memset)(dst, c_int::from(value), len) };
        self.check("hipMemset", code)
    }

    /// `hipStreamCreateWithFlags(hipStreamNonBlocking)` on the current device.
    pub(crate) fn stream_create(&self) -> Result<HipStream, Failure> {
        let mut stream: HipStream = std::ptr::null_mut();
        // SAFETY: `stream` is a valid out-pointer; the flag is a documented value.
        let code = unsafe {
            (self.functions.hip_stream_create_with_flags)(&mut stream, sys::HIP_STREAM_NON_BLOCKING)
        };
        self.check("hipStreamCreateWithFlags", code)
            .map(|()| stream)
    }

    /// `hipStreamDestroy`.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream, destroyed once.
    pub(crate) unsafe fn stream_destroy(&self, stream: HipStream) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_stream_destroy)(stream) };
        self.check("hipStreamDestroy", code)
    }

    /// `hipStreamSynchronize` (null: the null stream of the current device).
    ///
    /// # Safety
    ///
    /// `stream` is null or a live stream.
    pub(crate) unsafe fn stream_synchronize(&self, stream: HipStream) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_stream_synchronize)(stream) };
        self.check("hipStreamSynchronize", code)
    }

    /// `hipStreamQuery`: `true` when the stream is idle.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream.
    pub(crate) unsafe fn stream_query(&self, stream: HipStream) -> Result<bool, Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_stream_query)(stream) };
        if code == sys::HIP_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("hipStreamQuery", code).map(|()| true)
    }

    /// `hipStreamWaitEvent(stream, event, 0)`.
    ///
    /// # Safety
    ///
    /// Both are live objects of the current device.
    pub(crate) unsafe fn stream_wait_event(
        &self,
        stream: HipStream,
        event: HipEvent,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_stream_wait_event)(stream, event, 0) };
        self.check("hipStreamWaitEvent", code)
    }

    /// `hipMemcpyAsync(hipMemcpyHostToDevice)` on `stream`.
    ///
    /// # Safety
    ///
    /// `dst..dst + src.len()` lies inside one live allocation that stays live until the
    /// stream passed the copy; `src`'s bytes stay where they are until then too.
    pub(crate) unsafe fn memcpy_htod_async(
        &self,
        dst: *mut c_void,
        src: &[u8],
        stream: HipStream,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe {
            (self.functions.hip_memcpy_async)(
                dst,
                src.as_ptr().cast(),
                src.len(),
                sys::HIP_MEMCPY_HOST_TO_DEVICE,
                stream,
            )
        };
        self.check("hipMemcpyAsync", code)
    }

    /// `hipMemcpyAsync(hipMemcpyDeviceToDevice)` on `stream`.
    ///
    /// # Safety
    ///
    /// Both ranges of `len` bytes lie inside allocations that stay live until the stream
    /// passed the copy, and do not overlap.
    pub(crate) unsafe fn memcpy_dtod_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        stream: HipStream,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe {
            (self.functions.hip_memcpy_async)(
                dst,
                src,
                len,
                sys::HIP_MEMCPY_DEVICE_TO_DEVICE,
                stream,
            )
        };
        self.check("hipMemcpyAsync", code)
    }

    /// `hipMemsetAsync` / `hipMemsetD16Async` / `hipMemsetD32Async` of `count` words.
    ///
    /// # Safety
    ///
    /// `count` words from `dst` (aligned to the word) lie inside one allocation that stays
    /// live until the stream passed the fill.
    pub(crate) unsafe fn memset_async(
        &self,
        dst: *mut c_void,
        word: Word,
        count: usize,
        stream: HipStream,
    ) -> Result<(), Failure> {
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

    /// `hipLaunchHostFunc`; `None` where the runtime lacks it.
    ///
    /// # Safety
    ///
    /// `stream` is live; `function` may be called with `data` once, on a runtime thread.
    pub(crate) unsafe fn launch_host_func(
        &self,
        stream: HipStream,
        function: sys::HipHostFn,
        data: *mut c_void,
    ) -> Option<Result<(), Failure>> {
        let launch = self.functions.hip_launch_host_func?;
        // SAFETY: the caller's promise.
        let code = unsafe { launch(stream, function, data) };
        Some(self.check("hipLaunchHostFunc", code))
    }

    /// `hipEventCreate` (with timing) on the current device.
    pub(crate) fn event_create(&self) -> Result<HipEvent, Failure> {
        let mut event: HipEvent = std::ptr::null_mut();
        // SAFETY: `event` is a valid out-pointer.
        let code = unsafe { (self.functions.hip_event_create)(&mut event) };
        self.check("hipEventCreate", code).map(|()| event)
    }

    /// `hipEventRecord`.
    ///
    /// # Safety
    ///
    /// Both are live objects of the current device.
    pub(crate) unsafe fn event_record(
        &self,
        event: HipEvent,
        stream: HipStream,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_event_record)(event, stream) };
        self.check("hipEventRecord", code)
    }

    /// `hipEventSynchronize`.
    ///
    /// # Safety
    ///
    /// `event` is live.
    pub(crate) unsafe fn event_synchronize(&self, event: HipEvent) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_event_synchronize)(event) };
        self.check("hipEventSynchronize", code)
    }

    /// `hipEventQuery`: `true` when the event completed.
    ///
    /// # Safety
    ///
    /// `event` is live.
    pub(crate) unsafe fn event_query(&self, event: HipEvent) -> Result<bool, Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_event_query)(event) };
        if code == sys::HIP_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("hipEventQuery", code).map(|()| true)
    }

    /// `hipEventElapsedTime` in milliseconds.
    ///
    /// # Safety
    ///
    /// Both are live, completed events.
    pub(crate) unsafe fn event_elapsed(
        &self,
        start: HipEvent,
        end: HipEvent,
    ) -> Result<f32, Failure> {
        let mut ms = 0f32;
        // SAFETY: the caller's promise; `ms` is a valid out-pointer.
        let code = unsafe { (self.functions.hip_event_elapsed_time)(&mut ms, start, end) };
        self.check("hipEventElapsedTime", code).map(|()| ms)
    }

    /// `hipEventDestroy`.
    ///
    /// # Safety
    ///
    /// `event` is live, destroyed once.
    pub(crate) unsafe fn event_destroy(&self, event: HipEvent) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_event_destroy)(event) };
        self.check("hipEventDestroy", code)
    }

    /// `hipModuleLoadData` on the current device.
    ///
    /// # Safety
    ///
    /// `image` is a code object offload inspected (its headers and sections lie inside the
    /// bytes), alive for the call.
    pub(crate) unsafe fn module_load(&self, image: &[u8]) -> Result<HipModule, Failure> {
        let mut module: HipModule = std::ptr::null_mut();
        // SAFETY: the caller's promise; `module` is a valid out-pointer.
        let code =
            unsafe { (self.functions.hip_module_load_data)(&mut module, image.as_ptr().cast()) };
        self.check("hipModuleLoadData", code).map(|()| module)
    }

    /// `hipModuleUnload`.
    ///
    /// # Safety
    ///
    /// `module` is live, unloaded once, with no launch of it left.
    pub(crate) unsafe fn module_unload(&self, module: HipModule) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        let code = unsafe { (self.functions.hip_module_unload)(module) };
        self.check("hipModuleUnload", code)
    }

    /// `hipModuleGetFunction`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn module_function(
        &self,
        module: HipModule,
        name: &CStr,
    ) -> Result<HipFunction, Failure> {
        let mut function: HipFunction = std::ptr::null_mut();
        // SAFETY: the caller's promise; `name` is NUL-terminated; `function` a valid
        // out-pointer.
        let code = unsafe {
            (self.functions.hip_module_get_function)(&mut function, module, name.as_ptr())
        };
        self.check("hipModuleGetFunction", code).map(|()| function)
    }

    /// `hipModuleGetGlobal`: the global's device address and size.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn module_global(
        &self,
        module: HipModule,
        name: &CStr,
    ) -> Result<(*mut c_void, usize), Failure> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: the caller's promise; valid out-pointers; `name` is NUL-terminated.
        let code = unsafe {
            (self.functions.hip_module_get_global)(&mut ptr, &mut size, module, name.as_ptr())
        };
        self.check("hipModuleGetGlobal", code).map(|()| (ptr, size))
    }

    /// `hipModuleLaunchKernel` with `kernelParams` (no `extra`).
    ///
    /// # Safety
    ///
    /// `function` is live (its module too) and of the current device; `params` holds one
    /// pointer per explicit parameter, each to a value of that parameter's size, alive for
    /// the call; every device address among the values stays live until the stream passed
    /// the launch; the geometry is within the device's limits.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch_kernel(
        &self,
        function: HipFunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: HipStream,
        params: &mut [*mut c_void],
    ) -> Result<(), Failure> {
        let params_ptr = if params.is_empty() {
            std::ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        // SAFETY: the caller's promise.
        let code = unsafe {
            (self.functions.hip_module_launch_kernel)(
                function,
                c_uint::from(grid[0]),
                c_uint::from(grid[1]),
                c_uint::from(grid[2]),
                c_uint::from(block[0]),
                c_uint::from(block[1]),
                c_uint::from(block[2]),
                c_uint::from(shared),
                stream,
                params_ptr,
                std::ptr::null_mut(),
            )
        };
        self.check("hipModuleLaunchKernel", code)
    }

    /// `hipIpcGetMemHandle`; `None` where the runtime lacks IPC.
    ///
    /// # Safety
    ///
    /// `ptr` is the base of a live `hipMalloc` allocation.
    pub(crate) unsafe fn ipc_get(&self, ptr: *mut c_void) -> Option<Result<[u8; 64], Failure>> {
        let get = self.functions.hip_ipc_get_mem_handle?;
        let mut handle = sys::HipIpcMemHandle { reserved: [0; 64] };
        // SAFETY: the caller's promise; `handle` is a valid out-pointer.
        let code = unsafe { get(&mut handle, ptr) };
        Some(
            self.check("hipIpcGetMemHandle", code)
                .map(|()| handle.reserved),
        )
    }

    /// `hipIpcOpenMemHandle(hipIpcMemLazyEnablePeerAccess)` on the current device; `None`
    /// where the runtime lacks IPC.
    pub(crate) fn ipc_open(&self, handle: [u8; 64]) -> Option<Result<*mut c_void, Failure>> {
        let open = self.functions.hip_ipc_open_mem_handle?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the handle is passed by value (the runtime
        // checks it: a forged one is an error code).
        let code = unsafe {
            open(
                &mut ptr,
                sys::HipIpcMemHandle { reserved: handle },
                sys::HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            )
        };
        Some(self.check("hipIpcOpenMemHandle", code).map(|()| ptr))
    }

    /// `hipIpcCloseMemHandle`; `None` where the runtime lacks IPC.
    ///
    /// # Safety
    ///
    /// `ptr` came from `hipIpcOpenMemHandle` and is closed once, with no work on it left.
    pub(crate) unsafe fn ipc_close(&self, ptr: *mut c_void) -> Option<Result<(), Failure>> {
        let close = self.functions.hip_ipc_close_mem_handle?;
        // SAFETY: the caller's promise.
        let code = unsafe { close(ptr) };
        Some(self.check("hipIpcCloseMemHandle", code))
    }

    /// `hipMemGetAddressRange`: the base and size of the allocation holding `ptr`; `None`
    /// where the runtime lacks it.
    pub(crate) fn address_range(&self, ptr: *mut c_void) -> Option<Result<(u64, u64), Failure>> {
        let get = self.functions.hip_mem_get_address_range?;
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: valid out-pointers; an address the runtime does not know is an error code.
        let code = unsafe { get(&mut base, &mut size, ptr) };
        Some(
            self.check("hipMemGetAddressRange", code)
                .map(|()| (base as u64, size as u64)),
        )
    }

    /// `hipDeviceGetUuid` (a `hipUUID`: 16 bytes); `None` where the runtime lacks it or
    /// fails.
    pub(crate) fn uuid(&self, device: HipDevice) -> Option<[u8; 16]> {
        let get = self.functions.hip_device_get_uuid?;
        let mut uuid = [0u8; 16];
        // SAFETY: `uuid` is a valid, writable 16-byte hipUUID; a bad device is an error code.
        let code = unsafe { get(&mut uuid, device) };
        (code == sys::HIP_SUCCESS).then_some(uuid)
    }

    /// `hipRuntimeGetVersion` (`10_000_000 × major + 100_000 × minor + patch`), where the
    /// runtime has it.
    pub(crate) fn runtime_version(&self) -> Option<c_int> {
        let get = self.functions.hip_runtime_get_version?;
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid, writable int for the duration of the call.
        let code = unsafe { get(&mut version) };
        (code == sys::HIP_SUCCESS).then_some(version)
    }

    /// `Ok` for `hipSuccess`, else the failure with the runtime's names for `code`.
    fn check(&self, function: &'static str, code: HipError) -> Result<(), Failure> {
        if code == sys::HIP_SUCCESS {
            return Ok(());
        }
        let name = error_text(self.functions.hip_get_error_name, code)
            .or_else(|| {
                sys::KNOWN_ERRORS
                    .iter()
                    .find(|(known, _)| *known == code)
                    .map(|(_, name)| (*name).to_string())
            })
            .unwrap_or_else(|| "unknown hipError_t".into());
        // ROCm 5's hipGetErrorString gives the name again: keep only a real description.
        let description = error_text(self.functions.hip_get_error_string, code)
            .filter(|description| *description != name);
        Err(Failure::new(function, code, name).with_description(description))
    }
}

/// `hipGetErrorName` / `hipGetErrorString` for `code`, where the runtime has them.
fn error_text(
    get: Option<unsafe extern "C" fn(HipError) -> *const c_char>,
    code: HipError,
) -> Option<String> {
    let get = get?;
    // SAFETY: the call takes the code by value and needs no hipInit.
    let text = unsafe { get(code) };
    // SAFETY: the runtime returns null or a static NUL-terminated string.
    unsafe { static_text(text) }
}
