//! Lifecycle and handle-validation costs of offload on the host backend.
//!
//! Measures, in one run:
//!
//! * `cycle/offload`: `Offload::init()` followed by `shutdown()`, where nothing else holds
//!   a runtime, so every iteration is a full 0→1→0 transition (opening and deinitialising
//!   the host platform). **Goal: ≤ 5 µs median.** `cycle/raw_host` is the host backend's
//!   own cost of the same (`HostPlatform::open` + `devices` + `deinit`), for comparison.
//! * `handle/*`: the cost of offload's safe handles (generation check, per-buffer lock,
//!   range validation, type-erased dispatch) over calling the backend directly, for 64-byte
//!   `write`/`read` on a 4096-byte buffer, `len`, and `device_info`. **Goal: offload − raw
//!   ≤ 20 ns for `write64` and `read64`.**
//!
//! Run with `cargo bench --bench lifecycle`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use offload::{Backend, BackendKind, Config, MemKind, Offload};
use offload_host::HostPlatform;

const BUFFER_SIZE: usize = 4096;

fn cycle(c: &mut Criterion) {
    // Nothing else may hold a runtime here: each iteration must be a real 0→1→0.
    let down = Offload::init().expect("init").shutdown().expect("shutdown");
    assert!(
        down.was_last(),
        "another runtime is alive: the cycle would not be a 0→1→0 transition"
    );

    let mut group = c.benchmark_group("cycle");
    group.bench_function("offload", |b| {
        b.iter(|| {
            let rt = Offload::init().expect("init");
            black_box(rt.shutdown().expect("shutdown"))
        })
    });
    let config = Config::default();
    group.bench_function("raw_host", |b| {
        b.iter(|| {
            let platform = HostPlatform::open(black_box(&config)).expect("open");
            black_box(Backend::devices(&platform));
            Backend::deinit(&platform).expect("deinit");
            black_box(platform)
        })
    });
    group.finish();
}

fn handle(c: &mut Criterion) {
    // Through offload: a live runtime, its host device and a buffer on it.
    let rt = Offload::init().expect("init");
    let dev = rt
        .devices()
        .expect("devices")
        .into_iter()
        .find(|d| d.backend() == BackendKind::Host)
        .expect("a host device");
    let buf = dev.alloc(BUFFER_SIZE, MemKind::Device).expect("alloc");

    // Raw: the host backend called directly.
    let platform = HostPlatform::open(&Config::default()).expect("open");
    let raw_dev = Backend::devices(&platform).remove(0);
    let mut raw_buf =
        Backend::alloc(&platform, &raw_dev, BUFFER_SIZE, MemKind::Device).expect("alloc");

    let data = [0xA5u8; 64];
    let mut out = [0u8; 64];
    // The measured calls return `Result`s that criterion discards: check once they succeed.
    buf.write(0, &data).expect("write");
    buf.read(0, &mut out).expect("read");
    Backend::write(&platform, &mut raw_buf, 0, &data).expect("raw write");
    Backend::read(&platform, &raw_buf, 0, &mut out).expect("raw read");
    dev.info().expect("info");
    Backend::device_info(&platform, &raw_dev).expect("raw info");

    let mut group = c.benchmark_group("handle");
    group.bench_function("write64/offload", |b| {
        b.iter(|| buf.write(black_box(0), black_box(&data)))
    });
    group.bench_function("write64/raw", |b| {
        b.iter(|| {
            Backend::write(
                &platform,
                black_box(&mut raw_buf),
                black_box(0),
                black_box(&data),
            )
        })
    });
    group.bench_function("read64/offload", |b| {
        b.iter(|| buf.read(black_box(0), black_box(&mut out)))
    });
    group.bench_function("read64/raw", |b| {
        b.iter(|| {
            Backend::read(
                &platform,
                black_box(&raw_buf),
                black_box(0),
                black_box(&mut out),
            )
        })
    });
    group.bench_function("len/offload", |b| b.iter(|| black_box(&buf).len()));
    group.bench_function("len/raw", |b| b.iter(|| black_box(&raw_buf).len()));
    group.bench_function("device_info/offload", |b| b.iter(|| black_box(&dev).info()));
    group.bench_function("device_info/raw", |b| {
        b.iter(|| Backend::device_info(&platform, black_box(&raw_dev)))
    });
    group.finish();

    assert_eq!(out, data, "read back what was written");
    Backend::free(&platform, raw_buf).expect("free raw buffer");
    Backend::deinit(&platform).expect("deinit raw platform");
    buf.free().expect("free");
    assert!(rt.shutdown().expect("shutdown").was_last());
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = cycle, handle
}
criterion_main!(benches);
