//! libLLVMOffload.so.22.1 against liboffload 22's own programs (issue 47):
//! - its symbols are the real library's (70 functions, version `VERS1.0`, the SONAME);
//! - Debian's unmodified `llvm-offload-device-info` lists offload's devices through it;
//! - one C program (tests/c/api.c), compiled once, passes against it in full and, for the
//!   subset LLVM's library can run on a CPU-only machine, against LLVM's;
//! - 100 failed `olInit`s each say why and leave nothing initialised;
//! - under valgrind's memcheck, the program leaks nothing, a failed `olInit` neither;
//! - 200 dlopen/dlclose cycles with work inside unmap it every time (tests/c/dlopen.c).
//!
//! A tool or library of liboffload-22-dev, or valgrind, that is absent skips its test with
//! a printed reason, except under CI=true, where it fails (CI installs them).

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_testing::child::run;

/// LLVM's library, tool and header (Debian's liboffload-22-dev).
const REAL_DIR: &str = "/usr/lib/llvm-22/lib";
const REAL_LIB: &str = "/usr/lib/llvm-22/lib/libLLVMOffload.so.22.1";
const TOOL: &str = "/usr/lib/llvm-22/bin/llvm-offload-device-info";
const INCLUDE: &str = "/usr/lib/llvm-22/include";
const SONAME: &str = "libLLVMOffload.so.22.1";
const VALGRIND: &str = "/usr/bin/valgrind";

/// Whether `path` exists; if not, skips (prints why) or, under CI=true, fails.
fn present(path: &str) -> bool {
    if Path::new(path).exists() {
        return true;
    }
    let why = format!("{path} is absent (a Debian package of scripts/packages.txt)");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}: CI installs it");
    }
    eprintln!("skipped: {why}");
    false
}

/// A directory with this crate's library under liboffload's names (`libLLVMOffload.so`
/// for linking, `libLLVMOffload.so.22.1` for running): what LD_LIBRARY_PATH points at.
fn ours() -> PathBuf {
    // Made once: the tests run on several threads.
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(make_ours).clone()
}

fn make_ours() -> PathBuf {
    // cargo builds the library into target/<profile>/deps and copies it up a level.
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let built = [
        deps.join("libLLVMOffload.so"),
        deps.join("../libLLVMOffload.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("libLLVMOffload.so was not built beside {}", deps.display()))
    .canonicalize()
    .expect("canonicalize the library's path");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("liboffload-ours");
    std::fs::create_dir_all(&dir).expect("create the library directory");
    for name in [SONAME, "libLLVMOffload.so"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&built, &link).expect("link the library");
    }
    dir
}

/// Runs `command` under the watchdog; its standard output, which must be a success.
fn quiet(mut command: Command, what: &str) -> String {
    command.env("RUST_BACKTRACE", "0");
    let out = run(command);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// As [`quiet`], printing the output.
fn output(command: Command, what: &str) -> String {
    let stdout = quiet(command, what);
    print!("{what}:\n{stdout}");
    stdout
}

/// The functions a library exports with version VERS1.0, and any other symbol it exports.
fn exports(lib: &Path) -> (Vec<String>, Vec<String>) {
    let mut readelf = Command::new("readelf");
    readelf.args(["--dyn-syms", "-W"]).arg(lib);
    let table = quiet(readelf, &format!("readelf {}", lib.display()));
    let (mut versioned, mut other) = (Vec::new(), Vec::new());
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        // GNU ld also exports the version's name as an absolute symbol (LLVM's lld, which
        // links the real library, does not): a marker, not a function or datum.
        if f.len() < 8 || f[6] == "UND" || f[4] != "GLOBAL" || f[6] == "ABS" && f[7] == "VERS1.0" {
            continue;
        }
        match f[7].split_once("@@") {
            Some((name, "VERS1.0")) if f[3] == "FUNC" => versioned.push(name.to_owned()),
            _ => other.push(f[7].to_owned()),
        }
    }
    versioned.sort();
    (versioned, other)
}

#[test]
fn symbols_are_liboffload_22s() {
    let lib = ours().join(SONAME);
    let (versioned, other) = exports(&lib);
    assert_eq!(versioned.len(), 70, "{versioned:?}");
    assert!(
        other.is_empty(),
        "exported beyond liboffload's ABI: {other:?}"
    );
    let mut readelf = Command::new("readelf");
    readelf.arg("-d").arg(&lib);
    assert!(quiet(readelf, "readelf -d").contains(&format!("Library soname: [{SONAME}]")));
    if present(REAL_LIB) {
        let (real, _) = exports(Path::new(REAL_LIB));
        assert_eq!(versioned, real, "not the same functions as LLVM's library");
    }
}

#[test]
fn device_info_tool_lists_offload_devices() {
    if !present(TOOL) {
        return;
    }
    let mut tool = Command::new(TOOL);
    tool.env("LD_LIBRARY_PATH", ours());
    let text = output(tool, "llvm-offload-device-info on offload");
    for expected in [
        "[Virtual Host Device]",
        "Platform Name: offload host",
        "Platform Backend: HOST",
        "Type: CPU",
    ] {
        assert!(text.contains(expected), "no {expected:?}");
    }
    // lavapipe, where mesa-vulkan-drivers is installed (as in CI).
    let lavapipe = std::fs::read_dir("/usr/share/vulkan/icd.d")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
        .unwrap_or(false);
    if lavapipe && std::env::var("OFFLOAD_BACKENDS").is_err() {
        assert!(
            text.contains("Platform Name: offload Vulkan"),
            "no Vulkan device"
        );
        assert!(text.contains("llvmpipe"), "no lavapipe device");
        assert!(text.contains("Platform Backend: UNKNOWN"));
    } else {
        eprintln!("no lavapipe (mesa-vulkan-drivers): Vulkan devices not checked");
    }
}

/// Compiles a C program of tests/c (to a file of the test's own, `out`).
fn compile(name: &str, out: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("liboffload-{out}"));
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-O1", "-pthread", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{INCLUDE}"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(extra);
    output(cc, &format!("cc {name}.c"));
    exe
}

#[test]
fn c_api_against_both_libraries() {
    let ours = ours();
    // Linked against this crate's library (the same SONAME and versions as LLVM's): the
    // binary then runs on either.
    let exe = compile(
        "api",
        "api",
        &[&format!("-L{}", ours.display()), "-lLLVMOffload"],
    );
    let image = host_image();
    let mut full = Command::new(&exe);
    full.arg("full")
        .env("OL_TEST_HOST_IMAGE", &image)
        .env("OL_TEST_GPU_IMAGE", SPIRV_IMAGE)
        .env("LD_LIBRARY_PATH", &ours)
        .env("OL_TEST_CYCLES", "1000");
    output(full, "tests/c/api.c full, on offload");
    if present(REAL_LIB) {
        let mut cpu = Command::new(&exe);
        cpu.arg("cpu")
            .env("LD_LIBRARY_PATH", REAL_DIR)
            .env("OL_TEST_CYCLES", "1000");
        output(cpu, "tests/c/api.c cpu subset, on LLVM's liboffload");
        let mut cpu = Command::new(&exe);
        cpu.arg("cpu")
            .env("LD_LIBRARY_PATH", &ours)
            .env("OL_TEST_CYCLES", "1000");
        output(cpu, "tests/c/api.c cpu subset, on offload");
    }
    // Each generation's first listing opens every platform: lavapipe's ~60 ms a time would
    // make the threads' 800 rounds take seconds, so they run on the host device.
    let mut threads = Command::new(&exe);
    threads
        .arg("threads")
        .env("LD_LIBRARY_PATH", &ours)
        .env("OFFLOAD_BACKENDS", "host");
    output(threads, "tests/c/api.c threads, on offload");
    // offload told to open a backend that does not exist: every olInit fails.
    let mut fails = Command::new(&exe);
    fails
        .arg("initfail")
        .env("LD_LIBRARY_PATH", &ours)
        .env("OFFLOAD_BACKENDS", "no-such-backend");
    output(fails, "tests/c/api.c initfail, on offload");
}

/// A host program image of offload's host test kernels (`add_one`, `read_global`, the
/// global `g`), written for the C programs to read.
fn host_image() -> std::path::PathBuf {
    let image = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("liboffload-host-kernels-{}.so", std::process::id()));
    std::fs::write(&image, offload_host::fixtures::KERNELS).expect("write the host image");
    image
}

/// A SPIR-V image of offload's Vulkan test kernels (`add_one(buf u32[], n u32)` among
/// them).
const SPIRV_IMAGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../offload-vulkan/tests/fixtures/kernels.spv"
);

/// A vendor driver's protocol-checking fake (offload-driver/fake/), the name the backend
/// loads it by, the backend's name in `OFFLOAD_BACKENDS`, and a program image holding
/// `add_one` for it.
struct Fake {
    source: &'static str,
    library: &'static str,
    backend: &'static str,
    image: &'static [u8],
}

const FAKES: [Fake; 3] = [
    Fake {
        source: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../offload-driver/fake/fake_cuda.c"
        ),
        library: "libcuda.so.1",
        backend: "cuda",
        image: offload_cuda::fixtures::KERNELS,
    },
    Fake {
        source: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../offload-driver/fake/fake_hip.c"
        ),
        library: "libamdhip64.so",
        backend: "hip",
        image: offload_hip::fixtures::KERNELS,
    },
    Fake {
        source: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../offload-driver/fake/fake_ze.c"
        ),
        library: "libze_loader.so.1",
        backend: "ze",
        image: offload_ze::fixtures::KERNELS,
    },
];

/// The C suite in full on each vendor's fake (a protocol fake over host memory: it
/// checks every driver call offload makes, and runs `add_one`; it is not the vendor's
/// driver): the fake's device is a GPU device beside offload's host device, and the fake
/// saw no protocol violation (it prints them at exit).
#[test]
fn c_api_on_the_three_fakes() {
    let ours = ours();
    let exe = compile(
        "api",
        "api-fakes",
        &[&format!("-L{}", ours.display()), "-lLLVMOffload"],
    );
    let host = host_image();
    for fake in &FAKES {
        let driver = offload_testing::fake::FakeDriver {
            case_var: "OL_TEST_FAKE_CASE",
            source: fake.source,
            build_dir: env!("CARGO_TARGET_TMPDIR"),
            prefix: "liboffload-fake",
            real_var: "",
        };
        let Some(dir) = driver.build(fake.backend, fake.library, &[]) else {
            return;
        };
        let image = dir.join("add_one.image");
        std::fs::write(&image, fake.image).expect("write the fake's program image");
        let mut full = Command::new(&exe);
        full.arg("full")
            .env("OL_TEST_HOST_IMAGE", &host)
            .env("OL_TEST_GPU_IMAGE", &image)
            .env("OFFLOAD_BACKENDS", format!("host,{}", fake.backend))
            .env(
                "LD_LIBRARY_PATH",
                format!("{}:{}", dir.display(), ours.display()),
            )
            .env("OL_TEST_CYCLES", "50");
        full.env("RUST_BACKTRACE", "0");
        let what = format!(
            "tests/c/api.c full, on offload with the {} fake",
            fake.backend
        );
        let out = run(full);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{what} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains("(platform offload ") && stdout.contains("type 2)"),
            "{what}: no GPU device of the fake's backend:\n{stdout}"
        );
        assert!(
            stdout.contains("(GPU image)"),
            "{what}: no kernel ran on the fake's device:\n{stdout}"
        );
        assert!(
            !stderr.contains("VIOLATIONS"),
            "{what}: the fake saw protocol violations:\n{stderr}"
        );
        print!("{what}:\n{stdout}");
    }
}

#[test]
fn memcheck_finds_no_leak() {
    if !present(VALGRIND) {
        return;
    }
    let ours = ours();
    let exe = compile(
        "api",
        "api-memcheck",
        &[&format!("-L{}", ours.display()), "-lLLVMOffload"],
    );
    let image = host_image();
    // The host backend only: lavapipe under memcheck would take minutes. The three runs at
    // once (each is one slow process).
    std::thread::scope(|s| {
        for (mode, backends) in [
            ("full", "host"),
            ("threads", "host"),
            ("initfail", "no-such-backend"),
        ] {
            let (exe, ours, image) = (&exe, &ours, &image);
            s.spawn(move || memcheck(exe, ours, image, mode, backends));
        }
    });
}

/// One run of `exe` under valgrind's memcheck: no leak, no error.
fn memcheck(exe: &Path, ours: &Path, image: &Path, mode: &str, backends: &str) {
    let mut memcheck = Command::new(VALGRIND);
    memcheck
        .args([
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect",
            "--show-leak-kinds=definite,indirect",
        ])
        .arg(exe)
        .arg(mode)
        .env("LD_LIBRARY_PATH", ours)
        .env("OFFLOAD_BACKENDS", backends)
        .env("OL_TEST_HOST_IMAGE", image)
        .env("OL_TEST_CYCLES", "20")
        .env("OL_TEST_ROUNDS", "20");
    output(memcheck, &format!("memcheck tests/c/api.c {mode}"));
}

#[test]
fn dlopen_cycles_unmap() {
    let lib = ours().join(SONAME);
    let exe = compile("dlopen", "dlopen", &["-ldl"]);
    // 200 cycles on the host device, a few with every backend (lavapipe's start costs
    // ~90 ms a cycle).
    let mut host = Command::new(&exe);
    host.arg(&lib).arg("200").env("OFFLOAD_BACKENDS", "host");
    output(host, "tests/c/dlopen.c, host");
    let mut all = Command::new(&exe);
    all.arg(&lib).arg("3");
    output(all, "tests/c/dlopen.c, every backend");
}
