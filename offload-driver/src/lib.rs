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
//! - [`Counters`] and [`Stats`]: a backend's process-wide counts of platforms opened and
//!   deinitialised.
//! - [`pack_args`] and [`LaunchLimits`]: a launch's arguments checked against the image's
//!   parameters and packed, its geometry checked against the device.
//! - [`Uses`] and [`Stream`]: the streams whose queued work uses a buffer or a module.
//! - [`copy_within`]: a copy within one buffer up to the driver's copy (overlapping ranges
//!   staged through the host).
//! - [`HostThread`] and [`run_marked`]: host functions run on a thread of their queue,
//!   never on the driver's and never with a stream waiting for them (L6), their panic
//!   caught.
//! - [`StreamApi`] and the backend over it ([`StreamPlatform`], [`StreamDevice`],
//!   [`StreamBuffer`], [`StreamQueue`], [`StreamEvent`], [`StreamModule`],
//!   [`StreamKernel`]): the stream-based vendor APIs (CUDA's driver API, HIP's runtime API)
//!   as one `unsafe trait`, and everything offload builds on them written once; the CUDA
//!   and HIP crates implement the trait (its one-call methods from a table:
//!   [`stream_api_calls!`], [`device_calls!`]) and name the types
//!   ([`stream_backend_types!`]). [`check_symbol_table`] is what their tests of a
//!   [`functions!`] table ask.
//!
//! The harness that builds a fake driver with the C compiler and runs the backends' test
//! cases against it in child processes lives in the unpublished test crate
//! `offload-testing` (`fake`), with the conformance suite and the fault injection.
//!
//! This crate's `unsafe` code is in its ffi helpers (`ffi.rs`), the table that [`functions!`] expands to, and the calls the
//! stream-based backend (`stream_api/`) makes through [`StreamApi`], each resting on that
//! trait's safety contract; it owns no process-wide state.
//!
//! ```
//! use offload_driver::{Library, LoadError};
//! // SAFETY: no library of that name exists, so no initialiser runs.
//! let missing = unsafe { Library::open(&["liboffload-absent.so.1"]) };
//! let Err(LoadError { library, reason }) = missing else { unreachable!() };
//! assert_eq!(library, "liboffload-absent.so.1");
//! assert!(reason.starts_with("cannot open shared object file"), "{reason}");
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod counters;
mod failure;
// Opening libraries and reading their C strings.
#[allow(unsafe_code)]
mod ffi;
// `check_symbol_table` (its own narrow allow) loads tables of stand-ins, never called.
mod functions;
mod host_fn;
mod launch;
mod stream;
mod transfer;
// The backend over a stream-based vendor API (CUDA, HIP), generic over `StreamApi`: an
// `unsafe trait` whose contract its `unsafe` code relies on, each use narrowly allowed.
mod stream_api;

pub use counters::{Counters, Stats};
pub use failure::{Failure, LoadError, driver_not_found, no_device};
pub use ffi::{Library, Loaded, SymbolTable, static_text, text_of};
pub use functions::check_symbol_table;
pub use host_fn::{HostFailure, HostThread, Job, run_marked, running_host_fn, stream_key};
pub use launch::{LaunchLimits, Packed, pack_args};
pub use stream::{Stream, Uses};
pub use stream_api::{
    DeviceCore, OpenedApi, RawAddress, StreamApi, StreamBuffer, StreamDevice, StreamEvent,
    StreamKernel, StreamModule, StreamPlatform, StreamQueue, Word, Words,
};
pub use transfer::copy_within;
