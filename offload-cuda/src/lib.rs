//! # offload-cuda
//!
//! The CUDA driver API backend of offload. Not implemented yet: this crate compiles so the facade's
//! `cuda` feature builds everywhere, and it registers no platform. Asking for it with
//! `OFFLOAD_BACKENDS=cuda` fails `init` with `Error::Unsupported` naming the backend.
//!
//! ```
//! assert_eq!(offload_cuda::BACKEND, offload_core::BackendKind::Cuda);
//! ```
#![forbid(unsafe_code)]

/// The backend family this crate will implement.
pub const BACKEND: offload_core::BackendKind = offload_core::BackendKind::Cuda;
