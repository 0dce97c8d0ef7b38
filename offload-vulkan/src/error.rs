//! Mapping Vulkan results to offload errors: one function for every `VkResult`.
//!
//! In the style of wgpu-hal's `map_host_device_oom_err`: the two out-of-memory codes become
//! `Error::OutOfMemory`, every other code `Error::Driver` with the raw code kept as data and
//! its name (`VK_ERROR_DEVICE_LOST`) as the message, plus the Vulkan function that said it.
//! This module owns no state.

use ash::vk;
use offload_core::{BackendKind, Error};

/// The library the backend opens: the Vulkan loader.
pub(crate) const LOADER: &str = "libvulkan.so.1";

/// What was being done when Vulkan failed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    /// The Vulkan function that failed (`vkAllocateMemory`, …).
    pub function: &'static str,
    /// Bytes the call asked for, where memory was asked for (0 otherwise).
    pub requested: u64,
}

impl At {
    pub(crate) const fn new(function: &'static str) -> Self {
        At {
            function,
            requested: 0,
        }
    }

    pub(crate) const fn bytes(mut self, requested: u64) -> Self {
        self.requested = requested;
        self
    }
}

/// The name of a Vulkan result code as the specification writes it.
pub(crate) fn code_name(result: vk::Result) -> String {
    format!("VK_{result:?}")
}

/// The one mapping from a failed `VkResult` to an offload error.
pub(crate) fn map_vk_err(at: At, result: vk::Result) -> Error {
    match result {
        vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => {
            Error::OutOfMemory {
                backend: BackendKind::Vulkan,
                call: "",
                requested: at.requested,
                reason: format!("{} returned {}", at.function, code_name(result)),
            }
        }
        other => Error::Driver {
            backend: BackendKind::Vulkan,
            call: "",
            code: i64::from(other.as_raw()),
            message: format!("{} (from {})", code_name(other), at.function),
        },
    }
}

/// An allocation the device cannot satisfy, found before asking the driver.
pub(crate) fn out_of_memory(requested: u64, reason: String) -> Error {
    Error::OutOfMemory {
        backend: BackendKind::Vulkan,
        call: "",
        requested,
        reason,
    }
}

/// No usable Vulkan: the loader is missing, has no driver, or no device can compute.
pub(crate) fn driver_not_found(reason: impl Into<String>) -> Error {
    Error::DriverNotFound {
        backend: BackendKind::Vulkan,
        library: LOADER.into(),
        reason: reason.into(),
        caller: offload_core::Caller::Rust,
    }
}

/// Checks that `offset..offset + len` lies inside `size` bytes.
pub(crate) fn check_range(offset: usize, len: usize, size: usize) -> offload_core::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::invalid(
            "",
            format!(
                "vulkan buffer: range {offset}..{} is outside its {size} bytes",
                offset as u128 + len as u128
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_codes_map_to_out_of_memory() {
        let at = At::new("vkAllocateMemory").bytes(64);
        for code in [
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        ] {
            match map_vk_err(at, code) {
                Error::OutOfMemory {
                    requested, reason, ..
                } => {
                    assert_eq!(requested, 64);
                    assert!(reason.contains("vkAllocateMemory"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn other_codes_keep_the_raw_code_and_its_name() {
        let at = At::new("vkQueueSubmit");
        match map_vk_err(at, vk::Result::ERROR_DEVICE_LOST) {
            Error::Driver {
                code,
                message,
                call,
                ..
            } => {
                assert_eq!(code, -4);
                assert_eq!(call, "");
                assert!(message.starts_with("VK_ERROR_DEVICE_LOST"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ranges() {
        assert!(check_range(0, 4, 4).is_ok());
        assert!(check_range(1, 4, 4).is_err());
        assert!(check_range(usize::MAX, 2, 4).is_err());
    }
}
