//! The conformance suite on the reference backend.
//!
//! This binary holds one test only: the suite needs the process-global runtime to itself.
//! `OFFLOAD_CONFORMANCE_CASES=100000 cargo test -p offload-testing --test
//! conformance_reference` is the soak run.

use offload_core::reference;
use offload_testing::conformance::{self, Fixtures, SuiteConfig};

#[test]
fn reference_backend_passes_conformance() {
    conformance::run::<reference::Only>(
        &Fixtures {
            image: reference::fixture_image(),
        },
        SuiteConfig::default(),
    );
}
