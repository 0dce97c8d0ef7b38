//! What a Vulkan physical device says about itself: [`VulkanDeviceInfo`], read once when the
//! platform opens and kept for the platform's lifetime (also after `deinit`).
//!
//! This module only reads properties; it creates and destroys nothing.

use std::ffi::CStr;
use std::fmt;

use ash::vk;

/// Which kind of device Vulkan says this is (`VkPhysicalDeviceType`).
///
/// ```
/// use offload_vulkan::VulkanDeviceType;
/// assert_eq!(VulkanDeviceType::Cpu.to_string(), "cpu");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VulkanDeviceType {
    /// A GPU on the same die or package as the host (shares its memory).
    IntegratedGpu,
    /// A separate GPU with its own memory.
    DiscreteGpu,
    /// A virtual GPU (e.g. in a VM).
    VirtualGpu,
    /// The host CPU itself, e.g. Mesa's lavapipe.
    Cpu,
    /// Anything else the driver reports.
    Other,
}

impl VulkanDeviceType {
    fn from_vk(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::INTEGRATED_GPU => VulkanDeviceType::IntegratedGpu,
            vk::PhysicalDeviceType::DISCRETE_GPU => VulkanDeviceType::DiscreteGpu,
            vk::PhysicalDeviceType::VIRTUAL_GPU => VulkanDeviceType::VirtualGpu,
            vk::PhysicalDeviceType::CPU => VulkanDeviceType::Cpu,
            _ => VulkanDeviceType::Other,
        }
    }
}

impl fmt::Display for VulkanDeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VulkanDeviceType::IntegratedGpu => "integrated gpu",
            VulkanDeviceType::DiscreteGpu => "discrete gpu",
            VulkanDeviceType::VirtualGpu => "virtual gpu",
            VulkanDeviceType::Cpu => "cpu",
            VulkanDeviceType::Other => "other",
        })
    }
}

/// A Vulkan API version (`VK_MAKE_API_VERSION` without the variant).
///
/// ```
/// use offload_vulkan::VulkanVersion;
/// let v = VulkanVersion::from_raw((1 << 22) | (3 << 12) | 230);
/// assert_eq!((v.major, v.minor, v.patch), (1, 3, 230));
/// assert_eq!(v.to_string(), "1.3.230");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VulkanVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl VulkanVersion {
    /// Decodes a packed `VK_MAKE_API_VERSION` value.
    ///
    /// ```
    /// let v = offload_vulkan::VulkanVersion::from_raw(ash::vk::API_VERSION_1_2);
    /// assert_eq!(v.minor, 2);
    /// ```
    pub fn from_raw(raw: u32) -> Self {
        VulkanVersion {
            major: vk::api_version_major(raw),
            minor: vk::api_version_minor(raw),
            patch: vk::api_version_patch(raw),
        }
    }
}

impl fmt::Display for VulkanVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One memory heap of a device.
///
/// ```
/// let heap = offload_vulkan::MemoryHeap { size: 1 << 30, device_local: true };
/// assert!(heap.device_local);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemoryHeap {
    /// Size in bytes.
    pub size: u64,
    /// Whether the heap is the device's own memory (`VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`).
    pub device_local: bool,
}

/// Everything the backend read about one device, for callers that need more than
/// [`offload_core::DeviceInfo`]. See [`crate::VulkanDevice::vulkan_info`].
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::{Config};
/// let vk = match offload_vulkan::VulkanPlatform::open(&Config::default()) {
///     Ok(vk) => vk,
///     Err(offload_core::Error::DriverNotFound { reason, .. }) => {
///         println!("no Vulkan: {reason}");
///         return Ok(());
///     }
///     Err(e) => return Err(e),
/// };
/// let dev = vk.devices().remove(0);
/// let info = dev.vulkan_info();
/// println!("{} ({}, driver {} {})", info.name, info.device_type, info.driver_name,
///          info.driver_version_text);
/// assert!(info.max_workgroup_invocations >= 128); // the Vulkan minimum
/// # vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct VulkanDeviceInfo {
    /// `deviceName`, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// PCI vendor id, or a Khronos vendor id (`0x10005` is Mesa).
    pub vendor_id: u32,
    /// The vendor's name for `vendor_id` (`"Mesa"`, `"NVIDIA"`, …), or the id in hex.
    pub vendor: String,
    /// The vendor's device id.
    pub device_id: u32,
    /// CPU, integrated, discrete or virtual GPU.
    pub device_type: VulkanDeviceType,
    /// The Vulkan version the device supports.
    pub api_version: VulkanVersion,
    /// The version offload uses with it: the lower of the device's and the instance's.
    pub used_api_version: VulkanVersion,
    /// `driverVersion` as the driver packs it (vendor-specific).
    pub driver_version: u32,
    /// `driver_version` decoded with the vendor's convention (NVIDIA's differs).
    pub driver_version_text: String,
    /// `driverName` (Vulkan 1.2), e.g. `llvmpipe`; empty before 1.2.
    pub driver_name: String,
    /// `driverInfo` (Vulkan 1.2), e.g. `Mesa 22.3.6 (LLVM 15.0.6)`; empty before 1.2.
    pub driver_info: String,
    /// The device's memory heaps.
    pub memory_heaps: Vec<MemoryHeap>,
    /// Sum of the device-local heaps (of all heaps if none is device-local).
    pub device_local_memory: u64,
    /// Largest single allocation (`maxMemoryAllocationSize`, Vulkan 1.1; the largest heap
    /// otherwise).
    pub max_allocation_size: u64,
    /// Largest buffer (`maxBufferSize`, Vulkan 1.3; unlimited otherwise).
    pub max_buffer_size: u64,
    /// How many memory allocations may exist at once (`maxMemoryAllocationCount`).
    pub max_allocation_count: u32,
    /// `maxComputeWorkGroupSize`.
    pub max_workgroup_size: [u32; 3],
    /// `maxComputeWorkGroupInvocations`.
    pub max_workgroup_invocations: u32,
    /// `maxComputeWorkGroupCount`.
    pub max_workgroup_count: [u32; 3],
    /// `maxPushConstantsSize`, in bytes.
    pub max_push_constants_size: u32,
    /// `maxComputeSharedMemorySize`: workgroup memory a shader may declare, in bytes.
    pub max_shared_memory: u32,
    /// `maxStorageBufferRange`, in bytes.
    pub max_storage_buffer_range: u32,
    /// `minStorageBufferOffsetAlignment`: where a range of a buffer passed to a kernel may
    /// start, in bytes.
    pub min_storage_buffer_offset_alignment: u64,
    /// `maxUniformBufferRange`: the most bytes a uniform-buffer argument binds.
    pub max_uniform_buffer_range: u32,
    /// `minUniformBufferOffsetAlignment`: where a range of a buffer passed as a uniform
    /// buffer may start, in bytes.
    pub min_uniform_buffer_offset_alignment: u64,
    /// The queue family offload submits to (the first one with `VK_QUEUE_COMPUTE_BIT`).
    pub compute_queue_family: u32,
    /// Significant bits of the compute queue's timestamps (`timestampValidBits`); 0 when
    /// the queue cannot write timestamps (events then time with the host clock).
    pub timestamp_valid_bits: u32,
    /// Nanoseconds per timestamp tick (`timestampPeriod`).
    pub timestamp_period_ns: f32,
    /// Whether the device has timeline semaphores (core in Vulkan 1.2), which offload's
    /// queues and events need: without them programs and queues are `Error::Unsupported`.
    pub timeline_semaphores: bool,
    /// `deviceUUID` (Vulkan 1.1): names the device alike in every process, for IPC
    /// handles; zeros before 1.1.
    pub device_uuid: [u8; 16],
    /// Whether the device can export and import memory as `OPAQUE_FD`s
    /// (`VK_KHR_external_memory_fd`, Vulkan 1.1+): what IPC needs.
    pub external_memory_fd: bool,
    /// Parallel compute units, as honest as the driver lets us be: SMs
    /// (`VK_NV_shader_sm_builtins`), compute units (`VK_AMD_shader_core_properties`), the
    /// host's available parallelism for a CPU device (lavapipe runs compute on a thread per
    /// core), and 1 where Vulkan does not say.
    pub compute_units: u32,
}

/// Limits the memory code checks on every allocation, copied out of the info.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub max_allocation_size: u64,
    pub max_buffer_size: u64,
    pub max_allocation_count: u32,
    pub max_workgroup_size: [u32; 3],
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: [u32; 3],
    pub max_push_constants_size: u32,
    pub max_storage_buffer_range: u32,
    pub min_storage_buffer_offset_alignment: u64,
    pub max_uniform_buffer_range: u32,
    pub min_uniform_buffer_offset_alignment: u64,
    pub timestamp_valid_bits: u32,
    pub timestamp_period_ns: f32,
}

impl VulkanDeviceInfo {
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_allocation_size: self.max_allocation_size,
            max_buffer_size: self.max_buffer_size,
            max_allocation_count: self.max_allocation_count,
            max_workgroup_size: self.max_workgroup_size,
            max_workgroup_invocations: self.max_workgroup_invocations,
            max_workgroup_count: self.max_workgroup_count,
            max_push_constants_size: self.max_push_constants_size,
            max_storage_buffer_range: self.max_storage_buffer_range,
            min_storage_buffer_offset_alignment: self.min_storage_buffer_offset_alignment,
            max_uniform_buffer_range: self.max_uniform_buffer_range,
            min_uniform_buffer_offset_alignment: self.min_uniform_buffer_offset_alignment,
            timestamp_valid_bits: self.timestamp_valid_bits,
            timestamp_period_ns: self.timestamp_period_ns,
        }
    }
}

/// The name of a vendor id: PCI ids of GPU vendors and Khronos' `VkVendorId` values.
///
/// ```
/// assert_eq!(offload_vulkan::vendor_name(0x10005), "Mesa");
/// assert_eq!(offload_vulkan::vendor_name(0x10DE), "NVIDIA");
/// assert_eq!(offload_vulkan::vendor_name(0x1234), "0x1234");
/// ```
pub fn vendor_name(vendor_id: u32) -> String {
    let known = match vendor_id {
        0x1002 => "AMD",
        0x1010 => "Imagination",
        0x106B => "Apple",
        0x10DE => "NVIDIA",
        0x13B5 => "ARM",
        0x1414 => "Microsoft",
        0x14E4 => "Broadcom",
        0x1AE0 => "Google",
        0x5143 => "Qualcomm",
        0x8086 => "Intel",
        0x10001 => "Vivante",
        0x10002 => "VeriSilicon",
        0x10003 => "Kazan",
        0x10004 => "Codeplay",
        0x10005 => "Mesa",
        0x10006 => "PoCL",
        0x10007 => "Mobileye",
        _ => return format!("{vendor_id:#x}"),
    };
    known.into()
}

/// `driverVersion` decoded: NVIDIA packs 10.8.8.6 bits, everyone else on Linux
/// `VK_MAKE_VERSION`.
fn driver_version_text(vendor_id: u32, v: u32) -> String {
    if vendor_id == 0x10DE {
        format!(
            "{}.{}.{}.{}",
            v >> 22,
            (v >> 14) & 0xFF,
            (v >> 6) & 0xFF,
            v & 0x3F
        )
    } else {
        VulkanVersion::from_raw(v).to_string()
    }
}

fn c_string(s: Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    s.map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads a physical device's info, or `None` if it has no compute queue family.
///
/// # Safety
/// `instance` must be live and created with API version `instance_api`, and `physical`
/// must be one of its physical devices.
pub(crate) unsafe fn query(
    instance: &ash::Instance,
    instance_api: u32,
    physical: vk::PhysicalDevice,
) -> Option<VulkanDeviceInfo> {
    // SAFETY: the caller guarantees `instance` is live and `physical` belongs to it; every
    // call below only reads properties into structures we own, and each chained structure
    // is core in the version (or part of the extension) we checked before chaining it.
    unsafe {
        let families = instance.get_physical_device_queue_family_properties(physical);
        let family_index = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)?;
        let compute_queue_family = u32::try_from(family_index).ok()?;
        let timestamp_valid_bits = families[family_index].timestamp_valid_bits;

        let props = instance.get_physical_device_properties(physical);
        let used_api = props.api_version.min(instance_api);
        let limits = props.limits;
        let memory = instance.get_physical_device_memory_properties(physical);
        let heaps: Vec<MemoryHeap> = memory
            .memory_heaps_as_slice()
            .iter()
            .map(|h| MemoryHeap {
                size: h.size,
                device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
            })
            .collect();
        let local: u64 = heaps
            .iter()
            .filter(|h| h.device_local)
            .map(|h| h.size)
            .sum();
        let device_local_memory = if local > 0 {
            local
        } else {
            heaps.iter().map(|h| h.size).sum()
        };
        let largest_heap = heaps.iter().map(|h| h.size).max().unwrap_or(0);

        let extensions: Vec<String> = instance
            .enumerate_device_extension_properties(physical)
            .unwrap_or_default()
            .iter()
            .map(|e| c_string(e.extension_name_as_c_str()))
            .collect();
        let has = |name: &CStr| extensions.iter().any(|e| e.as_bytes() == name.to_bytes());

        let mut max_allocation_size = largest_heap;
        let mut max_buffer_size = u64::MAX;
        let mut driver_name = String::new();
        let mut driver_info = String::new();
        let mut compute_units = None;
        let mut device_uuid = [0u8; 16];
        if used_api >= vk::API_VERSION_1_1 {
            let mut ids = vk::PhysicalDeviceIDProperties::default();
            let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
            let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
            let mut driver = vk::PhysicalDeviceDriverProperties::default();
            let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
            let mut amd = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default()
                .push_next(&mut maintenance3)
                .push_next(&mut ids);
            if used_api >= vk::API_VERSION_1_2 {
                props2 = props2.push_next(&mut driver);
            }
            if used_api >= vk::API_VERSION_1_3 {
                props2 = props2.push_next(&mut maintenance4);
            }
            let has_sm = has(ash::nv::shader_sm_builtins::NAME);
            if has_sm {
                props2 = props2.push_next(&mut sm);
            }
            let has_amd = has(ash::amd::shader_core_properties::NAME);
            if has_amd {
                props2 = props2.push_next(&mut amd);
            }
            instance.get_physical_device_properties2(physical, &mut props2);
            device_uuid = ids.device_uuid;
            if maintenance3.max_memory_allocation_size > 0 {
                max_allocation_size = maintenance3.max_memory_allocation_size;
            }
            if used_api >= vk::API_VERSION_1_3 && maintenance4.max_buffer_size > 0 {
                max_buffer_size = maintenance4.max_buffer_size;
            }
            if used_api >= vk::API_VERSION_1_2 {
                driver_name = c_string(driver.driver_name_as_c_str());
                driver_info = c_string(driver.driver_info_as_c_str());
            }
            if has_sm && sm.shader_sm_count > 0 {
                compute_units = Some(sm.shader_sm_count);
            } else if has_amd {
                let cus = amd
                    .shader_engine_count
                    .saturating_mul(amd.shader_arrays_per_engine_count)
                    .saturating_mul(amd.compute_units_per_shader_array);
                compute_units = (cus > 0).then_some(cus);
            }
        }
        let mut timeline_semaphores = false;
        if used_api >= vk::API_VERSION_1_2 {
            let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
            instance.get_physical_device_features2(physical, &mut features);
            timeline_semaphores = v12.timeline_semaphore == vk::TRUE;
        }
        let device_type = VulkanDeviceType::from_vk(props.device_type);
        let compute_units = compute_units.unwrap_or_else(|| {
            if device_type == VulkanDeviceType::Cpu {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                u32::try_from(cores).unwrap_or(u32::MAX)
            } else {
                1
            }
        });

        Some(VulkanDeviceInfo {
            name: c_string(props.device_name_as_c_str()),
            vendor_id: props.vendor_id,
            vendor: vendor_name(props.vendor_id),
            device_id: props.device_id,
            device_type,
            api_version: VulkanVersion::from_raw(props.api_version),
            used_api_version: VulkanVersion::from_raw(used_api),
            driver_version: props.driver_version,
            driver_version_text: driver_version_text(props.vendor_id, props.driver_version),
            driver_name,
            driver_info,
            memory_heaps: heaps,
            device_local_memory,
            max_allocation_size,
            max_buffer_size,
            max_allocation_count: limits.max_memory_allocation_count,
            max_workgroup_size: limits.max_compute_work_group_size,
            max_workgroup_invocations: limits.max_compute_work_group_invocations,
            max_workgroup_count: limits.max_compute_work_group_count,
            max_push_constants_size: limits.max_push_constants_size,
            max_shared_memory: limits.max_compute_shared_memory_size,
            max_storage_buffer_range: limits.max_storage_buffer_range,
            min_storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
            max_uniform_buffer_range: limits.max_uniform_buffer_range,
            min_uniform_buffer_offset_alignment: limits.min_uniform_buffer_offset_alignment,
            compute_queue_family,
            timestamp_valid_bits,
            timestamp_period_ns: limits.timestamp_period,
            timeline_semaphores,
            device_uuid,
            external_memory_fd: used_api >= vk::API_VERSION_1_1
                && has(ash::khr::external_memory_fd::NAME),
            compute_units,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_driver_versions_use_their_own_packing() {
        // 535.154.5.0 as NVIDIA packs it.
        let v = (535 << 22) | (154 << 14) | (5 << 6);
        assert_eq!(driver_version_text(0x10DE, v), "535.154.5.0");
        assert_eq!(driver_version_text(0x10005, 1), "0.0.1");
    }
}
