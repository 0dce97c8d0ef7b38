//! The HIP backend against the protocol-checking fake runtime
//! (offload-driver/fake/fake_hip.c, over host memory): the shared fake-backend cases of
//! `offload_testing::fake::cases` — the conformance suite (also with deferred streams),
//! runtimes on eight threads, every memory kind, the fixture code object loaded and
//! launched, bad images never reaching `hipModuleLoadData`, IPC between two processes, out
//! of memory, queued work, and a seeded protocol violation that the fake must report — plus
//! HIP's own: damaged code objects, which fill each queued fill took, and a runtime without
//! managed memory. Each case runs in a child process that finds the fake as libamdhip64.so.
//!
//! The fake runs queued work at once (or, deferred, when something waits), so these tests
//! check the protocol (live handles, valid ranges and kinds, no leaks), not ordering on a
//! real device.

use offload_core::{MemKind, PlatformEntry, Platforms};
use offload_hip::HipPlatform;
use offload_testing::fake::cases::{self, Subject};
use offload_testing::fake::{FakeDriver, FakeHooks};

const SUBJECT: Subject = Subject {
    fake: FakeDriver {
        case_var: "OFFLOAD_HIP_BACKEND_CASE",
        source: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../offload-driver/fake/fake_hip.c"
        ),
        build_dir: env!("CARGO_TARGET_TMPDIR"),
        prefix: "fake-hip-backend",
        real_var: "OFFLOAD_HIP_REAL",
    },
    library: "libamdhip64.so",
    hooks: "fake_hip",
    live: &[
        "alloc", "host", "managed", "stream", "event", "module", "global", "ipc",
    ],
    entry: offload_hip::platform,
    fixture: offload_hip::fixtures::KERNELS,
    load_call: "hipModuleLoadData",
    free_call: "hipFree",
    ipc_open_call: "hipIpcOpenMemHandle",
    defer_var: "FAKE_HIP_DEFER",
    kinds: &[MemKind::Device, MemKind::Host, MemKind::Shared],
    fd_handles: false,
    fail_code: 1, // hipErrorInvalidValue
    bad_images,
};

/// Just the HIP backend.
struct HipOnly;

impl Platforms for HipOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_hip::platform()]
    }
}

/// HIP's own: deeper truncations, a relocatable object, an unknown target, an empty
/// offload bundle.
fn bad_images(good: &[u8]) -> Vec<Vec<u8>> {
    let mut relocatable = good.to_vec();
    relocatable[16] = 1;
    let mut unknown = good.to_vec();
    unknown[48] = 0xff;
    vec![
        good[..64].to_vec(),
        good[..good.len() / 2].to_vec(),
        relocatable,
        unknown,
        b"__CLANG_OFFLOAD_BUNDLE__".to_vec(),
    ]
}

/// HIP's own cases: `fills` (below) and `archs`.
fn own(case: &str, hooks: &FakeHooks) -> Option<String> {
    match case {
        "fills" => Some(fills(hooks)),
        "archs" => Some(archs(hooks)),
        _ => None,
    }
}

/// Code objects against the device's `gcnArchName` (the fake's FAKE_HIP_ARCH): the fixture
/// alone, and a bundle of gfx906 and gfx90a code objects, loaded and launched through the
/// runtime; `<what each load gave>; loads=<hipModuleLoadData calls> <report>`.
fn archs(hooks: &FakeHooks) -> String {
    use offload_core::{Arg, Dims, Error, Program};
    let gfx906 = offload_hip::fixtures::for_mach(0x2f);
    let fat = offload_hip::fixtures::bundle(&[
        ("hipv4-amdgcn-amd-amdhsa--gfx906", &gfx906),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
            offload_hip::fixtures::KERNELS,
        ),
    ]);
    let rt = SUBJECT.start();
    let dev = rt.devices().unwrap().remove(0);
    let mut seen = Vec::new();
    for (what, image) in [
        ("fixture", offload_hip::fixtures::KERNELS),
        ("bundle", &fat),
    ] {
        seen.push(match Program::new(image).load(&dev) {
            Ok(module) => {
                let add_one = module.kernel("add_one").unwrap();
                let buf = dev.upload(&[1u32; 64]).unwrap();
                let q = dev.queue().unwrap();
                // SAFETY: add_one adds 1 to the first 64 u32s of `buf`, which has 64.
                unsafe {
                    q.launch(
                        &add_one,
                        Dims::for_num_elems(64),
                        &[Arg::buffer(buf.as_bytes()), Arg::scalar(&64u32)],
                    )
                }
                .unwrap();
                let sum: u32 = buf.to_vec().unwrap().iter().sum();
                drop((q, add_one, buf));
                module.unload().unwrap();
                format!("{what} ran (sum {sum})")
            }
            Err(e @ Error::InvalidBinary { .. }) => format!("{what}: {e}"),
            Err(e) => format!("{what}: unexpected {e:?}"),
        });
    }
    drop(dev);
    rt.shutdown().unwrap();
    format!(
        "{}; loads={} {}",
        seen.join("; "),
        hooks.calls("hipModuleLoadData"),
        SUBJECT.report(hooks)
    )
}

/// The queue case, with the fake's counts of the calls that show which fill each took.
fn fills(hooks: &FakeHooks) -> String {
    let line = cases::queues(&SUBJECT, hooks);
    format!(
        "memset={} d16={} d32={} async-copies={} host-fns={}; {line}",
        hooks.calls("hipMemsetAsync"),
        hooks.calls("hipMemsetD16Async"),
        hooks.calls("hipMemsetD32Async"),
        hooks.calls("hipMemcpyAsync"),
        hooks.calls("hipLaunchHostFunc")
    )
}

offload_testing::fake_backend_tests!(SUBJECT, HipPlatform, HipOnly, own);

#[test]
fn code_objects_are_checked_against_the_device_architecture() {
    let Some(dir) = SUBJECT.built() else { return };
    let clean = SUBJECT.clean();
    // The fake's devices are gfx90a: the fixture runs, and the bundle gives its gfx90a entry.
    assert_eq!(
        SUBJECT.fake.run(&dir, "archs", &[]),
        format!("fixture ran (sum 128); bundle ran (sum 128); loads=2 {clean}")
    );
    // A gfx1100 device: neither reaches hipModuleLoadData, and both say why.
    assert_eq!(
        SUBJECT
            .fake
            .run(&dir, "archs", &[("FAKE_HIP_ARCH", "gfx1100")]),
        format!(
            "fixture: hip: Program::load: invalid binary: the code object is for gfx90a, the \
             device is gfx1100: build it for gfx1100 (--offload-arch / -mcpu); bundle: hip: \
             Program::load: invalid binary: the offload bundle holds code objects for gfx906, \
             gfx90a:xnack-, none for the device's gfx1100; loads=0 {clean}"
        )
    );
    // A gfx906 device gets the bundle's gfx906 entry (the fake runs it like any other).
    assert_eq!(
        SUBJECT
            .fake
            .run(&dir, "archs", &[("FAKE_HIP_ARCH", "gfx906")]),
        format!(
            "fixture: hip: Program::load: invalid binary: the code object is for gfx90a, the \
             device is gfx906: build it for gfx906 (--offload-arch / -mcpu); bundle ran (sum \
             128); loads=1 {clean}"
        )
    );
}

#[test]
fn fills_take_the_widest_memset_the_pattern_allows() {
    let Some(dir) = SUBJECT.built() else { return };
    // Per kind: a 1-byte fill (hipMemsetAsync), a 2- and a 4-byte one (D16, D32); the
    // unaligned and 3-byte patterns are expanded writes (hipMemcpyAsync, with the write
    // and the copy: 4 per kind, and one write before). Host functions never reach
    // hipLaunchHostFunc: no stream ever waits for one (they run behind the queue's gate).
    cases::expect_clean(
        &SUBJECT,
        &dir,
        "fills",
        false,
        "memset=3 d16=3 d32=3 async-copies=13 host-fns=0; idle_before_sync=true; ",
    );
}

#[test]
fn a_runtime_without_managed_memory_says_so() {
    let Some(dir) = SUBJECT
        .fake
        .build("no-managed", SUBJECT.library, &["NO_MANAGED"])
    else {
        return;
    };
    let result = SUBJECT.fake.run(&dir, "oom", &[]);
    assert!(
        result.contains("Shared:Err(hip: unsupported: the runtime has no hipMallocManaged"),
        "{result}"
    );
    assert!(result.ends_with(&SUBJECT.clean()), "{result}");
}
