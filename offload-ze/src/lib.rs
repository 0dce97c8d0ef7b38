//! # offload-ze
//!
//! The Level Zero backend of offload, for Intel GPUs (and other oneAPI devices). The Level
//! Zero loader (`libze_loader.so.1`), which finds and loads the drivers, is opened at run
//! time with libloading, never linked: this crate builds and starts on any Linux machine, and
//! a machine without Level Zero simply has no Level Zero platform.
//!
//! For now the platform discovers devices and describes them; memory and programs come
//! later, so it registers as a memory-less platform ([`platform`]).
//!
//! - **Platform** ([`ZePlatform`]): opening it loads the loader, reads its entry points,
//!   calls `zeInit(0)` and lists the drivers (`zeDriverGet`) and their devices
//!   (`zeDeviceGet`). A missing loader or a missing required symbol is
//!   `Error::DriverNotFound` with the dynamic loader's message (or `missing symbol X`); so
//!   is a loader that initialises no driver or finds no device, with a reason naming the
//!   call and its code. The loader without any driver installed answers `zeInit:
//!   ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): no Level Zero driver could be
//!   initialised`. The runtime then lists the platform as unavailable with that reason: a
//!   missing driver is an absent platform, never a panic. Other failures are
//!   `Error::Driver` with the `ze_result_t` as `code`.
//! - **Devices** ([`ZeDevice`]): every root device of every driver, drivers in the loader's
//!   order. `device_info` gives the device's name, its vendor (`Intel` for PCI vendor
//!   0x8086), the sum of its memories' sizes and its execution units (slices × sub-slices
//!   per slice × EUs per sub-slice).
//! - **Memory, programs, queues**: not implemented yet. `alloc`, `Program::load` and
//!   `Device::queue` answer `Error::Unsupported`; their objects are `offload_core::hal::Never`,
//!   so no other call on them can be reached.
//! - **Shutdown**: Level Zero has no deinitialisation (nothing undoes `zeInit`), so
//!   `deinit` only counts ([`stats`]). The platform and its devices share the library guard;
//!   it is released when the runtime drops them, right after `deinit`. The loader itself
//!   stays mapped (it is opened with `RTLD_NODELETE`): its drivers' threads may run their
//!   code, and a later open finds it again.
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
//!     // With the loader but no driver: "ze: driver not found: libze_loader.so.1: zeInit:
//!     // ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): no Level Zero driver could be
//!     // initialised".
//!     Err(e @ Error::DriverNotFound { .. }) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The crate's only unsafe code: Level Zero's C API, behind `Result`-returning calls.
#[allow(unsafe_code)]
mod ffi;

use offload_core::{BackendKind, DeviceInfo, PlatformEntry, Result};
use offload_driver::{Counters, Failure, Opened, driver_not_found};

use crate::ffi::{DeviceHandle, ZE_RESULT_ERROR_UNINITIALIZED};

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

/// PCI vendor id of Intel.
const INTEL: u32 = 0x8086;

static COUNTERS: Counters = Counters::new();

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

/// The entry the facade registers for the `ze` feature: a memory-less platform (devices
/// only; memory, programs and queues answer `Error::Unsupported`).
///
/// ```
/// assert_eq!(offload_ze::platform().kind(), offload_core::BackendKind::Ze);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::of::<ZePlatform>()
}

/// The Level Zero platform: the loader, initialised, with its drivers' devices (at least
/// one).
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_ze::ZePlatform::open(&Config::default()) {
///     Ok(ze) => {
///         println!("{}: {} device(s)", ze.name(), ze.devices().len());
///         ze.deinit()?;
///     }
///     Err(Error::DriverNotFound { library, reason, .. }) => {
///         println!("no Level Zero ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub type ZePlatform = offload_driver::Platform<ZeDriver>;

/// A Level Zero device. It holds the loader open for as long as it lives; its `ordinal()`
/// is its position among the platform's devices: the drivers in the loader's order, each
/// driver's devices in its order.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config};
/// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else {
///     return; // no Level Zero device on this machine
/// };
/// for dev in ze.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub type ZeDevice = offload_driver::Device<ZeDriver>;

/// The Level Zero loader as [`ZePlatform`] uses it: the library and its entry points.
///
/// ```
/// use offload_driver::Driver;
/// assert_eq!(<offload_ze::ZeDriver as Driver>::KIND, offload_core::BackendKind::Ze);
/// ```
pub struct ZeDriver {
    driver: ffi::Driver,
}

impl offload_driver::Driver for ZeDriver {
    const KIND: BackendKind = BackendKind::Ze;
    type Handle = DeviceHandle;

    /// Loads the loader, `zeInit(0)`, lists the drivers and their devices.
    fn open() -> Result<Opened<Self>> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        if let Err(init) = driver.init() {
            // The loader answers this when it could initialise no driver (none installed,
            // or none that found its hardware).
            let reason = if init.code == i64::from(ZE_RESULT_ERROR_UNINITIALIZED) {
                format!("{init}: no Level Zero driver could be initialised")
            } else {
                init.to_string()
            };
            return Err(driver_not_found(BACKEND, LIBRARY, reason));
        }
        let on_init = |failure: Failure| failure.into_error(BACKEND, "Offload::init");
        let drivers = driver.drivers().map_err(on_init)?;
        let Some(&first) = drivers.first() else {
            return Err(driver_not_found(BACKEND, LIBRARY, "zeDriverGet: 0 drivers"));
        };
        let mut devices = Vec::new();
        for &each in &drivers {
            devices.extend(driver.devices(each).map_err(on_init)?);
        }
        if devices.is_empty() {
            return Err(driver_not_found(
                BACKEND,
                LIBRARY,
                format!("zeDeviceGet: 0 devices on {} driver(s)", drivers.len()),
            ));
        }
        // `Level Zero <API version of the first driver>`, e.g. `Level Zero 1.3`.
        let name = match driver.api_version(first) {
            Some((major, minor)) => format!("Level Zero {major}.{minor}"),
            None => "Level Zero".into(),
        };
        Ok(Opened {
            driver: ZeDriver { driver },
            devices,
            name,
        })
    }

    fn library(&self) -> &str {
        self.driver.library()
    }

    fn device_info(&self, device: DeviceHandle) -> Result<DeviceInfo> {
        let driver = &self.driver;
        let info = |failure: Failure| failure.into_error(BACKEND, "Device::info");
        let description = driver.describe(device).map_err(info)?;
        let mut properties = DeviceInfo::new(
            description.name,
            match description.vendor_id {
                INTEL => "Intel".into(),
                other => format!("PCI vendor {other:#06x}"),
            },
            BackendKind::Ze,
            driver.total_memory(device).map_err(info)?,
            u32::try_from(description.execution_units).unwrap_or(u32::MAX),
        );
        properties.vendor_id = Some(description.vendor_id);
        Ok(properties)
    }

    fn counters() -> &'static Counters {
        &COUNTERS
    }
}
