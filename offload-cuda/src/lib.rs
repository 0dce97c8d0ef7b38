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
//! - **Memory** ([`CudaBuffer`]): not implemented yet. `alloc` answers
//!   `Error::Unsupported`, and a [`CudaBuffer`] cannot exist, so no other memory call can be
//!   reached. Programs, kernels and queues answer `Error::Unsupported` too (from the core).
//! - **Shutdown**: the CUDA driver has no global deinitialisation, so `deinit` only counts
//!   ([`stats`]). The platform and its devices share the library guard; it is released
//!   when the runtime drops them, right after `deinit`. The driver itself stays mapped (it
//!   is opened with `RTLD_NODELETE`): once initialised its threads run its code, and a later
//!   open finds it again.
//!
//! ```
//! use offload_core::{Backend, Config, Error};
//! use offload_cuda::CudaPlatform;
//! match CudaPlatform::open(&Config::default()) {
//!     Ok(cuda) => {
//!         for dev in cuda.devices() {
//!             let info = cuda.device_info(&dev)?;
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

mod error;
// The crate's only unsafe code: the driver's C API, behind `Result`-returning calls.
#[allow(unsafe_code)]
mod ffi;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_core::{Backend, BackendKind, Config, DeviceInfo, MemKind, PlatformEntry, Result};

use crate::error::{driver_not_found, map_cuda_err, memory_unsupported};
use crate::ffi::{CUDA_ERROR_NO_DEVICE, CuDevice, Driver};

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

static OPENED: AtomicUsize = AtomicUsize::new(0);
static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);

/// Process-wide counts of what the CUDA backend did.
///
/// ```
/// let s = offload_cuda::stats();
/// assert!(s.opened >= s.deinitialised);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaStats {
    /// Platforms opened (drivers found with at least one device).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
}

/// Reads the process-wide counters.
///
/// ```
/// use offload_core::{Backend, Config};
/// let before = offload_cuda::stats();
/// if offload_cuda::CudaPlatform::open(&Config::default()).is_err() {
///     // A probe that finds no CUDA opens nothing.
///     assert!(offload_cuda::stats().opened >= before.opened);
/// }
/// ```
pub fn stats() -> CudaStats {
    CudaStats {
        opened: OPENED.load(Ordering::SeqCst),
        deinitialised: DEINITIALISED.load(Ordering::SeqCst),
    }
}

/// The entry the facade registers for the `cuda` feature: a memory-less platform (devices
/// only; memory, programs and queues answer `Error::Unsupported`).
///
/// ```
/// assert_eq!(offload_cuda::platform().kind(), offload_core::BackendKind::Cuda);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::memory_only::<CudaPlatform>()
}

/// The CUDA platform: the driver, initialised, with at least one device.
///
/// ```
/// use offload_core::{Backend, Config, Error};
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
pub struct CudaPlatform {
    driver: Arc<Driver>,
    /// (ordinal, handle) of every device, as `open` found them.
    devices: Vec<(u32, CuDevice)>,
    name: String,
}

impl std::fmt::Debug for CudaPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPlatform")
            .field("name", &self.name)
            .field("devices", &self.devices.len())
            .finish()
    }
}

/// A CUDA device. It holds the driver library open for as long as it lives.
///
/// ```
/// use offload_core::{Backend, Config};
/// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else {
///     return; // no CUDA on this machine
/// };
/// for dev in cuda.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub struct CudaDevice {
    ordinal: u32,
    handle: CuDevice,
    driver: Arc<Driver>,
}

impl CudaDevice {
    /// The device's ordinal in the driver's order (`cuDeviceGet`'s argument).
    ///
    /// ```
    /// use offload_core::{Backend, Config};
    /// if let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) {
    ///     assert_eq!(cuda.devices()[0].ordinal(), 0);
    /// }
    /// ```
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

/// CUDA memory: none yet. The type has no values, so no buffer can be handed out, and every
/// memory call but `alloc` (which answers `Error::Unsupported`) is unreachable.
///
/// ```
/// use offload_core::{Backend, Config, Error, MemKind};
/// if let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) {
///     let dev = cuda.devices().remove(0);
///     let e = cuda.alloc(&dev, 64, MemKind::Device).unwrap_err();
///     assert!(matches!(e, Error::Unsupported { .. }));
/// }
/// ```
#[derive(Debug)]
pub enum CudaBuffer {}

impl Backend for CudaPlatform {
    type Device = CudaDevice;
    type Buffer = CudaBuffer;
    const KIND: BackendKind = BackendKind::Cuda;

    /// Loads the driver, `cuInit(0)`, counts and gets the devices.
    fn open(_config: &Config) -> Result<Self> {
        let driver = Driver::open().map_err(|e| driver_not_found(e.library, e.reason))?;
        driver
            .init()
            .map_err(|failure| driver_not_found(LIBRARY, failure.to_string()))?;
        let count = match driver.device_count() {
            Ok(count) => count,
            Err(failure) if failure.code == CUDA_ERROR_NO_DEVICE => {
                return Err(driver_not_found(LIBRARY, failure.to_string()));
            }
            Err(failure) => return Err(map_cuda_err("Offload::init", failure)),
        };
        if count <= 0 {
            return Err(driver_not_found(
                LIBRARY,
                format!("cuDeviceGetCount: {count} devices"),
            ));
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            let handle = driver
                .device(ordinal)
                .map_err(|failure| map_cuda_err("Offload::init", failure))?;
            devices.push((ordinal.unsigned_abs(), handle));
        }
        let name = match driver.driver_version() {
            Some(v) => format!("CUDA {}.{}", v / 1000, v % 1000 / 10),
            None => "CUDA".into(),
        };
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(CudaPlatform {
            driver: Arc::new(driver),
            devices,
            name,
        })
    }

    /// `CUDA <driver version>`, e.g. `CUDA 12.4`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<CudaDevice> {
        self.devices
            .iter()
            .map(|&(ordinal, handle)| CudaDevice {
                ordinal,
                handle,
                driver: self.driver.clone(),
            })
            .collect()
    }

    fn device_info(&self, device: &CudaDevice) -> Result<DeviceInfo> {
        let driver = &device.driver;
        let info = |failure| map_cuda_err("Device::info", failure);
        let multiprocessors = driver.multiprocessor_count(device.handle).map_err(info)?;
        Ok(DeviceInfo {
            name: driver.device_name(device.handle).map_err(info)?,
            vendor: "NVIDIA".into(),
            backend: BackendKind::Cuda,
            memory: driver.total_memory(device.handle).map_err(info)?,
            compute_units: u32::try_from(multiprocessors).unwrap_or(0),
        })
    }

    fn alloc(&self, _device: &CudaDevice, _size: usize, _kind: MemKind) -> Result<CudaBuffer> {
        Err(memory_unsupported("Device::alloc"))
    }

    fn free(&self, buffer: CudaBuffer) -> Result<()> {
        match buffer {}
    }

    fn read(&self, buffer: &CudaBuffer, _offset: usize, _dst: &mut [u8]) -> Result<()> {
        match *buffer {}
    }

    fn write(&self, buffer: &mut CudaBuffer, _offset: usize, _src: &[u8]) -> Result<()> {
        match *buffer {}
    }

    fn fill(&self, buffer: &mut CudaBuffer, _offset: usize, _len: usize, _value: u8) -> Result<()> {
        match *buffer {}
    }

    fn copy(
        &self,
        src: &CudaBuffer,
        _src_offset: usize,
        _dst: &mut CudaBuffer,
        _dst_offset: usize,
        _len: usize,
    ) -> Result<()> {
        match *src {}
    }

    fn copy_within(
        &self,
        buffer: &mut CudaBuffer,
        _src_offset: usize,
        _dst_offset: usize,
        _len: usize,
    ) -> Result<()> {
        match *buffer {}
    }

    /// Counts the deinitialisation; CUDA has no global deinit. The library guard goes with
    /// the platform and its devices.
    fn deinit(&self) -> Result<()> {
        DEINITIALISED.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
