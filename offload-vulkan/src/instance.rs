//! The Vulkan loader and one `VkInstance`: opened together, destroyed together.
//!
//! [`Instance`] owns the loader library (`ash::Entry`, which keeps `libvulkan.so.1` open) and
//! the instance made from it. Devices hold an `Arc<Instance>`, so the instance is destroyed
//! after its last device, and the library closed after its instance (cudarc's rule: children
//! keep parents alive). This module must not create devices or memory.

use std::sync::atomic::Ordering;

use ash::vk;
use offload_core::Result;

use crate::error::{At, driver_not_found, map_vk_err};

/// The highest Vulkan version offload asks for. Lavapipe and current GPU drivers have it.
const WANTED_API: u32 = vk::API_VERSION_1_3;

/// The loader and a live `VkInstance`.
pub(crate) struct Instance {
    pub(crate) raw: ash::Instance,
    /// The API version the instance was created with.
    pub(crate) api: u32,
    /// Keeps `libvulkan.so.1` open while the instance lives; dropped (closed) after it.
    _entry: ash::Entry,
}

impl Instance {
    /// Opens the loader and creates an instance. A missing loader, or a loader without any
    /// driver, is `Error::DriverNotFound`.
    pub(crate) fn open() -> Result<Instance> {
        // SAFETY: `Entry::load` dlopens the system Vulkan loader, whose initialisers are
        // sound to run, any number of times per process; the returned `Entry` keeps the
        // library open for as long as its function pointers are used (we keep it in
        // `Instance`, which outlives every object made through it).
        let entry = unsafe { ash::Entry::load() }.map_err(|e| driver_not_found(e.to_string()))?;

        // `vkEnumerateInstanceVersion` is absent from 1.0 loaders: those get 1.0.
        // SAFETY: `entry` is a loaded loader; the call only writes a u32 we own.
        let loader_api = match unsafe { entry.try_enumerate_instance_version() } {
            Ok(Some(v)) => v,
            Ok(None) => vk::API_VERSION_1_0,
            Err(e) => {
                return Err(map_vk_err(
                    At::new("Offload::init", "vkEnumerateInstanceVersion"),
                    e,
                ));
            }
        };
        // Asking a 1.0 loader for more than 1.0 is VK_ERROR_INCOMPATIBLE_DRIVER.
        let api = if loader_api >= vk::API_VERSION_1_1 {
            WANTED_API.min(loader_api)
        } else {
            vk::API_VERSION_1_0
        };
        let app = vk::ApplicationInfo::default()
            .application_name(c"offload")
            .engine_name(c"offload")
            .engine_version(engine_version())
            .api_version(api);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `info` and everything it points to (`app`, static strings) live across the
        // call; the instance it returns is destroyed exactly once, in `Drop`.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => driver_not_found(
                "the Vulkan loader found no driver (ICD) for this machine; install one, e.g. \
                 Mesa's lavapipe (`apt-get install mesa-vulkan-drivers`)",
            ),
            other => map_vk_err(At::new("Offload::init", "vkCreateInstance"), other),
        })?;
        crate::LIVE_INSTANCES.fetch_add(1, Ordering::SeqCst);
        Ok(Instance {
            raw,
            api,
            _entry: entry,
        })
    }
}

/// This crate's version packed as a Vulkan version, for drivers' application profiles.
fn engine_version() -> u32 {
    let part = |s: &str| s.parse::<u32>().unwrap_or(0);
    vk::make_api_version(
        0,
        part(env!("CARGO_PKG_VERSION_MAJOR")),
        part(env!("CARGO_PKG_VERSION_MINOR")),
        part(env!("CARGO_PKG_VERSION_PATCH")),
    )
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every device made from this instance holds an `Arc<Instance>`, so none is
        // left when this runs; the instance is destroyed exactly once, here, while the loader
        // (`_entry`, dropped after this body) is still open.
        unsafe { self.raw.destroy_instance(None) };
        crate::LIVE_INSTANCES.fetch_sub(1, Ordering::SeqCst);
    }
}
