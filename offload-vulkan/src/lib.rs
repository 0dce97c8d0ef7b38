//! # offload-vulkan
//!
//! The Vulkan compute backend of offload. Not implemented yet: this crate compiles so the facade's
//! `vulkan` feature builds everywhere, and it registers no platform. Asking for it with
//! `OFFLOAD_BACKENDS=vulkan` fails `init` with `Error::Unsupported` naming the backend.
//!
//! ```
//! assert_eq!(offload_vulkan::BACKEND, offload_core::BackendKind::Vulkan);
//! ```
#![forbid(unsafe_code)]

/// The backend family this crate will implement.
pub const BACKEND: offload_core::BackendKind = offload_core::BackendKind::Vulkan;
