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

/// The WGSL source of the test kernels (`add_one`, `fill`, `noop`; see the file).
pub const KERNELS_WGSL: &str = include_str!("../fixtures/kernels.wgsl");

/// Compiles WGSL to SPIR-V `version` (major, minor) with naga, as bytes in host order.
pub fn spirv_of(wgsl: &str, version: (u8, u8)) -> Vec<u8> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .unwrap_or_else(|e| panic!("WGSL: {}", e.emit_to_string(wgsl)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("naga validation: {e:?}"));
    let options = naga::back::spv::Options {
        lang_version: version,
        ..Default::default()
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
/// so a runtime can open it through `PlatformEntry::of::<Validated>()` (the runtime opens
/// platforms with default options, which take validation from the environment).
pub struct Validated(pub VulkanPlatform);

mod validated {
    use super::Validated;
    use offload_core::{
        Backend, BackendKind, Compute, Config, DeviceInfo, Dims, GlobalInfo, KernelArg, MemKind,
        ParamKind, Result,
    };
    use offload_vulkan::{
        VulkanBuffer, VulkanDevice, VulkanEvent, VulkanKernel, VulkanModule, VulkanOptions,
        VulkanPlatform, VulkanQueue,
    };
    use std::time::Duration;

    impl Backend for Validated {
        type Device = VulkanDevice;
        type Buffer = VulkanBuffer;
        const KIND: BackendKind = BackendKind::Vulkan;

        fn open(config: &Config) -> Result<Self> {
            let options = VulkanOptions::default().validation(true);
            VulkanPlatform::open_with(config, options).map(Validated)
        }
        fn name(&self) -> String {
            self.0.name()
        }
        fn devices(&self) -> Vec<VulkanDevice> {
            self.0.devices()
        }
        fn device_info(&self, d: &VulkanDevice) -> Result<DeviceInfo> {
            self.0.device_info(d)
        }
        fn alloc(&self, d: &VulkanDevice, size: usize, kind: MemKind) -> Result<VulkanBuffer> {
            self.0.alloc(d, size, kind)
        }
        fn free(&self, b: VulkanBuffer) -> Result<()> {
            self.0.free(b)
        }
        fn read(&self, b: &VulkanBuffer, at: usize, dst: &mut [u8]) -> Result<()> {
            self.0.read(b, at, dst)
        }
        fn write(&self, b: &mut VulkanBuffer, at: usize, src: &[u8]) -> Result<()> {
            self.0.write(b, at, src)
        }
        fn fill(&self, b: &mut VulkanBuffer, at: usize, len: usize, value: u8) -> Result<()> {
            self.0.fill(b, at, len, value)
        }
        fn copy(
            &self,
            s: &VulkanBuffer,
            so: usize,
            d: &mut VulkanBuffer,
            dof: usize,
            len: usize,
        ) -> Result<()> {
            self.0.copy(s, so, d, dof, len)
        }
        fn copy_within(&self, b: &mut VulkanBuffer, so: usize, d: usize, len: usize) -> Result<()> {
            self.0.copy_within(b, so, d, len)
        }
        fn deinit(&self) -> Result<()> {
            self.0.deinit()
        }
    }

    impl Compute for Validated {
        type Module = VulkanModule;
        type Kernel = VulkanKernel;
        type Queue = VulkanQueue;
        type Event = VulkanEvent;

        fn load(&self, d: &VulkanDevice, image: &[u8]) -> Result<VulkanModule> {
            self.0.load(d, image)
        }
        fn unload(&self, m: VulkanModule) -> Result<()> {
            self.0.unload(m)
        }
        fn kernel(&self, m: &VulkanModule, name: &str) -> Result<VulkanKernel> {
            self.0.kernel(m, name)
        }
        fn params<'k>(&self, k: &'k VulkanKernel) -> &'k [ParamKind] {
            self.0.params(k)
        }
        fn global(&self, m: &VulkanModule, name: &str) -> Result<GlobalInfo> {
            self.0.global(m, name)
        }
        fn read_global(&self, m: &VulkanModule, n: &str, at: usize, d: &mut [u8]) -> Result<()> {
            self.0.read_global(m, n, at, d)
        }
        fn write_global(&self, m: &VulkanModule, n: &str, at: usize, s: &[u8]) -> Result<()> {
            self.0.write_global(m, n, at, s)
        }
        fn queue(&self, d: &VulkanDevice) -> Result<VulkanQueue> {
            self.0.queue(d)
        }
        fn destroy_queue(&self, q: VulkanQueue) -> Result<()> {
            self.0.destroy_queue(q)
        }
        fn launch(
            &self,
            q: &VulkanQueue,
            k: &VulkanKernel,
            dims: &Dims,
            args: &[KernelArg<'_, VulkanBuffer>],
        ) -> Result<()> {
            self.0.launch(q, k, dims, args)
        }
        fn sync(&self, q: &VulkanQueue) -> Result<()> {
            self.0.sync(q)
        }
        fn record(&self, q: &VulkanQueue) -> Result<VulkanEvent> {
            self.0.record(q)
        }
        fn wait_event(&self, q: &VulkanQueue, e: &VulkanEvent) -> Result<()> {
            self.0.wait_event(q, e)
        }
        fn sync_event(&self, e: &VulkanEvent) -> Result<()> {
            self.0.sync_event(e)
        }
        fn elapsed(&self, a: &VulkanEvent, b: &VulkanEvent) -> Result<Duration> {
            self.0.elapsed(a, b)
        }
        fn destroy_event(&self, e: VulkanEvent) -> Result<()> {
            self.0.destroy_event(e)
        }
    }
}
