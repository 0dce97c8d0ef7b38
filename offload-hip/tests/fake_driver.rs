//! The HIP platform against a stand-in runtime: the paths a machine without an AMD GPU never
//! takes (devices found and described, init failures, no device, driver errors, a missing
//! symbol, the soname fallback).
//!
//! `offload-driver/fake/fake_hip.c` is compiled here with the system C compiler into a private
//! directory (as `libamdhip64.so`, or a versioned name); each case runs in a child process
//! (this test binary again) with that directory first on `LD_LIBRARY_PATH`, which the
//! dynamic loader reads only at process start. Without a C compiler the tests print SKIP,
//! except under `CI=true`.

use offload_hip::HipPlatform;
use offload_testing::fake::FakeDriver;

/// The stand-in runtime, built and run by offload-driver's harness.
const FAKE: FakeDriver = FakeDriver {
    case_var: "OFFLOAD_HIP_FAKE_CASE",
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_hip.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: "fake-hip",
    real_var: "",
};

/// The child side: prints what it saw as `RESULT <text>`.
#[test]
fn child() {
    FAKE.child::<HipPlatform>(offload_hip::platform, offload_hip::stats);
}

#[test]
fn devices_are_found_and_described() {
    let Some(dir) = FAKE.build("full", "libamdhip64.so", &[]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[]),
        "name=HIP 6.2.41133 \
         devices=[Fake Instinct 0|AMD|4294967296|60; Fake Instinct 1|AMD|8589934592|61] \
         alloc=ok opened=1 deinitialised=1"
    );
}

#[test]
fn properties_come_from_hip_device_get_attribute() {
    let Some(dir) = FAKE.build("full", "libamdhip64.so", &[]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "properties", &[]),
        "vendor_id=Some(4098) driver=Some(\"6.2.41133\") block_threads=Some(1024) \
         block=Some([1024, 1024, 1024]) grid=Some([2147483647, 65536, 65536]) alloc=None \
         shared=Some(65536) bits=Some(64) clock=Some(1700)"
    );
}

#[test]
fn the_runtime_lists_the_devices_and_deinitialises() {
    let Some(dir) = FAKE.build("runtime", "libamdhip64.so", &[]) else {
        return;
    };
    let result = FAKE.run(&dir, "runtime", &[]);
    assert_eq!(
        result,
        "platform=HIP 6.2.41133 devices=[\"Fake Instinct 0\", \"Fake Instinct 1\"] \
         alloc=ok load=hip: Program::load: invalid binary: not an AMD GPU code object (no ELF \
         header) last=true opened=1 deinitialised=1"
    );
}

#[test]
fn a_failing_init_is_driver_not_found_and_no_device_is_no_device() {
    let Some(dir) = FAKE.build("absent", "libamdhip64.so", &[]) else {
        return;
    };
    let not_found = |reason: &str| {
        format!(
            "error DriverNotFound {{ backend: Hip, library: \"libamdhip64.so\", \
             reason: \"{reason}\" }}"
        )
    };
    let no_device = |reason: &str| {
        format!(
            "error NoDevice {{ backend: Hip, library: \"libamdhip64.so\", \
             reason: \"{reason}\" }}"
        )
    };
    // As ROCm 5 answers without a GPU: both calls are named.
    assert_eq!(
        FAKE.run(
            &dir,
            "open",
            &[("FAKE_HIP_INIT", "101"), ("FAKE_HIP_COUNT_RESULT", "100")]
        ),
        no_device(
            "hipInit: hipErrorInvalidDevice (101); hipGetDeviceCount: hipErrorNoDevice (100)"
        )
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_HIP_INIT", "999")]),
        not_found("hipInit: hipErrorUnknown (999)")
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_HIP_COUNT_RESULT", "100")]),
        no_device("hipGetDeviceCount: hipErrorNoDevice (100)")
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_HIP_COUNT", "0")]),
        no_device("hipGetDeviceCount: 0 devices")
    );
    // Through the runtime, the platform it was asked for fails start with that reason.
    assert_eq!(
        FAKE.run(&dir, "runtime", &[("FAKE_HIP_COUNT_RESULT", "100")]),
        no_device("hipGetDeviceCount: hipErrorNoDevice (100)")
    );
}

#[test]
fn other_failures_are_driver_errors_with_the_code() {
    let Some(dir) = FAKE.build("errors", "libamdhip64.so", &[]) else {
        return;
    };
    // ROCm 5's description is the name again: it is not repeated.
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_HIP_COUNT_RESULT", "999")]),
        "error Driver { backend: Hip, call: \"Offload::init\", code: 999, \
         message: \"hipGetDeviceCount: hipErrorUnknown (999)\" }"
    );
    let result = FAKE.run(&dir, "open", &[("FAKE_HIP_NAME_RESULT", "101")]);
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
    let Some(dir) = FAKE.build("no-total-mem", "libamdhip64.so", &["NO_TOTAL_MEM"]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[]),
        "error DriverNotFound { backend: Hip, library: \"libamdhip64.so\", \
         reason: \"missing symbol hipDeviceTotalMem\" }"
    );
}

#[test]
fn codes_are_named_without_hip_get_error_name() {
    let Some(dir) = FAKE.build("no-error-names", "libamdhip64.so", &["NO_ERROR_NAMES"]) else {
        return;
    };
    let result = FAKE.run(&dir, "open", &[("FAKE_HIP_COUNT_RESULT", "100")]);
    assert!(
        result.contains("reason: \"hipGetDeviceCount: hipErrorNoDevice (100)\""),
        "{result}"
    );
    let result = FAKE.run(&dir, "open", &[("FAKE_HIP_INIT", "12345")]);
    assert!(
        result.contains("reason: \"hipInit: unknown hipError_t (12345)\""),
        "{result}"
    );
    assert!(
        FAKE.run(&dir, "open", &[])
            .starts_with("name=HIP 6.2.41133 devices=[Fake Instinct 0|")
    );
}

#[test]
fn a_versioned_soname_is_found_when_the_development_link_is_missing() {
    let Some(dir) = FAKE.build("so7", "libamdhip64.so.7", &[]) else {
        return;
    };
    // The fake directory has only .so.7: without a system libamdhip64.so (a development
    // link), .so.7 is next in line, before any system .so.6 or .so.5.
    let result = FAKE.run(&dir, "open", &[("FAKE_HIP_COUNT", "0")]);
    if result.contains("library: \"libamdhip64.so\"") {
        println!("SKIP: this machine has a libamdhip64.so of its own, which comes first");
        return;
    }
    assert_eq!(
        result,
        "error NoDevice { backend: Hip, library: \"libamdhip64.so.7\", \
         reason: \"hipGetDeviceCount: 0 devices\" }"
    );
}
