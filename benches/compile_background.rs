//! What compiling in the background buys: eight host C programs started at once with
//! `Program::compile_in_background` and then loaded, against one program compiled at its
//! load, paired sample by sample (`offload_bench::paired`). Every iteration compiles: the
//! disk cache is off and every program's text is new.
//!
//! Goal: the eight take at most 1.5 × one compile × ceil(8 / pool size) — the pool keeps
//! every one of its threads compiling. The pool is `Config::compile_threads`
//! (`OFFLOAD_COMPILE_THREADS`; default the number of CPUs, at most 8). A C compile is
//! CPU-bound, so the goal needs a CPU free for each thread of the pool.
//!
//! Run: `cargo bench --bench compile_background` (`OFFLOAD_COMPILE_THREADS=n` for another
//! pool).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use offload::{BackendKind, Offload, Program, Source};
use offload_bench::paired;

const SAMPLES: usize = 10;

/// The kernel (benches/kernels/put.c, shared with the other compile benchmarks).
const C_KERNEL: &str = include_str!("kernels/put.c");

static FRESH: AtomicU64 = AtomicU64::new(0);

/// A program whose text no earlier iteration compiled.
fn fresh() -> Program {
    let n = FRESH.fetch_add(1, Ordering::Relaxed);
    let text = format!(
        "/* compile_background {} {n} */\n{C_KERNEL}",
        std::process::id()
    );
    Program::from_source(Source::c(text))
}

fn compile_background(c: &mut Criterion) {
    let rt = Offload::builder()
        .compile_cache(None)
        .start()
        .expect("init");
    let dev = rt.device(BackendKind::Host).expect("a host device");
    let threads = rt.config().expect("config").compile_threads;
    // No pool: the loads compile one after another, as one thread would.
    let pool = threads.max(1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let before = offload::compile_stats();
    let report = paired(
        c,
        "compile_background",
        ("8 programs in the background", "1 program compiled at load"),
        SAMPLES,
        || {
            let compiled = offload::compile_stats().compiles;
            let programs: Vec<Program> = (0..8).map(|_| fresh()).collect();
            for program in &programs {
                program.compile_in_background(&dev).expect("schedule");
            }
            for program in &programs {
                black_box(program.load(&dev).expect("load"));
            }
            // Each program compiled once: its load used the background compile.
            assert_eq!(offload::compile_stats().compiles - compiled, 8);
        },
        || {
            let compiled = offload::compile_stats().compiles;
            black_box(fresh().load(&dev).expect("load"));
            assert_eq!(offload::compile_stats().compiles - compiled, 1);
        },
    );
    let after = offload::compile_stats();
    let rounds = 8usize.div_ceil(pool);
    let goal = 1.5 * rounds as f64;
    println!(
        "compile_background: pool {threads} on {cpus} CPUs; 8 in the background / 1 at load = \
         {:.2} [{:.2}–{:.2}]; goal ≤ 1.5 × ceil(8 / {pool}) = {goal:.1}: {}; at most {} \
         compiles at once; {} compiles in the run",
        report.ratio.median,
        report.ratio.q1,
        report.ratio.q3,
        if report.ratio.median <= goal {
            "met"
        } else {
            "not met"
        },
        after.most_in_flight,
        after.compiles - before.compiles,
    );
    rt.shutdown().expect("shutdown");
}

criterion_group!(benches, compile_background);
criterion_main!(benches);
