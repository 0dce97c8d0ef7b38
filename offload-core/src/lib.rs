//! # offload-core
//!
//! The backend-neutral core of offload: the [`Backend`] family trait and its erasure, the
//! reference-counted runtime lifecycle ([`Offload`], contract clauses L1–L5 of DESIGN.md),
//! the handles users hold ([`Device`], [`Buffer`]) and the one [`Error`] type.
//!
//! Users depend on the facade crate `offload`, which picks the backends by cargo feature.
//! The core is safe code; drivers and FFI live in the backend crates. The only `unsafe` here
//! is the registration of the exit hook with the C library.
//!
//! ```
//! use offload_core::{MemKind, reference::Offload};
//! let rt = Offload::init()?;
//! let dev = rt.devices()?.remove(0);
//! let buf = dev.alloc(4, MemKind::Device)?;
//! buf.write(0, &[1, 2, 3, 4])?;
//! rt.shutdown()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
mod dynamic;
mod error;
mod exit_hook;
mod handles;
mod program;
mod queue;
pub mod reference;
mod runtime;
mod sync;

pub use backend::{
    Backend, BackendKind, Compute, DeviceInfo, Dims, GlobalInfo, KernelArg, MemKind, ParamKind,
};
pub use config::{Config, DEFAULT_IPC_CACHE_SIZE};
pub use dynamic::{NoPlatforms, PlatformEntry, Platforms};
pub use error::{Error, Result};
pub use handles::{Buffer, Device};
pub use program::{CallbackError, Kernel, Module, Program};
pub use queue::{Arg, Event, Queue, Scalar};
pub use runtime::{
    Offload, PlatformInfo, Ready, Shutdown, Unavailable, Uninit, take_unreported_errors,
};
