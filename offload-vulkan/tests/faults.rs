//! Fault injection on the Vulkan backend, on lavapipe: the shared fault-mode
//! workloads (`offload_testing::faults::workloads::run_all`) — one backend error at every hal
//! call each workload reaches, each checked for a typed error, a clean shutdown, no leaked
//! Vulkan object or fd, and a working next run; a panic at every site; the conformance
//! suite through the wrapper — plus, with the `wgsl` feature, a program compiled from WGSL.
//! Vulkan programs have no globals, so the workloads leave those calls out. One test only:
//! the runtime and the fault plan are process-wide.

mod common;

use offload_core::hal::Platform as _;
use offload_core::{Config, Device, Result};
use offload_testing::faults::workloads::{Subject, run_all};
use offload_vulkan::VulkanPlatform;

/// A program from WGSL source (the compile sites), where the crate can compile one.
fn extra(dev: &Device) -> Result<()> {
    #[cfg(feature = "wgsl")]
    {
        let source = "@group(0) @binding(0) var<storage, read_write> data: array<u32>;\n\
                      @compute @workgroup_size(1) fn touch() { data[0] = data[0] + 1u; }\n";
        let compiled =
            offload_core::Program::from_source(offload_core::Source::wgsl(source)).load(dev)?;
        compiled.kernel("touch")?;
        compiled.unload()?;
    }
    let _ = dev;
    Ok(())
}

fn open_fds() -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(-1, |d| d.count() as i64)
}

#[test]
fn every_injected_fault_is_reported_and_cleaned_up() {
    match VulkanPlatform::open(&Config::default()) {
        Ok(vk) => vk.deinit().unwrap(),
        Err(e) => {
            let test = "every_injected_fault_is_reported_and_cleaned_up";
            return common::skip_or_fail(test, e).map_or((), |never| match never {});
        }
    }
    run_all::<VulkanPlatform>(&Subject {
        name: "vulkan (lavapipe)",
        fixture: offload_vulkan::fixtures::KERNELS,
        globals: false,
        extra: &extra,
        counters: &|| {
            let s = offload_vulkan::stats();
            vec![
                ("live_allocations", s.live_allocations as i64),
                ("live_devices", s.live_devices as i64),
                ("live_instances", s.live_instances as i64),
                ("live_modules", s.live_modules as i64),
                ("live_shader_modules", s.live_shader_modules as i64),
                ("live_pipelines", s.live_pipelines as i64),
                ("live_queues", s.live_queues as i64),
                ("live_events", s.live_events as i64),
                (
                    "opened - deinitialised",
                    s.opened as i64 - s.deinitialised as i64,
                ),
                ("open fds", open_fds()),
            ]
        },
    });
}
