//! One device's primary context: retained when the platform opens ([`Context::retain`]),
//! made current on the calling thread before every context-dependent call
//! (`StreamApi::bind`), and released when the last object made in it is gone
//! (`StreamApi::release`, from offload-driver's `DeviceCore`).
//!
//! Every buffer, module, queue and event holds its device's `DeviceCore`, which holds the
//! context, so the release can never come before their destruction, whatever order a user
//! drops things in: the platform's `deinit` lets go of its own reference and reports the
//! objects still alive (a leak), and the context goes with the last of them — as the
//! Vulkan backend's devices do.

use std::sync::Arc;

use offload_core::{BackendKind, Result};
use offload_driver::{DeviceCore, LaunchLimits};

use crate::ffi::{self, CuDevice, sys};

/// A retained primary context, and what launches and loads check against, read from the
/// device once.
pub struct Context {
    pub(crate) device: CuDevice,
    pub(crate) raw: sys::CuContext,
    /// Compute capability (major, minor).
    pub(crate) capability: (u32, u32),
}

// SAFETY: a CUDA context handle may be used from any thread (the driver API is
// thread-safe; binding it to a thread is per-thread driver state), and the context is
// released only by `DeviceCore`'s drop, when no other owner is left.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only reads the handle.
unsafe impl Sync for Context {}

impl Context {
    /// Retains device `ordinal`'s primary context and reads its limits: the device's
    /// record.
    pub(crate) fn retain(
        driver: &Arc<ffi::Driver>,
        ordinal: u32,
    ) -> Result<DeviceCore<ffi::Driver>> {
        const CALL: &str = "Offload::init";
        let failed = |failure: offload_driver::Failure| failure.into_error(BackendKind::Cuda, CALL);
        let device = driver
            .device(i32::try_from(ordinal).unwrap_or(i32::MAX))
            .map_err(failed)?;
        let raw = driver.retain_primary(device).map_err(failed)?;
        let get = |attribute| {
            driver
                .attribute(device, attribute)
                .ok()
                .and_then(|v| u32::try_from(v).ok())
        };
        let three = |first, fallback| {
            [
                get(first).unwrap_or(fallback),
                get(first + 1).unwrap_or(fallback),
                get(first + 2).unwrap_or(fallback),
            ]
        };
        let capability = (
            get(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap_or(0),
            get(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).unwrap_or(0),
        );
        // The limits every CUDA device has had since compute capability 2.0, where the
        // driver does not say.
        let limits = LaunchLimits {
            max_block_threads: get(sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK).unwrap_or(1024),
            max_block: three(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 64),
            max_grid: three(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 65535),
            max_shared_memory: get(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
                .unwrap_or(48 << 10),
            attributes: (
                "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_*",
                "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_*",
            ),
        };
        let context = Context {
            device,
            raw,
            capability,
        };
        // SAFETY: the context was retained just above, once, for this record, whose drop
        // releases it (`StreamApi::release`); nothing else does.
        Ok(unsafe { DeviceCore::new(driver.clone(), ordinal, context, limits) })
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device)
            .field("capability", &self.capability)
            .finish()
    }
}
