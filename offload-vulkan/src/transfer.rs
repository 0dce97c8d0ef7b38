//! Synchronous transfers on a device's queue, for memory the host cannot map: staging reads
//! and writes, `vkCmdFillBuffer` fills and `vkCmdCopyBuffer` copies, each as one command
//! buffer submitted with a fence and waited for before the call returns.
//!
//! Everything here runs under the device's queue mutex ([`DeviceContext::lock_queue`]):
//! the command pool, its one command buffer, the fence and the staging memory are made at
//! the first transfer and reused. Each command buffer starts with a barrier against all
//! earlier device writes and ends with one that makes its writes visible to the host, so
//! consecutive transfers (and the host reads after them) are ordered without further care.

use ash::vk;
use offload_core::Result;

use crate::allocation::RawAllocation;
use crate::context::{Commands, DeviceContext, QueueState, Transfer};
use crate::error::{At, map_vk_err};
use crate::memory::{Placement, Source};

/// Bytes of staging memory per device; larger transfers go in chunks of this size.
pub(crate) const STAGING_BYTES: u64 = 4 << 20;

/// How long a transfer may take before the device is considered hung (then every later
/// transfer on it fails instead of reusing a command buffer that may still be pending).
const FENCE_TIMEOUT_NS: u64 = 60_000_000_000;

/// The staging memory as the transfers use it: copied out of the `Transfer` so the queue
/// state can be borrowed mutably while it is used.
#[derive(Clone, Copy)]
struct Staging {
    buffer: vk::Buffer,
    ptr: *mut u8,
    size: u64,
}

/// One command of a transfer.
#[derive(Clone, Copy, Debug)]
enum Op {
    Copy {
        src: vk::Buffer,
        dst: vk::Buffer,
        region: vk::BufferCopy,
    },
    Fill {
        dst: vk::Buffer,
        offset: u64,
        size: u64,
        data: u32,
    },
    /// Orders the commands before it against those after it.
    Barrier,
}

fn copy(src: vk::Buffer, src_offset: u64, dst: vk::Buffer, dst_offset: u64, size: u64) -> Op {
    Op::Copy {
        src,
        dst,
        region: vk::BufferCopy {
            src_offset,
            dst_offset,
            size,
        },
    }
}

fn chunk(len: usize, done: usize, staging: &Staging) -> usize {
    (len - done).min(usize::try_from(staging.size).unwrap_or(usize::MAX))
}

impl DeviceContext {
    fn commands(&self, transfer: &mut Transfer) -> Result<Commands> {
        if let Some(c) = transfer.commands {
            return Ok(c);
        }
        let dev = &self.raw;
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(self.queue_family)
            .flags(
                vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER
                    | vk::CommandPoolCreateFlags::TRANSIENT,
            );
        // SAFETY: the device is live and the family is the one its queue was made from.
        let pool = unsafe { dev.create_command_pool(&pool_info, None) }
            .map_err(|e| map_vk_err(At::new("vkCreateCommandPool"), e))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: `pool` is live and externally synchronised (we hold the queue mutex).
        let buffers = unsafe { dev.allocate_command_buffers(&alloc) };
        // SAFETY: the device is live; the fence is destroyed with the pool.
        let fence = unsafe { dev.create_fence(&vk::FenceCreateInfo::default(), None) };
        match (buffers, fence) {
            (Ok(b), Ok(fence)) if b.len() == 1 => {
                let c = Commands {
                    pool,
                    buffer: b[0],
                    fence,
                };
                transfer.commands = Some(c);
                Ok(c)
            }
            (buffers, fence) => {
                // SAFETY: nothing made here was used; destroying the pool frees its buffers.
                unsafe {
                    if let Ok(f) = fence {
                        dev.destroy_fence(f, None);
                    }
                    dev.destroy_command_pool(pool, None);
                }
                let (function, code) = match (buffers, fence) {
                    (Err(e), _) => ("vkAllocateCommandBuffers", e),
                    (_, Err(e)) => ("vkCreateFence", e),
                    _ => ("vkAllocateCommandBuffers", vk::Result::ERROR_UNKNOWN),
                };
                Err(map_vk_err(At::new(function), code))
            }
        }
    }

    fn staging(&self, transfer: &mut Transfer) -> Result<Staging> {
        if transfer.staging.is_none() {
            // Never more than one allocation may be; the edges of a fill need 8 bytes.
            let size = STAGING_BYTES.min(self.limits.max_allocation_size).max(8);
            transfer.staging = Some(RawAllocation::new(
                self,
                size,
                Placement::Staging,
                Source::Fresh,
            )?);
        }
        match &transfer.staging {
            Some(RawAllocation {
                buffer,
                mapped: Some(ptr),
                size,
                ..
            }) => Ok(Staging {
                buffer: *buffer,
                ptr: ptr.as_ptr(),
                size: *size,
            }),
            // `Placement::Staging` memory is always mapped or not made at all.
            _ => Err(map_vk_err(
                At::new("vkMapMemory"),
                vk::Result::ERROR_MEMORY_MAP_FAILED,
            )),
        }
    }

    /// Records `ops` into the transfer command buffer, submits it and waits for it.
    ///
    /// # Safety
    /// Every buffer in `ops` must be a live buffer of this device that stays alive until this
    /// returns, every region must lie inside its buffers, fills must be 4-byte aligned, and
    /// the source and destination of one copy must not overlap.
    unsafe fn submit(&self, state: &mut QueueState, ops: &[Op]) -> Result<()> {
        if let Some(code) = state.transfer.broken {
            return Err(map_vk_err(
                At::new("vkWaitForFences (an earlier transfer)"),
                code,
            ));
        }
        let c = self.commands(&mut state.transfer)?;
        let dev = &self.raw;
        let at = |function| At::new(function);
        let barrier = |src_stage, src_access, dst_stage, dst_access| {
            let memory = [vk::MemoryBarrier::default()
                .src_access_mask(src_access)
                .dst_access_mask(dst_access)];
            // SAFETY: the command buffer is recording (begun below, before any barrier).
            unsafe {
                dev.cmd_pipeline_barrier(
                    c.buffer,
                    src_stage,
                    dst_stage,
                    vk::DependencyFlags::empty(),
                    &memory,
                    &[],
                    &[],
                )
            }
        };
        let transfer_rw = vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (every earlier submission was waited for,
        // or `broken` is set and we returned above); its pool allows resetting it on begin.
        unsafe { dev.begin_command_buffer(c.buffer, &begin) }
            .map_err(|e| map_vk_err(at("vkBeginCommandBuffer"), e))?;
        barrier(
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::AccessFlags::MEMORY_WRITE,
            vk::PipelineStageFlags::TRANSFER,
            transfer_rw,
        );
        for op in ops {
            match *op {
                // SAFETY: the caller guarantees live buffers, in-range and non-overlapping
                // regions; the command buffer is recording.
                Op::Copy { src, dst, region } => unsafe {
                    dev.cmd_copy_buffer(c.buffer, src, dst, &[region])
                },
                Op::Fill {
                    dst,
                    offset,
                    size,
                    data,
                } => {
                    // SAFETY: as above, and the caller guarantees 4-byte alignment.
                    unsafe { dev.cmd_fill_buffer(c.buffer, dst, offset, size, data) }
                }
                Op::Barrier => barrier(
                    vk::PipelineStageFlags::TRANSFER,
                    transfer_rw,
                    vk::PipelineStageFlags::TRANSFER,
                    transfer_rw,
                ),
            }
        }
        barrier(
            vk::PipelineStageFlags::TRANSFER,
            vk::AccessFlags::TRANSFER_WRITE,
            vk::PipelineStageFlags::HOST,
            vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE,
        );
        // SAFETY: the command buffer is recording.
        unsafe { dev.end_command_buffer(c.buffer) }
            .map_err(|e| map_vk_err(at("vkEndCommandBuffer"), e))?;
        let buffers = [c.buffer];
        let submit = [vk::SubmitInfo::default().command_buffers(&buffers)];
        // SAFETY: the queue is ours (we hold its mutex through `state`); the command buffer
        // is executable and the fence unsignalled (reset after every wait).
        unsafe { dev.queue_submit(state.queue, &submit, c.fence) }
            .map_err(|e| map_vk_err(at("vkQueueSubmit"), e))?;
        // SAFETY: the fence is live and was just submitted.
        let waited = unsafe { dev.wait_for_fences(&[c.fence], true, FENCE_TIMEOUT_NS) };
        let done = match waited {
            // SAFETY: the fence is signalled, so no pending submission uses it.
            Ok(()) => unsafe { dev.reset_fences(&[c.fence]) }.map_err(|e| (e, "vkResetFences")),
            Err(e) => Err((e, "vkWaitForFences")),
        };
        // A failed wait may leave the command buffer pending: never record into it again.
        done.map_err(|(e, function)| {
            state.transfer.broken = Some(e);
            map_vk_err(at(function), e)
        })
    }

    /// Reads `dst.len()` bytes at `offset` of `buffer` through staging memory.
    pub(crate) fn read_staged(
        &self,
        buffer: vk::Buffer,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        let mut state = self.lock_queue();
        let staging = self.staging(&mut state.transfer)?;
        let mut done = 0;
        while done < dst.len() {
            let n = chunk(dst.len(), done, &staging);
            let op = copy(buffer, offset + done as u64, staging.buffer, 0, n as u64);
            // SAFETY: `buffer` is a live buffer of this device (its owner borrows it for this
            // call) and the caller checked the range; staging holds `n` bytes.
            unsafe { self.submit(&mut state, &[op])? };
            // SAFETY: the copy into staging finished (fence) and was made host-visible (the
            // closing barrier); staging holds at least `n` bytes, and `dst` is a Rust slice
            // that cannot alias it; the queue mutex keeps other transfers out of staging.
            unsafe { std::ptr::copy_nonoverlapping(staging.ptr, dst[done..].as_mut_ptr(), n) };
            done += n;
        }
        Ok(())
    }

    /// Writes `src` at `offset` of `buffer` through staging memory.
    pub(crate) fn write_staged(&self, buffer: vk::Buffer, offset: u64, src: &[u8]) -> Result<()> {
        let mut state = self.lock_queue();
        let staging = self.staging(&mut state.transfer)?;
        let mut done = 0;
        while done < src.len() {
            let n = chunk(src.len(), done, &staging);
            // SAFETY: staging holds at least `n` bytes and no transfer uses it now (the
            // previous one was waited for; we hold the queue mutex); `src` cannot alias it.
            unsafe { std::ptr::copy_nonoverlapping(src[done..].as_ptr(), staging.ptr, n) };
            let op = copy(staging.buffer, 0, buffer, offset + done as u64, n as u64);
            // SAFETY: as in `read_staged`; host writes to coherent memory before the submit
            // are visible to it.
            unsafe { self.submit(&mut state, &[op])? };
            done += n;
        }
        Ok(())
    }

    /// Sets `size` bytes at `offset` of `buffer` to `value`: `vkCmdFillBuffer` for the
    /// 4-byte-aligned middle, copies from staging for the unaligned edges.
    pub(crate) fn fill_on_device(
        &self,
        buffer: vk::Buffer,
        offset: u64,
        size: u64,
        value: u8,
    ) -> Result<()> {
        let end = offset + size;
        let aligned_start = offset.next_multiple_of(4);
        let aligned_end = end - end % 4;
        let mut state = self.lock_queue();
        let mut ops = Vec::with_capacity(3);
        let mut edges = Vec::with_capacity(2);
        if aligned_start < aligned_end {
            ops.push(Op::Fill {
                dst: buffer,
                offset: aligned_start,
                size: aligned_end - aligned_start,
                data: u32::from_ne_bytes([value; 4]),
            });
            edges.push((offset, aligned_start - offset));
            edges.push((aligned_end, end - aligned_end));
        } else {
            // No aligned word inside: the whole range is an edge, at most 6 bytes.
            edges.push((offset, size));
        }
        edges.retain(|&(_, n)| n > 0);
        if !edges.is_empty() {
            let staging = self.staging(&mut state.transfer)?;
            // SAFETY: staging holds at least 8 bytes and no transfer uses it now.
            unsafe { std::ptr::write_bytes(staging.ptr, value, 8) };
            for (at, n) in edges {
                ops.push(copy(staging.buffer, 0, buffer, at, n));
            }
        }
        // SAFETY: `buffer` is live (borrowed by the caller), the caller checked the range, the
        // fill is 4-byte aligned, the edges (< 8 bytes each) come from staging and are disjoint
        // from the filled words.
        unsafe { self.submit(&mut state, &ops) }
    }

    /// Copies `size` bytes between two different buffers of this device.
    pub(crate) fn copy_on_device(
        &self,
        src: vk::Buffer,
        src_offset: u64,
        dst: vk::Buffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        let mut state = self.lock_queue();
        let op = copy(src, src_offset, dst, dst_offset, size);
        // SAFETY: both buffers are live buffers of this device (their owners borrow them,
        // one mutably, so they are different buffers and cannot overlap), ranges checked.
        unsafe { self.submit(&mut state, &[op]) }
    }

    /// Copies `size` bytes inside one buffer with memmove semantics: directly when the
    /// ranges are disjoint, otherwise through staging in chunks ordered so that no chunk
    /// overwrites source bytes not yet copied.
    pub(crate) fn move_on_device(
        &self,
        buffer: vk::Buffer,
        src_offset: u64,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        let mut state = self.lock_queue();
        let overlap = src_offset < dst_offset + size && dst_offset < src_offset + size;
        if !overlap {
            let op = copy(buffer, src_offset, buffer, dst_offset, size);
            // SAFETY: the buffer is live (borrowed mutably by the caller), ranges checked and
            // disjoint.
            return unsafe { self.submit(&mut state, &[op]) };
        }
        let staging = self.staging(&mut state.transfer)?;
        let mut ops = Vec::new();
        let chunks = size.div_ceil(staging.size);
        for i in 0..chunks {
            // Moving up: last chunk first; moving down: first chunk first.
            let k = if dst_offset > src_offset {
                chunks - 1 - i
            } else {
                i
            };
            let start = k * staging.size;
            let n = staging.size.min(size - start);
            ops.push(copy(buffer, src_offset + start, staging.buffer, 0, n));
            ops.push(Op::Barrier);
            ops.push(copy(staging.buffer, 0, buffer, dst_offset + start, n));
            ops.push(Op::Barrier);
        }
        // SAFETY: the buffer is live, ranges checked; each copy goes between the buffer and
        // staging (different buffers), `n` <= the staging size, and barriers order every
        // use of staging and of the buffer against the next.
        unsafe { self.submit(&mut state, &ops) }
    }
}
