//! A launch records only what differs from the launch before it in the same command buffer
//! (pipeline, descriptor set, push constants; a set written earlier in the batch with the
//! same bindings is bound again instead of a fresh one): launches that differ in kernel,
//! block size, buffer, range and scalars, in one batch, across a batch that fills up and
//! across syncs, each see their own arguments, with the validation layer on.

mod common;

use common::{assert_no_validation_errors, close, kernels, open_validated, serial, words};
use offload_core::hal::{Device as _, Platform as _, Program as _, Queue as _};
use offload_core::{Dims, KernelArg, MemKind};
use offload_vulkan::{VulkanBuffer, VulkanDevice, VulkanKernel, VulkanQueue, stats};

const N: usize = 1024;

struct Kernels {
    add_one: VulkanKernel,
    fill: VulkanKernel,
    noop: VulkanKernel,
}

fn grid(block: u32, n: usize) -> Dims {
    Dims::grid([(n as u32).div_ceil(block), 1, 1]).block([block, 1, 1])
}

fn add_one(q: &VulkanQueue, k: &Kernels, arg: KernelArg<'_, VulkanBuffer>, n: usize, block: u32) {
    let count = (n as u32).to_ne_bytes();
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        q.launch(
            &k.add_one,
            &grid(block, n),
            &[arg, KernelArg::Scalar(&count)],
        )
    }
    .unwrap();
}

fn fill(q: &VulkanQueue, k: &Kernels, buf: &VulkanBuffer, value: u32, n: usize) {
    let (value, count) = (value.to_ne_bytes(), (n as u32).to_ne_bytes());
    let args = [
        KernelArg::Buffer(buf),
        KernelArg::Scalar(&value),
        KernelArg::Scalar(&count),
    ];
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { q.launch(&k.fill, &grid(64, n), &args) }.unwrap();
}

fn read(dev: &VulkanDevice, buf: &VulkanBuffer) -> Vec<u32> {
    let mut out = vec![0u8; buf.len()];
    dev.read(buf, 0, &mut out).unwrap();
    words(&out)
}

#[test]
fn launches_that_differ_each_see_their_own_arguments() {
    const TEST: &str = "launches_that_differ_each_see_their_own_arguments";
    let _serial = serial();
    let Some(vk) = open_validated(TEST) else {
        return;
    };
    let dev = vk.devices().remove(0);
    let module = dev.load(&kernels()).unwrap();
    let k = Kernels {
        add_one: module.kernel("add_one").unwrap(),
        fill: module.kernel("fill").unwrap(),
        noop: module.kernel("noop").unwrap(),
    };
    let q = dev.queue().unwrap();
    let a = dev.alloc(4 * N, MemKind::Device).unwrap();
    let b = dev.alloc(4 * N, MemKind::Device).unwrap();
    let (mut model_a, mut model_b) = (vec![0u32; N], vec![0u32; N]);
    let bump = |model: &mut [u32], at: usize, n: usize| {
        model[at..at + n].iter_mut().for_each(|w| *w += 1);
    };
    // A range of `a` starting at the first aligned offset at or above 256 bytes.
    let align = dev.vulkan_info().min_storage_buffer_offset_alignment.max(1) as usize;
    let offset = 256usize.div_ceil(align) * align;
    assert!(
        offset + 4 * N / 2 <= 4 * N,
        "alignment {align} too large for the test"
    );

    // One batch: every launch below is recorded, none submitted, until the sync.
    let submissions = stats().submissions;
    fill(&q, &k, &a, 5, N);
    fill(&q, &k, &b, 9, N);
    model_a.fill(5);
    model_b.fill(9);
    // Another pipeline; then the same launch again (nothing rebound).
    for _ in 0..2 {
        add_one(&q, &k, KernelArg::Buffer(&a), N, 64);
        bump(&mut model_a, 0, N);
    }
    // Another buffer and count; back to the first buffer (another set than the last one).
    add_one(&q, &k, KernelArg::Buffer(&b), N / 2, 64);
    bump(&mut model_b, 0, N / 2);
    add_one(&q, &k, KernelArg::Buffer(&a), N / 4, 64);
    bump(&mut model_a, 0, N / 4);
    // A range of the same buffer: another set.
    let range = KernelArg::Range {
        buffer: &a,
        offset,
        len: 4 * N / 2,
    };
    add_one(&q, &k, range, N / 2, 64);
    bump(&mut model_a, offset / 4, N / 2);
    // Another block size: another pipeline of the same layout.
    add_one(&q, &k, KernelArg::Buffer(&a), N, 32);
    bump(&mut model_a, 0, N);
    // A kernel with another push-constant block, then one with no set and no push, then
    // `add_one` again after both.
    fill(&q, &k, &b, 3, 10);
    model_b[..10].fill(3);
    add_one(&q, &k, KernelArg::Buffer(&b), 20, 64);
    bump(&mut model_b, 0, 20);
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { q.launch(&k.noop, &grid(64, 64), &[]) }.unwrap();
    add_one(&q, &k, KernelArg::Buffer(&b), 20, 64);
    bump(&mut model_b, 0, 20);
    assert_eq!(q.unsubmitted(), 12);
    assert_eq!(
        stats().submissions,
        submissions,
        "nothing submitted before the sync"
    );
    q.sync().unwrap();
    assert_eq!(stats().submissions, submissions + 1, "one submission");
    assert!(read(&dev, &a) == model_a, "buffer a after one batch");
    assert!(read(&dev, &b) == model_b, "buffer b after one batch");

    // Each sync ends a command buffer: the next one binds everything again.
    for _ in 0..3 {
        add_one(&q, &k, KernelArg::Buffer(&a), N, 64);
        bump(&mut model_a, 0, N);
        q.sync().unwrap();
    }
    // More launches than one batch takes (256): the second batch binds everything again.
    for _ in 0..300 {
        add_one(&q, &k, KernelArg::Buffer(&b), N, 64);
    }
    model_b.iter_mut().for_each(|w| *w += 300);
    q.sync().unwrap();
    assert!(read(&dev, &a) == model_a, "buffer a after three syncs");
    assert!(read(&dev, &b) == model_b, "buffer b across a full batch");

    q.destroy().unwrap();
    dev.free(a).unwrap();
    dev.free(b).unwrap();
    drop(k);
    module.unload().unwrap();
    close(vk);
    assert_no_validation_errors(TEST);
}
