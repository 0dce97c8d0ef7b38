//! Helpers shared by the Vulkan backend's tests: opening the platform (or skipping when the
//! machine has no Vulkan driver, except in CI), a model to check buffers against, and a
//! deterministic byte pattern.
#![allow(dead_code)]

use offload_core::hal::Platform as _;
use offload_core::{Config, Error};
use offload_vulkan::{VulkanOptions, VulkanPlatform};

/// Whether this run is CI (`CI=true`): there a missing driver fails instead of skipping,
/// so a green CI means lavapipe really ran.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Skips the calling test (returns `None`) when Vulkan is missing, with a printed reason;
/// fails it in CI.
pub fn skip_or_fail(test: &str, error: Error) -> Option<std::convert::Infallible> {
    match error {
        Error::DriverNotFound { .. } if !in_ci() => {
            skipped(&format!("{test}: {error}"));
            None
        }
        Error::DriverNotFound { .. } => {
            panic!("{test}: {error} (CI=true: a missing Vulkan driver is a failure)")
        }
        other => panic!("{test}: {other}"),
    }
}

/// Says that a test (or part of one) was skipped, on the real stderr: the test harness
/// captures `eprintln!`, and a skip must be visible in a normal run.
pub fn skipped(what: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {what}");
}

/// Opens a platform with `options`, or skips (see [`skip_or_fail`]).
pub fn open_with(test: &str, options: VulkanOptions) -> Option<VulkanPlatform> {
    match VulkanPlatform::open_with(&Config::default(), options) {
        Ok(p) => Some(p),
        Err(e) => skip_or_fail(test, e).map(|never| match never {}),
    }
}

/// Opens a platform with the default options, or skips.
pub fn open(test: &str) -> Option<VulkanPlatform> {
    open_with(test, VulkanOptions::default())
}

/// Both ways the backend reaches device memory: mapped (lavapipe's default) and through
/// staging and the queue (a discrete GPU's way), each as its own platform.
pub fn both_paths(test: &str) -> Option<Vec<(&'static str, VulkanPlatform)>> {
    let mapped = open_with(test, VulkanOptions::default())?;
    let staged = open_with(test, VulkanOptions::default().map_device_memory(false))?;
    Some(vec![("mapped", mapped), ("staged", staged)])
}

/// Deinitialises and checks nothing leaked.
pub fn close(vk: VulkanPlatform) {
    assert_eq!(vk.live_allocations(), 0);
    vk.deinit().expect("deinit");
}

/// `len` bytes of a pattern that differs at every offset and with every seed.
/// Eight bytes per xorshift step: the tests run unoptimised, and a byte per step was a
/// third of this crate's test time.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = vec![0u8; len];
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out
}

/// Holds off the other tests of this binary that also take it (process-wide counters).
// Not every test binary that includes this module takes it.
#[allow(unused_imports)]
pub use offload_testing::serial;

/// The WGSL source of the test kernels (`add_one`, `fill`, `noop`; see the file).
pub const KERNELS_WGSL: &str = include_str!("../fixtures/kernels.wgsl");

/// Compiles WGSL to SPIR-V `version` (major, minor) with naga, as bytes in host order, with
/// debug names (`OpName`) in every build profile: naga's default adds them only when naga
/// itself is built with debug assertions, so a `--release` test run would get other
/// SPIR-V than the shipped fixture and than a debug run.
pub fn spirv_of(wgsl: &str, version: (u8, u8)) -> Vec<u8> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .unwrap_or_else(|e| panic!("WGSL: {}", e.emit_to_string(wgsl)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("naga validation: {e:?}"));
    let defaults = naga::back::spv::Options::default();
    let options = naga::back::spv::Options {
        lang_version: version,
        flags: defaults.flags | naga::back::spv::WriterFlags::DEBUG,
        ..defaults
    };
    let words = naga::back::spv::write_vec(&module, &info, &options, None)
        .unwrap_or_else(|e| panic!("naga SPIR-V output: {e}"));
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// The test kernels as SPIR-V 1.3 (what the tests load unless they say otherwise).
pub fn kernels() -> Vec<u8> {
    spirv_of(KERNELS_WGSL, (1, 3))
}

/// Opens a platform with the validation layer on, or skips. In CI the layer must be there.
pub fn open_validated(test: &str) -> Option<VulkanPlatform> {
    let vk = open_with(test, VulkanOptions::default().validation(true))?;
    require_validation(test, vk.validating());
    Some(vk)
}

/// Mapped and staged device memory, both validated.
pub fn both_paths_validated(test: &str) -> Option<Vec<(&'static str, VulkanPlatform)>> {
    let mapped = open_validated(test)?;
    let staged = open_with(
        test,
        VulkanOptions::default()
            .validation(true)
            .map_device_memory(false),
    )?;
    Some(vec![("mapped", mapped), ("staged", staged)])
}

/// Fails in CI when the validation layer does not run; says so otherwise.
pub fn require_validation(test: &str, validating: bool) {
    if validating {
        return;
    }
    if in_ci() {
        panic!(
            "{test}: CI=true but the Khronos validation layer is not installed \
             (apt-get install vulkan-validationlayers)"
        );
    }
    skipped(&format!(
        "{test}: validation checks (the Khronos validation layer is not installed)"
    ));
}

/// Fails if the validation layer has reported any error in this process.
pub fn assert_no_validation_errors(test: &str) {
    let report = offload_vulkan::validation_report();
    assert_eq!(
        report.errors,
        0,
        "{test}: the validation layer reported errors:\n{}",
        report.messages.join("\n")
    );
}

/// 32-bit words of a byte slice, in host order.
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bytes of 32-bit words, in host order.
pub fn bytes_of(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// The Vulkan backend with the validation layer on: the same platform behind its own type,
/// so a runtime can open it through `PlatformEntry::with_ipc::<Validated>()` (the runtime opens
/// platforms with default options, which take validation from the environment).
pub struct Validated(pub VulkanPlatform);

mod validated {
    use super::Validated;
    use offload_core::hal::Platform;
    use offload_core::{BackendKind, Config, Result};
    use offload_vulkan::{VulkanDevice, VulkanOptions, VulkanPlatform};

    /// Only the platform differs: its devices are the Vulkan backend's own.
    impl Platform for Validated {
        type Device = VulkanDevice;
        const KIND: BackendKind = BackendKind::Vulkan;

        fn open(config: &Config) -> Result<Self> {
            // The bounds report on too (off by default): every test of the runtime on Vulkan
            // then runs WGSL kernels the way a user who asks for it does.
            let options = VulkanOptions::default()
                .validation(true)
                .bounds_report(true);
            VulkanPlatform::open_with(config, options).map(Validated)
        }
        fn name(&self) -> String {
            self.0.name()
        }
        fn devices(&self) -> Vec<VulkanDevice> {
            self.0.devices()
        }
        fn deinit(&self) -> Result<()> {
            self.0.deinit()
        }
    }
}
