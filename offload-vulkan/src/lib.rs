//! # offload-vulkan
//!
//! The Vulkan compute backend of offload, built on [`ash`]. The Vulkan loader
//! (`libvulkan.so.1`) is opened at run time, never linked: this crate builds and starts on any
//! Linux machine, and a machine without Vulkan simply has no Vulkan platform.
//!
//! - **Platform** ([`VulkanPlatform`]): one `VkInstance` (Vulkan 1.3 where the loader has it,
//!   else the loader's version). A missing loader, a loader with no driver, or no physical
//!   device with a compute queue is `Error::DriverNotFound` (the runtime then lists the
//!   platform as unavailable, with that reason) — an opened platform always has devices.
//! - **Devices** ([`VulkanDevice`]): every physical device with a compute-capable queue
//!   family, in the driver's order, each with a `VkDevice` and one compute queue made when
//!   the platform opens. [`VulkanDevice::vulkan_info`] gives what Vulkan says about it
//!   ([`VulkanDeviceInfo`]: type, driver version, heaps, workgroup limits).
//! - **Memory** ([`VulkanBuffer`]): a `VkBuffer` (storage, uniform, transfer source and
//!   destination)
//!   with its own dedicated memory. `MemKind::Device` prefers device-local memory;
//!   `MemKind::Host` and `MemKind::Shared` take host-visible, host-coherent memory. Memory the
//!   host can map is mapped once and copied with `memcpy`; other memory is reached through a
//!   staging buffer and one-shot command buffers on the device's queue, waited for with a
//!   fence, so every copy is complete when its call returns. Sizes beyond the device's
//!   heaps, `maxMemoryAllocationSize` or `maxBufferSize` are `Error::OutOfMemory` without
//!   asking the driver.
//! - **Programs** ([`VulkanModule`]): SPIR-V modules (1.0 up to what the device's Vulkan
//!   version accepts: 1.3 on Vulkan 1.1, 1.5 on 1.2, 1.6 on 1.3). An image is validated and
//!   reflected by offload *before* the driver sees it: its size is whole words, the magic
//!   number is `0x07230203` in host byte order (a byte-swapped one is refused, naming it),
//!   version, id bound and every instruction's word count are consistent, the module is
//!   structurally sound, declares the `Shader` capability and has `GLCompute` entry points.
//!   Anything else is `Error::InvalidBinary` with the reason. Every `GLCompute` entry point
//!   is a kernel ([`VulkanKernel`]); a name that is none is `Error::SymbolNotFound`. `load`
//!   makes the `VkShaderModule`; the first `kernel` call for an entry point makes its
//!   descriptor set layout, pipeline layout and compute pipeline (through the device's
//!   `VkPipelineCache`). Unloading waits for the module's launches still on the device, then
//!   destroys the pipelines, layouts and shader module.
//! - **Programs from WGSL** (cargo feature `wgsl`): `Program::from_source(Source::wgsl(text))`
//!   is compiled in process by naga 28 — parsed, validated (every check, with push
//!   constants as the only optional capability) and written as SPIR-V (1.0 for a Vulkan
//!   1.0 device, else 1.3) with every bounds-check policy `Restrict` — then loaded like any
//!   image. [`Device::compiler`](hal::Device::compiler) reports `naga 28 (<settings>; build
//!   <fingerprint>)` and `spirv-1.x`, which the compile cache keys on. Parse and
//!   validation errors are `Error::Compile` with naga's log: the line and column, the
//!   source line, the problem underlined. Each option `NAME=VALUE` sets the
//!   pipeline-overridable constant `NAME` (`override NAME: u32;`, or `@id(n)` as `n`);
//!   any other option is `Error::Compile` naming the form. Without the feature the
//!   backend compiles nothing and `from_source` programs are `Error::Unsupported`. See
//!   [WGSL programs](#wgsl-programs).
//! - **Arguments**: a kernel's parameters are its buffers, then its push constants: one
//!   `Buffer` (storage) or `Uniform` parameter per binding, followed by one value per
//!   push-constant member, in declaration order, each placed at the `Offset` the shader
//!   declares (so naga's and glslang's layouts both work). The members are those of the
//!   push-constant block, unwrapped first while it has a single struct member (naga wraps
//!   every `var<immediate>` in such a block). A member of a scalar type (8-, 16-, 32- or
//!   64-bit integer, `f32`, `f64`) is `Typed` with its
//!   [`ScalarType`](offload_core::ScalarType) and takes an argument of exactly that type.
//!   A vector, matrix, array or struct member is one `ParamKind::Pod` parameter, named as
//!   WGSL names it (`vec2<f32>`, `mat4x4<f32>`, `array of u32`, `struct of f32`), with its
//!   size and, where all its scalars share one, its element type: it takes any
//!   `bytemuck::Pod` value of that size (`Arg::pod(&[x, y])`, `Arg::pod(&my_struct)`),
//!   and a value whose element type is known (a scalar, an array of scalars) must have
//!   that one. 16-bit floats are `Scalar(2)`. Buffer argument `i` binds (a whole buffer,
//!   or a range of one) to the `i`-th buffer binding of descriptor set 0 that the entry
//!   point uses, in increasing binding number (normally bindings `0..b`): storage buffers
//!   (`StorageBuffer` variables, or `Uniform` ones whose block is `BufferBlock`) as
//!   `STORAGE_BUFFER`, uniform buffers (`Uniform` `Block`s, WGSL `var<uniform>`) as
//!   `UNIFORM_BUFFER`, passed with `Arg::uniform(&buffer)`. So WGSL `@group(0)
//!   @binding(0) var<storage, read_write> buf: array<u32>;` with `var<immediate> args:
//!   Args;` where `struct Args { value: u32, n: u32 }` takes `[Buffer, Typed(U32),
//!   Typed(U32)]`. Entry points that use other resources (images, samplers, descriptor
//!   sets other than 0, arrays of buffers) are `Error::Unsupported` from `kernel`, naming
//!   what they use. The core checks every launch against these parameters
//!   (`Error::InvalidArgument`, naming the argument, what the shader declares and what was
//!   given); a buffer larger than the device's `maxStorageBufferRange` (a uniform one:
//!   `maxUniformBufferRange`) cannot be bound whole, a range must start at a multiple of
//!   `minStorageBufferOffsetAlignment` (`minUniformBufferOffsetAlignment`), and a uniform
//!   buffer must hold its block's size (in every module, not only WGSL ones): each is
//!   `InvalidArgument` too. See [Kernel rules](#kernel-rules).
//! - **Launch geometry**: `Dims::grid` is the `vkCmdDispatch` workgroup count and
//!   `Dims::block` the workgroup size, exactly as in CUDA: a launch runs `grid × block`
//!   threads, thread `i` of the x dimension being `global_invocation_id.x`. A launch whose
//!   block equals the size the shader declares uses the kernel's pipeline. Another block
//!   size gets a pipeline of its own, made at its first launch and kept until unload: by
//!   setting the specialisation constants where the shader declares its size with them (the
//!   `WorkgroupSize` built-in or `LocalSizeId` with `SpecId`s), or by a copy of the module
//!   with other `LocalSize` literals. Refused with `InvalidArgument` naming both sizes: a
//!   block of other dimensions than the declared size (see below), a
//!   size made of plain constants (only the declared size runs), a block larger than the
//!   declared `LocalSize` in a shader that uses workgroup memory (it may be sized for the
//!   declared size), and anything beyond the device's limits (`maxComputeWorkGroupSize`,
//!   `maxComputeWorkGroupInvocations`, `maxComputeWorkGroupCount`). A grid with a zero runs
//!   nothing. On lavapipe the real compile of a pipeline happens at its first dispatch.
//!
//!   **Why resize, and why not every size**: offload keeps one launch model on
//!   every backend, CUDA's — `Dims::block` *is* the workgroup size, and a launch runs
//!   exactly `grid × block` threads — so a launch never silently swaps in the shader's
//!   declared size (with the same grid it would run another number of threads). A resize
//!   is only safe where the shader's indexing still covers its data, so a block must use
//!   the same dimensions as the declared size: `y > 1` exactly where the shader's `y > 1`,
//!   and the same for `z` (`x` is free). A 1-D shader (`@workgroup_size(64)`) takes
//!   `Dims::for_num_elems`' 1-D blocks of 256; an 8×8 one takes 8×8 or 16×16 blocks, and
//!   `Dims::for_num_elems` (1-D blocks of 256, which would run its 2-D indexing on one row
//!   and return `Ok` with a wrong answer) is `InvalidArgument` naming both sizes and the
//!   `Dims` to write instead.
//! - **Queues** ([`VulkanQueue`]): a command pool on the device's compute queue; each launch
//!   records one command buffer (barrier against earlier work, bind, descriptor set, push
//!   constants, dispatch, barrier towards host and transfers) and submits it, signalling the
//!   device's timeline semaphore with the next value. `sync` waits for the queue's last
//!   value. Compute needs timeline semaphores (Vulkan 1.2); a device without them keeps its
//!   memory but answers `Error::Unsupported` for programs' queues.
//! - **Work in flight**: a launch stamps its module, its buffers and its queue with its
//!   timeline value. Every synchronous copy (`read`, `write`, `fill`, `copy`, `copy_within`)
//!   and `free` of a buffer first waits until the launches that used it have finished, and
//!   unloading a module waits for its launches: the device never sees memory change or
//!   disappear under a kernel, and the host never reads what a kernel has not finished
//!   writing.
//! - **Events** ([`VulkanEvent`]): a timeline value plus a `vkCmdWriteTimestamp` query
//!   (written when all earlier work on the queue has finished) where the compute queue has
//!   `timestampValidBits`; `elapsed` is the difference in ticks times `timestampPeriod`.
//!   Without timestamps an event's time is the host clock when offload first saw it
//!   complete. `wait_event` makes the queue's next submission wait on the timeline for the
//!   event's value.
//! - **Globals**: SPIR-V for Vulkan has no globals the host can reach (module-scope
//!   variables live in `Private` or `Workgroup` memory, per invocation or workgroup), so
//!   `Module::global`, `read_global` and `write_global` answer `Error::SymbolNotFound` for
//!   every name: pass data in buffers or push constants instead.
//! - **Shutdown**: [`Platform::deinit`](hal::Platform::deinit) waits for each device to be idle, then destroys, in
//!   order, its command pool and staging memory, its timeline semaphore and pipeline cache,
//!   the device, and last the instance (and closes the loader). A buffer (like a module,
//!   queue or event) keeps its device alive, so one that is still live at `deinit` is
//!   reported as leaked and its device is destroyed when it is freed, never before.
//! - **Validation**: with [`VulkanOptions::validation`] (default: the environment variable
//!   `OFFLOAD_VULKAN_VALIDATION=1`) the Khronos validation layer is enabled, with
//!   synchronisation validation, where it is installed; whenever the layer runs (also when
//!   enabled through `VK_INSTANCE_LAYERS`), a `VK_EXT_debug_utils` messenger counts its
//!   errors and warnings and prints the errors ([`validation_report`]).
//!
//! The backend counts what it does in process-wide counters ([`stats`]).
//!
//! ```
//! use offload_core::hal::{Device, Platform};
//! use offload_core::{Config, MemKind};
//! use offload_vulkan::VulkanPlatform;
//! let vk = match VulkanPlatform::open(&Config::default()) {
//!     Ok(vk) => vk,
//!     Err(offload_core::Error::DriverNotFound { reason, .. }) => {
//!         println!("no Vulkan here: {reason}");
//!         return Ok(());
//!     }
//!     Err(e) => return Err(e),
//! };
//! let dev = vk.devices().remove(0);
//! println!("{}", dev.info()?.name);
//! let mut buf = dev.alloc(4097, MemKind::Device)?;
//! dev.write(&mut buf, 1, &[42; 4096])?;
//! let mut out = [0u8; 4096];
//! dev.read(&buf, 1, &mut out)?;
//! assert_eq!(out, [42; 4096]);
//! dev.free(buf)?;
//! drop(dev);
//! vk.deinit()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! Running a kernel: a WGSL shader compiled to SPIR-V (here with naga), one storage buffer
//! and two `u32` push-constant members, so its parameters are
//! `[Buffer, Typed(U32), Typed(U32)]`:
//!
//! ```
//! use offload_core::hal::{Device, Platform, Program};
//! use offload_core::{Config, Dims, KernelArg, MemKind, ParamKind, ScalarType};
//! use offload_vulkan::{VulkanModule, VulkanPlatform};
//! let Ok(vk) = VulkanPlatform::open(&Config::default()) else { return Ok(()) };
//! let dev = vk.devices().remove(0);
//! let wgsl = "
//!     struct Args { value: u32, n: u32 }
//!     @group(0) @binding(0) var<storage, read_write> buf: array<u32>;
//!     var<immediate> args: Args;
//!     @compute @workgroup_size(64)
//!     fn fill(@builtin(global_invocation_id) id: vec3<u32>) {
//!         if id.x < args.n { buf[id.x] = args.value; }
//!     }";
//! let m = naga::front::wgsl::parse_str(wgsl).unwrap();
//! let flags = naga::valid::ValidationFlags::all();
//! let caps = naga::valid::Capabilities::all();
//! let info = naga::valid::Validator::new(flags, caps).validate(&m).unwrap();
//! let words = naga::back::spv::write_vec(&m, &info, &Default::default(), None).unwrap();
//! let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
//!
//! let module = dev.load(&image)?;
//! let fill = module.kernel("fill")?;
//! assert_eq!(VulkanModule::params(&fill), [ParamKind::Buffer, ParamKind::Typed(ScalarType::U32), ParamKind::Typed(ScalarType::U32)]);
//! let buf = dev.alloc(1000 * 4, MemKind::Device)?;
//! let queue = dev.queue()?;
//! let (value, n) = (7u32.to_ne_bytes(), 1000u32.to_ne_bytes());
//! // 16 workgroups of 64 threads: 1024 threads, of which the first 1000 write.
//! let dims = Dims::grid([16, 1, 1]).block([64, 1, 1]);
//! let args = [KernelArg::Buffer(&buf), KernelArg::Scalar(&value), KernelArg::Scalar(&n)];
//! // SAFETY: `fill` writes n u32s of its buffer, which holds them.
//! unsafe { dev.launch(&queue, &fill, &dims, &args)? };
//! let mut out = [0u8; 4];
//! dev.read(&buf, 999 * 4, &mut out)?; // waits for the launch, which writes the buffer
//! assert_eq!(u32::from_ne_bytes(out), 7);
//! dev.destroy_queue(queue)?;
//! dev.free(buf)?;
//! drop(fill);
//! module.unload()?;
//! drop(dev);
//! vk.deinit()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! # Kernel rules
//!
//! What a Vulkan program must look like and what a launch must pass, in one place (the
//! bullets above have the details):
//!
//! - **Kernels**: every `GLCompute` entry point of a SPIR-V module (1.0 up to the device's
//!   version) that declares the `Shader` capability.
//! - **Binding convention**: the parameters are the storage and uniform buffers of
//!   descriptor set 0, by increasing binding number, then the push-constant members, in
//!   declaration order (the block unwrapped while it is one struct member; a struct member
//!   is one parameter). Buffer argument `i` binds to the `i`-th such binding (a uniform one
//!   given as `Arg::uniform(&buffer)`, a storage one as `&buffer`: the other way round is
//!   `Error::InvalidArgument`); value argument `j` fills the `j`-th member, at the offset
//!   the shader declares. Anything else the entry point uses (images, samplers, other
//!   sets, arrays of buffers) makes it `Error::Unsupported`.
//! - **Typed push constants**: a scalar member is `ParamKind::Typed`: a `u32` member accepts
//!   only a `u32` argument (`Arg::scalar(&7u32)`), and an `i32` or `f32` of the same size is
//!   `Error::InvalidArgument`, as is any other [`ScalarType`](offload_core::ScalarType)
//!   mismatch. Vector, matrix, array and struct members are `ParamKind::Pod`: any
//!   `bytemuck::Pod` value of their size, padding included (`Arg::pod(&[1.0f32, 2.0])`
//!   for a `vec2<f32>`, a `#[repr(C)]` struct for a struct), whose element type, where
//!   both sides know it, is the member's (two `f32`s, or one `f64`, for a `vec2<f32>` are
//!   refused). `f16` members are `ParamKind::Scalar(2)`.
//! - **Workgroup vs block**: `Dims::grid` is the workgroup count (`vkCmdDispatch`) and
//!   `Dims::block` the workgroup size: a launch runs exactly `grid × block` invocations.
//!   The shader's declared size runs on the kernel's own pipeline; another block size gets
//!   its own pipeline at its first launch (through specialisation constants or a copy of
//!   the module with other `LocalSize` literals), if it uses the same dimensions (a 2-D
//!   shader takes no 1-D block, so `Dims::for_num_elems` suits 1-D shaders only). A
//!   shader whose size is plain constants runs only that size, and one that uses
//!   workgroup memory no block larger than it declares.
//! - **What offload checks**: at load, the module's structure (size in whole words, magic
//!   in host byte order, version, id bound, every instruction's word count, capabilities,
//!   entry points, bindings, push constants), with `Error::InvalidBinary` naming the
//!   problem; at `kernel`, the resources the entry point uses; at every launch, the number
//!   of arguments, each one's kind (buffer, uniform buffer or value) and type or size,
//!   that buffers are of the launch's device, ranges lie inside their buffers at
//!   `minStorageBufferOffsetAlignment` (`minUniformBufferOffsetAlignment`), no binding
//!   exceeds `maxStorageBufferRange` (`maxUniformBufferRange`), a uniform buffer holds its
//!   block, and the block uses the shader's dimensions and, with the grid, is within the
//!   device's limits (`Error::InvalidArgument`). Offload does
//!   not ship a full SPIR-V validator: a well-formed but type-incorrect SPIR-V image can
//!   still crash a driver. WGSL source closes that hole: naga type-checks it before any
//!   SPIR-V is written, so what reaches the driver is valid, type-correct SPIR-V.
//! - **Bounds** (WGSL source only): every index is clamped into its array (naga's
//!   `Restrict`: `min(i, len - 1)`, `len` from `OpArrayLength` for runtime arrays), and
//!   every launch checks that each buffer argument holds at least its binding's minimum
//!   size (the block's fixed members and one runtime-array element; `InvalidArgument`
//!   otherwise), so the array is never empty. Together these make every memory access of
//!   the kernel provably inside its buffer arguments: an index out of range reads or
//!   writes an element of the same buffer, never memory beyond it. The module is marked
//!   ([`VulkanModule::bounds_checked`]); SPIR-V from elsewhere gets no such guarantee.
//! - **Memory**: host copies and frees of a buffer first wait for the queued launches that
//!   use it.
//!
//! The type check, through the runtime (a `u32` push-constant member refuses an `i32`):
//!
//! ```standalone_crate
//! use offload_core::{Arg, Dims, Error, MemKind, Offload, ParamKind, Program, ScalarType};
//! let started: offload_core::Result<Offload> =
//!     Offload::builder().platform(offload_vulkan::platform()).start();
//! let Ok(rt) = started else { return Ok(()) }; // no Vulkan here
//! let dev = rt.devices()?.remove(0);
//! let wgsl = "
//!     struct Args { value: u32, n: u32 }
//!     @group(0) @binding(0) var<storage, read_write> buf: array<u32>;
//!     var<immediate> args: Args;
//!     @compute @workgroup_size(64)
//!     fn fill(@builtin(global_invocation_id) id: vec3<u32>) {
//!         if id.x < args.n { buf[id.x] = args.value; }
//!     }";
//! let m = naga::front::wgsl::parse_str(wgsl).unwrap();
//! let flags = naga::valid::ValidationFlags::all();
//! let caps = naga::valid::Capabilities::all();
//! let info = naga::valid::Validator::new(flags, caps).validate(&m).unwrap();
//! let words = naga::back::spv::write_vec(&m, &info, &Default::default(), None).unwrap();
//! let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
//!
//! let fill = Program::new(&image).load(&dev)?.kernel("fill")?;
//! let u32_param = ParamKind::Typed(ScalarType::U32);
//! assert_eq!(fill.params(), [ParamKind::Buffer, u32_param, u32_param]);
//! let buf = dev.alloc(256 * 4, MemKind::Device)?;
//! let queue = dev.queue()?;
//! let dims = Dims::grid([4, 1, 1]).block([64, 1, 1]);
//! // SAFETY: refused by the type check before anything is submitted.
//! let wrong = unsafe {
//!     queue.launch(&fill, dims, &[Arg::buffer(&buf), Arg::scalar(&7i32), Arg::scalar(&256u32)])
//! };
//! assert!(matches!(wrong, Err(Error::InvalidArgument { .. })));
//! // SAFETY: fill writes the first n = 256 u32s of its buffer, which holds 256.
//! unsafe {
//!     queue.launch(&fill, dims, &[Arg::buffer(&buf), Arg::scalar(&7u32), Arg::scalar(&256u32)])
//! }?;
//! queue.sync()?;
//! let mut last = [0u8; 4];
//! buf.read(255 * 4, &mut last)?;
//! assert_eq!(u32::from_ne_bytes(last), 7);
//! rt.shutdown()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! Vectors, structs and uniform buffers: a `vec2<f32>` push constant takes
//! `Arg::pod(&[x, y])`, a `var<uniform>` takes `Arg::uniform(&buffer)`, and a 2-D
//! workgroup takes 2-D blocks (`Dims::for_num_elems`' 1-D ones are refused, naming both
//! sizes):
//!
//! ```standalone_crate
//! use offload_core::{Arg, Dims, Error, Offload, ParamKind, Program, ScalarType, args};
//! let started: offload_core::Result<Offload> =
//!     Offload::builder().platform(offload_vulkan::platform()).start();
//! let Ok(rt) = started else { return Ok(()) }; // no Vulkan here
//! let dev = rt.devices()?.remove(0);
//! let wgsl = "
//!     struct Params { bias: f32, n: u32 }
//!     @group(0) @binding(0) var<storage, read_write> out: array<vec2<f32>>;
//!     @group(0) @binding(1) var<uniform> params: Params;
//!     var<immediate> scale: vec2<f32>;
//!     @compute @workgroup_size(8, 8)
//!     fn ramp(@builtin(global_invocation_id) id: vec3<u32>) {
//!         let i = id.y * 16u + id.x;
//!         if i < params.n { out[i] = scale * f32(i) + params.bias; }
//!     }";
//! let m = naga::front::wgsl::parse_str(wgsl).unwrap();
//! let flags = naga::valid::ValidationFlags::all();
//! let caps = naga::valid::Capabilities::all();
//! let info = naga::valid::Validator::new(flags, caps).validate(&m).unwrap();
//! let words = naga::back::spv::write_vec(&m, &info, &Default::default(), None).unwrap();
//! let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
//!
//! let ramp = Program::new(&image).load(&dev)?.kernel("ramp")?;
//! let vec2 = ParamKind::Pod { name: "vec2<f32>", size: 8, elem: Some(ScalarType::F32) };
//! assert_eq!(ramp.params(), [ParamKind::Buffer, ParamKind::Uniform, vec2]);
//! let out = dev.alloc_zeros::<[f32; 2]>(256)?;
//! let params = dev.upload(&[0.5f32.to_bits(), 256u32])?; // the uniform block's 8 bytes
//! let queue = dev.queue()?;
//! let args = args![&out, Arg::uniform(&params), Arg::pod(&[2.0f32, 3.0])];
//! // SAFETY: refused before anything runs: 1-D blocks for an 8×8 workgroup.
//! let wrong = unsafe { queue.launch(&ramp, Dims::for_num_elems(256), &args) };
//! assert!(matches!(&wrong, Err(Error::InvalidArgument { .. })));
//! assert!(wrong.unwrap_err().to_string().contains("[8, 8, 1]"));
//! // SAFETY: refused before anything runs: an f64 is 8 bytes, but not two f32s.
//! let wrong = unsafe { queue.launch(&ramp, Dims::grid([2, 2, 1]).block([8, 8, 1]), &args![&out, Arg::uniform(&params), 1.0f64]) };
//! assert!(wrong.unwrap_err().to_string().contains("argument 3 of `ramp` is a vec2<f32> (8 bytes); got an f64"));
//! // SAFETY: 16 × 16 threads write out[i] for i < n = 256, which `out` holds.
//! unsafe { queue.launch(&ramp, Dims::grid([2, 2, 1]).block([8, 8, 1]), &args)? };
//! assert_eq!(out.to_vec()?[255], [510.5, 765.5]);
//! rt.shutdown()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! # WGSL programs
//!
//! With the `wgsl` feature, a program can be WGSL source, compiled by naga once per
//! (program, compiler, target) when it is first loaded, and kept in the compile cache.
//! Push constants are `var<immediate>` (naga 28's spelling of `var<push_constant>`); the
//! binding convention is the one above. Errors carry naga's log with the line:
//!
//! ```standalone_crate
//! use offload_core::{Dims, Error, Offload, Program, Source, args};
//! let started: offload_core::Result<Offload> =
//!     Offload::builder().platform(offload_vulkan::platform()).start();
//! let Ok(rt) = started else { return Ok(()) }; // no Vulkan here
//! let dev = rt.devices()?.remove(0);
//! let source = Source::wgsl("
//!     struct Args { value: u32, n: u32 }
//!     @group(0) @binding(0) var<storage, read_write> buf: array<u32>;
//!     var<immediate> args: Args;
//!     @compute @workgroup_size(64)
//!     fn fill(@builtin(global_invocation_id) id: vec3<u32>) {
//!         if id.x < args.n { buf[id.x] = args.value; }
//!     }");
//! let fill = match Program::from_source(source).load(&dev) {
//!     Ok(module) => module.kernel("fill")?,
//!     Err(Error::Unsupported { .. }) => return Ok(()), // built without `wgsl`
//!     Err(e) => return Err(e),
//! };
//! let buf = dev.alloc_zeros::<u32>(256)?;
//! let queue = dev.queue()?;
//! // SAFETY: compiled from WGSL, `fill`'s accesses are clamped into its buffer.
//! unsafe { queue.launch(&fill, Dims::grid([4, 1, 1]).block([64, 1, 1]), &args![&buf, 7u32, 256u32])? };
//! assert_eq!(buf.to_vec()?, vec![7u32; 256]);
//!
//! let broken = Program::from_source(Source::wgsl("@compute @workgroup_size(1)\nfn f() {\n  let x: u32 = 1.5;\n}"));
//! match broken.load(&dev) {
//!     Err(Error::Compile { log, .. }) => assert!(log.contains("wgsl:3:"), "{log}"),
//!     Err(Error::Unsupported { .. }) => {} // built without `wgsl`
//!     other => panic!("{other:?}"),
//! }
//! rt.shutdown()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
#![warn(missing_docs)]

mod batch;
mod device;
mod error;
mod info;
mod instance;
mod memory;
mod program;
mod queue;
// Public only for the fuzz targets (`fuzz/`) and the image tests, which reach the parser
// of untrusted bytes as an ordinary dependency; not part of the API.
#[doc(hidden)]
pub mod spirv;
mod transfer;
mod usage;
mod validation;
mod wgsl;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use offload_core::hal::{self, CompilerId, HostFn, ImageFormat, KernelOf, Language};
use offload_core::{
    BackendKind, Config, DeviceInfo, Dims, Error, GlobalInfo, KernelArg, MemKind, ParamKind,
    PlatformEntry, Result,
};

use crate::device::DeviceContext;
use crate::error::{At, driver_not_found, map_vk_err};
use crate::instance::Instance;

pub use info::{MemoryHeap, VulkanDeviceInfo, VulkanDeviceType, VulkanVersion, vendor_name};
pub use memory::VulkanBuffer;
pub use program::{VulkanKernel, VulkanModule};
pub use queue::{VulkanEvent, VulkanQueue};
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

static OPENED: AtomicUsize = AtomicUsize::new(0);
static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);
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

/// The entry the facade registers for the `vulkan` feature: devices, memory, programs,
/// kernels, queues and events, with the default [`VulkanOptions`].
///
/// ```
/// assert_eq!(offload_vulkan::platform().kind(), offload_core::BackendKind::Vulkan);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::with_ipc::<VulkanPlatform>()
}

/// Whether `OFFLOAD_VULKAN_VALIDATION` asks for the validation layer.
fn validation_from_environment() -> bool {
    std::env::var("OFFLOAD_VULKAN_VALIDATION").is_ok_and(|v| {
        let v = v.trim();
        v == "1" || v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("yes")
    })
}

/// Choices made when a platform opens, beyond [`Config`]. The runtime opens platforms with
/// the defaults; [`VulkanPlatform::open_with`] takes others.
///
/// ```
/// let options = offload_vulkan::VulkanOptions::default().map_device_memory(false);
/// assert!(!options.maps_device_memory());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VulkanOptions {
    map_device_memory: bool,
    validation: bool,
}

impl Default for VulkanOptions {
    /// Mapped device memory; validation as `OFFLOAD_VULKAN_VALIDATION` says (off unless it
    /// is `1`, `true` or `yes`).
    fn default() -> Self {
        VulkanOptions {
            map_device_memory: true,
            validation: validation_from_environment(),
        }
    }
}

impl VulkanOptions {
    /// Whether `MemKind::Device` buffers that land in host-visible memory (all memory on
    /// lavapipe and integrated GPUs) are mapped and copied with `memcpy` (the default). With
    /// `false` they are always reached through staging and the queue, as on a discrete GPU:
    /// that path can then be tested on any machine.
    ///
    /// ```
    /// use offload_vulkan::VulkanOptions;
    /// assert!(VulkanOptions::default().maps_device_memory());
    /// assert!(!VulkanOptions::default().map_device_memory(false).maps_device_memory());
    /// ```
    pub fn map_device_memory(mut self, map: bool) -> Self {
        self.map_device_memory = map;
        self
    }

    /// The current setting of [`VulkanOptions::map_device_memory`].
    ///
    /// ```
    /// assert!(offload_vulkan::VulkanOptions::default().maps_device_memory());
    /// ```
    pub fn maps_device_memory(&self) -> bool {
        self.map_device_memory
    }

    /// Whether to enable the Khronos validation layer (`VK_LAYER_KHRONOS_validation`, with
    /// synchronisation validation) where it is installed, and count what it reports
    /// ([`validation_report`]). Slow: for tests and debugging. The default follows the
    /// environment variable `OFFLOAD_VULKAN_VALIDATION`.
    ///
    /// ```
    /// use offload_vulkan::VulkanOptions;
    /// assert!(VulkanOptions::default().validation(true).validates());
    /// ```
    pub fn validation(mut self, on: bool) -> Self {
        self.validation = on;
        self
    }

    /// The current setting of [`VulkanOptions::validation`].
    ///
    /// ```
    /// assert!(!offload_vulkan::VulkanOptions::default().validation(false).validates());
    /// ```
    pub fn validates(&self) -> bool {
        self.validation
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
    index: usize,
    context: Arc<DeviceContext>,
    info: Arc<VulkanDeviceInfo>,
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
    fn context(&self) -> Result<&Arc<DeviceContext>> {
        if self.context.deinitialised.load(Ordering::SeqCst) {
            return Err(Error::ShutDown {
                call: "",
                object: String::new(),
            });
        }
        Ok(&self.context)
    }
}

/// The live part of a platform; `None` once it is deinitialised.
struct Live {
    devices: Vec<Arc<DeviceContext>>,
    /// Kept for instance-level calls; every device holds it too.
    _instance: Arc<Instance>,
}

/// The Vulkan platform: one `VkInstance` and its compute-capable devices.
///
/// Opened by the runtime through [`platform`], or directly through
/// [`Platform::open`](hal::Platform::open) /
/// [`VulkanPlatform::open_with`]. Every method may be called from many threads at once;
/// [`Platform::deinit`](hal::Platform::deinit) destroys the devices and the instance once
/// the devices handed out are dropped (dropping an open platform does too).
///
/// ```
/// use offload_core::{Config, Error, hal::Platform};
/// use offload_vulkan::VulkanPlatform;
/// match VulkanPlatform::open(&Config::default()) {
///     Ok(vk) => {
///         println!("{}: {} device(s)", vk.name(), vk.devices().len());
///         vk.deinit()?;
///     }
///     Err(Error::DriverNotFound { reason, .. }) => println!("no Vulkan: {reason}"),
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct VulkanPlatform {
    name: String,
    validating: bool,
    infos: Vec<Arc<VulkanDeviceInfo>>,
    /// Buffers of this platform not yet freed (shared with the devices, which count).
    live_buffers: Arc<AtomicUsize>,
    live: RwLock<Option<Live>>,
}

impl std::fmt::Debug for VulkanPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanPlatform")
            .field("name", &self.name)
            .field("devices", &self.infos.len())
            .field("live_allocations", &self.live_allocations())
            .finish()
    }
}

impl VulkanPlatform {
    /// Opens the platform with `options` (the runtime uses
    /// [`Platform::open`](hal::Platform::open), which takes the defaults).
    ///
    /// ```
    /// use offload_core::hal::{Device, Platform};
    /// use offload_core::{Config, MemKind};
    /// use offload_vulkan::{VulkanOptions, VulkanPlatform};
    /// let options = VulkanOptions::default().map_device_memory(false);
    /// let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else { return Ok(()) };
    /// let dev = vk.devices().remove(0);
    /// let buf = dev.alloc(16, MemKind::Device)?;
    /// assert!(!buf.is_mapped());
    /// dev.free(buf)?;
    /// drop(dev);
    /// vk.deinit()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn open_with(_config: &Config, options: VulkanOptions) -> Result<Self> {
        let instance = Arc::new(Instance::open(options.validation)?);
        let validating = instance.validating;
        // SAFETY: the instance is live.
        let physical = unsafe { instance.raw.enumerate_physical_devices() }
            .map_err(|e| map_vk_err(At::new("Offload::init", "vkEnumeratePhysicalDevices"), e))?;
        let found = physical.len();
        let live_buffers = Arc::new(AtomicUsize::new(0));
        let mut infos = Vec::new();
        let mut devices = Vec::new();
        for p in physical {
            // SAFETY: `p` was just enumerated from the live instance, made with `api`.
            let Some(info) = (unsafe { info::query(&instance.raw, instance.api, p) }) else {
                continue;
            };
            // A device that fails to open fails the platform: the devices opened before it
            // are destroyed as `devices` drops (each with its own queue state).
            let context = DeviceContext::new(
                instance.clone(),
                p,
                &info,
                live_buffers.clone(),
                options.map_device_memory,
            )?;
            devices.push(Arc::new(context));
            infos.push(Arc::new(info));
        }
        if devices.is_empty() {
            return Err(driver_not_found(format!(
                "the Vulkan loader found {found} physical device(s), none with a compute queue"
            )));
        }
        let mut drivers: Vec<&str> = Vec::new();
        for info in &infos {
            let driver = if info.driver_name.is_empty() {
                info.name.as_str()
            } else {
                info.driver_name.as_str()
            };
            if !drivers.contains(&driver) {
                drivers.push(driver);
            }
        }
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(VulkanPlatform {
            name: format!("vulkan ({})", drivers.join(", ")),
            validating,
            infos,
            live_buffers,
            live: RwLock::new(Some(Live {
                devices,
                _instance: instance,
            })),
        })
    }

    /// Buffers of this platform not yet freed.
    ///
    /// ```
    /// # use offload_core::{Config, hal::Platform};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// assert_eq!(vk.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.live_buffers.load(Ordering::SeqCst)
    }

    /// Whether the Khronos validation layer runs on this platform's instance and its
    /// messages are counted ([`validation_report`]).
    ///
    /// ```
    /// # use offload_core::{Config, hal::Platform};
    /// use offload_vulkan::{VulkanOptions, VulkanPlatform};
    /// let options = VulkanOptions::default().validation(false);
    /// # let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else { return Ok(()) };
    /// println!("validating: {}", vk.validating());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn validating(&self) -> bool {
        self.validating
    }

    fn read_live(&self) -> std::sync::RwLockReadGuard<'_, Option<Live>> {
        self.live.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl hal::Platform for VulkanPlatform {
    type Device = VulkanDevice;
    const KIND: BackendKind = BackendKind::Vulkan;

    fn open(config: &Config) -> Result<Self> {
        VulkanPlatform::open_with(config, VulkanOptions::default())
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<VulkanDevice> {
        let live = self.read_live();
        let Some(live) = live.as_ref() else {
            return Vec::new();
        };
        live.devices
            .iter()
            .zip(&self.infos)
            .enumerate()
            .map(|(index, (context, info))| VulkanDevice {
                index,
                context: context.clone(),
                info: info.clone(),
            })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        let Some(live) = self
            .live
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return Ok(()); // already deinitialised
        };
        DEINITIALISED.fetch_add(1, Ordering::SeqCst);
        let mut errors = Vec::new();
        for device in &live.devices {
            device.deinitialised.store(true, Ordering::SeqCst);
            if let Err(e) = device.wait_idle("Offload::shutdown") {
                errors.push(e);
            }
        }
        // Dropping the last reference to each device destroys its command pool, staging
        // memory and `VkDevice`; the last device takes the instance and the loader with it.
        // A device that a leaked buffer (or a device handle) still holds stays alive until
        // that is dropped.
        drop(live);
        let leaked = self.live_allocations();
        if leaked > 0 {
            errors.push(Error::Driver {
                backend: BackendKind::Vulkan,
                call: "Offload::shutdown",
                code: leaked as i64,
                message: format!(
                    "{leaked} Vulkan allocations were still live at deinit (their devices stay \
                     alive until they are freed)"
                ),
            });
        }
        Error::join(errors)
    }

    /// SPIR-V in this machine's byte order (a swapped module is refused by `validate`).
    fn may_run(image: &[u8]) -> bool {
        ImageFormat::of(image) == ImageFormat::Spirv
    }
}

/// Memory, programs, queues and events: see the crate docs for the argument convention
/// and the launch geometry.
impl hal::Device for VulkanDevice {
    type Buffer = VulkanBuffer;
    type Program = VulkanModule;
    type Queue = VulkanQueue;
    type Event = VulkanEvent;

    fn info(&self) -> Result<DeviceInfo> {
        let v = &self.info;
        let mut info = DeviceInfo::new(
            v.name.clone(),
            v.vendor.clone(),
            BackendKind::Vulkan,
            v.device_local_memory,
            v.compute_units,
        );
        info.vendor_id = Some(v.vendor_id);
        info.driver_version = Some(if v.driver_info.is_empty() {
            v.driver_version_text.clone()
        } else {
            format!("{} ({})", v.driver_info, v.driver_version_text)
        });
        info.max_block_threads = Some(v.max_workgroup_invocations);
        info.max_block = Some(v.max_workgroup_size);
        info.max_grid = Some(v.max_workgroup_count);
        info.max_alloc = Some(v.max_allocation_size.min(v.max_buffer_size));
        info.shared_memory = Some(u64::from(v.max_shared_memory));
        // Vulkan reports neither an address width nor a clock.
        Ok(info)
    }

    fn alloc(&self, size: usize, kind: MemKind) -> Result<VulkanBuffer> {
        if size == 0 {
            return Err(Error::invalid(
                "Device::alloc",
                "zero-size allocation on a Vulkan device",
            ));
        }
        VulkanBuffer::new(self.context()?.clone(), size, kind, false)
    }

    fn free(&self, buffer: VulkanBuffer) -> Result<()> {
        // Queued work that uses it may still run: submit it and wait, then destroy
        // (dropping waits too, but could only ignore an error).
        let waited = buffer.wait_unused("Buffer::free");
        drop(buffer);
        waited
    }

    fn read(&self, buffer: &VulkanBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.read(offset, dst)
    }

    fn write(&self, buffer: &mut VulkanBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.write(offset, src)
    }

    fn fill(&self, buffer: &mut VulkanBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.fill(offset, len, value)
    }

    fn copy(
        &self,
        src: &VulkanBuffer,
        src_offset: usize,
        dst: &mut VulkanBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        dst.copy_from(dst_offset, src, src_offset, len)
    }

    fn copy_within(
        &self,
        buffer: &mut VulkanBuffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        buffer.copy_within(src_offset, dst_offset, len)
    }

    /// Host-visible memory (always `MemKind::Host`/`Shared`; `Device` where the device's
    /// memory is host-visible, as on lavapipe), not shared with other processes.
    fn with_mapped(&self, buffer: &mut VulkanBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(buffer.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<VulkanModule> {
        program::load(self.context()?.clone(), image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(self.context()?, image)
    }

    /// WGSL with the `wgsl` feature: `naga 28 (…)` targeting `spirv-1.0` on a Vulkan 1.0
    /// device and `spirv-1.3` on later ones. Nothing else (and nothing without the
    /// feature).
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        Ok(match language {
            Language::Wgsl => wgsl::compiler(self.context.api),
            _ => None,
        })
    }

    /// WGSL to bounds-checked SPIR-V by naga (see the crate docs, "Programs from WGSL").
    #[cfg(feature = "wgsl")]
    fn compile(&self, source: &hal::Source) -> Result<Vec<u8>> {
        wgsl::compile(source, self.context.api)
    }

    fn queue(&self) -> Result<VulkanQueue> {
        VulkanQueue::new(self.context()?.clone())
    }

    fn destroy_queue(&self, queue: VulkanQueue) -> Result<()> {
        let synced = queue.sync();
        drop(queue);
        synced
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    unsafe fn launch(
        &self,
        queue: &VulkanQueue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, VulkanBuffer>],
    ) -> Result<()> {
        // The queue checks the kernel and the buffers against its own device.
        if !Arc::ptr_eq(queue.device(), &self.context) {
            return Err(Error::invalid(
                "Queue::launch",
                "the queue belongs to another Vulkan device",
            ));
        }
        queue.launch(kernel, dims, args)
    }

    fn enqueue_write(
        &self,
        queue: &VulkanQueue,
        buffer: &VulkanBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        queue.enqueue_write(buffer, offset, &data)
    }

    fn enqueue_fill(
        &self,
        queue: &VulkanQueue,
        buffer: &VulkanBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        queue.enqueue_fill(buffer, offset, len, pattern)
    }

    fn enqueue_copy(
        &self,
        queue: &VulkanQueue,
        src: &VulkanBuffer,
        src_offset: usize,
        dst: &VulkanBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        queue.enqueue_copy(src, src_offset, dst, dst_offset, len)
    }

    /// Submits and waits for the queue's work, then runs `f` on the calling thread (a
    /// `VkQueue` has no host callbacks): the order holds, but the call blocks.
    fn enqueue_host_fn(&self, queue: &VulkanQueue, f: HostFn) -> Result<()> {
        queue.enqueue_host_fn(f)
    }

    fn sync(&self, queue: &VulkanQueue) -> Result<()> {
        queue.sync()
    }

    fn is_idle(&self, queue: &VulkanQueue) -> Result<bool> {
        queue.is_idle()
    }

    fn is_complete(&self, event: &VulkanEvent) -> Result<bool> {
        queue::is_complete(event)
    }

    fn record(&self, queue: &VulkanQueue) -> Result<VulkanEvent> {
        queue.record()
    }

    fn wait_event(&self, queue: &VulkanQueue, event: &VulkanEvent) -> Result<()> {
        queue.wait_event(event)
    }

    fn sync_event(&self, event: &VulkanEvent) -> Result<()> {
        queue::sync_event(event)
    }

    fn elapsed(&self, start: &VulkanEvent, end: &VulkanEvent) -> Result<Duration> {
        queue::elapsed(start, end)
    }

    fn destroy_event(&self, event: VulkanEvent) -> Result<()> {
        queue::destroy_event(event)
    }
}

/// Memory shared with other processes as `OPAQUE_FD`s (`VK_KHR_external_memory_fd`); a
/// device without the extension answers `Error::Unsupported`.
impl hal::Ipc for VulkanDevice {
    /// `deviceUUID`.
    fn uuid(&self) -> [u8; 16] {
        self.info.device_uuid
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<VulkanBuffer> {
        if size == 0 {
            return Err(Error::invalid(
                "Device::alloc_exportable",
                "zero-size allocation on a Vulkan device",
            ));
        }
        VulkanBuffer::new(self.context()?.clone(), size, kind, true)
    }

    fn export(&self, buffer: &VulkanBuffer) -> Result<hal::Exported> {
        buffer.export()
    }

    fn import(&self, exported: hal::Exported) -> Result<VulkanBuffer> {
        VulkanBuffer::import(self.context()?.clone(), exported)
    }
}

/// Kernels are the module's `GLCompute` entry points; SPIR-V for Vulkan has no globals the
/// host can reach (every name is `SymbolNotFound`).
impl hal::Program for VulkanModule {
    type Kernel = VulkanKernel;

    /// WGSL compiled by offload: every index clamped, and launches refuse buffers below
    /// their bindings' minimum size (see the crate's "Bounds" rule).
    fn verified(&self) -> bool {
        self.bounds_checked()
    }

    fn kernel(&self, name: &str) -> Result<VulkanKernel> {
        program::kernel(self, name)
    }

    fn params(kernel: &VulkanKernel) -> &[ParamKind] {
        &kernel.params
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
        Err(no_global("Module::global", name))
    }

    fn read_global(&self, name: &str, _: usize, _: &mut [u8]) -> Result<()> {
        Err(no_global("Module::read_global", name))
    }

    fn write_global(&self, name: &str, _: usize, _: &[u8]) -> Result<()> {
        Err(no_global("Module::write_global", name))
    }

    fn unload(self) -> Result<()> {
        program::unload(self)
    }
}

/// SPIR-V for Vulkan has no host-reachable globals: every name is missing.
fn no_global(call: &'static str, name: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Vulkan,
        call,
        symbol: name.to_string(),
        hint: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk;
    use offload_core::hal::Platform;

    /// The messenger really counts: a deliberate invalid call is reported. (Skipped where
    /// there is no driver or no validation layer; the integration tests fail in CI then.)
    #[test]
    fn the_messenger_counts_validation_errors() {
        let options = VulkanOptions::default().validation(true);
        let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else {
            return;
        };
        if !vk.validating() {
            return;
        }
        let before = validation_report().errors;
        {
            let live = vk.read_live();
            let Some(dev) = live.as_ref().and_then(|l| l.devices.first()) else {
                panic!("an open platform has a device");
            };
            // A zero-size buffer violates VUID-VkBufferCreateInfo-size-00912.
            let info = vk::BufferCreateInfo::default()
                .size(0)
                .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
            // SAFETY: the device is live. The call is invalid on purpose (a zero size); the
            // validation layer reports it before the driver, which (lavapipe, and every
            // driver we know) still makes or refuses an empty buffer without touching memory.
            if let Ok(b) = unsafe { dev.raw.create_buffer(&info, None) } {
                // SAFETY: made above, bound to nothing, used by nothing.
                unsafe { dev.raw.destroy_buffer(b, None) };
            }
        }
        let after = validation_report();
        assert!(after.errors > before, "{after:?}");
        assert!(
            after.messages.iter().any(|m| m.contains("00912")),
            "{:?}",
            after.messages
        );
        vk.deinit().unwrap();
    }
}
