//! The HIP runtime, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every HIP call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! This module (with [`sys`], the raw table) is the crate's only `unsafe` code. It decides
//! nothing: which failures mean "no HIP here" is the platform's call (`crate::open`), and
//! how a failure reads as an offload error is `crate::error`'s.

mod sys;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::fmt;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

pub(crate) use sys::{HIP_ERROR_NO_DEVICE, HipDevice, HipError};

/// The names the HIP runtime is looked for under, in order: the development link, then the
/// ROCm 7, 6 and 5 sonames.
pub(crate) const LIBRARIES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// A HIP call that failed: the entry point, its code, and the runtime's words for it.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// The entry point (`hipInit`, …).
    pub(crate) function: &'static str,
    /// The `hipError_t` it returned.
    pub(crate) code: HipError,
    /// The code's name (`hipErrorNoDevice`), or `unknown hipError_t`.
    pub(crate) name: String,
    /// The runtime's description of the code, where it gives one besides the name.
    pub(crate) description: Option<String>,
}

impl fmt::Display for Failure {
    /// `hipGetDeviceCount: hipErrorNoDevice (100)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.function, self.name, self.code)
    }
}

impl Failure {
    /// The failure with the runtime's description, where it has one.
    pub(crate) fn message(&self) -> String {
        match &self.description {
            Some(description) => format!("{self}: {description}"),
            None => self.to_string(),
        }
    }
}

/// Why the HIP runtime cannot be used: no name loaded, or the one that did lacks a symbol.
#[derive(Debug)]
pub(crate) struct LoadError {
    /// The library (or the names) that were looked for.
    pub(crate) library: String,
    /// What the dynamic loader said for each name, or `missing symbol X`.
    pub(crate) reason: String,
}

/// The opened HIP runtime and its entry points. Whatever calls HIP holds this in an `Arc`,
/// so the table never outlives the library it points into.
pub(crate) struct Driver {
    functions: sys::Functions,
    /// The name the runtime was found under.
    library: &'static str,
    /// Keeps the library open (declared last: dropped after the table).
    _library: Library,
}

impl Driver {
    /// Opens the first of [`LIBRARIES`] that loads and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        let mut errors = Vec::new();
        for name in LIBRARIES {
            // SAFETY: dlopen runs the runtime's initialisers, which only set up its own
            // state and are sound to run at any time. RTLD_NODELETE keeps it mapped after
            // the last dlclose: HIP has no deinitialisation, and after hipInit its threads
            // (and ROCr's) run its code, so unmapping it would pull code from under them. A
            // later open just finds it again.
            match unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE) }
            {
                Ok(library) => return Driver::with_library(name, library),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(LoadError {
            library: LIBRARIES.join(", "),
            reason: errors.join("; "),
        })
    }

    fn with_library(name: &'static str, library: Library) -> Result<Driver, LoadError> {
        // SAFETY: every address comes from the HIP runtime for a name `sys` declares with
        // the signature `hip_runtime_api.h` gives it; the table is stored beside the library
        // guard, which keeps the addresses valid for as long as the table exists.
        let functions = unsafe { sys::Functions::load(|symbol| lookup(&library, symbol)) }
            .map_err(|missing| LoadError {
                library: name.into(),
                reason: format!("missing symbol {missing}"),
            })?;
        Ok(Driver {
            functions,
            library: name,
            _library: library,
        })
    }

    /// The name the runtime was found under (`libamdhip64.so.6`, …).
    pub(crate) fn library(&self) -> &'static str {
        self.library
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
        Err(Failure {
            function,
            code,
            name,
            description,
        })
    }
}

/// The address of `name` in `library`, or null when it has none.
fn lookup(library: &Library, name: &str) -> *const c_void {
    // SAFETY: the symbol is taken as an untyped address, which is sound whatever it is;
    // `sys::Functions::load` gives it its type.
    match unsafe { library.get::<*const c_void>(name.as_bytes()) } {
        Ok(symbol) => symbol.into_raw().cast_const(),
        Err(_) => std::ptr::null(),
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
    if text.is_null() {
        return None;
    }
    // SAFETY: the runtime returns a static NUL-terminated string; it is copied at once.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The text of a buffer the runtime filled with a NUL-terminated string (all of it if it
/// wrote no NUL).
fn text_of(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
