//! The whole CUDA backend against the protocol-checking fake libcuda
//! (offload-driver/fake/fake_cuda.c): the shared fake-backend cases of
//! `offload_testing::fake::cases` — the conformance suite (also with deferred streams),
//! runtimes on eight threads, every memory kind, the fixture PTX loaded and launched, bad
//! images never reaching `cuModuleLoadDataEx`, IPC between two processes, out of memory,
//! queued work, and a seeded protocol violation that the fake must report — plus CUDA's own
//! bad images (a PTX for a newer GPU, an empty fatbin). Each case runs in a child process
//! that finds the fake as libcuda.so.1.
//!
//! This is a protocol fake over host memory, not a GPU: it checks that offload calls the
//! driver correctly (contexts current, objects freed before their context is released, no
//! double frees, in-bounds copies and launches), not that a GPU computes correctly.

use offload_core::{MemKind, PlatformEntry, Platforms};
use offload_cuda::CudaPlatform;
use offload_testing::fake::FakeDriver;
use offload_testing::fake::cases::Subject;

const SUBJECT: Subject = Subject {
    fake: FakeDriver {
        case_var: "OFFLOAD_CUDA_BACKEND_CASE",
        source: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../offload-driver/fake/fake_cuda.c"
        ),
        build_dir: env!("CARGO_TARGET_TMPDIR"),
        prefix: "fake-cuda-backend",
        real_var: "OFFLOAD_CUDA_REAL",
    },
    library: "libcuda.so.1",
    hooks: "fake_cuda",
    live: &[
        "alloc", "host", "module", "stream", "event", "ipc", "context",
    ],
    entry: offload_cuda::platform,
    fixture: offload_cuda::fixtures::KERNELS,
    load_call: "cuModuleLoadDataEx",
    free_call: "cuMemFree_v2",
    ipc_open_call: "cuIpcOpenMemHandle_v2",
    defer_var: "FAKE_CU_DEFER",
    kinds: &[MemKind::Device, MemKind::Host, MemKind::Shared],
    fd_handles: false,
    fail_code: 1, // CUDA_ERROR_INVALID_VALUE
    bad_images,
};

/// Just the CUDA backend.
struct CudaOnly;

impl Platforms for CudaOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_cuda::platform()]
    }
}

/// CUDA's own: the fixture PTX for a target its `.version` (7.0) is too old for (sm_90
/// needs 7.8: an H200's driver refused it), the fixture for a newer GPU than the fake's
/// sm_86 and the lent H100/H200's sm_90, and a fatbin header with nothing after it.
fn bad_images(ptx: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(ptx).to_string();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap()
            .to_string()
    };
    let (version, target) = (line(".version"), line(".target"));
    vec![
        text.replace(&target, ".target sm_90").into_bytes(),
        text.replace(&target, ".target sm_120")
            .replace(&version, ".version 8.7")
            .into_bytes(),
        [0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0].to_vec(),
    ]
}

offload_testing::fake_backend_tests!(SUBJECT, CudaPlatform, CudaOnly, |_, _| None);
