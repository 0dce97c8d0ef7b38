//! A Vulkan loader without any driver is an absent platform with a reason, never a panic.
//!
//! The loader reads `VK_DRIVER_FILES` / `VK_ICD_FILENAMES` when an instance is created, so
//! the test runs itself again as a child process with both pointing at nothing (setting
//! them in this process would race with other tests' threads).

use offload_core::hal::Platform as _;
use offload_core::{BackendKind, Config, Error, NoPlatforms, Offload, Uninit};
use offload_vulkan::VulkanPlatform;

const CHILD: &str = "OFFLOAD_VULKAN_NO_DRIVER_CHILD";

#[test]
fn a_loader_without_drivers_is_driver_not_found() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    if loader_present().is_none() {
        // No loader at all: `open` itself is the no-driver case, checked in-process.
        return child();
    }
    offload_testing::child::run_test(
        "a_loader_without_drivers_is_driver_not_found",
        &[
            (CHILD, "1"),
            ("VK_DRIVER_FILES", "/nonexistent/offload-no-driver.json"),
            ("VK_ICD_FILENAMES", "/nonexistent/offload-no-driver.json"),
        ],
    );
}

/// Whether the Vulkan loader library exists on this machine (by opening the platform: a
/// missing loader is `DriverNotFound` naming libvulkan).
fn loader_present() -> Option<()> {
    match VulkanPlatform::open(&Config::default()) {
        Ok(vk) => {
            vk.deinit().ok();
            Some(())
        }
        Err(Error::DriverNotFound { reason, .. }) if reason.contains("libvulkan") => None,
        Err(_) => Some(()),
    }
}

fn child() {
    match VulkanPlatform::open(&Config::default()) {
        Err(Error::DriverNotFound {
            backend,
            library,
            reason,
            ..
        }) => {
            assert_eq!(backend, BackendKind::Vulkan);
            assert_eq!(library, "libvulkan.so.1");
            println!("DriverNotFound: {reason}");
        }
        Ok(_) => panic!("a platform opened without any driver"),
        Err(other) => panic!("expected DriverNotFound, got {other}"),
    }
    // Through the runtime: asked for explicitly, the missing driver fails `start`, typed.
    match Offload::<Uninit, NoPlatforms>::builder()
        .platform(offload_vulkan::platform())
        .start()
    {
        Err(Error::DriverNotFound { backend, .. }) => assert_eq!(backend, BackendKind::Vulkan),
        Ok(_) => panic!("the runtime opened Vulkan without any driver"),
        Err(other) => panic!("expected DriverNotFound, got {other}"),
    }
}
