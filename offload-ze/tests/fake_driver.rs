//! The Level Zero platform against a stand-in loader: the paths a machine without a Level
//! Zero driver never takes (drivers and devices found and described, init failures, no
//! driver or device, driver errors, missing symbols).
//!
//! `tests/fixtures/fake_ze.c` is compiled here with the system C compiler into a private
//! directory as `libze_loader.so.1`; each case runs in a child process (this test binary
//! again) with that directory first on `LD_LIBRARY_PATH`, which the dynamic loader reads only
//! at process start. Without a C compiler the tests print SKIP, except under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_core::{Backend, BackendKind, Config, MemKind, NoPlatforms, Offload, Program, Uninit};
use offload_ze::ZePlatform;

/// Set in a child: which case to run.
const CASE: &str = "OFFLOAD_ZE_FAKE_CASE";

/// Builds the fake loader with `defines` into a directory of its own, as
/// `libze_loader.so.1`.
fn fake_loader(variant: &str, defines: &[&str]) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-ze-{variant}"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_ze.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libze_loader.so.1"))
        .arg(&source)
        .args(defines.iter().map(|d| format!("-D{d}")))
        .status();
    match built {
        Ok(status) if status.success() => Some(dir),
        other => {
            let why = format!("cannot build the fake libze_loader.so.1 with `{cc}`: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            println!("SKIP: {why}");
            None
        }
    }
}

/// Runs `case` in a child that finds the fake loader in `dir`; returns its RESULT line.
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
    let ze = match ZePlatform::open(&Config::default()) {
        Ok(ze) => ze,
        Err(e) => return format!("error {e:?}"),
    };
    let mut devices = Vec::new();
    for dev in ze.devices() {
        devices.push(match ze.device_info(&dev) {
            Ok(i) => format!("{}|{}|{}|{}", i.name, i.vendor, i.memory, i.compute_units),
            Err(e) => format!("error {e:?}"),
        });
    }
    let first = ze.devices().remove(0);
    let alloc = ze.alloc(&first, 64, MemKind::Device).unwrap_err();
    ze.deinit().unwrap();
    let stats = offload_ze::stats();
    format!(
        "name={} devices=[{}] alloc={alloc} opened={} deinitialised={}",
        ze.name(),
        devices.join("; "),
        stats.opened,
        stats.deinitialised
    )
}

/// Starts a runtime with only the Level Zero platform and uses its devices.
fn through_runtime() -> String {
    let rt = match Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_ze::platform())
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
    assert!(devices.iter().all(|d| d.backend() == BackendKind::Ze));
    drop(devices);
    let down = rt.shutdown().unwrap();
    let stats = offload_ze::stats();
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
    let Some(dir) = fake_loader("full", &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[]),
        "name=Level Zero 1.3 \
         devices=[Fake Arc 0.0|Intel|4294967296|64; Fake Arc 0.1|PCI vendor 0x1234|2147483648|16] \
         alloc=ze: Device::alloc: unsupported: memory is not implemented for ze yet \
         opened=1 deinitialised=1"
    );
    // Devices of every driver, drivers in the loader's order.
    let result = run(
        &dir,
        "open",
        &[("FAKE_ZE_DRIVERS", "2"), ("FAKE_ZE_DEVICES", "1")],
    );
    assert!(
        result.contains("devices=[Fake Arc 0.0|Intel|4294967296|64; Fake Arc 1.0|Intel|"),
        "{result}"
    );
}

#[test]
fn the_runtime_lists_the_devices_and_deinitialises() {
    let Some(dir) = fake_loader("runtime", &[]) else {
        return;
    };
    let result = run(&dir, "runtime", &[]);
    assert!(
        result.starts_with(
            "platform=Level Zero 1.3 devices=[\"Fake Arc 0.0\", \"Fake Arc 0.1\"] \
             alloc=ze: Device::alloc: unsupported: memory is not implemented for ze yet \
             load=ze: Program::load: unsupported: "
        ),
        "{result}"
    );
    assert!(
        result.ends_with("last=true opened=1 deinitialised=1"),
        "{result}"
    );
}

#[test]
fn no_driver_or_no_device_is_driver_not_found() {
    let Some(dir) = fake_loader("absent", &[]) else {
        return;
    };
    let not_found = |reason: &str| {
        format!(
            "error DriverNotFound {{ backend: Ze, library: \"libze_loader.so.1\", \
             reason: \"{reason}\" }}"
        )
    };
    // What the real loader answers without a driver.
    assert_eq!(
        run(&dir, "open", &[("FAKE_ZE_INIT", "2013265921")]),
        not_found(
            "zeInit: ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): \
             no Level Zero driver could be initialised"
        )
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_ZE_INIT", "1879048193")]),
        not_found("zeInit: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)")
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_ZE_DRIVERS", "0")]),
        not_found("zeDriverGet: 0 drivers")
    );
    assert_eq!(
        run(
            &dir,
            "open",
            &[("FAKE_ZE_DEVICES", "0"), ("FAKE_ZE_DRIVERS", "2")]
        ),
        not_found("zeDeviceGet: 0 devices on 2 driver(s)")
    );
    // Through the runtime, the platform it was asked for fails start with that reason.
    assert_eq!(
        run(&dir, "runtime", &[("FAKE_ZE_DRIVERS", "0")]),
        not_found("zeDriverGet: 0 drivers")
    );
}

#[test]
fn other_failures_are_driver_errors_with_the_code() {
    let Some(dir) = fake_loader("errors", &[]) else {
        return;
    };
    let result = run(&dir, "open", &[("FAKE_ZE_PROPS_RESULT", "1879048193")]);
    assert!(
        result.contains(
            "devices=[error Driver { backend: Ze, call: \"Device::info\", code: 1879048193, \
             message: \"zeDeviceGetProperties: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)\" }; "
        ),
        "{result}"
    );
    let result = run(&dir, "open", &[("FAKE_ZE_PROPS_RESULT", "12345")]);
    assert!(
        result.contains("message: \"zeDeviceGetProperties: unknown ze_result_t (0x3039)\""),
        "{result}"
    );
}

#[test]
fn a_missing_required_symbol_is_driver_not_found() {
    let Some(dir) = fake_loader("no-memory-properties", &["NO_MEMORY_PROPERTIES"]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[]),
        "error DriverNotFound { backend: Ze, library: \"libze_loader.so.1\", \
         reason: \"missing symbol zeDeviceGetMemoryProperties\" }"
    );
}

#[test]
fn a_missing_optional_symbol_is_done_without() {
    let Some(dir) = fake_loader("no-api-version", &["NO_API_VERSION"]) else {
        return;
    };
    assert!(run(&dir, "open", &[]).starts_with("name=Level Zero devices=[Fake Arc 0.0|"));
}
