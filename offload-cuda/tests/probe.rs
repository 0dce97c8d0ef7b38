//! Probing for CUDA on the machine the tests run on (`offload_testing::fake::probe`).
//! Without a CUDA driver (libcuda.so.1 absent, as on CI: no package installs it), opening
//! the platform is `Error::DriverNotFound` carrying the dynamic loader's message; a driver
//! that cannot initialise or has no device names its call and code: an absent platform,
//! never a panic, directly and through the runtime. On a machine with CUDA the same tests
//! check the devices instead.

use offload_cuda::CudaPlatform;
use offload_testing::fake::probe::Probe;

const PROBE: Probe = Probe {
    what: "the CUDA driver",
    libraries: &["libcuda.so.1"],
    calls: &["cu"],
    no_device: &[],
    may_be_absent: true,
};

#[test]
fn opening_without_a_driver_is_driver_not_found() {
    PROBE.open_directly::<CudaPlatform>(|| offload_cuda::stats().opened);
}

#[test]
fn the_runtime_fails_start_naming_cuda() {
    PROBE.through_runtime::<CudaPlatform>(offload_cuda::platform);
}
