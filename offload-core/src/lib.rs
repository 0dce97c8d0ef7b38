//! # offload-core
//!
//! The backend-neutral core of offload, in layers: each module uses only the ones before it
//! in this list (`scripts/layers.sh` checks it, and CI runs it).
//!
//! - `sync` and `vocab`: the lock shim, and the plain values everything shares
//!   ([`BackendKind`], [`MemKind`], [`DeviceInfo`], [`Dims`], [`Source`], …).
//! - `json`: the one JSON string escaper (the trace's and `offload-info --json`'s).
//! - `error` ([`Error`]) and `config` ([`Config`]); [`trace`]: the Chrome time trace of
//!   the runtime's spans (`OFFLOAD_TRACE`), which the runtime arms and writes.
//! - [`hal`]: the trait family a backend implements — [`hal::Platform`] (one driver
//!   instance), [`hal::Device`] (memory, queues, events, loading), [`hal::Program`] (an
//!   image on one device: kernels, globals). liboffload calls these platform, device and
//!   program; CUDA calls them the driver, a device with its primary context, and a module.
//! - `erased`: the `dyn` mirror of the family (`DynPlatform`, `DynDevice`, `DynProgram`,
//!   `DynBuffer`, …), so one runtime holds platforms of different backends; `compile`: the
//!   compile-once cache of programs from source.
//! - `runtime`: one generation's state and its ordered shutdown (L4), its platforms opened
//!   on first use, and the process-wide reference-counted lifecycle (L1, L2, L6). What a
//!   module above keeps per generation (the IPC state) is an extension it registers, not a
//!   field the runtime names.
//! - `handles`: what users hold ([`Device`], [`Buffer`], [`Program`], [`Module`],
//!   [`Kernel`], [`Queue`], [`Event`]), checking every call before a backend sees it.
//! - [`ipc`]: sharing memory with other processes — export and import of buffers,
//!   endpoints, the sender-side cache.
//! - `typestate`: the runtime handle users hold ([`Offload`] in `Uninit`, `Ready`,
//!   `Shutdown`; L3, L5), and `select` (which devices can run a program).
//! - [`reference`](mod@reference): the in-memory backend, built on all of the above (the
//!   test machinery — conformance suite, fault injection — is the unpublished crate
//!   `offload-testing`).
//!
//! Users depend on the facade crate `offload`, which picks the backends by cargo feature.
//! The core is safe code; drivers and FFI live in the backend crates. The only `unsafe` here
//! is the registration of the exit hook with the C library. [`reference`](mod@reference) is a
//! complete in-memory backend (the test oracle and the documentation's backend).
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
mod config;
mod erased;
mod error;
pub mod hal;
mod handles;
pub mod ipc;
/// The JSON string escaper the trace and `offload-info --json` share (not a user API).
#[doc(hidden)]
pub mod json;
/// The model check (only with `--cfg offload_model`; run by `scripts/model.sh`).
#[cfg(offload_model)]
#[doc(hidden)]
pub mod model;
pub mod reference;
mod runtime;
mod select;
mod sync;
pub mod trace;
mod typestate;
mod vocab;

/// Plain-old-data element types for [`TypedBuffer`]: derive `Pod` and `Zeroable` for your
/// own `#[repr(C)]` structs, with `#[bytemuck(crate = "offload::bytemuck")]` where your
/// crate has no `bytemuck` dependency of its own (the derive names `::bytemuck` otherwise).
pub use bytemuck;
pub use compile::{CompileKey, CompileStats, SharedCache, compile_stats, set_shared_cache};
pub use config::{
    Config, DEFAULT_IPC_CACHE_SIZE, DEFAULT_IPC_UNMAP_TIMEOUT_MS, MAX_DEFAULT_COMPILE_THREADS,
    default_compile_threads,
};
pub use erased::{NoPlatforms, PlatformEntry, Platforms};
pub use error::{Caller, Error, Result};
pub use hal::{
    BackendKind, CompilerId, DeviceInfo, Dims, GlobalInfo, KernelArg, Language, MemKind, ParamKind,
    ScalarType, Source,
};
pub use handles::{
    Arg, Buffer, BufferView, CallbackError, Device, Event, Kernel, Module, Program, Queue,
    STAGING_CHUNK, Scalar, TypedBuffer,
};
pub use runtime::platforms::Unavailable;
pub use runtime::platforms::platform_open_attempts;
pub use runtime::unreported::take_unreported_errors;
pub use typestate::{Offload, PlatformInfo, Ready, Shutdown, ShutdownError, Uninit};
