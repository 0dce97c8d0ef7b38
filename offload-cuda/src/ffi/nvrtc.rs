//! NVRTC, the CUDA C++ runtime compiler, loaded at run time like the driver: its entry
//! points (`nvrtc.h`), the library guard ([`Nvrtc`]), and every call offload makes, each
//! returning `Result` with NVRTC's name for a failure. A program is a guard ([`Program`])
//! whose drop destroys it, so no path leaves one behind.
//!
//! NVIDIA ships the library as `libnvrtc.so.MAJOR` since CUDA 12, `libnvrtc.so.11.2` for
//! CUDA 11.2 to 11.8, and `libnvrtc.so.MAJOR.MINOR` before; the toolkit's development files
//! add the unversioned `libnvrtc.so`. Nothing here decides what a failure means to offload
//! (`crate::nvrtc` does).

use std::ffi::{CStr, CString, c_char, c_int, c_void};

use offload_driver::{Failure, LoadError, Loaded, static_text, text_of};

/// `nvrtcResult`: a C enum, `int`-sized.
pub(crate) type NvrtcResult = c_int;
/// `nvrtcProgram`, an opaque handle.
pub(crate) type NvrtcProgram = *mut c_void;

/// `NVRTC_SUCCESS`.
pub(crate) const NVRTC_SUCCESS: NvrtcResult = 0;
/// `NVRTC_ERROR_COMPILATION`: the source did not compile (the log says why).
pub(crate) const NVRTC_ERROR_COMPILATION: NvrtcResult = 6;

/// The names tried, in order: the toolkit's development link (whichever version it points
/// to), then the sonames of CUDA 13, 12, 11.2–11.8, 11.1 and 11.0.
pub(crate) const LIBRARIES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so.11.1",
    "libnvrtc.so.11.0",
];

offload_driver::functions! {
    api = "NVRTC";
    required {
        nvrtc_version = "nvrtcVersion": fn(*mut c_int, *mut c_int) -> NvrtcResult;
        nvrtc_create_program = "nvrtcCreateProgram": fn(
            *mut NvrtcProgram,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char
        ) -> NvrtcResult;
        nvrtc_compile_program =
            "nvrtcCompileProgram": fn(NvrtcProgram, c_int, *const *const c_char) -> NvrtcResult;
        nvrtc_get_program_log_size =
            "nvrtcGetProgramLogSize": fn(NvrtcProgram, *mut usize) -> NvrtcResult;
        nvrtc_get_program_log = "nvrtcGetProgramLog": fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
        nvrtc_get_ptx_size = "nvrtcGetPTXSize": fn(NvrtcProgram, *mut usize) -> NvrtcResult;
        nvrtc_get_ptx = "nvrtcGetPTX": fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
        nvrtc_destroy_program = "nvrtcDestroyProgram": fn(*mut NvrtcProgram) -> NvrtcResult;
        nvrtc_get_error_string = "nvrtcGetErrorString": fn(NvrtcResult) -> *const c_char;
    }
    optional {
        // Since CUDA 11.2.
        nvrtc_get_num_supported_archs =
            "nvrtcGetNumSupportedArchs": fn(*mut c_int) -> NvrtcResult;
        nvrtc_get_supported_archs = "nvrtcGetSupportedArchs": fn(*mut c_int) -> NvrtcResult;
    }
}

/// The opened NVRTC library and its entry points.
pub(crate) struct Nvrtc {
    functions: Loaded<Functions>,
}

impl Nvrtc {
    /// Opens the first of [`LIBRARIES`] that loads and reads its entry points.
    pub(crate) fn open() -> Result<Nvrtc, LoadError> {
        // SAFETY: dlopen runs NVRTC's initialisers, which only set up its own state (it stays
        // mapped: `RTLD_NODELETE`). Every address comes from that library for a name the
        // table declares with the signature `nvrtc.h` gives it.
        let functions = unsafe { Loaded::open(LIBRARIES) }?;
        Ok(Nvrtc { functions })
    }

    /// The name the library was found under.
    pub(crate) fn library(&self) -> &'static str {
        self.functions.library().name()
    }

    /// `nvrtcVersion`: (major, minor).
    pub(crate) fn version(&self) -> Result<(c_int, c_int), Failure> {
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: both are valid, writable ints for the duration of the call.
        let code = unsafe { (self.functions.nvrtc_version)(&mut major, &mut minor) };
        self.check("nvrtcVersion", code).map(|()| (major, minor))
    }

    /// `nvrtcGetSupportedArchs`: the SM numbers (`86` for compute capability 8.6) this NVRTC
    /// compiles for; `None` where it lacks the call (before CUDA 11.2).
    pub(crate) fn supported_archs(&self) -> Option<Result<Vec<c_int>, Failure>> {
        let count_of = self.functions.nvrtc_get_num_supported_archs?;
        let get = self.functions.nvrtc_get_supported_archs?;
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid, writable int.
        let code = unsafe { count_of(&mut count) };
        if let Err(failure) = self.check("nvrtcGetNumSupportedArchs", code) {
            return Some(Err(failure));
        }
        let mut archs: Vec<c_int> = vec![0; usize::try_from(count).unwrap_or(0)];
        if archs.is_empty() {
            return Some(Ok(archs));
        }
        // SAFETY: NVRTC writes exactly the `count` ints it just reported, and `archs` has
        // that many.
        let code = unsafe { get(archs.as_mut_ptr()) };
        Some(self.check("nvrtcGetSupportedArchs", code).map(|()| archs))
    }

    /// `nvrtcCreateProgram` of `source` called `name`, with no headers.
    pub(crate) fn create_program(
        &self,
        source: &CStr,
        name: &CStr,
    ) -> Result<Program<'_>, Failure> {
        let mut raw: NvrtcProgram = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `source` and `name` are NUL-terminated and
        // outlive the call (NVRTC copies them); no headers, so both header arrays may be
        // null.
        let code = unsafe {
            (self.functions.nvrtc_create_program)(
                &mut raw,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", code)?;
        Ok(Program { nvrtc: self, raw })
    }

    /// `Ok` for `NVRTC_SUCCESS`, else the failure with NVRTC's name for `code`.
    fn check(&self, function: &'static str, code: NvrtcResult) -> Result<(), Failure> {
        if code == NVRTC_SUCCESS {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString takes any code and returns a static NUL-terminated
        // string (or null, which `static_text` allows).
        let name = unsafe { static_text((self.functions.nvrtc_get_error_string)(code)) };
        Err(Failure::new(
            function,
            code,
            name.unwrap_or_else(|| "unknown nvrtcResult".into()),
        ))
    }
}

/// A live NVRTC program, destroyed (`nvrtcDestroyProgram`) when dropped.
pub(crate) struct Program<'a> {
    nvrtc: &'a Nvrtc,
    raw: NvrtcProgram,
}

impl Program<'_> {
    /// `nvrtcCompileProgram` with `options`.
    pub(crate) fn compile(&self, options: &[CString]) -> Result<(), Failure> {
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let count = c_int::try_from(pointers.len()).map_err(|_| {
            Failure::new("nvrtcCompileProgram", 3, "NVRTC_ERROR_INVALID_INPUT")
                .with_description(Some(format!("{} options", pointers.len())))
        })?;
        // SAFETY: the program is live (this guard owns it); `pointers` holds `count`
        // NUL-terminated strings, which `options` keeps alive during the call.
        let code = unsafe {
            (self.nvrtc.functions.nvrtc_compile_program)(self.raw, count, pointers.as_ptr())
        };
        self.nvrtc.check("nvrtcCompileProgram", code)
    }

    /// `nvrtcGetProgramLogSize` then `nvrtcGetProgramLog`: the compiler's messages.
    pub(crate) fn log(&self) -> Result<String, Failure> {
        let mut size: usize = 0;
        // SAFETY: the program is live; `size` is a valid, writable size_t.
        let code =
            unsafe { (self.nvrtc.functions.nvrtc_get_program_log_size)(self.raw, &mut size) };
        self.nvrtc.check("nvrtcGetProgramLogSize", code)?;
        if size == 0 {
            return Ok(String::new());
        }
        let mut log: Vec<c_char> = vec![0; size];
        // SAFETY: NVRTC writes the log, its NUL included, which is the `size` bytes it just
        // reported, and `log` has that many.
        let code =
            unsafe { (self.nvrtc.functions.nvrtc_get_program_log)(self.raw, log.as_mut_ptr()) };
        self.nvrtc.check("nvrtcGetProgramLog", code)?;
        Ok(text_of(&log))
    }

    /// `nvrtcGetPTXSize` then `nvrtcGetPTX`: the PTX text, without its NUL.
    pub(crate) fn ptx(&self) -> Result<Vec<u8>, Failure> {
        let mut size: usize = 0;
        // SAFETY: the program is live; `size` is a valid, writable size_t.
        let code = unsafe { (self.nvrtc.functions.nvrtc_get_ptx_size)(self.raw, &mut size) };
        self.nvrtc.check("nvrtcGetPTXSize", code)?;
        let mut ptx: Vec<u8> = vec![0; size];
        if size > 0 {
            // SAFETY: NVRTC writes the PTX, its NUL included, which is the `size` bytes it
            // just reported, and `ptx` has that many.
            let code =
                unsafe { (self.nvrtc.functions.nvrtc_get_ptx)(self.raw, ptx.as_mut_ptr().cast()) };
            self.nvrtc.check("nvrtcGetPTX", code)?;
        }
        let text = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
        ptx.truncate(text);
        Ok(ptx)
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: the program is live and destroyed once, here; NVRTC nulls `raw`. Nothing
        // can be done about a failure but to go on.
        let _ = unsafe { (self.nvrtc.functions.nvrtc_destroy_program)(&mut self.raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stands in for every entry point in the tests below; never called.
    extern "C" fn stub() {}

    #[test]
    fn a_missing_symbol_is_named_and_the_arch_queries_are_optional() {
        let stub = stub as *const c_void;
        // SAFETY: the table is only inspected for which symbol failed, never called.
        let missing = unsafe {
            Functions::load(|name| {
                if name == "nvrtcGetPTX" {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        assert_eq!(missing.err(), Some("nvrtcGetPTX"));
        // SAFETY: as above.
        let old = unsafe {
            Functions::load(|name| {
                if name.contains("SupportedArchs") {
                    std::ptr::null()
                } else {
                    stub
                }
            })
        };
        let Ok(old) = old else {
            panic!("every required symbol was given");
        };
        assert!(old.nvrtc_get_supported_archs.is_none());
    }

    #[test]
    fn the_names_start_with_the_development_link_then_newest_first() {
        assert_eq!(LIBRARIES[0], "libnvrtc.so");
        assert_eq!(LIBRARIES[2], "libnvrtc.so.12");
    }
}
