//! The HIP runtime, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and the HIP calls that are more than a line of offload-driver's table, each returning
//! `Result` (cudarc's `result` layer). The device queries come from offload-driver's
//! `device_calls!` table.
//!
//! This module (with [`sys`], the raw table) is the crate's bindings; it never calls into
//! the crate's domain code. The `unsafe impl` of `offload_driver::StreamApi` over this
//! table is `crate::stream_api`'s (its one-call methods from `stream_api_calls!`); the
//! crate's only other `unsafe` code is platform.rs's device records (`DeviceCore::new`).
//! It decides nothing: which failures mean "no HIP here" is the platform's call
//! (`crate::platform::open`), and how a failure reads as an offload error is
//! `offload_driver::Failure`'s.

pub(crate) mod sys;

use std::ffi::{c_char, c_int, c_void};

use offload_driver::{Failure, LoadError, Loaded, static_text};

pub(crate) use sys::{
    HIP_ERROR_NO_DEVICE, HipDevice, HipDeviceAttribute, HipError, HipEvent, HipFunction, HipModule,
    HipStream,
};

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
    /// The symbol table (`crate::stream_api`'s generated calls read it).
    pub(crate) functions: Loaded<sys::Functions>,
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
    pub(crate) fn check(&self, function: &'static str, code: HipError) -> Result<(), Failure> {
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
