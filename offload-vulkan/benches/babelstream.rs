//! BabelStream's five kernels on the Vulkan device (lavapipe here), run by offload and by
//! raw `ash` in one run, with their ratio (issue 45: offload within 5% of raw `ash`).
//!
//! The kernels (`benches/babelstream.wgsl`), on **f32** arrays `a`, `b`, `c` of N elements
//! and `scalar` = 0.4: copy `c = a`, mul `b = scalar * c`, add `c = a + b`, triad
//! `a = b + scalar * c`, and dot `sum(a * b)`: a fixed grid of 256 workgroups of 256, each
//! thread summing its elements grid-stride, each group reducing its 256 sums as a tree in
//! workgroup memory and writing one partial sum; the host reads the 256 partials and adds
//! them (in f64) inside the timed region. The WGSL is compiled to SPIR-V by naga once, at
//! start, and the same words run on every side:
//!
//! * `offload`: the runtime as a user calls it: `Offload` with `offload_vulkan::platform()`,
//!   `Program::new(spirv)`, `Queue::launch` + `Queue::sync` per kernel, the dot's partials
//!   read with `Buffer::read`; arrays `MemKind::Device`.
//! * `raw`: the same SPIR-V dispatched by hand (`benches/common/raw.rs`): one pipeline per
//!   kernel, its descriptor set written once, the scalars as push constants laid out as
//!   offload's reflection reads them (the entry point's push-constant block), one command
//!   buffer recorded, submitted and waited for per kernel on a timeline semaphore (as
//!   offload waits); arrays in the first `DEVICE_LOCAL` memory type (what offload picks for
//!   `MemKind::Device`), the dot's partials in `HOST_VISIBLE | HOST_COHERENT` memory mapped
//!   once.
//! * `offload (WGSL)`, an information line: the same WGSL compiled by offload itself
//!   (`Source::wgsl`, which adds offload's bounds checks), through the same calls as
//!   `offload`; its ratio to `offload` is the cost of the checks.
//!
//! BabelStream's rules: arrays start at a = 0.1, b = 0.2, c = 0.0; each iteration runs copy,
//! mul, add, triad, dot in that order, each timed on its own (launch and wait); a kernel's
//! MB/s (10^6 bytes) is the bytes it moves (copy, mul, dot: 2N elements; add, triad: 3N)
//! over its fastest time in the iterations after the first. After the run each side's
//! arrays are checked against golden values (the same recurrence run, for as many
//! iterations, on one f32 value per array): each array's average relative error must be at
//! most 100 f32 epsilons, and the last dot's relative error (against gold a * gold b * N) at
//! most 1e-4 (each thread sums N / 65,536 products in f32). A failed check prints FAILED
//! and exits with status 1.
//!
//! Pairing: each side has its own arrays, set once; the run is `ROUNDS` rounds of `ITERS`
//! iterations per side, one side after the other, and which of offload and raw goes first
//! alternates from round to round (the WGSL side runs first or last, opposite offload). A
//! round's MB/s is its fastest iteration after its first. A kernel's ratio is the median
//! over rounds of offload MB/s / raw MB/s (the spread, min–max, is printed beside it); the
//! MB/s columns are medians over rounds.
//!
//! Defaults: N = 2^25 (BabelStream's), 6 rounds of 6 iterations, 36 iterations per side
//! (BabelStream runs 100; on lavapipe on the 2-core VM one iteration of the five kernels
//! takes about 1 s, and the bench runs three sides: about 3 minutes in all; 3 iterations
//! a round left a best of 2, too few to tell 5% on this VM); override
//! with `OFFLOAD_BABELSTREAM_N`, `OFFLOAD_BABELSTREAM_ITERS` (per round, at least 2: the
//! first is not counted) and `OFFLOAD_BABELSTREAM_ROUNDS`. The output says what was used.
//!
//! Run with `cargo bench -p offload-vulkan --features wgsl --bench babelstream`. Without a
//! Vulkan driver it says so and measures nothing.

use std::rc::Rc;
use std::time::Instant;

use ash::vk;
use offload_core::{
    Arg, Buffer, Device, Dims, Kernel, MemKind, Module, NoPlatforms, Offload, Program, Queue,
    Source, Uninit,
};

// The raw-ash side: device, buffers, pipelines, submissions (shared with vulkan.rs).
#[path = "common/raw.rs"]
mod raw;
use raw::{RawBuffer, RawDevice, RawPipeline, RawSubmitter};

use offload_bench::babelstream::{
    self, KERNELS, Precision, Side, check, median, min_max, rates, run_round,
};

const WGSL: &str = include_str!("babelstream.wgsl");

// The start values, the kernels and what each moves, the round, the check: shared with
// the host and CUDA BabelStreams (offload-bench).
const START_A: f32 = babelstream::START_A as f32;
const START_B: f32 = babelstream::START_B as f32;
const START_C: f32 = babelstream::START_C as f32;
const SCALAR: f32 = babelstream::SCALAR as f32;

/// Threads per workgroup of every kernel (the WGSL's `@workgroup_size`).
const BLOCK: u32 = 256;
/// Workgroups of the dot (each writes one partial sum).
const DOT_GROUPS: u32 = 256;
/// The most workgroups in one grid dimension Vulkan guarantees.
const MAX_GRID: u32 = 65_535;

/// The storage bindings each kernel uses (a = 0, b = 1, c = 2, sums = 3), in binding
/// order: offload's parameters, and the raw side's set layouts.
const BINDINGS: [&[u32]; 5] = [&[0, 2], &[1, 2], &[0, 1, 2], &[0, 1, 2], &[0, 1, 3]];

/// The run's sizes: from the environment, or the defaults.
struct Setup {
    n: u32,
    iters: usize,
    rounds: usize,
}

impl Setup {
    fn from_env() -> Setup {
        let sizes = babelstream::Sizes::from_env(1 << 25, 6, 6);
        Setup {
            n: sizes.n,
            iters: sizes.iters,
            rounds: sizes.rounds,
        }
    }

    fn bytes(&self) -> usize {
        self.n as usize * 4
    }

    /// The grid of the element kernels: one thread per element, 2-D past `MAX_GRID`
    /// groups (the kernels index `x + y * groups.x * BLOCK`).
    fn grid(&self) -> [u32; 3] {
        let groups = self.n.div_ceil(BLOCK);
        if groups <= MAX_GRID {
            return [groups, 1, 1];
        }
        let x = 32_768;
        let y = groups.div_ceil(x);
        assert!(y <= MAX_GRID, "N too large for a 2-D grid");
        [x, y, 1]
    }
}

fn start() -> Option<Offload<offload_core::Ready, NoPlatforms>> {
    Offload::<Uninit, NoPlatforms>::builder()
        .platform(offload_vulkan::platform())
        .start()
        .ok()
}

/// The partial sums of the dot, added on the host.
fn host_sum(partials: &[f32]) -> f64 {
    partials.iter().map(|&p| f64::from(p)).sum()
}

/// offload's side: one program's kernels on the runtime's arrays.
struct OffloadSide {
    name: &'static str,
    queue: Queue,
    kernels: Vec<Kernel>,
    _module: Module,
    arrays: OffloadArrays,
    dims: Dims,
    n: u32,
    partials: Vec<u8>,
}

/// An offload side's arrays.
struct OffloadArrays {
    a: Buffer,
    b: Buffer,
    c: Buffer,
    sums: Buffer,
}

impl OffloadSide {
    fn new(name: &'static str, dev: &Device, program: Program, setup: &Setup) -> OffloadSide {
        let module = program.load(dev).expect("the kernels load");
        let alloc = |len| dev.alloc(len, MemKind::Device).expect("an array");
        let arrays = OffloadArrays {
            a: alloc(setup.bytes()),
            b: alloc(setup.bytes()),
            c: alloc(setup.bytes()),
            sums: alloc(DOT_GROUPS as usize * 4),
        };
        let kernels = KERNELS
            .iter()
            .map(|(k, _)| module.kernel(k).expect("a kernel"))
            .collect();
        let mut side = OffloadSide {
            name,
            queue: dev.queue().expect("a queue"),
            kernels,
            _module: module,
            arrays,
            dims: Dims::grid(setup.grid()).block([BLOCK, 1, 1]),
            n: setup.n,
            partials: vec![0; DOT_GROUPS as usize * 4],
        };
        // The first dispatch of each kernel compiles it on lavapipe.
        side.init();
        for k in 0..KERNELS.len() {
            side.run(k);
        }
        side
    }
}

impl Side for OffloadSide {
    type Elem = f32;

    fn name(&self) -> &'static str {
        self.name
    }

    fn init(&mut self) {
        let x = &self.arrays;
        let len = self.n as usize * 4;
        for (buf, value) in [(&x.a, START_A), (&x.b, START_B), (&x.c, START_C)] {
            self.queue
                .fill(buf, 0, len, &value.to_ne_bytes())
                .expect("fill");
        }
        self.queue.sync().expect("filled");
    }

    fn run(&mut self, k: usize) -> Option<f64> {
        let x = &self.arrays;
        let (a, b, c) = (Arg::buffer(&x.a), Arg::buffer(&x.b), Arg::buffer(&x.c));
        let (n, s) = (Arg::scalar(&self.n), Arg::scalar(&SCALAR));
        let (args, dims) = match k {
            0 => (vec![a, c, n], self.dims),
            1 => (vec![b, c, s, n], self.dims),
            2 => (vec![a, b, c, n], self.dims),
            3 => (vec![a, b, c, s, n], self.dims),
            _ => (
                vec![a, b, Arg::buffer(&x.sums), n],
                Dims::grid([DOT_GROUPS, 1, 1]).block([BLOCK, 1, 1]),
            ),
        };
        // SAFETY: the kernels index only below `n`, the length of every array given, and
        // the dot writes one partial per group of its `DOT_GROUPS`, the length of `sums`.
        unsafe { self.queue.launch(&self.kernels[k], dims, &args) }.expect("launch");
        self.queue.sync().expect("sync");
        (k == 4).then(|| {
            x.sums.read(0, &mut self.partials).expect("read the sums");
            let partials: Vec<f32> = self
                .partials
                .chunks_exact(4)
                .map(|w| f32::from_ne_bytes(w.try_into().unwrap()))
                .collect();
            host_sum(&partials)
        })
    }

    fn arrays(&mut self) -> [Vec<f32>; 3] {
        let x = &self.arrays;
        [&x.a, &x.b, &x.c].map(|buf| {
            let mut bytes = vec![0u8; self.n as usize * 4];
            buf.read(0, &mut bytes).expect("read back");
            bytes
                .chunks_exact(4)
                .map(|w| f32::from_ne_bytes(w.try_into().unwrap()))
                .collect()
        })
    }
}

/// The raw side: the same SPIR-V dispatched by hand.
struct RawSide {
    pipelines: Vec<RawPipeline>,
    /// a, b, c (`DEVICE_LOCAL`), then the partial sums (host-visible, mapped).
    buffers: [RawBuffer; 4],
    sums: *const f32,
    /// Host-visible memory the arrays are copied into to check them.
    readback: RawBuffer,
    submitter: RawSubmitter,
    grid: [u32; 3],
    n: u32,
}

impl RawSide {
    fn new(words: &[u32], setup: &Setup) -> RawSide {
        let dev = Rc::new(RawDevice::new());
        let bytes = setup.bytes() as u64;
        let device = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let buffers = [
            RawBuffer::new(&dev, bytes, device),
            RawBuffer::new(&dev, bytes, device),
            RawBuffer::new(&dev, bytes, device),
            RawBuffer::new(&dev, u64::from(DOT_GROUPS) * 4, host),
        ];
        let sums = buffers[3].map().cast::<f32>().cast_const();
        let readback = RawBuffer::new(&dev, bytes, host | vk::MemoryPropertyFlags::HOST_CACHED);
        let pipelines = KERNELS
            .iter()
            .zip(BINDINGS)
            .map(|(&(name, _), bindings)| {
                // The push-constant block: `Scaled { scalar, n }` or `Count { n }`.
                let push = if matches!(name, "mul" | "triad") {
                    8
                } else {
                    4
                };
                let p = RawPipeline::new(&dev, words, name, bindings, push);
                let bound: Vec<&RawBuffer> =
                    bindings.iter().map(|&b| &buffers[b as usize]).collect();
                p.bind(bindings, &bound);
                p
            })
            .collect();
        let mut side = RawSide {
            pipelines,
            buffers,
            sums,
            readback,
            submitter: RawSubmitter::new(&dev),
            grid: setup.grid(),
            n: setup.n,
        };
        // The first dispatch of each kernel compiles it on lavapipe.
        side.init();
        for k in 0..KERNELS.len() {
            side.run(k);
        }
        side
    }
}

impl Side for RawSide {
    type Elem = f32;

    fn name(&self) -> &'static str {
        "raw"
    }

    fn init(&mut self) {
        let bytes = u64::from(self.n) * 4;
        // SAFETY: the buffers are live and `bytes` long (a multiple of 4).
        unsafe {
            self.submitter.run(|d, cb| {
                for (buf, value) in self.buffers.iter().zip([START_A, START_B, START_C]) {
                    d.cmd_fill_buffer(cb, buf.buffer, 0, bytes, value.to_bits());
                }
            });
        }
    }

    fn run(&mut self, k: usize) -> Option<f64> {
        let n = self.n.to_ne_bytes();
        let mut scaled = [0u8; 8];
        scaled[..4].copy_from_slice(&SCALAR.to_ne_bytes());
        scaled[4..].copy_from_slice(&n);
        let push: &[u8] = if k == 1 || k == 3 { &scaled } else { &n };
        let grid = if k == 4 {
            [DOT_GROUPS, 1, 1]
        } else {
            self.grid
        };
        let pipeline = &self.pipelines[k];
        // SAFETY: the pipeline's set holds the kernel's buffers, each as long as the kernel
        // indexes (`n` elements, `DOT_GROUPS` sums); `push` is its push-constant block.
        unsafe {
            self.submitter.run(|d, cb| {
                pipeline.record_bind(cb, push);
                d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
            });
        }
        (k == 4).then(|| {
            // SAFETY: the mapping holds `DOT_GROUPS` f32s, coherent, written by the dot that
            // was just waited for; nothing writes it while the slice lives.
            let partials = unsafe { std::slice::from_raw_parts(self.sums, DOT_GROUPS as usize) };
            host_sum(partials)
        })
    }

    fn arrays(&mut self) -> [Vec<f32>; 3] {
        let bytes = u64::from(self.n) * 4;
        let mapped = self.readback.map().cast::<f32>().cast_const();
        let arrays = [0, 1, 2].map(|i| {
            let src = self.buffers[i].buffer;
            let dst = self.readback.buffer;
            // SAFETY: both buffers are live and at least `bytes` long; the barrier makes the
            // copy visible to the host read after the wait.
            unsafe {
                self.submitter.run(|d, cb| {
                    d.cmd_copy_buffer(cb, src, dst, &[vk::BufferCopy::default().size(bytes)]);
                    d.cmd_pipeline_barrier(
                        cb,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::PipelineStageFlags::HOST,
                        vk::DependencyFlags::empty(),
                        &[vk::MemoryBarrier::default()
                            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                            .dst_access_mask(vk::AccessFlags::HOST_READ)],
                        &[],
                        &[],
                    );
                });
            }
            // SAFETY: the mapping holds `n` f32s, just written by the copy waited for.
            unsafe { std::slice::from_raw_parts(mapped, self.n as usize) }.to_vec()
        });
        // SAFETY: mapped above; no pointer into it is used after this.
        unsafe { self.readback.dev.device.unmap_memory(self.readback.memory) };
        arrays
    }
}

fn main() {
    let Some(rt) = start() else {
        println!("no Vulkan driver: nothing to measure");
        return;
    };
    let setup = Setup::from_env();
    let words = raw::spirv_words(WGSL);
    let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let dev = rt.devices().expect("devices").remove(0);
    println!(
        "BabelStream on Vulkan ({}), f32, N = {} ({:.1} MB per array), {} rounds of {} \
         iterations per side (the first of each round not counted)",
        dev.info().map(|i| i.name).unwrap_or_default(),
        setup.n,
        setup.bytes() as f64 / 1e6,
        setup.rounds,
        setup.iters
    );
    let mut offload = OffloadSide::new("offload", &dev, Program::new(&image), &setup);
    let mut checked = OffloadSide::new(
        "offload (WGSL)",
        &dev,
        Program::from_source(Source::wgsl(WGSL)),
        &setup,
    );
    let mut raw = RawSide::new(&words, &setup);

    let mut sides: [&mut dyn Side<Elem = f32>; 3] = [&mut offload, &mut raw, &mut checked];
    for side in sides.iter_mut() {
        side.init();
    }
    // Per round: each side's MB/s per kernel; each side's last dot.
    let mut rounds: Vec<[[f64; 5]; 3]> = Vec::new();
    let mut sums = [0.0; 3];
    let started = Instant::now();
    for round in 0..setup.rounds {
        // Which of offload and raw goes first alternates; the WGSL side alternates with
        // offload (first or last).
        let order: [usize; 3] = if round % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        let mut measured = [[0.0; 5]; 3];
        for i in order {
            let (times, sum) = run_round(&mut *sides[i], setup.iters);
            measured[i] = rates(&times, setup.bytes() as u64);
            sums[i] = sum;
        }
        println!(
            "round {}: offload / raw {}",
            round + 1,
            (0..5)
                .map(|k| format!("{} {:.3}", KERNELS[k].0, measured[0][k] / measured[1][k]))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rounds.push(measured);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = setup.rounds * setup.iters;
    for (side, sum) in sides.iter_mut().zip(sums) {
        if let Err(why) = check(&mut **side, total, u64::from(setup.n), sum, Precision::F32) {
            println!("FAILED verification: {why}");
            std::process::exit(1);
        }
    }
    println!(
        "{} rounds in {elapsed:.0} s; every side verified after its {total} iterations\n",
        setup.rounds
    );
    println!(
        "{:<8} {:>12} {:>12} {:>8} {:>15}   {:>14} {:>10}",
        "kernel", "offload MB/s", "raw MB/s", "ratio", "ratio min-max", "WGSL MB/s", "WGSL/SPIR-V"
    );
    let column =
        |side: usize, k: usize| -> Vec<f64> { rounds.iter().map(|r| r[side][k]).collect() };
    let mut worst = f64::INFINITY;
    for (k, (name, _)) in KERNELS.iter().enumerate() {
        let mut ratios: Vec<f64> = rounds.iter().map(|r| r[0][k] / r[1][k]).collect();
        let (lo, hi) = min_max(&ratios);
        let ratio = median(&mut ratios);
        worst = worst.min(ratio);
        let mut checks: Vec<f64> = rounds.iter().map(|r| r[2][k] / r[0][k]).collect();
        println!(
            "{:<8} {:>12.0} {:>12.0} {:>8.3} {:>7.3}-{:<7.3}   {:>14.0} {:>10.3}",
            name,
            median(&mut column(0, k)),
            median(&mut column(1, k)),
            ratio,
            lo,
            hi,
            median(&mut column(2, k)),
            median(&mut checks),
        );
    }
    println!(
        "\nratio = median over rounds of offload MB/s / raw MB/s (goal: >= 0.95 for every \
         kernel; worst {worst:.3}); WGSL/SPIR-V = offload's bounds-checked WGSL build over \
         the same calls with naga's SPIR-V (information)"
    );
    drop((offload, checked, raw));
    rt.shutdown().expect("shutdown");
}
