//! BabelStream on the host backend, beside BabelStream's own OpenMP loops, in one run.
//!
//! BabelStream's five kernels — copy `c = a`, mul `b = s·c`, add `c = a + b`, triad
//! `a = b + s·c`, dot `Σ a·b` — on `f64` arrays of N = 2^25 elements (BabelStream's
//! default), with its start values (a = 0.1, b = 0.2, c = 0, s = 0.4), its order (each
//! iteration runs the five in turn, each timed on its own), its figure (MB/s = bytes moved
//! ÷ the fastest of the iterations, the first excluded; copy, mul and dot move 2N
//! elements, add and triad 3N) and its check (the arrays against the scalar recurrence
//! run as many times, dot against the product of the final values, relative error ≤ 100 ε).
//!
//! Sides, each one a full BabelStream run (initialisation included, untimed):
//! * `openmp`: benches/babelstream/openmp.c, BabelStream's OpenMP model as a C library
//!   built with the host backend's own compiler (`$CC`, else `cc`) and
//!   `-O3 -march=native -fopenmp`, opened with `libloading`;
//! * `offload/B`: benches/babelstream/kernels.c, loaded as a user loads C
//!   (`Program::from_source(Source::c(..))`, the host backend's default flags), each
//!   kernel launched and waited for (`Queue::launch` + `Queue::sync`) with blocks of B
//!   threads (256, [`Dims::for_num_elems`]'s default, and 65,536); dot writes one partial
//!   sum per block, which the host reads and adds up inside the timed region;
//! * `triad_nt`: the triad with non-temporal stores, in openmp.c and as an offload kernel
//!   (kernels.c), the practical ceiling of triad on this machine (triad only).
//!
//! The sides alternate round by round (the first side rotates), and each kernel's ratio
//! offload / openmp is the median of its per-round ratios: both sides of a round see the
//! same machine. Environment: `OFFLOAD_BABELSTREAM_N` (elements, default 2^25),
//! `OFFLOAD_BABELSTREAM_ITERS` (default 100, BabelStream's), `OFFLOAD_BABELSTREAM_ROUNDS`
//! (default 5), `OFFLOAD_BABELSTREAM_CFLAGS` (compile options for kernels.c, after the
//! host backend's defaults, as `Source::option` adds them). A failed check prints `FAILED` and exits 1. Without a C compiler with
//! OpenMP the bench says so and measures offload alone.
//!
//! Run with `cargo bench --bench babelstream` (docs/benchmarks.md, "BabelStream").

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use offload::{Arg, Buffer, Device, Dims, Kernel, MemKind, Offload, Program, Queue, Source};

// The start values, the kernels and what each moves, the check: shared with the Vulkan
// and CUDA BabelStreams (offload-bench).
use offload_bench::babelstream::{
    self, KERNELS, Precision, SCALAR, START_A, START_B, START_C, check_arrays, median,
};
/// The block sizes offload runs with.
const BLOCKS: [u32; 2] = [Dims::BLOCK_1D, 65_536];

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The fastest time of each kernel over one run's iterations (the first excluded).
type Best = [Duration; 5];

/// Times `f` and keeps the fastest in `best` unless this is the first iteration.
fn timed(best: &mut Duration, first: bool, f: impl FnOnce()) {
    let start = Instant::now();
    f();
    let took = start.elapsed();
    if !first && took < *best {
        *best = took;
    }
}

/// BabelStream's check of one side's arrays and last dot, printed when it fails.
fn check(side: &str, n: usize, iters: usize, arrays: [&[f64]; 3], dot: f64) -> bool {
    let out = check_arrays(side, arrays, iters, n as u64, dot, Precision::F64);
    if let Err(why) = &out {
        eprintln!("FAILED: {why}");
    }
    out.is_ok()
}

// ---- offload ----

struct OffloadSide {
    queue: Queue,
    kernels: Vec<Kernel>,
    init: Kernel,
    triad_nt: Kernel,
    arrays: [Buffer; 3],
    sums: Buffer,
    n: usize,
}

impl OffloadSide {
    fn new(dev: &Device, n: usize) -> offload::Result<OffloadSide> {
        // OFFLOAD_BABELSTREAM_CFLAGS: options of the user's, after the host's defaults.
        let flags = std::env::var("OFFLOAD_BABELSTREAM_CFLAGS").unwrap_or_default();
        let source = flags
            .split_whitespace()
            .fold(Source::c(include_str!("babelstream/kernels.c")), |s, f| {
                s.option(f)
            });
        let module = Program::from_source(source).load(dev)?;
        let kernels = KERNELS
            .iter()
            .map(|(k, _)| module.kernel(k))
            .collect::<offload::Result<Vec<_>>>()?;
        let alloc = || dev.alloc(n * 8, MemKind::Device);
        let blocks = n.div_ceil(BLOCKS.iter().copied().min().unwrap_or(1) as usize);
        Ok(OffloadSide {
            queue: dev.queue()?,
            init: module.kernel("init")?,
            triad_nt: module.kernel("triad_nt")?,
            kernels,
            arrays: [alloc()?, alloc()?, alloc()?],
            sums: dev.alloc(blocks * 8, MemKind::Device)?,
            n,
        })
    }

    fn launch(&self, kernel: &Kernel, block: u32, args: &[Arg<'_>]) {
        let blocks = (self.n as u64).div_ceil(u64::from(block)) as u32;
        // SAFETY: every kernel of kernels.c reads and writes elements [0, n) of its array
        // arguments (each holds n doubles) and dot writes one double per block into
        // `sums`, which holds one per block of the smallest block size; the argument kinds
        // match each kernel's parameter string (offload checks them too).
        unsafe {
            self.queue.launch(
                kernel,
                Dims::grid([blocks, 1, 1]).block([block, 1, 1]),
                args,
            )
        }
        .expect("launch");
        self.queue.sync().expect("sync");
    }

    /// One BabelStream run with blocks of `block` threads.
    fn run(&self, block: u32, iters: usize) -> (Best, bool) {
        let [a, b, c] = &self.arrays;
        let n = self.n as u64;
        let (ba, bb, bc) = (Arg::buffer(a), Arg::buffer(b), Arg::buffer(c));
        let s = Arg::scalar(&SCALAR);
        let count = Arg::scalar(&n);
        self.launch(
            &self.init,
            block,
            &[
                ba,
                bb,
                bc,
                Arg::scalar(&START_A),
                Arg::scalar(&START_B),
                Arg::scalar(&START_C),
                count,
            ],
        );
        let blocks = self.n.div_ceil(block as usize);
        let mut partial = vec![0u8; blocks * 8];
        let mut best = [Duration::MAX; 5];
        let mut dot = 0.0;
        for i in 0..iters {
            let first = i == 0;
            let k = &self.kernels;
            timed(&mut best[0], first, || {
                self.launch(&k[0], block, &[ba, bc, count])
            });
            timed(&mut best[1], first, || {
                self.launch(&k[1], block, &[bb, bc, s, count])
            });
            timed(&mut best[2], first, || {
                self.launch(&k[2], block, &[ba, bb, bc, count])
            });
            timed(&mut best[3], first, || {
                self.launch(&k[3], block, &[ba, bb, bc, s, count])
            });
            timed(&mut best[4], first, || {
                self.launch(&k[4], block, &[ba, bb, Arg::buffer(&self.sums), count]);
                self.sums
                    .read(0, &mut partial)
                    .expect("read the partial sums");
                dot = partial
                    .chunks_exact(8)
                    .map(|p| f64::from_ne_bytes(p.try_into().unwrap()))
                    .sum();
            });
        }
        let read = |buf: &Buffer| {
            let mut bytes = vec![0u8; self.n * 8];
            buf.read(0, &mut bytes).expect("read an array");
            bytes
                .chunks_exact(8)
                .map(|p| f64::from_ne_bytes(p.try_into().unwrap()))
                .collect::<Vec<f64>>()
        };
        let (va, vb, vc) = (read(a), read(b), read(c));
        let ok = check(
            &format!("offload/{block}"),
            self.n,
            iters,
            [&va, &vb, &vc],
            dot,
        );
        (best, ok)
    }
}

impl OffloadSide {
    /// The fastest non-temporal triad over `iters` (the first excluded).
    fn run_triad_nt(&self, block: u32, iters: usize) -> Duration {
        let [a, b, c] = &self.arrays;
        let (ba, bb, bc) = (Arg::buffer(a), Arg::buffer(b), Arg::buffer(c));
        let n = self.n as u64;
        let count = Arg::scalar(&n);
        let init = [
            ba,
            bb,
            bc,
            Arg::scalar(&START_A),
            Arg::scalar(&START_B),
            Arg::scalar(&START_C),
            count,
        ];
        self.launch(&self.init, block, &init);
        let mut best = Duration::MAX;
        for i in 0..iters {
            timed(&mut best, i == 0, || {
                self.launch(
                    &self.triad_nt,
                    block,
                    &[ba, bb, bc, Arg::scalar(&SCALAR), count],
                )
            });
        }
        best
    }
}

// ---- OpenMP ----

type Alloc = unsafe extern "C" fn(i64) -> *mut f64;
type Free = unsafe extern "C" fn(*mut f64);
type Init = unsafe extern "C" fn(*mut f64, *mut f64, *mut f64, f64, f64, f64, i32);
type Two = unsafe extern "C" fn(*mut f64, *mut f64, i32);
type TwoScaled = unsafe extern "C" fn(*mut f64, *mut f64, f64, i32);
type Three = unsafe extern "C" fn(*mut f64, *mut f64, *mut f64, i32);
type ThreeScaled = unsafe extern "C" fn(*mut f64, *mut f64, *mut f64, f64, i32);
type Dot = unsafe extern "C" fn(*mut f64, *mut f64, i32) -> f64;

struct OpenMp {
    _lib: libloading::Library,
    free: Free,
    init: Init,
    copy: Two,
    mul: TwoScaled,
    add: Three,
    triad: ThreeScaled,
    triad_nt: ThreeScaled,
    dot: Dot,
    arrays: [*mut f64; 3],
    n: usize,
}

/// Builds openmp.c into `dir` with the host backend's compiler.
fn build_openmp(dir: &Path) -> Result<PathBuf, String> {
    let cc = std::env::var_os("CC")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "cc".into());
    let source = dir.join("openmp.c");
    let library = dir.join("libbabel_openmp.so");
    std::fs::write(&source, include_str!("babelstream/openmp.c")).map_err(|e| e.to_string())?;
    let out = Command::new(&cc)
        .args(["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .map_err(|e| format!("{cc:?} did not run: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(library)
}

impl OpenMp {
    fn new(library: &Path, n: usize) -> Result<OpenMp, String> {
        // SAFETY: the library was just built from openmp.c, whose initialisers are
        // libgomp's; each symbol is looked up with the signature openmp.c defines it with.
        unsafe {
            let lib = libloading::Library::new(library).map_err(|e| e.to_string())?;
            let alloc: Alloc = *lib.get(b"babel_alloc\0").map_err(|e| e.to_string())?;
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get(concat!($name, "\0").as_bytes())
                        .map_err(|e| e.to_string())?
                };
            }
            let arrays = [alloc(n as i64), alloc(n as i64), alloc(n as i64)];
            if arrays.iter().any(|p| p.is_null()) {
                return Err("aligned_alloc failed".into());
            }
            Ok(OpenMp {
                free: sym!("babel_free"),
                init: sym!("babel_init"),
                copy: sym!("babel_copy"),
                mul: sym!("babel_mul"),
                add: sym!("babel_add"),
                triad: sym!("babel_triad"),
                triad_nt: sym!("babel_triad_nt"),
                dot: sym!("babel_dot"),
                arrays,
                n,
                _lib: lib,
            })
        }
    }

    fn run(&self, iters: usize) -> (Best, bool) {
        let [a, b, c] = self.arrays;
        let n = self.n as i32;
        let mut best = [Duration::MAX; 5];
        let mut dot = 0.0;
        // SAFETY: each array holds n doubles (babel_alloc(n)), live until `drop`; the
        // functions touch elements [0, n) only.
        unsafe {
            (self.init)(a, b, c, START_A, START_B, START_C, n);
            for i in 0..iters {
                let first = i == 0;
                timed(&mut best[0], first, || (self.copy)(a, c, n));
                timed(&mut best[1], first, || (self.mul)(b, c, SCALAR, n));
                timed(&mut best[2], first, || (self.add)(a, b, c, n));
                timed(&mut best[3], first, || (self.triad)(a, b, c, SCALAR, n));
                timed(&mut best[4], first, || dot = (self.dot)(a, b, n));
            }
        }
        // SAFETY: as above; the loops have returned, so nothing else uses the arrays.
        let view = |p: *mut f64| unsafe { std::slice::from_raw_parts(p, self.n) };
        let ok = check("openmp", self.n, iters, [view(a), view(b), view(c)], dot);
        (best, ok)
    }

    /// The fastest non-temporal triad over `iters` (the first excluded).
    fn run_triad_nt(&self, iters: usize) -> Duration {
        let [a, b, c] = self.arrays;
        let mut best = Duration::MAX;
        // SAFETY: as in `run`.
        unsafe {
            (self.init)(a, b, c, START_A, START_B, START_C, self.n as i32);
            for i in 0..iters {
                timed(&mut best, i == 0, || {
                    (self.triad_nt)(a, b, c, SCALAR, self.n as i32)
                });
            }
        }
        best
    }
}

impl Drop for OpenMp {
    fn drop(&mut self) {
        for p in self.arrays {
            // SAFETY: allocated by babel_alloc, freed once.
            unsafe { (self.free)(p) };
        }
    }
}

/// One side of a round: a full BabelStream run, or the non-temporal triad alone.
#[derive(Clone, Copy)]
enum Side {
    OpenMp,
    Offload(u32),
    OpenMpTriadNt,
    OffloadTriadNt(u32),
}

/// A triad time in the triad's slot, nothing in the others.
fn triad_only(t: Duration) -> Best {
    let mut best = [Duration::MAX; 5];
    best[3] = t;
    best
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no arguments of its own.
    let n = env("OFFLOAD_BABELSTREAM_N", 1 << 25);
    let iters = env("OFFLOAD_BABELSTREAM_ITERS", 100).max(2);
    let rounds = env("OFFLOAD_BABELSTREAM_ROUNDS", 5).max(1);
    assert!(n <= i32::MAX as usize, "N must fit BabelStream's int index");

    let rt = Offload::init().expect("offload init");
    let dev = rt
        .devices()
        .expect("devices")
        .into_iter()
        .find(|d| d.backend() == offload::BackendKind::Host)
        .expect("the host device");
    let ours = OffloadSide::new(&dev, n).expect("offload side");

    let dir = std::env::temp_dir().join(format!("offload-babelstream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let omp = build_openmp(&dir).and_then(|lib| OpenMp::new(&lib, n));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(why) = &omp {
        println!("OpenMP baseline unavailable ({why}): offload alone");
    }
    let omp = omp.ok();

    println!(
        "BabelStream, f64, N = {n} ({} MiB per array), {iters} iterations, {rounds} rounds, {} threads",
        (n * 8) >> 20,
        std::thread::available_parallelism().map_or(1, |c| c.get())
    );
    // Each side's rates per round, by kernel (NaN where a side does not run a kernel).
    let sides = [
        Side::OpenMp,
        Side::Offload(BLOCKS[0]),
        Side::Offload(BLOCKS[1]),
        Side::OpenMpTriadNt,
        Side::OffloadTriadNt(BLOCKS[0]),
    ];
    let mut rates: Vec<Vec<[f64; 5]>> = vec![Vec::new(); sides.len()];
    let mut ok = true;
    for round in 0..rounds {
        for k in 0..sides.len() {
            // The first side rotates from round to round.
            let s = (k + round) % sides.len();
            let best = match (sides[s], &omp) {
                (Side::OpenMp, Some(omp)) => {
                    let (best, good) = omp.run(iters);
                    ok &= good;
                    best
                }
                (Side::Offload(block), _) => {
                    let (best, good) = ours.run(block, iters);
                    ok &= good;
                    best
                }
                (Side::OpenMpTriadNt, Some(omp)) => triad_only(omp.run_triad_nt(iters)),
                (Side::OffloadTriadNt(block), _) => triad_only(ours.run_triad_nt(block, iters)),
                (_, None) => [Duration::MAX; 5],
            };
            rates[s].push(std::array::from_fn(|i| {
                babelstream::mb_per_s(KERNELS[i].1 * (n as u64) * 8, best[i])
            }));
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }

    // The median rate of `side`'s kernel `i`, and the median over rounds of its ratio to
    // `base`'s kernel `j` in the same round.
    let rate =
        |side: usize, i: usize| median(&mut rates[side].iter().map(|r| r[i]).collect::<Vec<_>>());
    let ratio = |side: usize, i: usize, base: usize, j: usize| {
        median(
            &mut rates[side]
                .iter()
                .zip(&rates[base])
                .map(|(r, b)| r[i] / b[j])
                .collect::<Vec<_>>(),
        )
    };
    println!(
        "\n{:<8} {:>12} {:>12} {:>8} {:>12} {:>8}",
        "kernel", "openmp MB/s", "offload/256", "ratio", "offload/64Ki", "ratio"
    );
    for (i, (name, _)) in KERNELS.iter().enumerate() {
        println!(
            "{name:<8} {:>12.0} {:>12.0} {:>8.3} {:>12.0} {:>8.3}",
            rate(0, i),
            rate(1, i),
            ratio(1, i, 0, i),
            rate(2, i),
            ratio(2, i, 0, i),
        );
    }
    let triad = 3;
    println!(
        "\ntriad with non-temporal stores: openmp {:.0} MB/s, offload/256 {:.0} MB/s (ratio {:.3})",
        rate(3, triad),
        rate(4, triad),
        ratio(4, triad, 3, triad),
    );
    println!(
        "triad with ordinary stores / openmp's non-temporal one: offload/256 {:.3}, offload/64Ki {:.3}, openmp {:.3}",
        ratio(1, triad, 3, triad),
        ratio(2, triad, 3, triad),
        ratio(0, triad, 3, triad),
    );
    println!("(ratios: medians over rounds of the two rates measured in the same round)");
    drop(ours);
    drop(dev);
    rt.shutdown().expect("shutdown");
    if !ok {
        println!("FAILED: a check failed (see above)");
        std::process::exit(1);
    }
}
