//! The CUDA platform against a stand-in driver: the paths a machine without CUDA never takes
//! (devices found and described, init failures, no device, driver errors, a missing symbol).
//!
//! `tests/fixtures/fake_cuda.c` is compiled here with the system C compiler into a private
//! directory as `libcuda.so.1`; each case runs in a child process (this test binary again)
//! with that directory first on `LD_LIBRARY_PATH`, which the dynamic loader reads only at
//! process start. Without a C compiler the tests print SKIP, except under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_core::{Backend, BackendKind, Config, MemKind, NoPlatforms, Offload, Program, Uninit};
use offload_cuda::CudaPlatform;

/// Set in a child: which case to run.
const CASE: &str = "OFFLOAD_CUDA_FAKE_CASE";

/// Builds the fake driver with `defines` into a directory of its own, as `libcuda.so.1`.
fn fake_driver(variant: &str, defines: &[&str]) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-cuda-{variant}"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_cuda.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(&source)
        .args(defines.iter().map(|d| format!("-D{d}")))
        .status();
    match built {
        Ok(status) if status.success() => Some(dir),
        other => {
            let why = format!("cannot build the fake libcuda.so.1 with `{cc}`: {other:?}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            println!("SKIP: {why}");
            None
        }
    }
}

/// Runs `case` in a child that finds the fake driver in `dir`; returns its RESULT line.
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
    let cuda = match CudaPlatform::open(&Config::default()) {
        Ok(cuda) => cuda,
        Err(e) => return format!("error {e:?}"),
    };
    let mut devices = Vec::new();
    for dev in cuda.devices() {
        devices.push(match cuda.device_info(&dev) {
            Ok(i) => format!("{}|{}|{}|{}", i.name, i.vendor, i.memory, i.compute_units),
            Err(e) => format!("error {e:?}"),
        });
    }
    let first = cuda.devices().remove(0);
    let alloc = cuda.alloc(&first, 64, MemKind::Device).unwrap_err();
    cuda.deinit().unwrap();
    let stats = offload_cuda::stats();
    format!(
        "name={} devices=[{}] alloc={alloc} opened={} deinitialised={}",
        cuda.name(),
        devices.join("; "),
        stats.opened,
        stats.deinitialised
    )
}

/// Starts a runtime with only the CUDA platform and uses its devices.
fn through_runtime() -> String {
    let rt = match Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_cuda::platform())
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
    assert!(devices.iter().all(|d| d.backend() == BackendKind::Cuda));
    drop(devices);
    let down = rt.shutdown().unwrap();
    let stats = offload_cuda::stats();
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
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[]),
        "name=CUDA 12.4 \
         devices=[Fake GPU 0|NVIDIA|1073741824|110; Fake GPU 1|NVIDIA|2147483648|111] \
         alloc=cuda: Device::alloc: unsupported: memory is not implemented for cuda yet \
         opened=1 deinitialised=1"
    );
}

#[test]
fn the_runtime_lists_the_devices_and_deinitialises() {
    let Some(dir) = fake_driver("runtime", &[]) else {
        return;
    };
    let result = run(&dir, "runtime", &[]);
    assert!(
        result.starts_with(
            "platform=CUDA 12.4 devices=[\"Fake GPU 0\", \"Fake GPU 1\"] \
             alloc=cuda: Device::alloc: unsupported: memory is not implemented for cuda yet \
             load=cuda: Program::load: unsupported: "
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
    let Some(dir) = fake_driver("absent", &[]) else {
        return;
    };
    let not_found = |reason: &str| {
        format!(
            "error DriverNotFound {{ backend: Cuda, library: \"libcuda.so.1\", \
             reason: \"{reason}\" }}"
        )
    };
    assert_eq!(
        run(&dir, "open", &[("FAKE_CU_INIT", "100")]),
        not_found("cuInit: CUDA_ERROR_NO_DEVICE (100)")
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_CU_INIT", "999")]),
        not_found("cuInit: CUDA_ERROR_UNKNOWN (999)")
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_CU_COUNT_RESULT", "100")]),
        not_found("cuDeviceGetCount: CUDA_ERROR_NO_DEVICE (100)")
    );
    assert_eq!(
        run(&dir, "open", &[("FAKE_CU_COUNT", "0")]),
        not_found("cuDeviceGetCount: 0 devices")
    );
    // Through the runtime, the platform it was asked for fails start with that reason.
    assert_eq!(
        run(&dir, "runtime", &[("FAKE_CU_INIT", "100")]),
        not_found("cuInit: CUDA_ERROR_NO_DEVICE (100)")
    );
}

#[test]
fn other_failures_are_driver_errors_with_the_code() {
    let Some(dir) = fake_driver("errors", &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[("FAKE_CU_COUNT_RESULT", "999")]),
        "error Driver { backend: Cuda, call: \"Offload::init\", code: 999, \
         message: \"cuDeviceGetCount: CUDA_ERROR_UNKNOWN (999): unknown error\" }"
    );
    let result = run(&dir, "open", &[("FAKE_CU_NAME_RESULT", "101")]);
    assert!(
        result.contains(
            "devices=[error Driver { backend: Cuda, call: \"Device::info\", code: 101, \
             message: \"cuDeviceGetName: CUDA_ERROR_INVALID_DEVICE (101): \
             invalid device ordinal\" }; "
        ),
        "{result}"
    );
}

#[test]
fn a_missing_required_symbol_is_driver_not_found() {
    let Some(dir) = fake_driver("no-total-mem", &["NO_TOTAL_MEM"]) else {
        return;
    };
    assert_eq!(
        run(&dir, "open", &[]),
        "error DriverNotFound { backend: Cuda, library: \"libcuda.so.1\", \
         reason: \"missing symbol cuDeviceTotalMem_v2\" }"
    );
}

#[test]
fn codes_are_named_without_cu_get_error_name() {
    let Some(dir) = fake_driver("no-error-names", &["NO_ERROR_NAMES"]) else {
        return;
    };
    let result = run(&dir, "open", &[("FAKE_CU_INIT", "100")]);
    assert!(
        result.contains("reason: \"cuInit: CUDA_ERROR_NO_DEVICE (100)\""),
        "{result}"
    );
    let result = run(&dir, "open", &[("FAKE_CU_INIT", "12345")]);
    assert!(
        result.contains("reason: \"cuInit: unknown CUresult (12345)\""),
        "{result}"
    );
    // The optional symbols are absent, and the platform works without them.
    assert!(run(&dir, "open", &[]).starts_with("name=CUDA 12.4 devices=[Fake GPU 0|"));
}
