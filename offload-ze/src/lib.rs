//! # offload-ze
//!
//! The Level Zero backend of offload. Not implemented yet: this crate compiles so the facade's
//! `ze` feature builds everywhere, and it registers no platform. Asking for it with
//! `OFFLOAD_BACKENDS=ze` fails `init` with `Error::Unsupported` naming the backend.
//!
//! ```
//! assert_eq!(offload_ze::BACKEND, offload_core::BackendKind::Ze);
//! ```
#![forbid(unsafe_code)]

/// The backend family this crate will implement.
pub const BACKEND: offload_core::BackendKind = offload_core::BackendKind::Ze;
