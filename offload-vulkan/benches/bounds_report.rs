//! What the WGSL bounds report costs (`VulkanOptions::bounds_report`), paired in one run
//! (`offload_bench::paired`: the two sides alternate sample by sample):
//!
//! * `vulkan_triad_64MiB_bounds_report`: a STREAM triad `a[i] = b[i] + s * c[i]` over
//!   three 64 MiB `f32` arrays (16 Mi elements, 65,536 workgroups of 256), launched and
//!   waited for, compiled from the same WGSL by two devices of the same driver: one with the
//!   report (every index also checked for the report: three checks a thread), one without
//!   (offload's protection only, which both have). The triad is
//!   memory-bound, the case the issue names. **Goal: with / without ≤ 1.05**, for the
//!   report to be on by default. Not met on lavapipe (about 1.6: each invocation's
//!   `atomicAdd` at its exit runs masked for every lane there), so the report is off by
//!   default (docs/benchmarks.md).
//!
//! Run with `cargo bench -p offload-vulkan --features wgsl --bench bounds_report`. Without
//! a Vulkan driver it says so and measures nothing.

use criterion::Criterion;
use offload_core::hal::{Device as _, Platform as _, Program as _, Queue as _};
use offload_core::{Config, Dims, KernelArg, MemKind, Source};
use offload_vulkan::{VulkanBuffer, VulkanDevice, VulkanKernel, VulkanOptions, VulkanPlatform};

const TRIAD: &str = "
struct Args { scalar: f32, n: u32 }
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> c: array<f32>;
var<immediate> args: Args;

@compute @workgroup_size(256)
fn triad(@builtin(global_invocation_id) id: vec3<u32>,
         @builtin(num_workgroups) groups: vec3<u32>) {
    let i = id.x + id.y * groups.x * 256u;
    if i < args.n {
        a[i] = b[i] + args.scalar * c[i];
    }
}
";

/// Elements of each array: 64 MiB of `f32`.
const N: u32 = 16 << 20;

/// One device's triad: its platform, kernel, queue and arrays.
struct Triad {
    platform: VulkanPlatform,
    device: VulkanDevice,
    kernel: VulkanKernel,
    queue: offload_vulkan::VulkanQueue,
    arrays: [VulkanBuffer; 3],
}

impl Triad {
    fn new(report: bool) -> Option<Triad> {
        let options = VulkanOptions::default().bounds_report(report);
        let platform = VulkanPlatform::open_with(&Config::default(), options).ok()?;
        let device = platform.devices().into_iter().next()?;
        let image = device
            .compile(&Source::wgsl(TRIAD))
            .expect("the triad compiles");
        let module = device.load(&image).expect("the triad loads");
        assert_eq!(module.reports_bounds(), report, "the report is as asked");
        let kernel = module.kernel("triad").expect("the triad kernel");
        let queue = device.queue().expect("a queue");
        let bytes = N as usize * 4;
        let arrays = [0u8; 3].map(|_| device.alloc(bytes, MemKind::Device).expect("64 MiB"));
        for (array, value) in arrays.iter().zip([0.0f32, 1.0, 2.0]) {
            queue
                .enqueue_fill(array, 0, bytes, &value.to_ne_bytes())
                .expect("fill");
        }
        queue.sync().expect("filled");
        Some(Triad {
            platform,
            device,
            kernel,
            queue,
            arrays,
        })
    }

    /// One triad, launched and waited for.
    fn run(&self) {
        let scalar = 0.4f32.to_ne_bytes();
        let n = N.to_ne_bytes();
        let [a, b, c] = &self.arrays;
        let args = [
            KernelArg::Buffer(a),
            KernelArg::Buffer(b),
            KernelArg::Buffer(c),
            KernelArg::Scalar(&scalar),
            KernelArg::Scalar(&n),
        ];
        let dims = Dims::grid([256, N / 256 / 256, 1]).block([256, 1, 1]);
        // SAFETY: compiled from WGSL with every index checked; the arrays hold N elements.
        unsafe { self.queue.launch(&self.kernel, &dims, &args) }.expect("launch");
        self.queue.sync().expect("the triad stays in bounds");
    }

    fn close(self) {
        let Triad {
            platform,
            device,
            kernel,
            queue,
            arrays,
        } = self;
        queue.destroy().expect("queue");
        drop(kernel);
        for a in arrays {
            device.free(a).expect("free");
        }
        drop(device);
        platform.deinit().expect("deinit");
    }
}

fn main() {
    let (Some(with), Some(without)) = (Triad::new(true), Triad::new(false)) else {
        println!("bounds_report: no Vulkan driver here; nothing measured");
        return;
    };
    let mut c = Criterion::default().configure_from_args();
    let p = offload_bench::paired(
        &mut c,
        "vulkan_triad_64MiB_bounds_report",
        ("report_on", "report_off"),
        15,
        || with.run(),
        || without.run(),
    );
    if p.samples > 0 {
        println!(
            "goal: with / without <= 1.05: {} (paired median ratio {:.3})",
            if p.ratio.median <= 1.05 {
                "met"
            } else {
                "NOT met"
            },
            p.ratio.median
        );
    }
    c.final_summary();
    with.close();
    without.close();
}
