//! The Vulkan backend against raw `ash`, in one run, on whatever Vulkan driver the machine
//! has (lavapipe here), each comparison paired (`offload_bench::paired`: the two sides
//! alternate sample by sample, and the ratio comes from paired samples):
//!
//! * `vulkan_add_one_1Mi`: `add_one` (the WGSL test kernel, compiled by
//!   naga) over 1 Mi `u32`s in 16,384 workgroups of 64, launched and waited for, in a loop.
//!   `offload` goes through the runtime (`Queue::launch` + `Queue::sync`); `raw_ash` has the
//!   identical setup made by hand — one pipeline, one descriptor set written once, the count
//!   as a push constant, the same buffer memory — and records, submits and waits for one
//!   command buffer per iteration, waiting on a timeline semaphore as offload does (a
//!   fence wait costs lavapipe ~0.35 ms more per dispatch, which would flatter offload).
//!   **Goal: offload / raw_ash ≤ 1.05.**
//! * `vulkan_100_dependent_launches`: 100 launches of `add_one` over one workgroup of 64
//!   on the same buffer (each depends on the one before), then one `sync`. `offload` makes
//!   101 calls; its queue records the 100 dispatches into one command buffer with a barrier
//!   between each and submits it at the `sync` (Q1 batching). `raw_ash` records the same
//!   100 dispatches and barriers into one command buffer by hand, submits it and waits on a
//!   timeline semaphore: the floor for this work on this driver (wgpu, the comparison the
//!   issue first named, is too heavy a dev-dependency; its one-pass time is this floor plus
//!   its own validation). **Goal: offload / raw_ash ≤ 1.1.**
//! * `vulkan_100_dependent_launches_pinned`: the same, with the whole process pinned to one
//!   CPU (as the issue measured it, beside wgpu, under `taskset`). Unpinned, lavapipe's
//!   worker threads make each barrier cost ~30 µs and the recording work disappears under
//!   that; on one CPU the raw chain takes ~0.15 ms on the 2-core VM and offload's
//!   per-launch recording shows.
//!   **Goal: offload / raw_ash ≤ 1.2.**
//!
//!   Pinning must happen before the first thread of the process exists (affinity is per
//!   thread and inherited at creation: lavapipe's worker threads, made with the instance
//!   and device, then run on the same CPU) and must not affect the other groups, so this
//!   group runs in a child of the bench: the parent re-runs its own executable with the
//!   same arguments (criterion's filter included) and `OFFLOAD_BENCH_VULKAN_PINNED=<cpu>`
//!   (the first CPU the parent may use); the child pins its main thread to that CPU first
//!   thing, runs only this group, and the parent forwards its output and its paired line.
//!   Setting the variable by hand runs only the pinned group, on that CPU.
//! * `vulkan_init_shutdown`: `Offload::init` → `shutdown` of a runtime
//!   with only the Vulkan platform, against loading the Vulkan loader, creating the instance,
//!   finding the compute queue family and creating and destroying the device (and instance,
//!   and closing the loader). **Goal: offload / raw_ash ≤ 1.05.**
//!
//! The raw side is `benches/common/raw.rs` (shared with `benches/babelstream.rs`). The
//! paired medians and ratios are printed at the end. Run with
//! `cargo bench -p offload-vulkan --bench vulkan`. Without a Vulkan driver it says so and
//! measures nothing.

use std::hint::black_box;
use std::rc::Rc;

use ash::vk;
use criterion::Criterion;
use offload_bench::{Paired, paired};
use offload_core::{Arg, Dims, MemKind, NoPlatforms, Offload, Program, Uninit};

// The raw-ash side: device, buffers, pipelines, submissions (shared with babelstream.rs).
#[path = "common/raw.rs"]
mod raw;
use raw::{RawBuffer, RawDevice, RawPipeline, RawSubmitter};

const WORDS: u32 = 1 << 20;
const BLOCK: u32 = 64;

fn start() -> Option<Offload<offload_core::Ready, NoPlatforms>> {
    Offload::<Uninit, NoPlatforms>::builder()
        .platform(offload_vulkan::platform())
        .start()
        .ok()
}

/// `add_one` set up by hand: the pipeline, its layouts, one descriptor set, the buffer.
struct RawAddOne {
    pipeline: RawPipeline,
    _buffer: RawBuffer,
    submitter: RawSubmitter,
}

impl RawAddOne {
    fn new(words: &[u32]) -> RawAddOne {
        let dev = Rc::new(RawDevice::new());
        let pipeline = RawPipeline::new(&dev, words, "add_one", &[0], 4);
        let buffer = RawBuffer::new(
            &dev,
            u64::from(WORDS) * 4,
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
        );
        pipeline.bind(&[0], &[&buffer]);
        let raw = RawAddOne {
            pipeline,
            _buffer: buffer,
            submitter: RawSubmitter::new(&dev),
        };
        raw.launch_sync(); // the first dispatch compiles on lavapipe
        raw
    }

    /// `count` dispatches of one workgroup over the first 64 words, each after a barrier
    /// on the one before, in one command buffer; submitted and waited for.
    fn chain(&self, count: u32) {
        let barrier = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
        // SAFETY: the pipeline, its set and the buffer bound there are live; the push
        // constant is the kernel's 4-byte count.
        unsafe {
            self.submitter.run(|d, cb| {
                self.pipeline.record_bind(cb, &BLOCK.to_ne_bytes());
                for i in 0..count {
                    if i > 0 {
                        d.cmd_pipeline_barrier(
                            cb,
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::DependencyFlags::empty(),
                            &barrier,
                            &[],
                            &[],
                        );
                    }
                    d.cmd_dispatch(cb, 1, 1, 1);
                }
            });
        }
    }

    fn launch_sync(&self) {
        // SAFETY: as in `chain`; the grid covers the buffer's words exactly.
        unsafe {
            self.submitter.run(|d, cb| {
                self.pipeline.record_bind(cb, &WORDS.to_ne_bytes());
                d.cmd_dispatch(cb, WORDS / BLOCK, 1, 1);
            });
        }
    }
}

fn add_one(c: &mut Criterion, words: &[u32]) -> Paired {
    let rt = start().expect("Vulkan");
    let dev = rt.devices().unwrap().remove(0);
    let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let module = Program::new(image).load(&dev).unwrap();
    let kernel = module.kernel("add_one").unwrap();
    let queue = dev.queue().unwrap();
    let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
    let dims = Dims::grid([WORDS / BLOCK, 1, 1]).block([BLOCK, 1, 1]);
    let launch = || {
        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
        unsafe { queue.launch(&kernel, dims, &[Arg::buffer(&buf), Arg::scalar(&WORDS)]) }.unwrap();
        queue.sync().unwrap();
    };
    launch(); // the first dispatch compiles on lavapipe
    let raw = RawAddOne::new(words);
    raw.launch_sync();
    let report = paired(
        c,
        "vulkan_add_one_1Mi",
        ("offload", "raw_ash"),
        40,
        launch,
        || raw.launch_sync(),
    );
    drop(raw);
    drop((kernel, module, queue, buf));
    rt.shutdown().unwrap();
    report
}

/// Launches in a row on one queue, then one sync (Q1 batching).
const CHAIN: u32 = 100;

fn dependent_launches(c: &mut Criterion, words: &[u32], group: &str) -> Paired {
    let rt = start().expect("Vulkan");
    let dev = rt.devices().unwrap().remove(0);
    let image: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let module = Program::new(image).load(&dev).unwrap();
    let kernel = module.kernel("add_one").unwrap();
    let queue = dev.queue().unwrap();
    let buf = dev.alloc(WORDS as usize * 4, MemKind::Device).unwrap();
    let dims = Dims::grid([1, 1, 1]).block([BLOCK, 1, 1]);
    let chain = || {
        for _ in 0..CHAIN {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            unsafe { queue.launch(&kernel, dims, &[Arg::buffer(&buf), Arg::scalar(&BLOCK)]) }
                .unwrap();
        }
        queue.sync().unwrap();
    };
    let before = offload_vulkan::stats().submissions;
    chain();
    assert_eq!(
        offload_vulkan::stats().submissions - before,
        1,
        "100 launches and a sync are one submission"
    );
    let raw = RawAddOne::new(words);
    raw.chain(CHAIN);
    let report = paired(c, group, ("offload", "raw_ash"), 40, chain, || {
        raw.chain(CHAIN)
    });
    drop(raw);
    drop((kernel, module, queue, buf));
    rt.shutdown().unwrap();
    report
}

fn init_shutdown(c: &mut Criterion) -> Paired {
    paired(
        c,
        "vulkan_init_shutdown",
        ("offload", "raw_ash"),
        30,
        || {
            let rt = start().unwrap();
            black_box(rt.generation());
            rt.shutdown().unwrap();
        },
        || {
            let raw = RawDevice::new();
            black_box(raw.queue);
            drop(raw);
        },
    )
}

/// In the child that runs the pinned group: the CPU to pin the process to.
const PINNED: &str = "OFFLOAD_BENCH_VULKAN_PINNED";
const PINNED_GROUP: &str = "vulkan_100_dependent_launches_pinned";

/// Pins the calling thread, and so every thread it makes afterwards, to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: `cpu_set_t` is plain data (all zeroes: the empty set); `CPU_SET` checks `cpu`
    // against the set's size; `sched_setaffinity` reads `size_of::<cpu_set_t>()` bytes of a
    // live set.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(pinned, 0, "sched_setaffinity to CPU {cpu} failed");
}

/// The first CPU this process may run on.
fn first_allowed_cpu() -> usize {
    // SAFETY: as in `pin_to`; `sched_getaffinity` writes at most the set's size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 0;
        }
        (0..libc::CPU_SETSIZE as usize)
            .find(|&cpu| libc::CPU_ISSET(cpu, &set))
            .unwrap_or(0)
    }
}

/// Runs the pinned group in a child of this bench (see the module docs); forwards its
/// output and returns its paired line.
fn pinned_in_child() -> Option<String> {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(std::env::current_exe().ok()?)
        .args(std::env::args_os().skip(1))
        .env(PINNED, first_allowed_cpu().to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut report = None;
    for line in BufReader::new(child.stdout.take()?).lines() {
        let line = line.ok()?;
        println!("{line}");
        if line.starts_with(&format!("paired {PINNED_GROUP}")) {
            report = Some(line);
        }
    }
    child.wait().ok()?;
    report
}

fn main() {
    let pinned = std::env::var(PINNED).ok();
    if let Some(cpu) = &pinned {
        // First, before any thread exists (see the module docs).
        pin_to(
            cpu.parse()
                .expect("OFFLOAD_BENCH_VULKAN_PINNED: a CPU number"),
        );
    }
    if start().map(|rt| rt.shutdown()).is_none() {
        println!("no Vulkan driver: nothing to measure");
        return;
    }
    let words = raw::spirv_words(include_str!("../tests/fixtures/kernels.wgsl"));
    let mut c = Criterion::default().configure_from_args();
    if pinned.is_some() {
        dependent_launches(&mut c, &words, PINNED_GROUP);
        c.final_summary();
        return;
    }
    let mut reports = vec![
        add_one(&mut c, &words).to_string(),
        dependent_launches(&mut c, &words, "vulkan_100_dependent_launches").to_string(),
        init_shutdown(&mut c).to_string(),
    ];
    c.final_summary();
    reports.extend(pinned_in_child());
    println!("\npaired (goal: offload / raw_ash <= 1.05; 1.1 for the 100 launches; 1.2 pinned):");
    for report in reports {
        println!("  {report}");
    }
}
