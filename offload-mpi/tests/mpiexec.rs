//! Runs the MPI programs of src/bin (and the example) under real `mpiexec` jobs of 2–4
//! ranks, each with a time limit, and checks what every rank printed. Jobs run one at a
//! time (MPICH ranks poll: jobs side by side would starve each other on a small machine).
//! Without `mpiexec` the tests skip, unless `CI=true`, where they fail.

use std::process::Command;
use std::sync::Mutex;

static ONE_JOB: Mutex<()> = Mutex::new(());

/// Seconds one job may run before `timeout` stops it (a hang is a failure, not a stuck CI).
const LIMIT_S: u32 = 120;

fn mpiexec_found() -> bool {
    let found = Command::new("mpiexec")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "mpiexec (Debian package mpich) is missing, and CI=true"
        );
        eprintln!("skipped: no mpiexec (install mpich)");
    }
    found
}

/// Runs `program args` on `n` ranks with `env`; returns stdout, after asserting exit 0.
fn job(n: u32, program: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("timeout");
    cmd.args([
        "--kill-after=10",
        &LIMIT_S.to_string(),
        "mpiexec",
        "-n",
        &n.to_string(),
        program,
    ]);
    cmd.args(args);
    cmd.env_remove(offload_mpi::STAGED_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("runs timeout and mpiexec");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mpiexec -n {n} {program} {args:?} {env:?}: {} (124: timed out after {LIMIT_S} s)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    print!("{stdout}");
    stdout
}

/// The lines of rank 0..n that contain `what`, one each.
fn every_rank_says(stdout: &str, n: u32, what: &str) {
    for rank in 0..n {
        let prefix = format!("rank {rank}: ");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(what)),
            "rank {rank} did not say {what:?}:\n{stdout}"
        );
    }
}

const FINALIZE: &str = env!("CARGO_BIN_EXE_offload-mpi-finalize");
const RING: &str = env!("CARGO_BIN_EXE_offload-mpi-ring");

#[test]
fn ranks_that_only_finalize_shut_offload_down_inside_mpi_finalize() {
    if !mpiexec_found() {
        return;
    }
    for n in [2, 4] {
        let out = job(n, FINALIZE, &[], &[]);
        every_rank_says(
            &out,
            n,
            "offload shut down inside MPI_Finalize (last reference: true, queued work drained",
        );
        // Each rank exported its buffer once and mapped its neighbour's once; after
        // finalize no mapping of a peer's memory is open.
        every_rank_says(
            &out,
            n,
            "exports 1 imports 1 live imports 1; after: live imports 0, cached mappings 0",
        );
    }
}

#[test]
fn a_reference_given_back_early_is_not_shut_down_again_in_finalize() {
    if !mpiexec_found() {
        return;
    }
    let out = job(2, FINALIZE, &["give-back"], &[]);
    every_rank_says(
        &out,
        2,
        "gave the reference back before finalize; finalize ran only its MPI protocol",
    );
    every_rank_says(
        &out,
        2,
        "offload shut down before MPI_Finalize (last reference: true, queued work drained",
    );
    every_rank_says(&out, 2, "after: live imports 0, cached mappings 0");
}

#[test]
fn staged_ranks_finalize_the_same_way() {
    if !mpiexec_found() {
        return;
    }
    let out = job(3, FINALIZE, &[], &[(offload_mpi::STAGED_ENV, "1")]);
    every_rank_says(
        &out,
        3,
        "offload shut down inside MPI_Finalize (last reference: true, queued work drained",
    );
    every_rank_says(&out, 3, "exports 0 imports 0");
}

#[test]
fn sends_nobody_received_do_not_stop_finalize() {
    if !mpiexec_found() {
        return;
    }
    // Staged: the sentinel exchange discards the message each rank did not receive.
    let out = job(
        2,
        FINALIZE,
        &["unreceived"],
        &[(offload_mpi::STAGED_ENV, "1")],
    );
    every_rank_says(&out, 2, "queued work drained, discarded 1)");
    // IPC: the delivery nobody took is unmapped by the shutdown.
    let out = job(2, FINALIZE, &["unreceived"], &[]);
    every_rank_says(
        &out,
        2,
        "queued work drained, discarded 0); ipc before finalize: exports 1 imports 1",
    );
    every_rank_says(&out, 2, "after: live imports 0, cached mappings 0");
}

#[test]
fn a_ring_of_four_ranks_exports_once_and_imports_once_for_1000_rounds() {
    if !mpiexec_found() {
        return;
    }
    let out = job(4, RING, &["1000", "1048576"], &[]);
    every_rank_says(
        &out,
        4,
        "ipc ring of 4: 1000 rounds of 1048576 bytes verified",
    );
    every_rank_says(
        &out,
        4,
        "exports 1 imports 1 cache hits 999 misses 1 one-shots 0",
    );
}

#[test]
fn a_ring_of_four_ranks_passes_64_mib_buffers() {
    if !mpiexec_found() {
        return;
    }
    let out = job(4, RING, &["20", &(64 << 20).to_string()], &[]);
    every_rank_says(
        &out,
        4,
        "ipc ring of 4: 20 rounds of 67108864 bytes verified",
    );
    every_rank_says(&out, 4, "exports 1 imports 1 cache hits 19 misses 1");
}

#[test]
fn a_staged_ring_carries_the_same_data_without_ipc() {
    if !mpiexec_found() {
        return;
    }
    let staged = [(offload_mpi::STAGED_ENV, "1")];
    let out = job(2, RING, &["1000", "1048576"], &staged);
    every_rank_says(
        &out,
        2,
        "staged ring of 2: 1000 rounds of 1048576 bytes verified",
    );
    every_rank_says(&out, 2, "exports 0 imports 0");
    // Four ranks busy-poll in MPICH: fewer rounds keep this short on a 2-core machine.
    let out = job(4, RING, &["100", "1048576"], &staged);
    every_rank_says(
        &out,
        4,
        "staged ring of 4: 100 rounds of 1048576 bytes verified",
    );
}

#[test]
fn the_mpi_ring_example_runs_on_four_ranks() {
    if !mpiexec_found() {
        return;
    }
    // `cargo test` builds the examples next to the test's own directory (target/*/deps).
    let example = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("examples").join("mpi_ring")))
        .filter(|p| p.exists());
    let Some(example) = example else {
        eprintln!("skipped: the mpi_ring example was not built");
        return;
    };
    let out = job(4, example.to_str().expect("a UTF-8 path"), &[], &[]);
    every_rank_says(
        &out,
        4,
        "10 rounds of 1048576 bytes around the ring of 4 (Some(Ipc)), verified",
    );
    every_rank_says(
        &out,
        4,
        "offload shut down in MPI_Finalize: Some(FinalizeReport { shut_down: true, was_last: true",
    );
}
