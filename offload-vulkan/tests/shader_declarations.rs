//! Kernels take what shaders declare, on a real Vulkan device (lavapipe in CI):
//!
//! - a 2-D `@workgroup_size(8, 8)` shader launched with `Dims::for_num_elems` (1-D blocks
//!   of 256) is refused with both sizes named, instead of running its 2-D indexing on 1-D
//!   blocks and returning `Ok` with a wrong answer; its declared size, and a resize that
//!   keeps its dimensions, give the right answer;
//! - vector, matrix and struct push-constant members take `Arg::pod` values of their
//!   layout and see them, and every mismatch (two `f32`s for a `vec2<f32>`, an `f64` of the
//!   same size, a value of the wrong size or element type) is refused naming the argument;
//! - `var<uniform>` binds a buffer passed with `Arg::uniform`, checked against the
//!   device's uniform-buffer limits and the block's size;
//! - WGSL with `var<push_constant>` gets a compile error that names `var<immediate>`.
//!
//! Without a Vulkan driver the tests are skipped with a printed reason, except with
//! `CI=true`, where that is a failure. Where the Khronos validation layer is installed
//! (required in CI) the platform runs under it and the tests assert it reported nothing.

mod common;

use offload_core::bytemuck::{Pod, Zeroable};
use offload_core::{
    Arg, Device, Dims, Error, Kernel, NoPlatforms, Offload, ParamKind, PlatformEntry, Program,
    Ready, ScalarType, args,
};

use common::{Validated, assert_no_validation_errors, require_validation, serial, spirv_of};
use offload_core::hal::Platform as _;

type Runtime = Offload<Ready, NoPlatforms>;

/// A runtime with only the (validated) Vulkan platform and its first device; `None` (a
/// printed skip) without a Vulkan driver, a failure then in CI.
fn start(test: &str) -> Option<(Runtime, Device)> {
    let probe = common::open_with(
        test,
        offload_vulkan::VulkanOptions::default().validation(true),
    )?;
    let validating = probe.validating();
    probe.deinit().unwrap();
    require_validation(test, validating);
    let rt = Offload::builder()
        .platform(PlatformEntry::with_ipc::<Validated>())
        .compile_cache(None)
        .start()
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let dev = rt.devices().unwrap().remove(0);
    Some((rt, dev))
}

/// Kernel `name` of `wgsl`, compiled to SPIR-V 1.3 by naga here (so the tests need no
/// `wgsl` feature).
fn kernel(dev: &Device, wgsl: &str, name: &str) -> Kernel {
    Program::new(spirv_of(wgsl, (1, 3)))
        .label(name)
        .load(dev)
        .unwrap()
        .kernel(name)
        .unwrap()
}

/// The `InvalidArgument` text of a refused launch.
fn refused(result: offload_core::Result<()>) -> String {
    match result {
        Err(Error::InvalidArgument { reason, .. }) => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Asserts `text` contains every one of `parts`.
fn says(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing in: {text}");
    }
}

/// `out[y * 64 + x] = y * 1000 + x + 1` over a 64×64 grid, in 8×8 workgroups.
const GRID_2D: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(8, 8)
fn grid2d(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < 64u && id.y < 64u {
        out[id.y * 64u + id.x] = id.y * 1000u + id.x + 1u;
    }
}
";

/// `out[i] = 2 * i + 1` for i < n, in 1-D workgroups of 64.
const LINE_1D: &str = "
struct Args { n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
var<immediate> args: Args;
@compute @workgroup_size(64)
fn line1d(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < args.n { out[id.x] = 2u * id.x + 1u; }
}
";

#[test]
fn a_2d_workgroup_refuses_1d_blocks_and_runs_its_declared_size() {
    let _serial = serial();
    let test = "a_2d_workgroup_refuses_1d_blocks_and_runs_its_declared_size";
    let Some((rt, dev)) = start(test) else {
        return;
    };
    let grid2d = kernel(&dev, GRID_2D, "grid2d");
    let out = dev.alloc_zeros::<u32>(4096).unwrap();
    let queue = dev.queue().unwrap();
    let expected: Vec<u32> = (0..64u32)
        .flat_map(|y| (0..64u32).map(move |x| y * 1000 + x + 1))
        .collect();

    // 16 blocks of [256, 1, 1] cover 4096 threads, but only row 0 of the 64×64 grid:
    // refused, naming both sizes, before anything runs.
    // SAFETY: refused by the workgroup check before anything is submitted.
    let e = refused(unsafe { queue.launch(&grid2d, Dims::for_num_elems(4096), &args![&out]) });
    says(
        &e,
        &[
            "`grid2d`",
            "workgroup size [8, 8, 1]",
            "blocks of [256, 1, 1]",
            "1-D blocks for a 2-D workgroup",
            "the declared size, [8, 8, 1]",
            "y > 1, z = 1",
        ],
    );
    // Said in sizes, not in one API's syntax: a C caller reaches this refusal too.
    assert!(!e.contains("Dims::"), "{e}");
    // The reverse: a 2-D block for a 1-D shader.
    let line1d = kernel(&dev, LINE_1D, "line1d");
    let dims = Dims::grid([1, 1, 1]).block([8, 8, 1]);
    // SAFETY: refused by the workgroup check before anything is submitted.
    let e = refused(unsafe { queue.launch(&line1d, dims, &args![&out, 64u32]) });
    says(
        &e,
        &["[64, 1, 1]", "[8, 8, 1]", "2-D blocks for a 1-D workgroup"],
    );
    // Said in sizes, not in one API's syntax: a C caller reaches this refusal too.
    assert!(!e.contains("Dims::"), "{e}");
    queue.sync().unwrap();
    assert!(out.to_vec().unwrap().iter().all(|&v| v == 0), "nothing ran");

    // The declared size, and a resize that keeps both dimensions: the right answer.
    for (grid, block) in [([8, 8, 1], [8, 8, 1]), ([4, 4, 1], [16, 16, 1])] {
        queue.fill(out.as_bytes(), 0, 4096 * 4, &[0]).unwrap();
        // SAFETY: grid2d writes out[y * 64 + x] for x, y < 64: inside its 4096 u32s.
        unsafe { queue.launch(&grid2d, Dims::grid(grid).block(block), &args![&out]) }.unwrap();
        assert_eq!(out.to_vec().unwrap(), expected, "blocks of {block:?}");
    }
    // A 1-D shader takes `Dims::for_num_elems`' blocks of 256 (a pipeline of that size).
    // SAFETY: line1d writes its first n = 4096 u32s, which `out` holds.
    unsafe { queue.launch(&line1d, Dims::for_num_elems(4096), &args![&out, 4096u32]) }.unwrap();
    let line: Vec<u32> = (0..4096).map(|i| 2 * i + 1).collect();
    assert_eq!(out.to_vec().unwrap(), line);
    drop(queue);
    rt.shutdown().unwrap();
    assert_no_validation_errors(test);
}

/// A struct push-constant member as Rust lays it out: `vec3<f32>` then `f32`, 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[bytemuck(crate = "offload_core::bytemuck")]
#[repr(C)]
struct Light {
    color: [f32; 3],
    intensity: f32,
}

/// Two floats: the right element type, the wrong size for `Light`.
#[derive(Clone, Copy, Pod, Zeroable)]
#[bytemuck(crate = "offload_core::bytemuck")]
#[repr(C)]
struct Pair {
    a: f32,
    b: f32,
}

/// Each thread i < n writes what it sees of the push constants to out[i * 8 ..]:
/// offset.x, offset.y, color.x, color.y, color.z, intensity, m[1][0], f32(n).
const SHADE: &str = "
struct Light { color: vec3<f32>, intensity: f32 }
struct Args { offset: vec2<f32>, light: Light, m: mat2x2<f32>, n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
var<immediate> args: Args;
@compute @workgroup_size(64)
fn shade(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < args.n {
        out[i * 8u + 0u] = args.offset.x;
        out[i * 8u + 1u] = args.offset.y;
        out[i * 8u + 2u] = args.light.color.x;
        out[i * 8u + 3u] = args.light.color.y;
        out[i * 8u + 4u] = args.light.color.z;
        out[i * 8u + 5u] = args.light.intensity;
        out[i * 8u + 6u] = args.m[1].x;
        out[i * 8u + 7u] = f32(args.n);
    }
}
";

#[test]
fn vector_matrix_and_struct_push_constants_take_pod_values() {
    let _serial = serial();
    let test = "vector_matrix_and_struct_push_constants_take_pod_values";
    let Some((rt, dev)) = start(test) else {
        return;
    };
    let shade = kernel(&dev, SHADE, "shade");
    let f32s = Some(ScalarType::F32);
    assert_eq!(
        shade.params(),
        [
            ParamKind::Buffer,
            ParamKind::Pod {
                name: "vec2<f32>",
                size: 8,
                elem: f32s
            },
            ParamKind::Pod {
                name: "struct of f32",
                size: 16,
                elem: f32s
            },
            ParamKind::Pod {
                name: "mat2x2<f32>",
                size: 16,
                elem: f32s
            },
            ParamKind::Typed(ScalarType::U32),
        ]
    );
    const N: u32 = 100;
    let out = dev.alloc_zeros::<f32>(N as usize * 8).unwrap();
    let queue = dev.queue().unwrap();
    let dims = Dims::grid([2, 1, 1]).block([64, 1, 1]);
    let offset = [1.5f32, -2.0];
    let light = Light {
        color: [0.25, 0.5, 0.75],
        intensity: 3.0,
    };
    let m = [[1.0f32, 2.0], [3.0, 4.0]]; // column 1 is (3, 4)
    // SAFETY: shade writes out[i * 8 .. i * 8 + 8] for i < n = N: inside its N * 8 f32s.
    unsafe {
        queue.launch(
            &shade,
            dims,
            &args![&out, Arg::pod(&offset), Arg::pod(&light), Arg::pod(&m), N],
        )
    }
    .unwrap();
    let seen = out.to_vec().unwrap();
    for i in 0..N as usize {
        assert_eq!(
            seen[i * 8..i * 8 + 8],
            [1.5, -2.0, 0.25, 0.5, 0.75, 3.0, 3.0, N as f32],
            "thread {i}"
        );
    }

    // Each mismatch is refused before anything runs, naming the argument, what the
    // shader declares and what was given.
    let launch = |given: &[Arg<'_>]| {
        // SAFETY: every launch through this is refused by the argument checks before
        // anything is submitted.
        refused(unsafe { queue.launch(&shade, dims, given) })
    };
    // Two f32s for the vec2: one argument too many, and the hint says how to pass it.
    says(
        &launch(&args![
            &out,
            1.5f32,
            -2.0f32,
            Arg::pod(&light),
            Arg::pod(&m),
            N
        ]),
        &[
            "`shade` takes 5 arguments",
            "a vec2<f32> (8 bytes)",
            "6 given",
            "`Arg::pod(&[x, y])`",
        ],
    );
    // One f64: 8 bytes, but not f32s (it used to pass and give garbage).
    says(
        &launch(&args![&out, 1.5f64, Arg::pod(&light), Arg::pod(&m), N]),
        &[
            "argument 2 of `shade` is a vec2<f32> (8 bytes)",
            "got an f64 (1.5f64)",
        ],
    );
    // The right size, the wrong element type.
    says(
        &launch(&args![
            &out,
            Arg::pod(&[1u32, 2]),
            Arg::pod(&light),
            Arg::pod(&m),
            N
        ]),
        &[
            "argument 2 of `shade` is a vec2<f32> (8 bytes)",
            "got `[u32; 2]` (8 bytes)",
        ],
    );
    // The wrong size: a vec3 for the vec2.
    says(
        &launch(&args![
            &out,
            Arg::pod(&[1.0f32, 2.0, 3.0]),
            Arg::pod(&light),
            Arg::pod(&m),
            N
        ]),
        &["argument 2 of `shade`", "got `[f32; 3]` (12 bytes)"],
    );
    // A struct of the wrong size for the struct member (its own type is named).
    let pair = Pair { a: 1.0, b: 2.0 };
    says(
        &launch(&args![
            &out,
            Arg::pod(&offset),
            Arg::pod(&pair),
            Arg::pod(&m),
            N
        ]),
        &[
            "argument 3 of `shade` is a struct of f32 (16 bytes)",
            "Pair` (8 bytes)",
        ],
    );
    // A matrix given as a vector of the wrong size.
    says(
        &launch(&args![
            &out,
            Arg::pod(&offset),
            Arg::pod(&light),
            Arg::pod(&offset),
            N
        ]),
        &[
            "argument 4 of `shade` is a mat2x2<f32> (16 bytes)",
            "got `[f32; 2]` (8 bytes)",
        ],
    );
    // A Pod value for the typed u32 member must be a u32 too.
    says(
        &launch(&args![
            &out,
            Arg::pod(&offset),
            Arg::pod(&light),
            Arg::pod(&m),
            Arg::pod(&1.0f32)
        ]),
        &["argument 5 of `shade` is a u32", "got `f32` (4 bytes)"],
    );
    // A buffer for a push constant, and a push constant for the buffer.
    says(
        &launch(&args![&out, &out, Arg::pod(&light), Arg::pod(&m), N]),
        &["argument 2 of `shade` is a vec2<f32> (8 bytes); got"],
    );
    says(
        &launch(&args![
            Arg::pod(&offset),
            Arg::pod(&offset),
            Arg::pod(&light),
            Arg::pod(&m),
            N
        ]),
        &["argument 1 of `shade` is a buffer; got `[f32; 2]` (8 bytes)"],
    );
    assert!(out.to_vec().unwrap() == seen, "no refused launch ran");
    drop(queue);
    rt.shutdown().unwrap();
    assert_no_validation_errors(test);
}

/// A uniform block as Rust lays it out (std140: 16 bytes).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[bytemuck(crate = "offload_core::bytemuck")]
#[repr(C)]
struct Affine {
    scale: f32,
    bias: f32,
    n: u32,
    _pad: u32,
}

/// `out[i] = input[i] * p.scale + p.bias` for i < p.n, with `p` a uniform buffer between
/// two storage buffers.
const AFFINE: &str = "
struct Affine { scale: f32, bias: f32, n: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<uniform> p: Affine;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn affine(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < p.n { out[id.x] = input[id.x] * p.scale + p.bias; }
}
";

#[test]
fn a_uniform_buffer_binds_and_is_checked_against_the_device_limits() {
    let _serial = serial();
    let test = "a_uniform_buffer_binds_and_is_checked_against_the_device_limits";
    let Some((rt, dev)) = start(test) else {
        return;
    };
    let affine = kernel(&dev, AFFINE, "affine");
    assert_eq!(
        affine.params(),
        [ParamKind::Buffer, ParamKind::Uniform, ParamKind::Buffer]
    );
    const N: u32 = 1000;
    let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let input = dev.upload(&xs).unwrap();
    let out = dev.alloc_zeros::<f32>(N as usize).unwrap();
    let params = dev
        .upload(&[Affine {
            scale: 2.0,
            bias: 0.5,
            n: N,
            _pad: 0,
        }])
        .unwrap();
    let queue = dev.queue().unwrap();
    let dims = Dims::grid([N.div_ceil(64), 1, 1]).block([64, 1, 1]);
    // SAFETY: affine reads and writes the first p.n = N f32s of buffers holding N, and its
    // 16-byte uniform block from the 16-byte `params`.
    unsafe { queue.launch(&affine, dims, &args![&input, Arg::uniform(&params), &out]) }.unwrap();
    let expected: Vec<f32> = xs.iter().map(|x| x * 2.0 + 0.5).collect();
    assert_eq!(out.to_vec().unwrap(), expected);

    // A new value in the same buffer is seen by the next launch.
    params
        .write(
            0,
            &[Affine {
                scale: -1.0,
                bias: 0.0,
                n: N,
                _pad: 0,
            }],
        )
        .unwrap();
    // SAFETY: as above.
    unsafe { queue.launch(&affine, dims, &args![&input, Arg::uniform(&params), &out]) }.unwrap();
    let negated: Vec<f32> = xs.iter().map(|x| -x).collect();
    assert_eq!(out.to_vec().unwrap(), negated);

    // Mismatches, each naming the argument.
    let launch = |given: &[Arg<'_>]| {
        // SAFETY: every launch through this is refused by the argument checks before
        // anything is submitted.
        refused(unsafe { queue.launch(&affine, dims, given) })
    };
    says(
        &launch(&args![&input, &params, &out]),
        &[
            "argument 2 of `affine` is a uniform buffer",
            "`Arg::uniform(&buffer)`",
        ],
    );
    says(
        &launch(&args![Arg::uniform(&input), Arg::uniform(&params), &out]),
        &[
            "argument 1 of `affine` is a (storage) buffer",
            "as a uniform buffer",
        ],
    );
    // Fewer bytes than the block: its 16 bytes are checked in any module.
    let words = dev.alloc_zeros::<u32>(1024).unwrap();
    says(
        &launch(&args![&input, Arg::uniform(words.slice(..2)), &out]),
        &[
            "argument 2 of vulkan kernel `affine`",
            "8 bytes bound to binding 1",
            "at least 16",
        ],
    );
    let info = offload_vulkan::VulkanPlatform::open(&offload_core::Config::default())
        .map(|vk| {
            let i = vk.devices()[0].vulkan_info().clone();
            vk.deinit().unwrap();
            i
        })
        .unwrap();
    eprintln!(
        "{test}: maxUniformBufferRange {}, minUniformBufferOffsetAlignment {}",
        info.max_uniform_buffer_range, info.min_uniform_buffer_offset_alignment
    );
    // A range at an offset the device does not bind uniform buffers at.
    let align = info.min_uniform_buffer_offset_alignment as usize;
    if align > 4 {
        says(
            &launch(&args![&input, Arg::uniform(words.slice(1..5)), &out]),
            &[
                "argument 2 of vulkan kernel `affine`",
                "a range starting at byte 4",
                "as a uniform buffer",
                &format!("multiples of {align} bytes (minUniformBufferOffsetAlignment)"),
            ],
        );
    } else {
        common::skipped(&format!("{test}: the offset check (alignment {align})"));
    }
    // A buffer larger than the device binds as a uniform buffer, whole.
    let range = info.max_uniform_buffer_range as usize;
    if range <= 64 << 20 {
        let big = dev.alloc_zeros::<u32>(range / 4 + 4).unwrap();
        says(
            &launch(&args![&input, Arg::uniform(&big), &out]),
            &[
                "argument 2 of vulkan kernel `affine`",
                "cannot be bound whole as a uniform buffer",
                &format!("at most {range} bytes (maxUniformBufferRange)"),
            ],
        );
        // A range of it within the limit binds.
        // SAFETY: as the launches above; the range holds the 16-byte block (zeros: n = 0,
        // so nothing is written).
        unsafe {
            queue.launch(
                &affine,
                dims,
                &args![&input, Arg::uniform(big.slice(..4)), &out],
            )
        }
        .unwrap();
    } else {
        common::skipped(&format!(
            "{test}: the range check (maxUniformBufferRange {range})"
        ));
    }
    queue.sync().unwrap();
    assert_eq!(out.to_vec().unwrap(), negated, "no refused launch ran");
    drop(queue);
    rt.shutdown().unwrap();
    assert_no_validation_errors(test);
}

/// Through the WGSL compiler: the uniform kernel is verified (its storage accesses are
/// bounds-checked, its uniform block's size is checked) and runs without `unsafe`; wgpu's
/// `var<push_constant>` spelling gets a compile error naming naga 28's `var<immediate>`.
#[cfg(feature = "wgsl")]
#[test]
fn wgsl_uniforms_run_safely_and_push_constant_points_at_immediate() {
    use offload_core::{Language, Source};
    let _serial = serial();
    let test = "wgsl_uniforms_run_safely_and_push_constant_points_at_immediate";
    let Some((rt, dev)) = start(test) else {
        return;
    };
    let affine = Program::from_source(Source::wgsl(AFFINE))
        .load(&dev)
        .unwrap()
        .kernel("affine")
        .unwrap();
    assert!(affine.is_verified());
    let input = dev.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let out = dev.alloc_zeros::<f32>(4).unwrap();
    let params = dev
        .upload(&[Affine {
            scale: 10.0,
            bias: 1.0,
            n: 4,
            _pad: 0,
        }])
        .unwrap();
    let queue = dev.queue().unwrap();
    queue
        .run(
            &affine,
            Dims::grid([1, 1, 1]).block([64, 1, 1]),
            &args![&input, Arg::uniform(&params), &out],
        )
        .unwrap();
    assert_eq!(out.to_vec().unwrap(), [11.0, 21.0, 31.0, 41.0]);
    // The safe path refuses a 2-D shader's 1-D blocks too.
    let grid2d = Program::from_source(Source::wgsl(GRID_2D))
        .load(&dev)
        .unwrap()
        .kernel("grid2d")
        .unwrap();
    let words = dev.alloc_zeros::<u32>(4096).unwrap();
    let e = refused(queue.run(&grid2d, Dims::for_num_elems(4096), &args![&words]));
    says(&e, &["[8, 8, 1]", "[256, 1, 1]"]);

    let text = "struct Args { n: u32 }\n\
                var<push_constant> args: Args;\n\
                @group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                @compute @workgroup_size(64)\n\
                fn f(@builtin(global_invocation_id) id: vec3<u32>) {\n    \
                    if id.x < args.n { out[id.x] = 1u; }\n\
                }\n";
    match Program::from_source(Source::wgsl(text)).load(&dev) {
        Err(Error::Compile { language, log, .. }) => {
            assert_eq!(language, Language::Wgsl);
            says(
                &log,
                &[
                    "unknown address space: `push_constant`",
                    "wgsl:2:",
                    "`var<immediate>`",
                ],
            );
        }
        other => panic!("var<push_constant> compiled: {:?}", other.map(|_| ())),
    }
    drop(queue);
    rt.shutdown().unwrap();
    assert_no_validation_errors(test);
}
