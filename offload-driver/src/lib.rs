//! # offload-driver
//!
//! What the backends over a vendor's C driver (offload-cuda, offload-hip, offload-ze) share,
//! so that each of them writes only its driver-specific part:
//!
//! - [`functions!`]: a symbol table of required `unsafe extern "C" fn`s and optional
//!   `Option<fn>`s, filled through a lookup closure (ash's loaders).
//! - [`Library`] and [`Loaded`]: the driver opened at run time under the first of several
//!   candidate names, the guard shared in an `Arc` by everything that calls into it
//!   (cudarc's children keep their parents alive); [`text_of`] and [`static_text`] read the
//!   C strings drivers hand back.
//! - [`Failure`] and [`LoadError`]: a failed driver call, or a driver that cannot be used,
//!   and their one mapping each to an offload error.
//! - [`Driver`] and [`Platform`]: a device-only platform. A backend implements [`Driver`]
//!   (open, describe a device); [`Platform`] is the `offload_core::hal::Platform` over it,
//!   whose memory, programs and queues answer `Error::Unsupported`.
//! - [`pack_args`] and [`LaunchLimits`]: a launch's arguments checked against the image's
//!   parameters and packed, its geometry checked against the device.
//! - [`Uses`], [`Stream`], [`HostCallback`] and [`host_trampoline`]: the streams whose
//!   queued work uses a buffer, and host functions run on a driver thread with their panic
//!   caught (the CUDA and HIP backends' queues).
//! - `testing` (cargo feature `testing`): the harness that builds a fake driver with the C
//!   compiler and runs test cases against it in child processes.
//!
//! This crate's only `unsafe` code is in its ffi helpers (`ffi.rs`), the host-function
//! callback (`stream.rs`) and the table that [`functions!`] expands to; it owns no
//! process-wide state.
//!
//! ```
//! use offload_driver::{Library, LoadError};
//! // SAFETY: no library of that name exists, so no initialiser runs.
//! let missing = unsafe { Library::open(&["liboffload-absent.so.1"]) };
//! let Err(LoadError { library, reason }) = missing else { unreachable!() };
//! assert_eq!(library, "liboffload-absent.so.1");
//! assert!(reason.starts_with("liboffload-absent.so.1"), "{reason}");
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod failure;
// The crate's only unsafe code: opening libraries and reading their C strings.
#[allow(unsafe_code)]
mod ffi;
mod functions;
mod launch;
mod platform;
// Host functions cross into C callbacks: the box handed to the driver and taken back.
#[allow(unsafe_code)]
mod stream;
#[cfg(feature = "testing")]
pub mod testing;

pub use failure::{Failure, LoadError, driver_not_found, memory_unsupported};
pub use ffi::{Library, Loaded, SymbolTable, static_text, text_of};
pub use launch::{LaunchLimits, Packed, pack_args};
pub use platform::{Counters, Device, Driver, Opened, Platform, Stats};
pub use stream::{HostCallback, HostFailure, Stream, Uses, host_trampoline};
