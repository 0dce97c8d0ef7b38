//! The Level Zero platform ([`ZePlatform`]) and its `hal::Platform` impl: the loader opened
//! and initialised, its drivers and devices listed, one context per driver, and a device
//! record per device (what those are is shared.rs's), counted and let go at `deinit`. The
//! top of the crate: it names the devices and what they can run, nothing names it.

use std::sync::{Arc, Mutex, PoisonError};

use offload_core::hal::{self, ImageFormat};
use offload_core::{BackendKind, Config, Error, Result};
use offload_driver::{LaunchLimits, driver_not_found, no_device};

use crate::ffi::{self, DeviceHandle, DriverHandle};
use crate::program::EM_INTELGT;
use crate::shared::{ContextShared, DeviceShared, ZeDevice, driver_error};
use crate::{BACKEND, COUNTERS, LIBRARY};

/// The Level Zero platform: the loader, initialised, with its drivers' devices (at least
/// one), and one context per driver.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_ze::ZePlatform::open(&Config::default()) {
///     Ok(ze) => {
///         println!("{}: {} device(s)", ze.name(), ze.devices().len());
///         ze.deinit()?;
///     }
///     Err(
///         Error::DriverNotFound { library, reason, .. } | Error::NoDevice { library, reason, .. },
///     ) => {
///         println!("no Level Zero ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub struct ZePlatform {
    driver: Arc<ffi::Driver>,
    /// One per device, drivers in the loader's order; taken by `deinit`.
    devices: Mutex<Option<Vec<Arc<DeviceShared>>>>,
    name: String,
}

impl std::fmt::Debug for ZePlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZePlatform")
            .field("name", &self.name)
            .field("library", &self.driver.library())
            .finish()
    }
}

fn limits(driver: &ffi::Driver, device: DeviceHandle) -> LaunchLimits {
    // Optional properties: without them the limits fall back to the defaults below.
    let compute = driver.compute(device).ok();
    let or = |v: u32, fallback: u32| if v > 0 { v } else { fallback };
    LaunchLimits {
        max_block_threads: compute.map_or(256, |c| or(c.max_group_threads, 256)),
        max_block: compute.map_or([256, 256, 256], |c| c.max_group.map(|v| or(v, 1))),
        max_grid: compute.map_or([65535; 3], |c| c.max_groups.map(|v| or(v, 65535))),
        max_shared_memory: compute.map_or(0, |c| c.shared_memory),
        attributes: ("maxGroupSize*", "maxGroupCount*"),
    }
}

impl hal::Platform for ZePlatform {
    type Device = ZeDevice;
    const KIND: BackendKind = BACKEND;

    /// Loads the loader, `zeInit(0)`, lists the drivers and their devices and makes one
    /// context per driver that has devices.
    fn open(_config: &Config) -> Result<Self> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        if let Err(init) = driver.init() {
            // The loader answers this when it could initialise no driver (none installed,
            // or none that found its hardware).
            let reason = if init.code == i64::from(ffi::ZE_RESULT_ERROR_UNINITIALIZED) {
                format!("{init}: no Level Zero driver could be initialised")
            } else {
                init.to_string()
            };
            return Err(driver_not_found(BACKEND, LIBRARY, reason));
        }
        let on_init = driver_error;
        let drivers = driver.drivers().map_err(&on_init)?;
        let Some(&first) = drivers.first() else {
            return Err(driver_not_found(BACKEND, LIBRARY, "zeDriverGet: 0 drivers"));
        };
        let mut found: Vec<(DriverHandle, Vec<DeviceHandle>)> = Vec::new();
        for &each in &drivers {
            let devices = driver.devices(each).map_err(&on_init)?;
            if !devices.is_empty() {
                found.push((each, devices));
            }
        }
        if found.is_empty() {
            return Err(no_device(
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
        let driver = Arc::new(driver);
        let mut devices = Vec::new();
        for (each, handles) in found {
            // Made here, destroyed with the last object of it (ContextShared's drop): on a
            // later failure the ones made so far go with `devices`.
            let context = Arc::new(ContextShared {
                handle: driver.context_create(each).map_err(&on_init)?,
                driver: driver.clone(),
            });
            for handle in handles {
                // Optional: a device that will not describe itself gets generic words and values.
                let description = driver.describe(handle).ok();
                devices.push(Arc::new(DeviceShared::new(
                    context.clone(),
                    handle,
                    devices.len() as u32,
                    limits(&driver, handle),
                    description.as_ref().map_or([0; 16], |d| d.uuid),
                    description.as_ref().map_or(1, |d| d.timer_ns.max(1)),
                )));
            }
        }
        COUNTERS.opened();
        Ok(ZePlatform {
            driver,
            devices: Mutex::new(Some(devices)),
            name,
        })
    }

    /// `Level Zero <API version>`, e.g. `Level Zero 1.3`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<ZeDevice> {
        let devices = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        devices
            .iter()
            .flatten()
            .map(|shared| ZeDevice {
                shared: shared.clone(),
            })
            .collect()
    }

    /// Level Zero has no deinitialisation (nothing undoes `zeInit`): counts it, lets go of
    /// the devices (the contexts are destroyed with the last object made in them), and
    /// reports the objects still alive (a leak; they stay valid and are freed when dropped).
    fn deinit(&self) -> Result<()> {
        let taken = self
            .devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(devices) = taken else {
            return Ok(()); // already deinitialised
        };
        COUNTERS.deinitialised();
        let leaked: usize = devices.iter().map(|d| d.live()).sum();
        drop(devices);
        if leaked > 0 {
            return Err(Error::Driver {
                backend: BACKEND,
                call: "",
                code: leaked as i64,
                message: format!(
                    "{leaked} Level Zero objects were still alive at deinit (they are freed \
                     when they are dropped)"
                ),
            });
        }
        Ok(())
    }

    /// SPIR-V (either byte order) and Intel GPU native binaries.
    fn may_run(image: &[u8]) -> bool {
        matches!(
            ImageFormat::of(image),
            ImageFormat::Spirv
                | ImageFormat::SpirvSwapped
                | ImageFormat::Elf {
                    machine: EM_INTELGT
                }
        )
    }
}
