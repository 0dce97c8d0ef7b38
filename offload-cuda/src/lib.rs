//! # offload-cuda
//!
//! The CUDA backend of offload, through the CUDA driver API. The driver (`libcuda.so.1`) is
//! opened at run time with libloading, never linked: this crate builds and starts on any
//! Linux machine, and a machine without CUDA simply has no CUDA platform. (Not `cust`: it
//! needs the CUDA toolkit at build time, so the driver API is declared here by hand, as
//! cudarc's `sys` layer does.)
//!
//! - **Platform** ([`CudaPlatform`]): opening it loads the driver, reads its entry points,
//!   calls `cuInit(0)`, counts the devices and retains each one's primary context
//!   (`cuDevicePrimaryCtxRetain`). A missing library or required symbol, or a failing
//!   `cuInit`, is `Error::DriverNotFound`; a driver that answers "no device" (`cuInit:
//!   CUDA_ERROR_NO_DEVICE (100)`, no devices counted) is `Error::NoDevice` naming the call
//!   and its code: an absent platform, never a panic. Other driver
//!   failures are `Error::Driver` with the `CUresult` as `code`. `deinit` lets go of the
//!   contexts (released with the last object made in them; objects still alive are
//!   reported as leaked). The context is made current on the calling thread before every
//!   context-dependent call.
//! - **Devices** ([`CudaDevice`]): every device the driver counts, in its order, described
//!   by `cuDeviceGetAttribute` (typed `DeviceInfo`), identified for IPC by `cuDeviceGetUuid`.
//! - **Memory** ([`CudaBuffer`]): `MemKind::Device` is `cuMemAlloc`, `Host` page-locked
//!   `cuMemAllocHost`, `Shared` managed `cuMemAllocManaged`; out of memory is
//!   `Error::OutOfMemory` naming the size. Host copies wait for the queued work on the
//!   buffer; pinned and managed memory can be touched in place (`with_mapped`).
//! - **Queues** ([`CudaQueue`]): non-blocking streams; launches, copies, fills and host
//!   functions (`cuLaunchHostFunc`) return once enqueued (Q1); events time with
//!   `cuEventElapsedTime`.
//! - **Programs** ([`CudaModule`]): PTX text, cubin and fatbin images, inspected before the
//!   driver sees them (see [`CudaModule`]'s docs); kernels' parameters from
//!   the image; dynamic shared memory up to the device's limit.
//! - **Programs from source** (`Program::from_source(Source::cuda(..))`): CUDA C++
//!   compiled to PTX by NVRTC, opened at run time at the first compile (see
//!   [`nvrtc_library`]); a missing NVRTC or a compile error is `Error::Compile` with what
//!   was tried or NVRTC's log.
//! - **IPC**: `cuIpcGetMemHandle` / `cuIpcOpenMemHandle`, with the stale-mapping defence
//!   of UCX and Open MPI.
//!
//! Tested here only against a protocol-checking fake libcuda (offload-driver/fake): no
//! NVIDIA GPU was available to this project's machines. The README says so.
//!
//! ```
//! use offload_core::hal::{Device as _, Platform as _};
//! use offload_core::{Config, Error};
//! use offload_cuda::CudaPlatform;
//! match CudaPlatform::open(&Config::default()) {
//!     Ok(cuda) => {
//!         for dev in cuda.devices() {
//!             let info = dev.info()?;
//!             println!("{}: {} bytes, {} SMs", info.name, info.memory, info.compute_units);
//!         }
//!         cuda.deinit()?;
//!     }
//!     // On a machine without CUDA: "cuda: driver not found: libcuda.so.1 (cannot open
//!     // shared object file: No such file or directory); install the cuda driver, …";
//!     // with the driver but no GPU, `Error::NoDevice`.
//!     Err(e @ (Error::DriverNotFound { .. } | Error::NoDevice { .. })) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
//!
//! The backend itself — platform, devices, memory, queues, events, modules, kernels, IPC
//! and the `hal` traits over them — is offload-driver's generic stream backend, shared with
//! offload-hip: this crate implements `offload_driver::StreamApi` for the CUDA driver API
//! ([`CudaApi`]) and names the generic types ([`CudaPlatform`] is
//! `StreamPlatform<CudaApi>`, …). What is CUDA's own stays here: the driver's symbols and
//! error names (`ffi/`), the `StreamApi` impl (`stream_api.rs`), primary contexts (`context.rs`), opening and describing devices
//! (`platform.rs`), PTX/cubin/fatbin inspection (`image/`, `program.rs`) and NVRTC.
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The driver's C API, behind `Result`-returning calls; `unsafe fn`s where the driver
// trusts device addresses.
#[allow(unsafe_code)]
mod ffi;
// The `unsafe impl` of offload-driver's `StreamApi` over `ffi`'s table (its generated
// one-call methods call the table's symbols).
#[allow(unsafe_code)]
mod stream_api;
// Primary contexts: `Send`/`Sync` for the raw handle, and the device record that releases
// them, each with its `SAFETY` argument.
#[allow(unsafe_code)]
mod context;
// Public only for the fuzz targets (`fuzz/`) and the image tests, which reach the parser
// of untrusted bytes as an ordinary dependency; not part of the API.
#[doc(hidden)]
pub mod image;
mod nvrtc;
mod platform;
mod program;

pub use ffi::Driver as CudaApi;

offload_driver::stream_backend_types! {
    offload_cuda::CudaApi "CUDA": CudaStats
    CudaPlatform CudaDevice CudaBuffer CudaQueue CudaEvent CudaModule CudaKernel
}

/// The conformance kernels as PTX (`fixtures/kernels.ptx`, hand-written): `add_one`,
/// `fill`, `noop`, `read_global` with a global `g`, and `shared_reverse`.
pub mod fixtures {
    /// The kernels, with `add_one` adding 1.
    pub const KERNELS: &[u8] = include_bytes!("../fixtures/kernels.ptx");
    /// The same kernels with `add_one` adding 2 (to tell two images apart).
    pub const KERNELS_STEP2: &[u8] = include_bytes!("../fixtures/kernels_step2.ptx");
}

/// The NVRTC library this process loaded for CUDA source programs (`libnvrtc.so.12`, …),
/// once a CUDA device was asked for its CUDA compiler and one was found; `None` before
/// that, or when none was.
///
/// ```
/// if let Some(library) = offload_cuda::nvrtc_library() {
///     assert!(library.starts_with("libnvrtc.so"));
/// }
/// ```
pub fn nvrtc_library() -> Option<&'static str> {
    nvrtc::library()
}

/// The library the platform opens at run time: the CUDA driver.
///
/// ```
/// assert_eq!(offload_cuda::LIBRARY, "libcuda.so.1");
/// ```
pub const LIBRARY: &str = ffi::LIBRARY;
