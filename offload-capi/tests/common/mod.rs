//! What the C tests share: where cargo put the libraries, compiling C programs against
//! them with the system `cc`, and running them under a watchdog, so a hang fails the test
//! instead of hanging it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The directory holding `liboffload_capi.so` and `liboffload_capi.a` (target/<profile>/).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test executable has a directory");
    for dir in [deps.to_path_buf(), deps.join("..")] {
        if dir.join("liboffload_capi.so").exists() {
            return dir
                .canonicalize()
                .expect("canonicalize the library directory");
        }
    }
    panic!(
        "liboffload_capi.so not found beside {} or in its parent: build it with `cargo test -p \
         offload-capi`",
        deps.display()
    );
}

/// The crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory for this test binary's programs and files.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("offload-capi")
        .join(name);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// How a C program is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Against `liboffload_capi.so` (found through an rpath).
    Shared,
    /// Against `liboffload_capi.a`.
    Static,
    /// Against neither: the program `dlopen`s the library itself.
    None,
}

/// Compiles the C files `sources` (C99, warnings as errors) into `out` and gives its path.
pub fn compile(sources: &[&Path], out: &Path, link: Link, extra: &[&str]) -> PathBuf {
    let lib = lib_dir();
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args([
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-g",
        "-D_GNU_SOURCE",
    ])
    .arg("-I")
    .arg(crate_dir().join("include"))
    .arg("-I")
    .arg(crate_dir().join("tests/c"))
    .args(sources)
    .arg("-o")
    .arg(out);
    match link {
        Link::Shared => {
            cc.arg("-L")
                .arg(&lib)
                .arg("-loffload_capi")
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                // DT_RPATH, not DT_RUNPATH: cargo's LD_LIBRARY_PATH names target/<profile>/,
                // whose copy of the library `cargo test` does not refresh.
                .arg("-Wl,--disable-new-dtags");
        }
        Link::Static => {
            cc.arg(lib.join("liboffload_capi.a"));
            // `--gc-sections`, as rustc links Rust code: the archive holds every backend
            // compiled in (under `--all-features`, offload-mpi's bindings too), and
            // sections nothing calls must not ask for their libraries (libmpi).
            cc.arg("-Wl,--gc-sections");
            // What a Rust static library needs from the system (rustc
            // --print native-static-libs).
            cc.args([
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
                "-lc",
            ]);
        }
        Link::None => {}
    }
    cc.args(["-lpthread", "-ldl"]).args(extra);
    let output = cc.output().expect("run the C compiler (cc)");
    assert!(
        output.status.success(),
        "cc failed on {sources:?}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out.to_path_buf()
}

/// Runs `cmd` to the end, killing it after `limit`: a hang is a failure with the output
/// so far, never a hung test.
pub fn run_with_watchdog(mut cmd: Command, limit: Duration) -> Output {
    // The library under test is the one the program names (rpath, or a path to dlopen),
    // never a stale copy cargo's LD_LIBRARY_PATH would find first.
    cmd.env_remove("LD_LIBRARY_PATH");
    offload_testing::child::run_within(cmd, limit)
}

/// Runs `cmd` under the watchdog and asserts it exits 0, printing its output.
pub fn run_ok(cmd: Command, limit: Duration) -> String {
    let what = format!("{cmd:?}");
    let out = run_with_watchdog(cmd, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

/// The host kernel image (offload-host's fixtures: `add_one`, `fill`, `noop`, …) written
/// to a file for the C programs.
pub fn host_image() -> PathBuf {
    let path = work_dir("image").join("kernels.so");
    std::fs::write(&path, offload_host::fixtures::KERNELS).expect("write the kernel image");
    path
}

/// Whether `CI=true`: then a test that would skip for a missing package fails instead.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether `program` runs (`program --version`).
pub fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `exe` under valgrind's memcheck, failing on any invalid access and any definite leak;
/// `None` (the caller skips, saying why) where valgrind is missing outside CI.
pub fn memcheck(exe: &Path) -> Option<Command> {
    if !has("valgrind") {
        assert!(
            !in_ci(),
            "valgrind is missing under CI=true (.ci/run installs it)"
        );
        println!("skipped: valgrind is not installed (apt-get install valgrind)");
        return None;
    }
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=memcheck",
        "--error-exitcode=99",
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--errors-for-leak-kinds=definite",
        "--track-origins=no",
        "--quiet",
    ])
    .arg(exe);
    Some(cmd)
}
