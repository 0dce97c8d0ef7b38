//! The lifecycle from C: 16 C threads × 1,000 init/use/shutdown cycles (L1), and 200
//! `dlopen`/`dlclose` cycles of the shared library with init/launch/shutdown inside, the
//! library unmapped after every `dlclose` (L2). Both run under a watchdog.

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
