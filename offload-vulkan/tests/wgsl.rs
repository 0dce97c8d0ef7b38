//! Programs from WGSL source (the `wgsl` feature) on a real Vulkan device
//! (lavapipe in CI): a kernel compiled by naga runs through the runtime with typed push
//! constants; syntax, type and validation errors are `Error::Compile` with naga's log and
//! the line; an out-of-range read gives zero and an out-of-range write is dropped (a
//! guard buffer and the valid elements stay untouched) and a buffer below its binding's
//! minimum size is refused; sixteen threads
//! loading one program compile it once; options set pipeline-overridable constants.
//!
//! Without a Vulkan driver the tests are skipped with a printed reason, except with
//! `CI=true`, where that is a failure. The tests that count compiles take `serial()`.

mod common;

use offload_core::{Error, Language, Source};

/// Without the feature the backend has no WGSL compiler: the runtime says Unsupported.
#[cfg(not(feature = "wgsl"))]
#[test]
fn without_the_feature_wgsl_is_unsupported() {
    use offload_core::hal::{Device as _, Platform as _};
    let Some(vk) = common::open("without_the_feature_wgsl_is_unsupported") else {
        return;
    };
    let dev = vk.devices().remove(0);
    assert_eq!(dev.compiler(Language::Wgsl).unwrap(), None);
    drop(dev);
    common::close(vk);
}

/// Keeps the file's imports used without the feature.
#[cfg(not(feature = "wgsl"))]
#[allow(dead_code)]
fn unused(_: Error, _: Source) {}

#[cfg(feature = "wgsl")]
mod with_wgsl {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::common::{
        self, Validated, assert_no_validation_errors, require_validation, serial, skip_or_fail,
    };
    use super::{Error, Language, Source};
    use offload_core::hal::{Device as _, Platform as _};
    use offload_core::{
        Arg, Dims, MemKind, NoPlatforms, Offload, ParamKind, PlatformEntry, Program, Ready,
        ScalarType, compile_stats,
    };

    type Runtime = Offload<Ready, NoPlatforms>;

    /// A runtime with only the Vulkan platform, validated where the Khronos layer is
    /// installed (required in CI), and no disk cache (every compile counts); or a skip (a
    /// failure in CI).
    fn start(test: &str) -> Option<Runtime> {
        match Offload::builder()
            .platform(PlatformEntry::with_ipc::<Validated>())
            .compile_cache(None)
            .start()
        {
            Ok(rt) => {
                require_validation(test, validation_layer_runs());
                Some(rt)
            }
            Err(e) => skip_or_fail(test, e).map(|never| match never {}),
        }
    }

    /// Whether the validation layer is installed: a validated platform says so.
    fn validation_layer_runs() -> bool {
        let options = offload_vulkan::VulkanOptions::default().validation(true);
        offload_vulkan::VulkanPlatform::open_with(&offload_core::Config::default(), options)
            .is_ok_and(|vk| {
                let on = vk.validating();
                let _ = vk.deinit();
                on
            })
    }

    /// A tag that makes a source's text, and so its compile-cache key, unique.
    fn unique(what: &str) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("// {what} {} {nanos}\n", std::process::id())
    }

    /// `out[i] = in[i] * scale + f32(value)` for i < n: two buffers and three typed push
    /// constants.
    const AXPB: &str = "
struct Args { value: u32, scale: f32, n: u32 }
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
var<immediate> args: Args;

@compute @workgroup_size(64)
fn axpb(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < args.n {
        out[i] = input[i] * args.scale + f32(args.value);
    }
}
";

    fn compile_error(e: Error) -> String {
        match e {
            Error::Compile {
                backend,
                call,
                language,
                log,
            } => {
                assert_eq!(backend, offload_core::BackendKind::Vulkan);
                assert_eq!(call, "Program::load");
                assert_eq!(language, Language::Wgsl);
                log
            }
            other => panic!("expected Error::Compile, got {other:?}"),
        }
    }

    #[test]
    fn a_wgsl_kernel_from_source_runs_with_typed_push_constants() {
        let _serial = serial();
        let Some(rt) = start("a_wgsl_kernel_from_source_runs_with_typed_push_constants") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let axpb = Program::from_source(Source::wgsl(AXPB))
            .load(&dev)
            .unwrap()
            .kernel("axpb")
            .unwrap();
        assert_eq!(
            axpb.params(),
            [
                ParamKind::Buffer,
                ParamKind::Buffer,
                ParamKind::Typed(ScalarType::U32),
                ParamKind::Typed(ScalarType::F32),
                ParamKind::Typed(ScalarType::U32),
            ]
        );
        const N: u32 = 1000;
        let xs: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
        let input = dev.upload(&xs).unwrap();
        let out = dev.alloc_zeros::<f32>(N as usize).unwrap();
        let queue = dev.queue().unwrap();
        let dims = Dims::grid([N.div_ceil(64), 1, 1]).block([64, 1, 1]);
        // The checked types: an i32 where the kernel declares a u32 is refused.
        // SAFETY: refused by the type check before anything is submitted.
        let wrong = unsafe {
            queue.launch(
                &axpb,
                dims,
                &offload_core::args![&input, &out, 3i32, 2.0f32, N],
            )
        };
        let e = wrong.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(e.to_string().contains("u32"), "{e}");
        // SAFETY: axpb reads and writes the first n = N f32s of buffers holding N.
        unsafe {
            queue.launch(
                &axpb,
                dims,
                &offload_core::args![&input, &out, 3u32, 2.0f32, N],
            )
        }
        .unwrap();
        queue.sync().unwrap();
        let expected: Vec<f32> = xs.iter().map(|x| x * 2.0 + 3.0).collect();
        assert_eq!(out.to_vec().unwrap(), expected);
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    /// The image the backend compiles is SPIR-V 1.3 on a Vulkan 1.1+ device (1.0 on a 1.0
    /// one), marked bounds-checked, and loads like any other; the compiler names naga.
    #[test]
    fn the_compiler_is_naga_and_its_image_is_marked_bounds_checked() {
        let Some(vk) = common::open("the_compiler_is_naga_and_its_image_is_marked_bounds_checked")
        else {
            return;
        };
        for dev in vk.devices() {
            let id = dev
                .compiler(Language::Wgsl)
                .unwrap()
                .expect("a WGSL compiler");
            assert!(id.identity.starts_with("naga 28 ("), "{id:?}");
            assert!(
                id.identity.contains("bounds=offload-checks+restrict"),
                "{id:?}"
            );
            // One identity per process: it is what the cache keys on.
            assert_eq!(dev.compiler(Language::Wgsl).unwrap().unwrap(), id);
            let api = dev.vulkan_info().used_api_version;
            let expected = if (api.major, api.minor) == (1, 0) {
                "spirv-1.0"
            } else {
                "spirv-1.3"
            };
            assert_eq!(id.target, expected);
            assert_eq!(dev.compiler(Language::C).unwrap(), None);
            assert_eq!(dev.compiler(Language::Cuda).unwrap(), None);

            let image = dev.compile(&Source::wgsl(AXPB)).unwrap();
            let module = dev.load(&image).unwrap();
            let (major, minor) = module.spirv_version();
            assert_eq!(format!("spirv-{major}.{minor}"), expected);
            assert!(module.bounds_checked());
            assert_eq!(module.entry_points().collect::<Vec<_>>(), ["axpb"]);
            // The same kernel written by naga without offload's settings is not marked.
            let plain = common::spirv_of(AXPB, (1, 3));
            assert!(!dev.load(&plain).unwrap().bounds_checked());
            // A compile is deterministic: the cache may keep its output.
            assert_eq!(dev.compile(&Source::wgsl(AXPB)).unwrap(), image);
        }
        common::close(vk);
    }

    #[test]
    fn a_syntax_error_is_a_compile_error_with_its_line() {
        let _serial = serial();
        let Some(rt) = start("a_syntax_error_is_a_compile_error_with_its_line") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "@group(0) @binding(0) var<storage, read_write> buf: array<u32>;\n\
                    @compute @workgroup_size(64)\n\
                    fn broken(@builtin(global_invocation_id) id: vec3<u32>) {\n    \
                        buf[id.x] = 1u +;\n\
                    }\n";
        let e = Program::from_source(Source::wgsl(text))
            .load(&dev)
            .unwrap_err();
        let log = compile_error(e);
        assert!(log.contains("wgsl:4:"), "the log names line 4:\n{log}");
        assert!(
            log.contains("buf[id.x] = 1u +;"),
            "the log shows the line:\n{log}"
        );
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    #[test]
    fn a_type_error_is_a_compile_error_with_its_line() {
        let _serial = serial();
        let Some(rt) = start("a_type_error_is_a_compile_error_with_its_line") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "@group(0) @binding(0) var<storage, read_write> buf: array<u32>;\n\
                    @compute @workgroup_size(64)\n\
                    fn typed(@builtin(global_invocation_id) id: vec3<u32>) {\n    \
                        let half: f32 = 0.5;\n    \
                        buf[id.x] = half;\n\
                    }\n";
        let e = Program::from_source(Source::wgsl(text))
            .load(&dev)
            .unwrap_err();
        let log = compile_error(e);
        // naga points at the f32 value (line 4) and underlines the u32 store (line 5).
        assert!(log.contains("wgsl:4:21"), "the log names line 4:\n{log}");
        assert!(
            log.contains("5 │     buf[id.x] = half;"),
            "and shows line 5:\n{log}"
        );
        assert!(log.contains("`f32` to `u32`"), "{log}");
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    /// What only naga's validator refuses: a 64-bit float, a capability the device is not
    /// asked for. The SPIR-V never reaches the driver.
    #[test]
    fn what_the_validator_refuses_never_reaches_the_driver() {
        let _serial = serial();
        let Some(rt) = start("what_the_validator_refuses_never_reaches_the_driver") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let created = offload_vulkan::stats().shader_modules_created;
        let text = "@group(0) @binding(0) var<storage, read_write> buf: array<f64>;\n\
                    @compute @workgroup_size(64)\n\
                    fn wide(@builtin(global_invocation_id) id: vec3<u32>) {\n    \
                        buf[id.x] = 1.0lf;\n\
                    }\n";
        let log = compile_error(
            Program::from_source(Source::wgsl(text))
                .load(&dev)
                .unwrap_err(),
        );
        assert!(log.contains("FLOAT64"), "{log}");
        assert!(log.contains("only push constants"), "{log}");
        // No @compute entry point: nothing to launch.
        let log = compile_error(
            Program::from_source(Source::wgsl("fn helper() -> u32 { return 1u; }"))
                .load(&dev)
                .unwrap_err(),
        );
        assert!(log.contains("@compute"), "{log}");
        assert_eq!(offload_vulkan::stats().shader_modules_created, created);
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    /// Writes and reads a million elements past the end: the writes are dropped (the
    /// buffer's own elements and the guard buffer are untouched) and the reads give zero,
    /// in storage buffers and in workgroup memory.
    #[test]
    fn out_of_range_reads_give_zero_and_writes_are_dropped() {
        let _serial = serial();
        let Some(rt) = start("out_of_range_reads_give_zero_and_writes_are_dropped") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<storage, read_write> guard: array<u32>;
@group(0) @binding(2) var<storage, read_write> seen: array<u32>;
var<workgroup> tile: array<u32, 64>;

@compute @workgroup_size(64)
fn stray(@builtin(global_invocation_id) id: vec3<u32>,
         @builtin(local_invocation_index) l: u32) {
    buf[id.x + 1000000u] = 0xdeadbeefu;
    seen[id.x] = guard[id.x + 1000000u];
    tile[l + 5000u] = l;
    workgroupBarrier();
    if l == 0u { seen[64u] = tile[63u]; }
}
";
        let stray = Program::from_source(Source::wgsl(text))
            .load(&dev)
            .unwrap()
            .kernel("stray")
            .unwrap();
        let buf = dev.upload(&[5u32; 16]).unwrap();
        let guard_data: Vec<u32> = (0..256).map(|i| 0x1000 + i).collect();
        let guard = dev.upload(&guard_data).unwrap();
        let seen = dev.alloc_zeros::<u32>(65).unwrap();
        let queue = dev.queue().unwrap();
        // SAFETY: every access of `stray` is bounds-checked against its buffers (compiled
        // from WGSL), which is what this test checks.
        unsafe {
            queue.launch(
                &stray,
                Dims::grid([1, 1, 1]).block([64, 1, 1]),
                &offload_core::args![&buf, &guard, &seen],
            )
        }
        .unwrap();
        // 64 writes past `buf` and 64 reads past `guard` (workgroup memory is protected
        // but not reported): the first is reported, the others counted.
        match queue.sync() {
            Err(Error::OutOfBounds {
                more: 127, length, ..
            }) if length == 16 || length == 256 => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            buf.to_vec().unwrap(),
            [5; 16],
            "a write past the end lands nowhere (naga's Restrict put it on element 15)"
        );
        assert_eq!(
            guard.to_vec().unwrap(),
            guard_data,
            "the guard buffer is untouched"
        );
        let seen = seen.to_vec().unwrap();
        // Reads past the end give zero.
        assert_eq!(seen[..64], [0; 64], "{seen:?}");
        // No thread's stray write reached the tile, which WGSL zeroes.
        assert_eq!(seen[64], 0, "{seen:?}");
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    /// A kernel writing past the end of a 10-element output (one thread per element of a
    /// 100-element input, 512 threads): the next sync returns `OutOfBounds` naming the
    /// kernel, the argument and an index past the end; the 10 valid elements hold what
    /// their threads wrote, not a stray thread's value; the queue runs the next launch
    /// correctly, and reports its reads past the input's end the same way.
    #[test]
    fn a_write_past_a_ten_element_buffer_leaves_its_elements_untouched() {
        let _serial = serial();
        let Some(rt) = start("a_write_past_a_ten_element_buffer_leaves_its_elements_untouched")
        else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
@compute @workgroup_size(64)
fn double(@builtin(global_invocation_id) id: vec3<u32>) {
    output[id.x] = 2.0 * input[id.x] + 1.0;
}
";
        let double = Program::from_source(Source::wgsl(text))
            .load(&dev)
            .unwrap()
            .kernel("double")
            .unwrap();
        let input: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let input = dev.upload(&input).unwrap();
        let output = dev.alloc_zeros::<f32>(10).unwrap();
        let queue = dev.queue().unwrap();
        let dims = Dims::grid([8, 1, 1]).block([64, 1, 1]);
        queue
            .run(&double, dims, &offload_core::args![&input, &output])
            .unwrap();
        match queue.sync() {
            Err(Error::OutOfBounds {
                kernel,
                argument: 2,
                binding: 1,
                index,
                length: 10,
                access: "write",
                call: "Queue::sync",
                ..
            }) if kernel == "double" && (10..512).contains(&index) => {}
            other => panic!("the write past the end was not reported: {other:?}"),
        }
        // Reported once: the next sync has nothing.
        queue.sync().unwrap();
        let want: Vec<f32> = (0..10).map(|i| 2.0 * i as f32 + 1.0).collect();
        assert_eq!(output.to_vec().unwrap(), want, "the 10 valid elements");
        // Reads past the input's end give zero: a 256-element output's tail is 2*0+1. (One
        // thread per output element, so the reads are the only strays: with more threads
        // than elements the first report could be a read or a write, whichever thread
        // came first.)
        let wide = dev.alloc_zeros::<f32>(256).unwrap();
        let exact = Dims::grid([4, 1, 1]).block([64, 1, 1]);
        queue
            .run(&double, exact, &offload_core::args![&input, &wide])
            .unwrap();
        let Err(e) = queue.sync() else {
            panic!("reads past the input's end were not reported");
        };
        let text = e.to_string();
        assert!(
            matches!(
                e,
                Error::OutOfBounds {
                    argument: 1,
                    binding: 0,
                    length: 100,
                    access: "read",
                    more: 155,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(text.contains("kernel `double` read index"), "{text}");
        assert!(text.contains("the read gave zero"), "{text}");
        let wide = wide.to_vec().unwrap();
        assert_eq!(wide[99], 199.0);
        assert!(wide[100..].iter().all(|&v| v == 1.0), "{:?}", &wide[100..]);
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    /// The checks need the block's fixed members in the binding: a buffer (or range)
    /// smaller than them and one runtime-array element is refused at launch.
    #[test]
    fn a_buffer_below_its_bindings_minimum_size_is_refused() {
        let _serial = serial();
        let Some(rt) = start("a_buffer_below_its_bindings_minimum_size_is_refused") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "
struct Block { count: u32, pad: u32, items: array<vec2<u32>> }
@group(0) @binding(0) var<storage, read_write> data: Block;
@compute @workgroup_size(1)
fn put() { data.items[data.count] = vec2(data.count, 7u); data.count += 1u; }
";
        let put = Program::from_source(Source::wgsl(text))
            .load(&dev)
            .unwrap()
            .kernel("put")
            .unwrap();
        let queue = dev.queue().unwrap();
        let one = Dims::grid([1, 1, 1]).block([1, 1, 1]);
        // 8 fixed bytes and one 8-byte element: 16 at least.
        let small = dev.alloc(12, MemKind::Device).unwrap();
        // SAFETY: refused before anything is submitted.
        let e = unsafe { queue.launch(&put, one, &[Arg::buffer(&small)]) }.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(e.to_string().contains("needs at least 16"), "{e}");
        let big = dev.alloc_zeros::<u32>(64).unwrap();
        let range = Arg::Range {
            buffer: big.as_bytes(),
            offset: 0,
            len: 8,
        };
        // SAFETY: refused before anything is submitted.
        let e = unsafe { queue.launch(&put, one, &[range]) }.unwrap_err();
        assert!(e.to_string().contains("needs at least 16"), "{e}");
        // Exactly the minimum: one element; the writes past it are dropped.
        let exact = dev.alloc_zeros::<u32>(4).unwrap();
        for _ in 0..3 {
            // SAFETY: every access is bounds-checked against the 16-byte buffer.
            unsafe { queue.launch(&put, one, &offload_core::args![&exact]) }.unwrap();
        }
        // The second launch's write is the first out of range, the third's follows.
        match queue.sync() {
            Err(Error::OutOfBounds {
                index: 1,
                length: 1,
                more: 1,
                access: "write",
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(exact.to_vec().unwrap(), [3, 0, 0, 7]);
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    /// A size refusal describes the binding that is there: a uniform block by its size
    /// (it has no runtime array), a storage block by its fixed members and one element of
    /// its runtime array.
    #[test]
    fn a_size_refusal_describes_the_binding_that_is_there() {
        let _serial = serial();
        let Some(rt) = start("a_size_refusal_describes_the_binding_that_is_there") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "
struct U { a: vec2<f32>, b: vec2<f32>, c: vec2<f32> }
struct Block { count: u32, pad: u32, items: array<vec2<u32>> }
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> data: Block;
@compute @workgroup_size(1)
fn put() { data.items[0] = vec2(u32(u.a.x + u.b.y + u.c.x), 7u); }
";
        let put = Program::from_source(Source::wgsl(text))
            .load(&dev)
            .unwrap()
            .kernel("put")
            .unwrap();
        let queue = dev.queue().unwrap();
        let one = Dims::grid([1, 1, 1]).block([1, 1, 1]);
        let (small, block) = (
            dev.alloc(8, MemKind::Device).unwrap(),
            dev.alloc_zeros::<u32>(4).unwrap(),
        );
        // SAFETY: refused before anything is submitted.
        let e = unsafe { queue.launch(&put, one, &[Arg::uniform(&small), Arg::from(&block)]) }
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(
                "8 bytes bound to binding 0, which needs at least 24 (its 24-byte uniform block)"
            ),
            "{text}"
        );
        assert!(!text.contains("runtime array"), "{text}");
        let uniform = dev.alloc_zeros::<u32>(6).unwrap();
        let small = dev.alloc(12, MemKind::Device).unwrap();
        // SAFETY: refused before anything is submitted.
        let e = unsafe {
            queue.launch(
                &put,
                one,
                &[Arg::uniform(uniform.as_bytes()), Arg::buffer(&small)],
            )
        }
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(
                "12 bytes bound to binding 1, which needs at least 16 (its 8 bytes of fixed \
                 members and one 8-byte element of its runtime array)"
            ),
            "{text}"
        );
        // The sizes themselves pass.
        // SAFETY: u holds its 24 bytes and data its 8 fixed bytes and one element.
        unsafe {
            queue.launch(
                &put,
                one,
                &[Arg::uniform(uniform.as_bytes()), Arg::from(&block)],
            )
        }
        .unwrap();
        queue.sync().unwrap();
        assert_eq!(block.to_vec().unwrap(), [0, 0, 0, 7]);
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    #[test]
    fn sixteen_threads_loading_one_program_compile_it_once() {
        let _serial = serial();
        let Some(rt) = start("sixteen_threads_loading_one_program_compile_it_once") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = format!("{}{AXPB}", unique("sixteen threads"));
        let program = Program::from_source(Source::wgsl(text));
        let before = compile_stats();
        let barrier = std::sync::Barrier::new(16);
        std::thread::scope(|s| {
            for _ in 0..16 {
                s.spawn(|| {
                    barrier.wait();
                    program.load(&dev).unwrap().kernel("axpb").unwrap();
                });
            }
        });
        let after = compile_stats();
        assert_eq!(
            after.compiles - before.compiles,
            1,
            "{before:?} -> {after:?}"
        );
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }

    #[test]
    fn options_set_pipeline_overridable_constants_and_nothing_else() {
        let _serial = serial();
        let Some(rt) = start("options_set_pipeline_overridable_constants_and_nothing_else") else {
            return;
        };
        let dev = rt.devices().unwrap().remove(0);
        let text = "
override VALUE: u32 = 1u;
@id(7) override BLOCK: u32 = 64u;
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@compute @workgroup_size(BLOCK)
fn put(@builtin(global_invocation_id) id: vec3<u32>) { buf[id.x] = VALUE; }
";
        let run = |source: Source, block: u32| -> Vec<u32> {
            let put = Program::from_source(source)
                .load(&dev)
                .unwrap()
                .kernel("put")
                .unwrap();
            let buf = dev.alloc_zeros::<u32>(128).unwrap();
            let queue = dev.queue().unwrap();
            let dims = Dims::grid([128 / block, 1, 1]).block([block, 1, 1]);
            // SAFETY: put writes one u32 per thread, 128 threads into 128 u32s.
            unsafe { queue.launch(&put, dims, &offload_core::args![&buf]) }.unwrap();
            buf.to_vec().unwrap()
        };
        assert_eq!(run(Source::wgsl(text), 64), vec![1; 128]);
        let set = Source::wgsl(text).option("VALUE=9").option("7=32");
        assert_eq!(run(set, 32), vec![9; 128]);

        let log = compile_error(
            Program::from_source(Source::wgsl(text).option("-O3"))
                .load(&dev)
                .unwrap_err(),
        );
        assert!(
            log.contains("\"-O3\"") && log.contains("NAME=VALUE"),
            "{log}"
        );
        let log = compile_error(
            Program::from_source(Source::wgsl(text).option("COUNT=3"))
                .load(&dev)
                .unwrap_err(),
        );
        assert!(
            log.contains("COUNT") && log.contains("VALUE, BLOCK, 7"),
            "{log}"
        );
        rt.shutdown().unwrap();
        assert_no_validation_errors("tests/wgsl.rs");
    }
}
