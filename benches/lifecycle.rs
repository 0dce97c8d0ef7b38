//! Lifecycle and handle-validation costs of offload on the host backend, each paired with
//! the raw backend it wraps (`offload_bench::paired`: the two sides alternate sample by
//! sample in one run).
//!
//! * `cycle`: `Offload::init()` followed by `shutdown()`, where nothing else holds a
//!   runtime, so every iteration is a full 0→1→0 transition (opening and deinitialising
//!   the host platform). **Goal: ≤ 5 µs median.** Paired with the host backend's own cost
//!   of the same (`HostPlatform::open` + `devices` + `deinit`).
//! * `cycle_host_device`: init, `rt.device(Host)`, shutdown, for a program that uses only
//!   the host device: the facade's runtime with every backend this bench was built with
//!   (`--all-features`: Vulkan, CUDA, HIP, Level Zero, each opened only when first needed)
//!   against a runtime type whose only platform is the host (what a host-only build
//!   registers). **Goal: ≤ 1.2×** (before platforms opened lazily, every cycle opened and
//!   deinitialised each platform whose driver is installed: 8.4 ms with lavapipe).
//! * `write64`, `read64`, `len`, `device_info`: offload's safe handles (generation check,
//!   per-buffer lock, range validation, erased dispatch) against calling the host device
//!   directly, for 64-byte `write`/`read` on a 4096-byte buffer. **Goal: offload − raw
//!   ≤ 20 ns for `write64` and `read64`.**
//!
//! Run with `cargo bench --bench lifecycle`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use offload::plugin::hal::{Device as _, Platform as _};
use offload::{BackendKind, Config, MemKind, Offload};
use offload_bench::paired;
use offload_host::HostPlatform;

const BUFFER_SIZE: usize = 4096;
const SAMPLES: usize = 50;

fn cycle(c: &mut Criterion) {
    // Nothing else may hold a runtime here: each iteration must be a real 0→1→0.
    let down = Offload::init().expect("init").shutdown().expect("shutdown");
    assert!(
        down.was_last(),
        "another runtime is alive: the cycle would not be a 0→1→0 transition"
    );
    let config = Config::default();
    paired(
        c,
        "cycle",
        ("offload", "raw_host"),
        SAMPLES,
        || {
            let rt = Offload::init().expect("init");
            black_box(rt.shutdown().expect("shutdown"));
        },
        || {
            let platform = HostPlatform::open(black_box(&config)).expect("open");
            drop(black_box(platform.devices()));
            platform.deinit().expect("deinit");
            black_box(platform);
        },
    );
}

/// Only the host platform: what a build with only the `host` feature registers.
struct HostOnly;

impl offload::plugin::Platforms for HostOnly {
    fn platforms() -> Vec<offload::plugin::PlatformEntry> {
        vec![offload_host::platform()]
    }
}

fn cycle_host_device(c: &mut Criterion) {
    let down = Offload::init().expect("init").shutdown().expect("shutdown");
    assert!(down.was_last(), "another runtime is alive");
    println!(
        "compiled-in backends: {:?}",
        <offload::plugin::Builtin as offload::plugin::Platforms>::platforms()
            .iter()
            .map(|e| e.kind())
            .collect::<Vec<_>>()
    );
    paired(
        c,
        "cycle_host_device",
        ("all_backends", "host_only"),
        SAMPLES,
        || {
            let rt = Offload::init().expect("init");
            black_box(rt.device(BackendKind::Host).expect("host device"));
            black_box(rt.shutdown().expect("shutdown"));
        },
        || {
            let rt = offload_core::Offload::<offload::Ready, HostOnly>::init().expect("init");
            black_box(rt.device(BackendKind::Host).expect("host device"));
            black_box(rt.shutdown().expect("shutdown"));
        },
    );
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

    // Raw: the host device called directly.
    let platform = HostPlatform::open(&Config::default()).expect("open");
    let raw_dev = platform.devices().remove(0);
    let mut raw_buf = raw_dev.alloc(BUFFER_SIZE, MemKind::Device).expect("alloc");

    let data = [0xA5u8; 64];
    let mut out = [0u8; 64];
    let mut raw_out = [0u8; 64];
    // The measured calls' `Result`s are discarded: check once that they succeed.
    buf.write(0, &data).expect("write");
    buf.read(0, &mut out).expect("read");
    raw_dev.write(&mut raw_buf, 0, &data).expect("raw write");
    raw_dev.read(&raw_buf, 0, &mut raw_out).expect("raw read");
    dev.info().expect("info");
    raw_dev.info().expect("raw info");

    paired(
        c,
        "write64",
        ("offload", "raw"),
        SAMPLES,
        || {
            let _ = black_box(buf.write(black_box(0), black_box(&data)));
        },
        || {
            let _ =
                black_box(raw_dev.write(black_box(&mut raw_buf), black_box(0), black_box(&data)));
        },
    );
    paired(
        c,
        "read64",
        ("offload", "raw"),
        SAMPLES,
        || {
            let _ = black_box(buf.read(black_box(0), black_box(&mut out)));
        },
        || {
            let _ =
                black_box(raw_dev.read(black_box(&raw_buf), black_box(0), black_box(&mut raw_out)));
        },
    );
    paired(
        c,
        "len",
        ("offload", "raw"),
        SAMPLES,
        || {
            black_box(black_box(&buf).len());
        },
        || {
            black_box(black_box(&raw_buf).len());
        },
    );
    paired(
        c,
        "device_info",
        ("offload", "raw"),
        SAMPLES,
        || {
            let _ = black_box(black_box(&dev).info());
        },
        || {
            let _ = black_box(black_box(&raw_dev).info());
        },
    );

    assert_eq!(out, data, "read back what was written");
    assert_eq!(raw_out, data, "read back what was written (raw)");
    raw_dev.free(raw_buf).expect("free raw buffer");
    drop(raw_dev);
    platform.deinit().expect("deinit raw platform");
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
    targets = cycle, cycle_host_device, handle
}
criterion_main!(benches);
