//! The offload conformance suite on the Vulkan backend (lavapipe in CI), with the WGSL test
//! kernels compiled to SPIR-V by naga, and the Khronos validation layer on.
//!
//! This binary holds one test only: the suite needs the process-global runtime to itself.
//! The runtime opens `offload_vulkan::platform()` with its default options, which take
//! validation from the environment, so the test runs itself again as child processes with
//! `OFFLOAD_VULKAN_VALIDATION=1` (setting it in this process would race with the harness's
//! threads) and fails if the layer reported any error: two children at once, one for the
//! fixed tests and one for the state machine (`OFFLOAD_CONFORMANCE_PART`).

mod common;

use std::process::{Command, Stdio};

use offload_core::hal::Platform as _;
use offload_core::{Config, PlatformEntry, Platforms};
use offload_testing::conformance::{self, Fixtures, SuiteConfig};
use offload_vulkan::VulkanPlatform;

const CHILD: &str = "OFFLOAD_VULKAN_CONFORMANCE_CHILD";
const TEST: &str = "vulkan_backend_passes_conformance";

/// The runtime's platforms: just Vulkan, as the facade registers it.
struct VulkanOnly;

impl Platforms for VulkanOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_vulkan::platform()]
    }
}

#[test]
fn vulkan_backend_passes_conformance() {
    match VulkanPlatform::open(&Config::default()) {
        Ok(vk) => vk.deinit().unwrap(),
        Err(e) => return common::skip_or_fail(TEST, e).map_or((), |never| match never {}),
    }
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    // The fixed tests and the state machine in two children at once: each half takes
    // about as long as the other, and one alone keeps a core of the two idle.
    let exe = std::env::current_exe().expect("test binary path");
    let children: Vec<_> = ["fixed", "state-machine"]
        .into_iter()
        .map(|part| {
            let child = Command::new(&exe)
                .args(["--exact", TEST, "--nocapture"])
                .env(CHILD, "1")
                .env(conformance::PART_ENV, part)
                .env("OFFLOAD_VULKAN_VALIDATION", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run the child");
            (part, child)
        })
        .collect();
    for (part, child) in children {
        let output = child.wait_with_output().expect("wait for the child");
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        println!("{part}:\n{text}");
        assert!(
            output.status.success(),
            "the conformance child ({part}) failed"
        );
        assert!(text.contains("1 passed"), "the child ({part}) ran no test");
    }
}

fn child() {
    let vk = VulkanPlatform::open(&Config::default()).unwrap();
    common::require_validation(TEST, vk.validating());
    vk.deinit().unwrap();
    let started = std::time::Instant::now();
    conformance::run::<VulkanOnly>(
        &Fixtures {
            image: common::kernels(),
        },
        SuiteConfig::default(),
    );
    println!("conformance on Vulkan in {:?}", started.elapsed());
    common::assert_no_validation_errors(TEST);
}
