//! MPI program for tests/mpiexec.rs (a rank killed): the ranks exchange a buffer (IPC, or
//! staged with `OFFLOAD_MPI_STAGED=1`), then the last rank SIGKILLs itself. The survivors
//! wait until offload sees it dead, send to it (that must fail, typed), receive from it
//! (likewise), and end with `MPI_Finalize` only. A thread records offload's finalize
//! report as soon as the hook ran, before MPI's own part of `MPI_Finalize` — which, in
//! MPICH 4.0, waits for the dead rank and never returns: the thread then ends the process
//! after `GRACE`.
//!
//! With `late`, the last rank instead sleeps `LATE` before its SIGKILL, and the survivors
//! finalize right away: their hook cannot see a live rank dead, so it waits for it until
//! `OFFLOAD_MPI_FINALIZE_TIMEOUT` runs out and reports it unresponsive.
//!
//! Every rank writes its lines to `DIR/rank-N.txt` (and stdout): MPICH's process manager
//! may lose what ranks print once one died.
//!
//! `mpiexec -disable-auto-cleanup -n 3 sh -c 'trap "" USR1; "$0" "$@"; exit $?' target/debug/offload-mpi-killed DIR`
//! (`-disable-auto-cleanup` and the shell: see tests/mpiexec.rs).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Rt, fail, say};
use mpi::traits::*;
use offload_core::{Error, MemKind};

/// How long a survivor waits for `MPI_Finalize` to return after offload's hook ran.
const GRACE: Duration = Duration::from_secs(3);
/// Bytes each rank sends.
const LEN: usize = 1 << 16;
/// Bytes rank 0 sends the victim that it never receives.
const UNRECEIVED: usize = 4 << 20;
/// How long the last rank lives on with `late`.
const LATE: Duration = Duration::from_secs(8);
/// A rank still running after this ends itself (no rank outlives a killed `mpiexec`).
const WATCHDOG: Duration = Duration::from_secs(150);

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| fail(-1, "usage: DIR [late]")),
    );
    let late = std::env::args().any(|a| a == "late");
    common::watchdog(WATCHDOG);
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let rt = Rt::init().unwrap_or_else(|e| fail(-1, e));
    let dev = rt.devices().unwrap_or_else(|e| fail(-1, e)).remove(0);
    offload_mpi::attach(&universe, rt.clone()).unwrap_or_else(|e| fail(-1, e));
    let ranks = offload_mpi::Ranks::new(&rt, &world, &dev).unwrap_or_else(|e| fail(-1, e));
    drop(rt);
    let (me, n) = (ranks.rank(), ranks.size());
    common::log_to(me, dir.join(format!("rank-{me}.txt")));
    let victim = n - 1;
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);

    let buf = common::ring_step(&ranks, &dev, LEN, next, prev);
    ranks.wait_sent(next).unwrap_or_else(|e| fail(me, e));
    say(format!(
        "exchanged a buffer with ranks {prev} and {next} ({:?})",
        ranks.route(next)
    ));

    // Everyone received what the victim sent (staged, its bytes may need it alive to
    // leave), then rank 0 sends it 4 MiB it never receives (staged: an `MPI_Isend` that
    // cannot complete; IPC: a delivery it never takes) and tells it to die.
    world.barrier();
    if me == 0 {
        let big = dev
            .alloc_exportable(UNRECEIVED, MemKind::Device)
            .unwrap_or_else(|e| fail(me, e));
        ranks
            .send(&big, 0..UNRECEIVED, victim, 50)
            .unwrap_or_else(|e| fail(me, e));
        say(format!(
            "sent {UNRECEIVED} bytes rank {victim} never receives"
        ));
        world.process_at_rank(victim).send_with_tag(&[1u8][..], 99);
    }
    if me == victim {
        let _ = world.process_at_rank(0).receive_vec_with_tag::<u8>(99);
        if late {
            say(format!(
                "not finalizing: SIGKILL to myself in {} s",
                LATE.as_secs()
            ));
            std::thread::sleep(LATE);
        }
        say("SIGKILL to myself");
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    if late {
        say(format!("finalizing while rank {victim} lives on"));
    } else {
        survive(&ranks, &buf, victim);
    }

    drop(world);
    common::finalize(universe, GRACE);
    drop(ranks);
}

/// What a survivor does once the victim died: waits until offload sees it dead, then
/// sends to it and receives from it, which must fail typed.
fn survive(ranks: &offload_mpi::Ranks, buf: &offload_core::Buffer, victim: i32) {
    let me = ranks.rank();
    let waited = Instant::now();
    while !ranks.is_dead(victim) {
        if waited.elapsed() > Duration::from_secs(30) {
            fail(me, format!("rank {victim} is not seen dead after 30 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    say(format!(
        "rank {victim} is dead (seen after {:.0} ms)",
        waited.elapsed().as_secs_f64() * 1e3
    ));
    match ranks.send(buf, 0..LEN, victim, 8) {
        Err(Error::Ipc { call, reason }) => say(format!(
            "a send to the dead rank failed: Error::Ipc {{ call: {call:?}, reason: {reason:?} }}"
        )),
        other => fail(me, format!("a send to the dead rank {victim}: {other:?}")),
    }
    match ranks.recv(victim, 9) {
        Err(Error::Ipc { call, reason }) => say(format!(
            "a receive from the dead rank failed: Error::Ipc {{ call: {call:?}, reason: {reason:?} }}"
        )),
        other => fail(
            me,
            format!("a receive from the dead rank {victim}: {other:?}"),
        ),
    }
}
