//! Helpers shared by the Vulkan backend's tests: opening the platform (or skipping when the
//! machine has no Vulkan driver, except in CI), a model to check buffers against, and a
//! deterministic byte pattern.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard, PoisonError};

use offload_core::{Backend, Config, Error};
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
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds off the other tests of this binary that also take it (process-wide counters).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}
