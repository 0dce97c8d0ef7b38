//! Fault injection on the reference backend, through `offload_testing::faults`: the
//! shared fault-mode workloads (`faults::workloads::run_all`): one backend error at every
//! hal call each workload reaches (everyday calls; releases left to shutdown's teardown;
//! offload calls inside module callbacks; IPC endpoints), each checked by `faults::sweep`:
//! the error reaches the caller typed, shutdown completes, no objects leak, the next run
//! works. Then a panic at every site (offload does not catch backend panics: the lifecycle
//! must stay usable), and the conformance suite through the wrapper with no fault planned.
//! One test only: the runtime and the fault plan are process-wide.

use offload_core::reference::{Reference, fixture_image};
use offload_testing::faults::workloads::{Subject, run_all};

#[test]
fn every_injected_fault_is_reported_and_cleaned_up() {
    // The wrapper's own live counters (`faults::live`) are the reference backend's.
    run_all::<Reference>(&Subject {
        name: "reference",
        fixture: &fixture_image(),
        globals: true,
        extra: &|_| Ok(()),
        counters: &Vec::new,
    });
}
