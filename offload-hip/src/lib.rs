//! # offload-hip
//!
//! The HIP backend of offload, for AMD GPUs through ROCm's HIP runtime. The runtime
//! (`libamdhip64.so`, else the ROCm 7, 6 or 5 soname `libamdhip64.so.7`/`.6`/`.5`) is opened
//! at run time with libloading, never linked: this crate builds and starts on any Linux
//! machine, and a machine without HIP simply has no HIP platform.
//!
//! For now the platform discovers devices and describes them; memory and programs come
//! later, so it registers as a memory-less platform ([`platform`]).
//!
//! - **Platform** ([`HipPlatform`]): opening it loads the runtime, reads its entry points,
//!   calls `hipInit(0)` and counts the devices. A runtime that no name loads, or that lacks
//!   a required symbol, is `Error::DriverNotFound` with the dynamic loader's messages (or
//!   `missing symbol X`); so is a runtime that fails `hipInit` or has no device, with a
//!   reason naming the calls and their codes. ROCm 5 on a machine without an AMD GPU
//!   answers `hipInit: hipErrorInvalidDevice (101); hipGetDeviceCount: hipErrorNoDevice
//!   (100)` (when `hipInit` fails, `hipGetDeviceCount` is asked too, for the reason). The
//!   runtime then lists the platform as unavailable with that reason: a missing driver is an
//!   absent platform, never a panic. Other HIP failures are `Error::Driver` with the
//!   `hipError_t` as `code`.
//! - **Devices** ([`HipDevice`]): every device HIP counts, in its order. `device_info`
//!   gives `hipDeviceGetName`, `AMD`, `hipDeviceTotalMem` and the multiprocessor (compute
//!   unit) count. Each is read by its own call: `hipDeviceProp_t` changed its layout in
//!   ROCm 6, so offload does not pass one.
//! - **Memory, programs, queues**: not implemented yet. `alloc`, `Program::load` and
//!   `Device::queue` answer `Error::Unsupported`; their objects are `offload_core::hal::Never`,
//!   so no other call on them can be reached.
//! - **Shutdown**: HIP has no global deinitialisation, so `deinit` only counts ([`stats`]).
//!   The platform and its devices share the library guard; it is released when the runtime
//!   drops them, right after `deinit`. The runtime itself stays mapped (it is opened with
//!   `RTLD_NODELETE`): once initialised its threads run its code, and a later open finds it
//!   again.
//!
//! ```
//! use offload_core::hal::{Device as _, Platform as _};
//! use offload_core::{Config, Error};
//! use offload_hip::HipPlatform;
//! match HipPlatform::open(&Config::default()) {
//!     Ok(hip) => {
//!         for dev in hip.devices() {
//!             let info = dev.info()?;
//!             println!("{}: {} bytes, {} CUs", info.name, info.memory, info.compute_units);
//!         }
//!         hip.deinit()?;
//!     }
//!     // With ROCm 5 installed but no AMD GPU: "hip: driver not found: libamdhip64.so.5:
//!     // hipInit: hipErrorInvalidDevice (101); hipGetDeviceCount: hipErrorNoDevice (100)".
//!     Err(e @ Error::DriverNotFound { .. }) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The crate's only unsafe code: HIP's C API, behind `Result`-returning calls.
#[allow(unsafe_code)]
mod ffi;

use std::ffi::c_int;

use offload_core::{BackendKind, DeviceInfo, PlatformEntry, Result};
use offload_driver::{Counters, Failure, Opened, driver_not_found};

use crate::ffi::{HIP_ERROR_NO_DEVICE, HipDevice as RawDevice};

/// The backend family this crate implements.
///
/// ```
/// assert_eq!(offload_hip::BACKEND, offload_core::BackendKind::Hip);
/// ```
pub const BACKEND: BackendKind = BackendKind::Hip;

/// The names the HIP runtime is looked for under, in order.
///
/// ```
/// assert_eq!(offload_hip::LIBRARIES[0], "libamdhip64.so");
/// assert!(offload_hip::LIBRARIES.contains(&"libamdhip64.so.5"));
/// ```
pub const LIBRARIES: [&str; 4] = ffi::LIBRARIES;

static COUNTERS: Counters = Counters::new();

/// Process-wide counts of what the HIP backend did.
///
/// ```
/// let s = offload_hip::stats();
/// assert!(s.opened >= s.deinitialised);
/// ```
pub type HipStats = offload_driver::Stats;

/// Reads the process-wide counters.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config};
/// let before = offload_hip::stats();
/// if offload_hip::HipPlatform::open(&Config::default()).is_err() {
///     // A probe that finds no HIP opens nothing.
///     assert!(offload_hip::stats().opened >= before.opened);
/// }
/// ```
pub fn stats() -> HipStats {
    COUNTERS.stats()
}

/// The entry the facade registers for the `hip` feature: a memory-less platform (devices
/// only; memory, programs and queues answer `Error::Unsupported`).
///
/// ```
/// assert_eq!(offload_hip::platform().kind(), offload_core::BackendKind::Hip);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::of::<HipPlatform>()
}

/// The HIP platform: the runtime, initialised, with at least one device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_hip::HipPlatform::open(&Config::default()) {
///     Ok(hip) => {
///         println!("{}: {} device(s)", hip.name(), hip.devices().len());
///         hip.deinit()?;
///     }
///     Err(Error::DriverNotFound { library, reason, .. }) => {
///         println!("no HIP ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub type HipPlatform = offload_driver::Platform<HipDriver>;

/// A HIP device. It holds the runtime library open for as long as it lives; its
/// `ordinal()` is `hipDeviceGet`'s argument.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config};
/// let Ok(hip) = offload_hip::HipPlatform::open(&Config::default()) else {
///     return; // no HIP device on this machine
/// };
/// for dev in hip.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub type HipDevice = offload_driver::Device<HipDriver>;

/// The HIP runtime as [`HipPlatform`] uses it: the library and its entry points.
///
/// ```
/// use offload_driver::Driver;
/// assert_eq!(<offload_hip::HipDriver as Driver>::KIND, offload_core::BackendKind::Hip);
/// ```
pub struct HipDriver {
    driver: ffi::Driver,
}

impl offload_driver::Driver for HipDriver {
    const KIND: BackendKind = BackendKind::Hip;
    /// The ordinal (some calls take it) and the `hipDevice_t`.
    type Handle = (c_int, RawDevice);

    /// Loads the runtime, `hipInit(0)`, counts and gets the devices.
    fn open() -> Result<Opened<Self>> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        if let Err(init) = driver.init() {
            // ROCm 5 fails hipInit with hipErrorInvalidDevice when there is no GPU;
            // hipGetDeviceCount then says hipErrorNoDevice. Report both.
            let reason = match driver.device_count() {
                Err(count) => format!("{init}; {count}"),
                Ok(_) => init.to_string(),
            };
            return Err(driver_not_found(BACKEND, driver.library(), reason));
        }
        let on_init = |failure: Failure| failure.into_error(BACKEND, "Offload::init");
        let count = match driver.device_count() {
            Ok(count) => count,
            Err(failure) if failure.code == i64::from(HIP_ERROR_NO_DEVICE) => {
                return Err(driver_not_found(
                    BACKEND,
                    driver.library(),
                    failure.to_string(),
                ));
            }
            Err(failure) => return Err(on_init(failure)),
        };
        if count <= 0 {
            return Err(driver_not_found(
                BACKEND,
                driver.library(),
                format!("hipGetDeviceCount: {count} devices"),
            ));
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            devices.push((ordinal, driver.device(ordinal).map_err(on_init)?));
        }
        // `HIP <runtime version>`, e.g. `HIP 6.2.41133`.
        let name = match driver.runtime_version() {
            Some(v) => format!(
                "HIP {}.{}.{}",
                v / 10_000_000,
                v / 100_000 % 100,
                v % 100_000
            ),
            None => "HIP".into(),
        };
        Ok(Opened {
            driver: HipDriver { driver },
            devices,
            name,
        })
    }

    fn library(&self) -> &str {
        self.driver.library()
    }

    fn device_info(&self, (ordinal, device): (c_int, RawDevice)) -> Result<DeviceInfo> {
        let driver = &self.driver;
        let info = |failure: Failure| failure.into_error(BACKEND, "Device::info");
        let multiprocessors = driver.multiprocessor_count(ordinal).map_err(info)?;
        let mut properties = DeviceInfo::new(
            driver.device_name(device).map_err(info)?,
            "AMD",
            BackendKind::Hip,
            driver.total_memory(device).map_err(info)?,
            u32::try_from(multiprocessors).unwrap_or(0),
        );
        properties.vendor_id = Some(0x1002);
        Ok(properties)
    }

    fn counters() -> &'static Counters {
        &COUNTERS
    }
}
