//! Runs the MPI programs of src/bin (and offload-mpi's `mpi_ring` example, where the same
//! `cargo test` built it) under real `mpiexec` jobs of 2–4
//! ranks, each with a time limit, and checks what every rank printed. Jobs run one at a
//! time (MPICH ranks poll: jobs side by side would starve each other on a small machine).
//! Without `mpiexec` the tests skip, unless `CI=true`, where they fail. The jobs with a
//! killed rank run under `mpiexec -disable-auto-cleanup` (see `job_with_a_killed_rank`).

use std::process::Command;
use std::time::Instant;

// One MPI job at a time (`serial()`).
use offload_testing::serial;

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
    let _one = serial();
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

/// A fresh directory for one job's files (removed by the caller).
fn job_dir(what: &str, n: u32, args: &[&str]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "offload-mpi-{what}-{}-{n}-{}",
        std::process::id(),
        args.join("-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("makes the job's directory");
    dir
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
const KILLED: &str = env!("CARGO_BIN_EXE_offload-mpi-killed");

/// Seconds a job with a killed rank may run. Its survivors take about 3.5 s: offload's
/// finalize hook ends within milliseconds of their `MPI_Finalize`, then MPICH's own
/// finalize hangs and the program ends itself 3 s later (see `src/bin/killed.rs`).
const KILLED_LIMIT_S: u64 = 60;

/// Runs `offload-mpi-killed` on `n` ranks, whose last rank SIGKILLs itself; returns what
/// each rank recorded (see [`job_with_a_death`]).
fn job_with_a_killed_rank(n: u32, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    job_with_a_death(KILLED, n, args, env)
}

/// Runs `program DIR args` on `n` ranks, one of which SIGKILLs itself (and records
/// "SIGKILL to myself" last); returns what each rank recorded in `DIR/rank-N.txt` (in a
/// file: MPICH's process manager may lose what ranks print).
///
/// How it launches, from what MPICH 4.0.2 (Hydra, ch4:ucx) does when a rank dies:
/// - plain `mpiexec` kills every rank at once ("BAD TERMINATION ... EXIT CODE: 9"): the
///   survivors never get to send or finalize. `-disable-auto-cleanup` keeps them.
/// - a rank that is Hydra's own child and dies by a signal makes Hydra's proxy fail
///   (`HYDU_sock_write ... write error (Bad file descriptor)`), and the job ends with the
///   survivors killed; so each rank runs under `sh`, which outlives it and exits 137.
/// - Hydra then signals every other rank with `SIGUSR1` (MPICH's notice of a failed
///   process; MPICH catches it in the ranks, but the `sh` would die of it, and its rank
///   with it): the `sh` ignores `SIGUSR1`.
///
/// `OFFLOAD_MPI_FINALIZE_TIMEOUT=600` (far beyond the job's limit): the finalize hook
/// must end because it sees the rank dead, not because a wait ran out.
fn job_with_a_death(program: &str, n: u32, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let _one = serial();
    let dir = job_dir("killed", n, args);
    let mut cmd = Command::new("timeout");
    cmd.args([
        "--kill-after=10",
        &KILLED_LIMIT_S.to_string(),
        "mpiexec",
        "-disable-auto-cleanup",
        "-n",
        &n.to_string(),
        "sh",
        "-c",
        "trap '' USR1; \"$0\" \"$@\"; exit $?",
        program,
    ]);
    cmd.arg(&dir);
    cmd.args(args);
    cmd.env_remove(offload_mpi::STAGED_ENV);
    cmd.env(offload_mpi::FINALIZE_TIMEOUT_ENV, "600");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = cmd.output().expect("runs timeout and mpiexec");
    let secs = start.elapsed().as_secs_f64();
    let ranks: Vec<String> = (0..n)
        .map(|r| std::fs::read_to_string(dir.join(format!("rank-{r}.txt"))).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = ranks.concat();
    println!("{all}mpiexec: {} after {secs:.1} s", out.status);
    // What the ranks and Hydra said on stderr (a panic, a signal's report), for a failure
    // to be diagnosed from the log alone.
    if !stderr.trim().is_empty() {
        println!("mpiexec stderr:\n{stderr}");
    }
    // The dead rank's `sh` exits 137, so mpiexec does too: not a success, but not the
    // 124 of `timeout` either (nor its SIGKILL, 10 s later, past the limit). Under load,
    // Hydra itself has been seen not to exit after every rank ended (the survivors' last
    // line written, the victim killed): that hang is MPICH's, and offload's part — the
    // ranks' own ends — is what this checks then.
    let ended = |r: &String| {
        r.contains("MPI_Finalize returned")
            || r.contains("(MPICH waits for the missing rank); exiting")
            || r.contains("SIGKILL to myself")
    };
    let timed_out = out.status.code() == Some(124) || secs >= KILLED_LIMIT_S as f64;
    assert!(
        !timed_out || ranks.iter().all(ended),
        "the job with a killed rank timed out after {secs:.1} s ({}):\n{all}\nstderr:\n{stderr}",
        out.status
    );
    if timed_out {
        println!("every rank ended, but mpiexec (Hydra) did not exit: MPICH's, not offload's");
    }
    ranks
}

/// Asserts what a job with a killed rank recorded: the victim (the last rank) killed
/// itself after the exchange (and after rank 0 sent it 4 MiB it never receives); every
/// survivor saw it dead, got typed errors sending to it and receiving from it, and its
/// finalize hook completed, naming it dead.
fn survivors_failed_typed_and_finalized(ranks: &[String], ipc: bool) {
    let victim = ranks.len() - 1;
    let lines = |r: usize| ranks[r].lines().map(str::to_owned).collect::<Vec<_>>();
    let says = |r: usize, what: &str| {
        assert!(
            ranks[r].contains(what),
            "rank {r} did not say {what:?}:\n{}",
            ranks.concat()
        )
    };
    says(victim, "SIGKILL to myself");
    says(
        0,
        &format!("sent 4194304 bytes rank {victim} never receives"),
    );
    assert!(
        lines(victim)
            .last()
            .is_some_and(|l| l.ends_with("SIGKILL to myself")),
        "rank {victim} went on after its SIGKILL:\n{}",
        ranks[victim]
    );
    for (r, text) in ranks.iter().enumerate().take(victim) {
        says(r, &format!("rank {victim} is dead (seen after"));
        // Typed: `Error::Ipc`, naming the call and the rank (the program checks the
        // variant; the text is its fields, printed with `{:?}`).
        says(
            r,
            &format!(
                "a send to the dead rank failed: Error::Ipc {{ call: \"Ranks::send\", \
                 reason: \"rank {victim} is dead (its process "
            ),
        );
        if ipc {
            // Through IPC the endpoint's own error comes with it (its words depend on how
            // the endpoint noticed: not asserted).
            says(r, "; ipc: IpcEndpoint::send: ");
        }
        says(
            r,
            &format!(
                "a receive from the dead rank failed: Error::Ipc {{ call: \"Ranks::recv\", \
                 reason: \"rank {victim} is dead"
            ),
        );
        // Offload's hook ran to its end inside MPI_Finalize: it shut the runtime down
        // (the last reference), skipped the dead rank and waited for nobody else. Staged,
        // rank 0's 4 MiB `MPI_Isend` the victim never received cannot complete: abandoned
        // (through IPC that delivery is just never taken).
        let abandoned = usize::from(r == 0 && !ipc);
        says(
            r,
            &format!(
                "offload's finalize hook completed: shut_down true was_last true dead \
                 [{victim}] unresponsive [] abandoned {abandoned} errors []"
            ),
        );
        // What MPI does next is MPI's: MPICH 4.0.2 waits for the dead rank in
        // MPI_Finalize and never returns; the program then ends itself. Either is a pass.
        assert!(
            text.contains("MPI_Finalize returned")
                || text.contains("MPI_Finalize did not return within 3 s"),
            "rank {r} recorded nothing after its finalize hook:\n{text}"
        );
    }
}

#[test]
fn a_rank_killed_with_sigkill_fails_ipc_sends_typed_and_finalize_goes_on_without_it() {
    if !mpiexec_found() {
        return;
    }
    let ranks = job_with_a_killed_rank(4, &[], &[]);
    for (r, text) in ranks.iter().enumerate() {
        assert!(
            text.contains("exchanged a buffer with ranks") && text.contains("(Some(Ipc))"),
            "rank {r} did not exchange through IPC:\n{text}"
        );
    }
    survivors_failed_typed_and_finalized(&ranks, true);
}

#[test]
fn a_staged_rank_killed_with_sigkill_fails_sends_typed_and_finalize_goes_on_without_it() {
    if !mpiexec_found() {
        return;
    }
    let ranks = job_with_a_killed_rank(3, &[], &[(offload_mpi::STAGED_ENV, "1")]);
    for (r, text) in ranks.iter().enumerate() {
        assert!(
            text.contains("exchanged a buffer with ranks") && text.contains("(Some(Staged))"),
            "rank {r} did not exchange staged:\n{text}"
        );
    }
    survivors_failed_typed_and_finalized(&ranks, false);
}

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
    // The example is offload-mpi's: a `cargo test` that builds that crate too (`--workspace`,
    // as CI runs) puts it next to the test's own directory (target/*/deps).
    let example = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("examples").join("mpi_ring")))
        .filter(|p| p.exists());
    let Some(example) = example else {
        eprintln!("skipped: the mpi_ring example was not built (cargo test --workspace builds it)");
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

#[test]
fn a_rank_that_never_finalizes_costs_the_finalize_hook_its_timeout_and_no_more() {
    if !mpiexec_found() {
        return;
    }
    // The last rank lives on (not finalizing) for 8 s: the survivors' hook cannot see it
    // dead, waits for it until the timeout (3 s here) and goes on without it. The runtime's
    // shutdown then waits for that live IPC peer's unmap answers up to offload's own bound,
    // 1 s here (`OFFLOAD_IPC_UNMAP_TIMEOUT_MS`): a rank that exported to it (rank 1) takes
    // that long, so the finalize timeout must exceed it, or the last barrier of the other
    // survivors would give up on rank 1 too.
    let ranks = job_with_a_killed_rank(
        3,
        &["late"],
        &[
            (offload_mpi::FINALIZE_TIMEOUT_ENV, "3"),
            ("OFFLOAD_IPC_UNMAP_TIMEOUT_MS", "1000"),
        ],
    );
    assert!(ranks[2].contains("not finalizing: SIGKILL to myself in 8 s"));
    for (r, text) in ranks.iter().enumerate().take(2) {
        assert!(
            text.contains(
                "offload's finalize hook completed: shut_down true was_last true dead [] \
                 unresponsive [2]"
            ),
            "rank {r} did not report rank 2 unresponsive:\n{text}"
        );
        // One wait ran out (3 s) and the barriers did not wait for rank 2 again; with the
        // shutdown's wait for unmap answers (1 s, rank 1 only), 3–4 s in all.
        let secs: f64 = text
            .split("errors [] (")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("rank {r} did not time its hook:\n{text}"));
        assert!((3.0..6.0).contains(&secs), "rank {r}'s hook took {secs} s");
    }
}

const JOB_CACHE: &str = env!("CARGO_BIN_EXE_offload-mpi-job-cache");

/// Runs `offload-mpi-job-cache DIR mode` on `n` ranks (a plain job: nobody dies); returns
/// what the ranks printed.
fn job_cache_job(n: u32, mode: &str) -> String {
    let dir = job_dir("job-cache", n, &[mode]);
    let out = job(
        n,
        JOB_CACHE,
        &[dir.to_str().expect("a UTF-8 path"), mode],
        &[],
    );
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// The counters rank `rank` printed on its "compile stats:" line ("compiles 1 shared_hits
/// 5 ...; job cache: fetched 5 ..."), by name.
fn counters(text: &str, rank: usize) -> std::collections::HashMap<String, u64> {
    let prefix = format!("rank {rank}: compile stats: ");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("rank {rank} printed no compile stats:\n{text}"));
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty() && *w != "job" && *w != "cache:")
        .collect();
    words
        .chunks(2)
        .map(|pair| {
            let value = pair
                .get(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("rank {rank}: a counter without a number in {line:?}"));
            (pair[0].to_string(), value)
        })
        .collect()
}

/// The sum over `ranks` of counter `name`.
fn sum(text: &str, ranks: &[usize], name: &str) -> u64 {
    ranks.iter().map(|&r| counters(text, r)[name]).sum()
}

#[test]
fn the_job_cache_compiles_each_program_once_for_a_job_of_four_ranks() {
    if !mpiexec_found() {
        return;
    }
    let out = job_cache_job(4, "same");
    every_rank_says(
        &out,
        4,
        "loaded and launched the same 3 programs from 2 threads, values verified",
    );
    let all = [0, 1, 2, 3];
    // 3 programs × 2 threads × 4 ranks = 24 loads, each rank with a disk cache of its own:
    // 3 compiles in the whole job, 21 images from the job cache, none compiled alone.
    assert_eq!(sum(&out, &all, "compiles"), 3, "{out}");
    assert_eq!(sum(&out, &all, "compiled_for_job"), 3, "{out}");
    assert_eq!(sum(&out, &all, "shared_hits"), 21, "{out}");
    assert_eq!(sum(&out, &all, "fetched"), 21, "{out}");
    assert_eq!(sum(&out, &all, "compiled_alone"), 0, "{out}");
    // Every image went to the disk cache of its rank, compiled there or not.
    for r in all {
        assert_eq!(counters(&out, r)["disk_writes"], 6, "{out}");
    }
    // The server (rank 0) holds the 3 images and handed out all 21.
    assert_eq!(counters(&out, 0)["images"], 3, "{out}");
    assert_eq!(counters(&out, 0)["served"], 21, "{out}");
    // The finalize hook closed the cache and went on: nothing lost, nothing left.
    every_rank_says(
        &out,
        4,
        "offload's finalize hook completed: shut_down true was_last true dead [] \
         unresponsive [] abandoned 0 errors []",
    );
    every_rank_says(&out, 4, "MPI_Finalize returned");
    // And it refuses to start where nothing would close it, or twice.
    every_rank_says(
        &out,
        4,
        "installed before attach: Error::InvalidArgument (offload_mpi::attach must run first",
    );
    every_rank_says(
        &out,
        4,
        "installed a second time: Error::InvalidArgument (a job cache is installed in this \
         process already)",
    );
}

#[test]
fn a_job_cache_left_open_is_closed_by_the_finalize_hook() {
    if !mpiexec_found() {
        return;
    }
    // Ranks 1–3 leave their cache open (`mem::forget`): their finalize hook says `Bye`
    // from inside MPI_Finalize, which rank 0's close (its drop, before finalize) waits for.
    // The finalize timeout is far beyond the job's limit: rank 0's close must end because
    // the others closed, not because its wait ran out.
    let dir = job_dir("job-cache", 4, &["same-in-finalize"]);
    let out = job(
        4,
        JOB_CACHE,
        &[dir.to_str().expect("a UTF-8 path"), "same-in-finalize"],
        &[(offload_mpi::FINALIZE_TIMEOUT_ENV, "600")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(sum(&out, &[0, 1, 2, 3], "compiles"), 3, "{out}");
    assert!(out.contains("rank 0: closed the job cache ("), "{out}");
    assert!(!out.contains("rank 1: closed the job cache"), "{out}");
    every_rank_says(
        &out,
        4,
        "offload's finalize hook completed: shut_down true was_last true dead [] \
         unresponsive [] abandoned 0 errors []",
    );
    every_rank_says(&out, 4, "MPI_Finalize returned");
}

#[test]
fn the_job_cache_gives_each_rank_its_own_programs() {
    if !mpiexec_found() {
        return;
    }
    // Each rank checks the values its kernels write: 1000 × rank + i for its own two,
    // 5 for the shared one.
    let out = job_cache_job(4, "different");
    every_rank_says(
        &out,
        4,
        "loaded and launched 2 programs of its own and 1 shared, values verified",
    );
    let all = [0, 1, 2, 3];
    assert_eq!(sum(&out, &all, "compiles"), 9, "{out}");
    assert_eq!(sum(&out, &all, "fetched"), 3, "{out}");
    assert_eq!(counters(&out, 0)["images"], 9, "{out}");
    every_rank_says(
        &out,
        4,
        "offload's finalize hook completed: shut_down true was_last true dead [] \
         unresponsive [] abandoned 0 errors []",
    );
}

#[test]
fn the_job_cache_refuses_less_than_mpi_thread_multiple_typed() {
    if !mpiexec_found() {
        return;
    }
    let out = job_cache_job(2, "serialized");
    every_rank_says(
        &out,
        2,
        "with Serialized threading: Error::Ipc { call: \"offload_mpi::JobCache::install\", \
         reason: \"the job cache needs MPI_THREAD_MULTIPLE",
    );
    every_rank_says(
        &out,
        2,
        "initialise MPI with mpi::initialize_with_threading(mpi::Threading::Multiple)",
    );
}

/// Runs `offload-mpi-job-cache` on 4 ranks in `mode` (`kill-holder`, `kill-server`): rank
/// `victim` SIGKILLs itself while it compiles the slow program for the job and the others
/// wait for it. Returns what each rank recorded.
///
/// The ranks' C compiler ignores `SIGUSR1`: once a rank died, Hydra (`-disable-auto-cleanup`)
/// sends it to each survivor's whole process group, where MPICH catches it in the rank but
/// a `cc` the rank runs dies of it (the compile then fails, "signal: 10 (SIGUSR1)").
fn job_cache_with_a_death(mode: &str) -> Vec<String> {
    let bin = job_dir("job-cache-cc", 4, &[mode]);
    let cc = bin.join("cc");
    std::fs::write(&cc, "#!/bin/sh\ntrap '' USR1\nexec cc \"$@\"\n").expect("writes the wrapper");
    std::fs::set_permissions(&cc, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("makes it executable");
    let ranks = job_with_a_death(
        JOB_CACHE,
        4,
        &[mode],
        &[("CC", cc.to_str().expect("a UTF-8 path"))],
    );
    let _ = std::fs::remove_dir_all(&bin);
    ranks
}

/// What every survivor of a job cache job with a death must have recorded: the slow program
/// loaded and ran, the programs after it too, the finalize hook completed naming the dead
/// rank (and nobody unresponsive: `OFFLOAD_MPI_FINALIZE_TIMEOUT` is 600 s, so no wait ran
/// out), and then the rank ended.
fn survivors_loaded_alone_and_finalized(ranks: &[String], victim: usize) {
    let all = ranks.concat();
    assert!(
        ranks[victim]
            .lines()
            .last()
            .is_some_and(|l| l.ends_with("SIGKILL to myself")),
        "rank {victim} did not die as planned:\n{all}"
    );
    for (r, text) in ranks.iter().enumerate().filter(|&(r, _)| r != victim) {
        for what in [
            "the slow program loaded and launched, value verified",
            "2 more programs loaded and launched, values verified",
            &format!(
                "offload's finalize hook completed: shut_down true was_last true dead \
                 [{victim}] unresponsive [] abandoned 0 errors []"
            ),
        ] {
            assert!(text.contains(what), "rank {r} did not say {what:?}:\n{all}");
        }
        assert!(
            text.contains("MPI_Finalize returned")
                || text.contains("MPI_Finalize did not return within 3 s"),
            "rank {r} recorded nothing after its finalize hook:\n{all}"
        );
        // The slow program: compiled alone, once the rank compiling it for the job died.
        let c = counters(text, r);
        assert!(c["compiled_alone"] >= 1, "rank {r}:\n{all}");
    }
}

#[test]
fn a_rank_killed_while_it_compiles_for_the_job_costs_the_others_a_compile_and_no_hang() {
    if !mpiexec_found() {
        return;
    }
    let ranks = job_cache_with_a_death("kill-holder");
    survivors_loaded_alone_and_finalized(&ranks, 1);
    let all = ranks.concat();
    assert!(
        all.contains("rank 0: 3 asks wait for the slow program"),
        "{all}"
    );
    // Each survivor compiled the slow program alone (its lease died with rank 1); the two
    // programs after it went through the cache, still served by rank 0: compiled once each.
    let survivors = [0, 2, 3];
    let sums = |name| -> u64 {
        survivors
            .iter()
            .map(|&r| counters(&ranks[r], r)[name])
            .sum()
    };
    assert_eq!(sums("compiled_alone"), 3, "{all}");
    assert_eq!(sums("compiled_for_job"), 2, "{all}");
    assert_eq!(sums("fetched"), 4, "{all}");
    assert_eq!(sums("compiles"), 5, "{all}");
}

#[test]
fn the_server_rank_killed_mid_job_leaves_the_others_compiling_alone_without_a_hang() {
    if !mpiexec_found() {
        return;
    }
    let ranks = job_cache_with_a_death("kill-server");
    survivors_loaded_alone_and_finalized(&ranks, 0);
    let all = ranks.concat();
    assert!(
        all.contains("rank 0: 3 asks wait for the slow program"),
        "{all}"
    );
    // With the server gone, every load compiles alone: the slow program and the 2 after.
    for (r, text) in ranks.iter().enumerate().skip(1) {
        let c = counters(text, r);
        assert_eq!(
            (c["compiled_alone"], c["fetched"], c["compiles"]),
            (3, 0, 3),
            "rank {r}:\n{all}"
        );
    }
}
