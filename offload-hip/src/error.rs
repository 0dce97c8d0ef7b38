//! Mapping HIP failures to offload errors.
//!
//! One function per kind of answer: an absent platform ([`driver_not_found`]: the library is
//! missing, lacks a symbol, cannot initialise or sees no device), a driver error
//! ([`map_hip_err`]: every other failed call, with the `hipError_t` kept as data), and memory
//! that this backend does not have yet ([`memory_unsupported`]). This module owns no state.

use offload_core::{BackendKind, Error};

use crate::ffi::Failure;

/// No usable HIP: `reason` says which step found that (the dynamic loader's message, a
/// missing symbol, or the HIP call and its code).
pub(crate) fn driver_not_found(library: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::DriverNotFound {
        backend: BackendKind::Hip,
        library: library.into(),
        reason: reason.into(),
    }
}

/// The one mapping from a failed HIP call to an offload error, for `call`.
pub(crate) fn map_hip_err(call: &'static str, failure: Failure) -> Error {
    Error::Driver {
        backend: BackendKind::Hip,
        call,
        code: i64::from(failure.code),
        message: failure.message(),
    }
}

/// Every memory call of this backend, until memory is implemented.
pub(crate) fn memory_unsupported(call: &'static str) -> Error {
    Error::Unsupported {
        backend: BackendKind::Hip,
        call,
        reason: "memory is not implemented for hip yet".into(),
    }
}
