//! Compiling in the background (`Program::compile_in_background`, the pool of
//! `Config::compile_threads`): many programs compile at once while the caller goes on, the
//! first `load` waits for its compile and reuses it (one compile, counted), a compile
//! error comes back from `load` with the compiler's log, and the pool lives and ends with
//! its runtime (L2): shutdowns with compiles still running leave no thread and no
//! temporary file behind.
//!
//! The compile counters are process-wide, so each case runs alone in a child process of
//! this test binary (`offload_testing::child`), under a watchdog: a load that waits for a
//! compile that never ends, or a shutdown that never joins, fails instead of hanging.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod common;

use common::{put_kernel as kernel, thread_names};
use offload::{BackendKind, Dims, Error, Offload, Program, Source, compile_stats};

/// The variable that makes a `case_*` test do its work (it is a child then).
const CASE: &str = "OFFLOAD_BACKGROUND_CASE";

fn is_child() -> bool {
    std::env::var_os(CASE).is_some()
}

/// Runs case `name` in a child, with the offload configuration variables of the parent
/// cleared, `vars` set and a watchdog of `limit`.
fn run_case(name: &str, vars: &[(&str, &str)], limit: Duration) -> String {
    let mut command = offload_testing::child::test_command(name);
    for var in [
        "OFFLOAD_BACKENDS",
        "OFFLOAD_HOST_DEVICES",
        "OFFLOAD_COMPILE_THREADS",
        "OFFLOAD_CACHE",
        "OFFLOAD_CACHE_DIR",
    ] {
        command.env_remove(var);
    }
    command.env(CASE, "1").envs(vars.iter().copied());
    let out = offload_testing::child::run_within(command, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "case `{name}` failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for line in stdout.lines().filter_map(|l| l.split_once("MEASURED ")) {
        println!("{name}: {}", line.1);
    }
    stdout
}

fn unique(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what} {} {nanos}", std::process::id())
}

/// Loads `program` on `dev`, launches `put` and checks it wrote `value`.
fn load_and_check(dev: &offload::Device, program: &Program, value: u32) {
    let put = program.load(dev).unwrap().kernel("put").unwrap();
    let buf = dev.alloc_zeros::<u32>(64).unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: `put` writes the first n u32s of its buffer, which holds 64.
    unsafe { queue.launch(&put, Dims::for_num_elems(64), &offload::args![&buf, 64u32]) }.unwrap();
    queue.sync().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![value; 64]);
}

/// Waits (bounded) until `program` finished compiling for `dev`.
fn wait_finished(program: &Program, dev: &offload::Device) {
    let start = Instant::now();
    while !program.compile_finished(dev) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "compile never ended"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Waits (at most a second) until this process has `count` threads: `pthread_join`
/// returns once the thread has left its code, a moment before the kernel stops listing
/// it. Returns how long that took.
fn settle(count: usize) -> Duration {
    let start = Instant::now();
    while threads() != count && start.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_micros(200));
    }
    start.elapsed()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn eight_programs_compile_at_once_and_each_first_load_uses_its_compile() {
    run_case(
        "case_eight_programs",
        &[("OFFLOAD_COMPILE_THREADS", "4")],
        offload_testing::child::WATCHDOG,
    );
}

#[test]
fn case_eight_programs() {
    if !is_child() {
        return;
    }
    let rt = Offload::builder().compile_cache(None).start().unwrap();
    assert_eq!(
        rt.config().unwrap().compile_threads,
        4,
        "from the environment"
    );
    let dev = rt.device(BackendKind::Host).unwrap();
    let programs: Vec<(Program, u32)> = (0..8u32)
        .map(|i| {
            let value = 100 + i;
            let program = Program::from_source(kernel(&unique(&format!("eight {i}")), value));
            (program, value)
        })
        .collect();
    let before = compile_stats();
    let start = Instant::now();
    for (program, _) in &programs {
        program.compile_in_background(&dev).unwrap();
    }
    let scheduling = start.elapsed();
    // Returned at once: nothing compiled on this thread (a compile takes tens of ms).
    let finished = programs
        .iter()
        .filter(|(p, _)| p.compile_finished(&dev))
        .count();
    println!("MEASURED scheduling 8 compiles took {scheduling:?}; {finished} finished by then");
    assert!(
        finished < 8,
        "the compiles ran before compile_in_background returned"
    );
    // Scheduling again changes nothing.
    for (program, _) in &programs {
        program.compile_in_background(&dev).unwrap();
    }
    for (program, value) in &programs {
        load_and_check(&dev, program, *value);
        assert!(program.compile_finished(&dev));
    }
    let after = compile_stats();
    println!(
        "MEASURED {} compiles, at most {} at once",
        after.compiles - before.compiles,
        after.most_in_flight
    );
    assert_eq!(
        after.compiles - before.compiles,
        8,
        "one compile per program"
    );
    assert_eq!(after.failed, before.failed);
    // Four pool threads compiled at once (a load may add its own compile).
    assert!(
        after.most_in_flight >= 3,
        "the pool compiles in parallel: {after:?}"
    );
    // Loaded: later loads and schedules compile nothing.
    for (program, value) in &programs {
        program.compile_in_background(&dev).unwrap();
        load_and_check(&dev, program, *value);
    }
    assert_eq!(compile_stats().compiles, after.compiles);
    rt.shutdown().unwrap();
}

#[test]
fn a_compile_error_comes_from_load_with_the_compiler_log() {
    run_case(
        "case_compile_error",
        &[("OFFLOAD_COMPILE_THREADS", "2")],
        offload_testing::child::WATCHDOG,
    );
}

#[test]
fn case_compile_error() {
    if !is_child() {
        return;
    }
    let rt = Offload::builder().compile_cache(None).start().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let broken = Program::from_source(Source::c(format!(
        "/* {} */\nvoid broken(void) {{\n    return undeclared_name_42;\n}}\n",
        unique("broken")
    )));
    let good = Program::from_source(kernel(&unique("good"), 5));
    let before = compile_stats();
    broken.compile_in_background(&dev).unwrap(); // the error is the load's, not this call's
    good.compile_in_background(&dev).unwrap();
    wait_finished(&broken, &dev);
    assert_eq!(compile_stats().failed - before.failed, 1);
    let e = broken.load(&dev).unwrap_err();
    let Error::Compile {
        backend, call, log, ..
    } = &e
    else {
        panic!("not a compile error: {e:?}");
    };
    assert_eq!(*backend, BackendKind::Host);
    assert_eq!(*call, "Program::load");
    assert!(log.contains("undeclared_name_42"), "{log}");
    assert!(log.contains("kernel.c:3"), "the log has the line: {log}");
    assert_eq!(
        compile_stats().failed - before.failed,
        1,
        "the load reported the background compile's error, it did not compile again"
    );
    // The error went to that load; the next load compiles again, as without the pool.
    assert!(matches!(broken.load(&dev), Err(Error::Compile { .. })));
    assert_eq!(compile_stats().failed - before.failed, 2);
    // The other program is unaffected.
    load_and_check(&dev, &good, 5);
    assert_eq!(compile_stats().compiles - before.compiles, 1);
    rt.shutdown().unwrap();
}

#[test]
fn without_a_pool_programs_compile_at_load() {
    run_case(
        "case_no_pool",
        &[("OFFLOAD_COMPILE_THREADS", "0")],
        offload_testing::child::WATCHDOG,
    );
}

#[test]
fn case_no_pool() {
    if !is_child() {
        return;
    }
    let baseline = threads();
    let rt = Offload::builder().compile_cache(None).start().unwrap();
    assert_eq!(rt.config().unwrap().compile_threads, 0);
    let dev = rt.device(BackendKind::Host).unwrap();
    let program = Program::from_source(kernel(&unique("no pool"), 9));
    let before = compile_stats();
    program.compile_in_background(&dev).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !program.compile_finished(&dev),
        "nothing compiles before the load"
    );
    assert_eq!(compile_stats().compiles, before.compiles);
    load_and_check(&dev, &program, 9);
    assert!(program.compile_finished(&dev));
    assert_eq!(compile_stats().compiles - before.compiles, 1);
    rt.shutdown().unwrap();
    settle(baseline);
    assert_eq!(threads(), baseline, "{:?}", thread_names());
}

#[test]
fn shutdowns_with_compiles_running_leave_no_thread_and_no_temporary_file() {
    let tmp = std::env::temp_dir().join(format!("offload-bg-tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let out = run_case(
        "case_cycles",
        &[("TMPDIR", tmp.to_str().unwrap())],
        Duration::from_secs(600),
    );
    assert!(out.contains("CYCLES DONE"), "{out}");
    assert_eq!(entries(&tmp), Vec::<PathBuf>::new(), "temporary files left");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn case_cycles() {
    if !is_child() {
        return;
    }
    let tmp = std::env::temp_dir();
    let cycles: usize = std::env::var("OFFLOAD_BACKGROUND_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // One cycle first, so that what a first init makes once per process is there.
    let start = || {
        Offload::builder()
            .compile_threads(2)
            .compile_cache(None)
            .start()
            .unwrap()
    };
    let rt = start();
    load_and_check(
        &rt.device(BackendKind::Host).unwrap(),
        &Program::from_source(kernel(&unique("warm up"), 1)),
        1,
    );
    rt.shutdown().unwrap();
    let baseline = threads();
    let before = compile_stats();
    let mut most_threads = 0;
    let mut slowest_exit = Duration::ZERO;
    let mut abandoned = Vec::new();
    for cycle in 0..cycles {
        let rt = start();
        let dev = rt.device(BackendKind::Host).unwrap();
        let programs: Vec<Program> = (0..3)
            .map(|i| Program::from_source(kernel(&unique(&format!("cycle {cycle} {i}")), 3)))
            .collect();
        for program in &programs {
            program.compile_in_background(&dev).unwrap();
        }
        most_threads = most_threads.max(threads());
        // Shut down at once, or once the pool has picked compiles up: both queued and
        // running compiles meet the shutdown.
        std::thread::sleep(Duration::from_millis([0, 1, 3, 10][cycle % 4]));
        rt.shutdown().unwrap();
        // L2: the shutdown waited for the running compiles, which removed their temporary
        // directories (checked at once: a compile still running would still have one)...
        let left = entries(&tmp);
        assert!(
            left.is_empty(),
            "cycle {cycle}: temporary files left: {left:?}"
        );
        // ... and joined the pool. A thread joined has returned, but the kernel may list
        // it for a moment more while it finishes exiting: allow that moment.
        let waited = settle(baseline);
        assert_eq!(
            threads(),
            baseline,
            "cycle {cycle}: a thread outlived the shutdown: {:?}",
            thread_names()
        );
        slowest_exit = slowest_exit.max(waited);
        // After the shutdown the handles answer ShutDown.
        assert!(matches!(
            programs[0].compile_in_background(&dev),
            Err(Error::ShutDown { .. })
        ));
        if cycle % 50 == 0 {
            abandoned.push(programs[2].clone());
        }
    }
    let after = compile_stats();
    let compiled = after.compiles - before.compiles;
    println!(
        "MEASURED {cycles} cycles: {compiled} of {} compiles ran, the others were abandoned; \
         {most_threads} threads at most, {baseline} between runtimes; a joined thread \
         took at most {slowest_exit:?} to leave /proc/self/task",
        3 * cycles
    );
    assert!(most_threads > baseline, "the pool started threads");
    assert!(compiled > 0, "compiles were running at the shutdowns");
    assert!(
        compiled < 3 * cycles as u64,
        "queued compiles were abandoned"
    );
    assert_eq!(after.failed, before.failed);
    // A program whose compile was abandoned (or ran) loads in a later runtime.
    let rt = start();
    let dev = rt.device(BackendKind::Host).unwrap();
    for program in &abandoned {
        program.compile_in_background(&dev).unwrap();
        load_and_check(&dev, program, 3);
    }
    rt.shutdown().unwrap();
    settle(baseline);
    assert_eq!(threads(), baseline, "{:?}", thread_names());
    println!("CYCLES DONE");
}
