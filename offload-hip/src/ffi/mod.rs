//! The HIP runtime, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every HIP call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! This module (with [`sys`], the raw table) is the crate's only `unsafe` code. It decides
//! nothing: which failures mean "no HIP here" is the platform's call (`crate::open`), and
//! how a failure reads as an offload error is `offload_driver::Failure`'s.

mod sys;

use std::ffi::{c_char, c_int};

use offload_driver::{Failure, LoadError, Loaded, static_text, text_of};

pub(crate) use sys::{HIP_ERROR_NO_DEVICE, HipDevice, HipError};

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
