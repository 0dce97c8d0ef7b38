//! The whole CUDA backend against the protocol-checking fake libcuda
//! (offload-driver/fake/fake_cuda.c): the conformance suite, concurrent lifecycles, bad
//! images, IPC between two processes, and a seeded protocol violation that the fake must
//! report. Each case runs in a child process that finds the fake as libcuda.so.1; the child
//! ends by reading the fake's violation log, and the parent asserts it is empty.
//!
//! This is a protocol fake over host memory, not a GPU: it checks that offload calls the
//! driver correctly (contexts current, objects freed before their context is released, no
//! double frees, in-bounds copies and launches), not that a GPU computes correctly.

use offload_core::conformance::{self, Fixtures, SuiteConfig};
use offload_core::hal::{Device as _, Platform as _};
use offload_core::{
    Arg, Config, Dims, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Platforms, Program,
    Uninit,
};
use offload_cuda::CudaPlatform;
use offload_driver::testing::{FakeDriver, FakeHooks};

const FAKE: FakeDriver = FakeDriver {
    case_var: "OFFLOAD_CUDA_BACKEND_CASE",
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_cuda.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: "fake-cuda-backend",
};

/// Just the CUDA backend.
struct CudaOnly;

impl Platforms for CudaOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_cuda::platform()]
    }
}

fn hooks() -> FakeHooks {
    // SAFETY: in a child of this harness, libcuda.so.1 is the fake this file built.
    unsafe { FakeHooks::open("libcuda.so.1", "fake_cuda") }
}

/// `violations=[...]`, and the objects still alive, as the fake sees them.
fn report(hooks: &FakeHooks) -> String {
    let live: Vec<String> = [
        "alloc", "host", "module", "stream", "event", "ipc", "context",
    ]
    .iter()
    .map(|k| format!("{k}:{}", hooks.live(k)))
    .collect();
    format!(
        "violations={:?} live={}",
        hooks.violations(),
        live.join(",")
    )
}

const CLEAN: &str = "violations=[] live=alloc:0,host:0,module:0,stream:0,event:0,ipc:0,context:0";

/// The child side.
#[test]
fn child() {
    let Ok(case) = std::env::var(FAKE.case_var) else {
        return; // not a child
    };
    let result = match case.as_str() {
        "conformance" => conformance_case(),
        "lifecycle" => lifecycle_case(),
        "bad-images" => bad_images_case(),
        "leaky" => leaky_case(),
        "oom" => oom_case(),
        "ipc-export" => ipc_export_case(),
        "ipc-import" => ipc_import_case(),
        other => format!("unknown case {other}"),
    };
    println!("RESULT {result}");
}

fn conformance_case() -> String {
    let hooks = hooks();
    conformance::run::<CudaOnly>(
        &Fixtures {
            image: offload_cuda::fixtures::KERNELS.to_vec(),
        },
        SuiteConfig {
            cases: 256,
            ..SuiteConfig::default()
        },
    );
    report(&hooks)
}

fn start() -> Offload<offload_core::Ready, NoPlatforms> {
    Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_cuda::platform())
        .start()
        .unwrap()
}

/// Eight threads, each 25 times: init, allocate, launch, read back, shut down.
fn lifecycle_case() -> String {
    let hooks = hooks();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            s.spawn(move || {
                for round in 0..25u32 {
                    let rt = start();
                    let dev = rt.devices().unwrap().remove(0);
                    let module = Program::new(offload_cuda::fixtures::KERNELS)
                        .load(&dev)
                        .unwrap();
                    let add_one = module.kernel("add_one").unwrap();
                    let buf = dev.alloc(256 * 4, MemKind::Device).unwrap();
                    let queue = dev.queue().unwrap();
                    queue
                        .fill(&buf, 0, 1024, &(t + round).to_ne_bytes())
                        .unwrap();
                    unsafe {
                        queue.launch(
                            &add_one,
                            Dims::grid([4, 1, 1]).block([64, 1, 1]),
                            &[Arg::buffer(&buf), Arg::scalar(&256u32)],
                        )
                    }
                    .unwrap();
                    let mut out = [0u8; 4];
                    queue.read(&buf, 1020, &mut out).unwrap();
                    assert_eq!(u32::from_ne_bytes(out), t + round + 1);
                    if round % 2 == 0 {
                        drop((add_one, module, queue, buf));
                    } // else: shut down with them alive (L4)
                    rt.shutdown().unwrap();
                }
            });
        }
    });
    report(&hooks)
}

/// Random, truncated, foreign and wrong-architecture images: every one is InvalidBinary,
/// and none reaches `cuModuleLoadDataEx`.
fn bad_images_case() -> String {
    let hooks = hooks();
    let cuda = CudaPlatform::open(&Config::default()).unwrap();
    let dev = cuda.devices().remove(0);
    let ptx = offload_cuda::fixtures::KERNELS;
    let mut images: Vec<Vec<u8>> = Vec::new();
    images.push(Vec::new());
    images.push(b"not an image at all".to_vec());
    // Truncations of the fixture that cut its header.
    for cut in [1, 8, 40] {
        images.push(ptx[..cut].to_vec());
    }
    // A PTX for a newer GPU than the fake's sm_86.
    let text = String::from_utf8_lossy(ptx).to_string();
    let target = text
        .lines()
        .find(|l| l.trim_start().starts_with(".target"))
        .unwrap()
        .to_string();
    images.push(text.replace(&target, ".target sm_90").into_bytes());
    // An ELF for the wrong machine (this test binary's own header).
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    images.push(me[..4096.min(me.len())].to_vec());
    // A fatbin header with nothing after it.
    images.push([0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0].to_vec());
    // Random bytes.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for len in [16, 100, 1000, 4096] {
        images.push(
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect(),
        );
    }
    let mut refused = 0;
    for image in &images {
        match dev.load(image) {
            Err(Error::InvalidBinary { .. }) => refused += 1,
            Err(e) => return format!("unexpected error {e:?}"),
            Ok(_) => return format!("an image of {} bytes loaded", image.len()),
        }
        assert!(matches!(
            dev.validate(image),
            Err(Error::InvalidBinary { .. })
        ));
    }
    let loads = hooks.calls("cuModuleLoadDataEx");
    drop(dev);
    cuda.deinit().unwrap();
    format!(
        "refused={refused}/{} loads={loads} {}",
        images.len(),
        report(&hooks)
    )
}

/// A backend that skips one `cuMemFree` (the fake is told to fail it; the buffer's drop
/// cannot report that): the fake must see the allocation alive at context release.
fn leaky_case() -> String {
    let hooks = hooks();
    hooks.fail("cuMemFree_v2", 1, 1);
    let cuda = CudaPlatform::open(&Config::default()).unwrap();
    let dev = cuda.devices().remove(0);
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    drop(buf); // its cuMemFree_v2 "fails": the memory stays allocated
    drop(dev);
    cuda.deinit().unwrap();
    let violations = hooks.violations();
    hooks.clear();
    format!("{} violation(s): {violations:?}", violations.len())
}

/// More than the device has: `OutOfMemory` naming the size; nothing left behind.
fn oom_case() -> String {
    let hooks = hooks();
    let cuda = CudaPlatform::open(&Config::default()).unwrap();
    let dev = cuda.devices().remove(0);
    let result = match dev.alloc(3 << 30, MemKind::Device) {
        Err(Error::OutOfMemory { requested, .. }) => format!("OutOfMemory of {requested} bytes"),
        other => format!("{other:?}"),
    };
    drop(dev);
    cuda.deinit().unwrap();
    format!("{result}; {}", report(&hooks))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Exports a buffer, has a second process import it, read it and write into it, and
/// checks what it wrote.
fn ipc_export_case() -> String {
    let hooks = hooks();
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc_exportable(4096, MemKind::Device).unwrap();
    buf.write(0, &[7u8; 4096]).unwrap();
    let handle = buf.export().unwrap();
    let (bytes, fd) = handle.into_parts();
    assert!(fd.is_none(), "CUDA handles carry no descriptor");
    let dir = std::env::var("LD_LIBRARY_PATH").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(FAKE.case_var, "ipc-import")
        .env("LD_LIBRARY_PATH", dir)
        .env("OFFLOAD_CUDA_IPC_HANDLE", hex(&bytes))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let theirs = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| format!("no RESULT: {stdout}"));
    let mut back = [0u8; 4];
    buf.read(100, &mut back).unwrap();
    drop(buf);
    rt.shutdown().unwrap();
    format!(
        "importer: {theirs}; exporter sees {back:?}; {}",
        report(&hooks)
    )
}

fn ipc_import_case() -> String {
    let hooks = hooks();
    let bytes = unhex(&std::env::var("OFFLOAD_CUDA_IPC_HANDLE").unwrap());
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let handle = offload_core::ipc::IpcHandle::from_parts(&bytes, None).unwrap();
    let view = dev.import(handle).unwrap();
    let mut out = [0u8; 16];
    view.read(0, &mut out).unwrap();
    view.write(100, &[9, 9, 9, 9]).unwrap();
    // The same handle again shares the mapping (the driver maps an allocation once).
    let again = dev
        .import(offload_core::ipc::IpcHandle::from_parts(&bytes, None).unwrap())
        .unwrap();
    let mut second = [0u8; 4];
    again.read(100, &mut second).unwrap();
    drop((view, again));
    rt.shutdown().unwrap();
    format!("read {:?} then {second:?}; {}", &out[..4], report(&hooks))
}

fn built() -> Option<std::path::PathBuf> {
    FAKE.build("full", "libcuda.so.1", &[])
}

#[test]
fn conformance_passes_on_the_fake_with_no_protocol_violation() {
    let Some(dir) = built() else { return };
    assert_eq!(FAKE.run(&dir, "conformance", &[]), CLEAN);
}

#[test]
fn conformance_passes_with_deferred_streams() {
    // The fake runs queued work only when something waits for it: ordering bugs show.
    let Some(dir) = built() else { return };
    assert_eq!(
        FAKE.run(&dir, "conformance", &[("FAKE_CU_DEFER", "1")]),
        CLEAN
    );
}

#[test]
fn concurrent_lifecycles_leave_nothing_behind() {
    let Some(dir) = built() else { return };
    assert_eq!(
        FAKE.run(&dir, "lifecycle", &[("FAKE_CU_DEFER", "1")]),
        CLEAN
    );
}

#[test]
fn bad_images_never_reach_the_driver() {
    let Some(dir) = built() else { return };
    let result = FAKE.run(&dir, "bad-images", &[]);
    assert!(result.starts_with("refused=12/12 loads=0 "), "{result}");
    assert!(result.ends_with(CLEAN), "{result}");
}

#[test]
fn a_skipped_free_is_reported_by_the_fake() {
    let Some(dir) = built() else { return };
    let result = FAKE.run(&dir, "leaky", &[]);
    println!("the fake reported, as it should: {result}");
    assert!(result.starts_with("1 violation(s)"), "{result}");
    assert!(result.contains("leak at context release"), "{result}");
}

#[test]
fn too_large_an_allocation_is_out_of_memory() {
    let Some(dir) = built() else { return };
    assert_eq!(
        FAKE.run(&dir, "oom", &[]),
        format!("OutOfMemory of 3221225472 bytes; {CLEAN}")
    );
}

#[test]
fn ipc_between_two_processes() {
    let Some(dir) = built() else { return };
    let result = FAKE.run(&dir, "ipc-export", &[]);
    assert_eq!(
        result,
        format!(
            "importer: read [7, 7, 7, 7] then [9, 9, 9, 9]; {CLEAN}; exporter sees [9, 9, 9, 9]; \
             {CLEAN}"
        )
    );
}
