//! The host backend runs the backend-independent conformance suite on this machine's CPU,
//! with the kernels of fixtures/kernels.c. `OFFLOAD_CONFORMANCE_CASES=100000` makes it a
//! soak run. This file holds only this test: the suite needs the runtime to itself.

use offload_core::{PlatformEntry, Platforms};
use offload_testing::conformance::{self, Fixtures, SuiteConfig};

/// Just the host backend, so the suite's first device is a host device.
struct HostOnly;

impl Platforms for HostOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_host::platform()]
    }
}

#[test]
fn host_backend_passes_conformance() {
    let fixtures = Fixtures {
        image: offload_host::fixtures::KERNELS.to_vec(),
    };
    conformance::run::<HostOnly>(&fixtures, SuiteConfig::default());
}
