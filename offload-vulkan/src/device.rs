//! The `hal::Device` impl of a device of a Vulkan platform ([`VulkanDevice`], declared in
//! context.rs: the handle the platform hands out for one `DeviceContext`): memory and the
//! host's copies in and out of it, programs, making queues (launches and events are the
//! queue's, queue.rs); and its `hal::Ipc` impl (memory shared as `OPAQUE_FD`s). The buffers
//! themselves are memory.rs's.

use std::sync::Arc;

use offload_core::hal::{self, CompilerId, Language};
use offload_core::{BackendKind, DeviceInfo, Error, MemKind, Result};

use crate::context::VulkanDevice;
use crate::error::check_range;
use crate::memory::{PAYLOAD_LEN, PAYLOAD_MAGIC, VulkanBuffer};
use crate::program::{self, VulkanModule};
use crate::queue::{VulkanEvent, VulkanQueue};
use crate::wgsl;

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
                "",
                "zero-size allocation on a Vulkan device",
            ));
        }
        VulkanBuffer::new(self.context()?.clone(), size, kind, false)
    }

    fn free(&self, buffer: VulkanBuffer) -> Result<()> {
        // Queued work that uses it may still run: submit it and wait, then destroy
        // (dropping waits too, but could only ignore an error).
        let waited = buffer.wait_unused();
        drop(buffer);
        waited
    }

    /// A `memcpy` out of the mapping where the memory is host-visible; otherwise a copy
    /// through the device's queue and staging memory (transfer.rs).
    fn read(&self, buffer: &VulkanBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        check_range(offset, dst.len(), buffer.len)?;
        if dst.is_empty() {
            return Ok(());
        }
        buffer.wait_unused()?;
        match buffer.raw.mapped {
            // SAFETY: offset + len <= buffer.len <= the mapped size (checked), so the source
            // lies inside the mapping, which lives as long as `buffer`; `dst` is a Rust slice
            // and cannot alias device memory (we never hand out references into it); host
            // writers need `&mut VulkanBuffer`, every transfer into the buffer finished before
            // its call returned, and every launch submitted before this call has finished
            // (waited).
            Some(ptr) => unsafe {
                std::ptr::copy_nonoverlapping(ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
            },
            None => buffer
                .device()
                .read_staged(buffer.raw.buffer, offset as u64, dst)?,
        }
        Ok(())
    }

    /// A `memcpy` into the mapping, or a copy through staging memory.
    fn write(&self, buffer: &mut VulkanBuffer, offset: usize, src: &[u8]) -> Result<()> {
        check_range(offset, src.len(), buffer.len)?;
        if src.is_empty() {
            return Ok(());
        }
        buffer.wait_unused()?;
        match buffer.raw.mapped {
            // SAFETY: the destination lies inside the mapping (checked); `src` cannot alias
            // it; `&mut VulkanBuffer` excludes every other access, and no GPU work on the
            // buffer is pending (transfers complete before they return, launches were
            // waited for).
            Some(ptr) => unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), ptr.as_ptr().add(offset), src.len())
            },
            None => buffer
                .device()
                .write_staged(buffer.raw.buffer, offset as u64, src)?,
        }
        Ok(())
    }

    /// `memset` on the mapping, or `vkCmdFillBuffer` (transfer.rs).
    fn fill(&self, buffer: &mut VulkanBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(offset, len, buffer.len)?;
        if len == 0 {
            return Ok(());
        }
        buffer.wait_unused()?;
        match buffer.raw.mapped {
            // SAFETY: the range lies inside the mapping (checked); `&mut VulkanBuffer`
            // excludes every other access.
            Some(ptr) => unsafe { std::ptr::write_bytes(ptr.as_ptr().add(offset), value, len) },
            None => buffer.device().fill_on_device(
                buffer.raw.buffer,
                offset as u64,
                len as u64,
                value,
            )?,
        }
        Ok(())
    }

    /// A `memcpy` between two mappings, or `vkCmdCopyBuffer`.
    fn copy(
        &self,
        src: &VulkanBuffer,
        src_offset: usize,
        dst: &mut VulkanBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        check_range(src_offset, len, src.len)?;
        check_range(dst_offset, len, dst.len)?;
        if !Arc::ptr_eq(dst.device(), src.device()) {
            return Err(Error::invalid(
                "",
                "the source and destination Vulkan buffers are on different devices",
            ));
        }
        if len == 0 {
            return Ok(());
        }
        src.wait_unused()?;
        dst.wait_unused()?;
        match (src.raw.mapped, dst.raw.mapped) {
            // SAFETY: both ranges lie inside their mappings (checked); `dst` is borrowed
            // mutably and `src` shared, so they are different allocations that cannot
            // overlap, and nobody else writes either.
            (Some(s), Some(d)) => unsafe {
                std::ptr::copy_nonoverlapping(
                    s.as_ptr().add(src_offset),
                    d.as_ptr().add(dst_offset),
                    len,
                )
            },
            _ => dst.device().copy_on_device(
                src.raw.buffer,
                src_offset as u64,
                dst.raw.buffer,
                dst_offset as u64,
                len as u64,
            )?,
        }
        Ok(())
    }

    /// A `memmove` on the mapping, or a copy on the device through a scratch range.
    fn copy_within(
        &self,
        buffer: &mut VulkanBuffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        check_range(src_offset, len, buffer.len)?;
        check_range(dst_offset, len, buffer.len)?;
        if len == 0 || src_offset == dst_offset {
            return Ok(());
        }
        buffer.wait_unused()?;
        match buffer.raw.mapped {
            // SAFETY: both ranges lie inside the mapping (checked); `ptr::copy` allows them
            // to overlap; `&mut VulkanBuffer` excludes every other access.
            Some(p) => unsafe {
                std::ptr::copy(p.as_ptr().add(src_offset), p.as_ptr().add(dst_offset), len)
            },
            None => buffer.device().move_on_device(
                buffer.raw.buffer,
                src_offset as u64,
                dst_offset as u64,
                len as u64,
            )?,
        }
        Ok(())
    }

    /// The queued work on the buffer, where some of it is held behind a host function
    /// (queue/gate.rs): that work waits for the function, which may be waiting for this very
    /// buffer (L7). Submitted work never waits for host code: a host access waits for it
    /// under the buffer's lock (`None`).
    fn pending(&self, buffer: &VulkanBuffer) -> Option<hal::Pending> {
        let usage = buffer.usage();
        if !usage.is_held() {
            return None;
        }
        let (usage, device) = (usage.clone(), buffer.device().clone());
        Some(Box::new(move || usage.wait(&device)))
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
            Language::Wgsl => wgsl::compiler(self.context.api, self.context.bounds_report),
            _ => None,
        })
    }

    /// WGSL to bounds-checked SPIR-V by naga (see the crate docs, "Programs from WGSL").
    #[cfg(feature = "wgsl")]
    fn compile(&self, source: &hal::Source) -> Result<Vec<u8>> {
        wgsl::compile(source, self.context.api, self.context.bounds_report)
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
                "",
                "zero-size allocation on a Vulkan device",
            ));
        }
        VulkanBuffer::new(self.context()?.clone(), size, kind, true)
    }

    /// A new `OPAQUE_FD` of the buffer's memory, and a payload of `OFVK`, the memory type
    /// index (u32) and the `allocationSize` (u64), which an `OPAQUE_FD` import must repeat
    /// exactly, and a check word over those and the buffer's size (u64), all little-endian
    /// (`VulkanBuffer::import` reads it: a corrupted field never reaches the driver).
    fn export(&self, buffer: &VulkanBuffer) -> Result<hal::Exported> {
        if !buffer.exportable {
            return Err(Error::invalid(
                "",
                "Vulkan buffer is not exportable (allocate it with alloc_exportable)",
            ));
        }
        let raw = &buffer.raw;
        let fd = raw.export_fd(buffer.device())?;
        let mut payload = Vec::with_capacity(PAYLOAD_LEN);
        payload.extend_from_slice(&PAYLOAD_MAGIC);
        payload.extend_from_slice(&raw.type_index.to_le_bytes());
        payload.extend_from_slice(&raw.allocation_size.to_le_bytes());
        let check =
            crate::memory::payload_check(raw.type_index, raw.allocation_size, buffer.len as u64);
        payload.extend_from_slice(&check.to_le_bytes());
        Ok(hal::Exported {
            size: buffer.len as u64,
            payload,
            fd: Some(fd),
        })
    }

    fn import(&self, exported: hal::Exported) -> Result<VulkanBuffer> {
        VulkanBuffer::import(self.context()?.clone(), exported)
    }
}
