//! Queues, launches, queued copies and events on Vulkan: [`VulkanQueue`] and [`VulkanEvent`]
//! and their `hal::Queue` and `hal::Event` impls.
//!
//! A [`VulkanQueue`] is an in-order stream of work on one device, submitted to the
//! device's one compute `VkQueue`. Work is *batched* (Q1): launches, queued writes, fills
//! and copies are recorded into the queue's open batch (one command buffer) and return; the
//! batch is submitted when something needs it — a sync, an event, `is_idle`, a host access
//! to (or free of) a buffer it uses, the unload of a module it uses — or when it holds
//! [`DEPTH`] commands. Inside a batch, a command that uses a buffer an earlier command of
//! the batch used comes after a barrier; independent commands share one. Every batch starts
//! with a barrier against all earlier work on the `VkQueue` and ends with one that makes
//! its writes visible to the host and to transfers, so submitted work is ordered across
//! queues too, and an event (which submits its queue's batch) orders another queue's later
//! work after it.
//!
//! A launch records only the state that differs from the launch before it in the same
//! command buffer — pipeline, descriptor set, push constants — and reuses the batch's last
//! descriptor set when its bindings are the same (see [`crate::batch::Bound`]): a stream of
//! launches of one kernel on the same buffers records a barrier and a dispatch each, as a
//! hand-written command buffer would.
//!
//! What a batch uses is noted in each buffer's and module's [`Usage`]: its open batch
//! until it is submitted, then its timeline value. A [`VulkanEvent`] is a timeline value
//! (known once the batch before it is submitted) plus a timestamp query.
//!
//! Host functions never block their caller: the queue holds the work enqueued after one
//! behind its gate until the function has run on the queue's thread (queue/gate.rs, a child
//! of this module: the queue's state holds the gate, and the gate's calls are the queue's).

// The gate behind host functions: a part of the queue (it shares the queue's state, and
// the queue's state holds it), so a child of this module, never a sibling.
mod gate;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use ash::vk;
use offload_core::hal::{self, HostFn};
use offload_core::{BackendKind, Dims, Error, KernelArg, ParamKind, Result};

use offload_driver::{HostFailure, HostThread};

use crate::allocation::RawAllocation;
use crate::batch::{Batch, Bound, Query};
use crate::bounds::Described;
use crate::context::{DeviceContext, VulkanDevice};
use crate::error::{At, check_range, map_vk_err};
use crate::memory::{Placement, Source, VulkanBuffer};
use crate::program::{ModuleInner, VulkanKernel, descriptor_type};
use crate::usage::Usage;
use gate::{Gate, Held, Holders, Mark};

/// Batches a queue may have in flight before a new one waits for the oldest.
const MAX_IN_FLIGHT: usize = 32;

/// Commands an open batch takes before it is submitted without being asked.
pub const DEPTH: u32 = 256;

/// Push-constant bytes a launch gathers on the stack (more go to the heap): the largest
/// `maxPushConstantsSize` common devices report.
const PUSH_INLINE: usize = 256;

/// The most bytes a queued write records into the command buffer itself
/// (`vkCmdUpdateBuffer`); larger or unaligned writes go through staging memory.
const INLINE_WRITE: usize = 65536;

/// The batch being recorded.
pub(crate) struct Open {
    batch: Batch,
    commands: u32,
    /// Buffers used by commands since the last barrier.
    touched: Vec<vk::Buffer>,
    /// The usages of everything its commands use, stamped when it is submitted.
    usages: Vec<Arc<Usage>>,
}

pub(crate) struct QueueInner {
    pool: vk::CommandPool,
    idle: Vec<Batch>,
    pub(crate) in_flight: VecDeque<Batch>,
    open: Option<Open>,
    /// A timeline value the next submission waits for (`wait_event`); 0: none.
    pub(crate) wait: u64,
    /// The gate behind host functions (queue/gate.rs).
    pub(crate) gate: Gate,
    /// Out-of-range accesses reported by finished batches, for the next sync.
    found: Option<crate::bounds::Found>,
}

/// A queue's state, shared with the usages that name it (so a host access can submit its
/// open batch), with its events and with its host functions' thread.
pub(crate) struct QueueShared {
    pub(crate) device: Arc<DeviceContext>,
    inner: Mutex<QueueInner>,
    /// Told when the gate opens and held batches are submitted.
    pub(crate) changed: Condvar,
    /// The timeline value of this queue's last submission.
    last: AtomicU64,
    /// Where its host functions run (joined when the queue goes).
    pub(crate) host: HostThread,
    /// A host function's panic, reported by the next sync.
    pub(crate) failure: HostFailure,
    pub(crate) holders: Arc<Holders>,
}

impl std::fmt::Debug for QueueShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanQueue")
            .field("last", &self.last.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// An in-order stream of work on one Vulkan device.
///
/// Made by [`Device::queue`](offload_core::hal::Device::queue). Work is recorded into
/// batches and submitted when something needs it (see the module docs); `sync` submits and
/// waits. Dropping it (or `destroy`) submits and waits for its work.
///
/// ```
/// use offload_core::hal::{Device as _, Event as _, Platform as _, Program as _, Queue as _};
/// use offload_core::{Config};
/// let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = vk.devices().remove(0);
/// let queue = dev.queue()?;
/// let start = queue.record()?;
/// let end = queue.record()?;
/// queue.sync()?;
/// println!("{:?}", end.elapsed_since(&start)?);
/// start.destroy()?;
/// end.destroy()?;
/// queue.destroy()?;
/// vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanQueue {
    shared: Arc<QueueShared>,
}

/// A point in a queue's work: a timeline value and, where the queue writes timestamps, a
/// timestamp query written when the work before it had finished.
///
/// ```
/// use offload_core::hal::{Device as _, Event as _, Platform as _, Program as _, Queue as _};
/// use offload_core::{Config};
/// let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// # let dev = vk.devices().remove(0);
/// let queue = dev.queue()?;
/// let event = queue.record()?;
/// event.sync()?;
/// println!("device timestamps: {}", event.has_device_timestamp());
/// # event.destroy()?;
/// # queue.destroy()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanEvent {
    device: Arc<DeviceContext>,
    /// Its timeline value, known once the batch before it is submitted (queue/gate.rs).
    mark: Arc<Mark>,
    query: Option<Arc<Query>>,
    /// Host time when the event was first seen complete (devices without timestamps).
    observed: OnceLock<Instant>,
}

impl VulkanEvent {
    /// Whether the event carries a device timestamp (`vkCmdWriteTimestamp`); otherwise its
    /// time is the host's clock when offload first saw it complete.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Queue as _};
    /// # use offload_core::{Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// # let queue = dev.queue()?;
    /// let event = queue.record()?;
    /// let timestamps = dev.vulkan_info().timestamp_valid_bits > 0;
    /// assert_eq!(event.has_device_timestamp(), timestamps);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn has_device_timestamp(&self) -> bool {
        self.query.is_some()
    }

    fn complete(&self) -> Result<()> {
        let value = self.mark.wait()?;
        self.device.wait_for(value)?;
        self.observed.get_or_init(Instant::now);
        Ok(())
    }

    /// The device timestamp in ticks (after `complete`).
    fn ticks(&self, pool: vk::QueryPool) -> Result<u64> {
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
        .map_err(|e| map_vk_err(At::new("vkGetQueryPoolResults"), e))?;
        Ok(data[0])
    }
}

impl Drop for VulkanEvent {
    fn drop(&mut self) {
        // Its query goes with the last of it and the batch that writes it (`Query`).
        crate::stats::LIVE_EVENTS.fetch_sub(1, Ordering::SeqCst);
    }
}

impl QueueShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueInner> {
        // Each step under the lock is one driver call or a push/pop: never half-done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The timeline value of the queue's last submission.
    pub(crate) fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// Recycles the batches whose submission has finished, oldest first, keeping what
    /// their bounds reports found for the next sync; with `make_room`, waits for the
    /// oldest while [`MAX_IN_FLIGHT`] are in flight and none is idle.
    fn reap(&self, inner: &mut QueueInner, make_room: bool) -> Result<()> {
        while let Some(front) = inner.in_flight.front() {
            let full = inner.in_flight.len() >= MAX_IN_FLIGHT && inner.idle.is_empty();
            if make_room && full {
                self.device.wait_for(front.value)?;
            } else if !self.device.is_complete(front.value)? {
                break;
            }
            if let Some(mut done) = inner.in_flight.pop_front() {
                // SAFETY: its submission finished (checked or waited above).
                let found = unsafe { done.recycle(&self.device) };
                crate::bounds::merge(&mut inner.found, found);
                inner.idle.push(done);
            }
        }
        Ok(())
    }

    /// A batch whose last submission has finished (recycled), or a new one.
    fn batch(&self, inner: &mut QueueInner) -> Result<Batch> {
        self.reap(inner, true)?;
        if let Some(b) = inner.idle.pop() {
            return Ok(b);
        }
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(inner.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and externally synchronised (we hold the queue's lock).
        let buffers = unsafe { self.device.raw.allocate_command_buffers(&info) }
            .map_err(|e| map_vk_err(At::new("vkAllocateCommandBuffers"), e))?;
        let commands = buffers.first().copied().ok_or_else(|| {
            map_vk_err(
                At::new("vkAllocateCommandBuffers"),
                vk::Result::ERROR_UNKNOWN,
            )
        })?;
        Ok(Batch::new(commands))
    }

    /// The open batch, begun (with its leading barrier) if there was none.
    fn open<'a>(&self, inner: &'a mut QueueInner) -> Result<&'a mut Open> {
        if inner.open.is_none() {
            let batch = self.batch(inner)?;
            let cb = batch.commands;
            let begin = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            // SAFETY: the command buffer is not pending (its last submission finished, or it
            // was never submitted); its pool allows resetting it on begin; we hold the
            // pool's lock.
            if let Err(e) = unsafe { self.device.raw.begin_command_buffer(cb, &begin) } {
                inner.idle.push(batch);
                return Err(map_vk_err(At::new("vkBeginCommandBuffer"), e));
            }
            let mut batch = batch;
            // A command buffer begins with nothing bound.
            batch.bound = Bound::default();
            barrier(
                &self.device,
                cb,
                (
                    vk::PipelineStageFlags::ALL_COMMANDS,
                    vk::AccessFlags::MEMORY_WRITE,
                ),
                (
                    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                    vk::AccessFlags::SHADER_READ
                        | vk::AccessFlags::SHADER_WRITE
                        | vk::AccessFlags::TRANSFER_READ
                        | vk::AccessFlags::TRANSFER_WRITE,
                ),
            );
            inner.open = Some(Open {
                batch,
                commands: 0,
                touched: Vec::new(),
                usages: Vec::new(),
            });
        }
        inner
            .open
            .as_mut()
            .ok_or_else(|| Error::invalid("", "the vulkan queue lost its open batch"))
    }

    /// Records one command into the open batch: a barrier first if it uses a buffer an
    /// earlier command of the batch used, then `record`; notes its buffers (and module)
    /// as used by the batch. Submits the batch once it holds [`DEPTH`] commands.
    fn record(
        self: &Arc<Self>,
        buffers: &[&VulkanBuffer],
        module: Option<&Arc<ModuleInner>>,
        record: impl FnOnce(&mut Batch, vk::CommandBuffer) -> Result<()>,
    ) -> Result<()> {
        self.record_using(buffers.iter().copied(), module, record)
    }

    /// [`record`](Self::record) with the buffers as an iterator (a launch reads them from
    /// its arguments rather than collecting them).
    fn record_using<'b>(
        self: &Arc<Self>,
        buffers: impl Iterator<Item = &'b VulkanBuffer> + Clone,
        module: Option<&Arc<ModuleInner>>,
        record: impl FnOnce(&mut Batch, vk::CommandBuffer) -> Result<()>,
    ) -> Result<()> {
        let mut inner = self.lock();
        let open = self.open(&mut inner)?;
        let cb = open.batch.commands;
        if buffers
            .clone()
            .any(|b| open.touched.contains(&b.vk_buffer()))
        {
            let work = (
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
            );
            let next = (
                work.0,
                vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE,
            );
            barrier(&self.device, cb, work, next);
            open.touched.clear();
        }
        record(&mut open.batch, cb)?;
        if let Some(module) = module {
            open.batch.hold(module);
        }
        open.touched.extend(buffers.clone().map(|b| b.vk_buffer()));
        let usages = buffers.map(|b| b.usage()).chain(module.map(|m| &m.usage));
        for usage in usages {
            if !open.usages.iter().any(|u| Arc::ptr_eq(u, usage)) {
                usage.opened_by(self);
                open.usages.push(usage.clone());
            }
        }
        open.commands += 1;
        if open.commands >= DEPTH {
            self.submit(&mut inner)?;
        }
        Ok(())
    }

    /// Closes the open batch, if any: submits it, or holds it behind the closed gate
    /// (queue/gate.rs). On a failed submission the batch's commands are dropped, never run, and
    /// the error says so.
    pub(crate) fn submit(&self, inner: &mut QueueInner) -> Result<()> {
        let Some(open) = inner.open.take() else {
            return Ok(());
        };
        inner.gate.closed += 1;
        if inner.gate.blocked.is_some() {
            inner.gate.held.push_back(Held::Batch(Box::new(open)));
            return Ok(());
        }
        self.send(inner, open)
    }

    /// Submits a closed batch (with its trailing barrier), after the timeline value
    /// `inner.wait`.
    pub(crate) fn send(&self, inner: &mut QueueInner, open: Open) -> Result<()> {
        inner.gate.released += 1;
        let Open {
            mut batch, usages, ..
        } = open;
        let cb = batch.commands;
        barrier(
            &self.device,
            cb,
            (
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
            ),
            (
                vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::HOST_READ
                    | vk::AccessFlags::HOST_WRITE
                    | vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE,
            ),
        );
        // SAFETY: the command buffer is recording.
        let ended = unsafe { self.device.raw.end_command_buffer(cb) }
            .map_err(|e| map_vk_err(At::new("vkEndCommandBuffer"), e));
        let submitted = ended.and_then(|()| {
            // SAFETY: the command buffer was just recorded (executable, not pending: its last
            // submission finished); what it uses lives until the value is reached: modules
            // and staging memory by the batch, which is recycled only after the value,
            // buffers by their usages (every host access, free and drop waits for them).
            unsafe {
                self.device
                    .submit_timeline(std::slice::from_ref(&cb), inner.wait)
            }
        });
        let me: *const QueueShared = self;
        match submitted {
            Ok(value) => {
                inner.wait = 0;
                batch.value = value;
                inner.in_flight.push_back(batch);
                self.last.store(value, Ordering::Release);
                for usage in usages {
                    usage.submitted(me, value);
                }
                crate::stats::SUBMISSIONS.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                for usage in usages {
                    usage.submitted(me, 0);
                }
                // SAFETY: never submitted; beginning it again resets it. Its launches never
                // ran, so they reported nothing.
                let _never_ran = unsafe { batch.recycle(&self.device) };
                inner.idle.push(batch);
                Err(Error::Driver {
                    backend: BackendKind::Vulkan,
                    call: "",
                    code: -1,
                    message: format!(
                        "the queued work since the last submission was dropped, not run: {e}"
                    ),
                })
            }
        }
    }

    /// Reads the bounds reports of the finished batches; returns the first out-of-range
    /// access reported since the last call (once).
    fn reports(&self) -> Result<()> {
        let mut inner = self.lock();
        self.reap(&mut inner, false)?;
        match inner.found.take() {
            Some(found) => Err(found.into_error()),
            None => Ok(()),
        }
    }
}

impl VulkanQueue {
    /// Creates a queue (a command pool) on `device`.
    pub(crate) fn new(device: Arc<DeviceContext>) -> Result<VulkanQueue> {
        device.timeline()?;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the device is live and the family is the one its queue was made from.
        let pool = unsafe { device.raw.create_command_pool(&info, None) }
            .map_err(|e| map_vk_err(At::new("vkCreateCommandPool"), e))?;
        crate::stats::LIVE_QUEUES.fetch_add(1, Ordering::SeqCst);
        Ok(VulkanQueue {
            shared: Arc::new(QueueShared {
                device,
                inner: Mutex::new(QueueInner {
                    pool,
                    idle: Vec::new(),
                    in_flight: VecDeque::new(),
                    open: None,
                    wait: 0,
                    gate: Gate::default(),
                    found: None,
                }),
                changed: Condvar::new(),
                last: AtomicU64::new(0),
                host: HostThread::default(),
                failure: HostFailure::default(),
                holders: Arc::default(),
            }),
        })
    }

    /// Commands recorded and not yet submitted (for tests of batching).
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Queue as _};
    /// # use offload_core::{Config, MemKind};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let queue = dev.queue()?;
    /// let buf = dev.alloc(16, MemKind::Device)?;
    /// queue.enqueue_fill(&buf, 0, 16, &[7])?;
    /// assert_eq!(queue.unsubmitted(), 1);
    /// queue.sync()?;
    /// assert_eq!(queue.unsubmitted(), 0);
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn unsubmitted(&self) -> u32 {
        self.shared.lock().open.as_ref().map_or(0, |o| o.commands)
    }

    fn check_device(&self, buffers: &[&VulkanBuffer]) -> Result<()> {
        if buffers
            .iter()
            .any(|b| !Arc::ptr_eq(b.device(), &self.shared.device))
        {
            return Err(Error::invalid(
                "",
                "the vulkan buffer is on another device than the queue",
            ));
        }
        Ok(())
    }

    /// Waits for everything enqueued (host functions and held work first); reports (once)
    /// a held operation's failure, a host function's panic and the first out-of-range
    /// access the finished work recorded (`crate::bounds`), each of them (L6, L8).
    fn sync_as(&self) -> Result<()> {
        self.shared.drain()?;
        self.shared.device.wait_for(self.shared.last())?;
        let failed = self.shared.take_failed();
        let panicked = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .map(|text| Error::Callback {
                callback: offload_core::hal::HOST_FN_CALLBACK,
                source: text.into(),
            });
        let strayed = self.shared.reports().err();
        Error::join(failed.into_iter().chain(panicked).chain(strayed).collect())
    }
}

impl hal::Queue<VulkanDevice> for VulkanQueue {
    /// Records a dispatch of `kernel` into the open batch. Unverified code runs behind it
    /// (when the batch is submitted): the caller holds the launch contract.
    unsafe fn launch(
        &self,
        kernel: &VulkanKernel,
        dims: &Dims,
        args: &[KernelArg<'_, VulkanBuffer>],
    ) -> Result<()> {
        let device = &self.shared.device;
        let entry = kernel.entry_point();
        let name = &entry.name;
        if !Arc::ptr_eq(&kernel.module.device, device) {
            return Err(Error::invalid(
                "",
                format!("vulkan kernel `{name}` is loaded on another device than the queue"),
            ));
        }
        if args.len() != kernel.params.len() {
            return Err(Error::invalid(
                "",
                format!(
                    "vulkan kernel `{name}` takes {} arguments ({:?}), {} given",
                    kernel.params.len(),
                    kernel.params,
                    args.len()
                ),
            ));
        }
        let limits = &device.limits;
        // Nothing here allocates in the common case (a launch is recorded in well under a
        // microsecond on lavapipe, so a few allocations show): the push constants are
        // gathered on the stack when they fit, and the bound buffers are read from `args`
        // again where they are needed (`bound`, below) instead of being collected.
        let mut buffers = 0;
        let push_size = entry.push_size as usize;
        let mut push_inline = [0u8; PUSH_INLINE];
        let mut push_heap = Vec::new();
        let push: &mut [u8] = match push_inline.get_mut(..push_size) {
            Some(inline) => inline,
            None => {
                push_heap.resize(push_size, 0);
                &mut push_heap
            }
        };
        let mut leaves = entry.push.iter();
        for (i, (arg, param)) in args.iter().zip(&kernel.params).enumerate() {
            // Numbered from 1, as the core's messages do.
            let nth = i + 1;
            let (limit, align, what) = match param {
                ParamKind::Uniform => (
                    limits.max_uniform_buffer_range,
                    limits.min_uniform_buffer_offset_alignment,
                    "Uniform",
                ),
                _ => (
                    limits.max_storage_buffer_range,
                    limits.min_storage_buffer_offset_alignment,
                    "Storage",
                ),
            };
            match (arg, param) {
                (KernelArg::Buffer(b), ParamKind::Buffer | ParamKind::Uniform) => {
                    if !Arc::ptr_eq(b.device(), device) {
                        return Err(Error::invalid(
                            "",
                            format!(
                                "argument {nth} of vulkan kernel `{name}`: the buffer is on \
                                 another device"
                            ),
                        ));
                    }
                    if b.len() as u64 > u64::from(limit) {
                        return Err(Error::invalid(
                            "",
                            format!(
                                "argument {nth} of vulkan kernel `{name}`: a buffer of {} bytes \
                                 cannot be bound whole as {param}; the device binds at most {} \
                                 bytes (max{what}BufferRange): pass a range of it",
                                b.len(),
                                limit
                            ),
                        ));
                    }
                    check_min_size(entry, buffers, b.len() as u64, nth)?;
                    buffers += 1;
                }
                (
                    KernelArg::Range {
                        buffer,
                        offset,
                        len,
                    },
                    ParamKind::Buffer | ParamKind::Uniform,
                ) => {
                    let (offset, len) = (*offset as u64, *len as u64);
                    let align = align.max(1);
                    let problem = if !Arc::ptr_eq(buffer.device(), device) {
                        Some("the buffer is on another device".to_string())
                    } else if offset
                        .checked_add(len)
                        .is_none_or(|e| e > buffer.len() as u64)
                    {
                        Some(format!(
                            "bytes {offset}..{} are outside the {}-byte buffer",
                            offset as u128 + len as u128,
                            buffer.len()
                        ))
                    } else if offset % align != 0 {
                        Some(format!(
                            "a range starting at byte {offset}: this device binds ranges \
                             as {param} at multiples of {align} bytes \
                             (min{what}BufferOffsetAlignment)"
                        ))
                    } else if len > u64::from(limit) || len == 0 {
                        Some(format!(
                            "a range of {len} bytes: the device binds 1 to {limit} bytes as \
                             {param} (max{what}BufferRange)"
                        ))
                    } else {
                        None
                    };
                    if let Some(problem) = problem {
                        return Err(Error::invalid(
                            "",
                            format!("argument {nth} of vulkan kernel `{name}`: {problem}"),
                        ));
                    }
                    check_min_size(entry, buffers, len, nth)?;
                    buffers += 1;
                }
                (KernelArg::Scalar(bytes), p) if p.scalar_size() == Some(bytes.len()) => {
                    let Some(leaf) = leaves.next() else {
                        return Err(Error::invalid(
                            "",
                            "more scalars than push-constant members",
                        ));
                    };
                    let at = leaf.offset as usize;
                    let Some(dst) = push.get_mut(at..at + bytes.len()) else {
                        return Err(Error::invalid(
                            "",
                            "a push-constant member outside the block",
                        ));
                    };
                    dst.copy_from_slice(bytes);
                }
                _ => {
                    return Err(Error::invalid(
                        "",
                        format!("argument {nth} of vulkan kernel `{name}` should be {param}"),
                    ));
                }
            }
        }
        check_dims(dims, limits, name)?;
        if dims.shared_memory > 0 {
            return Err(Error::Unsupported {
                backend: BackendKind::Vulkan,
                call: "",
                reason: format!(
                    "vulkan kernel `{name}`: dynamic shared memory ({} bytes): a Vulkan compute \
                     shader declares its workgroup memory with a fixed size",
                    dims.shared_memory
                ),
            });
        }
        let pipeline = kernel.pipeline_for(dims.block)?;
        if dims.grid.contains(&0) {
            return Ok(()); // no workgroups: nothing to run
        }
        let dev = &device.raw;
        let push: &[u8] = push;
        // The buffers bound, in argument order (each checked above), with the (offset, range)
        // its binding sees.
        let bound = || {
            args.iter().filter_map(|arg| match *arg {
                KernelArg::Buffer(b) => Some((b, 0, vk::WHOLE_SIZE)),
                KernelArg::Range {
                    buffer,
                    offset,
                    len,
                } => Some((buffer, offset as u64, len as u64)),
                KernelArg::Scalar(_) => None,
            })
        };
        // What the set's bindings describe, in binding order of the entry point, then the
        // bounds report's slot (`crate::bounds`).
        let described = |report: Option<Described>| {
            entry
                .bindings
                .iter()
                .zip(&entry.uniform)
                .zip(bound())
                .map(|((&binding, &uniform), (b, offset, range))| -> Described {
                    (
                        binding,
                        descriptor_type(uniform),
                        b.vk_buffer(),
                        offset,
                        range,
                    )
                })
                .chain(report)
        };
        let buffers = bound().map(|(b, ..)| b);
        self.shared
            .record_using(buffers, Some(&kernel.module), |batch, cb| {
                // Only what differs from the launch before it in this batch is recorded: the
                // pipeline, the descriptor set (written earlier in the batch with the same
                // bindings, or fresh), the push constants (see `Bound`).
                // SAFETY (all calls below): the command buffer is recording; the pipeline, its
                // layout and the set layout are live (the batch holds the module until it has
                // run); the set was allocated with that layout; the push range lies inside the
                // layout's range.
                if batch.bound.pipeline != pipeline {
                    // SAFETY: see above.
                    unsafe { dev.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline) };
                    batch.bound.pipeline(pipeline);
                }
                if let Some(layout) = kernel.set_layout {
                    let report = match entry.report_binding {
                        Some(b) => Some(batch.reports.slot(device, &kernel.module, b)?),
                        None => None,
                    };
                    let set = match batch.written_set(layout, described(report)) {
                        Some(set) => set,
                        None => {
                            let uniforms = entry.uniform.iter().filter(|&&u| u).count() as u32;
                            let storage = entry.bindings.len() as u32 - uniforms
                                + u32::from(report.is_some());
                            let set = batch.descriptor_set(device, layout, [storage, uniforms])?;
                            // SAFETY: the set is fresh; `launch` checked every buffer
                            // and range it describes; the report's slot is a range of
                            // the batch's own report memory, aligned to
                            // minStorageBufferOffsetAlignment (`crate::bounds`).
                            unsafe { write_set(dev, set, described(report)) };
                            batch.wrote_set(layout, described(report), set);
                            set
                        }
                    };
                    if batch.bound.set != set {
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
                        batch.bound.set = set;
                    }
                }
                if !push.is_empty() && batch.bound.push.as_deref() != Some(push) {
                    // SAFETY: see above; `push` is the layout's whole range.
                    unsafe {
                        dev.cmd_push_constants(
                            cb,
                            kernel.layout,
                            vk::ShaderStageFlags::COMPUTE,
                            0,
                            push,
                        )
                    };
                    let pushed = batch.bound.push.get_or_insert_with(Vec::new);
                    pushed.clear();
                    pushed.extend_from_slice(push);
                }
                let [x, y, z] = dims.grid;
                // SAFETY: see above; the counts are within maxComputeWorkGroupCount (checked).
                unsafe { dev.cmd_dispatch(cb, x, y, z) };
                Ok(())
            })?;
        crate::stats::LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Records a write of `data` into `buffer` at `offset`: inside the command buffer when
    /// it is small and 4-byte aligned, through staging memory otherwise.
    fn enqueue_write(&self, buffer: &VulkanBuffer, offset: usize, data: Vec<u8>) -> Result<()> {
        self.check_device(&[buffer])?;
        check_range(offset, data.len(), buffer.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let device = &self.shared.device;
        let dev = &device.raw;
        if offset % 4 == 0 && data.len() % 4 == 0 && data.len() <= INLINE_WRITE {
            return self.shared.record(&[buffer], None, |_, cb| {
                // SAFETY: the command buffer is recording; the range lies inside the buffer
                // (checked), is 4-byte aligned and at most 65536 bytes; the buffer was made
                // with TRANSFER_DST.
                unsafe { dev.cmd_update_buffer(cb, buffer.vk_buffer(), offset as u64, &data) };
                Ok(())
            });
        }
        let staging =
            RawAllocation::new(device, data.len() as u64, Placement::Staging, Source::Fresh)?;
        let Some(ptr) = staging.mapped else {
            // SAFETY: never used by any command.
            unsafe { staging.destroy(dev) };
            device.allocations.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::invalid(
                "",
                "the device's staging memory is not mappable",
            ));
        };
        // SAFETY: the mapping holds `data.len()` bytes (the allocation's size); nothing else
        // uses the fresh allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), data.len()) };
        let source = staging.buffer;
        let mut staging = Some(staging);
        let recorded = self.shared.record(&[buffer], None, |batch, cb| {
            let region = vk::BufferCopy::default()
                .src_offset(0)
                .dst_offset(offset as u64)
                .size(data.len() as u64);
            // SAFETY: the command buffer is recording; both ranges lie inside their buffers
            // (checked; the staging buffer is exactly as long); the batch keeps the staging
            // memory until it has run.
            unsafe { dev.cmd_copy_buffer(cb, source, buffer.vk_buffer(), &[region]) };
            if let Some(s) = staging.take() {
                batch.hold_staging(s);
            }
            Ok(())
        });
        if let Some(s) = staging.take() {
            // SAFETY: not recorded into any command buffer.
            unsafe { s.destroy(dev) };
            device.allocations.fetch_sub(1, Ordering::SeqCst);
        }
        recorded
    }

    /// Records a fill of `len` bytes of `buffer` at `offset` with `pattern` repeated:
    /// `vkCmdFillBuffer` where the pattern repeats into 4 bytes and the range is 4-byte
    /// aligned, a queued write of the expanded pattern otherwise.
    fn enqueue_fill(
        &self,
        buffer: &VulkanBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        self.check_device(&[buffer])?;
        check_range(offset, len, buffer.len())?;
        offload_core::hal::check_fill(len, pattern)?;
        if len == 0 {
            return Ok(());
        }
        let word = match pattern.len() {
            1 | 2 | 4 => {
                let mut w = [0u8; 4];
                for (i, b) in w.iter_mut().enumerate() {
                    *b = pattern[i % pattern.len()];
                }
                Some(u32::from_ne_bytes(w))
            }
            _ => None,
        };
        match word {
            Some(word) if offset % 4 == 0 && len % 4 == 0 => {
                let dev = &self.shared.device.raw;
                self.shared.record(&[buffer], None, |_, cb| {
                    // SAFETY: the command buffer is recording; the range lies inside the
                    // buffer (checked) and is 4-byte aligned; TRANSFER_DST usage.
                    unsafe {
                        dev.cmd_fill_buffer(cb, buffer.vk_buffer(), offset as u64, len as u64, word)
                    };
                    Ok(())
                })
            }
            _ => {
                let expanded: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
                self.enqueue_write(buffer, offset, expanded)
            }
        }
    }

    /// Records a copy between two buffers of this device (two ranges of one must not
    /// overlap).
    fn enqueue_copy(
        &self,
        src: &VulkanBuffer,
        src_offset: usize,
        dst: &VulkanBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.check_device(&[src, dst])?;
        check_range(src_offset, len, src.len())?;
        check_range(dst_offset, len, dst.len())?;
        let same = src.vk_buffer() == dst.vk_buffer();
        if same && src_offset.abs_diff(dst_offset) < len {
            return Err(Error::invalid(
                "",
                "the source and destination ranges of one vulkan buffer overlap",
            ));
        }
        if len == 0 {
            return Ok(());
        }
        let dev = &self.shared.device.raw;
        let buffers: &[&VulkanBuffer] = if same { &[src] } else { &[src, dst] };
        self.shared.record(buffers, None, |_, cb| {
            let region = vk::BufferCopy::default()
                .src_offset(src_offset as u64)
                .dst_offset(dst_offset as u64)
                .size(len as u64);
            // SAFETY: the command buffer is recording; both ranges lie inside their buffers
            // and do not overlap (checked); TRANSFER_SRC/DST usage.
            unsafe { dev.cmd_copy_buffer(cb, src.vk_buffer(), dst.vk_buffer(), &[region]) };
            Ok(())
        })
    }

    /// Queues `f` and returns: it runs on the queue's thread once the work enqueued before
    /// it has finished, and the work enqueued after it is held in offload until it has run
    /// (queue/gate.rs; a `VkQueue` has no host callbacks). Its panic is the next sync's
    /// `Error::Callback`.
    fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        self.shared.enqueue_host_fn(f)
    }

    /// Submits, then waits for everything enqueued on this queue.
    fn sync(&self) -> Result<()> {
        self.sync_as()
    }

    /// Submits, then says whether everything enqueued has finished (never, while a host
    /// function is pending or work is held behind one).
    fn is_idle(&self) -> Result<bool> {
        {
            let mut inner = self.shared.lock();
            if !inner.gate.is_quiet() {
                return Ok(false);
            }
            self.shared.submit(&mut inner)?;
        }
        self.shared.device.is_complete(self.shared.last())
    }

    /// Records an event after the work enqueued so far, and submits it (behind a host
    /// function, holds it: the event's value is known once it is submitted).
    fn record(&self) -> Result<VulkanEvent> {
        let shared = &self.shared;
        let device = &shared.device;
        let dev = &device.raw;
        let query = match device.limits.timestamp_valid_bits {
            // No timestamps on this queue: the event is a timeline value.
            0 => None,
            _ => Some(Arc::new(Query::new(device)?)),
        };
        let mark = Arc::new(Mark::new(shared));
        let recorded = match &query {
            None => Ok(()),
            Some(query) => shared.record(&[], None, |batch, cb| {
                // SAFETY: the command buffer is recording; the pool is live with one query,
                // which is reset before it is written; the queue family has timestamp bits;
                // the batch holds the pool until it has run.
                unsafe {
                    dev.cmd_reset_query_pool(cb, query.pool, 0, 1);
                    dev.cmd_write_timestamp(
                        cb,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        query.pool,
                        0,
                    );
                }
                batch.hold_query(query);
                Ok(())
            }),
        };
        let after = recorded.and_then(|()| {
            let mut inner = shared.lock();
            shared.settle_after(&mut inner, mark.clone())
        })?;
        shared.finish(after);
        crate::stats::LIVE_EVENTS.fetch_add(1, Ordering::SeqCst);
        Ok(VulkanEvent {
            device: device.clone(),
            mark,
            query,
            observed: OnceLock::new(),
        })
    }

    /// Makes the next submission of this queue wait for `event`; where the event is still
    /// held behind a host function of its queue, holds this queue's later work until it is
    /// submitted (never blocking the caller).
    fn wait_event(&self, event: &VulkanEvent) -> Result<()> {
        if !Arc::ptr_eq(&event.device, &self.shared.device) {
            return Err(Error::invalid(
                "",
                "the vulkan event is of another device than the queue",
            ));
        }
        self.shared.wait_for_mark(&event.mark)
    }

    /// Waits for the queue's work, then releases it.
    fn destroy(self) -> Result<()> {
        let synced = hal::Queue::sync(&self);
        drop(self);
        synced
    }
}

/// Refuses a buffer (or range) of `len` bytes for binding `j` of `entry` (argument `arg`)
/// when it is smaller than the binding's minimum size: its block (a uniform block, a
/// storage block without a runtime array), or its fixed members and one element of its
/// runtime array; the refusal says which. Below that, the block's fixed members would lie past the
/// binding, where the shader's bounds checks (which guard array indices) do not look.
fn check_min_size(entry: &crate::spirv::EntryPoint, j: usize, len: u64, arg: usize) -> Result<()> {
    let min = entry.min_sizes.get(j).copied().unwrap_or(0);
    if len >= min {
        return Ok(());
    }
    let binding = entry.bindings.get(j).copied().unwrap_or(0);
    // What the binding declares, so the message describes the shader that is there.
    let holds = match entry.array_strides.get(j).copied().flatten() {
        Some(stride) => format!(
            "its {} bytes of fixed members and one {stride}-byte element of its runtime array",
            min.saturating_sub(stride)
        ),
        None if entry.uniform.get(j).copied().unwrap_or(false) => {
            format!("its {min}-byte uniform block")
        }
        None => format!("its {min}-byte block"),
    };
    Err(Error::invalid(
        "",
        format!(
            "argument {arg} of vulkan kernel `{}`: {len} bytes bound to binding {binding}, \
             which needs at least {min} ({holds})",
            entry.name
        ),
    ))
}

fn check_dims(dims: &Dims, limits: &crate::info::Limits, name: &str) -> Result<()> {
    let fail = |why: String| Err(Error::invalid("", format!("vulkan kernel `{name}`: {why}")));
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
    /// Dropping a queue drains it (L4): its host functions run and its held work is
    /// submitted; then no thread holds the queue, so it is released here. (Its own host
    /// function never drops it here: the runtime releases such a queue on a helper thread,
    /// L6; if one did, the wait is refused and the function's thread releases it.)
    fn drop(&mut self) {
        let drained = self.shared.drain();
        if self.shared.is_own() {
            return;
        }
        if drained.is_err() {
            // A failed submission dropped the open batch (nobody is left to report it to):
            // wait for the rest.
            let _ = self.shared.drain();
        }
        self.shared.holders.wait_none();
    }
}

impl Drop for QueueShared {
    fn drop(&mut self) {
        let me: *const QueueShared = self;
        let last = *self.last.get_mut();
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = inner.open.take() {
            // Not submitted (the flush failed): its commands never run.
            for usage in open.usages {
                usage.submitted(me, 0);
            }
            // SAFETY: never submitted.
            unsafe { open.batch.destroy(&self.device) };
        }
        // What is still held (only behind a wait for an event that never settled): batches
        // never run; events recorded behind them settle, so nothing waits for them.
        let mut after = gate::After::default();
        let mut left = Vec::new();
        for op in std::mem::take(&mut inner.gate.held) {
            match op {
                Held::Batch(open) => {
                    let open = *open;
                    for usage in open.usages {
                        usage.submitted(me, 0);
                    }
                    // SAFETY: never submitted.
                    unsafe { open.batch.destroy(&self.device) };
                }
                Held::Settle(mark) => after.settled(&mark, last),
                other => left.push(other),
            }
        }
        // A drop has no caller: a lost device is reported by the next call that meets it.
        let _ = self.device.wait_for_or_idle(last);
        // Buffers released behind the gate (no work uses them now), host functions never
        // run (dropped: the runtime reports what their drop does).
        drop(left);
        self.finish(after);
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        for b in inner.idle.drain(..).chain(inner.in_flight.drain(..)) {
            // SAFETY: every submission of the queue finished (waited above).
            unsafe { b.destroy(&self.device) };
        }
        // SAFETY: as above; destroying the pool frees its command buffers.
        unsafe { self.device.raw.destroy_command_pool(inner.pool, None) };
        crate::stats::LIVE_QUEUES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes a fresh descriptor set's storage- and uniform-buffer bindings.
///
/// # Safety
/// The set is live and not used by any command yet; each described binding is one of its
/// layout's bindings, of the described type, and its buffer a live buffer of `dev` (made
/// with storage and uniform usage) whose whole size, or the range bound, is within the
/// type's maxStorageBufferRange or maxUniformBufferRange, with a range's offset aligned to
/// its minStorageBufferOffsetAlignment or minUniformBufferOffsetAlignment and inside the
/// buffer (`VulkanQueue::launch` checks all of it).
unsafe fn write_set(
    dev: &ash::Device,
    set: vk::DescriptorSet,
    described: impl Iterator<Item = Described>,
) {
    let (bindings, infos): (
        Vec<(u32, vk::DescriptorType)>,
        Vec<vk::DescriptorBufferInfo>,
    ) = described
        .map(|(binding, ty, buffer, offset, range)| {
            let info = vk::DescriptorBufferInfo::default()
                .buffer(buffer)
                .offset(offset)
                .range(range);
            ((binding, ty), info)
        })
        .unzip();
    let writes: Vec<vk::WriteDescriptorSet<'_>> = bindings
        .iter()
        .zip(&infos)
        .map(|(&(binding, ty), info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(binding)
                .descriptor_type(ty)
                .buffer_info(std::slice::from_ref(info))
        })
        .collect();
    // SAFETY: guaranteed by the caller; `writes` and `infos` live across the call.
    unsafe { dev.update_descriptor_sets(&writes, &[]) };
}

/// Records a memory barrier from `src` (stages, accesses) to `dst`.
fn barrier(
    device: &DeviceContext,
    cb: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(src.1)
        .dst_access_mask(dst.1)];
    // SAFETY: the command buffer is recording (callers hold its queue's lock between
    // begin and end).
    unsafe {
        device.raw.cmd_pipeline_barrier(
            cb,
            src.0,
            dst.0,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    };
}

impl hal::Event for VulkanEvent {
    /// Elapsed device time from `start` to this event (both completed first).
    fn elapsed_since(&self, start: &VulkanEvent) -> Result<Duration> {
        let end = self;
        if !Arc::ptr_eq(&start.device, &end.device) {
            return Err(Error::invalid(
                "",
                "the vulkan events are of different devices",
            ));
        }
        start.complete()?;
        end.complete()?;
        let limits = &end.device.limits;
        match (&start.query, &end.query) {
            (Some(a), Some(b)) => {
                let (t0, t1) = (start.ticks(a.pool)?, end.ticks(b.pool)?);
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

    /// Waits for the event.
    fn sync(&self) -> Result<()> {
        self.complete()
    }

    /// Waits for the event's submission (where it has been submitted), then destroys it.
    fn destroy(self) -> Result<()> {
        let waited = self
            .mark
            .value()
            .map_or(Ok(()), |value| self.device.wait_for(value));
        drop(self);
        waited
    }

    /// Whether the event has completed, without waiting (not while it is held behind a
    /// host function).
    fn is_complete(&self) -> Result<bool> {
        let Some(value) = self.mark.value() else {
            return Ok(false);
        };
        let done = self.device.is_complete(value)?;
        if done {
            self.observed.get_or_init(Instant::now);
        }
        Ok(done)
    }
}
