//! CUDA C++ programs from source, compiled to PTX by NVRTC (`Program::from_source` with
//! `Source::cuda`).
//!
//! NVRTC is opened at run time, never linked (there is no CUDA toolkit at build time): at
//! the first time a CUDA device is asked for its CUDA compiler, once per process, under the
//! first of `libnvrtc.so`, `libnvrtc.so.13`, `.so.12`, `.so.11.2`, `.so.11.1`, `.so.11.0`
//! that loads. Its version and the architectures it compiles for are read then, once. A
//! machine without it answers `Error::Compile` naming every library tried and what the
//! dynamic loader said (the answer is kept: a library installed later is not seen by this
//! process); the rest of the backend works without it.
//!
//! The compiler a device reports is `nvrtc <major>.<minor>` for `compute_<XY>`: the
//! device's compute capability or, where NVRTC lists the architectures it supports (CUDA
//! 11.2 and later), the newest of them not newer than the device (PTX runs on newer devices
//! through the driver's JIT). A compile is one NVRTC program named `offload.cu`, compiled
//! with `--gpu-architecture=compute_<XY>` (unless the source's options name an architecture
//! themselves) followed by the source's options; a failure is `Error::Compile` with NVRTC's
//! log, and the program is destroyed on every path. The PTX goes back to the core, which
//! loads it like any image: inspected, then `cuModuleLoadDataEx`.
//!
//! NVRTC compiles C++: a kernel is found by its name only when declared `extern "C"`
//! (otherwise its name is mangled, `_Z7add_onePjj`).
//!
//! Tested only against a protocol-checking fake NVRTC (offload-driver/fake/fake_nvrtc.c);
//! no NVRTC was available to this project's machines.

use std::ffi::{CString, c_int};
use std::sync::OnceLock;

use offload_core::{BackendKind, CompilerId, Error, Language, Result, Source};
use offload_driver::Failure;

use crate::ffi::nvrtc::{NVRTC_ERROR_COMPILATION, Nvrtc};

/// The call a compile belongs to (the core compiles inside `Program::load`).
const CALL: &str = "Program::load";

/// The name NVRTC gives the source in its messages (`offload.cu(3): error: ...`).
const PROGRAM_NAME: &std::ffi::CStr = c"offload.cu";

/// NVRTC, opened, with what it said about itself.
struct Compiler {
    nvrtc: Nvrtc,
    /// `nvrtcVersion`.
    version: (c_int, c_int),
    /// SM numbers it compiles for, ascending; `None` where it cannot say (before 11.2).
    archs: Option<Vec<u32>>,
}

/// The process's NVRTC, or why there is none (the log of `Error::Compile`).
static COMPILER: OnceLock<std::result::Result<Compiler, String>> = OnceLock::new();

/// An `Error::Compile` of CUDA source with `log`.
fn compile_error(log: impl Into<String>) -> Error {
    Error::Compile {
        backend: BackendKind::Cuda,
        call: CALL,
        language: Language::Cuda,
        log: log.into(),
    }
}

/// Opens NVRTC and reads its version and architectures.
fn open() -> std::result::Result<Compiler, String> {
    let nvrtc = Nvrtc::open().map_err(|e| {
        if e.reason.starts_with("missing symbol") {
            format!("nvrtc unusable: {}: {}", e.library, e.reason)
        } else {
            format!("nvrtc not found: tried {}: {}", e.library, e.reason)
        }
    })?;
    let unusable = |failure: Failure| format!("nvrtc unusable: {}: {}", nvrtc.library(), failure);
    let version = nvrtc.version().map_err(unusable)?;
    let archs = match nvrtc.supported_archs() {
        None => None,
        Some(archs) => {
            let mut archs: Vec<u32> = archs
                .map_err(unusable)?
                .into_iter()
                .filter_map(|a| u32::try_from(a).ok())
                .collect();
            archs.sort_unstable();
            Some(archs)
        }
    };
    Ok(Compiler {
        nvrtc,
        version,
        archs,
    })
}

/// The process's NVRTC, opened at the first call.
fn compiler() -> Result<&'static Compiler> {
    COMPILER
        .get_or_init(open)
        .as_ref()
        .map_err(|log| compile_error(log.clone()))
}

/// The library NVRTC was loaded from, once a device was asked for its CUDA compiler and
/// found it.
pub(crate) fn library() -> Option<&'static str> {
    match COMPILER.get() {
        Some(Ok(compiler)) => Some(compiler.nvrtc.library()),
        _ => None,
    }
}

impl Compiler {
    /// The SM number to compile for on a device of compute capability `capability`.
    fn arch(&self, capability: (u32, u32)) -> Result<u32> {
        let device = capability.0 * 10 + capability.1;
        let Some(archs) = &self.archs else {
            return Ok(device);
        };
        if let Some(&arch) = archs.iter().rev().find(|&&a| a <= device) {
            return Ok(arch);
        }
        let (major, minor) = self.version;
        let listed: Vec<String> = archs.iter().map(|a| format!("compute_{a}")).collect();
        Err(compile_error(format!(
            "nvrtc {major}.{minor} compiles for {}; none runs on this device of compute \
             capability {}.{}",
            if listed.is_empty() {
                "no architecture".to_string()
            } else {
                listed.join(", ")
            },
            capability.0,
            capability.1
        )))
    }

    fn identity(&self) -> String {
        format!("nvrtc {}.{}", self.version.0, self.version.1)
    }
}

/// The compiler of CUDA source for a device of compute capability `capability`.
pub(crate) fn compiler_id(capability: (u32, u32)) -> Result<CompilerId> {
    let compiler = compiler()?;
    let arch = compiler.arch(capability)?;
    Ok(CompilerId::new(
        compiler.identity(),
        format!("compute_{arch}"),
    ))
}

/// Whether `option` chooses the architecture itself (`--gpu-architecture=…`, `-arch=…`,
/// `-arch …`).
fn names_architecture(option: &str) -> bool {
    ["--gpu-architecture", "-arch"]
        .iter()
        .any(|flag| option == *flag || option.starts_with(&format!("{flag}=")))
}

/// A C string of `text`, or the compile error that says where its NUL is.
fn c_string(what: &str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|e| {
        compile_error(format!(
            "the {what} holds a NUL byte at offset {}, which NVRTC cannot take",
            e.nul_position()
        ))
    })
}

/// Compiles CUDA `source` to PTX for a device of compute capability `capability`.
pub(crate) fn compile(source: &Source, capability: (u32, u32)) -> Result<Vec<u8>> {
    let compiler = compiler()?;
    let arch = compiler.arch(capability)?;
    let text = c_string("source", source.text())?;
    let mut options = Vec::with_capacity(source.options().len() + 1);
    if !source.options().iter().any(|o| names_architecture(o)) {
        options.push(c_string(
            "option",
            &format!("--gpu-architecture=compute_{arch}"),
        )?);
    }
    for option in source.options() {
        options.push(c_string("option", option)?);
    }
    let failed = |failure: Failure| compile_error(failure.message());
    // Destroyed when it goes out of scope, on every path below.
    let program = compiler
        .nvrtc
        .create_program(&text, PROGRAM_NAME)
        .map_err(failed)?;
    if let Err(failure) = program.compile(&options) {
        let log = program.log().unwrap_or_else(|e| format!("(no log: {e})"));
        let log = log.trim_end();
        return Err(compile_error(
            if failure.code == i64::from(NVRTC_ERROR_COMPILATION) && !log.is_empty() {
                log.to_string()
            } else if log.is_empty() {
                failure.message()
            } else {
                format!("{}: {log}", failure.message())
            },
        ));
    }
    let ptx = program.ptx().map_err(failed)?;
    drop(program);
    if ptx.is_empty() {
        return Err(compile_error("nvrtcGetPTX: NVRTC returned no PTX"));
    }
    Ok(ptx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architecture_options_are_recognised() {
        assert!(names_architecture("--gpu-architecture=compute_90"));
        assert!(names_architecture("-arch=sm_80"));
        assert!(names_architecture("-arch"));
        assert!(!names_architecture("-archive"));
        assert!(!names_architecture("-DARCH=1"));
    }

    #[test]
    fn a_nul_in_the_source_is_a_compile_error() {
        let Err(Error::Compile { log, .. }) = c_string("source", "int x;\0") else {
            panic!("a NUL must be refused");
        };
        assert!(log.contains("offset 6"), "{log}");
    }
}
