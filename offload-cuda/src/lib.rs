//! # offload-cuda
//!
//! The CUDA backend of offload, through the CUDA driver API. The driver (`libcuda.so.1`) is
//! opened at run time with libloading, never linked: this crate builds and starts on any
//! Linux machine, and a machine without CUDA simply has no CUDA platform.
//!
//! For now the platform discovers devices and describes them; memory and programs come
//! later, so it registers as a memory-less platform ([`platform`]).
//!
//! - **Platform** ([`CudaPlatform`]): opening it loads the driver, reads its entry points,
//!   calls `cuInit(0)` and counts the devices. A missing library or a missing required
//!   symbol is `Error::DriverNotFound` with the dynamic loader's message (or
//!   `missing symbol X`); so is a driver that fails `cuInit` or has no device, with a reason
//!   naming the call and its code, e.g. `cuInit: CUDA_ERROR_NO_DEVICE (100)`. The runtime
//!   then lists the platform as unavailable with that reason: a missing driver is an absent
//!   platform, never a panic. Other driver failures are `Error::Driver` with the `CUresult`
//!   as `code`.
//! - **Devices** ([`CudaDevice`]): every device the driver counts, in its order.
//!   `device_info` gives the driver's name, `NVIDIA`, `cuDeviceTotalMem` and the
//!   multiprocessor count.
//! - **Memory, programs, queues**: not implemented yet. `alloc`, `Program::load` and
//!   `Device::queue` answer `Error::Unsupported`; their objects are `offload_core::hal::Never`,
//!   so no other call on them can be reached.
//! - **Shutdown**: the CUDA driver has no global deinitialisation, so `deinit` only counts
//!   ([`stats`]). The platform and its devices share the library guard; it is released
//!   when the runtime drops them, right after `deinit`. The driver itself stays mapped (it
//!   is opened with `RTLD_NODELETE`): once initialised its threads run its code, and a later
//!   open finds it again.
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
//!     // On a machine without CUDA: "cuda: driver not found: libcuda.so.1: libcuda.so.1:
//!     // cannot open shared object file: No such file or directory".
//!     Err(e @ Error::DriverNotFound { .. }) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The crate's only unsafe code: the driver's C API, behind `Result`-returning calls.
#[allow(unsafe_code)]
mod ffi;

use offload_core::{BackendKind, DeviceInfo, PlatformEntry, Result};
use offload_driver::{Counters, Opened, driver_not_found};

use crate::ffi::{CUDA_ERROR_NO_DEVICE, CuDevice, sys};

/// The backend family this crate implements.
///
/// ```
/// assert_eq!(offload_cuda::BACKEND, offload_core::BackendKind::Cuda);
/// ```
pub const BACKEND: BackendKind = BackendKind::Cuda;

/// The library the platform opens at run time: the CUDA driver.
///
/// ```
/// assert_eq!(offload_cuda::LIBRARY, "libcuda.so.1");
/// ```
pub const LIBRARY: &str = ffi::LIBRARY;

static COUNTERS: Counters = Counters::new();

/// Process-wide counts of what the CUDA backend did.
///
/// ```
/// let s = offload_cuda::stats();
/// assert!(s.opened >= s.deinitialised);
/// ```
pub type CudaStats = offload_driver::Stats;

/// Reads the process-wide counters.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config};
/// let before = offload_cuda::stats();
/// if offload_cuda::CudaPlatform::open(&Config::default()).is_err() {
///     // A probe that finds no CUDA opens nothing.
///     assert!(offload_cuda::stats().opened >= before.opened);
/// }
/// ```
pub fn stats() -> CudaStats {
    COUNTERS.stats()
}

/// The entry the facade registers for the `cuda` feature: a memory-less platform (devices
/// only; memory, programs and queues answer `Error::Unsupported`).
///
/// ```
/// assert_eq!(offload_cuda::platform().kind(), offload_core::BackendKind::Cuda);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::of::<CudaPlatform>()
}

/// The CUDA platform: the driver, initialised, with at least one device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_cuda::CudaPlatform::open(&Config::default()) {
///     Ok(cuda) => {
///         println!("{}: {} device(s)", cuda.name(), cuda.devices().len());
///         cuda.deinit()?;
///     }
///     Err(Error::DriverNotFound { library, reason, .. }) => {
///         println!("no CUDA ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub type CudaPlatform = offload_driver::Platform<CudaDriver>;

/// A CUDA device. It holds the driver library open for as long as it lives; its
/// `ordinal()` is `cuDeviceGet`'s argument.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config};
/// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else {
///     return; // no CUDA on this machine
/// };
/// for dev in cuda.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub type CudaDevice = offload_driver::Device<CudaDriver>;

/// The CUDA driver as [`CudaPlatform`] uses it: the library and its entry points.
///
/// ```
/// use offload_driver::Driver;
/// assert_eq!(<offload_cuda::CudaDriver as Driver>::KIND, offload_core::BackendKind::Cuda);
/// ```
pub struct CudaDriver {
    driver: ffi::Driver,
}

impl offload_driver::Driver for CudaDriver {
    const KIND: BackendKind = BackendKind::Cuda;
    type Handle = CuDevice;

    /// Loads the driver, `cuInit(0)`, counts and gets the devices.
    fn open() -> Result<Opened<Self>> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        driver
            .init()
            .map_err(|failure| driver_not_found(BACKEND, LIBRARY, failure.to_string()))?;
        let on_init =
            |failure: offload_driver::Failure| failure.into_error(BACKEND, "Offload::init");
        let count = match driver.device_count() {
            Ok(count) => count,
            Err(failure) if failure.code == i64::from(CUDA_ERROR_NO_DEVICE) => {
                return Err(driver_not_found(BACKEND, LIBRARY, failure.to_string()));
            }
            Err(failure) => return Err(on_init(failure)),
        };
        if count <= 0 {
            return Err(driver_not_found(
                BACKEND,
                LIBRARY,
                format!("cuDeviceGetCount: {count} devices"),
            ));
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            devices.push(driver.device(ordinal).map_err(on_init)?);
        }
        // `CUDA <driver version>`, e.g. `CUDA 12.4`.
        let name = match driver.driver_version() {
            Some(v) => format!("CUDA {}.{}", v / 1000, v % 1000 / 10),
            None => "CUDA".into(),
        };
        Ok(Opened {
            driver: CudaDriver { driver },
            devices,
            name,
        })
    }

    fn library(&self) -> &str {
        self.driver.library()
    }

    fn device_info(&self, device: CuDevice) -> Result<DeviceInfo> {
        let driver = &self.driver;
        let info = |failure: offload_driver::Failure| failure.into_error(BACKEND, "Device::info");
        let multiprocessors = driver.multiprocessor_count(device).map_err(info)?;
        let mut properties = DeviceInfo::new(
            driver.device_name(device).map_err(info)?,
            "NVIDIA",
            BackendKind::Cuda,
            driver.total_memory(device).map_err(info)?,
            u32::try_from(multiprocessors).unwrap_or(0),
        );
        // Properties the driver does not answer stay `None`.
        let get = |attribute| {
            driver
                .attribute(device, attribute)
                .ok()
                .and_then(|v| u32::try_from(v).ok())
        };
        let three = |first| Some([get(first)?, get(first + 1)?, get(first + 2)?]);
        properties.vendor_id = Some(0x10DE);
        properties.driver_version = driver
            .driver_version()
            .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10));
        properties.max_block_threads = get(sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        properties.max_block = three(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
        properties.max_grid = three(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
        properties.shared_memory =
            get(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK).map(u64::from);
        properties.clock_mhz = get(sys::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).map(|khz| khz / 1000);
        properties.address_bits = Some(64);
        Ok(properties)
    }

    fn counters() -> &'static Counters {
        &COUNTERS
    }
}
