//! The Vulkan platform ([`VulkanPlatform`]): one `VkInstance` and the devices it found, and
//! its `hal::Platform` impl (open, devices, deinit).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use offload_core::hal::{self, ImageFormat};
use offload_core::{BackendKind, Config, Error, Result};

use crate::context::DeviceContext;
use crate::context::VulkanDevice;
use crate::error::{At, driver_not_found, map_vk_err};
use crate::info::{self, VulkanDeviceInfo};
use crate::instance::Instance;
use crate::options::VulkanOptions;
use crate::stats::{DEINITIALISED, OPENED};

/// The live part of a platform; `None` once it is deinitialised.
struct Live {
    devices: Vec<Arc<DeviceContext>>,
    /// Kept for instance-level calls; every device holds it too.
    _instance: Arc<Instance>,
}

/// The Vulkan platform: one `VkInstance` and its compute-capable devices.
///
/// Opened by the runtime through [`platform`](crate::platform()), or directly through
/// [`Platform::open`](hal::Platform::open) /
/// [`VulkanPlatform::open_with`]. Every method may be called from many threads at once;
/// [`Platform::deinit`](hal::Platform::deinit) destroys the devices and the instance once
/// the devices handed out are dropped (dropping an open platform does too).
///
/// ```
/// use offload_core::{Config, Error, hal::Platform};
/// use offload_vulkan::VulkanPlatform;
/// match VulkanPlatform::open(&Config::default()) {
///     Ok(vk) => {
///         println!("{}: {} device(s)", vk.name(), vk.devices().len());
///         vk.deinit()?;
///     }
///     Err(Error::DriverNotFound { reason, .. }) => println!("no Vulkan: {reason}"),
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct VulkanPlatform {
    name: String,
    validating: bool,
    infos: Vec<Arc<VulkanDeviceInfo>>,
    /// Buffers of this platform not yet freed (shared with the devices, which count).
    live_buffers: Arc<AtomicUsize>,
    live: RwLock<Option<Live>>,
}

impl std::fmt::Debug for VulkanPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanPlatform")
            .field("name", &self.name)
            .field("devices", &self.infos.len())
            .field("live_allocations", &self.live_allocations())
            .finish()
    }
}

impl VulkanPlatform {
    /// Opens the platform with `options` (the runtime uses
    /// [`Platform::open`](hal::Platform::open), which takes the defaults).
    ///
    /// ```
    /// use offload_core::hal::{Device, Platform};
    /// use offload_core::{Config, MemKind};
    /// use offload_vulkan::{VulkanOptions, VulkanPlatform};
    /// let options = VulkanOptions::default().map_device_memory(false);
    /// let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else { return Ok(()) };
    /// let dev = vk.devices().remove(0);
    /// let buf = dev.alloc(16, MemKind::Device)?;
    /// assert!(!buf.is_mapped());
    /// dev.free(buf)?;
    /// drop(dev);
    /// vk.deinit()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn open_with(_config: &Config, options: VulkanOptions) -> Result<Self> {
        let instance = Arc::new(Instance::open(options.validation)?);
        let validating = instance.validating;
        // SAFETY: the instance is live.
        let physical = unsafe { instance.raw.enumerate_physical_devices() }
            .map_err(|e| map_vk_err(At::new("vkEnumeratePhysicalDevices"), e))?;
        let found = physical.len();
        let live_buffers = Arc::new(AtomicUsize::new(0));
        let mut infos = Vec::new();
        let mut devices = Vec::new();
        for p in physical {
            // SAFETY: `p` was just enumerated from the live instance, made with `api`.
            let Some(info) = (unsafe { info::query(&instance.raw, instance.api, p) }) else {
                continue;
            };
            // A device that fails to open fails the platform: the devices opened before it
            // are destroyed as `devices` drops (each with its own queue state).
            let context = DeviceContext::new(
                instance.clone(),
                p,
                &info,
                live_buffers.clone(),
                options.map_device_memory,
                options.bounds_report,
            )?;
            devices.push(Arc::new(context));
            infos.push(Arc::new(info));
        }
        if devices.is_empty() {
            return Err(driver_not_found(format!(
                "the Vulkan loader found {found} physical device(s), none with a compute queue"
            )));
        }
        let mut drivers: Vec<&str> = Vec::new();
        for info in &infos {
            let driver = if info.driver_name.is_empty() {
                info.name.as_str()
            } else {
                info.driver_name.as_str()
            };
            if !drivers.contains(&driver) {
                drivers.push(driver);
            }
        }
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(VulkanPlatform {
            name: format!("vulkan ({})", drivers.join(", ")),
            validating,
            infos,
            live_buffers,
            live: RwLock::new(Some(Live {
                devices,
                _instance: instance,
            })),
        })
    }

    /// Buffers of this platform not yet freed.
    ///
    /// ```
    /// # use offload_core::{Config, hal::Platform};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// assert_eq!(vk.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.live_buffers.load(Ordering::SeqCst)
    }

    /// Whether the Khronos validation layer runs on this platform's instance and its
    /// messages are counted ([`validation_report`](crate::validation_report)).
    ///
    /// ```
    /// # use offload_core::{Config, hal::Platform};
    /// use offload_vulkan::{VulkanOptions, VulkanPlatform};
    /// let options = VulkanOptions::default().validation(false);
    /// # let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else { return Ok(()) };
    /// println!("validating: {}", vk.validating());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn validating(&self) -> bool {
        self.validating
    }

    fn read_live(&self) -> std::sync::RwLockReadGuard<'_, Option<Live>> {
        self.live.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl hal::Platform for VulkanPlatform {
    type Device = VulkanDevice;
    const KIND: BackendKind = BackendKind::Vulkan;

    fn open(config: &Config) -> Result<Self> {
        VulkanPlatform::open_with(config, VulkanOptions::default())
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<VulkanDevice> {
        let live = self.read_live();
        let Some(live) = live.as_ref() else {
            return Vec::new();
        };
        live.devices
            .iter()
            .zip(&self.infos)
            .enumerate()
            .map(|(index, (context, info))| VulkanDevice {
                index,
                context: context.clone(),
                info: info.clone(),
            })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        let Some(live) = self
            .live
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return Ok(()); // already deinitialised
        };
        DEINITIALISED.fetch_add(1, Ordering::SeqCst);
        let mut errors = Vec::new();
        for device in &live.devices {
            device.deinitialised.store(true, Ordering::SeqCst);
            if let Err(e) = device.wait_idle() {
                errors.push(e);
            }
        }
        // Dropping the last reference to each device destroys its command pool, staging
        // memory and `VkDevice`; the last device takes the instance and the loader with it.
        // A device that a leaked buffer (or a device handle) still holds stays alive until
        // that is dropped.
        drop(live);
        let leaked = self.live_allocations();
        if leaked > 0 {
            errors.push(Error::Driver {
                backend: BackendKind::Vulkan,
                call: "",
                code: leaked as i64,
                message: format!(
                    "{leaked} Vulkan allocations were still live at deinit (their devices stay \
                     alive until they are freed)"
                ),
            });
        }
        Error::join(errors)
    }

    /// SPIR-V in this machine's byte order (a swapped module is refused by `validate`).
    fn may_run(image: &[u8]) -> bool {
        ImageFormat::of(image) == ImageFormat::Spirv
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation_report;
    use ash::vk;
    use offload_core::hal::Platform;

    /// The messenger really counts: a deliberate invalid call is reported. (Skipped where
    /// there is no driver or no validation layer; the integration tests fail in CI then.)
    #[test]
    fn the_messenger_counts_validation_errors() {
        let options = VulkanOptions::default().validation(true);
        let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else {
            return;
        };
        if !vk.validating() {
            return;
        }
        let before = validation_report().errors;
        {
            let live = vk.read_live();
            let Some(dev) = live.as_ref().and_then(|l| l.devices.first()) else {
                panic!("an open platform has a device");
            };
            // A zero-size buffer violates VUID-VkBufferCreateInfo-size-00912.
            let info = vk::BufferCreateInfo::default()
                .size(0)
                .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
            // SAFETY: the device is live. The call is invalid on purpose (a zero size); the
            // validation layer reports it before the driver, which (lavapipe, and every
            // driver we know) still makes or refuses an empty buffer without touching memory.
            if let Ok(b) = unsafe { dev.raw.create_buffer(&info, None) } {
                // SAFETY: made above, bound to nothing, used by nothing.
                unsafe { dev.raw.destroy_buffer(b, None) };
            }
        }
        let after = validation_report();
        assert!(after.errors > before, "{after:?}");
        assert!(
            after.messages.iter().any(|m| m.contains("00912")),
            "{:?}",
            after.messages
        );
        vk.deinit().unwrap();
    }
}
