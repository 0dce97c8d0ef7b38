//! The choices made when a platform opens, beyond `Config` ([`VulkanOptions`]): mapped
//! device memory and the validation layer.

/// Whether `OFFLOAD_VULKAN_VALIDATION` asks for the validation layer.
fn validation_from_environment() -> bool {
    std::env::var("OFFLOAD_VULKAN_VALIDATION").is_ok_and(|v| {
        let v = v.trim();
        v == "1" || v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("yes")
    })
}

/// Whether `OFFLOAD_VULKAN_BOUNDS_REPORT` asks for the bounds report (`1`, `true`, `yes` or
/// `on`; unset: off).
fn bounds_report_from_environment() -> bool {
    std::env::var("OFFLOAD_VULKAN_BOUNDS_REPORT").is_ok_and(|v| {
        let v = v.trim();
        v == "1"
            || v.eq_ignore_ascii_case("true")
            || v.eq_ignore_ascii_case("yes")
            || v.eq_ignore_ascii_case("on")
    })
}

/// Choices made when a platform opens, beyond [`Config`]. The runtime opens platforms with
/// the defaults; [`VulkanPlatform::open_with`] takes others.
///
/// ```
/// let options = offload_vulkan::VulkanOptions::default().map_device_memory(false);
/// assert!(!options.maps_device_memory());
/// ```
///
/// [`Config`]: offload_core::Config
/// [`VulkanPlatform::open_with`]: crate::VulkanPlatform::open_with
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VulkanOptions {
    pub(crate) map_device_memory: bool,
    pub(crate) validation: bool,
    pub(crate) bounds_report: bool,
}

impl Default for VulkanOptions {
    /// Mapped device memory; validation as `OFFLOAD_VULKAN_VALIDATION` says (off unless it
    /// is `1`, `true` or `yes`); the bounds report as `OFFLOAD_VULKAN_BOUNDS_REPORT` says (off
    /// unless it is `1`, `true`, `yes` or `on`).
    fn default() -> Self {
        VulkanOptions {
            map_device_memory: true,
            validation: validation_from_environment(),
            bounds_report: bounds_report_from_environment(),
        }
    }
}

impl VulkanOptions {
    /// Whether `MemKind::Device` buffers that land in host-visible memory (all memory on
    /// lavapipe and integrated GPUs) are mapped and copied with `memcpy` (the default). With
    /// `false` they are always reached through staging and the queue, as on a discrete GPU:
    /// that path can then be tested on any machine.
    ///
    /// ```
    /// use offload_vulkan::VulkanOptions;
    /// assert!(VulkanOptions::default().maps_device_memory());
    /// assert!(!VulkanOptions::default().map_device_memory(false).maps_device_memory());
    /// ```
    pub fn map_device_memory(mut self, map: bool) -> Self {
        self.map_device_memory = map;
        self
    }

    /// The current setting of [`VulkanOptions::map_device_memory`].
    ///
    /// ```
    /// assert!(offload_vulkan::VulkanOptions::default().maps_device_memory());
    /// ```
    pub fn maps_device_memory(&self) -> bool {
        self.map_device_memory
    }

    /// Whether to enable the Khronos validation layer (`VK_LAYER_KHRONOS_validation`, with
    /// synchronisation validation) where it is installed, and count what it reports
    /// ([`validation_report`](crate::validation_report)). Slow: for tests and debugging. The
    /// default follows the environment variable `OFFLOAD_VULKAN_VALIDATION`.
    ///
    /// ```
    /// use offload_vulkan::VulkanOptions;
    /// assert!(VulkanOptions::default().validation(true).validates());
    /// ```
    pub fn validation(mut self, on: bool) -> Self {
        self.validation = on;
        self
    }

    /// The current setting of [`VulkanOptions::validation`].
    ///
    /// ```
    /// assert!(!offload_vulkan::VulkanOptions::default().validation(false).validates());
    /// ```
    pub fn validates(&self) -> bool {
        self.validation
    }

    /// Whether WGSL kernels record their first out-of-range access of each launch for the
    /// queue's next `sync`, which returns it as `Error::OutOfBounds` naming the kernel, the
    /// argument, the index and the array's length (the *report*). The protection does not
    /// depend on it: with the report off an out-of-range read still gives zero and an
    /// out-of-range write is still dropped, silently.
    ///
    /// Off by default: on lavapipe it makes a memory-bound kernel (a STREAM triad over
    /// 64 MiB arrays) about 1.6 times slower (`benches/bounds_report.rs`; docs/benchmarks.md),
    /// above the 5% a default may cost. Turn it on while developing a kernel. The default
    /// follows the environment variable `OFFLOAD_VULKAN_BOUNDS_REPORT` (`1`, `true`, `yes` or
    /// `on`). It is part of the WGSL compiler's identity, so the compile cache keeps kernels
    /// compiled with and without it apart.
    ///
    /// ```
    /// use offload_vulkan::VulkanOptions;
    /// assert!(VulkanOptions::default().bounds_report(true).reports_bounds());
    /// ```
    pub fn bounds_report(mut self, on: bool) -> Self {
        self.bounds_report = on;
        self
    }

    /// The current setting of [`VulkanOptions::bounds_report`].
    ///
    /// ```
    /// assert!(offload_vulkan::VulkanOptions::default().bounds_report(true).reports_bounds());
    /// ```
    pub fn reports_bounds(&self) -> bool {
        self.bounds_report
    }
}
