//! Queues, launches and events on Vulkan.
//!
//! A [`VulkanQueue`] is an in-order stream of work recorded into its own command pool and
//! submitted to the device's one compute `VkQueue`. Each submission (a launch, or an event's
//! timestamp) is a *batch*: a command buffer and a descriptor pool, reused once the device's
//! timeline has passed the value the batch signalled. Every batch starts with a barrier
//! against all earlier work on the `VkQueue` and ends with one that makes its writes visible
//! to the host and to transfers, so work is ordered without further care, across queues too.
//!
//! What a launch uses is stamped with its timeline value: the module, so unloading it waits;
//! every buffer, so host copies and frees wait ([`crate::memory`]); the queue, so `sync`
//! waits. An [`VulkanEvent`] is a timeline value plus a timestamp query.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use ash::vk;
use offload_core::{Dims, KernelArg, ParamKind, Result};

use crate::device::DeviceContext;
use crate::error::{At, invalid, map_vk_err};
use crate::memory::VulkanBuffer;
use crate::program::VulkanKernel;

/// Batches a queue may have in flight before a launch waits for the oldest.
const MAX_IN_FLIGHT: usize = 32;

/// One submission's command buffer and descriptor pool.
#[derive(Debug)]
struct Batch {
    commands: vk::CommandBuffer,
    descriptors: vk::DescriptorPool,
    /// Storage-buffer descriptors `descriptors` holds (0: no pool yet).
    capacity: u32,
    /// Whether a set was allocated from `descriptors` since its last reset.
    used: bool,
    /// The timeline value its last submission signals.
    value: u64,
}

#[derive(Debug)]
struct QueueInner {
    pool: vk::CommandPool,
    idle: Vec<Batch>,
    in_flight: VecDeque<Batch>,
    /// A timeline value the next submission waits for (`wait_event`); 0: none.
    wait: u64,
}

/// An in-order stream of work on one Vulkan device.
///
/// Made by [`Device::queue`](offload_core::hal::Device::queue). Launches are recorded and submitted at once;
/// `sync` waits for the last of them. Dropping it (or `destroy_queue`) waits for its work.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::{Config};
/// let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = vk.devices().remove(0);
/// let queue = dev.queue()?;
/// let start = dev.record(&queue)?;
/// let end = dev.record(&queue)?;
/// dev.sync(&queue)?;
/// println!("{:?}", dev.elapsed(&start, &end)?);
/// dev.destroy_event(start)?;
/// dev.destroy_event(end)?;
/// dev.destroy_queue(queue)?;
/// vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanQueue {
    device: Arc<DeviceContext>,
    inner: Mutex<QueueInner>,
    /// The timeline value of this queue's last submission.
    last: AtomicU64,
}

/// A point in a queue's work: a timeline value and, where the queue writes timestamps, a
/// timestamp query written when the work before it had finished.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::{Config};
/// let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// # let dev = vk.devices().remove(0);
/// let queue = dev.queue()?;
/// let event = dev.record(&queue)?;
/// dev.sync_event(&event)?;
/// println!("device timestamps: {}", event.has_device_timestamp());
/// # dev.destroy_event(event)?;
/// # dev.destroy_queue(queue)?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanEvent {
    device: Arc<DeviceContext>,
    value: u64,
    query: Option<vk::QueryPool>,
    /// Host time when the event was first seen complete (devices without timestamps).
    observed: OnceLock<Instant>,
}

impl VulkanEvent {
    /// Whether the event carries a device timestamp (`vkCmdWriteTimestamp`); otherwise its
    /// time is the host's clock when offload first saw it complete.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// # let queue = dev.queue()?;
    /// let event = dev.record(&queue)?;
    /// let timestamps = dev.vulkan_info().timestamp_valid_bits > 0;
    /// assert_eq!(event.has_device_timestamp(), timestamps);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn has_device_timestamp(&self) -> bool {
        self.query.is_some()
    }

    fn complete(&self, call: &'static str) -> Result<()> {
        self.device.wait_for(self.value, call)?;
        self.observed.get_or_init(Instant::now);
        Ok(())
    }

    /// The device timestamp in ticks (after `complete`).
    fn ticks(&self, pool: vk::QueryPool, call: &'static str) -> Result<u64> {
        let mut data = [0u64; 1];
        // SAFETY: the pool is live with one timestamp query, written by a submission that
        // has finished (`complete`); `data` holds one 64-bit result.
        unsafe {
            self.device.raw.get_query_pool_results(
                pool,
                0,
                &mut data,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| map_vk_err(At::new(call, "vkGetQueryPoolResults"), e))?;
        Ok(data[0])
    }
}

impl Drop for VulkanEvent {
    fn drop(&mut self) {
        if let Some(pool) = self.query.take() {
            let _ = self.device.wait_for_or_idle(self.value, "Event::drop");
            // SAFETY: the submission that writes the query has finished (waited above).
            unsafe { self.device.raw.destroy_query_pool(pool, None) };
        }
        crate::LIVE_EVENTS.fetch_sub(1, Ordering::SeqCst);
    }
}

impl VulkanQueue {
    /// Creates a queue (a command pool) on `device`.
    pub(crate) fn new(device: Arc<DeviceContext>) -> Result<VulkanQueue> {
        const CALL: &str = "Device::queue";
        device.timeline(CALL)?;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the device is live and the family is the one its queue was made from.
        let pool = unsafe { device.raw.create_command_pool(&info, None) }
            .map_err(|e| map_vk_err(At::new(CALL, "vkCreateCommandPool"), e))?;
        crate::LIVE_QUEUES.fetch_add(1, Ordering::SeqCst);
        Ok(VulkanQueue {
            device,
            inner: Mutex::new(QueueInner {
                pool,
                idle: Vec::new(),
                in_flight: VecDeque::new(),
                wait: 0,
            }),
            last: AtomicU64::new(0),
        })
    }

    pub(crate) fn device(&self) -> &Arc<DeviceContext> {
        &self.device
    }

    fn lock(&self) -> MutexGuard<'_, QueueInner> {
        // Each step under the lock is one driver call or a push/pop: never half-done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A batch whose last submission has finished, or a new one.
    fn batch(&self, inner: &mut QueueInner, call: &'static str) -> Result<Batch> {
        while let Some(front) = inner.in_flight.front() {
            let full = inner.in_flight.len() >= MAX_IN_FLIGHT && inner.idle.is_empty();
            if full {
                self.device.wait_for(front.value, call)?;
            } else if !self.device.is_complete(front.value, call)? {
                break;
            }
            if let Some(done) = inner.in_flight.pop_front() {
                inner.idle.push(done);
            }
        }
        if let Some(b) = inner.idle.pop() {
            return Ok(b);
        }
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(inner.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and externally synchronised (we hold the queue's lock).
        let buffers = unsafe { self.device.raw.allocate_command_buffers(&info) }
            .map_err(|e| map_vk_err(At::new(call, "vkAllocateCommandBuffers"), e))?;
        let commands = buffers.first().copied().ok_or_else(|| {
            map_vk_err(
                At::new(call, "vkAllocateCommandBuffers"),
                vk::Result::ERROR_UNKNOWN,
            )
        })?;
        Ok(Batch {
            commands,
            descriptors: vk::DescriptorPool::null(),
            capacity: 0,
            used: false,
            value: 0,
        })
    }

    /// A descriptor set of `layout` for `count` storage buffers, from the batch's pool.
    fn descriptor_set(
        &self,
        batch: &mut Batch,
        layout: vk::DescriptorSetLayout,
        count: u32,
        call: &'static str,
    ) -> Result<vk::DescriptorSet> {
        let dev = &self.device.raw;
        if batch.capacity < count {
            if batch.descriptors != vk::DescriptorPool::null() {
                // SAFETY: the batch's last submission finished; no set of the pool is in use.
                unsafe { dev.destroy_descriptor_pool(batch.descriptors, None) };
                batch.descriptors = vk::DescriptorPool::null();
                batch.capacity = 0;
            }
            let capacity = count.max(8);
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(capacity)];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(1)
                .pool_sizes(&sizes);
            // SAFETY: the device is live; `info` lives across the call.
            batch.descriptors = unsafe { dev.create_descriptor_pool(&info, None) }
                .map_err(|e| map_vk_err(At::new(call, "vkCreateDescriptorPool"), e))?;
            batch.capacity = capacity;
            batch.used = false;
        } else if batch.used {
            // SAFETY: the batch's last submission finished; no set of the pool is in use.
            unsafe {
                dev.reset_descriptor_pool(batch.descriptors, vk::DescriptorPoolResetFlags::empty())
            }
            .map_err(|e| map_vk_err(At::new(call, "vkResetDescriptorPool"), e))?;
            batch.used = false;
        }
        let layouts = [layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(batch.descriptors)
            .set_layouts(&layouts);
        // SAFETY: pool and layout are live; the pool holds one set of `capacity >= count`
        // storage buffers and is empty (fresh or reset).
        let sets = unsafe { dev.allocate_descriptor_sets(&info) }
            .map_err(|e| map_vk_err(At::new(call, "vkAllocateDescriptorSets"), e))?;
        batch.used = true;
        sets.first().copied().ok_or_else(|| {
            map_vk_err(
                At::new(call, "vkAllocateDescriptorSets"),
                vk::Result::ERROR_UNKNOWN,
            )
        })
    }

    /// Records `record` into a batch between the ordering barriers and submits it. Returns
    /// the timeline value it signals.
    fn submit(
        &self,
        call: &'static str,
        record: impl FnOnce(&mut Batch) -> Result<()>,
    ) -> Result<u64> {
        let mut inner = self.lock();
        let mut batch = self.batch(&mut inner, call)?;
        let recorded = self.record_into(&mut batch, call, record);
        let submitted = recorded.and_then(|()| {
            // SAFETY: the command buffer was just recorded (executable, not pending: its last
            // submission finished); what it uses lives until the value is reached: pipelines
            // and layouts by the module's `last_use`, buffers by theirs, descriptor sets by
            // the batch, which is reused only after the value.
            unsafe {
                self.device
                    .submit_timeline(std::slice::from_ref(&batch.commands), inner.wait, call)
            }
        });
        match submitted {
            Ok(value) => {
                inner.wait = 0;
                batch.value = value;
                inner.in_flight.push_back(batch);
                self.last.store(value, Ordering::Release);
                Ok(value)
            }
            Err(e) => {
                // Not submitted: the batch is free again (recording resets it).
                inner.idle.push(batch);
                Err(e)
            }
        }
    }

    fn record_into(
        &self,
        batch: &mut Batch,
        call: &'static str,
        record: impl FnOnce(&mut Batch) -> Result<()>,
    ) -> Result<()> {
        let dev = &self.device.raw;
        let cb = batch.commands;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (its last submission finished, or it was
        // never submitted); its pool allows resetting it on begin; we hold the pool's lock.
        unsafe { dev.begin_command_buffer(cb, &begin) }
            .map_err(|e| map_vk_err(At::new(call, "vkBeginCommandBuffer"), e))?;
        let before = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
            .dst_access_mask(
                vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_WRITE,
            )];
        // SAFETY: the command buffer is recording.
        unsafe {
            dev.cmd_pipeline_barrier(
                cb,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &before,
                &[],
                &[],
            )
        };
        record(batch)?;
        let after = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(
                vk::AccessFlags::HOST_READ
                    | vk::AccessFlags::HOST_WRITE
                    | vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE,
            )];
        // SAFETY: the command buffer is recording.
        unsafe {
            dev.cmd_pipeline_barrier(
                cb,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &after,
                &[],
                &[],
            )
        };
        // SAFETY: the command buffer is recording.
        unsafe { dev.end_command_buffer(cb) }
            .map_err(|e| map_vk_err(At::new(call, "vkEndCommandBuffer"), e))
    }

    /// Records and submits a dispatch of `kernel`.
    pub(crate) fn launch(
        &self,
        kernel: &VulkanKernel,
        dims: &Dims,
        args: &[KernelArg<'_, VulkanBuffer>],
    ) -> Result<()> {
        const CALL: &str = "Queue::launch";
        let entry = kernel.entry_point();
        let name = &entry.name;
        if !Arc::ptr_eq(&kernel.module.device, &self.device) {
            return Err(invalid(
                CALL,
                format!("vulkan kernel `{name}` is loaded on another device than the queue"),
            ));
        }
        if args.len() != kernel.params.len() {
            return Err(invalid(
                CALL,
                format!(
                    "vulkan kernel `{name}` takes {} arguments ({:?}), {} given",
                    kernel.params.len(),
                    kernel.params,
                    args.len()
                ),
            ));
        }
        let limits = &self.device.limits;
        let mut buffers: Vec<&VulkanBuffer> = Vec::with_capacity(entry.bindings.len());
        let mut push = vec![0u8; entry.push_size as usize];
        let mut leaves = entry.push.iter();
        for (i, (arg, param)) in args.iter().zip(&kernel.params).enumerate() {
            match (arg, param) {
                (KernelArg::Buffer(b), ParamKind::Buffer) => {
                    if !Arc::ptr_eq(b.device(), &self.device) {
                        return Err(invalid(
                            CALL,
                            format!(
                                "argument {i} of vulkan kernel `{name}`: the buffer is on \
                                 another device"
                            ),
                        ));
                    }
                    if b.len() as u64 > u64::from(limits.max_storage_buffer_range) {
                        return Err(invalid(
                            CALL,
                            format!(
                                "argument {i} of vulkan kernel `{name}`: a buffer of {} bytes \
                                 cannot be bound whole; the device binds at most {} bytes \
                                 (maxStorageBufferRange)",
                                b.len(),
                                limits.max_storage_buffer_range
                            ),
                        ));
                    }
                    buffers.push(b);
                }
                (KernelArg::Scalar(bytes), ParamKind::Scalar(n)) if bytes.len() == *n => {
                    let Some(leaf) = leaves.next() else {
                        return Err(invalid(CALL, "more scalars than push-constant members"));
                    };
                    let at = leaf.offset as usize;
                    let Some(dst) = push.get_mut(at..at + bytes.len()) else {
                        return Err(invalid(CALL, "a push-constant member outside the block"));
                    };
                    dst.copy_from_slice(bytes);
                }
                _ => {
                    return Err(invalid(
                        CALL,
                        format!("argument {i} of vulkan kernel `{name}` should be {param:?}"),
                    ));
                }
            }
        }
        check_dims(dims, limits, name)?;
        let pipeline = kernel.pipeline_for(dims.block, CALL)?;
        if dims.grid.contains(&0) {
            return Ok(()); // no workgroups: nothing to run
        }
        let dev = &self.device.raw;
        let value = self.submit(CALL, |batch| {
            let cb = batch.commands;
            // SAFETY (all calls below): the command buffer is recording; the pipeline, its
            // layout and the set layout are live (the kernel holds its module); the set was
            // allocated with that layout; the push range lies inside the layout's range.
            unsafe { dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline) };
            if let Some(set_layout) = kernel.set_layout {
                let count = entry.bindings.len() as u32;
                let set = self.descriptor_set(batch, set_layout, count, CALL)?;
                let infos: Vec<vk::DescriptorBufferInfo> = buffers
                    .iter()
                    .map(|b| {
                        vk::DescriptorBufferInfo::default()
                            .buffer(b.vk_buffer())
                            .offset(0)
                            .range(vk::WHOLE_SIZE)
                    })
                    .collect();
                let writes: Vec<vk::WriteDescriptorSet<'_>> = entry
                    .bindings
                    .iter()
                    .zip(&infos)
                    .map(|(&binding, info)| {
                        vk::WriteDescriptorSet::default()
                            .dst_set(set)
                            .dst_binding(binding)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .buffer_info(std::slice::from_ref(info))
                    })
                    .collect();
                // SAFETY: the set is not in use by the device (fresh from a reset pool);
                // every buffer is a live storage buffer of this device whose whole size is
                // within maxStorageBufferRange (checked).
                unsafe { dev.update_descriptor_sets(&writes, &[]) };
                // SAFETY: see above.
                unsafe {
                    dev.cmd_bind_descriptor_sets(
                        cb,
                        vk::PipelineBindPoint::COMPUTE,
                        kernel.layout,
                        0,
                        &[set],
                        &[],
                    )
                };
            }
            if !push.is_empty() {
                // SAFETY: see above; `push` is the layout's whole range.
                unsafe {
                    dev.cmd_push_constants(
                        cb,
                        kernel.layout,
                        vk::ShaderStageFlags::COMPUTE,
                        0,
                        &push,
                    )
                };
            }
            let [x, y, z] = dims.grid;
            // SAFETY: see above; the counts are within maxComputeWorkGroupCount (checked).
            unsafe { dev.cmd_dispatch(cb, x, y, z) };
            Ok(())
        })?;
        kernel.module.last_use.fetch_max(value, Ordering::AcqRel);
        for b in buffers {
            b.used_by(value);
        }
        crate::LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits for everything submitted on this queue.
    pub(crate) fn sync(&self) -> Result<()> {
        self.device
            .wait_for(self.last.load(Ordering::Acquire), "Queue::sync")
    }

    /// Records an event after the work submitted so far.
    pub(crate) fn record(&self) -> Result<VulkanEvent> {
        const CALL: &str = "Queue::record";
        let dev = &self.device.raw;
        if self.device.limits.timestamp_valid_bits == 0 {
            // No timestamps on this queue: the event is the queue's last value.
            crate::LIVE_EVENTS.fetch_add(1, Ordering::SeqCst);
            let pending_wait = self.lock().wait;
            return Ok(VulkanEvent {
                device: self.device.clone(),
                value: self.last.load(Ordering::Acquire).max(pending_wait),
                query: None,
                observed: OnceLock::new(),
            });
        }
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(1);
        // SAFETY: the device is live; `info` lives across the call.
        let pool = unsafe { dev.create_query_pool(&info, None) }
            .map_err(|e| map_vk_err(At::new(CALL, "vkCreateQueryPool"), e))?;
        let submitted = self.submit(CALL, |batch| {
            // SAFETY: the command buffer is recording; the pool is live with one query, which
            // is reset before it is written; the queue family has timestamp bits.
            unsafe {
                dev.cmd_reset_query_pool(batch.commands, pool, 0, 1);
                dev.cmd_write_timestamp(
                    batch.commands,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    pool,
                    0,
                );
            }
            Ok(())
        });
        match submitted {
            Ok(value) => {
                crate::LIVE_EVENTS.fetch_add(1, Ordering::SeqCst);
                Ok(VulkanEvent {
                    device: self.device.clone(),
                    value,
                    query: Some(pool),
                    observed: OnceLock::new(),
                })
            }
            Err(e) => {
                // SAFETY: not submitted: no work uses the pool.
                unsafe { dev.destroy_query_pool(pool, None) };
                Err(e)
            }
        }
    }

    /// Makes the next submission of this queue wait for `event`.
    pub(crate) fn wait_event(&self, event: &VulkanEvent) -> Result<()> {
        if !Arc::ptr_eq(&event.device, &self.device) {
            return Err(invalid(
                "Queue::wait",
                "the vulkan event is of another device than the queue",
            ));
        }
        let mut inner = self.lock();
        inner.wait = inner.wait.max(event.value);
        Ok(())
    }
}

fn check_dims(dims: &Dims, limits: &crate::info::Limits, name: &str) -> Result<()> {
    const CALL: &str = "Queue::launch";
    let fail = |why: String| Err(invalid(CALL, format!("vulkan kernel `{name}`: {why}")));
    if dims.block.contains(&0) {
        return fail(format!("block {:?} has a zero dimension", dims.block));
    }
    if (0..3).any(|k| dims.block[k] > limits.max_workgroup_size[k]) {
        return fail(format!(
            "block {:?} exceeds the device's maxComputeWorkGroupSize {:?}",
            dims.block, limits.max_workgroup_size
        ));
    }
    if dims.threads_per_block() > u64::from(limits.max_workgroup_invocations) {
        return fail(format!(
            "block {:?} has {} threads, the device allows {} (maxComputeWorkGroupInvocations)",
            dims.block,
            dims.threads_per_block(),
            limits.max_workgroup_invocations
        ));
    }
    if (0..3).any(|k| dims.grid[k] > limits.max_workgroup_count[k]) {
        return fail(format!(
            "grid {:?} exceeds the device's maxComputeWorkGroupCount {:?}",
            dims.grid, limits.max_workgroup_count
        ));
    }
    Ok(())
}

impl Drop for VulkanQueue {
    fn drop(&mut self) {
        let _ = self
            .device
            .wait_for_or_idle(*self.last.get_mut(), "Queue::drop");
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        let dev = &self.device.raw;
        for b in inner.idle.drain(..).chain(inner.in_flight.drain(..)) {
            if b.descriptors != vk::DescriptorPool::null() {
                // SAFETY: every submission of the queue finished (waited above).
                unsafe { dev.destroy_descriptor_pool(b.descriptors, None) };
            }
        }
        // SAFETY: as above; destroying the pool frees its command buffers.
        unsafe { dev.destroy_command_pool(inner.pool, None) };
        crate::LIVE_QUEUES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Elapsed device time from `start` to `end` (both completed first).
pub(crate) fn elapsed(start: &VulkanEvent, end: &VulkanEvent) -> Result<Duration> {
    const CALL: &str = "Event::elapsed_since";
    if !Arc::ptr_eq(&start.device, &end.device) {
        return Err(invalid(CALL, "the vulkan events are of different devices"));
    }
    start.complete(CALL)?;
    end.complete(CALL)?;
    let limits = &end.device.limits;
    match (start.query, end.query) {
        (Some(a), Some(b)) => {
            let (t0, t1) = (start.ticks(a, CALL)?, end.ticks(b, CALL)?);
            let ticks = match limits.timestamp_valid_bits {
                64.. => t1.saturating_sub(t0),
                bits => t1.wrapping_sub(t0) & ((1u64 << bits) - 1),
            };
            let ns = ticks as f64 * f64::from(limits.timestamp_period_ns);
            Ok(Duration::from_nanos(ns as u64))
        }
        _ => {
            let (a, b) = (start.observed.get(), end.observed.get());
            Ok(match (a, b) {
                (Some(a), Some(b)) => b.saturating_duration_since(*a),
                _ => Duration::ZERO,
            })
        }
    }
}

/// Waits for an event.
pub(crate) fn sync_event(event: &VulkanEvent) -> Result<()> {
    event.complete("Event::sync")
}

/// Waits for an event's submission, then destroys it.
pub(crate) fn destroy_event(event: VulkanEvent) -> Result<()> {
    let waited = event.device.wait_for(event.value, "Event::drop");
    drop(event);
    waited
}
