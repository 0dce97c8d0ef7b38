//! The CUDA platform against a stand-in driver: the paths a machine without CUDA never takes
//! (devices found and described, init failures, no device, driver errors, a missing symbol).
//!
//! offload-driver's `fake/fake_cuda.c` is compiled here with the system C compiler into a
//! private directory as `libcuda.so.1`; each case runs in a child process (this test binary
//! again) with that directory first on `LD_LIBRARY_PATH`, which the dynamic loader reads only
//! at process start. Without a C compiler the tests print SKIP, except under `CI=true`.

use offload_cuda::CudaPlatform;
use offload_testing::fake::FakeDriver;

/// The stand-in driver, built and run by offload-driver's harness.
const FAKE: FakeDriver = FakeDriver {
    case_var: "OFFLOAD_CUDA_FAKE_CASE",
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_cuda.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: "fake-cuda",
    real_var: "",
};

/// The child side: prints what it saw as `RESULT <text>`.
#[test]
fn child() {
    FAKE.child::<CudaPlatform>(offload_cuda::platform, offload_cuda::stats);
}

#[test]
fn devices_are_found_and_described() {
    let Some(dir) = FAKE.build("full", "libcuda.so.1", &[]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[]),
        "name=CUDA 12.4 \
         devices=[Fake GPU 0|NVIDIA|1073741824|110; Fake GPU 1|NVIDIA|2147483648|111] \
         alloc=ok opened=1 deinitialised=1"
    );
}

#[test]
fn the_runtime_lists_the_devices_and_deinitialises() {
    let Some(dir) = FAKE.build("runtime", "libcuda.so.1", &[]) else {
        return;
    };
    let result = FAKE.run(&dir, "runtime", &[]);
    assert!(
        result.starts_with(
            "platform=CUDA 12.4 devices=[\"Fake GPU 0\", \"Fake GPU 1\"] alloc=ok \
             load=cuda: Program::load: invalid binary: "
        ),
        "{result}"
    );
    assert!(
        result.ends_with("last=true opened=1 deinitialised=1"),
        "{result}"
    );
}

#[test]
fn typed_properties_are_what_the_driver_answers_and_none_where_it_does_not() {
    let Some(dir) = FAKE.build("full", "libcuda.so.1", &[]) else {
        return;
    };
    // The fake answers every attribute but the clock rate.
    assert_eq!(
        FAKE.run(&dir, "properties", &[]),
        "vendor_id=Some(4318) driver=Some(\"12.4\") block_threads=Some(1024) \
         block=Some([1024, 1024, 64]) grid=Some([2147483647, 65535, 65535]) alloc=None \
         shared=Some(49152) bits=Some(64) clock=None"
    );
}

#[test]
fn a_failing_init_is_driver_not_found_and_no_device_is_no_device() {
    let Some(dir) = FAKE.build("absent", "libcuda.so.1", &[]) else {
        return;
    };
    let not_found = |reason: &str| {
        format!(
            "error DriverNotFound {{ backend: Cuda, library: \"libcuda.so.1\", \
             reason: \"{reason}\" }}"
        )
    };
    let no_device = |reason: &str| {
        format!(
            "error NoDevice {{ backend: Cuda, library: \"libcuda.so.1\", \
             reason: \"{reason}\" }}"
        )
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_CU_INIT", "100")]),
        no_device("cuInit: CUDA_ERROR_NO_DEVICE (100)")
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_CU_INIT", "999")]),
        not_found("cuInit: CUDA_ERROR_UNKNOWN (999)")
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_CU_COUNT_RESULT", "100")]),
        no_device("cuDeviceGetCount: CUDA_ERROR_NO_DEVICE (100)")
    );
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_CU_COUNT", "0")]),
        no_device("cuDeviceGetCount: 0 devices")
    );
    // Through the runtime, the platform it was asked for fails start with that reason.
    assert_eq!(
        FAKE.run(&dir, "runtime", &[("FAKE_CU_INIT", "100")]),
        no_device("cuInit: CUDA_ERROR_NO_DEVICE (100)")
    );
}

#[test]
fn other_failures_are_driver_errors_with_the_code() {
    let Some(dir) = FAKE.build("errors", "libcuda.so.1", &[]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[("FAKE_CU_COUNT_RESULT", "999")]),
        "error Driver { backend: Cuda, call: \"Offload::init\", code: 999, \
         message: \"cuDeviceGetCount: CUDA_ERROR_UNKNOWN (999): unknown error\" }"
    );
    let result = FAKE.run(&dir, "open", &[("FAKE_CU_NAME_RESULT", "101")]);
    assert!(
        result.contains(
            "devices=[error Driver { backend: Cuda, call: \"Device::info\", code: 101, \
             message: \"cuDeviceGetName: CUDA_ERROR_INVALID_DEVICE (101): \
             invalid device ordinal\" }; "
        ),
        "{result}"
    );
}

#[test]
fn a_missing_required_symbol_is_driver_not_found() {
    let Some(dir) = FAKE.build("no-total-mem", "libcuda.so.1", &["NO_TOTAL_MEM"]) else {
        return;
    };
    assert_eq!(
        FAKE.run(&dir, "open", &[]),
        "error DriverNotFound { backend: Cuda, library: \"libcuda.so.1\", \
         reason: \"missing symbol cuDeviceTotalMem_v2\" }"
    );
}

#[test]
fn codes_are_named_without_cu_get_error_name() {
    let Some(dir) = FAKE.build("no-error-names", "libcuda.so.1", &["NO_ERROR_NAMES"]) else {
        return;
    };
    let result = FAKE.run(&dir, "open", &[("FAKE_CU_INIT", "100")]);
    assert!(
        result.contains("reason: \"cuInit: CUDA_ERROR_NO_DEVICE (100)\""),
        "{result}"
    );
    let result = FAKE.run(&dir, "open", &[("FAKE_CU_INIT", "12345")]);
    assert!(
        result.contains("reason: \"cuInit: unknown CUresult (12345)\""),
        "{result}"
    );
    // The optional symbols are absent, and the platform works without them.
    assert!(
        FAKE.run(&dir, "open", &[])
            .starts_with("name=CUDA 12.4 devices=[Fake GPU 0|")
    );
}
