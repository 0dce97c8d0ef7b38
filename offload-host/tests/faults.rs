//! Fault injection on the host backend: the shared fault-mode workloads
//! (`offload_testing::faults::workloads::run_all`) — one backend error at every hal call each
//! workload reaches, each checked for a typed error, a clean shutdown, no leaked
//! allocation, loaded image or fd, and a working next run; a panic at every site; the
//! conformance suite through the wrapper — plus the host's own sites: a program compiled
//! from C source. One test only: the runtime and the fault plan are process-wide.

use offload_core::{Device, Program, Result, Source};
use offload_host::HostPlatform;
use offload_testing::faults::workloads::{Subject, run_all};

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

fn open_fds() -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(-1, |d| d.count() as i64)
}

#[test]
fn every_injected_fault_is_reported_and_cleaned_up() {
    run_all::<HostPlatform>(&Subject {
        name: "host",
        fixture: offload_host::fixtures::KERNELS,
        globals: true,
        extra: &extra,
        counters: &|| {
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
        },
    });
}
