//! Fault injection on the reference backend (issue 13), through `offload_core::faults`: one
//! backend error at every hal call each workload reaches (everyday calls; releases left to
//! shutdown's teardown; offload calls inside module callbacks; IPC endpoints), each checked
//! by `faults::sweep`: the error reaches the caller typed, shutdown completes, no objects
//! leak, the next run works. Then a panic at every site (offload does not catch backend
//! panics: the lifecycle must stay usable), and the conformance suite through the wrapper
//! with no fault planned. One test only: the runtime and the fault plan are process-wide.
#![cfg(feature = "conformance")]

#[path = "shared/fault_sweeps.rs"]
mod fault_sweeps;

use offload_core::faults;
use offload_core::reference::{Reference, fixture_image};
use offload_core::{Device, PlatformEntry, Platforms, Result};

fn fixture() -> Vec<u8> {
    fixture_image()
}

/// The reference backend has nothing beyond the shared workload.
fn extra(_: &Device) -> Result<()> {
    Ok(())
}

fn entry() -> PlatformEntry {
    faults::entry_with_ipc::<Reference>()
}

/// The wrapped backend alone, for the conformance suite.
struct FaultyOnly;

impl Platforms for FaultyOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![entry()]
    }
}

#[test]
fn every_injected_fault_is_reported_and_cleaned_up() {
    // The wrapper's own live counters (`faults::live`) are the reference backend's.
    fault_sweeps::run_all("reference", &Vec::new);
}
