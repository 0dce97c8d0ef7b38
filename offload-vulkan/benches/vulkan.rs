//! The Vulkan backend against raw `ash`, in one run, on whatever Vulkan driver the machine
//! has (lavapipe here), each comparison paired (`offload_bench::paired`: the two sides
//! alternate sample by sample, and the ratio comes from paired samples):
//!
//! * `vulkan_add_one_1Mi`: `add_one` (the WGSL test kernel, compiled by
//!   naga) over 1 Mi `u32`s in 16,384 workgroups of 64, launched and waited for, in a loop.
//!   `offload` goes through the runtime (`Queue::launch` + `Queue::sync`); `raw_ash` has the
//!   identical setup made by hand — one pipeline, one descriptor set written once, the count
//!   as a push constant, the same buffer memory — and records, submits and waits for one
//!   command buffer per iteration, waiting on a timeline semaphore as offload does (a
//!   fence wait costs lavapipe ~0.35 ms more per dispatch, which would flatter offload).
//!   **Goal: offload / raw_ash ≤ 1.05.**
//! * `vulkan_100_dependent_launches`: 100 launches of `add_one` over one workgroup of 64
//!   on the same buffer (each depends on the one before), then one `sync`. `offload` makes
//!   101 calls; its queue records the 100 dispatches into one command buffer with a barrier
//!   between each and submits it at the `sync` (Q1 batching). `raw_ash` records the same
//!   100 dispatches and barriers into one command buffer by hand, submits it and waits on a
//!   timeline semaphore: the floor for this work on this driver (wgpu, the comparison the
//!   issue first named, is too heavy a dev-dependency; its one-pass time is this floor plus
//!   its own validation). **Goal: offload / raw_ash ≤ 1.1.**
//! * `vulkan_100_dependent_launches_pinned`: the same, with the whole process pinned to one
//!   CPU (as the issue measured it, beside wgpu, under `taskset`). Unpinned, lavapipe's
//!   worker threads make each barrier cost ~30 µs and the recording work disappears under
//!   that; on one CPU the raw chain takes ~0.15 ms on the 2-core VM and offload's
//!   per-launch recording shows.
//!   **Goal: offload / raw_ash ≤ 1.2.**
//!
//!   Pinning must happen before the first thread of the process exists (affinity is per
//!   thread and inherited at creation: lavapipe's worker threads, made with the instance
//!   and device, then run on the same CPU) and must not affect the other groups, so this
//!   group runs in a child of the bench: the parent re-runs its own executable with the
//!   same arguments (criterion's filter included) and `OFFLOAD_BENCH_VULKAN_PINNED=<cpu>`
//!   (the first CPU the parent may use); the child pins its main thread to that CPU first
//!   thing, runs only this group, and the parent forwards its output and its paired line.
//!   Setting the variable by hand runs only the pinned group, on that CPU.
//! * `vulkan_init_shutdown`: `Offload::init` → `shutdown` of a runtime
//!   with only the Vulkan platform, against loading the Vulkan loader, creating the instance,
//!   finding the compute queue family and creating and destroying the device (and instance,
//!   and closing the loader). **Goal: offload / raw_ash ≤ 1.05.**
//!
//! The paired medians and ratios are printed at the end. Run with
//! `cargo bench -p offload-vulkan --bench vulkan`. Without a Vulkan driver it says so and
//! measures nothing.

use std::ffi::CStr;
use std::hint::black_box;

use ash::vk;
use criterion::Criterion;
use offload_bench::{Paired, paired};
use offload_core::{Arg, Dims, MemKind, NoPlatforms, Offload, Program, Uninit};

const WORDS: u32 = 1 << 20;
const BLOCK: u32 = 64;

fn spirv_words() -> Vec<u32> {
    let wgsl = include_str!("../tests/fixtures/kernels.wgsl");
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

fn start() -> Option<Offload<offload_core::Ready, NoPlatforms>> {
    Offload::<Uninit, NoPlatforms>::builder()
        .platform(offload_vulkan::platform())
        .start()
        .ok()
}

/// The raw-ash counterpart of a runtime with one device and one queue.
struct RawDevice {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    physical: vk::PhysicalDevice,
    family: u32,
    queue: vk::Queue,
}

impl RawDevice {
    /// Loader, instance (Vulkan 1.3 or what the loader has), first physical device with a
    /// compute family, one queue of it.
    fn new() -> RawDevice {
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

/// `add_one` set up by hand: the pipeline, its layouts, one descriptor set, the buffer.
struct RawAddOne {
    dev: RawDevice,
    shader: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    descriptors: vk::DescriptorPool,
    set: vk::DescriptorSet,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    pool: vk::CommandPool,
    commands: vk::CommandBuffer,
    timeline: vk::Semaphore,
    value: std::cell::Cell<u64>,
}

impl RawAddOne {
    fn new(words: &[u32]) -> RawAddOne {
        let dev = RawDevice::new();
        let d = &dev.device;
        // SAFETY: straightforward object creation with valid create infos on a live device;
        // everything is destroyed in `Drop`.
        unsafe {
            let shader = d
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
                .unwrap();
            let bindings = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)];
            let set_layout = d
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                    None,
                )
                .unwrap();
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(4)];
            let sets = [set_layout];
            let layout = d
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default()
                        .set_layouts(&sets)
                        .push_constant_ranges(&ranges),
                    None,
                )
                .unwrap();
            let name: &CStr = c"add_one";
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(shader)
                .name(name);
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
                .descriptor_count(1)];
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
            let size = u64::from(WORDS) * 4;
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
            let index = pick(vk::MemoryPropertyFlags::DEVICE_LOCAL)
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
            let info = [vk::DescriptorBufferInfo::default()
                .buffer(buffer)
                .range(vk::WHOLE_SIZE)];
            d.update_descriptor_sets(
                &[vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(0)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&info)],
                &[],
            );
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
            let raw = RawAddOne {
                dev,
                shader,
                set_layout,
                layout,
                pipeline,
                descriptors,
                set,
                buffer,
                memory,
                pool,
                commands,
                timeline,
                value: std::cell::Cell::new(0),
            };
            raw.launch_sync(); // the first dispatch compiles on lavapipe
            raw
        }
    }

    /// `count` dispatches of one workgroup over the first 64 words, each after a barrier
    /// on the one before, in one command buffer; submitted and waited for.
    fn chain(&self, count: u32) {
        let d = &self.dev.device;
        let cb = self.commands;
        // SAFETY: as in `launch_sync`.
        unsafe {
            d.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .unwrap();
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            d.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            d.cmd_push_constants(
                cb,
                self.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &BLOCK.to_ne_bytes(),
            );
            let barrier = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
            for i in 0..count {
                if i > 0 {
                    d.cmd_pipeline_barrier(
                        cb,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &barrier,
                        &[],
                        &[],
                    );
                }
                d.cmd_dispatch(cb, 1, 1, 1);
            }
            d.end_command_buffer(cb).unwrap();
            self.submit_wait(cb);
        }
    }

    /// Submits `cb`, signalling the next timeline value, and waits for it.
    ///
    /// # Safety
    /// `cb` is recorded, not pending, and uses only live objects.
    unsafe fn submit_wait(&self, cb: vk::CommandBuffer) {
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

    fn launch_sync(&self) {
        let d = &self.dev.device;
        let cb = self.commands;
        // SAFETY: the command buffer is not pending (every submission is waited for); all
        // objects are live; each submission signals a timeline value above every earlier one.
        unsafe {
            d.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .unwrap();
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            d.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            d.cmd_push_constants(
                cb,
                self.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &WORDS.to_ne_bytes(),
            );
            d.cmd_dispatch(cb, WORDS / BLOCK, 1, 1);
            d.end_command_buffer(cb).unwrap();
            self.submit_wait(cb);
        }
    }
}

impl Drop for RawAddOne {
    fn drop(&mut self) {
        let d = &self.dev.device;
        // SAFETY: every submission was waited for; each object is destroyed once, children
        // before what they were made from.
        unsafe {
            d.destroy_semaphore(self.timeline, None);
            d.destroy_command_pool(self.pool, None);
            d.destroy_descriptor_pool(self.descriptors, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.shader, None);
            d.destroy_buffer(self.buffer, None);
            d.free_memory(self.memory, None);
        }
    }
}

fn add_one(c: &mut Criterion, words: &[u32]) -> Paired {
    let rt = start().expect("Vulkan");
    let dev = rt.devices().unwrap().remove(0);
    let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let module = Program::new(image).load(&dev).unwrap();
    let kernel = module.kernel("add_one").unwrap();
    let queue = dev.queue().unwrap();
    let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
    let dims = Dims::grid([WORDS / BLOCK, 1, 1]).block([BLOCK, 1, 1]);
    let launch = || {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&kernel, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) }.unwrap();
        queue.sync().unwrap();
    };
    launch(); // the first dispatch compiles on lavapipe
    let raw = RawAddOne::new(words);
    raw.launch_sync();
    let report = paired(
        c,
        "vulkan_add_one_1Mi",
        ("offload", "raw_ash"),
        40,
        launch,
        || raw.launch_sync(),
    );
    drop(raw);
    drop((kernel, module, queue, buf));
    rt.shutdown().unwrap();
    report
}

/// Launches in a row on one queue, then one sync (Q1 batching).
const CHAIN: u32 = 100;

fn dependent_launches(c: &mut Criterion, words: &[u32], group: &str) -> Paired {
    let rt = start().expect("Vulkan");
    let dev = rt.devices().unwrap().remove(0);
    let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let module = Program::new(image).load(&dev).unwrap();
    let kernel = module.kernel("add_one").unwrap();
    let queue = dev.queue().unwrap();
    let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
    let dims = Dims::grid([1, 1, 1]).block([BLOCK, 1, 1]);
    let chain = || {
        for _ in 0..CHAIN {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { queue.launch(&kernel, dims, &[Arg::buffer(&buf), Arg::scalar(&BLOCK)]) }
                .unwrap();
        }
        queue.sync().unwrap();
    };
    let before = offload_vulkan::stats().submissions;
    chain();
    assert_eq!(
        offload_vulkan::stats().submissions - before,
        1,
        "100 launches and a sync are one submission"
    );
    let raw = RawAddOne::new(words);
    raw.chain(CHAIN);
    let report = paired(c, group, ("offload", "raw_ash"), 40, chain, || {
        raw.chain(CHAIN)
    });
    drop(raw);
    drop((kernel, module, queue, buf));
    rt.shutdown().unwrap();
    report
}

fn init_shutdown(c: &mut Criterion) -> Paired {
    paired(
        c,
        "vulkan_init_shutdown",
        ("offload", "raw_ash"),
        30,
        || {
            let rt = start().unwrap();
            black_box(rt.generation());
            rt.shutdown().unwrap();
        },
        || {
            let raw = RawDevice::new();
            black_box(raw.queue);
            drop(raw);
        },
    )
}

/// In the child that runs the pinned group: the CPU to pin the process to.
const PINNED: &str = "OFFLOAD_BENCH_VULKAN_PINNED";
const PINNED_GROUP: &str = "vulkan_100_dependent_launches_pinned";

/// Pins the calling thread, and so every thread it makes afterwards, to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: `cpu_set_t` is plain data (all zeroes: the empty set); `CPU_SET` checks `cpu`
    // against the set's size; `sched_setaffinity` reads `size_of::<cpu_set_t>()` bytes of a
    // live set.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(pinned, 0, "sched_setaffinity to CPU {cpu} failed");
}

/// The first CPU this process may run on.
fn first_allowed_cpu() -> usize {
    // SAFETY: as in `pin_to`; `sched_getaffinity` writes at most the set's size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 0;
        }
        (0..libc::CPU_SETSIZE as usize)
            .find(|&cpu| libc::CPU_ISSET(cpu, &set))
            .unwrap_or(0)
    }
}

/// Runs the pinned group in a child of this bench (see the module docs); forwards its
/// output and returns its paired line.
fn pinned_in_child() -> Option<String> {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(std::env::current_exe().ok()?)
        .args(std::env::args_os().skip(1))
        .env(PINNED, first_allowed_cpu().to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut report = None;
    for line in BufReader::new(child.stdout.take()?).lines() {
        let line = line.ok()?;
        println!("{line}");
        if line.starts_with(&format!("paired {PINNED_GROUP}")) {
            report = Some(line);
        }
    }
    child.wait().ok()?;
    report
}

fn main() {
    let pinned = std::env::var(PINNED).ok();
    if let Some(cpu) = &pinned {
        // First, before any thread exists (see the module docs).
        pin_to(
            cpu.parse()
                .expect("OFFLOAD_BENCH_VULKAN_PINNED: a CPU number"),
        );
    }
    if start().map(|rt| rt.shutdown()).is_none() {
        println!("no Vulkan driver: nothing to measure");
        return;
    }
    let words = spirv_words();
    let mut c = Criterion::default().configure_from_args();
    if pinned.is_some() {
        dependent_launches(&mut c, &words, PINNED_GROUP);
        c.final_summary();
        return;
    }
    let mut reports = vec![
        add_one(&mut c, &words).to_string(),
        dependent_launches(&mut c, &words, "vulkan_100_dependent_launches").to_string(),
        init_shutdown(&mut c).to_string(),
    ];
    c.final_summary();
    reports.extend(pinned_in_child());
    println!("\npaired (goal: offload / raw_ash <= 1.05; 1.1 for the 100 launches; 1.2 pinned):");
    for report in reports {
        println!("  {report}");
    }
}
