//! SAXPY (`y = a * x + y`) over 1 Mi floats on a host device, its program built by
//! `Program::from_source(Source::c(..))` — the host C compiler at the flags offload uses —
//! each comparison paired (`offload_bench::paired`: the two sides alternate sample by
//! sample, and the ratio comes from paired samples). One iteration is `Queue::launch` of
//! `Dims::for_num_elems(1 Mi)` (4,096 blocks of 256) and `Queue::sync`.
//!
//! * `saxpy_1Mi`: `fixtures/saxpy.c` (the block's range clamped to n once, a loop over
//!   `restrict` pointers: vectorised) against `fixtures/saxpy_naive.c` (a bounds check per
//!   thread in the loop, plain pointers: scalar).
//! * `saxpy_1Mi_opt`: `fixtures/saxpy.c` at offload's flags (`-O3`) against the same text
//!   with `-O2` added (GCC 12's `-O2` does not vectorise a loop of unknown trip count).
//!
//! Run: `cargo bench -p offload-host --bench saxpy_source`. Needs a C compiler (`$CC` or
//! `cc`).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use offload_bench::paired;
use offload_core::{Device, Dims, Kernel, Offload, Program, Queue, Source, TypedBuffer};

const N: u32 = 1 << 20;
const SAMPLES: usize = 50;
const A: f32 = 0.5;

fn kernel(dev: &Device, source: Source) -> Kernel {
    Program::from_source(source)
        .load(dev)
        .expect("compile and load")
        .kernel("saxpy")
        .expect("saxpy")
}

fn launch(queue: &Queue, saxpy: &Kernel, x: &TypedBuffer<f32>, y: &TypedBuffer<f32>) {
    // SAFETY: saxpy reads n floats of x and writes n floats of y; both hold n = N.
    unsafe {
        queue.launch(
            saxpy,
            Dims::for_num_elems(N),
            &offload_core::args![x, y, A, N],
        )
    }
    .expect("launch");
    queue.sync().expect("sync");
}

/// Both kernels compute the same thing.
fn check(dev: &Device, queue: &Queue, kernels: &[&Kernel]) {
    let x: Vec<f32> = (0..N).map(|i| (i % 1000) as f32).collect();
    let xb = dev.upload(&x).expect("upload x");
    let mut results = Vec::new();
    for k in kernels {
        let y = dev.upload(&vec![1.0f32; N as usize]).expect("upload y");
        launch(queue, k, &xb, &y);
        results.push(y.to_vec().expect("read y"));
    }
    for r in &results {
        for (i, (&got, &x)) in r.iter().zip(&x).enumerate() {
            assert_eq!(got, A * x + 1.0, "element {i}");
        }
    }
}

fn saxpy(c: &mut Criterion) {
    let rt: Offload = Offload::builder()
        .platform(offload_host::platform())
        .compile_cache(None)
        .start()
        .expect("host runtime");
    let dev = rt.devices().expect("devices").remove(0);
    let queue = dev.queue().expect("queue");
    let vectorised = kernel(&dev, Source::c(include_str!("../fixtures/saxpy.c")));
    let naive = kernel(&dev, Source::c(include_str!("../fixtures/saxpy_naive.c")));
    let at_o2 = kernel(
        &dev,
        Source::c(include_str!("../fixtures/saxpy.c")).option("-O2"),
    );
    check(&dev, &queue, &[&vectorised, &naive, &at_o2]);

    let x = dev.upload(&vec![1.0f32; N as usize]).expect("upload x");
    let y = dev.alloc_zeros::<f32>(N as usize).expect("alloc y");
    let reports = [
        paired(
            c,
            "saxpy_1Mi",
            ("vectorised", "naive"),
            SAMPLES,
            || launch(&queue, black_box(&vectorised), &x, &y),
            || launch(&queue, black_box(&naive), &x, &y),
        ),
        paired(
            c,
            "saxpy_1Mi_opt",
            ("-O3", "-O2"),
            SAMPLES,
            || launch(&queue, black_box(&vectorised), &x, &y),
            || launch(&queue, black_box(&at_o2), &x, &y),
        ),
    ];
    println!("\nsummary (median per launch + sync):");
    for r in &reports {
        println!("{r}");
    }
    drop((x, y, queue, vectorised, naive, at_o2, dev));
    rt.shutdown().expect("shutdown");
}

criterion_group!(benches, saxpy);
criterion_main!(benches);
