//! placeholder
pub use offload_core::*;
