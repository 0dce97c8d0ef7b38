//! The Level Zero platform: the loader opened and initialised, one context per driver
//! ([`ContextShared`]), and a record per device ([`DeviceShared`]) that every object made on
//! it holds, with its launch limits and the copies the host makes now. The devices (and
//! their `hal::Device` impl) are device.rs's, buffers memory.rs's, programs (and their
//! `hal::Program` impl) program.rs's, queues queue.rs's, IPC (and the `hal::Ipc` impl)
//! ipc.rs's.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use offload_core::hal::{self, ImageFormat};
use offload_core::{BackendKind, Config, Error, Result};
use offload_driver::{Failure, LaunchLimits, driver_not_found, no_device};

use crate::ZeDevice;
use crate::ffi::{self, ContextHandle, DeviceHandle, DriverHandle, ListHandle};
use crate::{BACKEND, COUNTERS, LIBRARY};

/// A failed driver call as an offload error (naming no call: the handle of the user's call
/// names it).
pub(crate) fn driver_error(failure: Failure) -> Error {
    failure.into_error(BackendKind::Ze, "")
}

/// One driver's context: every device of the driver, and every object made on them, use
/// it. Destroyed (`zeContextDestroy`) when the last of them is gone.
pub(crate) struct ContextShared {
    pub(crate) driver: Arc<ffi::Driver>,
    pub(crate) handle: ContextHandle,
}

impl Drop for ContextShared {
    fn drop(&mut self) {
        // SAFETY: the context is live and destroyed once, here: everything made in it held
        // this record, so nothing of it is left.
        let _ = unsafe { self.driver.context_destroy(self.handle) };
    }
}

/// One device: its context, its handle, its limits, the synchronous command list that the
/// host's copies go through, and the count of objects made on it.
pub(crate) struct DeviceShared {
    pub(crate) context: Arc<ContextShared>,
    pub(crate) handle: DeviceHandle,
    pub(crate) ordinal: u32,
    /// What launches are checked against, read once.
    pub(crate) limits: LaunchLimits,
    /// `ze_device_properties_t::uuid`.
    pub(crate) uuid: [u8; 16],
    /// Nanoseconds per timestamp tick.
    pub(crate) timer_ns: u64,
    /// A synchronous immediate command list for the host's copies and fills, made at the
    /// first one; its lock serialises its use (command lists are not thread-safe).
    copier: Mutex<Option<ListHandle>>,
    /// Buffers, modules, queues and events made on it and not yet destroyed.
    live: AtomicUsize,
    /// The IPC mappings open on it.
    pub(crate) mappings: Mutex<Vec<std::sync::Weak<crate::ipc::Mapping>>>,
}

impl DeviceShared {
    pub(crate) fn driver(&self) -> &ffi::Driver {
        &self.context.driver
    }

    pub(crate) fn context(&self) -> ContextHandle {
        self.context.handle
    }

    /// Counts an object made on the device.
    pub(crate) fn made(&self) {
        self.live.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts an object destroyed.
    pub(crate) fn destroyed(&self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Runs `f` with the device's synchronous command list (made at the first use), which
    /// nothing else uses meanwhile: every append on it returns once its work has run.
    pub(crate) fn with_copier<T>(
        &self,
        f: impl FnOnce(ListHandle) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let mut copier: MutexGuard<'_, Option<ListHandle>> =
            self.copier.lock().unwrap_or_else(PoisonError::into_inner);
        let list = match *copier {
            Some(list) => list,
            None => {
                let list = self
                    .driver()
                    .list_create(self.context(), self.handle, true)
                    .map_err(driver_error)?;
                *copier = Some(list);
                list
            }
        };
        f(list).map_err(driver_error)
    }

    /// Copies `len` bytes from `src` to `dst` on the device's synchronous list: done when
    /// it returns.
    ///
    /// # Safety
    ///
    /// `dst` and `src` are `len` bytes of memory the device can reach (allocations of its
    /// context, or host memory), alive, not overlapping, and not otherwise accessed until
    /// the call returns (no queued work on them may still run).
    pub(crate) unsafe fn copy_now(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
    ) -> Result<()> {
        self.with_copier(|list| {
            // SAFETY: the caller's promise; the list is synchronous and used by nothing else
            // meanwhile (with_copier).
            unsafe { self.driver().append_copy(list, dst, src, len, None, &[]) }
        })
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        let copier = self
            .copier
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(list) = copier {
            // SAFETY: the list is live, destroyed once, here; it is synchronous, so no work
            // on it is pending.
            let _ = unsafe { self.context.driver.list_destroy(list) };
        }
    }
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceShared")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

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
                devices.push(Arc::new(DeviceShared {
                    context: context.clone(),
                    handle,
                    ordinal: devices.len() as u32,
                    limits: limits(&driver, handle),
                    uuid: description.as_ref().map_or([0; 16], |d| d.uuid),
                    timer_ns: description.as_ref().map_or(1, |d| d.timer_ns.max(1)),
                    copier: Mutex::new(None),
                    live: AtomicUsize::new(0),
                    mappings: Mutex::default(),
                }));
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
                    machine: crate::program::EM_INTELGT
                }
        )
    }
}
