//! The typed API against the byte API it is built on, on the host backend, paired sample by
//! sample (`offload_bench::paired`) in one run. **Goal: no measurable overhead** — the
//! typed calls only cast slices (`bytemuck`) and multiply offsets by the element size.
//!
//! * `write16xf32` / `read16xf32`: `TypedBuffer<f32>::write`/`read` of 16 elements against
//!   `Buffer::write`/`read` of the same 64 bytes (with the caller's `to_ne_bytes` packing,
//!   as byte-API users do it).
//! * `view_arg_launch`: a `noop`-free launch of `add_one` on a 16-element view against the
//!   same launch on a 64-byte `Arg::range` of the byte buffer.
//!
//! Run: `cargo bench --bench typed`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use offload::{Arg, BackendKind, Dims, MemKind, Offload, Program};
use offload_bench::paired;

const SAMPLES: usize = 50;

fn typed(c: &mut Criterion) {
    let rt = Offload::init().expect("init");
    let dev = rt.device(BackendKind::Host).expect("a host device");
    let typed = dev.alloc_zeros::<f32>(1024).expect("alloc typed");
    let bytes = dev.alloc(4096, MemKind::Device).expect("alloc bytes");
    let values = [1.5f32; 16];
    let mut out = [0f32; 16];
    let mut raw_out = [0u8; 64];
    typed.write(0, &values).expect("typed write");
    typed.read(0, &mut out).expect("typed read");

    paired(
        c,
        "write16xf32",
        ("typed", "bytes"),
        SAMPLES,
        || {
            let _ = black_box(typed.write(black_box(0), black_box(&values)));
        },
        || {
            let mut packed = [0u8; 64];
            for (chunk, v) in packed.chunks_exact_mut(4).zip(black_box(&values)) {
                chunk.copy_from_slice(&v.to_ne_bytes());
            }
            let _ = black_box(bytes.write(black_box(0), &packed));
        },
    );
    paired(
        c,
        "read16xf32",
        ("typed", "bytes"),
        SAMPLES,
        || {
            let _ = black_box(typed.read(black_box(0), black_box(&mut out)));
        },
        || {
            let _ = black_box(bytes.read(black_box(0), black_box(&mut raw_out)));
            let mut floats = [0f32; 16];
            for (f, chunk) in floats.iter_mut().zip(raw_out.chunks_exact(4)) {
                *f = f32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            }
            black_box(floats);
        },
    );

    let counts = dev.alloc_zeros::<u32>(1024).expect("alloc counts");
    let raw_counts = dev.alloc(4096, MemKind::Device).expect("alloc raw counts");
    let add_one = Program::new(offload::host::fixtures::KERNELS)
        .load(&dev)
        .expect("load")
        .kernel("add_one")
        .expect("add_one");
    let queue = dev.queue().expect("queue");
    let dims = Dims::grid([1, 1, 1]).block([16, 1, 1]);
    let view = counts.slice(16..32);
    // SAFETY (every launch below): add_one adds 1 to the first 16 u32s of a 16-element
    // (64-byte) range.
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe { queue.launch(&add_one, dims, &offload::args![&view, 16u32]) }.expect("launch");
    queue.sync().expect("sync");
    paired(
        c,
        "view_arg_launch",
        ("typed view", "byte range"),
        SAMPLES,
        || {
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            let _ = black_box(unsafe {
                queue.launch(&add_one, dims, &offload::args![black_box(&view), 16u32])
            });
            let _ = queue.sync();
        },
        || {
            let args = [
                Arg::range(black_box(&raw_counts), 64, 64),
                Arg::value(16u32),
            ];
            // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
            let _ = black_box(unsafe { queue.launch(&add_one, dims, &args) });
            let _ = queue.sync();
        },
    );
}

criterion_group!(benches, typed);
criterion_main!(benches);
