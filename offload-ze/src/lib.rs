//! # offload-ze
//!
//! The Level Zero backend of offload, for Intel GPUs (and other oneAPI devices). The Level
//! Zero loader (`libze_loader.so.1`), which finds and loads the drivers, is opened at run
//! time with libloading, never linked: this crate builds and starts on any Linux machine, and
//! a machine without Level Zero simply has no Level Zero platform.
//!
//! What it does: devices, memory, queues, events, programs (SPIR-V and native binaries),
//! globals and IPC.
//!
//! - **Platform** ([`ZePlatform`]): opening it loads the loader, reads its entry points,
//!   calls `zeInit(0)`, lists the drivers (`zeDriverGet`) and their devices (`zeDeviceGet`),
//!   and makes one context per driver (`zeContextCreate`), destroyed with the last object
//!   made in it. A missing loader or a missing required symbol is `Error::DriverNotFound`
//!   with the dynamic loader's message (or `missing symbol X`); so is a loader that
//!   initialises no driver, with a reason naming the call and its code. Drivers that find
//!   no device are `Error::NoDevice`.
//!   The loader without any driver installed answers `zeInit: ZE_RESULT_ERROR_UNINITIALIZED
//!   (0x78000001): no Level Zero driver could be initialised`. The runtime then lists the
//!   platform as unavailable with that reason: a missing driver is an absent platform,
//!   never a panic. Other failures are `Error::Driver` with the `ze_result_t` as `code`.
//! - **Devices** ([`ZeDevice`]): every root device of every driver, drivers in the loader's
//!   order. `info` gives the device's name, its vendor (`Intel` for PCI vendor 0x8086), the
//!   sum of its memories' sizes, its execution units (slices × sub-slices per slice × EUs
//!   per sub-slice), and the work-group limits of `zeDeviceGetComputeProperties`.
//! - **Memory** ([`ZeBuffer`]): `MemKind::Device` is `zeMemAllocDevice`, `Host`
//!   `zeMemAllocHost`, `Shared` `zeMemAllocShared`; out of memory is `Error::OutOfMemory`
//!   naming the size. The host's copies and fills go through a synchronous immediate
//!   command list of the device, after the queued work on the buffer; host and shared
//!   memory can be touched in place (`with_mapped`).
//! - **Queues** ([`ZeQueue`], [`ZeEvent`]): asynchronous immediate command lists whose
//!   commands are chained by events into an in-order stream; launches, queued writes,
//!   fills (`zeCommandListAppendMemoryFill`) and copies return once appended (Q1); events
//!   time with kernel timestamps. **Host functions**: Level Zero has no host callback, so a
//!   thread of the queue waits for the work before the function, runs it and signals the
//!   event the work after it waits for; the queue joins its threads at `sync` and when it
//!   is destroyed (see `queue.rs`). Fences are not used: immediate command lists have no
//!   command queue to fence, and events do all the waiting.
//! - **Programs** ([`ZeModule`], [`ZeKernel`]): SPIR-V modules (OpenCL flavour) are
//!   validated and reflected before the driver sees them (kernels and their parameters,
//!   globals: offload-spirv's job, see `spirv.rs`), then built by `zeModuleCreate`; a
//!   malformed image never reaches it. Native binaries (an ELF for `EM_INTELGT`) are built
//!   as `ZE_MODULE_FORMAT_NATIVE`; their kernels take no arguments as far as offload can
//!   tell. A build failure is `Error::InvalidBinary` with the driver's build log. Launches
//!   check their arguments against the parameters (`offload_driver::pack_args`) and the
//!   geometry against the device, then `zeKernelSetGroupSize`,
//!   `zeKernelSetArgumentValue` and `zeCommandListAppendLaunchKernel` under the kernel's
//!   lock. Dynamic work-group memory is `Unsupported`. Globals are
//!   `zeModuleGetGlobalPointer`. [`fixtures::KERNELS`] is the conformance kernels' module.
//! - **IPC**: `alloc_exportable` is device memory; `export` is `zeMemGetIpcHandle`, whose
//!   file descriptor travels beside the bytes (SCM_RIGHTS, by the core's endpoint), with the
//!   allocation's identity (`zeMemGetAllocProperties().id`, also
//!   [`ZeBuffer::allocation_id`]); `import` is `zeMemOpenIpcHandle`, closed
//!   (`zeMemCloseIpcHandle`) with its buffer. See `ipc.rs`.
//! - **Shutdown**: Level Zero has no deinitialisation (nothing undoes `zeInit`), so
//!   `deinit` only counts ([`stats`]) and reports objects still alive as an error (they
//!   stay valid and are freed when dropped); each context is destroyed with its last
//!   object. The loader itself stays mapped (it is opened with `RTLD_NODELETE`): its
//!   drivers' threads may run their code, and a later open finds it again.
//!
//! How it is tested: against a protocol-checking stand-in loader over host memory
//! (`offload-driver/fake/fake_ze.c`, which runs the fixture kernels by name, runs queued
//! commands out of order when their events allow it, and reports use after free, wrong
//! contexts, events and modules misused, arguments of the wrong size or never set, images
//! that should never have reached it, IPC handles not put or not closed, leaks, …) and
//! against the real Debian loader on a machine without a Level Zero driver (the no-device
//! path, and init/shutdown cycles). It has never run on Intel hardware.
//!
//! ```
//! use offload_core::hal::{Device as _, Platform as _};
//! use offload_core::{Config, Error};
//! use offload_ze::ZePlatform;
//! match ZePlatform::open(&Config::default()) {
//!     Ok(ze) => {
//!         for dev in ze.devices() {
//!             let info = dev.info()?;
//!             println!("{}: {} bytes, {} EUs", info.name, info.memory, info.compute_units);
//!         }
//!         ze.deinit()?;
//!     }
//!     // With the loader but no driver: "ze: driver not found: libze_loader.so.1 (zeInit:
//!     // ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): no Level Zero driver could be
//!     // initialised); install …"; with a driver but no device, `Error::NoDevice`.
//!     Err(e @ (Error::DriverNotFound { .. } | Error::NoDevice { .. })) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

// Level Zero's C API, behind `Result`-returning calls; `unsafe fn`s where the driver trusts
// addresses or handles.
#[allow(unsafe_code)]
mod ffi;
// SPIR-V validation and reflection, before the driver sees a module (safe code).
mod spirv;
// The modules below call those `unsafe fn`s and own the handles, each call with its
// `SAFETY` argument. Each uses only those before it in this order (`scripts/circles.sh`
// checks that none imports another in a circle): `shared` (the context, the device record
// and `ZeDevice`), `stream` (a queue's chain of events, and `Uses`), `memory`, `program`,
// `queue`, then `device` (the `hal::Device` impl), `ipc` and `platform` on top.
#[allow(unsafe_code)]
mod device;
#[allow(unsafe_code)]
mod ipc;
#[allow(unsafe_code)]
mod memory;
#[allow(unsafe_code)]
mod platform;
#[allow(unsafe_code)]
mod program;
#[allow(unsafe_code)]
mod queue;
#[allow(unsafe_code)]
mod shared;
#[allow(unsafe_code)]
mod stream;

use offload_core::{BackendKind, PlatformEntry};
use offload_driver::Counters;

pub use memory::ZeBuffer;
pub use platform::ZePlatform;
pub use program::{ZeKernel, ZeModule};
pub use queue::{ZeEvent, ZeQueue};
pub use shared::ZeDevice;

/// The conformance kernels as an OpenCL-flavour SPIR-V module (`fixtures/kernels.cl`, built
/// by `fixtures/build.sh` with clang; never run on Intel hardware): `add_one`, `fill`,
/// `noop`, `read_global` and a global `g`.
pub mod fixtures {
    /// The kernels.
    ///
    /// ```
    /// assert_eq!(offload_ze::fixtures::KERNELS[..4], [0x03, 0x02, 0x23, 0x07]);
    /// ```
    pub const KERNELS: &[u8] = include_bytes!("../fixtures/kernels.spv");
}

/// The backend family this crate implements.
///
/// ```
/// assert_eq!(offload_ze::BACKEND, offload_core::BackendKind::Ze);
/// ```
pub const BACKEND: BackendKind = BackendKind::Ze;

/// The library the platform opens at run time: the Level Zero loader.
///
/// ```
/// assert_eq!(offload_ze::LIBRARY, "libze_loader.so.1");
/// ```
pub const LIBRARY: &str = ffi::LIBRARY;

pub(crate) static COUNTERS: Counters = Counters::new();

/// Process-wide counts of what the Level Zero backend did.
///
/// ```
/// let s = offload_ze::stats();
/// assert!(s.opened >= s.deinitialised);
/// ```
pub type ZeStats = offload_driver::Stats;

/// Reads the process-wide counters.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config};
/// let before = offload_ze::stats();
/// if offload_ze::ZePlatform::open(&Config::default()).is_err() {
///     // A probe that finds no Level Zero device opens nothing.
///     assert!(offload_ze::stats().opened >= before.opened);
/// }
/// ```
pub fn stats() -> ZeStats {
    COUNTERS.stats()
}

/// The entry the facade registers for the `ze` feature (with IPC).
///
/// ```
/// assert_eq!(offload_ze::platform().kind(), offload_core::BackendKind::Ze);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::with_ipc::<ZePlatform>()
}
