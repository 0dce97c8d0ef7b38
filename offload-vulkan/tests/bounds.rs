//! offload's bounds checks of WGSL kernels on a real Vulkan device (lavapipe in CI): every
//! shape of out-of-range access reads zero or writes nothing; and with
//! `VulkanOptions::bounds_report(true)`, the first out-of-range access of a launch comes
//! back from the queue's next `sync` as `Error::OutOfBounds` naming the kernel, the
//! argument, the index, the array's length and the access; once; to that queue only;
//! through helper functions, early returns, signed indices, fixed-size arrays inside a
//! buffer and atomics. With the report off the same launch syncs `Ok` and is still
//! protected.
//!
//! Without a Vulkan driver the tests are skipped with a printed reason, except with
//! `CI=true`, where that is a failure.

#![cfg(feature = "wgsl")]

mod common;

use offload_core::hal::{Device as _, Platform as _, Program as _, Queue as _};
use offload_core::{Dims, Error, KernelArg, MemKind, Source};
use offload_vulkan::{VulkanBuffer, VulkanDevice, VulkanOptions, VulkanPlatform};

/// Kernels that stray in the ways the pass must see, each over `out` (8 `u32`s).
const STRAY: &str = "
struct Inner { xs: array<u32, 4> }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> items: array<Inner>;
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>;

fn put(i: u32) { out[i] = 1u; }

@compute @workgroup_size(1)
fn via_helper(@builtin(global_invocation_id) id: vec3<u32>) { put(10u + id.x); }

@compute @workgroup_size(1)
fn negative(@builtin(global_invocation_id) id: vec3<u32>) {
    out[0] = out[i32(id.x) - 5];
}

@compute @workgroup_size(1)
fn fixed(@builtin(global_invocation_id) id: vec3<u32>) {
    items[0].xs[id.x + 7u] = 3u;
}

@compute @workgroup_size(1)
fn early(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x == 0u {
        out[100u] = 5u;
        return;
    }
    out[200u] = 6u;
}

@compute @workgroup_size(1)
fn count(@builtin(global_invocation_id) id: vec3<u32>) {
    atomicAdd(&counts[50u + id.x], 1u);
}

@compute @workgroup_size(1)
fn in_range(@builtin(global_invocation_id) id: vec3<u32>) {
    out[id.x] = out[id.x] + 1u;
}
";

struct Fixture {
    vk: VulkanPlatform,
    dev: VulkanDevice,
    module: offload_vulkan::VulkanModule,
    out: VulkanBuffer,
    items: VulkanBuffer,
    counts: VulkanBuffer,
}

impl Fixture {
    fn new(test: &str, report: bool) -> Option<Fixture> {
        let options = VulkanOptions::default()
            .validation(true)
            .bounds_report(report);
        let vk = common::open_with(test, options)?;
        let dev = vk.devices().remove(0);
        let image = dev.compile(&Source::wgsl(STRAY)).unwrap();
        let module = dev.load(&image).unwrap();
        assert_eq!(module.reports_bounds(), report);
        let alloc = |bytes| {
            let mut b = dev.alloc(bytes, MemKind::Device).unwrap();
            dev.fill(&mut b, 0, bytes, 0).unwrap();
            b
        };
        let (out, items, counts) = (alloc(32), alloc(32), alloc(16));
        Some(Fixture {
            vk,
            dev,
            module,
            out,
            items,
            counts,
        })
    }

    /// Launches `name` over `threads` one-thread workgroups (the kernel checks every access
    /// against its buffers: compiled from WGSL).
    fn launch(&self, queue: &offload_vulkan::VulkanQueue, name: &str, threads: u32) {
        let kernel = self.module.kernel(name).unwrap();
        // Each kernel's parameters are the buffers it uses.
        let buffer = match name {
            "fixed" => &self.items,
            "count" => &self.counts,
            _ => &self.out,
        };
        let args = [KernelArg::Buffer(buffer)];
        let dims = Dims::grid([threads, 1, 1]).block([1, 1, 1]);
        // SAFETY: every access of the kernel is checked against its buffers.
        unsafe { queue.launch(&kernel, &dims, &args) }.unwrap();
    }

    fn close(self) {
        let Fixture {
            vk,
            dev,
            module,
            out,
            items,
            counts,
        } = self;
        for b in [out, items, counts] {
            dev.free(b).unwrap();
        }
        drop(module);
        drop(dev);
        common::close(vk);
    }
}

/// What a sync returned, as (kernel, argument, binding, index, length, access, more).
type Seen = (String, usize, u32, u64, u64, &'static str, u64);

fn report(result: offload_core::Result<()>) -> Seen {
    match result {
        Err(Error::OutOfBounds {
            kernel,
            argument,
            binding,
            index,
            length,
            access,
            more,
            ..
        }) => (kernel, argument, binding, index, length, access, more),
        other => panic!("no OutOfBounds: {other:?}"),
    }
}

#[test]
fn each_kind_of_stray_access_is_reported_with_its_kernel_argument_and_index() {
    let Some(f) = Fixture::new(
        "each_kind_of_stray_access_is_reported_with_its_kernel_argument_and_index",
        true,
    ) else {
        return;
    };
    let queue = f.dev.queue().unwrap();
    let s = |k: &str| k.to_string();
    // One thread each: the report is that thread's access.
    let cases: [(&str, Seen); 5] = [
        ("via_helper", (s("via_helper"), 1, 0, 10, 8, "write", 0)),
        // -5 as a u32; the write of out[0] is in range.
        (
            "negative",
            (s("negative"), 1, 0, (-5i32) as u32 as u64, 8, "read", 0),
        ),
        ("fixed", (s("fixed"), 1, 1, 7, 4, "write", 0)),
        ("early", (s("early"), 1, 0, 100, 8, "write", 0)),
        ("count", (s("count"), 1, 2, 50, 4, "atomic", 0)),
    ];
    for (name, want) in cases {
        f.launch(&queue, name, 1);
        assert_eq!(report(queue.sync()), want, "{name}");
        // Once: the next sync has nothing, and an in-range launch reports nothing.
        f.launch(&queue, "in_range", 8);
        queue.sync().unwrap();
    }
    // Eight threads of `early`: thread 0 leaves by the early return, 1..8 at the end;
    // one report, seven more.
    f.launch(&queue, "early", 8);
    let (kernel, .., more) = report(queue.sync());
    assert_eq!((kernel.as_str(), more), ("early", 7));
    // The in-range kernel's five launches all landed, the stray writes nowhere; `negative`
    // set out[0] to what its stray read gave: zero.
    let mut out = [0u8; 32];
    f.dev.read(&f.out, 0, &mut out).unwrap();
    assert_eq!(common::words(&out), [4, 5, 5, 5, 5, 5, 5, 5]);
    queue.destroy().unwrap();
    f.close();
    common::assert_no_validation_errors("tests/bounds_report.rs");
}

#[test]
fn a_report_goes_to_the_queue_that_launched_and_counts_every_stray_access_after_it() {
    let Some(f) = Fixture::new(
        "a_report_goes_to_the_queue_that_launched_and_counts_every_stray_access_after_it",
        true,
    ) else {
        return;
    };
    let (q1, q2) = (f.dev.queue().unwrap(), f.dev.queue().unwrap());
    // Two kernels (two report slots of one batch) and several launches: one report,
    // every other stray access counted.
    f.launch(&q1, "via_helper", 4);
    f.launch(&q1, "count", 2);
    f.launch(&q1, "via_helper", 1);
    f.launch(&q2, "in_range", 8);
    q2.sync().unwrap();
    let (.., more) = report(q1.sync());
    assert_eq!(more, 4 + 2 + 1 - 1);
    q1.sync().unwrap();
    // Across batches: a queue that submitted (an event) before the next stray launch.
    f.launch(&q1, "via_helper", 1);
    let event = q1.record().unwrap();
    f.launch(&q1, "count", 1);
    q1.sync().unwrap_err();
    drop(event);
    q1.sync().unwrap();
    for q in [q1, q2] {
        q.destroy().unwrap();
    }
    f.close();
}

#[test]
fn with_the_report_off_a_stray_launch_syncs_ok_and_is_still_protected() {
    let Some(f) = Fixture::new(
        "with_the_report_off_a_stray_launch_syncs_ok_and_is_still_protected",
        false,
    ) else {
        return;
    };
    let queue = f.dev.queue().unwrap();
    f.launch(&queue, "early", 8);
    f.launch(&queue, "via_helper", 8);
    queue.sync().unwrap();
    let mut out = [0u8; 32];
    f.dev.read(&f.out, 0, &mut out).unwrap();
    assert_eq!(out, [0; 32], "no stray write landed");
    queue.destroy().unwrap();
    f.close();
}

/// Every shape of access the checks guard, each out of range in one invocation: loads of a
/// struct, a vector component, a local array element and a negative index give zero;
/// stores, atomics (with and without a used result, compare-exchange included) and
/// `atomicStore` into buffers, workgroup memory and a local array do nothing; an atomic's
/// result is zero. In-range accesses beside them work. naga's own `ReadZeroSkipWrite`
/// refused this module ("Atomics out-of-bounds handling" unimplemented).
const SHAPES: &str = "
struct Pair { a: u32, b: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> pairs: array<Pair>;
@group(0) @binding(2) var<storage, read_write> vecs: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> counts: array<atomic<u32>>;
var<workgroup> hist: array<atomic<u32>, 4>;

@compute @workgroup_size(1)
fn shapes(@builtin(global_invocation_id) id: vec3<u32>) {
    let far = 1000u + id.x;
    let p = pairs[far];
    out[0] = p.a + p.b + 100u;
    out[1] = vecs[0][far % 8u + 4u] + 7u;
    out[2] = vecs[far][1] + 9u;
    var local: array<u32, 4>;
    local[far % 4u + 4u] = 55u;
    out[3] = local[0] + local[1] + local[2] + local[3] + local[far] + 11u;
    atomicAdd(&counts[far], 5u);
    out[4] = atomicAdd(&counts[far], 1u) + 13u;
    let r = atomicCompareExchangeWeak(&counts[far], 0u, 9u);
    out[5] = select(0u, 1u, r.exchanged) + r.old_value + 15u;
    atomicAdd(&hist[far % 4u + 4u], 1u);
    atomicAdd(&hist[id.x % 4u], 1u);
    workgroupBarrier();
    out[6] = atomicLoad(&hist[0]) + atomicLoad(&hist[1]) + 17u;
    out[7] = out[i32(id.x) - 3] + 19u;
    out[far] = 0xdeadu;
    pairs[far].b = 77u;
    vecs[1][far] = 88u;
    atomicAdd(&counts[1], 2u);
    atomicStore(&counts[far], 3u);
}
";

/// The buffers of `SHAPES` after one launch of one invocation, as `u32`s.
fn run_shapes(test: &str, report: bool) -> Option<(Vec<Vec<u32>>, offload_core::Result<()>)> {
    let options = VulkanOptions::default()
        .validation(true)
        .bounds_report(report);
    let vk = common::open_with(test, options)?;
    let dev = vk.devices().remove(0);
    let image = dev.compile(&Source::wgsl(SHAPES)).unwrap();
    let module = dev.load(&image).unwrap();
    let kernel = module.kernel("shapes").unwrap();
    let inputs: [Vec<u32>; 4] = [
        vec![0; 16],
        (1..=8).collect(),
        (21..=28).collect(),
        vec![0; 4],
    ];
    let mut buffers = Vec::new();
    for values in &inputs {
        let bytes = common::bytes_of(values);
        let mut b = dev.alloc(bytes.len(), MemKind::Device).unwrap();
        dev.write(&mut b, 0, &bytes).unwrap();
        buffers.push(b);
    }
    let queue = dev.queue().unwrap();
    let args: Vec<KernelArg<'_, VulkanBuffer>> = buffers.iter().map(KernelArg::Buffer).collect();
    let dims = Dims::grid([1, 1, 1]).block([1, 1, 1]);
    // SAFETY: compiled from WGSL: every indexed access is checked against its array.
    unsafe { queue.launch(&kernel, &dims, &args) }.unwrap();
    let synced = queue.sync();
    let mut after = Vec::new();
    for b in buffers {
        let mut bytes = vec![0u8; b.len()];
        dev.read(&b, 0, &mut bytes).unwrap();
        after.push(common::words(&bytes));
        dev.free(b).unwrap();
    }
    queue.destroy().unwrap();
    drop((kernel, module, dev));
    common::close(vk);
    Some((after, synced))
}

#[test]
fn every_shape_of_access_out_of_range_reads_zero_and_writes_nothing() {
    let test = "every_shape_of_access_out_of_range_reads_zero_and_writes_nothing";
    let Some((after, synced)) = run_shapes(test, false) else {
        return;
    };
    synced.unwrap();
    let mut out = vec![100, 7, 9, 11, 13, 15, 18, 19];
    out.resize(16, 0);
    assert_eq!(after[0], out, "out");
    assert_eq!(after[1], (1..=8).collect::<Vec<u32>>(), "pairs untouched");
    assert_eq!(after[2], (21..=28).collect::<Vec<u32>>(), "vecs untouched");
    assert_eq!(after[3], [0, 2, 0, 0], "only the in-range atomic landed");
    common::assert_no_validation_errors("tests/bounds.rs");
}

/// The same launch with the report: the same memory, and one report of the 11
/// out-of-range accesses into buffers (locals and workgroup memory are not reported); the
/// invocation's record keeps its last, the `atomicStore`.
#[test]
fn the_report_counts_every_buffer_access_out_of_range() {
    let test = "the_report_counts_every_buffer_access_out_of_range";
    let Some((after, synced)) = run_shapes(test, true) else {
        return;
    };
    assert_eq!(after[3], [0, 2, 0, 0]);
    assert_eq!(
        report(synced),
        ("shapes".to_string(), 4, 3, 1000, 4, "write", 10)
    );
}

/// Behind a host function (its queue holds the later work until it has run): a stray
/// launch before it and one after it are reported by the same sync as the function's
/// panic, each once (L8).
#[test]
fn a_stray_launch_behind_a_host_function_is_reported_beside_its_panic() {
    let Some(f) = Fixture::new(
        "a_stray_launch_behind_a_host_function_is_reported_beside_its_panic",
        true,
    ) else {
        return;
    };
    let queue = f.dev.queue().unwrap();
    f.launch(&queue, "via_helper", 1);
    queue
        .enqueue_host_fn(Box::new(|| panic!("a planted panic")))
        .unwrap();
    f.launch(&queue, "count", 2);
    let Err(Error::Multiple(errors)) = queue.sync() else {
        panic!("not both errors");
    };
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(matches!(errors[0], Error::Callback { .. }), "{errors:?}");
    assert!(
        matches!(errors[1], Error::OutOfBounds { more: 2, .. }),
        "{errors:?}"
    );
    queue.sync().unwrap();
    queue.destroy().unwrap();
    f.close();
}
