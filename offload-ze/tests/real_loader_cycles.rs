//! 100 init/shutdown cycles with the real Level Zero loader (CI installs Debian's `libze1`
//! without a driver), through `offload_testing::fake::real::cycles`: no crash, no
//! descriptor or mapping left behind. One test in its own binary: no other test opens
//! descriptors meanwhile. Where the loader is not installed it prints SKIP, except under
//! `CI=true`, where it fails.

use offload_ze::ZePlatform;

#[test]
fn a_hundred_init_shutdown_cycles_with_the_real_loader() {
    let entry = offload_ze::platform;
    if let Some(growth) =
        offload_testing::fake::real::cycles::<ZePlatform>(entry, "libze_loader.so", 100)
    {
        let stats = offload_ze::stats();
        println!(
            "100 init/shutdown cycles with the real loader: {growth}; opened {} deinitialised {}",
            stats.opened, stats.deinitialised
        );
    }
}
