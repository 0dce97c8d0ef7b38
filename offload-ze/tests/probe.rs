//! Probing for Level Zero on the machine the tests run on
//! (`offload_testing::fake::probe`). CI installs the real Level Zero loader (Debian's
//! `libze1`) without any driver: the loader loads and reports that it has no driver (or no
//! device), which is `Error::DriverNotFound` naming the call and its code (not a dlopen
//! failure): an absent platform, never a panic, directly and through the runtime. Where
//! the loader is not installed the tests print SKIP, except under `CI=true`, where they
//! fail. On a machine with a Level Zero device they check the devices instead.

use offload_testing::fake::probe::Probe;
use offload_ze::ZePlatform;

const PROBE: Probe = Probe {
    what: "the Level Zero loader",
    libraries: &["libze_loader.so.1"],
    calls: &["zeInit", "zeDriverGet", "zeDeviceGet"],
    no_device: &[
        "ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)",
        ": 0 drivers",
        ": 0 devices",
    ],
    may_be_absent: false,
};

#[test]
fn opening_without_a_driver_is_driver_not_found() {
    PROBE.open_directly::<ZePlatform>(|| offload_ze::stats().opened);
}

#[test]
fn the_runtime_fails_start_naming_ze() {
    PROBE.through_runtime::<ZePlatform>(offload_ze::platform);
}
