//! A device of a Vulkan platform ([`VulkanDevice`]), the handle the platform hands out for
//! one [`DeviceContext`], and its `hal::Device` impl (memory, programs, making queues;
//! launches and events are the queue's, queue.rs) and `hal::Ipc` impl (memory shared as
//! `OPAQUE_FD`s).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use offload_core::hal::{self, CompilerId, Language};
use offload_core::{BackendKind, DeviceInfo, Error, MemKind, Result};

use crate::context::DeviceContext;
use crate::info::VulkanDeviceInfo;
use crate::memory::VulkanBuffer;
use crate::program::{self, VulkanModule};
use crate::queue::{VulkanEvent, VulkanQueue};
use crate::wgsl;

/// A device of a Vulkan platform: its `VkDevice` with its compute queue, and what Vulkan
/// said about it. It keeps its `VkDevice` (and the instance) alive.
///
/// ```
/// # use offload_core::{Config, hal::Platform};
/// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = vk.devices().remove(0);
/// assert_eq!(dev.index(), 0);
/// # drop(dev);
/// # vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct VulkanDevice {
    pub(crate) index: usize,
    pub(crate) context: Arc<DeviceContext>,
    pub(crate) info: Arc<VulkanDeviceInfo>,
}

impl VulkanDevice {
    /// Its position among its platform's devices.
    ///
    /// ```
    /// # use offload_core::{Config, hal::Platform};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// for (i, dev) in vk.devices().iter().enumerate() {
    ///     assert_eq!(dev.index(), i);
    /// }
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn index(&self) -> usize {
        self.index
    }

    /// Everything the backend read about the device when the platform opened.
    ///
    /// ```
    /// # use offload_core::{Config, hal::Platform};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// let dev = vk.devices().remove(0);
    /// let info = dev.vulkan_info();
    /// println!("{} {:?} max workgroup {:?}", info.name, info.device_type, info.max_workgroup_size);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn vulkan_info(&self) -> &VulkanDeviceInfo {
        &self.info
    }

    /// The live device context, for a call that makes a new object; `Error::ShutDown` once
    /// the platform was deinitialised.
    fn context(&self) -> Result<&Arc<DeviceContext>> {
        if self.context.deinitialised.load(Ordering::SeqCst) {
            return Err(Error::ShutDown {
                call: "",
                object: String::new(),
            });
        }
        Ok(&self.context)
    }
}

/// Memory, programs, queues and events: see the crate docs for the argument convention
/// and the launch geometry.
impl hal::Device for VulkanDevice {
    type Buffer = VulkanBuffer;
    type Program = VulkanModule;
    type Queue = VulkanQueue;
    type Event = VulkanEvent;

    fn info(&self) -> Result<DeviceInfo> {
        let v = &self.info;
        let mut info = DeviceInfo::new(
            v.name.clone(),
            v.vendor.clone(),
            BackendKind::Vulkan,
            v.device_local_memory,
            v.compute_units,
        );
        info.vendor_id = Some(v.vendor_id);
        info.driver_version = Some(if v.driver_info.is_empty() {
            v.driver_version_text.clone()
        } else {
            format!("{} ({})", v.driver_info, v.driver_version_text)
        });
        info.max_block_threads = Some(v.max_workgroup_invocations);
        info.max_block = Some(v.max_workgroup_size);
        info.max_grid = Some(v.max_workgroup_count);
        info.max_alloc = Some(v.max_allocation_size.min(v.max_buffer_size));
        info.shared_memory = Some(u64::from(v.max_shared_memory));
        // Vulkan reports neither an address width nor a clock.
        Ok(info)
    }

    fn alloc(&self, size: usize, kind: MemKind) -> Result<VulkanBuffer> {
        if size == 0 {
            return Err(Error::invalid(
                "Device::alloc",
                "zero-size allocation on a Vulkan device",
            ));
        }
        VulkanBuffer::new(self.context()?.clone(), size, kind, false)
    }

    fn free(&self, buffer: VulkanBuffer) -> Result<()> {
        // Queued work that uses it may still run: submit it and wait, then destroy
        // (dropping waits too, but could only ignore an error).
        let waited = buffer.wait_unused("Buffer::free");
        drop(buffer);
        waited
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

    /// Host-visible memory (always `MemKind::Host`/`Shared`; `Device` where the device's
    /// memory is host-visible, as on lavapipe), not shared with other processes.
    fn with_mapped(&self, buffer: &mut VulkanBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(buffer.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<VulkanModule> {
        program::load(self.context()?.clone(), image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(self.context()?, image)
    }

    /// WGSL with the `wgsl` feature: `naga 28 (…)` targeting `spirv-1.0` on a Vulkan 1.0
    /// device and `spirv-1.3` on later ones. Nothing else (and nothing without the
    /// feature).
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        Ok(match language {
            Language::Wgsl => wgsl::compiler(self.context.api),
            _ => None,
        })
    }

    /// WGSL to bounds-checked SPIR-V by naga (see the crate docs, "Programs from WGSL").
    #[cfg(feature = "wgsl")]
    fn compile(&self, source: &hal::Source) -> Result<Vec<u8>> {
        wgsl::compile(source, self.context.api)
    }

    fn queue(&self) -> Result<VulkanQueue> {
        VulkanQueue::new(self.context()?.clone())
    }
}

/// Memory shared with other processes as `OPAQUE_FD`s (`VK_KHR_external_memory_fd`); a
/// device without the extension answers `Error::Unsupported`.
impl hal::Ipc for VulkanDevice {
    /// `deviceUUID`.
    fn uuid(&self) -> [u8; 16] {
        self.info.device_uuid
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<VulkanBuffer> {
        if size == 0 {
            return Err(Error::invalid(
                "Device::alloc_exportable",
                "zero-size allocation on a Vulkan device",
            ));
        }
        VulkanBuffer::new(self.context()?.clone(), size, kind, true)
    }

    fn export(&self, buffer: &VulkanBuffer) -> Result<hal::Exported> {
        buffer.export()
    }

    fn import(&self, exported: hal::Exported) -> Result<VulkanBuffer> {
        VulkanBuffer::import(self.context()?.clone(), exported)
    }
}
