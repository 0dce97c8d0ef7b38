//! The Vulkan backend through the offload runtime (handles, lifecycle), and repeated
//! init → use → shutdown cycles that must leave nothing behind: no buffer, no `VkDevice`, no
//! `VkInstance`, no thread. These tests read process-wide counters, so they take `serial()`.

mod common;

use common::{pattern, serial, skip_or_fail};
use offload_core::hal::{Device as _, Platform as _};
use offload_core::{BackendKind, Config, MemKind, NoPlatforms, Offload, Ready, Uninit};
use offload_vulkan::{VulkanPlatform, stats};

type Runtime = Offload<Ready, NoPlatforms>;

/// Starts a runtime with only the Vulkan platform, or skips (fails in CI).
fn start(test: &str) -> Option<Runtime> {
    match Offload::<Uninit, NoPlatforms>::builder()
        .platform(offload_vulkan::platform())
        .start()
    {
        Ok(rt) => Some(rt),
        Err(e) => skip_or_fail(test, e).map(|never| match never {}),
    }
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn assert_all_released(what: &str) {
    let s = stats();
    assert_eq!(s.live_allocations, 0, "{what}: {s:?}");
    assert_eq!(s.live_devices, 0, "{what}: {s:?}");
    assert_eq!(s.live_instances, 0, "{what}: {s:?}");
}

#[test]
fn runtime_lists_vulkan_devices_and_moves_bytes() {
    let _serial = serial();
    let Some(rt) = start("runtime_lists_vulkan_devices_and_moves_bytes") else {
        return;
    };
    let platforms = rt.platforms().unwrap();
    assert_eq!(platforms.len(), 1);
    assert_eq!(platforms[0].backend, BackendKind::Vulkan);
    assert!(platforms[0].devices >= 1);
    let devices = rt.devices().unwrap();
    for dev in &devices {
        assert_eq!(dev.backend(), BackendKind::Vulkan);
        let info = dev.info().unwrap();
        assert_eq!(info.backend, BackendKind::Vulkan);
        println!(
            "{}: {} ({}), {} bytes",
            dev, info.name, info.vendor, info.memory
        );
    }
    let dev = &devices[0];
    for kind in [MemKind::Device, MemKind::Host, MemKind::Shared] {
        for size in [1usize, 3, 4097, 1 << 20] {
            let a = dev.alloc(size, kind).unwrap();
            let b = dev.alloc(size, MemKind::Device).unwrap();
            let data = pattern(size, size as u64);
            a.write(0, &data).unwrap();
            b.copy_from(0, &a, 0, size).unwrap();
            b.fill(size / 2, size - size / 2, 0xEE).unwrap();
            b.copy_from(0, &b, size / 2, size - size / 2).unwrap(); // copy_within
            let mut expect = data.clone();
            expect[size / 2..].fill(0xEE);
            expect[..size - size / 2].fill(0xEE);
            let mut out = vec![0u8; size];
            b.read(0, &mut out).unwrap();
            assert!(out == expect, "{kind:?} {size}");
            a.read(0, &mut out).unwrap();
            assert!(out == data, "{kind:?} {size}");
        }
    }
    assert!(matches!(
        dev.alloc(1 << 62, MemKind::Device),
        Err(offload_core::Error::OutOfMemory { .. })
    ));
    let kept = dev.alloc(64, MemKind::Device).unwrap();
    let down = rt.shutdown().unwrap();
    assert!(down.was_last());
    assert!(matches!(
        kept.write(0, &[1]),
        Err(offload_core::Error::ShutDown { .. })
    ));
    drop(kept);
    assert_all_released("after runtime shutdown");
}

#[test]
fn hundred_runtime_cycles_start_fresh_each_time() {
    let _serial = serial();
    // Warm-up: the first cycle loads the driver's own libraries and threads.
    let Some(rt) = start("hundred_runtime_cycles_start_fresh_each_time") else {
        return;
    };
    rt.shutdown().unwrap();
    let before = stats();
    let threads_before = threads();
    let started = std::time::Instant::now();
    let mut generations = Vec::new();
    for cycle in 0..100u64 {
        let rt = start("hundred_runtime_cycles_start_fresh_each_time").unwrap();
        generations.push(rt.generation());
        let dev = rt.devices().unwrap().remove(0);
        let buf = dev.alloc(4097, MemKind::Device).unwrap();
        let data = pattern(4097, cycle);
        buf.write(0, &data).unwrap();
        let mut out = vec![0u8; 4097];
        buf.read(0, &mut out).unwrap();
        assert!(out == data, "cycle {cycle}");
        assert_eq!(stats().live_allocations, 1, "cycle {cycle}: fresh state");
        assert!(rt.shutdown().unwrap().was_last());
        assert!(matches!(
            buf.read(0, &mut out),
            Err(offload_core::Error::ShutDown { .. })
        ));
        drop(buf);
        assert_all_released("after a cycle");
    }
    let elapsed = started.elapsed();
    let after = stats();
    println!(
        "100 runtime cycles in {elapsed:?} ({:?} each); threads {threads_before} -> {}",
        elapsed / 100,
        threads()
    );
    generations.dedup();
    assert_eq!(generations.len(), 100, "a new generation every cycle");
    assert_eq!(after.opened - before.opened, 100);
    assert_eq!(after.deinitialised - before.deinitialised, 100);
    assert!(threads() <= threads_before, "cycles leave no thread behind");
}

#[test]
fn hundred_backend_cycles_release_everything() {
    let _serial = serial();
    let config = Config::default();
    let vk = match VulkanPlatform::open(&config) {
        Ok(vk) => vk,
        Err(e) => {
            return skip_or_fail("hundred_backend_cycles_release_everything", e)
                .map_or((), |never| match never {});
        }
    };
    vk.deinit().unwrap();
    drop(vk);
    let threads_before = threads();
    let started = std::time::Instant::now();
    for cycle in 0..100u64 {
        let vk = VulkanPlatform::open(&config).unwrap();
        let dev = vk.devices().remove(0);
        assert_eq!(vk.live_allocations(), 0);
        let mut buf = dev.alloc(3, MemKind::Host).unwrap();
        dev.write(&mut buf, 0, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 3];
        dev.read(&buf, 0, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3], "cycle {cycle}");
        dev.free(buf).unwrap();
        drop(dev);
        vk.deinit().unwrap();
        // deinit destroyed the device and the instance, before the platform is dropped.
        assert_all_released("after deinit");
        drop(vk);
    }
    println!(
        "100 backend cycles in {:?}; threads {threads_before} -> {}",
        started.elapsed(),
        threads()
    );
    assert!(threads() <= threads_before, "cycles leave no thread behind");
}

#[test]
fn dropping_an_open_platform_releases_everything() {
    let _serial = serial();
    let vk = match VulkanPlatform::open(&Config::default()) {
        Ok(vk) => vk,
        Err(e) => {
            return skip_or_fail("dropping_an_open_platform_releases_everything", e)
                .map_or((), |never| match never {});
        }
    };
    let dev = vk.devices().remove(0);
    let buf = dev.alloc(10, MemKind::Device).unwrap();
    dev.free(buf).unwrap();
    drop(dev);
    assert!(stats().live_instances >= 1);
    drop(vk); // no deinit: Drop still destroys the device and the instance
    assert_all_released("after drop without deinit");
}
