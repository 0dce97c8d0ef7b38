//! offload against the raw CUDA driver API it wraps, paired in one process: the same five
//! operations through `offload` and through `libcuda.so.1` called directly (the calls
//! offload itself would make, with nothing around them), in alternating rounds so that
//! both sides see the same machine. Written for the GPU kit (`scripts/gpu/run.sh`), which
//! reads the `PAIR` lines; on a machine without CUDA it says so and exits 0 (1 under
//! `OFFLOAD_CUDA_REAL=1`, where a driver was promised).
//!
//! Operations: alloc+free of 4 KiB device memory, a synchronous 64-byte host-to-device
//! copy, launch+sync of the fixture's `noop` kernel (one thread), loading (and unloading)
//! the fixture PTX module, and a device-to-device copy of `OFFLOAD_BENCH_COPY_BYTES`
//! (default 1 GiB) with its synchronisation, reported as bandwidth.
//!
//! ```text
//! PAIR <op> offload=<ns> raw=<ns> ratio=<offload/raw>      (medians of the rounds)
//! ```
//!
//! Run: `cargo bench -p offload-cuda --bench raw_pair` (or the kit's binary). Against the
//! protocol fake (LD_LIBRARY_PATH at offload-driver's fake) it runs too, which checks the
//! harness, not the speed of anything.

use std::time::{Duration, Instant};

use offload_core::{BackendKind, Dims, MemKind, NoPlatforms, Offload, Program, Ready, Uninit};

// The raw driver side: libcuda's entry points and the context (shared with babelstream.rs).
#[path = "common/raw.rs"]
mod raw;
use raw::{Ptr, Raw, check};

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Times `iters` calls of `f`, per call.
fn per_call(iters: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed() / iters
}

/// Runs both sides `rounds` times, alternating, and prints the pair.
fn pair(
    op: &str,
    rounds: u32,
    mut offload: impl FnMut() -> Duration,
    mut raw: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    offload();
    raw(); // warm-up
    for _ in 0..rounds {
        ours.push(offload());
        theirs.push(raw());
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "PAIR {op} offload={} raw={} ratio={:.2}",
        ours.as_nanos(),
        theirs.as_nanos(),
        ours.as_secs_f64() / theirs.as_secs_f64().max(1e-12)
    );
    (ours, theirs)
}

fn main() {
    let Some(raw) = Raw::open() else {
        println!("SKIP raw_pair: no CUDA driver with a device (libcuda.so.1)");
        // The GPU kit asked for the real driver: its absence is a failure there.
        let real = std::env::var("OFFLOAD_CUDA_REAL").as_deref() == Ok("1");
        std::process::exit(i32::from(real));
    };
    let rt: Offload<Ready, NoPlatforms> = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_cuda::platform())
        .start()
        .expect("offload with the CUDA backend");
    let dev = rt.device(BackendKind::Cuda).expect("a CUDA device");
    println!("device: {}", dev.info().expect("device info").name);
    let queue = dev.queue().expect("a queue");
    let image = offload_cuda::fixtures::KERNELS;
    let mut image_nul = image.to_vec();
    image_nul.push(0);
    let rounds = 20;

    pair(
        "alloc_free_4k",
        rounds,
        || {
            per_call(200, || {
                dev.alloc(4096, MemKind::Device).unwrap().free().unwrap()
            })
        },
        || {
            per_call(200, || {
                let mut ptr = 0u64;
                // SAFETY: an out-pointer to a local; the allocation is freed at once.
                unsafe {
                    check("cuMemAlloc_v2", (raw.mem_alloc)(&mut ptr, 4096));
                    check("cuMemFree_v2", (raw.mem_free)(ptr));
                }
            })
        },
    );

    let small = dev.alloc(64, MemKind::Device).unwrap();
    let mut raw_small = 0u64;
    // SAFETY: an out-pointer to a local.
    check("cuMemAlloc_v2", unsafe {
        (raw.mem_alloc)(&mut raw_small, 64)
    });
    let bytes = [7u8; 64];
    pair(
        "write_64b",
        rounds,
        || per_call(2000, || small.write(0, &bytes).unwrap()),
        || {
            per_call(2000, || {
                // SAFETY: `raw_small` holds 64 bytes; `bytes` is 64 bytes long.
                check("cuMemcpyHtoD_v2", unsafe {
                    (raw.htod)(raw_small, bytes.as_ptr().cast(), 64)
                });
            })
        },
    );

    let program = Program::new(image);
    let module = program.load(&dev).unwrap();
    let noop = module.kernel("noop").unwrap();
    let mut raw_module: Ptr = std::ptr::null_mut();
    let mut raw_noop: Ptr = std::ptr::null_mut();
    // SAFETY: the image is NUL-terminated PTX; out-pointers to locals.
    unsafe {
        check(
            "cuModuleLoadData",
            (raw.load)(&mut raw_module, image_nul.as_ptr().cast()),
        );
        check(
            "cuModuleGetFunction",
            (raw.function)(&mut raw_noop, raw_module, c"noop".as_ptr()),
        );
    }
    pair(
        "launch_sync_noop",
        rounds,
        || {
            per_call(500, || {
                // SAFETY: noop takes no arguments and touches no memory.
                unsafe { queue.launch(&noop, Dims::grid([1, 1, 1]).block([1, 1, 1]), &[]) }
                    .unwrap();
                queue.sync().unwrap();
            })
        },
        || {
            per_call(500, || {
                // SAFETY: noop takes no parameters; one thread on this harness's stream.
                unsafe {
                    check(
                        "cuLaunchKernel",
                        (raw.launch)(
                            raw_noop,
                            1,
                            1,
                            1,
                            1,
                            1,
                            1,
                            0,
                            raw.stream,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                        ),
                    );
                    check("cuStreamSynchronize", (raw.stream_sync)(raw.stream));
                }
            })
        },
    );
    drop((noop, module, program));

    pair(
        "module_load_unload",
        rounds,
        || {
            per_call(20, || {
                // A new Program each time: one Program keeps its module loaded (P2).
                let program = Program::new(image);
                drop(program.load(&dev).unwrap());
            })
        },
        || {
            per_call(20, || {
                let mut m: Ptr = std::ptr::null_mut();
                // SAFETY: the image is NUL-terminated PTX; the module is unloaded at once.
                unsafe {
                    check(
                        "cuModuleLoadData",
                        (raw.load)(&mut m, image_nul.as_ptr().cast()),
                    );
                    check("cuModuleUnload", (raw.unload)(m));
                }
            })
        },
    );
    // SAFETY: the raw module is this harness's own and no longer used.
    unsafe { (raw.unload)(raw_module) };

    let len: usize = std::env::var("OFFLOAD_BENCH_COPY_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 30);
    let (a, b) = (
        dev.alloc(len, MemKind::Device).unwrap(),
        dev.alloc(len, MemKind::Device).unwrap(),
    );
    let (mut ra, mut rb) = (0u64, 0u64);
    // SAFETY: out-pointers to locals.
    unsafe {
        check("cuMemAlloc_v2", (raw.mem_alloc)(&mut ra, len));
        check("cuMemAlloc_v2", (raw.mem_alloc)(&mut rb, len));
    }
    let (ours, theirs) = pair(
        "copy_d2d",
        10,
        || {
            per_call(3, || {
                queue.copy(&a, 0, &b, 0, len).unwrap();
                queue.sync().unwrap();
            })
        },
        || {
            per_call(3, || {
                // SAFETY: both allocations hold `len` bytes.
                unsafe {
                    check(
                        "cuMemcpyDtoDAsync_v2",
                        (raw.dtod_async)(rb, ra, len, raw.stream),
                    );
                    check("cuStreamSynchronize", (raw.stream_sync)(raw.stream));
                }
            })
        },
    );
    let gbps = |d: Duration| 2.0 * len as f64 / d.as_secs_f64() / 1e9;
    println!(
        "BANDWIDTH copy_d2d bytes={len} offload={:.1}GB/s raw={:.1}GB/s (bytes read + written)",
        gbps(ours),
        gbps(theirs)
    );
    // SAFETY: the raw allocations are this harness's own.
    unsafe {
        (raw.mem_free)(ra);
        (raw.mem_free)(rb);
        (raw.mem_free)(raw_small);
    }
    drop((a, b, small, queue, dev));
    rt.shutdown().expect("shutdown");
    drop(raw);
}
