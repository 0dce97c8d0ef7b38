//! The README's WGSL example: SAXPY (`y = a * x + y`) written in WGSL, compiled
//! from source by the Vulkan backend (naga) when first loaded, launched with typed buffers
//! and `offload::args!`, and checked against the CPU — on the whole buffers and on views.
//!
//! A machine without a Vulkan device skips with the reason, except with `CI=true`, where
//! that is a failure.
#![cfg(feature = "wgsl")]

mod common;

use common::in_ci;

use offload::{BackendKind, Device, Dims, Error, Offload, Program, Source};

/// The kernel, as in the README: the storage buffers of group 0 in binding order, then the
/// push-constant members (naga 28 spells push constants `var<immediate>`), so its
/// parameters are `(x: f32[], y: f32[], a: f32, n: u32)`. Every index is checked against its
/// buffer by the compiler; the `if` keeps the idle threads of the last block from writing.
const SAXPY: &str = "
struct Params { a: f32, n: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<immediate> params: Params;

@compute @workgroup_size(256)
fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.n {
        y[i] = params.a * x[i] + y[i];
    }
}
";

/// Elements: not a multiple of the 256-thread block, so the last block is partly idle.
const N: u32 = 10_000;
const A: f32 = 2.5;

/// The Vulkan device, or `None` (a skip, printed) where there is none outside CI.
fn vulkan(rt: &Offload) -> Option<Device> {
    match rt.device(BackendKind::Vulkan) {
        Ok(dev) => Some(dev),
        Err(e) if !in_ci() => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED saxpy in WGSL: no Vulkan device: {e}"
            );
            None
        }
        Err(e) => panic!("CI=true and no Vulkan device: {e}"),
    }
}

/// Compares with the CPU's results, within rounding (the driver may fuse the multiply-add).
fn check(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: y[{i}] = {g}, expected {w}"
        );
    }
}

#[test]
fn saxpy_in_wgsl_from_source_matches_the_cpu() -> offload::Result<()> {
    let rt = Offload::init()?;
    let Some(dev) = vulkan(&rt) else {
        return Ok(());
    };

    // The README's example, from here.
    let xs: Vec<f32> = (0..N).map(|i| i as f32 * 0.25).collect();
    let ys: Vec<f32> = (0..N).map(|i| 1000.0 - i as f32).collect();
    let x = dev.upload(&xs)?.label("x");
    let y = dev.upload(&ys)?.label("y");

    let program = Program::from_source(Source::wgsl(SAXPY)).label("saxpy");
    let saxpy = program.load(&dev)?.kernel("saxpy")?; // compiled here, once
    let queue = dev.queue()?;
    // SAFETY: saxpy reads x[i] and writes y[i] for i < N only, and x and y hold N
    // elements (and, compiled from WGSL, its indices are checked against its buffers).
    unsafe {
        queue.launch(
            &saxpy,
            Dims::for_num_elems(N),
            &offload::args![&x, &y, A, N],
        )?
    };
    let mut want: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| A * x + y).collect();
    check("saxpy", &y.to_vec()?, &want);

    // The same kernel over elements 1024..3072, through views.
    let (from, to) = (1024, 3072);
    let len = (to - from) as u32;
    let (xv, yv) = (x.slice(from..to), y.slice(from..to));
    // WGSL that offload compiled is verified (every index checked against its buffer), so
    // it also runs without `unsafe` (the safe path).
    assert!(saxpy.is_verified());
    queue.run(
        &saxpy,
        Dims::for_num_elems(len),
        &offload::args![&xv, &yv, A, len],
    )?;
    for i in from..to {
        want[i] += A * xs[i];
    }
    check("saxpy on views", &y.to_vec()?, &want);

    // What the backend refuses is reported as the call the user made (`Queue::run`, not the
    // `Queue::launch` underneath).
    let e = queue
        .run(
            &saxpy,
            Dims::grid([1, 1, 1]).block([1 << 20, 1, 1]),
            &offload::args![&x, &y, A, N],
        )
        .unwrap_err();
    match &e {
        Error::InvalidArgument { call, .. } | Error::Unsupported { call, .. } => {
            assert_eq!(*call, "Queue::run", "{e}")
        }
        other => panic!("an oversized block gave {other:?}"),
    }

    // Loading the program again (on any thread) reuses the module: no second compile.
    let before = offload::compile_stats().compiles;
    program.load(&dev)?.kernel("saxpy")?;
    assert_eq!(offload::compile_stats().compiles, before);

    // A mistake in the source is a compile error with naga's log, line and column.
    let typo = SAXPY.replace("params.a * x[i]", "params.a * x[i");
    let e = Program::from_source(Source::wgsl(typo))
        .load(&dev)
        .unwrap_err();
    match &e {
        Error::Compile { log, .. } => assert!(log.contains("wgsl:12:"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
    rt.shutdown()?;
    Ok(())
}
