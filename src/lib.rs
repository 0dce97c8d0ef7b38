//! # offload
//!
//! One safe API over host (CPU), Vulkan, CUDA, HIP and Level Zero devices, with a
//! lifecycle that is correct by construction: any number of libraries in one process may
//! `init` and `shutdown` independently, again and again (also across `dlclose`/`dlopen`),
//! and every handle outliving its runtime answers [`Error::ShutDown`] instead of crashing.
//!
//! Backends are chosen with cargo features (`host`, the default; `vulkan`, `cuda`, `hip`,
//! `ze`). Drivers are opened at run time, never linked: a program built with every feature
//! starts anywhere and lists the platforms whose driver it found.
//!
//! ```
//! use offload::{BackendKind, MemKind, Offload};
//!
//! let rt = Offload::init()?;
//! let dev = rt.device(BackendKind::Host)?; // or rt.devices()? for every device
//! let buf = dev.alloc(4096, MemKind::Device)?;
//! buf.write(0, &[1u8; 4096])?;
//! let mut out = vec![0u8; 4096];
//! buf.read(0, &mut out)?;
//! assert_eq!(out, vec![1u8; 4096]);
//! rt.shutdown()?;
//! # Ok::<(), offload::Error>(())
//! ```
//!
//! A runtime that was shut down has no device methods (typestate, L3):
//!
//! ```compile_fail,E0599
//! let rt = offload::Offload::init().unwrap();
//! let down = rt.shutdown().unwrap();
//! let _ = down.devices(); // error: no method `devices` on `Offload<Shutdown>`
//! ```
//!
//! and neither does one still being configured:
//!
//! ```compile_fail,E0599
//! let _ = offload::Offload::builder().devices();
//! ```
//!
//! ## Configuration
//!
//! Defaults are overridden by environment variables, which are overridden by the builder;
//! the first `init` fixes the configuration and later ones share it (L5):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OFFLOAD_BACKENDS` | backends to open, e.g. `host,vulkan`; one whose driver is missing makes `init` fail; a list with no name (`,`) is an error, an empty value counts as unset | every compiled-in backend whose driver is found |
//! | `OFFLOAD_IPC_CACHE_SIZE` | entries in the sender-side IPC cache (0 disables) | 16 |
//! | `OFFLOAD_HOST_DEVICES` | CPU devices of the host backend | 1 |
//! | `OFFLOAD_TRACE` | write a Chrome time trace of init, platform opens, compiles, loads, launches, syncs, IPC sends and shutdown to this file at the deinitialising shutdown (`{pid}`: the process id; [`trace`], like Proteus's `PROTEUS_ENABLE_TIME_TRACE`) | off |
//! | `OFFLOAD_COMPILE_THREADS` | threads compiling programs in the background ([`Program::compile_in_background`]; Proteus's `PROTEUS_ASYNC_THREADS`); 0: none, programs compile at their first `load` | the number of CPUs, at most 8 |
//!
//! [`Offload::config`](offload_core::Offload::config) shows the configuration in force. A
//! plain `Offload::init()` while a runtime is live shares it whatever its configuration; a
//! builder that sets something explicitly (`backends`, `host_devices`, `ipc_cache_size`, `trace`)
//! that differs from what is in force gets `Error::InvalidArgument` from `start()` naming
//! both, instead of silently getting the other configuration:
//!
//! ```
//! use offload::{BackendKind, Error, Offload};
//! let first = Offload::builder().backends([BackendKind::Host]).start()?;
//! let e = Offload::builder().backends([BackendKind::Vulkan]).start().unwrap_err();
//! assert!(matches!(e, Error::InvalidArgument { .. }));
//! assert!(e.to_string().contains("backends: asked [vulkan], in force [host]"), "{e}");
//! // What is in force can always be asked for.
//! let second = Offload::builder().backends(first.config()?.backends.unwrap()).start()?;
//! assert_eq!(second.generation(), first.generation());
//! # Ok::<(), offload::Error>(())
//! ```
//!
//! ## Shutdown
//!
//! `shutdown()` gives back the reference whatever happens: `Ok` holds the
//! `Offload<Shutdown>`, and so does the [`ShutdownError`] of `Err`, with the errors of the
//! steps that failed. [`was_last`](offload_core::Offload::was_last) says whether the
//! runtime was deinitialised. `rt.shutdown()?` works in a function returning
//! [`Result`]. Initialisation and shutdown are logged with `tracing` (targets
//! `offload::init`, `offload::generation`, `offload::shutdown`) for the subscriber the
//! application installs.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use offload_core::{
    Arg, BackendKind, Buffer, BufferView, CallbackError, Caller, CompileKey, CompileStats,
    CompilerId, Config, DEFAULT_IPC_CACHE_SIZE, Device, DeviceInfo, Dims, Error, Event, GlobalInfo,
    Kernel, Language, MAX_DEFAULT_COMPILE_THREADS, MemKind, Module, ParamKind, PlatformInfo,
    Program, Queue, Ready, Result, Scalar, ScalarType, SharedCache, Shutdown, Source, TypedBuffer,
    Unavailable, Uninit, args, bytemuck, compile_stats, default_compile_threads, ipc,
    platform_open_attempts, set_shared_cache, take_unreported_errors,
};

pub mod plugin;
use plugin::Builtin;

pub use offload_core::trace;

/// The host backend crate, for its counters and raw platform type.
#[cfg(feature = "host")]
pub use offload_host as host;

/// The Vulkan backend crate, for its counters, options and device details.
#[cfg(feature = "vulkan")]
pub use offload_vulkan as vulkan;

/// The CUDA backend crate, for its counters and raw platform type.
#[cfg(feature = "cuda")]
pub use offload_cuda as cuda;

/// The HIP backend crate, for its counters and raw platform type.
#[cfg(feature = "hip")]
pub use offload_hip as hip;

/// The Level Zero backend crate, for its counters and raw platform type.
#[cfg(feature = "ze")]
pub use offload_ze as ze;

/// MPI integration (feature `mpi`): offload's shutdown hooked to `MPI_Finalize`, ranks as
/// IPC peers (see the `offload-mpi` crate).
#[cfg(feature = "mpi")]
pub use offload_mpi as mpi;

/// The offload runtime with the backends compiled into this build.
///
/// `Offload::init()` gives an `Offload<Ready>`; `Offload::builder()` an `Offload<Uninit>`
/// to configure, which `start()` turns into `Offload<Ready>`; `shutdown()` consumes it and
/// gives an `Offload<Shutdown>`.
///
/// ```
/// use offload::{BackendKind, Offload};
/// let rt = Offload::builder().backends([BackendKind::Host]).host_devices(2).start()?;
/// println!("{} devices", rt.devices()?.len());
/// let down = rt.shutdown()?;
/// println!("deinitialised: {}", down.was_last());
/// # Ok::<(), offload::Error>(())
/// ```
pub type Offload<S = Ready> = offload_core::Offload<S, Builtin>;

/// A [`shutdown`](offload_core::Offload::shutdown) that met errors, holding the shut-down
/// runtime ([`was_last`](offload_core::ShutdownError::was_last) says whether it was
/// deinitialised) and the errors. `?` turns it into an [`Error`].
///
/// ```
/// use offload::{Offload, ShutdownError};
/// fn close(rt: Offload) -> Result<bool, ShutdownError> {
///     let down = rt.shutdown()?;
///     Ok(down.was_last())
/// }
/// match close(Offload::init()?) {
///     Ok(deinitialised) => println!("deinitialised: {deinitialised}"),
///     Err(e) => {
///         eprintln!("{e}");
///         for error in e.errors() {
///             eprintln!("  {error}");
///         }
///     }
/// }
/// # Ok::<(), offload::Error>(())
/// ```
pub type ShutdownError = offload_core::ShutdownError<Builtin>;

/// The README's examples, compiled and run as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of the README's chapters (docs/), compiled and run as doctests like the
/// README's: one item per chapter (tests/user_crate.rs checks none is missing).
#[cfg(doctest)]
pub mod chapter_doctests {
    /// docs/architecture.md
    #[doc = include_str!("../docs/architecture.md")]
    pub struct Architecture;
    /// docs/backends.md
    #[doc = include_str!("../docs/backends.md")]
    pub struct Backends;
    /// docs/benchmarks.md
    #[doc = include_str!("../docs/benchmarks.md")]
    pub struct Benchmarks;
    /// docs/c-api.md
    #[doc = include_str!("../docs/c-api.md")]
    pub struct CApi;
    /// docs/configuration.md
    #[doc = include_str!("../docs/configuration.md")]
    pub struct Configuration;
    /// docs/contract.md
    #[doc = include_str!("../docs/contract.md")]
    pub struct Contract;
    /// docs/errors.md
    #[doc = include_str!("../docs/errors.md")]
    pub struct Errors;
    /// docs/gpu-kit.md
    #[doc = include_str!("../docs/gpu-kit.md")]
    pub struct GpuKit;
    /// docs/ipc.md
    #[doc = include_str!("../docs/ipc.md")]
    pub struct Ipc;
    /// docs/launches.md
    #[doc = include_str!("../docs/launches.md")]
    pub struct Launches;
    /// docs/liboffload.md
    #[doc = include_str!("../docs/liboffload.md")]
    pub struct Liboffload;
    /// docs/lifecycle.md
    #[doc = include_str!("../docs/lifecycle.md")]
    pub struct Lifecycle;
    /// docs/mpi.md
    #[doc = include_str!("../docs/mpi.md")]
    pub struct Mpi;
    /// docs/programs.md
    #[doc = include_str!("../docs/programs.md")]
    pub struct Programs;
    /// docs/python.md
    #[doc = include_str!("../docs/python.md")]
    pub struct Python;
    /// docs/queues.md
    #[doc = include_str!("../docs/queues.md")]
    pub struct Queues;
    /// docs/reliability.md
    #[doc = include_str!("../docs/reliability.md")]
    pub struct Reliability;
    /// docs/trace.md
    #[doc = include_str!("../docs/trace.md")]
    pub struct Trace;
}
