//! The CUDA driver, loaded at run time: the library guard and its symbol table ([`Driver`]),
//! and every driver call offload makes, each returning `Result` (cudarc's `result` layer).
//!
//! This module (with [`sys`], the raw table) is the crate's only `unsafe` code. It decides
//! nothing: which failures mean "no CUDA here" is the platform's call (`crate::open`), and
//! how a failure reads as an offload error is `crate::error`'s.

mod sys;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::fmt;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

pub(crate) use sys::{CUDA_ERROR_NO_DEVICE, CuDevice, CuResult};

/// The library the backend opens: the CUDA driver (never the runtime `libcudart`).
pub(crate) const LIBRARY: &str = "libcuda.so.1";

/// A driver call that failed: the entry point, its code, and the driver's words for it.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// The entry point (`cuInit`, …).
    pub(crate) function: &'static str,
    /// The `CUresult` it returned.
    pub(crate) code: CuResult,
    /// The code's name (`CUDA_ERROR_NO_DEVICE`), or `unknown CUresult`.
    pub(crate) name: String,
    /// The driver's description of the code, where it gives one.
    pub(crate) description: Option<String>,
}

impl fmt::Display for Failure {
    /// `cuInit: CUDA_ERROR_NO_DEVICE (100)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.function, self.name, self.code)
    }
}

impl Failure {
    /// The failure with the driver's description: `cuInit: CUDA_ERROR_NO_DEVICE (100): no
    /// CUDA-capable device is detected`.
    pub(crate) fn message(&self) -> String {
        match &self.description {
            Some(description) => format!("{self}: {description}"),
            None => self.to_string(),
        }
    }
}

/// Why the driver library cannot be used: it did not load, or lacks a required symbol.
#[derive(Debug)]
pub(crate) struct LoadError {
    /// The library that was looked for.
    pub(crate) library: String,
    /// What the dynamic loader said, or `missing symbol X`.
    pub(crate) reason: String,
}

/// The opened driver library and its entry points. Whatever calls the driver holds this in
/// an `Arc`, so the table never outlives the library it points into.
pub(crate) struct Driver {
    functions: sys::Functions,
    /// Keeps the library open (declared last: dropped after the table).
    _library: Library,
}

impl Driver {
    /// Opens [`LIBRARY`] and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        // SAFETY: dlopen runs the driver's initialisers, which only set up its own state and
        // are sound to run at any time. RTLD_NODELETE keeps the driver mapped after the last
        // dlclose: it has no deinitialisation, and after cuInit its own threads run its code,
        // so unmapping it would pull code from under them. A later open just finds it again.
        let library =
            unsafe { Library::open(Some(LIBRARY), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE) }
                .map_err(|e| LoadError {
                    library: LIBRARY.into(),
                    reason: e.to_string(),
                })?;
        // SAFETY: every address comes from libcuda for a name `sys` declares with the
        // signature `cuda.h` gives it; the table is stored beside the library guard, which
        // keeps the addresses valid for as long as the table exists.
        let functions =
            unsafe { sys::Functions::load(|name| lookup(&library, name)) }.map_err(|missing| {
                LoadError {
                    library: LIBRARY.into(),
                    reason: format!("missing symbol {missing}"),
                }
            })?;
        Ok(Driver {
            functions,
            _library: library,
        })
    }

    /// `cuInit(0)`.
    pub(crate) fn init(&self) -> Result<(), Failure> {
        // SAFETY: cuInit takes its flags by value; 0 is the documented value.
        let code = unsafe { (self.functions.cu_init)(0) };
        self.check("cuInit", code)
    }

    /// `cuDeviceGetCount`.
    pub(crate) fn device_count(&self) -> Result<c_int, Failure> {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid, writable int for the duration of the call.
        let code = unsafe { (self.functions.cu_device_get_count)(&mut count) };
        self.check("cuDeviceGetCount", code).map(|()| count)
    }

    /// `cuDeviceGet`: the handle of device `ordinal`.
    pub(crate) fn device(&self, ordinal: c_int) -> Result<CuDevice, Failure> {
        let mut device: CuDevice = 0;
        // SAFETY: `device` is a valid, writable CUdevice; a bad ordinal is an error code.
        let code = unsafe { (self.functions.cu_device_get)(&mut device, ordinal) };
        self.check("cuDeviceGet", code).map(|()| device)
    }

    /// `cuDeviceGetName`.
    pub(crate) fn device_name(&self, device: CuDevice) -> Result<String, Failure> {
        let mut name: [c_char; 256] = [0; 256];
        let len = c_int::try_from(name.len()).unwrap_or(c_int::MAX);
        // SAFETY: the driver writes at most `len` bytes, its NUL included, into `name`,
        // which has exactly that many.
        let code = unsafe { (self.functions.cu_device_get_name)(name.as_mut_ptr(), len, device) };
        self.check("cuDeviceGetName", code).map(|()| text_of(&name))
    }

    /// `cuDeviceTotalMem_v2`, in bytes.
    pub(crate) fn total_memory(&self, device: CuDevice) -> Result<u64, Failure> {
        let mut bytes: usize = 0;
        // SAFETY: `bytes` is a valid, writable size_t for the duration of the call.
        let code = unsafe { (self.functions.cu_device_total_mem)(&mut bytes, device) };
        self.check("cuDeviceTotalMem_v2", code)
            .map(|()| bytes as u64)
    }

    /// `cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)`.
    pub(crate) fn multiprocessor_count(&self, device: CuDevice) -> Result<c_int, Failure> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid, writable int; the attribute is a documented one.
        let code = unsafe {
            (self.functions.cu_device_get_attribute)(
                &mut value,
                sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                device,
            )
        };
        self.check("cuDeviceGetAttribute", code).map(|()| value)
    }

    /// `cuDriverGetVersion` (`1000 × major + 10 × minor`), where the driver has it.
    pub(crate) fn driver_version(&self) -> Option<c_int> {
        let get = self.functions.cu_driver_get_version?;
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid, writable int; the call needs no cuInit.
        let code = unsafe { get(&mut version) };
        (code == sys::CUDA_SUCCESS).then_some(version)
    }

    /// `Ok` for `CUDA_SUCCESS`, else the failure with the driver's names for `code`.
    fn check(&self, function: &'static str, code: CuResult) -> Result<(), Failure> {
        if code == sys::CUDA_SUCCESS {
            return Ok(());
        }
        let name = result_text(self.functions.cu_get_error_name, code)
            .or_else(|| {
                sys::KNOWN_RESULTS
                    .iter()
                    .find(|(known, _)| *known == code)
                    .map(|(_, name)| (*name).to_string())
            })
            .unwrap_or_else(|| "unknown CUresult".into());
        Err(Failure {
            function,
            code,
            name,
            description: result_text(self.functions.cu_get_error_string, code),
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

/// `cuGetErrorName` / `cuGetErrorString` for `code`, where the driver has them and knows it.
fn result_text(
    get: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    code: CuResult,
) -> Option<String> {
    let get = get?;
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: `text` is a valid out-pointer; the call needs no cuInit.
    let status = unsafe { get(code, &mut text) };
    if status != sys::CUDA_SUCCESS || text.is_null() {
        return None;
    }
    // SAFETY: on success the driver points `text` at a static NUL-terminated string; it is
    // copied at once.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The text of a buffer the driver filled with a NUL-terminated string (all of it if the
/// driver wrote no NUL).
fn text_of(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
