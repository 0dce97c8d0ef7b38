//! HIP programs' runtime-specific part: AMD GPU code objects (or a clang offload bundle of
//! one) are inspected before the runtime sees them ([`crate::image`]: ELF format,
//! `EM_AMDGPU`, target, kernels and their parameters from the `NT_AMDGPU_METADATA` note,
//! globals), then loaded with `hipModuleLoadData`; a refusal names the code object's
//! target. Modules, kernels, launches and globals are offload-driver's generic stream
//! backend ([`HipModule`](crate::HipModule) is `StreamModule<HipApi>`).
//!
//! Kernel parameters come from the metadata: a `global_buffer` is a buffer, a `by_value`
//! a scalar of its size; the hidden arguments are the runtime's. Globals are reached with
//! `hipModuleGetGlobal` and the synchronous copies, after the queued launches of the module.

use offload_core::{BackendKind, Error};
use offload_driver::Failure;

use crate::ffi::sys;
use crate::image::CodeObject;

/// A failed `hipModuleLoadData` of `object` as an offload error: a refused code object
/// is `InvalidBinary` naming its target, anything else the runtime's failure.
pub(crate) fn refused(failure: Failure, object: &CodeObject) -> Error {
    let refused = [
        sys::HIP_ERROR_INVALID_IMAGE,
        sys::HIP_ERROR_NO_BINARY_FOR_GPU,
    ];
    if refused.iter().any(|&c| i64::from(c) == failure.code) {
        Error::InvalidBinary {
            backend: BackendKind::Hip,
            call: "",
            reason: format!(
                "the runtime refused the {} code object: {failure}",
                object.target
            ),
        }
    } else {
        failure.into_error(BackendKind::Hip, "")
    }
}
