//! The C test suite (tests/c/suite.c): every function of the C API, success and error
//! paths, run as a C program linked against the shared library, the static library, and
//! under valgrind's memcheck.

mod common;

use common::{Link, compile, crate_dir, host_image, in_ci, run_ok, work_dir};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn suite(link: Link) -> std::path::PathBuf {
    let name = match link {
        Link::Static => "suite-static",
        _ => "suite",
    };
    compile(
        &[&crate_dir().join("tests/c/suite.c")],
        &work_dir("suite").join(name),
        link,
        &[],
    )
}

/// The suite against the shared library, Vulkan included (lavapipe); under CI=true a
/// missing Vulkan device fails it.
#[test]
fn c_suite_shared_library() {
    let mut cmd = Command::new(suite(Link::Shared));
    cmd.arg(host_image())
        .arg(if in_ci() { "requirevulkan" } else { "vulkan" });
    let out = run_ok(cmd, LIMIT);
    assert!(out.contains("suite: all checks held"));
}

/// The suite against the static library (host only).
#[test]
fn c_suite_static_library() {
    let mut cmd = Command::new(suite(Link::Static));
    cmd.arg(host_image()).arg("novulkan");
    let out = run_ok(cmd, LIMIT);
    assert!(out.contains("suite: all checks held"));
}

/// The suite under valgrind memcheck (host backend): no invalid access, no definite leak.
#[test]
fn c_suite_under_valgrind() {
    let Some(mut cmd) = common::memcheck(&suite(Link::Shared)) else {
        return;
    };
    cmd.arg(host_image()).arg("novulkan");
    let out = run_ok(cmd, Duration::from_secs(300));
    assert!(out.contains("suite: all checks held"));
}

/// The example (examples/saxpy.c) builds and runs: SAXPY from C source on the host, and
/// from WGSL on Vulkan when there is a device.
#[test]
fn saxpy_example_runs() {
    let exe = compile(
        &[&crate_dir().join("examples/saxpy.c")],
        &work_dir("example").join("saxpy"),
        Link::Shared,
        &[],
    );
    let out = run_ok(Command::new(exe), LIMIT);
    assert!(out.contains("y[3] = 6 (expected 6)"), "{out}");
    assert!(
        out.contains("after shutdown: OFFLOAD_ERROR_SHUT_DOWN"),
        "{out}"
    );
    if in_ci() {
        assert!(out.contains("on llvmpipe") || out.contains("on "), "{out}");
    }
}

/// The suite built with AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer
/// (host backend): no report. Skipped, with the reason, where the C compiler cannot build
/// with them.
#[test]
fn c_suite_under_asan() {
    let dir = work_dir("asan");
    let probe = dir.join("probe.c");
    std::fs::write(&probe, "int main(void) { return 0; }\n").expect("write the probe");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let probed = Command::new(&cc)
        .args(["-fsanitize=address,undefined"])
        .arg(&probe)
        .arg("-o")
        .arg(dir.join("probe"))
        .output()
        .expect("run cc");
    if !probed.status.success() {
        println!(
            "skipped: {cc} cannot build with -fsanitize=address,undefined: {}",
            String::from_utf8_lossy(&probed.stderr)
        );
        return;
    }
    let exe = compile(
        &[&crate_dir().join("tests/c/suite.c")],
        &dir.join("suite-asan"),
        Link::Shared,
        &[
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
        ],
    );
    let mut cmd = Command::new(exe);
    cmd.arg(host_image()).arg("novulkan").env(
        "ASAN_OPTIONS",
        "detect_leaks=1:abort_on_error=0:exitcode=98",
    );
    let out = run_ok(cmd, Duration::from_secs(300));
    assert!(out.contains("suite: all checks held"));
}
