//! The HIP runtime, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every HIP call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! The calls are the HIP runtime API as offload-driver's [`StreamApi`], whose generic
//! backend makes them; the items of the trait that are no runtime call (opening,
//! describing a device, code objects) delegate to the modules that own them (platform.rs,
//! program.rs). The calls that are one C call each come from the tables of
//! offload-driver's `device_calls!` and `stream_api_calls!`; device addresses travel as
//! `u64` and become `void *` through `offload_driver::RawAddress`.
//!
//! This module (with [`sys`], the raw table) is the crate's FFI: every call into the
//! runtime, most of them generated from tables by offload-driver's `device_calls!` and
//! `stream_api_calls!`, and the `unsafe impl` of `offload_driver::StreamApi`; the crate's
//! only other `unsafe` code is platform.rs's device records (`DeviceCore::new`). It decides
//! nothing: which failures mean "no HIP here" is the platform's call
//! (`crate::platform::open`), and how a failure reads as an offload error is
//! `offload_driver::Failure`'s.

pub(crate) mod sys;

use std::ffi::{c_char, c_int, c_void};

use offload_core::{DeviceInfo, ParamKind};
use offload_driver::{
    Failure, LoadError, Loaded, OpenedApi, RawAddress, StreamApi, Word, static_text,
};

pub(crate) use sys::{
    HIP_ERROR_NO_DEVICE, HipDevice, HipDeviceAttribute, HipError, HipEvent, HipFunction, HipModule,
    HipStream,
};

use crate::image::CodeObject;
use sys::HipIpcMemHandle;

/// The names the HIP runtime is looked for under, in order: the development link, then the
/// ROCm 7, 6 and 5 sonames.
pub(crate) const LIBRARIES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// The HIP runtime API, opened: the library and its entry points. Whatever calls HIP holds
/// this in an `Arc`, so the table never outlives the library it points into. It is the
/// `offload_driver::StreamApi` the generic backend calls ([`HipPlatform`](crate::HipPlatform)
/// is `StreamPlatform<HipApi>`); only the platform opens it.
///
/// ```
/// use offload_driver::StreamApi;
/// assert_eq!(<offload_hip::HipApi as StreamApi>::WORDS.title, "HIP");
/// ```
pub struct Driver {
    functions: Loaded<sys::Functions>,
    /// Each device's `gcnArchName` (`None` where the runtime would not say), read once at
    /// open: what code objects are checked against.
    archs: std::sync::OnceLock<Vec<Option<String>>>,
}

impl Driver {
    /// Opens the first of [`LIBRARIES`] that loads and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        // SAFETY: dlopen runs the runtime's initialisers, which only set up its own state
        // and are sound to run at any time (it stays mapped: `RTLD_NODELETE`, as after
        // hipInit its threads, and ROCr's, run its code). Every address comes from the HIP
        // runtime for a name `sys` declares with the signature `hip_runtime_api.h` gives it.
        let functions = unsafe { Loaded::open(&LIBRARIES) }?;
        Ok(Driver {
            functions,
            archs: std::sync::OnceLock::new(),
        })
    }

    // `hipDeviceGetAttribute` takes the device's ordinal, not a `hipDevice_t` (both are
    // ints).
    offload_driver::device_calls! {
        device: HipDevice, attribute: HipDeviceAttribute,
        multiprocessors: sys::HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        init: hip_init "hipInit";
        device_count: hip_get_device_count "hipGetDeviceCount";
        device: hip_device_get "hipDeviceGet";
        device_name: hip_device_get_name "hipDeviceGetName";
        total_memory: hip_device_total_mem "hipDeviceTotalMem";
        attribute: hip_device_get_attribute "hipDeviceGetAttribute";
    }

    /// `hipSetDevice`: makes device `ordinal` the calling thread's current device.
    pub(crate) fn set_device(&self, ordinal: c_int) -> Result<(), Failure> {
        // SAFETY: the ordinal is passed by value; a bad one is an error code.
        let code = unsafe { (self.functions.hip_set_device)(ordinal) };
        self.check("hipSetDevice", code)
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
    pub(crate) fn device_uuid(&self, device: HipDevice) -> Option<[u8; 16]> {
        let get = self.functions.hip_device_get_uuid?;
        let mut uuid = [0u8; 16];
        // SAFETY: `uuid` is a valid, writable 16-byte hipUUID; a bad device is an error code.
        let code = unsafe { get(&mut uuid, device) };
        (code == sys::HIP_SUCCESS).then_some(uuid)
    }

    /// `hipRuntimeGetVersion` (`10_000_000 × major + 100_000 × minor + patch`), where the
    /// runtime has it.
    /// The device's `gcnArchName` (`gfx90a:sramecc+:xnack-`, …) from
    /// `hipGetDeviceProperties`: the one property offload reads from `hipDeviceProp_t`,
    /// whose layout changed in ROCm 6. The struct is written into a buffer larger than any
    /// ROCm's; the name is read at ROCm 5's offset (396, after `gcnArch`), else taken from
    /// the only NUL-terminated string of the struct that starts with `gfx` (the marketing
    /// name at offset 0 does not). `None` when neither gives one.
    pub(crate) fn device_arch(&self, ordinal: c_int) -> Option<String> {
        const ROCM5_GCN_ARCH_NAME: usize = 396;
        let get = self.functions.hip_get_device_properties?;
        let mut props = vec![0u8; 16 << 10];
        // SAFETY: `props` is writable for 16 KiB, more than hipDeviceProp_t of any ROCm
        // (about 1.5 KiB), and outlives the call.
        let code = unsafe { get(props.as_mut_ptr(), ordinal) };
        if code != sys::HIP_SUCCESS {
            return None;
        }
        let text_at = |at: usize| -> Option<String> {
            let bytes = props.get(at..)?;
            let end = bytes.iter().position(|&b| b == 0)?;
            let text = std::str::from_utf8(&bytes[..end]).ok()?;
            let arch = text.starts_with("gfx")
                && text.len() > 3
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b":+-".contains(&b));
            arch.then(|| text.to_string())
        };
        text_at(ROCM5_GCN_ARCH_NAME).or_else(|| (256..props.len()).step_by(4).find_map(text_at))
    }

    /// Remembers the devices' architectures (once, at open).
    pub(crate) fn set_archs(&self, archs: Vec<Option<String>>) {
        let _ = self.archs.set(archs);
    }

    /// Device `ordinal`'s architecture, where known.
    pub(crate) fn arch(&self, ordinal: c_int) -> Option<&str> {
        let archs = self.archs.get()?;
        archs.get(usize::try_from(ordinal).ok()?)?.as_deref()
    }

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
    /// `hipModuleLoadData` on the current device.
    ///
    /// # Safety
    ///
    /// `image` is a code object offload inspected (its headers and sections lie inside the
    /// bytes), alive for the call.
    pub(crate) unsafe fn module_load_raw(&self, image: &[u8]) -> Result<HipModule, Failure> {
        let mut module: HipModule = std::ptr::null_mut();
        // SAFETY: the caller's promise; `module` is a valid out-pointer.
        let code =
            unsafe { (self.functions.hip_module_load_data)(&mut module, image.as_ptr().cast()) };
        self.check("hipModuleLoadData", code).map(|()| module)
    }
}

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
