//! The backend's process-wide counters and [`stats`](stats()), which reads them: platforms
//! opened and deinitialised, the Vulkan objects alive, launches and submissions.

use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) static OPENED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_DEVICES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_INSTANCES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_MODULES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_SHADER_MODULES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static SHADER_MODULES_CREATED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_PIPELINES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_QUEUES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_EVENTS: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LAUNCHES: AtomicUsize = AtomicUsize::new(0);
pub(crate) static SUBMISSIONS: AtomicUsize = AtomicUsize::new(0);

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
    /// Modules loaded and not yet destroyed.
    pub live_modules: usize,
    /// `VkShaderModule`s not yet destroyed (a module's own, and patched copies for other
    /// block sizes).
    pub live_shader_modules: usize,
    /// `VkShaderModule`s ever created: images that fail validation never make one.
    pub shader_modules_created: usize,
    /// Compute pipelines not yet destroyed.
    pub live_pipelines: usize,
    /// Queues not yet destroyed.
    pub live_queues: usize,
    /// Events not yet destroyed.
    pub live_events: usize,
    /// Kernel launches recorded.
    pub launches: usize,
    /// Batches of queued work submitted (`vkQueueSubmit`s of queues; consecutive launches
    /// and copies on one queue share one).
    pub submissions: usize,
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
        live_modules: LIVE_MODULES.load(Ordering::SeqCst),
        live_shader_modules: LIVE_SHADER_MODULES.load(Ordering::SeqCst),
        shader_modules_created: SHADER_MODULES_CREATED.load(Ordering::SeqCst),
        live_pipelines: LIVE_PIPELINES.load(Ordering::SeqCst),
        live_queues: LIVE_QUEUES.load(Ordering::SeqCst),
        live_events: LIVE_EVENTS.load(Ordering::SeqCst),
        launches: LAUNCHES.load(Ordering::SeqCst),
        submissions: SUBMISSIONS.load(Ordering::SeqCst),
    }
}
