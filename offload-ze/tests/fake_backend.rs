//! The whole Level Zero backend against the protocol-checking fake loader
//! (offload-driver/fake/fake_ze.c): the shared fake-backend cases of
//! `offload_testing::fake::cases` — the conformance suite (fixed tests and 256 proptest
//! cases, also with deferred work), runtimes on eight threads, every memory kind, the
//! fixture SPIR-V loaded and launched, bad images never reaching `zeModuleCreate`, IPC
//! between two processes (the handle's file descriptor passed to the child), out of memory,
//! queued work, a seeded protocol violation that the fake must report, and the fake's
//! failure switch at every entry point — plus Level Zero's own cases: the build log inside
//! `InvalidBinary`, native binaries, allocation identity, 512 mutated SPIR-V modules (only
//! well-formed ones reach `zeModuleCreate`), forged IPC handles (refused, their descriptors
//! closed), what the conformance suite makes the loader do, 200 init/work/shutdown cycles
//! without a growing descriptor count, and launches offload refuses before the loader would
//! report them. Each case runs in a child process that finds the fake as
//! libze_loader.so.1.
//!
//! This is a protocol fake over host memory, not a GPU: it checks that offload calls the
//! loader correctly (live handles of the right context, events that order the work, objects
//! destroyed in order, no leaks), not that a GPU computes correctly.

use offload_core::hal::{Device as _, Platform as _, Program as _, Queue as _};
use offload_core::{Arg, Config, Dims, Error, MemKind, PlatformEntry, Platforms};
use offload_testing::fake::cases::Subject;
use offload_testing::fake::{FakeDriver, FakeHooks};
use offload_ze::ZePlatform;

const SUBJECT: Subject = Subject {
    fake: FakeDriver {
        case_var: "OFFLOAD_ZE_BACKEND_CASE",
        source: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../offload-driver/fake/fake_ze.c"
        ),
        build_dir: env!("CARGO_TARGET_TMPDIR"),
        prefix: "fake-ze-backend",
        real_var: "OFFLOAD_ZE_REAL",
    },
    library: "libze_loader.so.1",
    hooks: "fake_ze",
    live: &[
        "device-mem",
        "host-mem",
        "shared-mem",
        "list",
        "pool",
        "event",
        "module",
        "kernel",
        "log",
        "ipc",
        "ipc-handle",
        "context",
    ],
    entry: offload_ze::platform,
    fixture: offload_ze::fixtures::KERNELS,
    load_call: "zeModuleCreate",
    free_call: "zeMemFree",
    ipc_open_call: "zeMemOpenIpcHandle",
    defer_var: "FAKE_ZE_DEFER",
    kinds: &[MemKind::Device, MemKind::Host, MemKind::Shared],
    fd_handles: true,
    // ZE_RESULT_ERROR_INVALID_ARGUMENT.
    fail_code: 0x7800_0004,
    bad_images,
};

/// Just the Level Zero backend.
struct ZeOnly;

impl Platforms for ZeOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_ze::platform()]
    }
}

/// A well-formed SPIR-V module of the wrong flavour: a Vulkan compute shader (Shader
/// capability, Logical addressing), offload-vulkan's fixture.
const VULKAN_SHADER: &[u8] = include_bytes!("../../offload-vulkan/tests/fixtures/kernels.spv");

/// Level Zero's own: damaged SPIR-V (half of it, not whole words, a wrong magic), a Vulkan
/// shader, and ELF files that are not Intel GPU binaries (32-bit, another machine).
fn bad_images(spirv: &[u8]) -> Vec<Vec<u8>> {
    let mut wrong_magic = spirv.to_vec();
    wrong_magic[0] ^= 0xff;
    let mut elf32 = native_image();
    elf32[4] = 1;
    let mut x86 = native_image();
    x86[18] = 62;
    vec![
        spirv[..spirv.len() / 2].to_vec(),
        spirv[..spirv.len() - 1].to_vec(),
        wrong_magic,
        VULKAN_SHADER.to_vec(),
        elf32,
        x86,
    ]
}

/// A "native binary" as the fake understands one: an ELF64 header for EM_INTELGT (205)
/// followed by the names of the kernels it holds.
fn native_image() -> Vec<u8> {
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // ELFCLASS64
    elf[5] = 1; // little-endian
    elf[6] = 1;
    elf[16] = 3; // ET_DYN
    elf[18..20].copy_from_slice(&205u16.to_le_bytes());
    elf.extend_from_slice(b"noop\0");
    elf
}

fn open() -> (ZePlatform, offload_ze::ZeDevice) {
    let ze = ZePlatform::open(&Config::default()).unwrap();
    let dev = ze.devices().remove(0);
    (ze, dev)
}

/// The fixture under `FAKE_ZE_BUILD_FAIL=1`: `InvalidBinary` with the driver's build log,
/// and the log destroyed.
fn build_log_case(hooks: &FakeHooks) -> String {
    let (ze, dev) = open();
    let err = dev.load(offload_ze::fixtures::KERNELS).unwrap_err();
    let Error::InvalidBinary { reason, .. } = &err else {
        panic!("{err:?}");
    };
    let reason = reason.clone();
    drop(dev);
    ze.deinit().unwrap();
    format!("{reason}; {}", SUBJECT.report(hooks))
}

/// A native binary loads, lists the driver's kernels, launches its argument-less kernel,
/// refuses arguments; allocation ids are distinct and stable.
fn native_case(hooks: &FakeHooks) -> String {
    let (ze, dev) = open();
    let module = dev.load(&native_image()).unwrap();
    let kernels = module.kernels();
    let noop = module.kernel("noop").unwrap();
    let missing = module.kernel("add_one").unwrap_err();
    assert!(
        matches!(missing, Error::SymbolNotFound { .. }),
        "{missing:?}"
    );
    let queue = dev.queue().unwrap();
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    // SAFETY: noop touches nothing.
    unsafe { queue.launch(&noop, &Dims::grid([2, 1, 1]), &[]) }.unwrap();
    // SAFETY: refused before anything runs.
    let with_args = unsafe {
        queue.launch(
            &noop,
            &Dims::grid([1, 1, 1]),
            &[offload_core::KernelArg::Buffer(&buf)],
        )
    };
    assert!(
        matches!(with_args, Err(Error::InvalidArgument { .. })),
        "{with_args:?}"
    );
    queue.sync().unwrap();
    let other = dev.alloc(64, MemKind::Host).unwrap();
    let ids = (buf.allocation_id().unwrap(), other.allocation_id().unwrap());
    assert_ne!(ids.0, ids.1);
    assert_eq!(buf.allocation_id().unwrap(), ids.0);
    drop((noop, buf, other));
    queue.destroy().unwrap();
    module.unload().unwrap();
    drop(dev);
    ze.deinit().unwrap();
    format!("kernels={kernels:?}; {}", SUBJECT.report(hooks))
}

/// The number of open descriptors of this process.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The number of threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// 200 cycles of start, allocate, load, launch, run a host function, export, read back,
/// shut down: every object is gone after each, and the process's descriptors and threads do
/// not grow (the host functions' threads are joined: none is left to pin a library, L2).
fn cycles_case(hooks: &FakeHooks) -> String {
    let cycle = |round: u32| {
        let rt = SUBJECT.start();
        let dev = rt.devices().unwrap().remove(0);
        let buf = dev.alloc_exportable(1024, MemKind::Device).unwrap();
        buf.fill(0, 1024, 0).unwrap();
        let module = offload_core::Program::new(offload_ze::fixtures::KERNELS)
            .load(&dev)
            .unwrap();
        let add_one = module.kernel("add_one").unwrap();
        let q = dev.queue().unwrap();
        // SAFETY: add_one adds 1 to the first 256 u32s of the 1024-byte buffer.
        unsafe {
            q.launch(
                &add_one,
                Dims::grid([4, 1, 1]).block([64, 1, 1]),
                &[Arg::buffer(&buf), Arg::scalar(&256u32)],
            )
        }
        .unwrap();
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        q.enqueue_host_fn(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
            .unwrap();
        let handle = buf.export().unwrap();
        drop(handle);
        let mut out = [0u8; 4];
        q.read(&buf, 1020, &mut out).unwrap();
        assert_eq!(u32::from_ne_bytes(out), 1, "round {round}");
        assert!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            "round {round}"
        );
        drop((add_one, module, q, buf, dev));
        rt.shutdown().unwrap();
    };
    cycle(0);
    let (before, threads_before) = (fds(), threads());
    for round in 1..200 {
        cycle(round);
    }
    let (after, threads_after) = (fds(), threads());
    assert_eq!(threads_before, threads_after, "threads");
    format!(
        "fds {before}->{after}; threads {threads_before}->{threads_after}; {}",
        SUBJECT.report(hooks)
    )
}

/// The fake's rules, broken on purpose through the raw loader (`violations` lists what it
/// caught; each rule is one line of the fake).
fn rules_case(hooks: &FakeHooks) -> String {
    let (ze, dev) = open();
    // A launch with a wrong size would be refused by offload before the loader sees it;
    // offload's own checks are what this shows.
    let module = dev.load(offload_ze::fixtures::KERNELS).unwrap();
    let add_one = module.kernel("add_one").unwrap();
    let q = dev.queue().unwrap();
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    // SAFETY: refused before anything runs: u64 where add_one takes a u32.
    let wrong = unsafe {
        q.launch(
            &add_one,
            &Dims::grid([1, 1, 1]),
            &[
                offload_core::KernelArg::Buffer(&buf),
                offload_core::KernelArg::Scalar(&7u64.to_ne_bytes()),
            ],
        )
    };
    assert!(
        matches!(wrong, Err(Error::InvalidArgument { .. })),
        "{wrong:?}"
    );
    // Dynamic work-group memory is not offered.
    // SAFETY: refused before anything runs.
    let shared = unsafe {
        q.launch(
            &add_one,
            &Dims::grid([1, 1, 1]).shared_memory(64),
            &[
                offload_core::KernelArg::Buffer(&buf),
                offload_core::KernelArg::Scalar(&1u32.to_ne_bytes()),
            ],
        )
    };
    assert!(
        matches!(shared, Err(Error::Unsupported { .. })),
        "{shared:?}"
    );
    // Unloading the program while a kernel of it lives defers the module's destruction to
    // the kernel's drop (the fake would report a module destroyed with kernels alive).
    drop(q);
    module.unload().unwrap();
    let modules_with_kernel_alive = hooks.live("module");
    drop((add_one, buf));
    let after = hooks.live("module");
    drop(dev);
    ze.deinit().unwrap();
    format!(
        "modules while a kernel lived={modules_with_kernel_alive} after={after}; {}",
        SUBJECT.report(hooks)
    )
}

/// 512 copies of the fixture, each with one to four bytes changed at random (xorshift,
/// fixed seed): each one either loads (offload-spirv found it well-formed: it is built and
/// unloaded) or is `InvalidBinary`; the fake sees exactly the ones that loaded, and none it
/// cannot read (it would report a violation).
fn mutations_case(hooks: &FakeHooks) -> String {
    let (ze, dev) = open();
    let good = offload_ze::fixtures::KERNELS;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut loaded, mut refused) = (0u64, 0u64);
    for _ in 0..512 {
        let mut image = good.to_vec();
        for _ in 0..=(next() % 4) {
            let at = (next() % image.len() as u64) as usize;
            image[at] ^= (next() % 255 + 1) as u8;
        }
        match dev.load(&image) {
            Ok(module) => {
                loaded += 1;
                module.unload().unwrap();
            }
            Err(Error::InvalidBinary { .. }) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    let creates = hooks.calls("zeModuleCreate");
    drop(dev);
    ze.deinit().unwrap();
    assert_eq!(creates, loaded, "zeModuleCreate calls");
    format!(
        "loaded={loaded} refused={refused} zeModuleCreate={creates}; {}",
        SUBJECT.report(hooks)
    )
}

/// Forged and damaged handles, through the hal: each is `InvalidIpcHandle` (or, for a
/// buffer that was not made exportable, `InvalidArgument`), every descriptor handed in is
/// closed, nothing is opened, and a good handle imported twice in this process is one
/// mapping.
fn ipc_forged_case(hooks: &FakeHooks) -> String {
    use offload_core::hal::{Exported, Ipc as _};
    let (ze, dev) = open();
    let buf = dev.alloc_exportable(256, MemKind::Device).unwrap();
    let plain = dev.alloc(256, MemKind::Device).unwrap();
    let not_exportable = dev.export(&plain).unwrap_err();
    assert!(
        matches!(not_exportable, Error::InvalidArgument { .. }),
        "{not_exportable:?}"
    );
    let good = dev.export(&buf).unwrap();
    let null = || {
        Some(std::os::fd::OwnedFd::from(
            std::fs::File::open("/dev/null").unwrap(),
        ))
    };
    let fds_before = fds();
    let forge = |change: &dyn Fn(&mut Vec<u8>), size: u64, fd| Exported {
        size,
        payload: {
            let mut p = good.payload.clone();
            change(&mut p);
            p
        },
        fd,
    };
    let cases: Vec<(&str, Exported)> = vec![
        ("no descriptor", forge(&|_| {}, 256, None)),
        ("short", forge(&|p| p.truncate(40), 256, null())),
        ("magic", forge(&|p| p[0] = b'X', 256, null())),
        ("version", forge(&|p| p[4] = 9, 256, null())),
        ("descriptor bytes", forge(&|p| p[8] = 3, 256, null())),
        ("larger than the allocation", forge(&|_| {}, 4096, null())),
        ("zero size", forge(&|_| {}, 0, null())),
        ("not the memory's descriptor", forge(&|_| {}, 256, null())),
    ];
    let mut refused = Vec::new();
    for (what, exported) in cases {
        match dev.import(exported) {
            Err(Error::InvalidIpcHandle { .. }) => refused.push(what),
            other => panic!("{what}: {other:?}"),
        }
    }
    let fds_after = fds();
    let opens = hooks.calls("zeMemOpenIpcHandle");
    let first = dev.import(good).unwrap();
    let second = dev.import(dev.export(&buf).unwrap()).unwrap();
    let mut bytes = [1u8; 4];
    let mut view = second;
    dev.write(&mut view, 0, &[5, 6, 7, 8]).unwrap();
    dev.read(&first, 0, &mut bytes).unwrap();
    let opened = hooks.calls("zeMemOpenIpcHandle") - opens;
    drop((first, view, buf, plain));
    drop(dev);
    ze.deinit().unwrap();
    format!(
        "refused {}: {refused:?}; fds {fds_before}->{fds_after}; zeMemOpenIpcHandle calls {opens} (the last, \
         refused by the loader); two imports: {opened} open(s), read {bytes:?}; {}",
        refused.len(),
        SUBJECT.report(hooks)
    )
}

/// The conformance suite again, counting what it made the loader do.
fn conformance_calls_case(hooks: &FakeHooks) -> String {
    let report = offload_testing::fake::cases::conformance::<ZeOnly>(&SUBJECT, hooks);
    let calls: Vec<String> = [
        "zeModuleCreate",
        "zeCommandListAppendLaunchKernel",
        "zeCommandListAppendMemoryCopy",
        "zeMemGetIpcHandle",
        "zeMemOpenIpcHandle",
        "zeMemAllocDevice",
        "zeEventHostSynchronize",
    ]
    .iter()
    .map(|entry| format!("{entry}={}", hooks.calls(entry)))
    .collect();
    format!("{}; {report}", calls.join(" "))
}

fn own_cases(case: &str, hooks: &FakeHooks) -> Option<String> {
    Some(match case {
        "conformance-calls" => conformance_calls_case(hooks),
        "ipc-forged" => ipc_forged_case(hooks),
        "mutations" => mutations_case(hooks),
        "build-log" => build_log_case(hooks),
        "native" => native_case(hooks),
        "cycles" => cycles_case(hooks),
        "rules" => rules_case(hooks),
        _ => return None,
    })
}

offload_testing::fake_backend_tests!(SUBJECT, ZePlatform, ZeOnly, own_cases);

#[test]
fn a_build_failure_is_invalid_binary_with_the_build_log() {
    let Some(dir) = SUBJECT.built() else { return };
    let result = SUBJECT
        .fake
        .run(&dir, "build-log", &[("FAKE_ZE_BUILD_FAIL", "1")]);
    assert_eq!(
        result,
        format!(
            "the driver could not build it: zeModuleCreate: \
             ZE_RESULT_ERROR_MODULE_BUILD_FAILURE (0x70000004); build log: fake-ze: error: \
             FAKE_ZE_BUILD_FAIL is set (line 1: this build fails); {}",
            SUBJECT.clean()
        )
    );
}

#[test]
fn mutated_spirv_reaches_the_loader_only_when_well_formed() {
    let Some(dir) = SUBJECT.built() else { return };
    let result = SUBJECT.fake.run(&dir, "mutations", &[]);
    println!("512 mutated fixtures: {result}");
    assert!(result.ends_with(&SUBJECT.clean()), "{result}");
}

#[test]
fn conformance_reaches_every_part_of_the_loader() {
    let Some(dir) = SUBJECT.built() else { return };
    let result = SUBJECT.fake.run(&dir, "conformance-calls", &[]);
    println!("conformance on the fake: {result}");
    assert!(result.ends_with(&SUBJECT.clean()), "{result}");
    for entry in [
        "zeCommandListAppendLaunchKernel",
        "zeMemGetIpcHandle",
        "zeMemOpenIpcHandle",
    ] {
        assert!(!result.contains(&format!("{entry}=0 ")), "{result}");
    }
}

#[test]
fn forged_ipc_handles_are_refused_and_their_descriptors_closed() {
    let Some(dir) = SUBJECT.built() else { return };
    let result = SUBJECT.fake.run(&dir, "ipc-forged", &[]);
    println!("{result}");
    let fds_line = result.split("; ").find(|p| p.starts_with("fds ")).unwrap();
    let (before, after) = fds_line["fds ".len()..].split_once("->").unwrap();
    assert_eq!(before, after, "{result}");
    assert!(result.starts_with("refused 8: "), "{result}");
    assert!(
        result.ends_with(&format!(
            "two imports: 1 open(s), read [5, 6, 7, 8]; {}",
            SUBJECT.clean()
        )),
        "{result}"
    );
}

#[test]
fn a_native_binary_loads_and_launches() {
    let Some(dir) = SUBJECT.built() else { return };
    for defer in ["0", "1"] {
        assert_eq!(
            SUBJECT
                .fake
                .run(&dir, "native", &[("FAKE_ZE_DEFER", defer)]),
            format!("kernels=[\"noop\"]; {}", SUBJECT.clean())
        );
    }
}

#[test]
fn init_work_shutdown_cycles_leave_nothing_behind() {
    let Some(dir) = SUBJECT.built() else { return };
    let result = SUBJECT.fake.run(&dir, "cycles", &[]);
    println!("200 cycles on the fake: {result}");
    let (fds, rest) = result.split_once("; ").unwrap();
    let (_threads, report) = rest.split_once("; ").unwrap();
    assert_eq!(report, SUBJECT.clean());
    let (before, after) = fds["fds ".len()..].split_once("->").unwrap();
    assert_eq!(before, after, "{result}");
}

#[test]
fn offload_refuses_what_the_fake_would_report() {
    let Some(dir) = SUBJECT.built() else { return };
    assert_eq!(
        SUBJECT.fake.run(&dir, "rules", &[]),
        format!(
            "modules while a kernel lived=1 after=0; {}",
            SUBJECT.clean()
        )
    );
}
