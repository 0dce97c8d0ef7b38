//! Programs on Vulkan: a validated SPIR-V module ([`VulkanModule`]) and its compute entry
//! points ([`VulkanKernel`]), with their descriptor set layouts, pipeline layouts and
//! pipelines.
//!
//! `load` validates and reflects the image ([`crate::spirv`]) before the driver sees it,
//! then makes the `VkShaderModule`. `kernel` makes the entry point's descriptor set layout
//! (one storage or uniform buffer per binding of set 0), pipeline layout (plus one
//! push-constant range)
//! and pipeline, through the device's pipeline cache, once per entry point. Launches with
//! another block size than the shader declares get a pipeline of their own, made at the
//! first such launch and kept with the module (see the crate docs, "Launch geometry").
//!
//! Everything belongs to the module's shared part, which kernels hold too: it is destroyed
//! when the last of them goes, after the last launch that used it has finished on the device.
//! This module must not submit work: launches are [`crate::queue`]'s.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ash::vk;
use offload_core::hal;
use offload_core::{BackendKind, Error, GlobalInfo, ParamKind, Result};

use crate::context::DeviceContext;
use crate::error::{At, map_vk_err};
use crate::spirv::{self, EntryPoint, ForVulkan, Reflection, SpirvVersion, WorkgroupSize};
use crate::usage::Usage;

/// A pipeline made for a block size other than the declared one, with the shader module it
/// was made from when that is a patched copy.
#[derive(Clone, Copy, Debug)]
struct Variant {
    shader: Option<vk::ShaderModule>,
    pipeline: vk::Pipeline,
}

/// The objects of one entry point, made by the first `kernel` call for it.
#[derive(Debug)]
struct EntryObjects {
    set_layout: Option<vk::DescriptorSetLayout>,
    layout: vk::PipelineLayout,
    base: vk::Pipeline,
    variants: HashMap<[u32; 3], Variant>,
}

/// The shared part of a module: kept alive by the module and by its kernels.
pub(crate) struct ModuleInner {
    pub(crate) device: Arc<DeviceContext>,
    reflection: Reflection,
    shader: vk::ShaderModule,
    entries: Vec<Mutex<Option<EntryObjects>>>,
    /// The queued launches of its kernels.
    pub(crate) usage: Arc<Usage>,
}

impl std::fmt::Debug for ModuleInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanModule")
            .field("spirv", &self.reflection.version.to_string())
            .field(
                "entry_points",
                &self
                    .reflection
                    .entry_points
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A SPIR-V module loaded on one device. Its entry points are its kernels.
///
/// Made by [`Device::load`](offload_core::hal::Device::load); see the crate docs for what a module may contain
/// and how its kernels take their arguments.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::{Config, Error};
/// let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = vk.devices().remove(0);
/// // WGSL compiled to SPIR-V with naga (any SPIR-V compiler will do).
/// let wgsl = "@group(0) @binding(0) var<storage, read_write> out: array<u32>;
///             @compute @workgroup_size(64)
///             fn twice(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] *= 2u; }";
/// let m = naga::front::wgsl::parse_str(wgsl).unwrap();
/// let flags = naga::valid::ValidationFlags::all();
/// let info = naga::valid::Validator::new(flags, Default::default()).validate(&m).unwrap();
/// let words = naga::back::spv::write_vec(&m, &info, &Default::default(), None).unwrap();
/// let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
/// let module = dev.load(&image)?;
/// assert!(module.entry_points().eq(["twice"]));
/// // Not SPIR-V: rejected before the driver sees it.
/// assert!(matches!(dev.load(b"\x7fELF...."), Err(Error::InvalidBinary { .. })));
/// module.unload()?;
/// # vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanModule {
    pub(crate) inner: Arc<ModuleInner>,
}

impl VulkanModule {
    /// The names of the module's `GLCompute` entry points, in declaration order.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// # let wgsl = include_str!("../tests/fixtures/kernels.wgsl");
    /// # let m = naga::front::wgsl::parse_str(wgsl).unwrap();
    /// # let flags = naga::valid::ValidationFlags::all();
    /// # let i = naga::valid::Validator::new(flags, naga::valid::Capabilities::all()).validate(&m).unwrap();
    /// # let words = naga::back::spv::write_vec(&m, &i, &Default::default(), None).unwrap();
    /// # let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    /// let module = dev.load(&image)?;
    /// for name in module.entry_points() {
    ///     println!("kernel {name}");
    /// }
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn entry_points(&self) -> impl Iterator<Item = &str> {
        self.inner
            .reflection
            .entry_points
            .iter()
            .map(|e| e.name.as_str())
    }

    /// The SPIR-V version of the module, as `(major, minor)`.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// # let wgsl = include_str!("../tests/fixtures/kernels.wgsl");
    /// # let m = naga::front::wgsl::parse_str(wgsl).unwrap();
    /// # let flags = naga::valid::ValidationFlags::all();
    /// # let i = naga::valid::Validator::new(flags, naga::valid::Capabilities::all()).validate(&m).unwrap();
    /// # let words = naga::back::spv::write_vec(&m, &i, &Default::default(), None).unwrap();
    /// # let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    /// let module = dev.load(&image)?;
    /// assert_eq!(module.spirv_version().0, 1);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn spirv_version(&self) -> (u8, u8) {
        let v = self.inner.reflection.version;
        (v.major, v.minor)
    }

    /// Whether the module was compiled by offload from WGSL (the `wgsl` feature), with
    /// every index checked against its array (an out-of-range read gives zero, an
    /// out-of-range write does nothing): then each launch also checks that every buffer
    /// argument holds at least its binding's minimum size (the block's fixed members and
    /// one element of its runtime array), and the kernel's memory accesses stay inside its
    /// buffer arguments. `false` for SPIR-V images made elsewhere.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&offload_core::Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let module = dev.load(offload_vulkan::fixtures::KERNELS)?;
    /// assert!(!module.bounds_checked());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn bounds_checked(&self) -> bool {
        self.inner.reflection.bounds_checked
    }

    /// Whether the module's kernels record their first out-of-range access of each launch
    /// (the bounds report of WGSL kernels, [`VulkanOptions::bounds_report`]), which the
    /// queue's next sync returns as `Error::OutOfBounds`. `false` for SPIR-V images made
    /// elsewhere, for WGSL compiled with the report off, and for a kernel without an array
    /// access to check.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&offload_core::Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let module = dev.load(offload_vulkan::fixtures::KERNELS)?;
    /// assert!(!module.reports_bounds());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    ///
    /// [`VulkanOptions::bounds_report`]: crate::VulkanOptions::bounds_report
    pub fn reports_bounds(&self) -> bool {
        self.inner.reflection.report.is_some()
    }
}

/// An entry point of a [`VulkanModule`], ready to launch: its pipeline for the declared
/// workgroup size, and its parameters (storage buffers, then push-constant scalars).
///
/// ```
/// # use offload_core::hal::{Device as _, Platform as _, Program as _};
/// # use offload_core::{Config, ParamKind, ScalarType};
/// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
/// # let dev = vk.devices().remove(0);
/// # let wgsl = include_str!("../tests/fixtures/kernels.wgsl");
/// # let m = naga::front::wgsl::parse_str(wgsl).unwrap();
/// # let flags = naga::valid::ValidationFlags::all();
/// # let i = naga::valid::Validator::new(flags, naga::valid::Capabilities::all()).validate(&m).unwrap();
/// # let words = naga::back::spv::write_vec(&m, &i, &Default::default(), None).unwrap();
/// # let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
/// let module = dev.load(&image)?;
/// let add_one = module.kernel("add_one")?;
/// assert_eq!(offload_vulkan::VulkanModule::params(&add_one), &[ParamKind::Buffer, ParamKind::Typed(ScalarType::U32)]);
/// println!("declared workgroup size {:?}", add_one.workgroup_size());
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanKernel {
    pub(crate) module: Arc<ModuleInner>,
    pub(crate) entry: usize,
    pub(crate) params: Vec<ParamKind>,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: Option<vk::DescriptorSetLayout>,
    pub(crate) pipeline: vk::Pipeline,
}

impl VulkanKernel {
    /// The entry point's name.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// # let wgsl = include_str!("../tests/fixtures/kernels.wgsl");
    /// # let m = naga::front::wgsl::parse_str(wgsl).unwrap();
    /// # let flags = naga::valid::ValidationFlags::all();
    /// # let i = naga::valid::Validator::new(flags, naga::valid::Capabilities::all()).validate(&m).unwrap();
    /// # let words = naga::back::spv::write_vec(&m, &i, &Default::default(), None).unwrap();
    /// # let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    /// # let module = dev.load(&image)?;
    /// assert_eq!(module.kernel("fill")?.name(), "fill");
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.entry_point().name
    }

    /// The workgroup size the shader declares (`LocalSize`, `LocalSizeId` or the
    /// `WorkgroupSize` built-in): launches with this block size use the kernel's own
    /// pipeline.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// # let wgsl = include_str!("../tests/fixtures/kernels.wgsl");
    /// # let m = naga::front::wgsl::parse_str(wgsl).unwrap();
    /// # let flags = naga::valid::ValidationFlags::all();
    /// # let i = naga::valid::Validator::new(flags, naga::valid::Capabilities::all()).validate(&m).unwrap();
    /// # let words = naga::back::spv::write_vec(&m, &i, &Default::default(), None).unwrap();
    /// # let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    /// # let module = dev.load(&image)?;
    /// assert_eq!(module.kernel("noop")?.workgroup_size(), [64, 1, 1]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.entry_point().workgroup.declared()
    }

    pub(crate) fn entry_point(&self) -> &EntryPoint {
        // `entry` indexes the module's entry points (set by `kernel`, never changed).
        &self.module.reflection.entry_points[self.entry]
    }

    /// The pipeline that runs `block` threads per workgroup: the kernel's own for the
    /// declared size, otherwise a specialised or patched one, made once per size. The size
    /// is already checked against the device's limits.
    pub(crate) fn pipeline_for(&self, block: [u32; 3]) -> Result<vk::Pipeline> {
        let entry = self.entry_point();
        let declared = entry.workgroup.declared();
        if block == declared {
            return Ok(self.pipeline);
        }
        let refuse = |why: &str| {
            Err(Error::invalid(
                "",
                format!(
                    "vulkan kernel `{}` declares workgroup size {declared:?}, the launch asks \
                     for blocks of {block:?}: {why}",
                    entry.name
                ),
            ))
        };
        // A block of other dimensions than the shader's would run, say, its 2-D indexing
        // (`global_invocation_id.y` for rows) on 1-D blocks: the rows beyond the first
        // would never run, and the launch would return `Ok` with a wrong answer. Resizing
        // keeps the dimensions the shader uses (a 1-D shader takes any 1-D block, an 8×8
        // one 16×16), so only such sizes are made.
        if (1..3).any(|k| (block[k] > 1) != (declared[k] > 1)) {
            let dims = |s: [u32; 3]| match s {
                [_, 1, 1] => "1-D",
                [_, _, 1] => "2-D",
                _ => "3-D",
            };
            let keeps: Vec<String> = (1..3)
                .map(|k| {
                    let axis = ["x", "y", "z"][k];
                    if declared[k] > 1 {
                        format!("{axis} > 1")
                    } else {
                        format!("{axis} = 1")
                    }
                })
                .collect();
            return refuse(&format!(
                // No API's syntax: the backend does not know whose launch it is (Rust's
                // `Dims`, C's `offload_dims_t`), so the fix is said as the sizes to use.
                "{} blocks for a {} workgroup would run its indexing on other dimensions \
                 than it was written for (the result would be wrong). Launch blocks of the \
                 declared size, {declared:?}, or another size that keeps its dimensions \
                 ({}); 1-D blocks are for 1-D shaders",
                dims(block),
                dims(declared),
                keeps.join(", ")
            ));
        }
        match entry.workgroup {
            WorkgroupSize::Fixed { .. } => {
                return refuse(
                    "the shader fixes its size with constants (launch with the declared size, \
                     or declare it with LocalSize or specialisation constants)",
                );
            }
            WorkgroupSize::Spec { size, ids } => {
                if (0..3).any(|k| ids[k].is_none() && block[k] != size[k]) {
                    return refuse("a dimension without a specialisation constant differs");
                }
            }
            WorkgroupSize::Literal { size, .. } => {
                if entry.uses_workgroup_memory && (0..3).any(|k| block[k] > size[k]) {
                    return refuse(
                        "the shader uses workgroup memory sized for its declared size, so \
                         larger blocks could overrun it",
                    );
                }
            }
        }
        let mut objects = self.module.lock_entry(self.entry);
        let Some(objects) = objects.as_mut() else {
            return Err(Error::invalid(
                "",
                "the vulkan kernel's module was unloaded",
            ));
        };
        if let Some(v) = objects.variants.get(&block) {
            return Ok(v.pipeline);
        }
        let variant = self.module.make_variant(self.entry, block, self.layout)?;
        objects.variants.insert(block, variant);
        Ok(variant.pipeline)
    }
}

fn entry_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::InvalidBinary {
        backend: BackendKind::Vulkan,
        call: "",
        reason: format!("entry point name {name:?} contains a NUL byte"),
    })
}

impl ModuleInner {
    fn lock_entry(&self, entry: usize) -> MutexGuard<'_, Option<EntryObjects>> {
        // Every step under this lock is one driver call that either made an object (kept) or
        // failed (nothing kept): a panic elsewhere cannot leave it half-made.
        self.entries[entry]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes a compute pipeline for entry point `entry` from `shader`.
    fn pipeline(
        &self,
        shader: vk::ShaderModule,
        entry: usize,
        layout: vk::PipelineLayout,
        specialization: Option<&vk::SpecializationInfo<'_>>,
    ) -> Result<vk::Pipeline> {
        let name = entry_name(&self.reflection.entry_points[entry].name)?;
        let cache = self.device.pipeline_cache()?;
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(shader)
            .name(&name);
        if let Some(s) = specialization {
            stage = stage.specialization_info(s);
        }
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)];
        // SAFETY: the shader module, layout and cache are live objects of this device; the
        // entry point exists in the module (reflected) with the GLCompute model; `info`,
        // `name` and the specialisation data live across the call. The module was validated
        // before it reached the driver.
        let made = unsafe { self.device.raw.create_compute_pipelines(cache, &info, None) };
        match made {
            Ok(pipelines) if pipelines.len() == 1 => {
                crate::stats::LIVE_PIPELINES.fetch_add(1, Ordering::SeqCst);
                Ok(pipelines[0])
            }
            Ok(pipelines) => {
                for p in pipelines {
                    // SAFETY: just made, never used.
                    unsafe { self.device.raw.destroy_pipeline(p, None) };
                }
                Err(map_vk_err(
                    At::new("vkCreateComputePipelines"),
                    vk::Result::ERROR_UNKNOWN,
                ))
            }
            Err((pipelines, e)) => {
                for p in pipelines.into_iter().filter(|p| *p != vk::Pipeline::null()) {
                    // SAFETY: made by the failed call, never used.
                    unsafe { self.device.raw.destroy_pipeline(p, None) };
                }
                Err(map_vk_err(At::new("vkCreateComputePipelines"), e))
            }
        }
    }

    /// A pipeline of entry point `entry` for blocks of `block` threads.
    fn make_variant(
        &self,
        entry: usize,
        block: [u32; 3],
        layout: vk::PipelineLayout,
    ) -> Result<Variant> {
        match self.reflection.entry_points[entry].workgroup {
            WorkgroupSize::Spec { ids, .. } => {
                let mut map = Vec::new();
                let mut data = Vec::new();
                for k in 0..3 {
                    if let Some(id) = ids[k] {
                        map.push(
                            vk::SpecializationMapEntry::default()
                                .constant_id(id)
                                .offset((data.len() * 4) as u32)
                                .size(4),
                        );
                        data.push(block[k]);
                    }
                }
                let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_ne_bytes()).collect();
                let spec = vk::SpecializationInfo::default()
                    .map_entries(&map)
                    .data(&bytes);
                let pipeline = self.pipeline(self.shader, entry, layout, Some(&spec))?;
                Ok(Variant {
                    shader: None,
                    pipeline,
                })
            }
            _ => {
                let Some(words) = self.reflection.with_local_size(entry, block) else {
                    return Err(Error::invalid(
                        "",
                        "the kernel's workgroup size cannot be changed",
                    ));
                };
                let shader = create_shader_module(&self.device, &words)?;
                match self.pipeline(shader, entry, layout, None) {
                    Ok(pipeline) => Ok(Variant {
                        shader: Some(shader),
                        pipeline,
                    }),
                    Err(e) => {
                        destroy_shader_module(&self.device, shader);
                        Err(e)
                    }
                }
            }
        }
    }

    /// The kernel and its argument number (from 1; 0: not one of its arguments) that a
    /// bounds report names by the entry point's index in the report and the binding.
    pub(crate) fn report_names(&self, entry: u32, binding: u32) -> (String, usize) {
        let name = self
            .reflection
            .report
            .as_ref()
            .and_then(|r| r.entries.get(entry as usize))
            .cloned()
            .unwrap_or_else(|| format!("#{entry} of its module"));
        let argument = self
            .reflection
            .entry_points
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.bindings.iter().position(|&b| b == binding))
            .map_or(0, |i| i + 1);
        (name, argument)
    }

    /// Makes the layouts and the base pipeline of an entry point.
    fn make_entry(&self, entry: usize) -> Result<EntryObjects> {
        let e = &self.reflection.entry_points[entry];
        let dev = &self.device.raw;
        // The parameters' bindings, then the bounds report's (a storage buffer the queue
        // binds, `crate::bounds`).
        let report = e.report_binding.map(|b| (b, false));
        let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = e
            .bindings
            .iter()
            .copied()
            .zip(e.uniform.iter().copied())
            .chain(report)
            .map(|(b, uniform)| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(descriptor_type(uniform))
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let set_layout = if bindings.is_empty() {
            None
        } else {
            let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
            // SAFETY: the device is live; binding numbers are distinct (reflection dedups).
            let made = unsafe { dev.create_descriptor_set_layout(&info, None) }
                .map_err(|e| map_vk_err(At::new("vkCreateDescriptorSetLayout"), e))?;
            Some(made)
        };
        let destroy_set = || {
            if let Some(s) = set_layout {
                // SAFETY: made above, used by nothing that lives.
                unsafe { dev.destroy_descriptor_set_layout(s, None) };
            }
        };
        let sets: Vec<vk::DescriptorSetLayout> = set_layout.into_iter().collect();
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(e.push_size)];
        let mut info = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets);
        if e.push_size > 0 {
            info = info.push_constant_ranges(&ranges);
        }
        // SAFETY: the device and the set layout are live; the push range (a multiple of 4,
        // at most maxPushConstantsSize: checked by `kernel`) lives across the call.
        let layout = match unsafe { dev.create_pipeline_layout(&info, None) } {
            Ok(l) => l,
            Err(err) => {
                destroy_set();
                return Err(map_vk_err(At::new("vkCreatePipelineLayout"), err));
            }
        };
        match self.pipeline(self.shader, entry, layout, None) {
            Ok(base) => Ok(EntryObjects {
                set_layout,
                layout,
                base,
                variants: HashMap::new(),
            }),
            Err(err) => {
                // SAFETY: made above, used by no pipeline.
                unsafe { dev.destroy_pipeline_layout(layout, None) };
                destroy_set();
                Err(err)
            }
        }
    }
}

/// The descriptor type of a binding: `UNIFORM_BUFFER` or `STORAGE_BUFFER`.
pub(crate) fn descriptor_type(uniform: bool) -> vk::DescriptorType {
    if uniform {
        vk::DescriptorType::UNIFORM_BUFFER
    } else {
        vk::DescriptorType::STORAGE_BUFFER
    }
}

fn create_shader_module(device: &DeviceContext, words: &[u32]) -> Result<vk::ShaderModule> {
    let info = vk::ShaderModuleCreateInfo::default().code(words);
    // SAFETY: `words` is a SPIR-V module that passed offload's validation (header, version
    // for this device, word counts, structure); it lives across the call.
    let shader = unsafe { device.raw.create_shader_module(&info, None) }
        .map_err(|e| map_vk_err(At::new("vkCreateShaderModule"), e))?;
    crate::stats::SHADER_MODULES_CREATED.fetch_add(1, Ordering::SeqCst);
    crate::stats::LIVE_SHADER_MODULES.fetch_add(1, Ordering::SeqCst);
    Ok(shader)
}

fn destroy_shader_module(device: &DeviceContext, shader: vk::ShaderModule) {
    // SAFETY: callers pass a shader module of this device that no pending pipeline creation
    // uses (pipelines made from it keep what they need).
    unsafe { device.raw.destroy_shader_module(shader, None) };
    crate::stats::LIVE_SHADER_MODULES.fetch_sub(1, Ordering::SeqCst);
}

/// Validates and reflects `image` for `device` as `load` does, without loading it.
pub(crate) fn validate(device: &DeviceContext, image: &[u8]) -> Result<()> {
    spirv::reflect(image, SpirvVersion::for_vulkan(device.api), "").map(drop)
}

/// Validates `image` for `device` and loads it.
pub(crate) fn load(device: Arc<DeviceContext>, image: &[u8]) -> Result<VulkanModule> {
    let reflection = spirv::reflect(image, SpirvVersion::for_vulkan(device.api), "")?;
    let shader = create_shader_module(&device, &reflection.words)?;
    let entries = reflection
        .entry_points
        .iter()
        .map(|_| Mutex::new(None))
        .collect();
    crate::stats::LIVE_MODULES.fetch_add(1, Ordering::SeqCst);
    Ok(VulkanModule {
        inner: Arc::new(ModuleInner {
            device,
            reflection,
            shader,
            entries,
            usage: Arc::default(),
        }),
    })
}

/// Looks up entry point `name` and makes its objects (once per entry point).
pub(crate) fn kernel(module: &VulkanModule, name: &str) -> Result<VulkanKernel> {
    let inner = &module.inner;
    let Some(entry) = inner
        .reflection
        .entry_points
        .iter()
        .position(|e| e.name == name)
    else {
        return Err(Error::SymbolNotFound {
            backend: BackendKind::Vulkan,
            call: "",
            symbol: name.to_string(),
            hint: String::new(),
        });
    };
    let e = &inner.reflection.entry_points[entry];
    let unsupported = |reason: String| Error::Unsupported {
        backend: BackendKind::Vulkan,
        call: "",
        reason: format!("entry point `{name}`: {reason}"),
    };
    if let Some(reason) = &e.unsupported {
        return Err(unsupported(reason.clone()));
    }
    let max_push = inner.device.limits.max_push_constants_size;
    if e.push_size > max_push {
        return Err(unsupported(format!(
            "{} bytes of push constants, the device allows {max_push}",
            e.push_size
        )));
    }
    let mut objects = inner.lock_entry(entry);
    if objects.is_none() {
        *objects = Some(inner.make_entry(entry)?);
    }
    let Some(o) = objects.as_ref() else {
        return Err(Error::invalid(
            "",
            "the vulkan module lost its entry point objects",
        ));
    };
    Ok(VulkanKernel {
        module: inner.clone(),
        entry,
        params: e.params(),
        layout: o.layout,
        set_layout: o.set_layout,
        pipeline: o.base,
    })
}

/// Waits for the module's launches, then lets it go (destroyed now unless kernels of it
/// still live, then when the last one goes).
pub(crate) fn unload(module: VulkanModule) -> Result<()> {
    let inner = &module.inner;
    let waited = inner.usage.wait(&inner.device);
    drop(module);
    waited
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        // Batches that use it hold it, so by now they have run: this returns at once (and
        // no held batch uses it, so no queue is handed back to keep it).
        self.usage.wait_or_idle(&self.device);
        let dev = &self.device.raw;
        for entry in &mut self.entries {
            let objects = entry
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let Some(o) = objects else { continue };
            for v in o.variants.values() {
                // SAFETY: no launch using the pipeline is pending (waited above) and no
                // kernel can record one (they hold this, which is being dropped).
                unsafe { dev.destroy_pipeline(v.pipeline, None) };
                crate::stats::LIVE_PIPELINES.fetch_sub(1, Ordering::SeqCst);
                if let Some(s) = v.shader {
                    destroy_shader_module(&self.device, s);
                }
            }
            // SAFETY: as above; the layouts go after the pipelines made with them.
            unsafe {
                dev.destroy_pipeline(o.base, None);
                dev.destroy_pipeline_layout(o.layout, None);
                if let Some(s) = o.set_layout {
                    dev.destroy_descriptor_set_layout(s, None);
                }
            }
            crate::stats::LIVE_PIPELINES.fetch_sub(1, Ordering::SeqCst);
        }
        destroy_shader_module(&self.device, self.shader);
        crate::stats::LIVE_MODULES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Kernels are the module's `GLCompute` entry points; SPIR-V for Vulkan has no globals the
/// host can reach (every name is `SymbolNotFound`).
impl hal::Program for VulkanModule {
    type Kernel = VulkanKernel;

    /// WGSL compiled by offload: every index checked, and launches refuse buffers below
    /// their bindings' minimum size (see the crate's "Bounds" rule).
    fn verified(&self) -> bool {
        self.bounds_checked()
    }

    fn kernel(&self, name: &str) -> Result<VulkanKernel> {
        kernel(self, name)
    }

    fn params(kernel: &VulkanKernel) -> &[ParamKind] {
        &kernel.params
    }

    /// What the shader declares (`LocalSize`, `LocalSizeId`'s defaults, the `WorkgroupSize`
    /// built-in).
    fn workgroup_size(kernel: &VulkanKernel) -> Option<[u32; 3]> {
        Some(kernel.workgroup_size())
    }

    /// The `GLCompute` entry points.
    fn kernels(&self) -> Vec<String> {
        self.entry_points().map(str::to_string).collect()
    }

    /// None: SPIR-V for Vulkan has no host-reachable globals.
    fn globals(&self) -> Vec<String> {
        Vec::new()
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        Err(no_global(name))
    }

    fn read_global(&self, name: &str, _: usize, _: &mut [u8]) -> Result<()> {
        Err(no_global(name))
    }

    fn write_global(&self, name: &str, _: usize, _: &[u8]) -> Result<()> {
        Err(no_global(name))
    }

    fn unload(self) -> Result<()> {
        unload(self)
    }
}

/// SPIR-V for Vulkan has no host-reachable globals: every name is missing.
fn no_global(name: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Vulkan,
        call: "",
        symbol: name.to_string(),
        hint: String::new(),
    }
}
