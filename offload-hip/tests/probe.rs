//! Probing for HIP on the machine the tests run on (`offload_testing::fake::probe`). CI
//! installs the real HIP runtime (Debian's `libamdhip64-5`) on a machine without an AMD
//! GPU: the runtime loads, and `hipInit`/`hipGetDeviceCount` report that there is no
//! device, which is `Error::DriverNotFound` naming those calls and `hipErrorNoDevice (100)`
//! (not a dlopen failure): an absent platform, never a panic, directly and through the
//! runtime. Where the runtime is not installed the tests print SKIP, except under
//! `CI=true`, where they fail. On a machine with an AMD GPU they check the devices instead.

use offload_hip::HipPlatform;
use offload_testing::fake::probe::Probe;

const PROBE: Probe = Probe {
    what: "the HIP runtime",
    libraries: &offload_hip::LIBRARIES,
    calls: &["hipInit", "hipGetDeviceCount"],
    no_device: &["hipErrorNoDevice (100)"],
    may_be_absent: false,
};

#[test]
fn opening_without_a_device_is_driver_not_found() {
    PROBE.open_directly::<HipPlatform>(|| offload_hip::stats().opened);
}

#[test]
fn the_runtime_fails_start_naming_hip() {
    PROBE.through_runtime::<HipPlatform>(offload_hip::platform);
}
