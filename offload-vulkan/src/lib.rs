//! # offload-vulkan
//!
//! The Vulkan compute backend of offload, built on [`ash`]. The Vulkan loader
//! (`libvulkan.so.1`) is opened at run time, never linked: this crate builds and starts on any
//! Linux machine, and a machine without Vulkan simply has no Vulkan platform.
//!
//! - **Platform** ([`VulkanPlatform`]): one `VkInstance` (Vulkan 1.3 where the loader has it,
//!   else the loader's version). A missing loader, a loader with no driver, or no physical
//!   device with a compute queue is `Error::DriverNotFound` (the runtime then lists the
//!   platform as unavailable, with that reason) — an opened platform always has devices.
//! - **Devices** ([`VulkanDevice`]): every physical device with a compute-capable queue
//!   family, in the driver's order, each with a `VkDevice` and one compute queue made when
//!   the platform opens. [`VulkanPlatform::vulkan_info`] gives what Vulkan says about it
//!   ([`VulkanDeviceInfo`]: type, driver version, heaps, workgroup limits).
//! - **Memory** ([`VulkanBuffer`]): a `VkBuffer` (storage, transfer source and destination)
//!   with its own dedicated memory. `MemKind::Device` prefers device-local memory;
//!   `MemKind::Host` and `MemKind::Shared` take host-visible, host-coherent memory. Memory the
//!   host can map is mapped once and copied with `memcpy`; other memory is reached through a
//!   staging buffer and one-shot command buffers on the device's queue, waited for with a
//!   fence, so every copy is complete when its call returns. Sizes beyond the device's
//!   heaps, `maxMemoryAllocationSize` or `maxBufferSize` are `Error::OutOfMemory` without
//!   asking the driver.
//! - **Shutdown**: [`Backend::deinit`] waits for each device to be idle, then destroys, in
//!   order, its command pool and staging memory, the device, and last the instance (and
//!   closes the loader). A buffer keeps its device alive, so one that is still live at
//!   `deinit` is reported as leaked and its device is destroyed when it is freed, never
//!   before.
//!
//! The backend counts what it does in process-wide counters ([`stats`]).
//!
//! ```
//! use offload_core::{Backend, Config, MemKind};
//! use offload_vulkan::VulkanPlatform;
//! let vk = match VulkanPlatform::open(&Config::default()) {
//!     Ok(vk) => vk,
//!     Err(offload_core::Error::DriverNotFound { reason, .. }) => {
//!         println!("no Vulkan here: {reason}");
//!         return Ok(());
//!     }
//!     Err(e) => return Err(e),
//! };
//! let dev = vk.devices().remove(0);
//! println!("{}", vk.device_info(&dev)?.name);
//! let mut buf = vk.alloc(&dev, 4097, MemKind::Device)?;
//! vk.write(&mut buf, 1, &[42; 4096])?;
//! let mut out = [0u8; 4096];
//! vk.read(&buf, 1, &mut out)?;
//! assert_eq!(out, [42; 4096]);
//! vk.free(buf)?;
//! vk.deinit()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
#![warn(missing_docs)]

mod device;
mod error;
mod info;
mod instance;
mod memory;
mod transfer;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use offload_core::{
    Backend, BackendKind, Config, DeviceInfo, Error, MemKind, PlatformEntry, Result,
};

use crate::device::DeviceContext;
use crate::error::{At, driver_not_found, invalid, map_vk_err};
use crate::instance::Instance;

pub use info::{MemoryHeap, VulkanDeviceInfo, VulkanDeviceType, VulkanVersion, vendor_name};
pub use memory::VulkanBuffer;

/// The backend family this crate implements.
///
/// ```
/// assert_eq!(offload_vulkan::BACKEND, offload_core::BackendKind::Vulkan);
/// ```
pub const BACKEND: BackendKind = BackendKind::Vulkan;

static OPENED: AtomicUsize = AtomicUsize::new(0);
static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_DEVICES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_INSTANCES: AtomicUsize = AtomicUsize::new(0);
/// Identifies platforms, so a device of one is never taken for a device of another.
static NEXT_PLATFORM_ID: AtomicU64 = AtomicU64::new(1);

/// Process-wide counts of what the Vulkan backend did.
///
/// ```
/// let s = offload_vulkan::stats();
/// assert!(s.opened >= s.deinitialised);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VulkanStats {
    /// Platforms opened successfully (one per runtime 0→1 transition that found Vulkan).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
    /// Buffers not yet freed, over all platforms.
    pub live_allocations: usize,
    /// `VkDevice`s not yet destroyed.
    pub live_devices: usize,
    /// `VkInstance`s not yet destroyed.
    pub live_instances: usize,
}

/// Reads the process-wide counters.
///
/// ```
/// let s = offload_vulkan::stats();
/// println!("{} live Vulkan allocations on {} devices", s.live_allocations, s.live_devices);
/// ```
pub fn stats() -> VulkanStats {
    VulkanStats {
        opened: OPENED.load(Ordering::SeqCst),
        deinitialised: DEINITIALISED.load(Ordering::SeqCst),
        live_allocations: LIVE_ALLOCATIONS.load(Ordering::SeqCst),
        live_devices: LIVE_DEVICES.load(Ordering::SeqCst),
        live_instances: LIVE_INSTANCES.load(Ordering::SeqCst),
    }
}

/// The entry the facade registers for the `vulkan` feature.
///
/// Devices and memory only, for now: programs, kernels and queues answer
/// `Error::Unsupported` until the backend implements `offload_core::Compute`.
///
/// ```
/// assert_eq!(offload_vulkan::platform().kind(), offload_core::BackendKind::Vulkan);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::memory_only::<VulkanPlatform>()
}

/// Choices made when a platform opens, beyond [`Config`]. The runtime opens platforms with
/// the defaults; [`VulkanPlatform::open_with`] takes others.
///
/// ```
/// let options = offload_vulkan::VulkanOptions::default().map_device_memory(false);
/// assert!(!options.maps_device_memory());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VulkanOptions {
    map_device_memory: bool,
}

impl Default for VulkanOptions {
    fn default() -> Self {
        VulkanOptions {
            map_device_memory: true,
        }
    }
}

impl VulkanOptions {
    /// Whether `MemKind::Device` buffers that land in host-visible memory (all memory on
    /// lavapipe and integrated GPUs) are mapped and copied with `memcpy` (the default). With
    /// `false` they are always reached through staging and the queue, as on a discrete GPU:
    /// that path can then be tested on any machine.
    ///
    /// ```
    /// use offload_vulkan::VulkanOptions;
    /// assert!(VulkanOptions::default().maps_device_memory());
    /// assert!(!VulkanOptions::default().map_device_memory(false).maps_device_memory());
    /// ```
    pub fn map_device_memory(mut self, map: bool) -> Self {
        self.map_device_memory = map;
        self
    }

    /// The current setting of [`VulkanOptions::map_device_memory`].
    ///
    /// ```
    /// assert!(offload_vulkan::VulkanOptions::default().maps_device_memory());
    /// ```
    pub fn maps_device_memory(&self) -> bool {
        self.map_device_memory
    }
}

/// A device of a Vulkan platform: which platform, and which of its devices.
///
/// ```
/// # use offload_core::{Backend, Config};
/// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = vk.devices().remove(0);
/// assert_eq!(dev.index(), 0);
/// # vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VulkanDevice {
    platform: u64,
    index: usize,
}

impl VulkanDevice {
    /// Its position among its platform's devices.
    ///
    /// ```
    /// # use offload_core::{Backend, Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// for (i, dev) in vk.devices().iter().enumerate() {
    ///     assert_eq!(dev.index(), i);
    /// }
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }
}

/// The live part of a platform; `None` once it is deinitialised.
struct Live {
    devices: Vec<Arc<DeviceContext>>,
    /// Kept for instance-level calls; every device holds it too.
    _instance: Arc<Instance>,
}

/// The Vulkan platform: one `VkInstance` and its compute-capable devices.
///
/// Opened by the runtime through [`platform`], or directly through [`Backend::open`] /
/// [`VulkanPlatform::open_with`]. Every method may be called from many threads at once;
/// [`Backend::deinit`] destroys the devices and the instance (dropping an open platform
/// does too).
///
/// ```
/// use offload_core::{Backend, Config, Error};
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
    id: u64,
    name: String,
    infos: Vec<VulkanDeviceInfo>,
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
    /// Opens the platform with `options` (the runtime uses [`Backend::open`], which takes
    /// the defaults).
    ///
    /// ```
    /// use offload_core::{Backend, Config, MemKind};
    /// use offload_vulkan::{VulkanOptions, VulkanPlatform};
    /// let options = VulkanOptions::default().map_device_memory(false);
    /// let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else { return Ok(()) };
    /// let buf = vk.alloc(&vk.devices()[0], 16, MemKind::Device)?;
    /// assert!(!buf.is_mapped());
    /// vk.free(buf)?;
    /// vk.deinit()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn open_with(_config: &Config, options: VulkanOptions) -> Result<Self> {
        let instance = Arc::new(Instance::open()?);
        // SAFETY: the instance is live.
        let physical = unsafe { instance.raw.enumerate_physical_devices() }
            .map_err(|e| map_vk_err(At::new("Offload::init", "vkEnumeratePhysicalDevices"), e))?;
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
            )?;
            devices.push(Arc::new(context));
            infos.push(info);
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
            id: NEXT_PLATFORM_ID.fetch_add(1, Ordering::Relaxed),
            name: format!("vulkan ({})", drivers.join(", ")),
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
    /// # use offload_core::{Backend, Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// assert_eq!(vk.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.live_buffers.load(Ordering::SeqCst)
    }

    /// Everything the backend read about a device when the platform opened (also available
    /// after `deinit`).
    ///
    /// ```
    /// # use offload_core::{Backend, Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// let dev = vk.devices().remove(0);
    /// let info = vk.vulkan_info(&dev)?;
    /// println!("{} {:?} max workgroup {:?}", info.name, info.device_type, info.max_workgroup_size);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn vulkan_info(&self, device: &VulkanDevice) -> Result<&VulkanDeviceInfo> {
        self.check_device(device, "Device::info")?;
        self.infos
            .get(device.index)
            .ok_or_else(|| invalid("Device::info", "no such Vulkan device"))
    }

    fn check_device(&self, device: &VulkanDevice, call: &'static str) -> Result<()> {
        if device.platform != self.id {
            return Err(invalid(
                call,
                "the device belongs to another Vulkan platform",
            ));
        }
        Ok(())
    }

    fn read_live(&self) -> std::sync::RwLockReadGuard<'_, Option<Live>> {
        self.live.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Backend for VulkanPlatform {
    type Device = VulkanDevice;
    type Buffer = VulkanBuffer;
    const KIND: BackendKind = BackendKind::Vulkan;

    fn open(config: &Config) -> Result<Self> {
        VulkanPlatform::open_with(config, VulkanOptions::default())
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<VulkanDevice> {
        if self.read_live().is_none() {
            return Vec::new();
        }
        (0..self.infos.len())
            .map(|index| VulkanDevice {
                platform: self.id,
                index,
            })
            .collect()
    }

    fn device_info(&self, device: &VulkanDevice) -> Result<DeviceInfo> {
        let info = self.vulkan_info(device)?;
        Ok(DeviceInfo {
            name: info.name.clone(),
            vendor: info.vendor.clone(),
            backend: BackendKind::Vulkan,
            memory: info.device_local_memory,
            compute_units: info.compute_units,
        })
    }

    fn alloc(&self, device: &VulkanDevice, size: usize, kind: MemKind) -> Result<VulkanBuffer> {
        const CALL: &str = "Device::alloc";
        self.check_device(device, CALL)?;
        if size == 0 {
            return Err(invalid(CALL, "zero-size allocation on a Vulkan device"));
        }
        // Held for reading across the allocation: `deinit` cannot destroy the device under it.
        let live = self.read_live();
        let live = live.as_ref().ok_or(Error::ShutDown)?;
        let context = live
            .devices
            .get(device.index)
            .ok_or_else(|| invalid(CALL, "no such Vulkan device"))?;
        VulkanBuffer::new(context.clone(), size, kind)
    }

    fn free(&self, buffer: VulkanBuffer) -> Result<()> {
        drop(buffer);
        Ok(())
    }

    fn read(&self, buffer: &VulkanBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.read(offset, dst)
    }

    fn write(&self, buffer: &mut VulkanBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.write(offset, src)
    }

    fn fill(&self, buffer: &mut VulkanBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.fill(offset, len, value)
    }

    fn copy(
        &self,
        src: &VulkanBuffer,
        src_offset: usize,
        dst: &mut VulkanBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        dst.copy_from(dst_offset, src, src_offset, len)
    }

    fn copy_within(
        &self,
        buffer: &mut VulkanBuffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        buffer.copy_within(src_offset, dst_offset, len)
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
            if let Err(e) = device.wait_idle("Offload::shutdown") {
                errors.push(e);
            }
        }
        // Dropping the last reference to each device destroys its command pool, staging
        // memory and `VkDevice`; the last device takes the instance and the loader with it.
        // A device that a leaked buffer still holds stays alive until that buffer is freed.
        drop(live);
        let leaked = self.live_allocations();
        if leaked > 0 {
            errors.push(Error::Driver {
                backend: BackendKind::Vulkan,
                call: "Offload::shutdown",
                code: leaked as i64,
                message: format!(
                    "{leaked} Vulkan allocations were still live at deinit (their devices stay \
                     alive until they are freed)"
                ),
            });
        }
        Error::join(errors)
    }
}
