//! The record of one `VkBuffer` bound to its own `VkDeviceMemory` ([`RawAllocation`]) and
//! its destruction: the lowest layer of device memory, below the device context (whose
//! staging memory is one). Making, importing and exporting one is memory.rs's
//! (`RawAllocation::new`), since that needs the device context.

use std::ptr::NonNull;

use ash::vk;

/// A `VkBuffer` with its own bound memory, mapped when it can be. Destroyed only by
/// [`RawAllocation::destroy`]; the owner decides when.
#[derive(Debug)]
pub(crate) struct RawAllocation {
    pub(crate) buffer: vk::Buffer,
    pub(crate) memory: vk::DeviceMemory,
    /// The start of the whole allocation, mapped for the allocation's lifetime.
    pub(crate) mapped: Option<NonNull<u8>>,
    pub(crate) size: u64,
    /// The memory type and `allocationSize` of `memory` (what an importer must use).
    pub(crate) type_index: u32,
    pub(crate) allocation_size: u64,
}

impl RawAllocation {
    /// Destroys the buffer and frees its memory (which unmaps it).
    ///
    /// # Safety
    /// `device` must be the live device this was made on, no GPU work that uses it may be
    /// pending, and it must not be used afterwards.
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: guaranteed by the caller; the buffer goes before the memory bound to it.
        unsafe {
            device.destroy_buffer(self.buffer, None);
            device.free_memory(self.memory, None);
        }
    }
}
