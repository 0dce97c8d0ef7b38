//! # offload-core
//!
//! The backend-neutral core of offload, in four rooms, each above the one before:
//!
//! - [`hal`]: the trait family a backend implements — [`hal::Platform`] (one driver
//!   instance), [`hal::Device`] (memory, queues, events, loading), [`hal::Program`] (an
//!   image on one device: kernels, globals). liboffload calls these platform, device and
//!   program; CUDA calls them the driver, a device with its primary context, and a module.
//! - `erased`: the `dyn` mirror of the family (`DynPlatform`, `DynDevice`, `DynProgram`,
//!   `DynBuffer`, …), so one runtime holds platforms of different backends.
//! - `runtime`: one generation's state and its ordered shutdown (L4), and the
//!   reference-counted lifecycle ([`Offload`], L1–L3, L5).
//! - `handles`: what users hold ([`Device`], [`Buffer`], [`Program`], [`Module`],
//!   [`Kernel`], [`Queue`], [`Event`]), checking every call before a backend sees it.
//!
//! Users depend on the facade crate `offload`, which picks the backends by cargo feature.
//! The core is safe code; drivers and FFI live in the backend crates. The only `unsafe` here
//! is the registration of the exit hook with the C library. [`reference`](mod@reference) is a complete
//! in-memory backend (the test oracle and the documentation's backend).
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

mod compile;
#[cfg(feature = "conformance")]
pub mod conformance;
mod erased;
mod error;
#[cfg(feature = "conformance")]
pub mod faults;
pub mod hal;
mod handles;
pub mod ipc;
pub mod reference;
mod runtime;
mod sync;

/// Plain-old-data element types for [`TypedBuffer`]: derive `Pod` and `Zeroable` for your
/// own `#[repr(C)]` structs.
pub use bytemuck;
pub use compile::{CompileStats, compile_stats};
pub use erased::{NoPlatforms, PlatformEntry, Platforms};
pub use error::{Error, Result};
pub use hal::{
    BackendKind, CompilerId, DeviceInfo, Dims, GlobalInfo, KernelArg, Language, MemKind, ParamKind,
    ScalarType, Source,
};
pub use handles::{
    Arg, Buffer, BufferView, CallbackError, Device, Event, Kernel, Module, Program, Queue,
    STAGING_CHUNK, Scalar, TypedBuffer,
};
pub use runtime::config::{Config, DEFAULT_IPC_CACHE_SIZE, DEFAULT_IPC_UNMAP_TIMEOUT_MS};
pub use runtime::generation::Unavailable;
pub use runtime::lifecycle::{
    Offload, PlatformInfo, Ready, Shutdown, ShutdownError, Uninit, take_unreported_errors,
};
pub use runtime::platforms::platform_open_attempts;
