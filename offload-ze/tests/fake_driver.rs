//! The Level Zero platform against a stand-in loader: the paths a machine without a Level
//! Zero driver never takes (drivers and devices found and described, init failures, no
//! driver or device, driver errors, missing symbols).
//!
//! `offload-driver/fake/fake_ze.c` (the protocol-checking fake loader) is compiled here with
//! the system C compiler into a private directory as `libze_loader.so.1`; each case runs in a child process (this test binary
//! again) with that directory first on `LD_LIBRARY_PATH`, which the dynamic loader reads only
//! at process start. Without a C compiler the tests print SKIP, except under `CI=true`.

use offload_testing::fake::FakeDriver;
use offload_ze::ZePlatform;

/// The stand-in loader, built and run by offload-driver's harness.
const FAKE: FakeDriver = FakeDriver {
    case_var: "OFFLOAD_ZE_FAKE_CASE",
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_ze.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: "fake-ze",
    real_var: "",
};

/// The child side: prints what it saw as `RESULT <text>`.
#[test]
fn child() {
    FAKE.child::<ZePlatform>(offload_ze::platform, offload_ze::stats);
}

#[test]
fn devices_are_found_and_described() {
    let Some(dir) = FAKE.build("full", "libze_loader.so.1", &[]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[]),
        "name=Level Zero 1.3 \
         devices=[Fake Arc 0.0|Intel|4294967296|64; Fake Arc 0.1|PCI vendor 0x1234|2147483648|16] \
         alloc=ok opened=1 deinitialised=1"
    );
    // Devices of every driver, drivers in the loader's order.
    let result = FAKE.run(
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
    let Some(dir) = FAKE.build("runtime", "libze_loader.so.1", &[]) else {
        return;
    };
    let result = FAKE.run(&dir, "runtime", &[]);
    assert!(
        result.starts_with(
            "platform=Level Zero 1.3 devices=[\"Fake Arc 0.0\", \"Fake Arc 0.1\"] \
             alloc=ok load=ze: Program::load: invalid binary: "
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
    let Some(dir) = FAKE.build("absent", "libze_loader.so.1", &[]) else {
        return;
    };
    let not_found = |reason: &str| {
        format!(
            "error DriverNotFound {{ backend: Ze, library: \"libze_loader.so.1\", \
             reason: \"{reason}\" }}"
        )
    };
    // Drivers that load and find no device.
    let no_device = |reason: &str| {
        format!(
            "error NoDevice {{ backend: Ze, library: \"libze_loader.so.1\", \
             reason: \"{reason}\" }}"
        )
    };
    // What the real loader answers without a driver.
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_ZE_INIT", "2013265921")]),
        not_found(
            "zeInit: ZE_RESULT_ERROR_UNINITIALIZED (0x78000001): \
             no Level Zero driver could be initialised"
        )
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_ZE_INIT", "1879048193")]),
        not_found("zeInit: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)")
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_ZE_DRIVERS", "0")]),
        not_found("zeDriverGet: 0 drivers")
    );
    assert_eq!(
        FAKE.run(
            &dir,
            "open",
            &[("FAKE_ZE_DEVICES", "0"), ("FAKE_ZE_DRIVERS", "2")]
        ),
        no_device("zeDeviceGet: 0 devices on 2 driver(s)")
    );
    // Through the runtime, the platform it was asked for fails start with that reason.
    assert_eq!(
        FAKE.run(&dir, "runtime", &[("FAKE_ZE_DRIVERS", "0")]),
        not_found("zeDriverGet: 0 drivers")
    );
}

#[test]
fn other_failures_are_driver_errors_with_the_code() {
    let Some(dir) = FAKE.build("errors", "libze_loader.so.1", &[]) else {
        return;
    };
    let result = FAKE.run(&dir, "open", &[("FAKE_ZE_PROPS_RESULT", "1879048193")]);
    assert!(
        result.contains(
            "devices=[error Driver { backend: Ze, call: \"\", code: 1879048193, \
             message: \"zeDeviceGetProperties: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)\" }; "
        ),
        "{result}"
    );
    let result = FAKE.run(&dir, "open", &[("FAKE_ZE_PROPS_RESULT", "12345")]);
    assert!(
        result.contains("message: \"zeDeviceGetProperties: unknown ze_result_t (0x3039)\""),
        "{result}"
    );
}

#[test]
fn a_missing_required_symbol_is_driver_not_found() {
    let Some(dir) = FAKE.build(
        "no-memory-properties",
        "libze_loader.so.1",
        &["NO_MEMORY_PROPERTIES"],
    ) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[]),
        "error DriverNotFound { backend: Ze, library: \"libze_loader.so.1\", \
         reason: \"missing symbol zeDeviceGetMemoryProperties\" }"
    );
}

#[test]
fn a_missing_optional_symbol_is_done_without() {
    let Some(dir) = FAKE.build("no-api-version", "libze_loader.so.1", &["NO_API_VERSION"]) else {
        return;
    };
    assert!(
        FAKE.run(&dir, "open", &[])
            .starts_with("name=Level Zero devices=[Fake Arc 0.0|")
    );
}
