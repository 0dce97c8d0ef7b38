//! libFuzzer target: the `ipc_wire` check of the shared fuzz checks (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _accepted = offload_fuzz::ipc_wire(data);
});
