//! Raw `ash`, set up by hand as a Vulkan user would without offload: the counterpart the
//! benches compare offload's Vulkan backend with (`benches/vulkan.rs`,
//! `benches/babelstream.rs`, which include this file with `#[path]`). It owns the device
//! ([`RawDevice`]: loader, instance, device, one compute queue), buffers with their memory
//! ([`RawBuffer`]), a compute pipeline with one descriptor set written once
//! ([`RawPipeline`]), and one command buffer submitted and waited for on a timeline
//! semaphore, as offload waits ([`RawSubmitter`]). Every object holds an `Rc` of its
//! device, so the device is destroyed last. [`spirv_words`] makes the SPIR-V both sides
//! run from WGSL. Not a benchmark by itself.

// Each bench uses part of this module.
#![allow(dead_code)]

use std::cell::Cell;
use std::ffi::CString;
use std::rc::Rc;

use ash::vk;

/// `wgsl` compiled by naga into SPIR-V 1.3 words, validated, without offload's bounds
/// checks: what the raw side dispatches, and offload loads with `Program::new`.
pub fn spirv_words(wgsl: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(wgsl).expect("WGSL");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .expect("naga validation");
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    naga::back::spv::write_vec(&module, &info, &options, None).expect("SPIR-V")
}

/// The raw-ash counterpart of a runtime with one device and one queue.
pub struct RawDevice {
    pub _entry: ash::Entry,
    pub instance: ash::Instance,
    pub device: ash::Device,
    pub physical: vk::PhysicalDevice,
    pub family: u32,
    pub queue: vk::Queue,
}

impl RawDevice {
    /// Loader, instance (Vulkan 1.3 or what the loader has), first physical device with a
    /// compute family, one queue of it.
    pub fn new() -> RawDevice {
        // SAFETY: the system loader; kept open in `_entry` while its objects live.
        let entry = unsafe { ash::Entry::load() }.expect("libvulkan");
        // SAFETY: plain instance-level calls on a loaded loader with valid create infos.
        unsafe {
            let api = entry
                .try_enumerate_instance_version()
                .ok()
                .flatten()
                .unwrap_or(vk::API_VERSION_1_0)
                .min(vk::API_VERSION_1_3);
            let app = vk::ApplicationInfo::default()
                .application_name(c"raw")
                .api_version(api);
            let instance = entry
                .create_instance(
                    &vk::InstanceCreateInfo::default().application_info(&app),
                    None,
                )
                .expect("instance");
            let physical = instance.enumerate_physical_devices().expect("devices")[0];
            let family = instance
                .get_physical_device_queue_family_properties(physical)
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
                .expect("a compute family") as u32;
            let priorities = [1.0];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&priorities)];
            // Timeline semaphores, as offload enables them (Vulkan 1.2 core).
            let mut features12 = vk::PhysicalDeviceVulkan12Features::default()
                .timeline_semaphore(api >= vk::API_VERSION_1_2);
            let device = instance
                .create_device(
                    physical,
                    &vk::DeviceCreateInfo::default()
                        .queue_create_infos(&queues)
                        .push_next(&mut features12),
                    None,
                )
                .expect("device");
            let queue = device.get_device_queue(family, 0);
            RawDevice {
                _entry: entry,
                instance,
                device,
                physical,
                family,
                queue,
            }
        }
    }
}

impl Drop for RawDevice {
    fn drop(&mut self) {
        // SAFETY: the device is idle (callers waited) and every child object is gone.
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// A storage buffer and its own memory, bound at offset 0.
pub struct RawBuffer {
    pub dev: Rc<RawDevice>,
    pub buffer: vk::Buffer,
    pub memory: vk::DeviceMemory,
    pub size: u64,
}

impl RawBuffer {
    /// `size` bytes in the first memory type that has all of `want` (the first of any
    /// properties if none has), as a Vulkan user picks: `DEVICE_LOCAL` for the arrays
    /// kernels use, `HOST_VISIBLE | HOST_COHERENT` for what the host maps.
    pub fn new(dev: &Rc<RawDevice>, size: u64, want: vk::MemoryPropertyFlags) -> RawBuffer {
        let d = &dev.device;
        // SAFETY: object creation with valid create infos on a live device; the memory is
        // large enough for the buffer (its requirements) and of a type the buffer allows;
        // both are destroyed in `Drop`.
        unsafe {
            let buffer = d
                .create_buffer(
                    &vk::BufferCreateInfo::default().size(size).usage(
                        vk::BufferUsageFlags::STORAGE_BUFFER
                            | vk::BufferUsageFlags::TRANSFER_SRC
                            | vk::BufferUsageFlags::TRANSFER_DST,
                    ),
                    None,
                )
                .unwrap();
            let needs = d.get_buffer_memory_requirements(buffer);
            let props = dev
                .instance
                .get_physical_device_memory_properties(dev.physical);
            let types = props.memory_types_as_slice();
            let pick = |want: vk::MemoryPropertyFlags| {
                (0..types.len()).find(|&i| {
                    needs.memory_type_bits & (1 << i) != 0 && types[i].property_flags.contains(want)
                })
            };
            let index = pick(want)
                .or(pick(vk::MemoryPropertyFlags::empty()))
                .unwrap() as u32;
            let memory = d
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(needs.size)
                        .memory_type_index(index),
                    None,
                )
                .unwrap();
            d.bind_buffer_memory(buffer, memory, 0).unwrap();
            RawBuffer {
                dev: dev.clone(),
                buffer,
                memory,
                size,
            }
        }
    }

    /// Maps the whole buffer (its memory must be host-visible); stays mapped until drop,
    /// which frees the memory (and so unmaps it).
    pub fn map(&self) -> *mut u8 {
        // SAFETY: the memory is live and not mapped yet (each caller maps once); the range
        // is within the allocation.
        unsafe {
            self.dev
                .device
                .map_memory(self.memory, 0, self.size, vk::MemoryMapFlags::empty())
                .expect("host-visible memory")
                .cast()
        }
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // SAFETY: no submission that uses the buffer is pending (every one was waited for).
        unsafe {
            self.dev.device.destroy_buffer(self.buffer, None);
            self.dev.device.free_memory(self.memory, None);
        }
    }
}

/// One entry point of a SPIR-V module as a compute pipeline, with its layouts and one
/// descriptor set of storage buffers.
pub struct RawPipeline {
    pub dev: Rc<RawDevice>,
    pub shader: vk::ShaderModule,
    pub set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
    pub descriptors: vk::DescriptorPool,
    pub set: vk::DescriptorSet,
}

impl RawPipeline {
    /// Entry point `entry` of `words`, with storage buffers at `bindings` of set 0 and
    /// `push` bytes of push constants (none if 0).
    pub fn new(
        dev: &Rc<RawDevice>,
        words: &[u32],
        entry: &str,
        bindings: &[u32],
        push: u32,
    ) -> RawPipeline {
        let d = &dev.device;
        // SAFETY: straightforward object creation with valid create infos on a live device;
        // everything is destroyed in `Drop`.
        unsafe {
            let shader = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
                .unwrap();
            let layout_bindings: Vec<_> = bindings
                .iter()
                .map(|&b| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(b)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings),
                    None,
                )
                .unwrap();
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(push)];
            let sets = [set_layout];
            let mut info = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets);
            if push > 0 {
                info = info.push_constant_ranges(&ranges);
            }
            let layout = d.create_pipeline_layout(&info, None).unwrap();
            let name = CString::new(entry).unwrap();
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(shader)
                .name(&name);
            let pipeline = d
                .create_compute_pipelines(
                    vk::PipelineCache::null(),
                    &[vk::ComputePipelineCreateInfo::default()
                        .stage(stage)
                        .layout(layout)],
                    None,
                )
                .unwrap()[0];
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(bindings.len() as u32)];
            let descriptors = d
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .unwrap();
            let set = d
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(descriptors)
                        .set_layouts(&sets),
                )
                .unwrap()[0];
            RawPipeline {
                dev: dev.clone(),
                shader,
                set_layout,
                layout,
                pipeline,
                descriptors,
                set,
            }
        }
    }

    /// Writes the descriptor set once: `buffers[k]` (whole) at `bindings[k]` as given to
    /// [`new`](Self::new).
    pub fn bind(&self, bindings: &[u32], buffers: &[&RawBuffer]) {
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|b| {
                [vk::DescriptorBufferInfo::default()
                    .buffer(b.buffer)
                    .range(vk::WHOLE_SIZE)]
            })
            .collect();
        let writes: Vec<_> = bindings
            .iter()
            .zip(&infos)
            .map(|(&binding, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(self.set)
                    .dst_binding(binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set and the buffers are live; the set is not in use by a pending
        // submission (callers bind before the first); each binding exists in its layout as a
        // storage buffer.
        unsafe { self.dev.device.update_descriptor_sets(&writes, &[]) };
    }

    /// Records into `cb`: bind the pipeline and the set, push `push` (if any).
    ///
    /// # Safety
    /// `cb` is recording; `push` fits the layout's push-constant range.
    pub unsafe fn record_bind(&self, cb: vk::CommandBuffer, push: &[u8]) {
        let d = &self.dev.device;
        // SAFETY: guaranteed by the caller; the pipeline, layout and set are live.
        unsafe {
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            d.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            if !push.is_empty() {
                d.cmd_push_constants(cb, self.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
            }
        }
    }
}

impl Drop for RawPipeline {
    fn drop(&mut self) {
        let d = &self.dev.device;
        // SAFETY: no submission that uses them is pending; each object is destroyed once,
        // children before what they were made from.
        unsafe {
            d.destroy_descriptor_pool(self.descriptors, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.shader, None);
        }
    }
}

/// One command buffer, recorded, submitted and waited for at a time, on a timeline
/// semaphore.
pub struct RawSubmitter {
    pub dev: Rc<RawDevice>,
    pub pool: vk::CommandPool,
    pub commands: vk::CommandBuffer,
    pub timeline: vk::Semaphore,
    pub value: Cell<u64>,
}

impl RawSubmitter {
    pub fn new(dev: &Rc<RawDevice>) -> RawSubmitter {
        let d = &dev.device;
        // SAFETY: object creation with valid create infos on a live device (timeline
        // semaphores enabled by `RawDevice::new`); destroyed in `Drop`.
        unsafe {
            let pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(dev.family)
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .unwrap();
            let commands = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(pool)
                        .command_buffer_count(1),
                )
                .unwrap()[0];
            let mut kind = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let timeline = d
                .create_semaphore(
                    &vk::SemaphoreCreateInfo::default().push_next(&mut kind),
                    None,
                )
                .expect("timeline semaphore");
            RawSubmitter {
                dev: dev.clone(),
                pool,
                commands,
                timeline,
                value: Cell::new(0),
            }
        }
    }

    /// Begins the command buffer (one-time submit), lets `record` fill it, ends it, submits
    /// it and waits for it.
    ///
    /// # Safety
    /// What `record` records uses only live objects, correctly.
    pub unsafe fn run(&self, record: impl FnOnce(&ash::Device, vk::CommandBuffer)) {
        let d = &self.dev.device;
        let cb = self.commands;
        // SAFETY: the command buffer is not pending (every submission is waited for) and its
        // pool allows resetting it on begin; the rest is guaranteed by the caller.
        unsafe {
            d.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .unwrap();
            record(d, cb);
            d.end_command_buffer(cb).unwrap();
            self.submit_wait(cb);
        }
    }

    /// Submits `cb`, signalling the next timeline value, and waits for it.
    ///
    /// # Safety
    /// `cb` is recorded, not pending, and uses only live objects.
    pub unsafe fn submit_wait(&self, cb: vk::CommandBuffer) {
        let d = &self.dev.device;
        let buffers = [cb];
        let value = [self.value.get() + 1];
        let semaphores = [self.timeline];
        let mut values = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&value);
        // SAFETY: guaranteed by the caller; the value is above every earlier one.
        unsafe {
            d.queue_submit(
                self.dev.queue,
                &[vk::SubmitInfo::default()
                    .command_buffers(&buffers)
                    .signal_semaphores(&semaphores)
                    .push_next(&mut values)],
                vk::Fence::null(),
            )
            .unwrap();
            let wait = vk::SemaphoreWaitInfo::default()
                .semaphores(&semaphores)
                .values(&value);
            d.wait_semaphores(&wait, u64::MAX).unwrap();
        }
        self.value.set(value[0]);
    }
}

impl Drop for RawSubmitter {
    fn drop(&mut self) {
        // SAFETY: every submission was waited for; each object is destroyed once.
        unsafe {
            self.dev.device.destroy_semaphore(self.timeline, None);
            self.dev.device.destroy_command_pool(self.pool, None);
        }
    }
}
