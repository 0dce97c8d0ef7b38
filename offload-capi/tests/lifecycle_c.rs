//! The lifecycle from C: 16 C threads × 1,000 init/use/shutdown cycles (L1), and 200
//! `dlopen`/`dlclose` cycles of the shared library with init/launch/shutdown inside, the
//! library unmapped after every `dlclose` (L2); handles raced between threads and a
//! shutdown under them. All run under a watchdog.

mod common;

use common::{Link, compile, crate_dir, host_image, lib_dir, run_ok, work_dir};
use std::process::Command;
use std::time::Duration;

#[test]
fn sixteen_c_threads_of_a_thousand_cycles() {
    let exe = compile(
        &[&crate_dir().join("tests/c/threads.c")],
        &work_dir("threads").join("threads"),
        Link::Shared,
        &[],
    );
    let mut cmd = Command::new(exe);
    cmd.args(["16", "1000"]);
    let out = run_ok(cmd, Duration::from_secs(180));
    assert!(out.contains("threads: 16 x 1000 cycles, 0 errors"), "{out}");
}

#[test]
fn two_hundred_dlopen_dlclose_cycles_unmap_the_library() {
    let exe = compile(
        &[&crate_dir().join("tests/c/dlopen.c")],
        &work_dir("dlopen").join("dlopen"),
        Link::None,
        &[],
    );
    let mut cmd = Command::new(exe);
    cmd.arg(lib_dir().join("liboffload_capi.so"))
        .arg(host_image())
        .arg("200");
    let out = run_ok(cmd, Duration::from_secs(180));
    assert!(
        out.contains("dlopen: 200 cycles, unmapped after each"),
        "{out}"
    );
}

/// Handles raced from 8 threads (copies, reads and writes on buffers other threads free
/// and replace, stale handles), then the runtime shut down under them: only typed
/// statuses, nothing left over.
#[test]
fn handles_raced_from_eight_threads_and_shut_down_under_them() {
    let exe = compile(
        &[&crate_dir().join("tests/c/races.c")],
        &work_dir("races").join("races"),
        Link::Shared,
        &[],
    );
    let mut cmd = Command::new(&exe);
    cmd.args(["8", "20000"]);
    let out = run_ok(cmd, Duration::from_secs(180));
    assert!(out.contains(", 0 errors"), "{out}");
    // Under memcheck too: no access to freed memory, whatever the interleaving.
    let Some(mut cmd) = common::memcheck(&exe) else {
        return;
    };
    cmd.args(["4", "3000"]);
    let out = run_ok(cmd, Duration::from_secs(300));
    assert!(out.contains(", 0 errors"), "{out}");
}
