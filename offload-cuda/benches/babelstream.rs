//! BabelStream's five kernels on f64 through offload's CUDA backend and through the raw CUDA
//! driver API on the same PTX, paired in one process (issue 45). Written for the GPU kit
//! (`scripts/gpu/run.sh`), which reads the `BABEL` lines; on a machine without CUDA it says
//! so and exits 0 (1 under `OFFLOAD_CUDA_REAL=1`, where a driver was promised).
//!
//! The kernels (`benches/babelstream.ptx`), on **f64** arrays `a`, `b`, `c` of N elements
//! and `s` = 0.4: copy `c = a`, mul `b = s * c`, add `c = a + b`, triad `a = b + s * c`,
//! and dot `sum(a * b)`, plus `init`, which sets the start values (entries `stream_<name>`). Every kernel runs on one
//! fixed grid of 1024 blocks of 1024 threads and walks its elements grid-stride; the dot
//! sums each thread's products, adds a block's sums as a tree in shared memory and writes
//! one partial sum per block; the host reads the 1024 partials and adds them inside the
//! timed region.
//!
//! The PTX is written by hand, not compiled here: this machine has no CUDA toolkit, and a
//! PTX text is what both sides can take as it is (offload's `Program::new`, the driver's
//! `cuModuleLoadData`), so they run the very same image. NVRTC (offload's `Source::cuda`)
//! would need the toolkit's library at run time on the GPU machine and would hand the raw
//! side a different path to its PTX; the file's header says what each kernel does.
//!
//! * `offload`: the runtime as a user calls it: `Offload` with `offload_cuda::platform()`,
//!   `Program::new(ptx)`, `Queue::launch` + `Queue::sync` per kernel, `MemKind::Device`
//!   arrays, the dot's partials read with `Buffer::read`.
//! * `raw`: libcuda by hand (`benches/common/raw.rs`, shared with `raw_pair.rs`):
//!   `cuModuleLoadData` + `cuModuleGetFunction` on the same PTX, `cuMemAlloc`,
//!   `cuLaunchKernel` + `cuStreamSynchronize` per kernel on a stream of its own, the
//!   partials read with `cuMemcpyDtoH`.
//!
//! BabelStream's rules: arrays start at a = 0.1, b = 0.2, c = 0.0; each iteration runs copy,
//! mul, add, triad, dot in that order, each timed on its own (launch and synchronise); a
//! kernel's MB/s (10^6 bytes) is the bytes it moves (copy, mul, dot: 2N elements; add,
//! triad: 3N; 8 bytes each) over its fastest time in the iterations after the first. After
//! the run each side's arrays are checked against golden values (the same recurrence on
//! one f64 per array, for as many iterations): each array's mean relative error must be at
//! most 100 f64 epsilons and the last dot's relative error (against gold a * gold b * N) at
//! most 1e-8. A failed check prints FAILED and exits with status 1.
//!
//! Pairing: each side has its own arrays, set once; the run is `ROUNDS` rounds of `ITERS`
//! iterations per side, one side after the other, and which side goes first alternates
//! from round to round. A kernel's ratio is the median over rounds of offload MB/s / raw
//! MB/s; the MB/s columns are medians over rounds. The device's theoretical bandwidth is
//! CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz) × 2 × GLOBAL_MEMORY_BUS_WIDTH (bits) / 8,
//! and `peak` is offload's MB/s as a fraction of it (the table shows raw's too).
//!
//! ```text
//! BABEL <kernel> offload=<MB/s> raw=<MB/s> ratio=<offload/raw> peak=<fraction or n/a>
//! BABEL_PEAK <MB/s or n/a> ...
//! ```
//!
//! Defaults: N = 2^25 (BabelStream's; 268 MB per array, 1.6 GB for both sides), 5 rounds of
//! 100 iterations per side; override with `OFFLOAD_BABELSTREAM_N`,
//! `OFFLOAD_BABELSTREAM_ITERS` (per round, at least 2: the first is not counted) and
//! `OFFLOAD_BABELSTREAM_ROUNDS`. The output says what was used.
//!
//! Against offload's protocol fake libcuda (LD_LIBRARY_PATH at the fake that offload-driver
//! builds; its device is named "Fake GPU <n>") the kernels do not execute: the bench says
//! so, skips the verification, and its figures measure the harness only; N defaults to 2^20
//! there (the fake's device has 1 GiB).
//!
//! Run: `cargo bench -p offload-cuda --bench babelstream` (or the kit's binary).

use std::ffi::{c_char, c_int};
use std::time::Instant;

use offload_core::{
    Arg, BackendKind, Buffer, Device, Dims, Kernel, MemKind, Module, NoPlatforms, Offload, Program,
    Queue, Ready, Uninit,
};

// The raw driver side: libcuda's entry points and the context (shared with raw_pair.rs).
#[path = "common/raw.rs"]
mod raw;
use raw::{ATTRIBUTE_MEMORY_BUS_BITS, ATTRIBUTE_MEMORY_CLOCK_KHZ, Ptr, Raw, check};

const PTX: &[u8] = include_bytes!("babelstream.ptx");

// The start values, the kernels and what each moves, the round, the check: shared with
// the host and Vulkan BabelStreams (offload-bench).
use offload_bench::babelstream::{
    self, KERNELS, Precision, SCALAR, START_A, START_B, START_C, Side, median, rates, run_round,
};

/// The fixed grid of every kernel: blocks, and threads per block (the dot's shared memory
/// holds 1024 sums, and its tree wants a power of two).
const BLOCKS: u32 = 1024;
const THREADS: u32 = 1024;

/// The run's sizes: from the environment, or the defaults.
struct Setup {
    n: u32,
    iters: usize,
    rounds: usize,
}

impl Setup {
    fn from_env(default_n: usize) -> Setup {
        let sizes = babelstream::Sizes::from_env(default_n, 100, 5);
        Setup {
            n: sizes.n,
            iters: sizes.iters,
            rounds: sizes.rounds,
        }
    }

    fn bytes(&self) -> usize {
        self.n as usize * 8
    }
}

/// The partial sums of the dot, added on the host.
fn host_sum(partials: impl Iterator<Item = f64>) -> f64 {
    partials.sum()
}

/// offload's side: the program's kernels on the runtime's arrays.
struct OffloadSide {
    queue: Queue,
    init: Kernel,
    kernels: Vec<Kernel>,
    _module: Module,
    a: Buffer,
    b: Buffer,
    c: Buffer,
    sums: Buffer,
    n: u32,
    partials: Vec<u8>,
}

impl OffloadSide {
    fn new(dev: &Device, setup: &Setup) -> OffloadSide {
        let module = Program::new(PTX).load(dev).expect("the kernels load");
        let alloc = |len| dev.alloc(len, MemKind::Device).expect("an array");
        OffloadSide {
            queue: dev.queue().expect("a queue"),
            init: module.kernel("stream_init").expect("the init kernel"),
            kernels: KERNELS
                .iter()
                .map(|(k, _)| module.kernel(&format!("stream_{k}")).expect("a kernel"))
                .collect(),
            _module: module,
            a: alloc(setup.bytes()),
            b: alloc(setup.bytes()),
            c: alloc(setup.bytes()),
            sums: alloc(BLOCKS as usize * 8),
            n: setup.n,
            partials: vec![0; BLOCKS as usize * 8],
        }
    }

    fn dims() -> Dims {
        Dims::grid([BLOCKS, 1, 1]).block([THREADS, 1, 1])
    }
}

impl Side for OffloadSide {
    type Elem = f64;

    fn name(&self) -> &'static str {
        "offload"
    }

    fn init(&mut self) {
        let args = [
            Arg::buffer(&self.a),
            Arg::buffer(&self.b),
            Arg::buffer(&self.c),
            Arg::scalar(&START_A),
            Arg::scalar(&START_B),
            Arg::scalar(&START_C),
            Arg::scalar(&self.n),
        ];
        // SAFETY: init writes elements below `n` of a, b and c, each `n` f64s long.
        unsafe { self.queue.launch(&self.init, Self::dims(), &args) }.expect("launch init");
        self.queue.sync().expect("init");
    }

    fn run(&mut self, k: usize) -> Option<f64> {
        let (a, b, c) = (
            Arg::buffer(&self.a),
            Arg::buffer(&self.b),
            Arg::buffer(&self.c),
        );
        let (n, s) = (Arg::scalar(&self.n), Arg::scalar(&SCALAR));
        let args = match k {
            0 => vec![a, c, n],
            1 => vec![b, c, s, n],
            2 => vec![a, b, c, n],
            3 => vec![a, b, c, s, n],
            _ => vec![a, b, Arg::buffer(&self.sums), n],
        };
        // SAFETY: the kernels index only below `n`, the length of every array given, and
        // the dot writes one partial per block of its `BLOCKS`, the length of `sums`.
        unsafe { self.queue.launch(&self.kernels[k], Self::dims(), &args) }.expect("launch");
        self.queue.sync().expect("sync");
        (k == 4).then(|| {
            self.sums
                .read(0, &mut self.partials)
                .expect("read the sums");
            host_sum(
                self.partials
                    .chunks_exact(8)
                    .map(|w| f64::from_ne_bytes(w.try_into().unwrap())),
            )
        })
    }

    fn arrays(&mut self) -> [Vec<f64>; 3] {
        [&self.a, &self.b, &self.c].map(|buf| {
            let mut bytes = vec![0u8; self.n as usize * 8];
            buf.read(0, &mut bytes).expect("read back");
            bytes
                .chunks_exact(8)
                .map(|w| f64::from_ne_bytes(w.try_into().unwrap()))
                .collect()
        })
    }
}

/// A kernel parameter for `cuLaunchKernel`: the address of its value (the driver only
/// reads through it).
fn param<T>(value: &T) -> Ptr {
    std::ptr::from_ref(value).cast_mut().cast()
}

/// The raw side: the same PTX loaded, launched and read by hand.
struct RawSide<'r> {
    raw: &'r Raw,
    module: Ptr,
    /// init, then [`KERNELS`] in order.
    functions: [Ptr; 6],
    /// a, b, c, the partial sums.
    memory: [u64; 4],
    n: u32,
    partials: Vec<f64>,
}

impl<'r> RawSide<'r> {
    fn new(raw: &'r Raw, setup: &Setup) -> RawSide<'r> {
        let mut image = PTX.to_vec();
        image.push(0);
        let mut module: Ptr = std::ptr::null_mut();
        // SAFETY: the image is NUL-terminated PTX; an out-pointer to a local.
        check("cuModuleLoadData", unsafe {
            (raw.load)(&mut module, image.as_ptr().cast())
        });
        let names = [
            c"stream_init",
            c"stream_copy",
            c"stream_mul",
            c"stream_add",
            c"stream_triad",
            c"stream_dot",
        ];
        let functions = names.map(|name| {
            let mut f: Ptr = std::ptr::null_mut();
            // SAFETY: the module is live; the name is NUL-terminated; an out-pointer.
            check("cuModuleGetFunction", unsafe {
                (raw.function)(&mut f, module, name.as_ptr())
            });
            f
        });
        let sizes = [
            setup.bytes(),
            setup.bytes(),
            setup.bytes(),
            BLOCKS as usize * 8,
        ];
        let memory = sizes.map(|len| {
            let mut ptr = 0u64;
            // SAFETY: an out-pointer to a local.
            check("cuMemAlloc_v2", unsafe { (raw.mem_alloc)(&mut ptr, len) });
            ptr
        });
        RawSide {
            raw,
            module,
            functions,
            memory,
            n: setup.n,
            partials: vec![0.0; BLOCKS as usize],
        }
    }

    /// Launches function `f` on the fixed grid with `params` and waits for it.
    fn launch(&self, f: usize, params: &mut [Ptr]) {
        // SAFETY: `params` holds the address of one value per parameter of the function,
        // of its type; the caller passes allocations as long as the kernel indexes.
        unsafe {
            check(
                "cuLaunchKernel",
                (self.raw.launch)(
                    self.functions[f],
                    BLOCKS,
                    1,
                    1,
                    THREADS,
                    1,
                    1,
                    0,
                    self.raw.stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            );
            check(
                "cuStreamSynchronize",
                (self.raw.stream_sync)(self.raw.stream),
            );
        }
    }

    /// Copies `dst.len()` f64s from device memory `src` into `dst`.
    fn read(&self, src: u64, dst: &mut [f64]) {
        // SAFETY: `src` holds at least `dst.len()` f64s (the callers' allocations).
        check("cuMemcpyDtoH_v2", unsafe {
            (self.raw.dtoh)(dst.as_mut_ptr().cast(), src, std::mem::size_of_val(dst))
        });
    }
}

impl Side for RawSide<'_> {
    type Elem = f64;

    fn name(&self) -> &'static str {
        "raw"
    }

    fn init(&mut self) {
        let [a, b, c, _] = &self.memory;
        let (va, vb, vc) = (START_A, START_B, START_C);
        let mut params = [
            param(a),
            param(b),
            param(c),
            param(&va),
            param(&vb),
            param(&vc),
            param(&self.n),
        ];
        self.launch(0, &mut params);
    }

    fn run(&mut self, k: usize) -> Option<f64> {
        let [a, b, c, sums] = &self.memory;
        let (n, s) = (param(&self.n), param(&SCALAR));
        let (a, b, c) = (param(a), param(b), param(c));
        let mut params = match k {
            0 => vec![a, c, n],
            1 => vec![b, c, s, n],
            2 => vec![a, b, c, n],
            3 => vec![a, b, c, s, n],
            _ => vec![a, b, param(sums), n],
        };
        self.launch(k + 1, &mut params);
        (k == 4).then(|| {
            let mut partials = std::mem::take(&mut self.partials);
            self.read(self.memory[3], &mut partials);
            let sum = host_sum(partials.iter().copied());
            self.partials = partials;
            sum
        })
    }

    fn arrays(&mut self) -> [Vec<f64>; 3] {
        [0, 1, 2].map(|i| {
            let mut array = vec![0.0; self.n as usize];
            self.read(self.memory[i], &mut array);
            array
        })
    }
}

impl Drop for RawSide<'_> {
    fn drop(&mut self) {
        // SAFETY: the allocations and the module are this side's own, no longer used.
        unsafe {
            for ptr in self.memory {
                (self.raw.mem_free)(ptr);
            }
            (self.raw.unload)(self.module);
        }
    }
}

/// The device's name, as the driver reports it.
fn device_name(raw: &Raw) -> String {
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 chars; the driver NUL-terminates what it writes.
    check("cuDeviceGetName", unsafe {
        (raw.name)(name.as_mut_ptr(), 256, raw.device)
    });
    // SAFETY: NUL-terminated by the driver, within the buffer.
    unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The theoretical memory bandwidth in MB/s, with the clock (kHz) and bus width (bits)
/// it comes from; `None` where the driver does not answer (offload's fake does not).
fn theoretical_peak(raw: &Raw) -> Option<(f64, c_int, c_int)> {
    let attribute = |which: c_int| {
        let mut value: c_int = 0;
        // SAFETY: an out-pointer to a local; `raw.device` is a device of this driver.
        let code = unsafe { (raw.attribute)(&mut value, which, raw.device) };
        (code == 0 && value > 0).then_some(value)
    };
    let khz = attribute(ATTRIBUTE_MEMORY_CLOCK_KHZ)?;
    let bits = attribute(ATTRIBUTE_MEMORY_BUS_BITS)?;
    let mbps = f64::from(khz) * 1e3 * 2.0 * f64::from(bits) / 8.0 / 1e6;
    Some((mbps, khz, bits))
}

fn main() {
    let Some(raw) = Raw::open() else {
        println!("SKIP babelstream: no CUDA driver with a device (libcuda.so.1)");
        // The GPU kit asked for the real driver: its absence is a failure there.
        let real = std::env::var("OFFLOAD_CUDA_REAL").as_deref() == Ok("1");
        std::process::exit(i32::from(real));
    };
    let name = device_name(&raw);
    // offload's protocol fake (offload-driver/fake/fake_cuda.c) names its devices so; its
    // kernels other than the conformance fixtures run as no-ops.
    let fake = name.starts_with("Fake GPU");
    let setup = Setup::from_env(if fake { 1 << 20 } else { 1 << 25 });
    let peak = theoretical_peak(&raw);

    let rt: Offload<Ready, NoPlatforms> = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_cuda::platform())
        .start()
        .expect("offload with the CUDA backend");
    let dev = rt.device(BackendKind::Cuda).expect("a CUDA device");
    println!(
        "BABELSTREAM device={name:?} f64 n={} mb_per_array={:.1} rounds={} iters={} grid={BLOCKS}x{THREADS}",
        setup.n,
        setup.bytes() as f64 / 1e6,
        setup.rounds,
        setup.iters,
    );
    match peak {
        Some((mbps, khz, bits)) => {
            println!("BABEL_PEAK {mbps:.0} MB/s (memory clock {khz} kHz x 2 x {bits}-bit bus / 8)")
        }
        None => println!("BABEL_PEAK n/a (the driver does not report the memory clock and bus)"),
    }
    if fake {
        println!(
            "BABEL_NOTE offload's protocol fake libcuda: its kernels do not execute, so the \
             verification is skipped and the figures measure the harness only"
        );
    }

    let mut offload = OffloadSide::new(&dev, &setup);
    let mut raw_side = RawSide::new(&raw, &setup);
    let mut sides: [&mut dyn Side<Elem = f64>; 2] = [&mut offload, &mut raw_side];
    // A warm-up of every kernel on both sides, then the start values.
    for side in sides.iter_mut() {
        side.init();
        for k in 0..KERNELS.len() {
            side.run(k);
        }
        side.init();
    }

    // Per round: each side's MB/s per kernel; each side's last dot.
    let mut rounds: Vec<[[f64; 5]; 2]> = Vec::new();
    let mut sums = [0.0; 2];
    let started = Instant::now();
    for round in 0..setup.rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut measured = [[0.0; 5]; 2];
        for i in order {
            let (times, sum) = run_round(&mut *sides[i], setup.iters);
            measured[i] = rates(&times, setup.bytes() as u64);
            sums[i] = sum;
        }
        println!(
            "round {} ({} first): offload / raw {}",
            round + 1,
            sides[order[0]].name(),
            (0..5)
                .map(|k| format!("{} {:.3}", KERNELS[k].0, measured[0][k] / measured[1][k]))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rounds.push(measured);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = setup.rounds * setup.iters;
    if fake {
        println!(
            "{} rounds in {elapsed:.1} s; verification skipped (fake driver)",
            setup.rounds
        );
    } else {
        for (side, sum) in sides.iter_mut().zip(sums) {
            if let Err(why) =
                babelstream::check(&mut **side, total, u64::from(setup.n), sum, Precision::F64)
            {
                println!("FAILED verification: {why}");
                std::process::exit(1);
            }
        }
        println!(
            "{} rounds in {elapsed:.1} s; both sides verified after their {total} iterations",
            setup.rounds
        );
    }

    println!(
        "\n{:<8} {:>14} {:>14} {:>8} {:>15} {:>12} {:>12}",
        "kernel", "offload MB/s", "raw MB/s", "ratio", "ratio min-max", "offload/peak", "raw/peak"
    );
    let column =
        |side: usize, k: usize| -> Vec<f64> { rounds.iter().map(|r| r[side][k]).collect() };
    let fraction = |mbps: f64| match peak {
        Some((p, _, _)) => format!("{:.3}", mbps / p),
        None => "n/a".to_owned(),
    };
    let mut lines = Vec::new();
    for (k, (kernel, _)) in KERNELS.iter().enumerate() {
        let mut ratios: Vec<f64> = rounds.iter().map(|r| r[0][k] / r[1][k]).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        let ratio = median(&mut ratios);
        let ours = median(&mut column(0, k));
        let theirs = median(&mut column(1, k));
        println!(
            "{kernel:<8} {ours:>14.0} {theirs:>14.0} {ratio:>8.3} {lo:>7.3}-{hi:<7.3} {:>12} {:>12}",
            fraction(ours),
            fraction(theirs),
        );
        lines.push(format!(
            "BABEL {kernel} offload={ours:.0} raw={theirs:.0} ratio={ratio:.3} peak={}",
            fraction(ours)
        ));
    }
    println!(
        "\nratio = median over rounds of offload MB/s / raw MB/s; MB/s = 10^6 bytes/s, \
         medians over rounds of each round's fastest iteration after its first{}",
        if fake {
            " (fake driver: the harness only)"
        } else {
            ""
        }
    );
    for line in lines {
        println!("{line}");
    }
    drop((offload, raw_side, dev));
    rt.shutdown().expect("shutdown");
    drop(raw);
}
