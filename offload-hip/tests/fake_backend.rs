//! The HIP backend's memory and queues against the protocol-checking fake runtime
//! (offload-driver/fake/fake_hip.c, over host memory): every memory kind allocated, written,
//! read, filled and copied, through the hal and through the runtime, many rounds on several
//! threads; queued writes, fills (hipMemsetAsync/D16/D32 and the expanded fallback),
//! copies, host functions and timed events; code objects loaded, launched, their globals
//! read and written, bad ones refused before the runtime; IPC between two processes; the
//! conformance suite (also with deferred streams); out of memory; and a seeded protocol
//! violation that the fake must report. Each
//! case runs in a child process that finds the fake as libamdhip64.so; the child ends by
//! reading the fake's violation log, and the parent asserts it is empty.
//!
//! The conformance suite (256 cases) runs with the fixture code object
//! (`offload-hip/fixtures/kernels.hsaco`), whose kernels the fake runs by name. The fake
//! runs queued work at once, so these tests check the protocol (live handles, valid ranges
//! and kinds, no leaks), not ordering on a real device.

use offload_core::conformance::{self, Fixtures, SuiteConfig};
use offload_core::hal::{Device as _, Ipc as _, Platform as _};
use offload_core::{
    Arg, Config, Dims, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Platforms, Program,
    Uninit,
};
use offload_driver::testing::{FakeDriver, FakeHooks};
use offload_hip::HipPlatform;

const FAKE: FakeDriver = FakeDriver {
    case_var: "OFFLOAD_HIP_BACKEND_CASE",
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_hip.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: "fake-hip-backend",
};

fn hooks() -> FakeHooks {
    // SAFETY: in a child of this harness, libamdhip64.so is the fake this file built.
    unsafe { FakeHooks::open("libamdhip64.so", "fake_hip") }
}

/// `violations=[...]`, and the allocations still alive, as the fake sees them.
fn report(hooks: &FakeHooks) -> String {
    let live: Vec<String> = [
        "alloc", "host", "managed", "stream", "event", "module", "global", "ipc",
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

const CLEAN: &str =
    "violations=[] live=alloc:0,host:0,managed:0,stream:0,event:0,module:0,global:0,ipc:0";

/// Just the HIP backend.
struct HipOnly;

impl Platforms for HipOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_hip::platform()]
    }
}

/// The child side.
#[test]
fn child() {
    let Ok(case) = std::env::var(FAKE.case_var) else {
        return; // not a child
    };
    let result = match case.as_str() {
        "memory" => memory_case(),
        "runtime" => runtime_case(),
        "leaky" => leaky_case(),
        "oom" => oom_case(),
        "conformance" => conformance_case(),
        "programs" => programs_case(),
        "bad-images" => bad_images_case(),
        "ipc-export" => ipc_export_case(),
        "ipc-import" => ipc_import_case(),
        "queues" => queues_case(),
        other => format!("unknown case {other}"),
    };
    println!("RESULT {result}");
}

const KINDS: [MemKind; 3] = [MemKind::Device, MemKind::Host, MemKind::Shared];

/// Every kind, through the hal: write, read, fill, copy (between kinds and within a
/// buffer, overlapping too), mapped access where the memory is host-visible.
fn memory_case() -> String {
    let hooks = hooks();
    let hip = HipPlatform::open(&Config::default()).unwrap();
    for dev in hip.devices() {
        for kind in KINDS {
            let mut a = dev.alloc(4096, kind).unwrap();
            assert_eq!((a.len(), a.kind()), (4096, kind));
            let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
            dev.write(&mut a, 0, &data).unwrap();
            let mut back = vec![0u8; 4096];
            dev.read(&a, 0, &mut back).unwrap();
            assert_eq!(back, data);
            dev.fill(&mut a, 100, 50, 0xAB).unwrap();
            let mut part = [0u8; 52];
            dev.read(&a, 99, &mut part).unwrap();
            assert_eq!(part[0], data[99]);
            assert!(part[1..51].iter().all(|&b| b == 0xAB));
            assert_eq!(part[51], data[150]);
            for other in KINDS {
                let mut b = dev.alloc(1000, other).unwrap();
                dev.copy(&a, 1000, &mut b, 0, 1000).unwrap();
                let mut out = vec![0u8; 1000];
                dev.read(&b, 0, &mut out).unwrap();
                assert_eq!(out, data[1000..2000]);
                dev.free(b).unwrap();
            }
            // Disjoint and overlapping copies inside one buffer.
            dev.copy_within(&mut a, 0, 2048, 1024).unwrap();
            dev.copy_within(&mut a, 2048, 2049, 1024).unwrap();
            let mut out = vec![0u8; 1];
            dev.read(&a, 2049 + 1023, &mut out).unwrap();
            assert_eq!(out[0], data[1023]);
            let mapped = dev.with_mapped(&mut a, &mut |bytes| bytes[0] = 42);
            match kind {
                MemKind::Device => {
                    assert!(
                        matches!(mapped, Err(Error::Unsupported { .. })),
                        "{mapped:?}"
                    )
                }
                _ => {
                    mapped.unwrap();
                    dev.read(&a, 0, &mut out).unwrap();
                    assert_eq!(out[0], 42);
                }
            }
            // Out of range: refused before the runtime sees it.
            assert!(matches!(
                dev.read(&a, 4000, &mut [0u8; 100]),
                Err(Error::InvalidArgument { .. })
            ));
            assert!(matches!(
                dev.alloc(0, kind),
                Err(Error::InvalidArgument { .. })
            ));
            dev.free(a).unwrap();
        }
    }
    // Buffers of two devices do not mix; their IPC UUIDs are hipDeviceGetUuid's.
    let devices = hip.devices();
    assert_eq!(&devices[0].uuid(), b"fake-hip-uuid-00");
    assert_eq!(&devices[1].uuid(), b"fake-hip-uuid-01");
    let a = devices[0].alloc(64, MemKind::Device).unwrap();
    let mut b = devices[1].alloc(64, MemKind::Device).unwrap();
    assert!(matches!(
        devices[0].copy(&a, 0, &mut b, 0, 64),
        Err(Error::InvalidArgument { .. })
    ));
    drop((a, b, devices));
    hip.deinit().unwrap();
    report(&hooks)
}

/// Through the runtime, on eight threads, each 25 times: start, upload, fill, copy, load
/// and launch, read back, shut down (every other round with buffers and the module still
/// alive, dropped after).
fn runtime_case() -> String {
    let hooks = hooks();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            s.spawn(move || {
                for round in 0..25u32 {
                    let rt = Offload::<Uninit, NoPlatforms>::builder()
                        .backends([])
                        .platform(offload_hip::platform())
                        .start()
                        .unwrap();
                    let dev = rt.devices().unwrap().remove(t as usize % 2);
                    let v = t * 100 + round;
                    let up = dev.upload(&vec![v; 256]).unwrap();
                    let other = dev.alloc(1024, KINDS[round as usize % 3]).unwrap();
                    other.fill(0, 1024, 1).unwrap();
                    other.copy_from(512, up.as_bytes(), 0, 512).unwrap();
                    let mut out = [0u8; 8];
                    other.read(508, &mut out).unwrap();
                    assert_eq!(out[..4], [1, 1, 1, 1]);
                    assert_eq!(u32::from_ne_bytes(out[4..].try_into().unwrap()), v);
                    let module = Program::new(offload_hip::fixtures::KERNELS)
                        .load(&dev)
                        .unwrap();
                    let add_one = module.kernel("add_one").unwrap();
                    let q = dev.queue().unwrap();
                    // SAFETY: add_one adds 1 to the first 256 u32s of `up`, which has 256.
                    unsafe {
                        q.launch(
                            &add_one,
                            Dims::grid([4, 1, 1]).block([64, 1, 1]),
                            &[Arg::buffer(up.as_bytes()), Arg::scalar(&256u32)],
                        )
                    }
                    .unwrap();
                    assert!(up.to_vec().unwrap().iter().all(|&x| x == v + 1));
                    if round % 2 == 0 {
                        drop((up, other, add_one, module, q));
                        rt.shutdown().unwrap();
                    } else {
                        // Shut down with objects alive: they go when dropped.
                        let _ = rt.shutdown();
                        drop((up, other, add_one, module, q));
                    }
                }
            });
        }
    });
    report(&hooks)
}

/// A backend that skips one `hipFree` (the fake is told to fail it; the buffer's drop cannot
/// report that): the allocation stays alive, the fake reports it as a leak at exit.
fn leaky_case() -> String {
    let hooks = hooks();
    hooks.fail("hipFree", 1, 1);
    let hip = HipPlatform::open(&Config::default()).unwrap();
    let dev = hip.devices().remove(0);
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    drop(buf); // its hipFree "fails": the memory stays allocated
    drop(dev);
    hip.deinit().unwrap();
    report(&hooks)
}

/// More than the device has: `OutOfMemory` naming the size; nothing left behind.
fn oom_case() -> String {
    let hooks = hooks();
    let hip = HipPlatform::open(&Config::default()).unwrap();
    let dev = hip.devices().remove(0);
    let mut results = Vec::new();
    for kind in KINDS {
        results.push(match dev.alloc(5 << 30, kind) {
            Err(Error::OutOfMemory {
                requested, reason, ..
            }) => format!("OutOfMemory of {requested} bytes ({reason})"),
            other => format!("{other:?}"),
        });
    }
    drop(dev);
    hip.deinit().unwrap();
    format!("{}; {}", results.join(", "), report(&hooks))
}

fn conformance_case() -> String {
    let hooks = hooks();
    conformance::run::<HipOnly>(
        &Fixtures {
            image: offload_hip::fixtures::KERNELS.to_vec(),
        },
        SuiteConfig {
            cases: 256,
            ..SuiteConfig::default()
        },
    );
    eprintln!(
        "the suite made {} launches, {} exports and {} imports from another process",
        hooks.calls("hipModuleLaunchKernel"),
        hooks.calls("hipIpcGetMemHandle"),
        hooks.calls("hipIpcOpenMemHandle")
    );
    report(&hooks)
}

/// The fixture loaded, its kernels launched with buffers and views, its global read and
/// written, through the runtime.
fn programs_case() -> String {
    let hooks = hooks();
    let rt = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_hip::platform())
        .start()
        .unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let module = Program::new(offload_hip::fixtures::KERNELS)
        .load(&dev)
        .unwrap();
    let mut kernels = module.kernels().unwrap();
    kernels.sort();
    let globals = module.globals().unwrap();
    let add_one = module.kernel("add_one").unwrap();
    let fill = module.kernel("fill").unwrap();
    let read_global = module.kernel("read_global").unwrap();
    let buf = dev.alloc(1024 * 4, MemKind::Device).unwrap();
    let q = dev.queue().unwrap();
    // SAFETY: the fixture kernels touch the first n u32s of their buffer, which has 1024.
    unsafe {
        q.launch(
            &fill,
            Dims::grid([16, 1, 1]).block([64, 1, 1]),
            &[Arg::buffer(&buf), Arg::scalar(&7u32), Arg::scalar(&1024u32)],
        )
        .unwrap();
        q.launch(
            &add_one,
            Dims::grid([4, 1, 1]).block([64, 1, 1]),
            &[Arg::range(&buf, 4, 256 * 4), Arg::scalar(&256u32)],
        )
        .unwrap();
    }
    let mut out = [0u8; 12];
    q.read(&buf, 0, &mut out).unwrap();
    let words: Vec<u32> = out
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    module.write_global("g", 0, &99u32.to_ne_bytes()).unwrap();
    // SAFETY: read_global writes the first u32 of its buffer.
    unsafe {
        q.launch(&read_global, Dims::grid([1, 1, 1]), &[Arg::buffer(&buf)])
            .unwrap();
    }
    q.sync().unwrap();
    let mut g = [0u8; 4];
    module.read_global("g", 0, &mut g).unwrap();
    let mut first = [0u8; 4];
    buf.read(0, &mut first).unwrap();
    // Wrong arguments are refused before the runtime sees them.
    let wrong = unsafe { q.launch(&add_one, Dims::grid([1, 1, 1]), &[Arg::buffer(&buf)]) };
    assert!(wrong.is_err());
    let missing = module.kernel("nope").unwrap_err();
    assert!(
        matches!(missing, Error::SymbolNotFound { .. }),
        "{missing:?}"
    );
    drop((add_one, fill, read_global, q, buf));
    module.unload().unwrap();
    drop(dev);
    rt.shutdown().unwrap();
    format!(
        "kernels={kernels:?} globals={globals:?} words={words:?} g={} read_global={}; {}",
        u32::from_ne_bytes(g),
        u32::from_ne_bytes(first),
        report(&hooks)
    )
}

/// Random, truncated, foreign and damaged images: every one is InvalidBinary, and none
/// reaches `hipModuleLoadData`.
fn bad_images_case() -> String {
    let hooks = hooks();
    let hip = HipPlatform::open(&Config::default()).unwrap();
    let dev = hip.devices().remove(0);
    let good = offload_hip::fixtures::KERNELS;
    let mut images: Vec<Vec<u8>> = vec![Vec::new(), b"not an image at all".to_vec()];
    for cut in [1, 8, 40, 64, good.len() / 2] {
        images.push(good[..cut].to_vec());
    }
    // An ELF for the wrong machine (this test binary's own header).
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    images.push(me[..4096.min(me.len())].to_vec());
    // A relocatable object, not linked.
    let mut relocatable = good.to_vec();
    relocatable[16] = 1;
    images.push(relocatable);
    // An unknown target.
    let mut unknown = good.to_vec();
    unknown[48] = 0xff;
    images.push(unknown);
    // A bundle header with nothing after it.
    images.push(b"__CLANG_OFFLOAD_BUNDLE__".to_vec());
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
    dev.validate(good).unwrap();
    let loads = hooks.calls("hipModuleLoadData");
    drop(dev);
    hip.deinit().unwrap();
    format!(
        "refused={refused}/{} loads={loads} {}",
        images.len(),
        report(&hooks)
    )
}

fn start() -> Offload<offload_core::Ready, NoPlatforms> {
    Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_hip::platform())
        .start()
        .unwrap()
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
/// checks what it wrote; an import in this same process shares the allocation.
fn ipc_export_case() -> String {
    let hooks = hooks();
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc_exportable(4096, MemKind::Device).unwrap();
    buf.write(0, &[7u8; 4096]).unwrap();
    let handle = buf.export().unwrap();
    let (bytes, fd) = handle.into_parts();
    assert!(fd.is_none(), "HIP handles carry no descriptor");
    // Here: the same allocation.
    let here = dev
        .import(offload_core::ipc::IpcHandle::from_parts(&bytes, None).unwrap())
        .unwrap();
    here.write(8, &[5]).unwrap();
    let mut mine = [0u8; 1];
    buf.read(8, &mut mine).unwrap();
    drop(here);
    let dir = std::env::var("LD_LIBRARY_PATH").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(FAKE.case_var, "ipc-import")
        .env("LD_LIBRARY_PATH", dir)
        .env("OFFLOAD_HIP_IPC_HANDLE", hex(&bytes))
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
        "same process wrote {mine:?}; importer: {theirs}; exporter sees {back:?}; {}",
        report(&hooks)
    )
}

fn ipc_import_case() -> String {
    let hooks = hooks();
    let bytes = unhex(&std::env::var("OFFLOAD_HIP_IPC_HANDLE").unwrap());
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let handle = offload_core::ipc::IpcHandle::from_parts(&bytes, None).unwrap();
    let view = dev.import(handle).unwrap();
    let mut out = [0u8; 16];
    view.read(0, &mut out).unwrap();
    view.write(100, &[9, 9, 9, 9]).unwrap();
    // The same handle again shares the mapping (opened once, closed once).
    let again = dev
        .import(offload_core::ipc::IpcHandle::from_parts(&bytes, None).unwrap())
        .unwrap();
    let mut second = [0u8; 4];
    again.read(100, &mut second).unwrap();
    let opens = hooks.calls("hipIpcOpenMemHandle");
    drop((view, again));
    rt.shutdown().unwrap();
    format!(
        "read {:?} then {second:?} with {opens} open(s); {}",
        &out[..4],
        report(&hooks)
    )
}

/// Queued work through the runtime, on every memory kind: writes, fills of 1, 2, 3 and 4
/// byte patterns at aligned and unaligned offsets, copies, host functions in order, a
/// host function's panic at the next sync, events (complete, timed, waited for by another
/// queue), and the counts of the fake's calls that show which fill each took.
fn queues_case() -> String {
    let hooks = hooks();
    let rt = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_hip::platform())
        .start()
        .unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let q = dev.queue().unwrap();
    let other = dev.queue().unwrap();
    // Deferred streams hold queued work until something waits for it.
    let held = dev.alloc(4, MemKind::Device).unwrap();
    q.write(&held, 0, &[1, 2, 3, 4]).unwrap();
    let idle_before_sync = q.is_idle().unwrap();
    q.sync().unwrap();
    drop(held);
    for kind in KINDS {
        let a = dev.alloc(1024, kind).unwrap();
        let b = dev.alloc(1024, kind).unwrap();
        let start = q.record().unwrap();
        q.write(&a, 0, &[3u8; 1024]).unwrap();
        q.fill(&a, 0, 16, &[1]).unwrap();
        q.fill(&a, 16, 16, &[2, 0]).unwrap();
        q.fill(&a, 32, 16, &[4, 0, 0, 0]).unwrap();
        q.fill(&a, 49, 6, &[5, 6]).unwrap(); // unaligned: an expanded write
        q.fill(&a, 60, 9, &[7, 8, 9]).unwrap(); // three bytes: an expanded write
        q.copy(&a, 0, &b, 512, 512).unwrap();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        for i in 0..3 {
            let order = order.clone();
            q.enqueue_host_fn(move || order.lock().unwrap().push(i))
                .unwrap();
        }
        let end = q.record().unwrap();
        other.wait(&end).unwrap();
        let mut out = [0u8; 72];
        other.read(&b, 512, &mut out).unwrap();
        q.sync().unwrap();
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        assert!(out[..16].iter().all(|&x| x == 1), "{out:?}");
        assert_eq!(out[16..20], [2, 0, 2, 0]);
        assert_eq!(out[32..40], [4, 0, 0, 0, 4, 0, 0, 0]);
        assert_eq!(out[48..56], [3, 5, 6, 5, 6, 5, 6, 3]);
        assert_eq!(out[60..70], [7, 8, 9, 7, 8, 9, 7, 8, 9, 3]);
        assert!(end.is_complete().unwrap() && q.is_idle().unwrap());
        end.elapsed_since(&start).unwrap();
        // Out of range: refused before the runtime sees it.
        assert!(q.fill(&a, 1020, 8, &[0]).is_err());
        assert!(q.write(&a, 1020, &[0; 8]).is_err());
        drop((start, end));
        a.free().unwrap();
        b.free().unwrap();
    }
    q.enqueue_host_fn(|| panic!("in a host function")).unwrap();
    let panicked = q.sync().unwrap_err();
    assert!(matches!(panicked, Error::Callback { .. }), "{panicked:?}");
    q.sync().unwrap(); // reported once
    let calls = format!(
        "idle_before_sync={idle_before_sync} memset={} d16={} d32={} async-copies={} \
         host-fns={}",
        hooks.calls("hipMemsetAsync"),
        hooks.calls("hipMemsetD16Async"),
        hooks.calls("hipMemsetD32Async"),
        hooks.calls("hipMemcpyAsync"),
        hooks.calls("hipLaunchHostFunc")
    );
    drop((q, other, dev));
    rt.shutdown().unwrap();
    format!("{calls}; {}", report(&hooks))
}

fn built() -> Option<std::path::PathBuf> {
    FAKE.build("full", "libamdhip64.so", &[])
}

#[test]
fn every_memory_kind_round_trips_with_no_protocol_violation() {
    let Some(dir) = built() else { return };
    assert_eq!(FAKE.run(&dir, "memory", &[]), CLEAN);
}

#[test]
fn concurrent_runtimes_leave_nothing_behind() {
    let Some(dir) = built() else { return };
    assert_eq!(FAKE.run(&dir, "runtime", &[]), CLEAN);
}

#[test]
fn a_skipped_free_is_reported_by_the_fake() {
    let Some(dir) = built() else { return };
    // The child sees the allocation alive; at its exit the fake reports the leak.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(FAKE.case_var, "leaky")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains(
            "RESULT violations=[] live=alloc:1,host:0,managed:0,stream:0,event:0,module:0,\
             global:0,ipc:0"
        ),
        "{stdout}"
    );
    println!("the fake reported, as it should:\n{stderr}");
    assert!(stderr.contains("FAKE-HIP-VIOLATIONS: 1"), "{stderr}");
    assert!(
        stderr.contains("leak: alloc 0x") && stderr.contains("(64 bytes, device 0)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("still allocated at process exit"),
        "{stderr}"
    );
}

#[test]
fn ipc_between_two_processes() {
    let Some(dir) = built() else { return };
    let result = FAKE.run(&dir, "ipc-export", &[]);
    assert_eq!(
        result,
        format!(
            "same process wrote [5]; importer: read [7, 7, 7, 7] then [9, 9, 9, 9] with 1 \
             open(s); {CLEAN}; exporter sees [9, 9, 9, 9]; {CLEAN}"
        )
    );
}

#[test]
fn too_large_an_allocation_is_out_of_memory() {
    let Some(dir) = built() else { return };
    let oom = |call| {
        format!("OutOfMemory of 5368709120 bytes ({call}: hipErrorOutOfMemory (2): out of memory)")
    };
    assert_eq!(
        FAKE.run(&dir, "oom", &[]),
        format!(
            "{}, {}, {}; {CLEAN}",
            oom("hipMalloc"),
            oom("hipHostMalloc"),
            oom("hipMallocManaged")
        )
    );
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
        FAKE.run(&dir, "conformance", &[("FAKE_HIP_DEFER", "1")]),
        CLEAN
    );
}

#[test]
fn concurrent_runtimes_with_deferred_streams_leave_nothing_behind() {
    let Some(dir) = built() else { return };
    assert_eq!(FAKE.run(&dir, "runtime", &[("FAKE_HIP_DEFER", "1")]), CLEAN);
}

#[test]
fn the_fixture_code_object_loads_launches_and_has_its_global() {
    let Some(dir) = built() else { return };
    for defer in ["0", "1"] {
        assert_eq!(
            FAKE.run(&dir, "programs", &[("FAKE_HIP_DEFER", defer)]),
            format!(
                "kernels=[\"add_one\", \"fill\", \"noop\", \"read_global\"] \
                 globals=[\"g\"] words=[7, 8, 8] g=99 read_global=99; {CLEAN}"
            )
        );
    }
}

#[test]
fn bad_images_never_reach_the_runtime() {
    let Some(dir) = built() else { return };
    let result = FAKE.run(&dir, "bad-images", &[]);
    assert!(result.starts_with("refused=15/15 loads=0 "), "{result}");
    assert!(result.ends_with(CLEAN), "{result}");
}

#[test]
fn queued_writes_fills_copies_host_functions_and_events() {
    let Some(dir) = built() else { return };
    // Per kind: a 1-byte fill (hipMemsetAsync), a 2- and a 4-byte one (D16, D32); the
    // unaligned and 3-byte patterns are expanded writes (hipMemcpyAsync, with the write
    // and the copy: 4 per kind, and one write before).
    assert_eq!(
        FAKE.run(&dir, "queues", &[]),
        format!("idle_before_sync=true memset=3 d16=3 d32=3 async-copies=13 host-fns=10; {CLEAN}")
    );
    assert_eq!(
        FAKE.run(&dir, "queues", &[("FAKE_HIP_DEFER", "1")]),
        format!("idle_before_sync=false memset=3 d16=3 d32=3 async-copies=13 host-fns=10; {CLEAN}")
    );
}

#[test]
fn a_runtime_without_managed_memory_says_so() {
    let Some(dir) = FAKE.build("no-managed", "libamdhip64.so", &["NO_MANAGED"]) else {
        return;
    };
    let result = FAKE.run(&dir, "oom", &[]);
    assert!(
        result.contains("hip: Device::alloc: unsupported: the runtime has no hipMallocManaged"),
        "{result}"
    );
    assert!(result.ends_with(CLEAN), "{result}");
}
