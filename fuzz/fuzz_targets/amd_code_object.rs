//! libFuzzer target: the `amd_code_object` check of the shared fuzz checks (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _accepted = offload_fuzz::amd_code_object(data);
});
