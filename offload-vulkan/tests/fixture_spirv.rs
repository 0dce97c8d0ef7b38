//! The SPIR-V that `offload_vulkan::fixtures::KERNELS` ships (tests/fixtures/kernels.spv) is
//! exactly what naga makes of tests/fixtures/kernels.wgsl, so the binary cannot drift from
//! its source. `OFFLOAD_REGENERATE_FIXTURES=1` rewrites it.

mod common;

#[test]
fn shipped_spirv_matches_its_wgsl_source() {
    let words = common::spirv_of(common::KERNELS_WGSL, (1, 3));
    // SPIR-V files are little-endian; `spirv_of` gives host order.
    let fresh: Vec<u8> = words
        .chunks_exact(4)
        .flat_map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]).to_le_bytes())
        .collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kernels.spv");
    if std::env::var_os("OFFLOAD_REGENERATE_FIXTURES").is_some() {
        std::fs::write(path, &fresh).expect("write kernels.spv");
    }
    assert_eq!(
        offload_vulkan::fixtures::KERNELS,
        &fresh[..],
        "tests/fixtures/kernels.spv is stale: run with OFFLOAD_REGENERATE_FIXTURES=1"
    );
}
