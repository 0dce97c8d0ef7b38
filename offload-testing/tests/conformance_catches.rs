//! The conformance suite must catch a backend that breaks queue ordering (Q1): run on
//! [`reference::Unordered`], whose host reads and writes do not wait for queued work, it
//! has to fail, and its report has to name the broken read.
//!
//! One test per binary: the suite needs the process-global runtime to itself.

use offload_core::reference;
use offload_testing::conformance::{self, Fixtures, SuiteConfig};

#[test]
fn conformance_catches_a_backend_that_breaks_queue_ordering() {
    let outcome = std::panic::catch_unwind(|| {
        conformance::run::<reference::UnorderedOnly>(
            &Fixtures {
                image: reference::fixture_image(),
            },
            SuiteConfig {
                cases: 256,
                // One thread: the failure shrinks to a deterministic minimal case.
                max_threads: 1,
            },
        )
    });
    let payload =
        outcome.expect_err("the suite passed a backend whose host reads skip queued work");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    println!("the suite reported, as it should:\n{message}");
    assert!(
        message.contains("differ"),
        "the suite failed, but not on the bytes a host access saw: {message}"
    );
}
