//! Mapping Level Zero failures to offload errors.
//!
//! One function per kind of answer: an absent platform ([`driver_not_found`]: the loader is
//! missing, lacks a symbol, initialises no driver or finds no device), a driver error
//! ([`map_ze_err`]: every other failed call, with the `ze_result_t` kept as data), and memory
//! that this backend does not have yet ([`memory_unsupported`]). This module owns no state.

use offload_core::{BackendKind, Error};

use crate::ffi::Failure;

/// No usable Level Zero: `reason` says which step found that (the dynamic loader's message,
/// a missing symbol, or the call and its code).
pub(crate) fn driver_not_found(library: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::DriverNotFound {
        backend: BackendKind::Ze,
        library: library.into(),
        reason: reason.into(),
    }
}

/// The one mapping from a failed Level Zero call to an offload error, for `call`.
pub(crate) fn map_ze_err(call: &'static str, failure: Failure) -> Error {
    Error::Driver {
        backend: BackendKind::Ze,
        call,
        code: i64::from(failure.code),
        message: failure.to_string(),
    }
}

/// Every memory call of this backend, until memory is implemented.
pub(crate) fn memory_unsupported(call: &'static str) -> Error {
    Error::Unsupported {
        backend: BackendKind::Ze,
        call,
        reason: "memory is not implemented for ze yet".into(),
    }
}
