//! CUDA programs' driver-specific part: PTX text and cubin/fatbin images are inspected
//! before the driver sees them ([`crate::image`]: format, target architecture against the
//! device's compute capability, kernels and their parameters, globals), then loaded with
//! `cuModuleLoadDataEx`, whose JIT error log is returned inside `Error::InvalidBinary`.
//! Modules, kernels, launches and globals are offload-driver's generic stream backend
//! ([`CudaModule`](crate::CudaModule) is `StreamModule<CudaApi>`).
//!
//! Kernel parameters come from the image: a `.ptr` (or untyped 64-bit) PTX parameter is a
//! buffer, any other a scalar of its size; parameters of more than 8 bytes (structs by
//! value) make the kernel `Unsupported`. Globals are reached with `cuModuleGetGlobal` and
//! the synchronous copies, after the queued launches of the module (`__constant__` memory
//! too: the host sets it this way).

use offload_core::{BackendKind, Error, ParamKind, Result};

use crate::ffi::calls::LoadFailure;
use crate::ffi::sys;
use crate::image::{ImageKind, Inspected};

/// The parameters of kernel `name` as offload passes them; `None` if the image has no
/// such kernel.
pub(crate) fn kernel_params(inspected: &Inspected, name: &str) -> Option<Result<Vec<ParamKind>>> {
    let entry = inspected.entries.iter().find(|e| e.name == name)?;
    let mut params = Vec::with_capacity(entry.params.len());
    for (i, p) in entry.params.iter().enumerate() {
        params.push(match (p.pointer, p.size) {
            (Some(true), _) | (None, 8) => ParamKind::Buffer,
            (_, 1 | 2 | 4 | 8) => match p.ty {
                Some(ty) => ParamKind::Typed(ty),
                None => ParamKind::Scalar(p.size as usize),
            },
            (_, size) => {
                return Some(Err(Error::Unsupported {
                    backend: BackendKind::Cuda,
                    call: "",
                    reason: format!(
                        "cuda kernel `{name}`: parameter {i} (`{}`) is {size} bytes; \
                         offload passes buffers and scalars of 1, 2, 4 or 8 bytes",
                        p.name
                    ),
                }));
            }
        });
    }
    Some(Ok(params))
}

/// The bytes the driver loads: the image, NUL-terminated if it is PTX (the driver reads
/// PTX as a C string).
pub(crate) fn module_bytes(image: &[u8], inspected: &Inspected) -> Vec<u8> {
    let mut bytes = image.to_vec();
    if inspected.kind == ImageKind::Ptx && image.last() != Some(&0) {
        bytes.push(0);
    }
    bytes
}

/// A failed `cuModuleLoadDataEx` as an offload error: a refused image is
/// `InvalidBinary` with the JIT log, anything else the driver's failure.
pub(crate) fn refused(failed: LoadFailure) -> Error {
    let code = failed.failure.code;
    let refused = [
        sys::CUDA_ERROR_INVALID_IMAGE,
        sys::CUDA_ERROR_INVALID_PTX,
        sys::CUDA_ERROR_NO_BINARY_FOR_GPU,
    ];
    if refused.iter().any(|&c| i64::from(c) == code) {
        let log = if failed.log.is_empty() {
            String::new()
        } else {
            format!("; JIT log: {}", failed.log)
        };
        Error::InvalidBinary {
            backend: BackendKind::Cuda,
            call: "",
            reason: format!("the driver refused it: {}{log}", failed.failure),
        }
    } else {
        failed.failure.into_error(BackendKind::Cuda, "")
    }
}
