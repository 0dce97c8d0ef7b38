//! Time to first launch on every rank with the job cache against every rank compiling
//! alone, in the same run: each round loads a program from C source none has seen (no disk
//! cache: the cost of a cold job), launches it and syncs, once through the job cache and
//! once with it removed (`set_shared_cache(None)`), in alternating order. Prints, per way,
//! the median over rounds of the slowest rank's time (when the whole job can go on) and of
//! the mean rank's, the job's compiles, and the ratio of the two ways paired by round
//! (median and quartiles: a round's two ways run back to back, under the same load). Not
//! criterion: it must run under `mpiexec`.
//!
//! `cargo build --release -p offload-mpi-programs --bin offload-mpi-job-cache-bench`
//! `mpiexec -n 4 target/release/offload-mpi-job-cache-bench [ROUNDS]`

mod common;

use std::time::Instant;

use common::{Host, Rt, fail};
use mpi::traits::*;
use offload_core::{Device, Offload, Source, Uninit};
use offload_mpi::JobCache;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(Ok(10), |r| r.parse())
        .unwrap_or_else(|e| fail(-1, format!("ROUNDS: {e}")));
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .unwrap_or_else(|| fail(-1, "MPI initialises once"));
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    let rt: Rt = Offload::<Uninit, Host>::builder()
        .compile_cache(None)
        .start()
        .unwrap_or_else(|e| fail(me, e));
    let dev = rt.devices().unwrap_or_else(|e| fail(me, e)).remove(0);
    offload_mpi::attach(&universe, rt.clone()).unwrap_or_else(|e| fail(me, e));
    let cache = JobCache::install(&universe).unwrap_or_else(|e| fail(me, e));
    let nonce = {
        let mut t = [std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)];
        world.process_at_rank(0).broadcast_into(&mut t[..]);
        t[0]
    };
    // One warm-up load each way (the compiler's identity, the first dlopen).
    let mut times = [Vec::new(), Vec::new()]; // [job cache, alone]: (slowest, mean) per round
    let mut compiles = [0u64, 0];
    for round in 0..=rounds {
        for way in [round % 2, 1 - round % 2] {
            let shared = (way == 1).then(|| offload_core::set_shared_cache(None));
            let before = offload_core::compile_stats().compiles;
            world.barrier();
            let start = Instant::now();
            first_launch(&dev, &format!("{nonce} {round} {way}"), me);
            let secs = start.elapsed().as_secs_f64();
            let compiled = offload_core::compile_stats().compiles - before;
            if let Some(shared) = shared {
                offload_core::set_shared_cache(shared);
            }
            let mut all = vec![0f64; n as usize];
            world.all_gather_into(&secs, &mut all[..]);
            let mut job_compiles = 0u64;
            world.all_reduce_into(
                &compiled,
                &mut job_compiles,
                mpi::collective::SystemOperation::sum(),
            );
            if round > 0 {
                let slowest = all.iter().copied().fold(0.0, f64::max);
                let mean = all.iter().sum::<f64>() / f64::from(n);
                times[way].push((slowest, mean));
                compiles[way] += job_compiles;
            }
        }
    }
    if me == 0 {
        println!(
            "time to first launch (load from C source + launch + sync) on {n} ranks, \
             median of {rounds} rounds, same run:"
        );
        for (way, name) in [(0, "job cache"), (1, "each rank compiling")] {
            let median = |pick: fn(&(f64, f64)) -> f64| {
                let mut v: Vec<f64> = times[way].iter().map(pick).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            println!(
                "{name:>20}: slowest rank {:>7.1} ms, mean rank {:>7.1} ms, {:.1} compiles per job",
                median(|t| t.0) * 1e3,
                median(|t| t.1) * 1e3,
                compiles[way] as f64 / rounds as f64
            );
        }
        // Paired by round: both ways of a round ran back to back, under the same load.
        let mut ratios: Vec<f64> = times[0]
            .iter()
            .zip(&times[1])
            .map(|(cached, alone)| cached.0 / alone.0)
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "{:>20}: median {:.2} [{:.2}–{:.2}] (slowest rank, job cache / each rank compiling)",
            "paired ratio",
            ratios[ratios.len() / 2],
            ratios[ratios.len() / 4],
            ratios[ratios.len() * 3 / 4]
        );
    }
    drop(cache);
    drop(rt);
    drop(world);
    drop(universe);
}

/// Loads a `put` kernel whose text holds `name`, launches it over 64 elements and syncs.
fn first_launch(dev: &Device, name: &str, me: i32) {
    let source = Source::c(format!(
        "#include \"offload_host.h\"\n/* job cache bench {name} */\n{}",
        common::put_kernel(9)
    ));
    common::launch_put(dev, source, 9, me);
}
