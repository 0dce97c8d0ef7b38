//! Launch and program-load costs of offload on the host backend.
//!
//! Measures, in one run, each launch paired with the raw thing it wraps
//! (`offload_bench::paired`: the two sides alternate sample by sample):
//!
//! * `noop_vs_backend`, `noop_vs_direct`: a one-block launch of the fixture kernel `noop`
//!   followed by `sync`. `offload` goes through a `Queue`; `raw_backend` calls the host
//!   device's `launch`/`sync` directly; `direct` calls the kernel's function pointer, taken
//!   with `dlsym` from the same image opened by the dynamic loader. **Goal: offload − direct
//!   ≤ 2 µs.**
//! * `noop_enqueue_vs_backend`: the same launch without the `sync`: what `launch` itself
//!   costs now that it only enqueues (Q1). **Goal: ≤ 1 µs median.**
//! * `add_one_1024_blocks`: `add_one` over 1,024 blocks of 256 threads (n = 262,144
//!   `u32`s). `offload` runs the blocks on the device's worker threads plus the caller (one
//!   device, the `OFFLOAD_HOST_DEVICES` default); `direct_1_thread` calls the kernel 1,024
//!   times on the calling thread. direct / offload is the scaling on this machine's cores.
//! * `load/*`: `one` is `Program::new(KERNELS).load(&dev)` and the drop that unloads it.
//!   `64_threads` is the same for one fresh program loaded by 64 threads at once, all of
//!   which must get the same module (and the backend must load it once): per iteration,
//!   `Program::new`, then the wall time from the release of the 64 parked threads until the
//!   last of them holds the module, then dropping the 64 handles (the last unloads). Thread
//!   parking, hand-over and result collection lie outside the measured time. **Goal:
//!   `64_threads` ≤ 1.2 × `one`.** `64_threads_no_load` is the same with the threads doing
//!   nothing once released: the cost of waking 64 threads on this machine, which no
//!   runtime can avoid, so `64_threads − 64_threads_no_load` is what the loads themselves
//!   cost when 64 threads ask at once.
//!
//! Run with `cargo bench --bench programs`.

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use offload::plugin::KernelArg;
use offload::plugin::hal::{Device as _, Platform as _, Program as _, Queue as _};
use offload::{Arg, BackendKind, Device, Dims, MemKind, Offload, Program};
use offload_bench::paired;
use offload_host::HostPlatform;
use offload_host::fixtures::KERNELS;

/// `offload_launch` of offload-host/include/offload_host.h.
#[repr(C)]
struct Launch {
    grid: [u32; 3],
    block: [u32; 3],
    block_id: [u32; 3],
}

/// A host kernel under the ABI of offload_host.h.
type KernelFn = unsafe extern "C" fn(args: *const *mut c_void, launch: *const Launch);

const BLOCKS: u32 = 1024;
const THREADS: u32 = 256;
const N: u32 = BLOCKS * THREADS;
const LOADERS: usize = 64;
const SAMPLES: usize = 30;

/// The fixture image opened by the dynamic loader directly, from a file in the temporary
/// directory that is deleted as soon as it is mapped.
fn open_direct() -> libloading::Library {
    let path =
        std::env::temp_dir().join(format!("offload-bench-programs-{}.so", std::process::id()));
    std::fs::write(&path, KERNELS).expect("write the kernel image");
    // SAFETY: KERNELS is the fixture shared object built from fixtures/kernels.c for this
    // machine; its initialisers are the compiler's defaults.
    let library = unsafe { libloading::Library::new(&path) };
    std::fs::remove_file(&path).expect("remove the kernel image");
    library.expect("dlopen the kernel image")
}

/// The function pointer of kernel `name` (a NUL-terminated symbol name).
fn direct_kernel(library: &libloading::Library, name: &[u8]) -> KernelFn {
    // SAFETY: the fixture exports `name` as a kernel of the host ABI, i.e. a function of
    // type `KernelFn`; the pointer is only called while `library` is alive (callers keep
    // it until the end of their benchmark).
    unsafe { *library.get::<KernelFn>(name).expect("dlsym") }
}

fn host_device(rt: &Offload) -> Device {
    rt.devices()
        .expect("devices")
        .into_iter()
        .find(|d| d.backend() == BackendKind::Host)
        .expect("a host device")
}

fn launch(c: &mut Criterion) {
    let rt = Offload::init().expect("init");
    let dev = host_device(&rt);
    let module = Program::new(KERNELS).load(&dev).expect("load");
    let noop = module.kernel("noop").expect("noop");
    let add_one = module.kernel("add_one").expect("add_one");
    let queue = dev.queue().expect("queue");

    let platform = HostPlatform::open(&offload::Config::default()).expect("open");
    let raw_dev = platform.devices().remove(0);
    let raw_module = raw_dev.load(KERNELS).expect("raw load");
    let raw_noop = raw_module.kernel("noop").expect("raw noop");
    let raw_queue = raw_dev.queue().expect("raw queue");
    let no_args: [KernelArg<'_, offload_host::HostBuffer>; 0] = [];

    let library = open_direct();
    let direct_noop = direct_kernel(&library, b"noop\0");
    let direct_add_one = direct_kernel(&library, b"add_one\0");

    let one_block = Dims::grid([1, 1, 1]);
    let offload_noop = || {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&noop, black_box(one_block), &[]) }.expect("launch");
        queue.sync().expect("sync")
    };
    paired(
        c,
        "noop_vs_backend",
        ("offload", "raw_backend"),
        SAMPLES,
        offload_noop,
        || {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { raw_queue.launch(&raw_noop, black_box(&one_block), &no_args) }
                .expect("raw launch");
            raw_queue.sync().expect("raw sync")
        },
    );
    // Enqueue only (Q1): `launch` returns once the work is queued; the executor drains the
    // queue meanwhile, and both queues are synced after.
    paired(
        c,
        "noop_enqueue_vs_backend",
        ("offload", "raw_backend"),
        SAMPLES,
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        || unsafe { queue.launch(&noop, black_box(one_block), &[]) }.expect("launch"),
        || {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { raw_queue.launch(&raw_noop, black_box(&one_block), &no_args) }
                .expect("raw launch")
        },
    );
    queue.sync().expect("sync");
    raw_queue.sync().expect("raw sync");
    let args: [*mut c_void; 0] = [];
    let direct_launch = Launch {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        block_id: [0, 0, 0],
    };
    paired(
        c,
        "noop_vs_direct",
        ("offload", "direct"),
        SAMPLES,
        offload_noop,
        || {
            // SAFETY: `noop` takes no arguments and reads nothing; `direct_launch` is a
            // valid `offload_launch`; `library` outlives the call.
            unsafe { direct_noop(black_box(args.as_ptr()), black_box(&direct_launch)) }
        },
    );

    // add_one over 1,024 blocks: through offload (workers + caller), and on one thread.
    let buf = dev.alloc(4 * N as usize, MemKind::Device).expect("alloc");
    let dims = Dims::grid([BLOCKS, 1, 1]).block([THREADS, 1, 1]);
    let args = [Arg::buffer(&buf), Arg::scalar(&N)];
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { queue.launch(&add_one, dims, &args) }.expect("launch add_one");
    queue.sync().expect("sync");
    let mut out = vec![0u8; 4 * N as usize];
    buf.read(0, &mut out).expect("read");
    assert!(
        out.chunks_exact(4).all(|w| w == 1u32.to_ne_bytes()),
        "add_one through offload added 1 to every element"
    );

    let mut host = vec![0u32; N as usize];
    let run_direct = |host: &mut [u32]| {
        let base = host.as_mut_ptr();
        let n = N;
        let args = [
            (&raw const base).cast_mut().cast::<c_void>(),
            (&raw const n).cast_mut().cast::<c_void>(),
        ];
        for block in 0..BLOCKS {
            let launch = Launch {
                grid: [BLOCKS, 1, 1],
                block: [THREADS, 1, 1],
                block_id: [block, 0, 0],
            };
            // SAFETY: `add_one` takes (buffer u32[], n u32): args[0] points to the base of
            // `host`, which holds N = BLOCKS × THREADS elements, so every index it touches
            // (below n) is inside; args[1] points to n. Both outlive the call, as does
            // `library`.
            unsafe { direct_add_one(args.as_ptr(), &launch) };
        }
    };
    run_direct(&mut host);
    assert!(host.iter().all(|&x| x == 1), "direct add_one added 1");

    paired(
        c,
        "add_one_1024_blocks",
        ("offload", "direct_1_thread"),
        SAMPLES,
        || {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { queue.launch(&add_one, black_box(dims), &args) }.expect("launch");
            queue.sync().expect("sync")
        },
        || run_direct(black_box(&mut host)),
    );

    drop(library);
    drop(raw_noop);
    raw_module.unload().expect("unload raw module");
    raw_queue.destroy().expect("destroy raw queue");
    drop(raw_dev);
    platform.deinit().expect("deinit raw platform");
    drop((noop, add_one, module, queue));
    buf.free().expect("free");
    assert!(rt.shutdown().expect("shutdown").was_last());
}

/// What a loader thread reports for one iteration.
struct Loaded {
    released: Instant,
    loaded: Instant,
    module: Option<offload::Module>,
}

fn load(c: &mut Criterion) {
    let rt = Offload::init().expect("init");
    let dev = host_device(&rt);
    let mut group = c.benchmark_group("load");

    let before = offload_host::stats();
    let mut one_iterations = 0u64;
    group.bench_function("one", |b| {
        b.iter(|| {
            one_iterations += 1;
            drop(black_box(Program::new(KERNELS).load(&dev).expect("load")))
        })
    });
    let after = offload_host::stats();
    assert_eq!(after.loads - before.loads, one_iterations as usize);

    std::thread::scope(|scope| {
        let start = Arc::new(Barrier::new(LOADERS + 1));
        let (done_tx, done_rx) = mpsc::channel::<Loaded>();
        let programs: Vec<mpsc::Sender<Option<Program>>> = (0..LOADERS)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<Option<Program>>();
                let (start, done_tx, dev) = (start.clone(), done_tx.clone(), dev.clone());
                scope.spawn(move || {
                    // A closed channel ends the thread.
                    while let Ok(program) = rx.recv() {
                        start.wait();
                        let released = Instant::now();
                        let module = program.map(|p| p.load(&dev).expect("concurrent load"));
                        let loaded = Instant::now();
                        done_tx
                            .send(Loaded {
                                released,
                                loaded,
                                module,
                            })
                            .expect("report");
                    }
                });
                tx
            })
            .collect();

        // One iteration: hand `program` (or nothing) to every thread, release them, and
        // time from release until the last one is done, plus creating and dropping.
        let round = |load: bool| {
            let t = Instant::now();
            let program = Program::new(KERNELS);
            let created = t.elapsed();
            for tx in &programs {
                tx.send(load.then(|| program.clone())).expect("hand over");
            }
            drop(program);
            start.wait();
            let main_released = Instant::now();
            let results: Vec<Loaded> = (0..LOADERS)
                .map(|_| done_rx.recv().expect("result"))
                .collect();
            let released = results
                .iter()
                .map(|r| r.released)
                .fold(main_released, Instant::min);
            let loaded = results.iter().map(|r| r.loaded).max().expect("64 results");
            if load {
                let id = results[0].module.as_ref().map(|m| m.id());
                assert!(
                    results
                        .iter()
                        .all(|r| r.module.as_ref().map(|m| m.id()) == id),
                    "all 64 threads got the same module"
                );
            }
            let t = Instant::now();
            drop(black_box(results));
            created + loaded.saturating_duration_since(released) + t.elapsed()
        };

        group.bench_function("64_threads_no_load", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| round(false)).sum())
        });
        let before = offload_host::stats();
        let mut iterations = 0u64;
        group.bench_function("64_threads", |b| {
            b.iter_custom(|iters| {
                iterations += iters;
                (0..iters).map(|_| round(true)).sum()
            })
        });
        let after = offload_host::stats();
        assert_eq!(
            after.loads - before.loads,
            iterations as usize,
            "the backend loaded once per iteration"
        );
        assert_eq!(after.unloads - before.unloads, iterations as usize);
        drop(programs);
    });
    group.finish();
    assert!(rt.shutdown().expect("shutdown").was_last());
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = launch, load
}
criterion_main!(benches);
