//! # offload-hip
//!
//! The HIP backend of offload. Not implemented yet: this crate compiles so the facade's
//! `hip` feature builds everywhere, and it registers no platform. Asking for it with
//! `OFFLOAD_BACKENDS=hip` fails `init` with `Error::Unsupported` naming the backend.
//!
//! ```
//! assert_eq!(offload_hip::BACKEND, offload_core::BackendKind::Hip);
//! ```
#![forbid(unsafe_code)]

/// The backend family this crate will implement.
pub const BACKEND: offload_core::BackendKind = offload_core::BackendKind::Hip;
