//! Init/shutdown cycles against a vendor's real driver library as installed on the machine
//! (the ROCR re-initialisation seed: a runtime that cannot be initialised twice, or leaks at
//! each try): each cycle opens the platform directly and starts a runtime asking for it,
//! and must neither crash nor leave descriptors or mappings behind. The process's
//! `/proc/self/fd` count and `/proc/self/maps` line count after the cycles must not exceed
//! those after the first (the driver stays mapped: it is opened with `RTLD_NODELETE`). On
//! a machine with a device the runtime also allocates and frees; without one the platform
//! is absent (`NoDevice` or `DriverNotFound` naming the driver's own calls), which is what CI
//! checks.

use offload_core::hal::Platform;
use offload_core::{Config, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Uninit};

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// One cycle; `false` when the driver library itself is missing.
fn cycle<B: Platform>(entry: fn() -> PlatformEntry) -> bool {
    let direct = match B::open(&Config::default()) {
        Ok(platform) => {
            platform.deinit().unwrap();
            true
        }
        Err(Error::DriverNotFound { reason, .. }) => !reason.contains("cannot open shared object"),
        Err(Error::NoDevice { .. }) => true,
        Err(e) => panic!("{e:?}"),
    };
    let started = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(entry())
        .start();
    match started {
        Ok(rt) => {
            let dev = rt.devices().unwrap().remove(0);
            dev.alloc(64, MemKind::Device).unwrap().free().unwrap();
            drop(dev);
            rt.shutdown().unwrap();
        }
        Err(Error::DriverNotFound { .. } | Error::NoDevice { .. }) => {}
        Err(e) => panic!("{e:?}"),
    }
    direct
}

/// Runs `n` cycles of platform `B` (whose runtime entry is `entry`) against the real
/// driver, whose file name contains `library`; returns `fds a -> b, maps c -> d lines`, or
/// `None` (after printing SKIP; a failure under `CI=true`) where the driver is not
/// installed. Panics if descriptors or mappings grew. Run it alone in its test binary: no
/// other test may open descriptors meanwhile.
///
/// ```no_run
/// # type ZePlatform = offload_core::reference::Reference;
/// # fn platform() -> offload_core::PlatformEntry { unimplemented!() }
/// if let Some(growth) = offload_testing::fake::real::cycles::<ZePlatform>(platform, "libze_loader.so", 100) {
///     println!("100 cycles: {growth}");
/// }
/// ```
pub fn cycles<B: Platform>(
    entry: fn() -> PlatformEntry,
    library: &str,
    n: usize,
) -> Option<String> {
    if !cycle::<B>(entry) {
        let why = format!("the real driver ({library}) is not installed");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        println!("SKIP: {why}");
        return None;
    }
    let loaded = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .contains(library);
    assert!(loaded, "the first cycle did not load the real {library}");
    let (fds_before, maps_before) = (fds(), maps());
    for _ in 0..n {
        assert!(cycle::<B>(entry));
    }
    let (fds_after, maps_after) = (fds(), maps());
    assert!(
        fds_after <= fds_before,
        "descriptors grew: {fds_before} -> {fds_after}"
    );
    assert!(
        maps_after <= maps_before,
        "mappings grew: {maps_before} -> {maps_after}"
    );
    Some(format!(
        "fds {fds_before} -> {fds_after}, maps {maps_before} -> {maps_after} lines"
    ))
}
