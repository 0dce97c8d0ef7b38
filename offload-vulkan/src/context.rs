//! One logical device (`VkDevice`) with its compute queue, made when the platform opens.
//!
//! [`DeviceContext`] is shared (`Arc`) by the platform and by every buffer made on it, so a
//! buffer can never outlive the device it lives on, nor the device its instance. The queue
//! and everything recorded on it (command pool, staging memory; later, the launch queues)
//! sit behind one mutex: Vulkan requires queues and command pools to be externally
//! synchronised, while `&self` methods of the backend run on many threads at once. The
//! transfer objects ([`Transfer`]) are declared here, as part of that state, and made and
//! used by transfer.rs.
//!
//! Every submission of launches and events signals the device's one timeline semaphore
//! with the next value of a per-device counter, taken under the queue mutex. All of them go
//! to the same `VkQueue`, and a semaphore signal covers every command submitted before it,
//! so "the timeline has reached `v`" means "everything submitted up to `v` has finished":
//! one number says how far a buffer, a module or a queue's work has got ([`DeviceContext::
//! wait_for`]).
//!
//! [`VulkanDevice`], the handle the platform hands out for one device, is declared here too
//! (below the queues, which name it); its `hal::Device` and `hal::Ipc` impls are device.rs's.
//!
//! Destruction order, enforced by ownership: wait idle → command pool, fence and staging
//! memory, timeline semaphore, pipeline cache → `VkDevice` → (last device) `VkInstance` →
//! loader library. Queues, modules, events and buffers each hold the device (`Arc`), so it
//! outlives them all.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use ash::vk;
use offload_core::{Error, Result};

use crate::allocation::RawAllocation;
use crate::error::{At, map_vk_err};
use crate::info::{Limits, VulkanDeviceInfo};
use crate::instance::Instance;

/// The queue of a device and the objects recorded for it; see the module docs.
pub(crate) struct QueueState {
    pub(crate) queue: vk::Queue,
    pub(crate) transfer: Transfer,
    /// The last timeline value given to a submission.
    submitted: u64,
}

/// The command pool, its command buffer and the fence of one device's transfers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Commands {
    pub(crate) pool: vk::CommandPool,
    pub(crate) buffer: vk::CommandBuffer,
    pub(crate) fence: vk::Fence,
}

/// The transfer objects of one device, made on first use by the transfers (transfer.rs,
/// whose module docs say how they are used).
#[derive(Debug, Default)]
pub(crate) struct Transfer {
    pub(crate) commands: Option<Commands>,
    pub(crate) staging: Option<RawAllocation>,
    /// Set when a fence wait failed: the command buffer may still be pending.
    pub(crate) broken: Option<vk::Result>,
}

// SAFETY: the only non-`Send` member is the staging memory's mapped pointer, which points
// into memory owned by this value and is used only by whoever holds the queue mutex that
// this value lives behind.
unsafe impl Send for Transfer {}

impl Transfer {
    /// Destroys what was made.
    ///
    /// # Safety
    /// `device` must be the live device these objects were made on, idle, and they must not
    /// be used afterwards.
    pub(crate) unsafe fn destroy(&mut self, device: &ash::Device, allocations: &AtomicU32) {
        if let Some(c) = self.commands.take() {
            // SAFETY: guaranteed by the caller; destroying the pool frees its command buffer.
            unsafe {
                device.destroy_fence(c.fence, None);
                device.destroy_command_pool(c.pool, None);
            }
        }
        if let Some(staging) = self.staging.take() {
            // SAFETY: guaranteed by the caller.
            unsafe { staging.destroy(device) };
            allocations.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A live `VkDevice` and what the backend needs to use it.
pub(crate) struct DeviceContext {
    pub(crate) raw: ash::Device,
    pub(crate) memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) limits: Limits,
    /// The Vulkan version used with this device (`min(device, instance)`).
    pub(crate) api: u32,
    pub(crate) queue_family: u32,
    /// Whether `MemKind::Device` buffers in host-visible memory are mapped (see
    /// [`crate::VulkanOptions::map_device_memory`]).
    pub(crate) map_device_memory: bool,
    /// Whether WGSL kernels are compiled with the bounds report (see
    /// [`crate::VulkanOptions::bounds_report`]).
    pub(crate) bounds_report: bool,
    queue: Mutex<QueueState>,
    /// `VkDeviceMemory` objects alive on this device (buffers and staging), checked against
    /// `maxMemoryAllocationCount`.
    pub(crate) allocations: AtomicU32,
    /// The owning platform's count of live buffers.
    pub(crate) platform_live: Arc<AtomicUsize>,
    /// Set when the platform is deinitialised: the device makes no new objects from then
    /// on (those it made stay usable until dropped; they keep it alive).
    pub(crate) deinitialised: AtomicBool,
    /// Whether the device has timeline semaphores (enabled at creation).
    pub(crate) timeline_semaphores: bool,
    /// `VK_KHR_external_memory_fd`'s functions, where it was enabled (IPC).
    pub(crate) external_fd: Option<ash::khr::external_memory_fd::Device>,
    /// The timeline semaphore and the pipeline cache, made at first use (so a platform that
    /// only moves memory never makes them); `init` serialises their creation.
    timeline: OnceLock<vk::Semaphore>,
    pipeline_cache: OnceLock<vk::PipelineCache>,
    init: Mutex<()>,
    /// The highest timeline value known to be reached (a cache of the semaphore's counter).
    completed: AtomicU64,
    /// Declared last: dropped after `Drop::drop` destroyed the device.
    _instance: Arc<Instance>,
}

impl std::fmt::Debug for DeviceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceContext")
            .field("device", &self.raw.handle())
            .field("queue_family", &self.queue_family)
            .finish_non_exhaustive()
    }
}

impl DeviceContext {
    /// Creates the logical device and gets its compute queue.
    pub(crate) fn new(
        instance: Arc<Instance>,
        physical: vk::PhysicalDevice,
        info: &VulkanDeviceInfo,
        platform_live: Arc<AtomicUsize>,
        map_device_memory: bool,
        bounds_report: bool,
    ) -> Result<DeviceContext> {
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(info.compute_queue_family)
            .queue_priorities(&priorities)];
        // Timeline semaphores (core in 1.2) for queues and events; memory needs nothing.
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        // Exporting and importing memory (IPC), where the device can.
        let extensions = [ash::khr::external_memory_fd::NAME.as_ptr()];
        let mut create = vk::DeviceCreateInfo::default().queue_create_infos(&queues);
        if info.timeline_semaphores {
            create = create.push_next(&mut v12);
        }
        if info.external_memory_fd {
            create = create.enabled_extension_names(&extensions);
        }
        // SAFETY: `physical` belongs to `instance` (it was enumerated from it); `create` and
        // the arrays and structures it points to live across the call; the family index comes
        // from this device's own queue family list and we ask for one queue of it; the
        // timeline feature is chained only where the device is 1.2+ and reports it, the
        // extension named only where the device lists it.
        let raw = unsafe { instance.raw.create_device(physical, &create, None) }
            .map_err(|e| map_vk_err(At::new("vkCreateDevice"), e))?;
        crate::stats::LIVE_DEVICES.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the device was just created with one queue of this family.
        let queue = unsafe { raw.get_device_queue(info.compute_queue_family, 0) };
        let external_fd = info
            .external_memory_fd
            .then(|| ash::khr::external_memory_fd::Device::new(&instance.raw, &raw));
        // SAFETY: `physical` belongs to the live `instance`.
        let memory = unsafe { instance.raw.get_physical_device_memory_properties(physical) };
        let api = vk::make_api_version(
            0,
            info.used_api_version.major,
            info.used_api_version.minor,
            info.used_api_version.patch,
        );
        Ok(DeviceContext {
            raw,
            memory,
            limits: info.limits(),
            api,
            queue_family: info.compute_queue_family,
            map_device_memory,
            bounds_report,
            queue: Mutex::new(QueueState {
                queue,
                transfer: Transfer::default(),
                submitted: 0,
            }),
            allocations: AtomicU32::new(0),
            platform_live,
            deinitialised: AtomicBool::new(false),
            timeline_semaphores: info.timeline_semaphores,
            external_fd,
            timeline: OnceLock::new(),
            pipeline_cache: OnceLock::new(),
            init: Mutex::new(()),
            completed: AtomicU64::new(0),
            _instance: instance,
        })
    }

    /// Locks the queue. A panic on another thread while it held the lock cannot leave the
    /// Vulkan objects half-made (every step is one driver call), so poisoning is ignored.
    pub(crate) fn lock_queue(&self) -> MutexGuard<'_, QueueState> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the device has finished everything submitted to it.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        // `vkDeviceWaitIdle` needs every queue of the device externally synchronised.
        let _queue = self.lock_queue();
        // SAFETY: the device is live (we hold `self`); its only queue is locked.
        unsafe { self.raw.device_wait_idle() }
            .map_err(|e| map_vk_err(At::new("vkDeviceWaitIdle"), e))
    }
}

impl DeviceContext {
    fn lock_init(&self) -> MutexGuard<'_, ()> {
        self.init.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The device's timeline semaphore, made at first use. A device without timeline
    /// semaphores is `Error::Unsupported` (its memory still works).
    pub(crate) fn timeline(&self) -> Result<vk::Semaphore> {
        if let Some(s) = self.timeline.get() {
            return Ok(*s);
        }
        if !self.timeline_semaphores {
            return Err(offload_core::Error::Unsupported {
                backend: offload_core::BackendKind::Vulkan,
                call: "",
                reason: "the device has no timeline semaphores (Vulkan 1.2), which offload's \
                         Vulkan queues, events and programs need"
                    .into(),
            });
        }
        let _init = self.lock_init();
        if let Some(s) = self.timeline.get() {
            return Ok(*s);
        }
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: the device is live and has the timeline feature enabled; `info` lives across
        // the call; the semaphore is destroyed once, in `Drop`.
        let made = unsafe { self.raw.create_semaphore(&info, None) }
            .map_err(|e| map_vk_err(At::new("vkCreateSemaphore"), e))?;
        Ok(*self.timeline.get_or_init(|| made))
    }

    /// The device's pipeline cache, made at first use.
    pub(crate) fn pipeline_cache(&self) -> Result<vk::PipelineCache> {
        if let Some(c) = self.pipeline_cache.get() {
            return Ok(*c);
        }
        let _init = self.lock_init();
        if let Some(c) = self.pipeline_cache.get() {
            return Ok(*c);
        }
        // SAFETY: the device is live; the empty create info asks for an empty cache; it is
        // destroyed once, in `Drop`. Pipeline caches are internally synchronised.
        let made = unsafe {
            self.raw
                .create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
        }
        .map_err(|e| map_vk_err(At::new("vkCreatePipelineCache"), e))?;
        Ok(*self.pipeline_cache.get_or_init(|| made))
    }

    /// Submits `submit` (one batch, without its timeline signal) to the queue, signalling
    /// the timeline with the next value, after waiting on the timeline for `wait` (0: no
    /// wait). Returns the value.
    ///
    /// # Safety
    /// The command buffers of `submit` must be executable, not pending, of this device, and
    /// every object they use must stay alive until the returned value is reached.
    pub(crate) unsafe fn submit_timeline(
        &self,
        commands: &[vk::CommandBuffer],
        wait: u64,
    ) -> Result<u64> {
        let timeline = self.timeline()?;
        let mut state = self.lock_queue();
        let value = state.submitted + 1;
        let signal = [value];
        let waits = [wait];
        let semaphores = [timeline];
        let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
        let mut values =
            vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&signal);
        let mut batch = vk::SubmitInfo::default()
            .command_buffers(commands)
            .signal_semaphores(&semaphores);
        if wait > 0 {
            values = values.wait_semaphore_values(&waits);
            batch = batch
                .wait_semaphores(&semaphores)
                .wait_dst_stage_mask(&stages);
        }
        let batch = [batch.push_next(&mut values)];
        // SAFETY: the queue is ours (we hold its mutex); the command buffers are valid per the
        // caller; the signal value is greater than every value signalled or pending before
        // (values are handed out in order under this mutex); a wait value was signalled by an
        // earlier submission, so the wait cannot deadlock.
        unsafe {
            self.raw
                .queue_submit(state.queue, &batch, vk::Fence::null())
        }
        .map_err(|e| map_vk_err(At::new("vkQueueSubmit"), e))?;
        state.submitted = value;
        Ok(value)
    }

    /// Whether everything submitted up to timeline value `value` has finished.
    pub(crate) fn is_complete(&self, value: u64) -> Result<bool> {
        if value <= self.completed.load(Ordering::Acquire) {
            return Ok(true);
        }
        let timeline = self.timeline()?;
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let now = unsafe { self.raw.get_semaphore_counter_value(timeline) }
            .map_err(|e| map_vk_err(At::new("vkGetSemaphoreCounterValue"), e))?;
        self.completed.fetch_max(now, Ordering::AcqRel);
        Ok(value <= now)
    }

    /// Waits until everything submitted up to timeline value `value` has finished (0 and
    /// values already reached return at once, without a driver call).
    pub(crate) fn wait_for(&self, value: u64) -> Result<()> {
        if value <= self.completed.load(Ordering::Acquire) {
            return Ok(());
        }
        let timeline = self.timeline()?;
        let semaphores = [timeline];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: the semaphore is a live timeline semaphore of this device and `value` was
        // handed to a submission (callers only wait for values they were given), so the wait
        // ends; `info` lives across the call. Kernels may run for any time: no timeout.
        unsafe { self.raw.wait_semaphores(&info, u64::MAX) }
            .map_err(|e| map_vk_err(At::new("vkWaitSemaphores"), e))?;
        self.completed.fetch_max(value, Ordering::AcqRel);
        Ok(())
    }

    /// `wait_for`, and if that fails (device lost), the whole device idle: for `Drop`s, which
    /// must not destroy objects the device may still use.
    pub(crate) fn wait_for_or_idle(&self, value: u64) -> Result<()> {
        self.wait_for(value).inspect_err(|_| {
            // The device is lost or stuck: waiting idle is all that is left to try here.
            let _ = self.wait_idle();
        })
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        let state = self.queue.get_mut().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: we are the last owner: no buffer and no other thread uses the device, and
        // the queue is ours (`&mut self`). Waiting idle first makes destroying the command
        // pool and the device valid even if a caller gave up on a fence; an error here
        // (device lost) leaves nothing to wait for, so it is ignored.
        unsafe {
            let _ = self.raw.device_wait_idle();
            state.transfer.destroy(&self.raw, &self.allocations);
            if let Some(s) = self.timeline.take() {
                self.raw.destroy_semaphore(s, None);
            }
            if let Some(c) = self.pipeline_cache.take() {
                self.raw.destroy_pipeline_cache(c, None);
            }
            self.raw.destroy_device(None);
        }
        crate::stats::LIVE_DEVICES.fetch_sub(1, Ordering::SeqCst);
    }
}

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
    pub(crate) fn context(&self) -> Result<&Arc<DeviceContext>> {
        if self.context.deinitialised.load(Ordering::SeqCst) {
            return Err(Error::ShutDown {
                call: "",
                object: String::new(),
                caller: offload_core::Caller::Rust,
            });
        }
        Ok(&self.context)
    }
}
