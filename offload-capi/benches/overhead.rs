//! What the C API costs over the Rust API, paired in one run (`offload_bench::paired`: the
//! two sides alternate sample by sample): the same operations on the same host device of
//! one runtime, once through `offload` and once through the exported C functions (called
//! here from Rust: the same machine code a C caller reaches, less its PLT jump).
//!
//! * `alloc_free`: `dev.alloc(64)` + `free()` against `offload_buffer_alloc` +
//!   `offload_buffer_free` (two handle-table operations and two guards more).
//! * `launch_sync`: the fixture's `noop` kernel on one block + `queue.sync()` against
//!   `offload_queue_launch` (no arguments) + `offload_queue_sync`, both on the same queue
//!   (the C queue's Rust `Queue`, lent by `offload_capi::queue::with_queue` for the whole
//!   run): the two sides differ by the API alone.
//! * `launch_sync_control`: the same Rust launch + sync on a second queue against the
//!   first. Each host queue has a worker thread of its own: this pair shows what two
//!   queues alone differ by (why `launch_sync` shares one).
//!
//! The target is at most 100 ns of difference per operation pair (with standard locks; the
//! 50 ns of the biased table was withdrawn with it). Run with
//! `cargo bench -p offload-capi --bench overhead`.

use std::hint::black_box;

use criterion::Criterion;
use offload::{BackendKind, Dims, Kernel, MemKind, Offload, Program, Queue};
use offload_bench::paired;
use offload_capi::memory::{offload_buffer_alloc, offload_buffer_free, offload_mem_kind_t};
use offload_capi::program::{
    offload_dims_t, offload_module_kernel, offload_program_from_image, offload_program_load,
    offload_queue_launch,
};
use offload_capi::queue::{offload_queue_create, offload_queue_sync, with_queue};
use offload_capi::runtime::{offload_device_of, offload_init, offload_shutdown};
use offload_capi::status::offload_status_t::OFFLOAD_OK;

const SAMPLES: usize = 30;

/// The Rust side of `launch_sync`: `noop` on one block, then a sync.
fn launch_sync(queue: &Queue, noop: &Kernel) {
    // SAFETY: `noop` takes no arguments and touches no memory.
    unsafe { queue.launch(noop, Dims::grid([1, 1, 1]), &[]) }.expect("launch");
    queue.sync().expect("sync");
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rt = Offload::init().expect("init");
    let dev = rt.device(BackendKind::Host).expect("host device");
    let noop = Program::new(offload_host::fixtures::KERNELS)
        .load(&dev)
        .and_then(|m| m.kernel("noop"))
        .expect("noop kernel");
    let queue = dev.queue().expect("queue");
    let other_queue = dev.queue().expect("second queue");

    // The same runtime through the C API (a second reference, L1).
    let (mut crt, mut cdev, mut cprog, mut cmod, mut ck, mut cq) = (0, 0, 0, 0, 0, 0);
    let image = offload_host::fixtures::KERNELS;
    // SAFETY: every output pointer is a live local; the image is `len` readable bytes and
    // the name NUL-terminated.
    unsafe {
        assert_eq!(offload_init(std::ptr::null(), &mut crt), OFFLOAD_OK);
        assert_eq!(offload_device_of(crt, 0, &mut cdev), OFFLOAD_OK);
        assert_eq!(
            offload_program_from_image(image.as_ptr(), image.len(), &mut cprog),
            OFFLOAD_OK
        );
        assert_eq!(offload_program_load(cprog, cdev, &mut cmod), OFFLOAD_OK);
        assert_eq!(
            offload_module_kernel(cmod, c"noop".as_ptr(), &mut ck),
            OFFLOAD_OK
        );
        assert_eq!(offload_queue_create(cdev, &mut cq), OFFLOAD_OK);
    }
    let dims = offload_dims_t {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_memory: 0,
    };

    let mut results = Vec::new();
    results.push(paired(
        &mut c,
        "alloc_free",
        ("C API", "Rust API"),
        SAMPLES,
        || {
            let mut b = 0;
            // SAFETY: `b` is a live local.
            let s = unsafe {
                offload_buffer_alloc(
                    cdev,
                    64,
                    offload_mem_kind_t::OFFLOAD_MEM_DEVICE as u32,
                    &mut b,
                )
            };
            assert_eq!(s, OFFLOAD_OK);
            assert_eq!(offload_buffer_free(black_box(b)), OFFLOAD_OK);
        },
        || {
            let b = dev.alloc(64, MemKind::Device).expect("alloc");
            black_box(&b);
            b.free().expect("free");
        },
    ));
    let shared = with_queue(cq, |c_queue| {
        paired(
            &mut c,
            "launch_sync",
            ("C API", "Rust API"),
            SAMPLES,
            || {
                // SAFETY: `noop` takes no arguments and touches no memory; dims is a live
                // local.
                let s = unsafe {
                    offload_queue_launch(cq, ck, &dims, std::ptr::null(), std::ptr::null(), 0)
                };
                assert_eq!(s, OFFLOAD_OK);
                assert_eq!(offload_queue_sync(cq), OFFLOAD_OK);
            },
            || launch_sync(c_queue, &noop),
        )
    });
    results.push(shared.expect("the C queue's handle is live"));
    results.push(paired(
        &mut c,
        "launch_sync_control",
        ("Rust API, second queue", "Rust API"),
        SAMPLES,
        || launch_sync(&other_queue, &noop),
        || launch_sync(&queue, &noop),
    ));
    println!("\n| operation | C API | Rust API | C − Rust (IQR) |");
    println!("|---|---|---|---|");
    for p in &results {
        println!(
            "| {} | {:.1} ns | {:.1} ns | {:.1} ns ({:.1} – {:.1}) |",
            p.id,
            p.ours_ns.median,
            p.theirs_ns.median,
            p.difference_ns.median,
            p.difference_ns.q1,
            p.difference_ns.q3
        );
    }
    // SAFETY: a null `was_last` is allowed.
    unsafe { offload_shutdown(crt, std::ptr::null_mut()) };
    drop((queue, other_queue, noop, dev));
    let _ = rt.shutdown();
}
