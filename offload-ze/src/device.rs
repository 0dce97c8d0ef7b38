//! The `hal::Device` impl of a Level Zero device ([`ZeDevice`], shared.rs, beside the device
//! record it holds): what it says about itself, allocating, the host's copies in and out of
//! its buffers, loading programs and making queues. The buffers are memory.rs's, programs
//! program.rs's, queues queue.rs's, and its `hal::Ipc` impl ipc.rs's.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::hal;
use offload_core::{DeviceInfo, Error, MemKind, Result};

use crate::BACKEND;
use crate::memory::ZeBuffer;
use crate::program::{self, ZeModule};
use crate::queue::{ZeEvent, ZeQueue};
use crate::shared::{DeviceShared, ZeDevice, driver_error};

/// PCI vendor id of Intel.
const INTEL: u32 = 0x8086;

fn info(shared: &DeviceShared) -> Result<DeviceInfo> {
    let driver = shared.driver();
    let failed = driver_error;
    let description = driver.describe(shared.handle).map_err(&failed)?;
    let mut info = DeviceInfo::new(
        description.name,
        match description.vendor_id {
            INTEL => "Intel".into(),
            other => format!("PCI vendor {other:#06x}"),
        },
        BACKEND,
        driver.total_memory(shared.handle).map_err(&failed)?,
        u32::try_from(description.execution_units).unwrap_or(u32::MAX),
    );
    info.vendor_id = Some(description.vendor_id);
    let limits = &shared.limits;
    info.max_block_threads = Some(limits.max_block_threads);
    info.max_block = Some(limits.max_block);
    info.max_grid = Some(limits.max_grid);
    info.max_alloc = (description.max_alloc > 0).then_some(description.max_alloc);
    // Dynamic work-group memory is not offered (see `launch`): none for launches.
    info.shared_memory = Some(0);
    info.address_bits = Some(64);
    info.clock_mhz = (description.clock_mhz > 0).then_some(description.clock_mhz);
    Ok(info)
}

impl hal::Device for ZeDevice {
    type Buffer = ZeBuffer;
    type Program = ZeModule;
    type Queue = ZeQueue;
    type Event = ZeEvent;

    fn info(&self) -> Result<DeviceInfo> {
        info(&self.shared)
    }

    /// `Device`: `zeMemAllocDevice`; `Host`: `zeMemAllocHost`; `Shared`: `zeMemAllocShared`.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<ZeBuffer> {
        ZeBuffer::new(&self.shared, size, kind, false)
    }

    /// The USM pointer (what SYCL and oneAPI libraries use).
    fn address(&self, buffer: &ZeBuffer) -> Result<Option<u64>> {
        Ok(Some(buffer.alloc.ptr as u64))
    }

    /// USM memory of this device's context another library allocated.
    #[allow(unsafe_code)]
    unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: hal::Owner,
    ) -> Result<Option<ZeBuffer>> {
        let ptr = std::ptr::with_exposed_provenance_mut::<c_void>(address as usize);
        Ok(Some(ZeBuffer::adopted(&self.shared, ptr, len, kind, owner)))
    }

    /// Lets go of the memory: freed once no queued work uses it.
    fn free(&self, buffer: ZeBuffer) -> Result<()> {
        if Arc::strong_count(&buffer.alloc) == 1 {
            // The last user: wait here, so a failure is reported (the drop only ignores it).
            buffer.alloc.uses.wait()?;
        }
        drop(buffer);
        Ok(())
    }

    fn read(&self, buffer: &ZeBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        let src = buffer.at(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        buffer.alloc.uses.wait()?;
        // SAFETY: the range lies inside this live allocation (checked); no queued work on it
        // runs (waited); `dst` is host memory, borrowed for the call.
        unsafe {
            buffer
                .alloc
                .device
                .copy_now(dst.as_mut_ptr().cast(), src, dst.len())
        }
    }

    fn write(&self, buffer: &mut ZeBuffer, offset: usize, src: &[u8]) -> Result<()> {
        let dst = buffer.at(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        buffer.alloc.uses.wait()?;
        // SAFETY: as in `read`; `&mut ZeBuffer` excludes every other host access.
        unsafe {
            buffer
                .alloc
                .device
                .copy_now(dst, src.as_ptr().cast(), src.len())
        }
    }

    fn fill(&self, buffer: &mut ZeBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        let dst = buffer.at(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        buffer.alloc.uses.wait()?;
        let device = &buffer.alloc.device;
        device.with_copier(|list| {
            // SAFETY: as in `write`.
            unsafe {
                device
                    .driver()
                    .append_fill(list, dst, &[value], len, None, &[])
            }
        })
    }

    /// From another buffer of the same device (a copy inside one allocation, through two
    /// handles of it, is `copy_within`'s).
    fn copy(
        &self,
        src: &ZeBuffer,
        src_offset: usize,
        dst: &mut ZeBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = src.at(src_offset, len)?;
        let to = dst.at(dst_offset, len)?;
        if !Arc::ptr_eq(&dst.alloc.device, &src.alloc.device) {
            return Err(Error::InvalidArgument {
                call: "",
                reason: "the ze buffers are on different devices".into(),
            });
        }
        if len == 0 {
            return Ok(());
        }
        if Arc::ptr_eq(&dst.alloc, &src.alloc) {
            return self.copy_within(dst, src_offset, dst_offset, len);
        }
        src.alloc.uses.wait()?;
        dst.alloc.uses.wait()?;
        // SAFETY: both ranges lie inside live allocations of this device (checked); no queued
        // work on either runs (waited); they are different allocations, so they do not
        // overlap.
        unsafe { dst.alloc.device.copy_now(to, from, len) }
    }

    /// Overlapping ranges are staged through the host.
    fn copy_within(
        &self,
        buffer: &mut ZeBuffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let staged =
            offload_driver::copy_within(self, buffer, src_offset, dst_offset, len, ZeBuffer::at);
        let Some((from, to)) = staged? else {
            return Ok(()); // nothing to copy, or staged through the host
        };
        buffer.alloc.uses.wait()?;
        // SAFETY: both ranges lie inside this live allocation (checked) and do not overlap
        // (checked above); no queued work on it runs (waited).
        unsafe { buffer.alloc.device.copy_now(to, from, len) }
    }

    /// Host (`zeMemAllocHost`) and shared (`zeMemAllocShared`) memory; device memory and
    /// imports are `Unsupported`.
    /// The queued work on the buffer: a queue's later work waits for its host functions,
    /// which may use this very buffer (L7).
    fn pending(&self, buffer: &ZeBuffer) -> Option<hal::Pending> {
        buffer.alloc.uses.pending()
    }

    fn with_mapped(&self, buffer: &mut ZeBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(buffer.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<ZeModule> {
        program::load(&self.shared, image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(image).map(drop)
    }

    fn queue(&self) -> Result<ZeQueue> {
        ZeQueue::new(&self.shared)
    }
}
