//! libFuzzer target: the `spirv` check of the shared fuzz checks (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _accepted = offload_fuzz::spirv(data);
});
