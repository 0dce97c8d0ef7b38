//! MPI program for tests/mpiexec.rs (test b): one buffer per rank passed around a ring for
//! many rounds, verified by rank 0 every round. Through IPC each rank exports its buffer
//! once and imports its predecessor's once (`offload_core::ipc::stats`); staged
//! (`OFFLOAD_MPI_STAGED=1`) nothing is exported or imported. Ends with `MPI_Finalize`.
//!
//! `mpiexec -n 4 target/debug/offload-mpi-ring [ROUNDS] [BYTES]` (default 1000 rounds of 1 MiB)

mod common;

use std::time::Instant;

use common::{Rt, fail};
use offload_core::{MemKind, ipc};
use offload_mpi::{Ranks, Route};

/// Bytes that differ in every round: a window of `base` starting at `round % 251`.
fn pattern(base: &[u8], round: usize, len: usize) -> &[u8] {
    &base[round % 251..round % 251 + len]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 20);

    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let rt = Rt::init().unwrap_or_else(|e| fail(-1, e));
    let dev = rt.devices().unwrap_or_else(|e| fail(-1, e)).remove(0);
    offload_mpi::attach(&universe, rt.clone()).unwrap_or_else(|e| fail(-1, e));
    let ranks = Ranks::new(&rt, &world, &dev).unwrap_or_else(|e| fail(-1, e));
    drop(rt);
    let (me, n) = (ranks.rank(), ranks.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let staged = ranks.route(next) == Some(Route::Staged);

    let own = dev
        .alloc_exportable(len, MemKind::Device)
        .unwrap_or_else(|e| fail(me, e));
    let mut out = vec![0u8; len];
    let base: Vec<u8> = (0..len + 251).map(|i| (i % 253) as u8).collect();
    let start = Instant::now();
    for round in 0..rounds {
        if me == 0 {
            let want = pattern(&base, round, len);
            own.write(0, want).unwrap_or_else(|e| fail(me, e));
            ranks
                .send(&own, 0..len, next, 1)
                .unwrap_or_else(|e| fail(me, e));
            let back = ranks.recv(prev, 1).unwrap_or_else(|e| fail(me, e));
            back.read(0, &mut out).unwrap_or_else(|e| fail(me, e));
            if out != want {
                fail(me, format!("round {round}: the data came back changed"));
            }
            drop(back);
            ranks.wait_sent(next).unwrap_or_else(|e| fail(me, e));
        } else {
            let got = ranks.recv(prev, 1).unwrap_or_else(|e| fail(me, e));
            own.copy_from(0, &got, 0, len)
                .unwrap_or_else(|e| fail(me, e));
            drop(got);
            ranks
                .send(&own, 0..len, next, 1)
                .unwrap_or_else(|e| fail(me, e));
            ranks.wait_sent(next).unwrap_or_else(|e| fail(me, e));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let s = ipc::stats();
    let (exports, imports) = if staged { (0, 0) } else { (1, 1) };
    if s.exports != exports || s.imports != imports {
        fail(
            me,
            format!(
                "{rounds} rounds: {} exports, {} imports, expected {exports} and {imports}",
                s.exports, s.imports
            ),
        );
    }
    println!(
        "rank {me}: {} ring of {n}: {rounds} rounds of {len} bytes verified in {secs:.3} s \
         ({:.1} µs per hop); exports {} imports {} cache hits {} misses {} one-shots {}",
        if staged { "staged" } else { "ipc" },
        secs * 1e6 / (rounds as f64 * f64::from(n)),
        s.exports,
        s.imports,
        s.cache_hits,
        s.cache_misses,
        s.one_shots,
    );
    drop(ranks);
    drop(world);
    drop(universe);
    match offload_mpi::finalize_report() {
        Some(r) if r.shut_down && r.was_last && r.errors.is_empty() => {}
        other => fail(me, format!("finalize report: {other:?}")),
    }
}
