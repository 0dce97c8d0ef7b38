//! Fault injection on the host backend (issue 13), through `offload_core::faults`: one
//! backend error at every hal call each workload reaches (everyday calls; releases left to
//! shutdown's teardown; offload calls inside module callbacks; IPC endpoints), each checked
//! by `faults::sweep`: the error reaches the caller typed, shutdown completes, no allocation,
//! loaded image or fd leaks, the next run works. Then a panic at every site (offload does not catch backend
//! panics: the lifecycle must stay usable), and the conformance suite through the wrapper
//! with no fault planned. One test only: the runtime and the fault plan are process-wide.

#[path = "../../offload-core/tests/shared/fault_sweeps.rs"]
mod fault_sweeps;

use offload_core::faults;
use offload_core::{Device, PlatformEntry, Platforms, Program, Result, Source};
use offload_host::HostPlatform;

fn fixture() -> Vec<u8> {
    offload_host::fixtures::KERNELS.to_vec()
}

/// A program from C source: the compiler and compile sites (no disk cache in a sweep, and
/// a new `Program` per run, so every run compiles).
fn extra(dev: &Device) -> Result<()> {
    let compiled = Program::from_source(Source::c(
        "#include \"offload_host.h\"\nOFFLOAD_KERNEL(nothing, \"\") { (void)args; (void)launch; }\n",
    ))
    .load(dev)?;
    compiled.kernel("nothing")?;
    compiled.unload()
}

fn entry() -> PlatformEntry {
    faults::entry_with_ipc::<HostPlatform>()
}

/// The wrapped backend alone, for the conformance suite.
struct FaultyOnly;

impl Platforms for FaultyOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![entry()]
    }
}

fn open_fds() -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(-1, |d| d.count() as i64)
}

#[test]
fn every_injected_fault_is_reported_and_cleaned_up() {
    fault_sweeps::run_all("host", &|| {
        let s = offload_host::stats();
        vec![
            ("live_allocations", s.live_allocations as i64),
            ("loads - unloads", s.loads as i64 - s.unloads as i64),
            (
                "opened - deinitialised",
                s.opened as i64 - s.deinitialised as i64,
            ),
            ("open fds", open_fds()),
        ]
    });
}
