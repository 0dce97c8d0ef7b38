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

fn reuse() -> std::path::PathBuf {
    compile(
        &[&crate_dir().join("tests/c/reuse.c")],
        &work_dir("reuse").join("reuse"),
        Link::Shared,
        &[],
    )
}

/// L9: a released buffer handle, its slot reused two million times (30 times past where
/// 16-bit generations wrapped; the retirement at 2^32 - 1 is the table's unit test), is
/// refused every time and never equals a new handle (tests/c/reuse.c; under 16-bit
/// generations the 65,535th reuse handed the old value back).
#[test]
fn a_released_handle_stays_refused_through_two_million_reuses_of_its_slot() {
    let out = run_ok(Command::new(reuse()), Duration::from_secs(600));
    assert!(
        out.contains("reuse: 2000000 cycles, 2000000 on the released handle's slot"),
        "{out}"
    );
}

/// The same under valgrind memcheck, for 20,000 reuses (valgrind runs it ~50 times slower).
#[test]
fn slot_reuse_under_valgrind() {
    let Some(mut cmd) = common::memcheck(&reuse()) else {
        return;
    };
    cmd.arg("20000");
    let out = run_ok(cmd, Duration::from_secs(300));
    assert!(out.contains("reuse: 20000 cycles, 20000 on"), "{out}");
}

/// L9: a forked child's every call answers `OFFLOAD_ERROR_FORKED` at once, and its exit
/// hangs on nothing (tests/c/fork.c).
#[test]
fn a_forked_child_gets_offload_error_forked() {
    let exe = compile(
        &[&crate_dir().join("tests/c/fork.c")],
        &work_dir("fork").join("fork"),
        Link::Shared,
        &[],
    );
    let out = run_ok(Command::new(exe), LIMIT);
    assert!(
        out.contains("fork: the child got OFFLOAD_ERROR_FORKED"),
        "{out}"
    );
}

/// Issue 46: every message a C program can provoke on the host names the `offload_*`
/// function it called, in C's words (no `Buffer::read`, no `Offload::init()`; tests/c/c_words.c).
#[test]
fn messages_name_the_c_call_in_c_words() {
    let exe = compile(
        &[&crate_dir().join("tests/c/c_words.c")],
        &work_dir("c_words").join("c_words"),
        Link::Shared,
        &[],
    );
    let out = run_ok(Command::new(exe), LIMIT);
    assert!(
        out.contains("c_words: every message names its C call in C's words"),
        "{out}"
    );
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

fn after_shutdown() -> std::path::PathBuf {
    compile(
        &[&crate_dir().join("tests/c/after_shutdown.c")],
        &work_dir("after_shutdown").join("after_shutdown"),
        Link::Shared,
        &[],
    )
}

/// L3 in C, by exhaustion (tests/c/after_shutdown.c): every function of offload.h on the
/// handles of a finished runtime, after the last shutdown and with the next one live,
/// answers `OFFLOAD_ERROR_SHUT_DOWN`; and that program calls every function the header
/// declares, so a new one cannot skip it.
#[test]
fn every_c_function_on_handles_of_a_finished_runtime_is_shut_down() {
    let header = std::fs::read_to_string(crate_dir().join("include/offload.h")).unwrap();
    let program = std::fs::read_to_string(crate_dir().join("tests/c/after_shutdown.c")).unwrap();
    let declared: Vec<&str> = header
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with("//") && !l.starts_with("typedef"))
        .filter_map(|l| {
            // `offload_status_t offload_buffer_read(...`: the identifier before the `(`.
            let before = &l[..l.find('(')?];
            let name = before.rsplit([' ', '*']).next()?;
            name.starts_with("offload_").then_some(name)
        })
        .collect();
    assert!(declared.len() > 60, "the scan found only {declared:?}");
    let missing: Vec<_> = declared
        .iter()
        .filter(|f| !program.contains(&format!("{f}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "functions of offload.h that tests/c/after_shutdown.c never calls: {missing:?}"
    );
    let out = run_ok(Command::new(after_shutdown()), Duration::from_secs(120));
    assert!(out.contains("every call answered as L3 says"), "{out}");
}
