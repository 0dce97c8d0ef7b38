#![doc = include_str!("../docs/manual.md")]
#![warn(missing_docs)]

// Each module uses only those before it in this order (`scripts/circles.sh` checks that none
// imports another in a circle): the leaves `error`, `stats`, `options`, `validation`,
// `instance`, `info`, `spirv` and `wgsl`; then `allocation` (a buffer's memory record),
// `context` (the `VkDevice`, its queue and transfer state, and `VulkanDevice`), `usage`
// (what queued work uses, naming queues only through its `UsingQueue` trait; memory on its
// way out), `memory`, `program`, `transfer`, `bounds`, `batch`, `queue` (its gate,
// queue/gate.rs, a child of it), then `device` (the `hal::Device` and `hal::Ipc` impls)
// and `platform` on top.

// One `VkBuffer` with its own memory: the record and its destruction.
mod allocation;
// Batches of queued work, submitted together, and their timestamp queries.
mod batch;
// The queue's side of the WGSL bounds report.
mod bounds;
// One `VkDevice` with its compute queue, shared by everything made on it, and
// `VulkanDevice`, the handle to it.
mod context;
// The `hal::Device` and `hal::Ipc` impls of `VulkanDevice`.
mod device;
// Vulkan results as offload errors.
mod error;
// What Vulkan says about a physical device.
mod info;
// The `VkInstance` and the loader.
mod instance;
// Buffers: memory, mapping, staging, export and import.
mod memory;
// The options a platform opens with.
mod options;
// The platform and its `hal::Platform` impl.
mod platform;
// Modules, kernels, pipelines, and the `hal::Program` impl.
mod program;
// Queues and events; and (queue/gate.rs) the gate that holds a queue's work behind its
// host functions.
mod queue;
// Public only for the fuzz targets (`fuzz/`) and the image tests, which reach the parser
// of untrusted bytes as an ordinary dependency; not part of the API.
#[doc(hidden)]
pub mod spirv;
// The process-wide counters.
mod stats;
// One-shot copies through staging memory.
mod transfer;
// Which launches still use a buffer, a module or a queue; a buffer's memory released once
// none does.
mod usage;
// The validation layer's messenger and report.
mod validation;
// WGSL source to SPIR-V (feature `wgsl`).
mod wgsl;

use offload_core::{BackendKind, PlatformEntry};

pub use context::VulkanDevice;
pub use info::{MemoryHeap, VulkanDeviceInfo, VulkanDeviceType, VulkanVersion, vendor_name};
pub use memory::VulkanBuffer;
pub use options::VulkanOptions;
pub use platform::VulkanPlatform;
pub use program::{VulkanKernel, VulkanModule};
pub use queue::{VulkanEvent, VulkanQueue};
pub use stats::{VulkanStats, stats};
pub use validation::{ValidationReport, validation_report};

/// Example kernels as SPIR-V 1.3, compiled by naga from `tests/fixtures/kernels.wgsl` (a
/// test checks they match): `add_one(buf: u32[], n: u32)`, `fill(buf: u32[], value: u32,
/// n: u32)` and `noop()`, workgroup size 64. Used by offload's quickstart and tests.
pub mod fixtures {
    /// The SPIR-V module (little-endian words).
    ///
    /// ```
    /// assert_eq!(&offload_vulkan::fixtures::KERNELS[..4], &0x0723_0203u32.to_le_bytes());
    /// ```
    pub const KERNELS: &[u8] = include_bytes!("../tests/fixtures/kernels.spv");
}

/// The backend family this crate implements.
///
/// ```
/// assert_eq!(offload_vulkan::BACKEND, offload_core::BackendKind::Vulkan);
/// ```
pub const BACKEND: BackendKind = BackendKind::Vulkan;

/// The entry the facade registers for the `vulkan` feature: devices, memory, programs,
/// kernels, queues and events, with the default [`VulkanOptions`].
///
/// ```
/// assert_eq!(offload_vulkan::platform().kind(), offload_core::BackendKind::Vulkan);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::with_ipc::<VulkanPlatform>()
}
