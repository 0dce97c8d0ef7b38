//! Cached IPC send vs `MPI_Send` of the same host bytes between two ranks, for 4 KiB,
//! 1 MiB and 64 MiB: prints the time of one transfer with its acknowledgement (a
//! round trip: the IPC sender waits until the receiver dropped its view, the MPI sender
//! until the receiver answered one byte). Not criterion: it must run under `mpiexec`.
//!
//! `cargo build --release -p offload-mpi-programs --bin offload-mpi-bench`
//! `mpiexec -n 2 target/release/offload-mpi-bench`

mod common;

use std::time::Instant;

use common::{Rt, fail};
use mpi::traits::*;
use offload_core::MemKind;
use offload_mpi::{Ranks, Route};

fn main() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let rt = Rt::init().unwrap_or_else(|e| fail(-1, e));
    let dev = rt.devices().unwrap_or_else(|e| fail(-1, e)).remove(0);
    offload_mpi::attach(&universe, rt.clone()).unwrap_or_else(|e| fail(-1, e));
    let ranks = Ranks::new(&rt, &world, &dev).unwrap_or_else(|e| fail(-1, e));
    drop(rt);
    let me = ranks.rank();
    if ranks.size() != 2 {
        fail(me, "run on 2 ranks: mpiexec -n 2 offload-mpi-bench");
    }
    let other = 1 - me;
    if ranks.route(other) != Some(Route::Ipc) {
        fail(
            me,
            "the two ranks must share a node (and OFFLOAD_MPI_STAGED unset)",
        );
    }
    for (len, iters) in [(4usize << 10, 2000u32), (1 << 20, 500), (64 << 20, 20)] {
        let buf = dev
            .alloc_exportable(len, MemKind::Device)
            .unwrap_or_else(|e| fail(me, e));
        let host = vec![3u8; len];
        let mut into = vec![0u8; len];
        let mut ack = [0u8; 1];
        buf.write(0, &host).unwrap_or_else(|e| fail(me, e));
        // One untimed IPC send: the export and the peer's import (the cache miss).
        let ipc = |n: u32| {
            for _ in 0..n {
                if me == 0 {
                    ranks
                        .send(&buf, 0..len, 1, 0)
                        .unwrap_or_else(|e| fail(me, e));
                    ranks.wait_sent(1).unwrap_or_else(|e| fail(me, e));
                } else {
                    drop(ranks.recv(0, 0).unwrap_or_else(|e| fail(me, e)));
                }
            }
        };
        ipc(1);
        world.barrier();
        let start = Instant::now();
        ipc(iters);
        let ipc_s = start.elapsed().as_secs_f64() / f64::from(iters);
        world.barrier();
        let start = Instant::now();
        for _ in 0..iters {
            if me == 0 {
                world.process_at_rank(1).send(&host[..]);
                world.process_at_rank(1).receive_into(&mut ack[..]);
            } else {
                world.process_at_rank(0).receive_into(&mut into[..]);
                world.process_at_rank(0).send(&ack[..]);
            }
        }
        let mpi_s = start.elapsed().as_secs_f64() / f64::from(iters);
        if me == 0 {
            println!(
                "{:>9} bytes: cached IPC send {:>10.1} µs, MPI_Send {:>10.1} µs ({iters} round trips each)",
                len,
                ipc_s * 1e6,
                mpi_s * 1e6
            );
        }
        world.barrier();
    }
    drop(ranks);
    drop(world);
    drop(universe);
}
