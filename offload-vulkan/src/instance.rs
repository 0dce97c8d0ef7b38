//! The Vulkan loader and one `VkInstance`: opened together, destroyed together.
//!
//! [`Instance`] owns the loader library (`ash::Entry`, which keeps `libvulkan.so.1` open) and
//! the instance made from it. Devices hold an `Arc<Instance>`, so the instance is destroyed
//! after its last device, and the library closed after its instance (cudarc's rule: children
//! keep parents alive). This module must not create devices or memory.

use std::ffi::{CStr, c_void};
use std::sync::atomic::Ordering;

use ash::vk;
use offload_core::Result;

use crate::error::{At, driver_not_found, map_vk_err};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The highest Vulkan version offload asks for. Lavapipe and current GPU drivers have it.
const WANTED_API: u32 = vk::API_VERSION_1_3;

/// A debug-utils messenger that counts what the validation layer reports.
struct Messenger {
    loader: ash::ext::debug_utils::Instance,
    raw: vk::DebugUtilsMessengerEXT,
}

/// The loader and a live `VkInstance`.
pub(crate) struct Instance {
    pub(crate) raw: ash::Instance,
    /// The API version the instance was created with.
    pub(crate) api: u32,
    /// Whether the Khronos validation layer runs (enabled by offload, or by the loader's
    /// environment) and its messages are counted.
    pub(crate) validating: bool,
    messenger: Option<Messenger>,
    /// Keeps `libvulkan.so.1` open while the instance lives; dropped (closed) after it.
    _entry: ash::Entry,
}

/// Whether the loader's environment already turns the validation layer on.
fn layer_enabled_by_environment() -> bool {
    ["VK_INSTANCE_LAYERS", "VK_LOADER_LAYERS_ENABLE"]
        .iter()
        .filter_map(std::env::var_os)
        .any(|v| {
            v.to_string_lossy()
                .to_ascii_lowercase()
                .contains("khronos_validation")
        })
}

/// What the messenger listens to: errors and warnings of every kind.
fn messenger_info() -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message))
}

/// Counts (and prints) what the validation layer says. Called by the driver's threads.
unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the loader passes a valid callback structure, or null, valid during this call.
    let Some(data) = (unsafe { data.as_ref() }) else {
        return vk::FALSE;
    };
    // SAFETY: its message is a NUL-terminated string or null, valid during this call.
    let text = unsafe { data.message_as_c_str() }
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        crate::validation::error(text);
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        crate::validation::warning(text);
    }
    vk::FALSE
}

impl Instance {
    /// Opens the loader and creates an instance. A missing loader, or a loader without any
    /// driver, is `Error::DriverNotFound`. With `validation`, the Khronos validation layer
    /// is enabled where it is installed; whenever it runs, a debug-utils messenger counts its
    /// errors and warnings ([`crate::validation`]).
    pub(crate) fn open(validation: bool) -> Result<Instance> {
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
                return Err(map_vk_err(At::new("vkEnumerateInstanceVersion"), e));
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
        let by_environment = layer_enabled_by_environment();
        let (layer, debug_utils) = if validation || by_environment {
            // SAFETY: `entry` is a loaded loader; these only fill vectors we own.
            let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
            // SAFETY: as above.
            let extensions =
                unsafe { entry.enumerate_instance_extension_properties(None) }.unwrap_or_default();
            let has_layer = layers
                .iter()
                .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
            let has_debug = extensions
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::debug_utils::NAME));
            (
                validation && has_layer,
                has_debug && (has_layer || by_environment),
            )
        } else {
            (false, false)
        };
        let layers = [VALIDATION_LAYER.as_ptr()];
        let extensions = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut chained_messenger = messenger_info();
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut info = vk::InstanceCreateInfo::default().application_info(&app);
        if layer {
            info = info.enabled_layer_names(&layers).push_next(&mut features);
        }
        if debug_utils {
            // Chained too, so instance creation and destruction are checked as well.
            info = info
                .enabled_extension_names(&extensions)
                .push_next(&mut chained_messenger);
        }
        // SAFETY: `info` and everything it points to (`app`, the layer and extension names,
        // the chained structures, static strings) live across the call; the layer and the
        // extension are enabled only where the loader lists them; the instance it returns is
        // destroyed exactly once, in `Drop`.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => driver_not_found(
                "the Vulkan loader found no driver (ICD) for this machine; install one, e.g. \
                 Mesa's lavapipe (`apt-get install mesa-vulkan-drivers`)",
            ),
            other => map_vk_err(At::new("vkCreateInstance"), other),
        })?;
        crate::stats::LIVE_INSTANCES.fetch_add(1, Ordering::SeqCst);
        let mut messenger = None;
        if debug_utils {
            let loader = ash::ext::debug_utils::Instance::new(&entry, &raw);
            // SAFETY: the instance was made with VK_EXT_debug_utils; the create info (with
            // its `'static` callback) lives across the call; the messenger is destroyed
            // before the instance, in `Drop`. Without it only the creation-time messages are
            // counted, so a failure is not fatal.
            if let Ok(m) = unsafe { loader.create_debug_utils_messenger(&messenger_info(), None) } {
                messenger = Some(Messenger { loader, raw: m });
            }
        }
        Ok(Instance {
            raw,
            api,
            validating: messenger.is_some() && (layer || by_environment),
            messenger,
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
        // (`_entry`, dropped after this body) is still open; the messenger goes first.
        unsafe {
            if let Some(m) = self.messenger.take() {
                m.loader.destroy_debug_utils_messenger(m.raw, None);
            }
            self.raw.destroy_instance(None)
        };
        crate::stats::LIVE_INSTANCES.fetch_sub(1, Ordering::SeqCst);
    }
}
