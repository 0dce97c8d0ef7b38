//! MPI program for tests/mpiexec.rs (test a): ranks allocate, send through IPC and end with
//! `MPI_Finalize` only (the `Universe` dropped), never offload's shutdown. Each rank checks
//! that offload shut down inside finalize: the hook reported it, the queued work ran, its
//! mappings of peers' memory are closed and its buffer answers `Error::ShutDown`.
//!
//! `mpiexec -n 2 target/debug/offload-mpi-finalize`

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Rt, fail};
use offload_core::{Error, ipc};
use offload_mpi::{Ranks, Route};

static QUEUED_WORK_RAN: AtomicBool = AtomicBool::new(false);

fn main() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let rt = Rt::init().unwrap_or_else(|e| fail(-1, e));
    let dev = rt.devices().unwrap_or_else(|e| fail(-1, e)).remove(0);
    offload_mpi::attach(&universe, rt.clone()).unwrap_or_else(|e| fail(-1, e));
    if !matches!(
        offload_mpi::attach(&universe, rt.clone()),
        Err(Error::InvalidArgument { .. })
    ) {
        fail(-1, "a second attach was not refused");
    }
    let ranks = Ranks::new(&rt, &world, &dev).unwrap_or_else(|e| fail(-1, e));
    drop(rt); // the hook holds the only reference now
    let (me, n) = (ranks.rank(), ranks.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let staged = std::env::var(offload_mpi::STAGED_ENV).is_ok_and(|v| v == "1");
    let want = if staged { Route::Staged } else { Route::Ipc };
    if ranks.route(next) != Some(want) {
        fail(me, format!("route to {next}: {:?}", ranks.route(next)));
    }

    const LEN: usize = 1 << 20;
    let buf = common::ring_step(&ranks, &dev, LEN, next, prev);
    // With `unreceived`, one more send that nobody receives: finalize must still finish
    // (staged: the sentinel exchange discards it; IPC: the shutdown unmaps it).
    let unreceived = std::env::args().any(|a| a == "unreceived");
    if unreceived {
        ranks
            .send(&buf, 0..16, next, 99)
            .unwrap_or_else(|e| fail(me, e));
    }

    // Work still queued when MPI_Finalize starts: the shutdown inside it drains it.
    let queue = dev.queue().unwrap_or_else(|e| fail(me, e));
    queue
        .enqueue_host_fn(|| {
            std::thread::sleep(Duration::from_millis(100));
            QUEUED_WORK_RAN.store(true, Ordering::SeqCst);
        })
        .unwrap_or_else(|e| fail(me, e));

    let before = ipc::stats();
    // With `give-back`, the program shuts offload down itself before finalize.
    let given = std::env::args().any(|a| a == "give-back");
    let early =
        given.then(|| offload_mpi::give_back().unwrap_or_else(|| fail(me, "nothing to give back")));
    if given && offload_mpi::give_back().is_some() {
        fail(me, "a reference was given back twice");
    }
    drop(world);
    drop(universe); // MPI_Finalize, and nothing else

    let report =
        offload_mpi::finalize_report().unwrap_or_else(|| fail(me, "the finalize hook did not run"));
    let report = match early {
        None => report,
        Some(early) if !report.shut_down && report.errors.is_empty() => {
            println!(
                "rank {me}: gave the reference back before finalize; finalize ran only its MPI protocol"
            );
            early
        }
        Some(_) => fail(
            me,
            format!("finalize shut down again after give_back: {report:?}"),
        ),
    };
    let after = ipc::stats();
    if !report.shut_down || !report.was_last || !report.errors.is_empty() {
        fail(me, format!("finalize report: {report:?}"));
    }
    let discarded = usize::from(unreceived && staged);
    if report.discarded != discarded {
        fail(
            me,
            format!(
                "{} staged messages discarded, expected {discarded}",
                report.discarded
            ),
        );
    }
    if !QUEUED_WORK_RAN.load(Ordering::SeqCst) {
        fail(me, "queued work was not drained in finalize");
    }
    if after.live_imports != 0 || after.cached_mappings != 0 {
        fail(
            me,
            format!("mappings of peers' memory still open: {after:?}"),
        );
    }
    if !matches!(buf.write(0, &[1]), Err(Error::ShutDown { .. })) {
        fail(me, "a buffer still works after finalize");
    }
    println!(
        "rank {me}: offload shut down {} (last reference: {}, queued work drained, \
         discarded {}); ipc before finalize: exports {} imports {} live imports {}; after: live imports {}, \
         cached mappings {}, unmaps sent {} acked {} received {}",
        if given {
            "before MPI_Finalize"
        } else {
            "inside MPI_Finalize"
        },
        report.was_last,
        report.discarded,
        before.exports,
        before.imports,
        before.live_imports,
        after.live_imports,
        after.cached_mappings,
        after.unmaps_sent,
        after.unmaps_acked,
        after.unmaps_received,
    );
    drop(ranks); // kept past finalize on purpose: dropping it then is safe
}
