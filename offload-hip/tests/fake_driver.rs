//! The HIP platform against a stand-in runtime: the paths a machine without an AMD GPU never
//! takes (devices found and described, init failures, no device, driver errors, a missing
//! symbol, the soname fallback).
//!
//! `tests/fixtures/fake_hip.c` is compiled here with the system C compiler into a private
//! directory (as `libamdhip64.so`, or a versioned name); each case runs in a child process
//! (this test binary again) with that directory first on `LD_LIBRARY_PATH`, which the
//! dynamic loader reads only at process start. Without a C compiler the tests print SKIP,
//! except under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_core::{Backend, BackendKind, Config, MemKind, NoPlatforms, Offload, Program, Uninit};
use offload_hip::HipPlatform;

/// Set in a child: which case to run.
const CASE: &str = "OFFLOAD_HIP_FAKE_CASE";

/// Builds the fake runtime with `defines` into a directory of its own, as `file`.
fn fake_runtime(variant: &str, file: &str, defines: &[&str]) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-hip-{variant}"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_hip.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(file))
        .arg(&source)
        .args(defines.iter().map(|d| format!("-D{d}")))
        .status();
    match built {
        Ok(status) if status.success() => Some(dir),
        other => {
            let why = format!("cannot build the fake {file} with `{cc}`: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            println!("SKIP: {why}");
            None
        }
    }
}

/// Runs `case` in a child that finds the fake runtime in `dir`; returns its RESULT line.
fn run(dir: &Path, case: &str, vars: &[(&str, &str)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CASE, case)
        .env("LD_LIBRARY_PATH", dir)
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {case} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, result)| result))
        .unwrap_or_else(|| panic!("child {case} printed no RESULT:\n{stdout}"))
        .to_string()
}

/// The child side: prints what it saw as `RESULT <text>`.
#[test]
fn child() {
    let Ok(case) = std::env::var(CASE) else {
        return; // not a child
    };
    let result = match case.as_str() {
        "open" => open_platform(),
        "runtime" => through_runtime(),
        other => format!("unknown case {other}"),
    };
    println!("RESULT {result}");
}

/// Opens the platform directly and describes what it found.
fn open_platform() -> String {
    let hip = match HipPlatform::open(&Config::default()) {
        Ok(hip) => hip,
        Err(e) => return format!("error {e:?}"),
    };
    let mut devices = Vec::new();
    for dev in hip.devices() {
        devices.push(match hip.device_info(&dev) {
            Ok(i) => format!("{}|{}|{}|{}", i.name, i.vendor, i.memory, i.compute_units),
            Err(e) => format!("error {e:?}"),
        });
    }
    let first = hip.devices().remove(0);
    let alloc = hip.alloc(&first, 64, MemKind::Device).unwrap_err();
    hip.deinit().unwrap();
    let stats = offload_hip::stats();
    format!(
        "name={} devices=[{}] alloc={alloc} opened={} deinitialised={}",
        hip.name(),
        devices.join("; "),
        stats.opened,
        stats.deinitialised
    )
}

/// Starts a runtime with only the HIP platform and uses its devices.
fn through_runtime() -> String {
    let rt = match Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_hip::platform())
        .start()
    {
        Ok(rt) => rt,
        Err(e) => return format!("error {e:?}"),
    };
    let platforms = rt.platforms().unwrap();
    let devices = rt.devices().unwrap();
    let names: Vec<String> = devices.iter().map(|d| d.info().unwrap().name).collect();
    let alloc = devices[0].alloc(64, MemKind::Device).unwrap_err();
    let load = Program::new([0u8; 16]).load(&devices[0]).unwrap_err();
    assert!(devices.iter().all(|d| d.backend() == BackendKind::Hip));
    drop(devices);
    let down = rt.shutdown().unwrap();
    let stats = offload_hip::stats();
    format!(
        "platform={} devices={names:?} alloc={alloc} load={load} \
         last={} opened={} deinitialised={}",
        platforms[0].name,
        down.was_last(),
        stats.opened,
        stats.deinitialised
    )
}

#[test]
fn devices_are_found_and_described() {
    let Some(dir) = fake_runtime("full", "libamdhip64.so", &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[]),
        "name=HIP 6.2.41133 \
         devices=[Fake Instinct 0|AMD|4294967296|60; Fake Instinct 1|AMD|8589934592|61] \
         alloc=hip: Device::alloc: unsupported: memory is not implemented for hip yet \
         opened=1 deinitialised=1"
    );
}

#[test]
fn the_runtime_lists_the_devices_and_deinitialises() {
    let Some(dir) = fake_runtime("runtime", "libamdhip64.so", &[]) else {
        return;
    };
    let result = run(&dir, "runtime", &[]);
    assert!(
        result.starts_with(
            "platform=HIP 6.2.41133 devices=[\"Fake Instinct 0\", \"Fake Instinct 1\"] \
             alloc=hip: Device::alloc: unsupported: memory is not implemented for hip yet \
             load=hip: Program::load: unsupported: "
        ),
        "{result}"
    );
    assert!(
        result.ends_with("last=true opened=1 deinitialised=1"),
        "{result}"
    );
}

#[test]
fn a_failing_init_or_no_device_is_driver_not_found() {
    let Some(dir) = fake_runtime("absent", "libamdhip64.so", &[]) else {
        return;
    };
    let not_found = |reason: &str| {
        format!(
            "error DriverNotFound {{ backend: Hip, library: \"libamdhip64.so\", \
             reason: \"{reason}\" }}"
        )
    };
    // As ROCm 5 answers without a GPU: both calls are named.
    assert_eq!(
        run(
            &dir,
            "open",
            &[("FAKE_HIP_INIT", "101"), ("FAKE_HIP_COUNT_RESULT", "100")]
        ),
        not_found(
            "hipInit: hipErrorInvalidDevice (101); hipGetDeviceCount: hipErrorNoDevice (100)"
        )
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_HIP_INIT", "999")]),
        not_found("hipInit: hipErrorUnknown (999)")
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_HIP_COUNT_RESULT", "100")]),
        not_found("hipGetDeviceCount: hipErrorNoDevice (100)")
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_HIP_COUNT", "0")]),
        not_found("hipGetDeviceCount: 0 devices")
    );
    // Through the runtime, the platform it was asked for fails start with that reason.
    assert_eq!(
        run(&dir, "runtime", &[("FAKE_HIP_COUNT_RESULT", "100")]),
        not_found("hipGetDeviceCount: hipErrorNoDevice (100)")
    );
}

#[test]
fn other_failures_are_driver_errors_with_the_code() {
    let Some(dir) = fake_runtime("errors", "libamdhip64.so", &[]) else {
        return;
    };
    // ROCm 5's description is the name again: it is not repeated.
    assert_eq!(
        run(&dir, "open", &[("FAKE_HIP_COUNT_RESULT", "999")]),
        "error Driver { backend: Hip, call: \"Offload::init\", code: 999, \
         message: \"hipGetDeviceCount: hipErrorUnknown (999)\" }"
    );
    let result = run(&dir, "open", &[("FAKE_HIP_NAME_RESULT", "101")]);
    assert!(
        result.contains(
            "devices=[error Driver { backend: Hip, call: \"Device::info\", code: 101, \
             message: \"hipDeviceGetName: hipErrorInvalidDevice (101): invalid device ordinal\" }; "
        ),
        "{result}"
    );
}

#[test]
fn a_missing_required_symbol_is_driver_not_found() {
    let Some(dir) = fake_runtime("no-total-mem", "libamdhip64.so", &["NO_TOTAL_MEM"]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[]),
        "error DriverNotFound { backend: Hip, library: \"libamdhip64.so\", \
         reason: \"missing symbol hipDeviceTotalMem\" }"
    );
}

#[test]
fn codes_are_named_without_hip_get_error_name() {
    let Some(dir) = fake_runtime("no-error-names", "libamdhip64.so", &["NO_ERROR_NAMES"]) else {
        return;
    };
    let result = run(&dir, "open", &[("FAKE_HIP_COUNT_RESULT", "100")]);
    assert!(
        result.contains("reason: \"hipGetDeviceCount: hipErrorNoDevice (100)\""),
        "{result}"
    );
    let result = run(&dir, "open", &[("FAKE_HIP_INIT", "12345")]);
    assert!(
        result.contains("reason: \"hipInit: unknown hipError_t (12345)\""),
        "{result}"
    );
    assert!(run(&dir, "open", &[]).starts_with("name=HIP 6.2.41133 devices=[Fake Instinct 0|"));
}

#[test]
fn a_versioned_soname_is_found_when_the_development_link_is_missing() {
    let Some(dir) = fake_runtime("so7", "libamdhip64.so.7", &[]) else {
        return;
    };
    // The fake directory has only .so.7: without a system libamdhip64.so (a development
    // link), .so.7 is next in line, before any system .so.6 or .so.5.
    let result = run(&dir, "open", &[("FAKE_HIP_COUNT", "0")]);
    if result.contains("library: \"libamdhip64.so\"") {
        println!("SKIP: this machine has a libamdhip64.so of its own, which comes first");
        return;
    }
    assert_eq!(
        result,
        "error DriverNotFound { backend: Hip, library: \"libamdhip64.so.7\", \
         reason: \"hipGetDeviceCount: 0 devices\" }"
    );
}
