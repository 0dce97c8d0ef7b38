//! What the compile cache saves: the first launch of a program from source with a cold
//! cache (compile + load + launch + sync) against the same with a warm one (read the
//! entry from disk + load + launch + sync), paired sample by sample in one run
//! (`offload_bench::paired`). Host C (the system `cc`) always; WGSL on Vulkan with the
//! `wgsl` feature and a Vulkan device.
//!
//! Run: `cargo bench --bench compile_cache --features wgsl`.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use offload::{BackendKind, Dims, Offload, Program, Source};
use offload_bench::paired;

const SAMPLES: usize = 10;

/// The kernel (benches/kernels/put.c, shared with the other compile benchmark).
const C_KERNEL: &str = include_str!("kernels/put.c");

#[cfg(feature = "wgsl")]
const WGSL_KERNEL: &str = r#"
struct Params { n: u32 }
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
var<immediate> params: Params;
@compute @workgroup_size(256)
fn put(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < params.n) { buf[id.x] = 7u; }
}
"#;

fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("offload-bench-cache-{}", std::process::id()))
}

/// Loads `source` as a new program (nothing in memory), launches `put` once and waits.
fn first_launch(dev: &offload::Device, source: &Source, buf: &offload::TypedBuffer<u32>) {
    let put = Program::from_source(source.clone())
        .load(dev)
        .expect("load")
        .kernel("put")
        .expect("put");
    let queue = dev.queue().expect("queue");
    // SAFETY: `put` writes the first n u32s of its buffer, which holds 256.
    unsafe { queue.launch(&put, Dims::for_num_elems(256), &offload::args![buf, 256u32]) }
        .expect("launch");
    queue.sync().expect("sync");
}

fn bench_one(c: &mut Criterion, name: &str, dev: &offload::Device, source: Source) {
    let dir = cache_dir();
    let buf = dev.alloc_zeros::<u32>(256).expect("alloc");
    first_launch(dev, &source, &buf); // checks it works, and warms the cache
    paired(
        c,
        name,
        ("warm cache", "cold cache"),
        SAMPLES,
        || first_launch(dev, black_box(&source), &buf),
        || {
            let _ = std::fs::remove_dir_all(&dir);
            first_launch(dev, black_box(&source), &buf);
        },
    );
}

fn compile_cache(c: &mut Criterion) {
    let dir = cache_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let rt = Offload::builder()
        .compile_cache(Some(dir.clone()))
        .start()
        .expect("init");
    let host = rt.device(BackendKind::Host).expect("a host device");
    bench_one(c, "first_launch_host_c", &host, Source::c(C_KERNEL));
    #[cfg(feature = "wgsl")]
    match rt.device(BackendKind::Vulkan) {
        Ok(vk) => bench_one(c, "first_launch_wgsl", &vk, Source::wgsl(WGSL_KERNEL)),
        Err(e) => eprintln!("skipping WGSL: {e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, compile_cache);
criterion_main!(benches);
