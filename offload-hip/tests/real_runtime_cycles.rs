//! 100 init/shutdown cycles with the real HIP runtime (CI installs Debian's ROCm 5
//! `libamdhip64-5` on a machine without an AMD GPU: `hipInit` runs and finds no device),
//! through `offload_testing::fake::real::cycles`: no crash, no descriptor or mapping
//! left behind — ROCR's re-initialisation is the seed. One test in its own binary: no other
//! test opens descriptors meanwhile. Where the runtime is not installed it prints SKIP,
//! except under `CI=true`, where it fails.

use offload_hip::HipPlatform;

#[test]
fn a_hundred_init_shutdown_cycles_with_the_real_runtime() {
    let entry = offload_hip::platform;
    if let Some(growth) =
        offload_testing::fake::real::cycles::<HipPlatform>(entry, "libamdhip64.so", 100)
    {
        let stats = offload_hip::stats();
        println!(
            "100 init/shutdown cycles with the real runtime: {growth}; opened {} deinitialised {}",
            stats.opened, stats.deinitialised
        );
    }
}
