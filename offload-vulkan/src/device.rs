//! One logical device (`VkDevice`) with its compute queue, made when the platform opens.
//!
//! [`DeviceContext`] is shared (`Arc`) by the platform and by every buffer made on it, so a
//! buffer can never outlive the device it lives on, nor the device its instance. The queue
//! and everything recorded on it (command pool, staging memory; later, the launch queues)
//! sit behind one mutex: Vulkan requires queues and command pools to be externally
//! synchronised, while `&self` methods of the backend run on many threads at once.
//!
//! Destruction order, enforced by ownership: wait idle → command pool, fence and staging
//! memory → `VkDevice` → (last device) `VkInstance` → loader library.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ash::vk;
use offload_core::Result;

use crate::error::{At, map_vk_err};
use crate::info::{Limits, VulkanDeviceInfo};
use crate::instance::Instance;
use crate::transfer::Transfer;

/// The queue of a device and the objects recorded for it; see the module docs.
pub(crate) struct QueueState {
    pub(crate) queue: vk::Queue,
    pub(crate) transfer: Transfer,
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
    queue: Mutex<QueueState>,
    /// `VkDeviceMemory` objects alive on this device (buffers and staging), checked against
    /// `maxMemoryAllocationCount`.
    pub(crate) allocations: AtomicU32,
    /// The owning platform's count of live buffers.
    pub(crate) platform_live: Arc<AtomicUsize>,
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
    ) -> Result<DeviceContext> {
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(info.compute_queue_family)
            .queue_priorities(&priorities)];
        // Features and extensions are added here as the backend grows (timeline semaphores,
        // external memory for IPC); none is needed for memory.
        let create = vk::DeviceCreateInfo::default().queue_create_infos(&queues);
        // SAFETY: `physical` belongs to `instance` (it was enumerated from it); `create` and
        // the arrays it points to live across the call; the family index comes from this
        // device's own queue family list and we ask for one queue of it.
        let raw = unsafe { instance.raw.create_device(physical, &create, None) }
            .map_err(|e| map_vk_err(At::new("Offload::init", "vkCreateDevice"), e))?;
        crate::LIVE_DEVICES.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the device was just created with one queue of this family.
        let queue = unsafe { raw.get_device_queue(info.compute_queue_family, 0) };
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
            queue: Mutex::new(QueueState {
                queue,
                transfer: Transfer::default(),
            }),
            allocations: AtomicU32::new(0),
            platform_live,
            _instance: instance,
        })
    }

    /// Locks the queue. A panic on another thread while it held the lock cannot leave the
    /// Vulkan objects half-made (every step is one driver call), so poisoning is ignored.
    pub(crate) fn lock_queue(&self) -> MutexGuard<'_, QueueState> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the device has finished everything submitted to it.
    pub(crate) fn wait_idle(&self, call: &'static str) -> Result<()> {
        // `vkDeviceWaitIdle` needs every queue of the device externally synchronised.
        let _queue = self.lock_queue();
        // SAFETY: the device is live (we hold `self`); its only queue is locked.
        unsafe { self.raw.device_wait_idle() }
            .map_err(|e| map_vk_err(At::new(call, "vkDeviceWaitIdle"), e))
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
            self.raw.destroy_device(None);
        }
        crate::LIVE_DEVICES.fetch_sub(1, Ordering::SeqCst);
    }
}
