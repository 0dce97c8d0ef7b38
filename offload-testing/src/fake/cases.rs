//! The test cases every vendor backend runs against its protocol-checking fake, written once:
//! the conformance suite, runtimes on many threads, every memory kind through the hal,
//! programs from the shared fixture kernels, bad images, out of memory, IPC between two
//! processes, queued work, and a seeded protocol violation. A backend's test file describes
//! itself in a [`Subject`] and expands [`fake_backend_tests!`](crate::fake_backend_tests);
//! its own cases (driver-specific call counts, images of its format) go through the
//! `extra` dispatcher it hands to [`child`].
//!
//! Every case runs in a child process (the test binary again, see [`FakeDriver::run`]) that
//! finds the fake under the driver's library name, and returns one line: what it saw, then
//! the fake's violation log and its live objects ([`Subject::report`]), which a clean run
//! ends with ([`Subject::clean`]).
//!
//! The fixture kernels are the same in every backend's format (PTX, AMD code object,
//! OpenCL SPIR-V): `add_one(u32 *buf, u32 n)`, `fill(u32 *buf, u32 value, u32 n)`, `noop()`,
//! `read_global(u32 *buf)` and a global `g` (a `u32`); the fakes run them by name over host
//! memory, so these cases check the protocol (live handles, valid ranges and kinds, no
//! leaks), not a GPU's arithmetic.

use std::sync::{Arc, Mutex};

use crate::conformance::{self, Fixtures, SuiteConfig};
use offload_core::hal::{Device, Ipc, Platform};
use offload_core::ipc::IpcHandle;
use offload_core::{
    Arg, Config, Dims, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Platforms, Program,
    Ready, Uninit,
};

use super::{FakeDriver, FakeHooks};

/// A backend under test and its fake: everything the shared cases need to know.
///
/// ```
/// use offload_testing::fake::{FakeDriver, cases::Subject};
/// # fn entry() -> offload_core::PlatformEntry { unimplemented!() }
/// const SUBJECT: Subject = Subject {
///     fake: FakeDriver {
///         case_var: "OFFLOAD_DOC_CASE",
///         source: "/nonexistent/fake_doc.c",
///         build_dir: "/tmp",
///         prefix: "fake-doc",
///         real_var: "OFFLOAD_DOC_REAL",
///     },
///     library: "libdoc.so.1",
///     hooks: "fake_doc",
///     live: &["alloc", "module"],
///     entry,
///     fixture: b"",
///     load_call: "docModuleLoad",
///     free_call: "docFree",
///     ipc_open_call: "docIpcOpen",
///     defer_var: "FAKE_DOC_DEFER",
///     kinds: &[offload_core::MemKind::Device],
///     fd_handles: false,
///     fail_code: 1,
///     bad_images: |_| Vec::new(),
/// };
/// assert_eq!(SUBJECT.clean(), "violations=[] live=alloc:0,module:0");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Subject {
    /// The fake's build and child-process settings.
    pub fake: FakeDriver,
    /// The library name the backend opens (and the child finds the fake by).
    pub library: &'static str,
    /// The prefix of the fake's test hooks (`<hooks>_violations`, ...).
    pub hooks: &'static str,
    /// The kinds of driver object whose live counts a report lists; the first is device
    /// memory.
    pub live: &'static [&'static str],
    /// The backend's platform entry.
    pub entry: fn() -> PlatformEntry,
    /// The fixture kernels in the backend's image format.
    pub fixture: &'static [u8],
    /// The entry point that loads a module (its calls are counted by the bad-image case).
    pub load_call: &'static str,
    /// The entry point that frees device memory (the seeded violation fails it once).
    pub free_call: &'static str,
    /// The entry point that opens an IPC handle.
    pub ipc_open_call: &'static str,
    /// Set to 1, the fake runs queued work only when something waits for it.
    pub defer_var: &'static str,
    /// The memory kinds the backend allocates.
    pub kinds: &'static [MemKind],
    /// Whether an exported handle carries a file descriptor.
    pub fd_handles: bool,
    /// The error code the fake's failure switch makes an entry point return (a real error
    /// of the driver's, such as CUDA_ERROR_INVALID_VALUE).
    pub fail_code: i32,
    /// Bad images of the backend's own format, made from the fixture (wrong target,
    /// damaged headers, ...), added to the shared ones.
    pub bad_images: fn(&[u8]) -> Vec<Vec<u8>>,
}

impl Subject {
    /// The fake's hooks, in a child of the harness.
    ///
    /// ```no_run
    /// # let subject: offload_testing::fake::cases::Subject = unimplemented!();
    /// let hooks = subject.hooks();
    /// assert!(hooks.violations().is_empty());
    /// ```
    pub fn hooks(&self) -> FakeHooks {
        if self.fake.real() {
            return FakeHooks::absent();
        }
        // SAFETY: cases run only in a child of `FakeDriver::run`, whose LD_LIBRARY_PATH puts
        // the fake built from `self.fake.source` first under `self.library`.
        unsafe { FakeHooks::open(self.library, self.hooks) }
    }

    /// `violations=[...] live=kind:n,...`: the fake's violation log and its live objects.
    ///
    /// ```no_run
    /// # let subject: offload_testing::fake::cases::Subject = unimplemented!();
    /// assert_eq!(subject.report(&subject.hooks()), subject.clean());
    /// ```
    pub fn report(&self, hooks: &FakeHooks) -> String {
        if !hooks.present() {
            return super::REAL.to_string();
        }
        let live: Vec<String> = self
            .live
            .iter()
            .map(|k| format!("{k}:{}", hooks.live(k)))
            .collect();
        format!(
            "violations={:?} live={}",
            hooks.violations(),
            live.join(",")
        )
    }

    /// What [`report`](Self::report) says when nothing is wrong and nothing is alive.
    ///
    /// ```no_run
    /// # let subject: offload_testing::fake::cases::Subject = unimplemented!();
    /// assert!(subject.clean().starts_with("violations=[] live="));
    /// ```
    pub fn clean(&self) -> String {
        if self.fake.real() {
            return super::REAL.to_string();
        }
        let live: Vec<String> = self.live.iter().map(|k| format!("{k}:0")).collect();
        format!("violations=[] live={}", live.join(","))
    }

    /// A runtime with only this backend.
    ///
    /// ```no_run
    /// # let subject: offload_testing::fake::cases::Subject = unimplemented!();
    /// let rt = subject.start();
    /// rt.shutdown().unwrap();
    /// ```
    pub fn start(&self) -> Offload<Ready, NoPlatforms> {
        Offload::<Uninit, NoPlatforms>::builder()
            .backends([])
            .platform((self.entry)())
            .start()
            .unwrap()
    }

    /// Builds the fake (all features) once per test binary run; `None` when it cannot be
    /// built (SKIP printed; a failure under `CI=true`).
    ///
    /// ```no_run
    /// # let subject: offload_testing::fake::cases::Subject = unimplemented!();
    /// if let Some(dir) = subject.built() {
    ///     println!("{}", subject.fake.run(&dir, "memory", &[]));
    /// }
    /// ```
    pub fn built(&self) -> Option<std::path::PathBuf> {
        self.fake.build("full", self.library, &[])
    }
}

/// The child side of a backend's fake tests: in a child, runs the case named by
/// `subject.fake.case_var` — a shared one, else `extra`'s — and prints `RESULT <line>`;
/// outside a child, does nothing. `B` is the backend's platform, `P` a [`Platforms`] list
/// with only it (for the conformance suite).
///
/// ```no_run
/// # type MyPlatform = offload_core::reference::Reference;
/// # struct Only;
/// # impl offload_core::Platforms for Only {
/// #     fn platforms() -> Vec<offload_core::PlatformEntry> { vec![] } }
/// # let subject: offload_testing::fake::cases::Subject = unimplemented!();
/// offload_testing::fake::cases::child::<MyPlatform, Only>(&subject, |_case, _hooks| None);
/// ```
pub fn child<B: Platform, P: Platforms>(
    subject: &Subject,
    extra: impl FnOnce(&str, &FakeHooks) -> Option<String>,
) where
    B::Device: Ipc,
{
    let Ok(case) = std::env::var(subject.fake.case_var) else {
        return; // not a child
    };
    let hooks = subject.hooks();
    let result = match case.as_str() {
        "conformance" => conformance::<P>(subject, &hooks),
        "runtime" => runtime(subject, &hooks),
        "memory" => memory::<B>(subject, &hooks),
        "programs" => programs(subject, &hooks),
        "adopt" => adopt(subject, &hooks),
        "bad-images" => bad_images::<B>(subject, &hooks),
        "leaky" => leaky::<B>(subject, &hooks),
        "oom" => oom::<B>(subject, &hooks),
        "queues" => queues(subject, &hooks),
        "ipc-export" => ipc_export(subject, &hooks),
        "ipc-import" => ipc_import(subject, &hooks),
        "faults" => faults::<B>(subject, &hooks),
        "driver-faults" => driver_faults(subject, &hooks),
        other => extra(other, &hooks).unwrap_or_else(|| format!("unknown case {other}")),
    };
    println!("RESULT {result}");
}

/// The conformance suite: fixed tests and 256 proptest cases on the fixture kernels.
pub fn conformance<P: Platforms>(subject: &Subject, hooks: &FakeHooks) -> String {
    conformance::run::<P>(
        &Fixtures {
            image: subject.fixture.to_vec(),
        },
        SuiteConfig {
            cases: 256,
            ..SuiteConfig::default()
        },
    );
    subject.report(hooks)
}

/// Through the runtime, on eight threads, each 25 times: start, upload, fill, copy, load
/// and launch, read back, shut down (every other round with buffers and the module still
/// alive, dropped after: L4).
pub fn runtime(subject: &Subject, hooks: &FakeHooks) -> String {
    std::thread::scope(|s| {
        for t in 0..8u32 {
            s.spawn(move || {
                for round in 0..25u32 {
                    let rt = subject.start();
                    let mut devices = rt.devices().unwrap();
                    let dev = devices.remove(t as usize % devices.len());
                    let v = t * 100 + round;
                    let up = dev.upload(&vec![v; 256]).unwrap();
                    let kind = subject.kinds[round as usize % subject.kinds.len()];
                    let other = dev.alloc(1024, kind).unwrap();
                    other.fill(0, 1024, 1).unwrap();
                    other.copy_from(512, up.as_bytes(), 0, 512).unwrap();
                    let mut out = [0u8; 8];
                    other.read(508, &mut out).unwrap();
                    assert_eq!(out[..4], [1, 1, 1, 1]);
                    assert_eq!(u32::from_ne_bytes(out[4..].try_into().unwrap()), v);
                    let module = Program::new(subject.fixture).load(&dev).unwrap();
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
    subject.report(hooks)
}

/// Every kind, through the hal: write, read, fill, copy (between kinds and within a
/// buffer, overlapping too), mapped access where the memory is host-visible, ranges and
/// sizes refused before the driver; buffers of two devices do not mix.
pub fn memory<B: Platform>(subject: &Subject, hooks: &FakeHooks) -> String
where
    B::Device: Ipc,
{
    let platform = B::open(&Config::default()).unwrap();
    for dev in platform.devices() {
        for &kind in subject.kinds {
            let mut a = dev.alloc(4096, kind).unwrap();
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
            for &other in subject.kinds {
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
            if kind == MemKind::Device {
                assert!(
                    matches!(mapped, Err(Error::Unsupported { .. })),
                    "{mapped:?}"
                );
            } else {
                mapped.unwrap();
                dev.read(&a, 0, &mut out).unwrap();
                assert_eq!(out[0], 42);
            }
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
    let devices = platform.devices();
    if let [first, second, ..] = devices.as_slice() {
        assert_ne!(first.uuid(), second.uuid());
        let a = first.alloc(64, MemKind::Device).unwrap();
        let mut b = second.alloc(64, MemKind::Device).unwrap();
        assert!(matches!(
            first.copy(&a, 0, &mut b, 0, 64),
            Err(Error::InvalidArgument { .. })
        ));
        first.free(a).unwrap();
        second.free(b).unwrap();
    }
    drop(devices);
    platform.deinit().unwrap();
    subject.report(hooks)
}

/// The fixture loaded, its kernels launched with buffers and views, its global read and
/// written, wrong arguments and unknown names refused, through the runtime:
/// `words=[7, 8, 8] g=99 read_global=99; <report>`.
pub fn programs(subject: &Subject, hooks: &FakeHooks) -> String {
    let rt = subject.start();
    let dev = rt.devices().unwrap().remove(0);
    let module = Program::new(subject.fixture).load(&dev).unwrap();
    let kernels = module.kernels().unwrap();
    for name in ["add_one", "fill", "noop", "read_global"] {
        assert!(kernels.iter().any(|k| k == name), "{name} in {kernels:?}");
    }
    assert!(module.globals().unwrap().iter().any(|g| g == "g"));
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
    // SAFETY: refused before anything runs (add_one takes two arguments).
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
        "words={words:?} g={} read_global={}; {}",
        u32::from_ne_bytes(g),
        u32::from_ne_bytes(first),
        subject.report(hooks)
    )
}

/// Memory the driver allocated outside offload's bookkeeping, adopted (`Device::adopt`):
/// here another offload buffer's memory, found by `Buffer::address`, with that buffer as the
/// owner, so the two name the same device memory. A kernel launched on the adopted buffer
/// and a fill through it are seen through the owner; dropping the adopted buffer drops the
/// owner, which frees the memory then, exactly once (the fake counts live allocations and
/// reports a double free). `words=<first three words> same=<bool> freed=<bool>; <report>`.
pub fn adopt(subject: &Subject, hooks: &FakeHooks) -> String {
    let rt = subject.start();
    let dev = rt.devices().unwrap().remove(0);
    let add_one = Program::new(subject.fixture)
        .load(&dev)
        .unwrap()
        .kernel("add_one")
        .unwrap();
    let theirs = dev.alloc(1024 * 4, MemKind::Device).unwrap();
    theirs.fill(0, 1024 * 4, 0).unwrap();
    let address = theirs.address().unwrap();
    let probe = dev.alloc(4, MemKind::Device).unwrap();
    let probe_address = probe.address().unwrap();
    // SAFETY: 4 KiB of this device's memory, allocated by the driver and kept by its owner
    // (`theirs`) until the adopted buffer drops it; touched through `theirs` only after the
    // queue synchronised.
    let ours = unsafe { dev.adopt(address, 1024 * 4, MemKind::Device, theirs) }.unwrap();
    let same = ours.address().unwrap() == address && probe_address != address;
    let q = dev.queue().unwrap();
    // SAFETY: add_one increments the first 256 u32s of its buffer, which has 1024.
    unsafe {
        q.launch(
            &add_one,
            Dims::grid([4, 1, 1]).block([64, 1, 1]),
            &[Arg::buffer(&ours), Arg::scalar(&256u32)],
        )
        .unwrap();
    }
    q.sync().unwrap();
    ours.fill(8, 4, 5).unwrap();
    let mut out = [0u8; 12];
    ours.read(0, &mut out).unwrap();
    let words: Vec<u32> = out
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    q.sync().unwrap();
    // The owner goes with the adopted buffer: its memory is freed then, not at shutdown (the
    // fake counts live allocations; the real driver has no such count).
    let live = |hooks: &FakeHooks| hooks.present().then(|| hooks.live(subject.live[0]));
    let before = live(hooks);
    drop(ours);
    let freed = subject
        .fake
        .fake_only(before.zip(live(hooks)).is_some_and(|(b, a)| b - a == 1));
    drop((probe, add_one, q, dev));
    rt.shutdown().unwrap();
    format!(
        "words={words:?} same={same} freed={freed}; {}",
        subject.report(hooks)
    )
}

/// `len` pseudo-random bytes (xorshift) from `seed`.
fn noise(seed: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed as u8
        })
        .collect()
}

/// Bad images — empty, text, truncations of the fixture, this test binary's own ELF
/// header, random bytes, and the backend's own ([`Subject::bad_images`]) — are each
/// `InvalidBinary` from `load` and `validate`, and none reaches the driver's load entry
/// point: `refused=<n>/<n> loads=0 <report>`.
pub fn bad_images<B: Platform>(subject: &Subject, hooks: &FakeHooks) -> String {
    let platform = B::open(&Config::default()).unwrap();
    let dev = platform.devices().remove(0);
    let good = subject.fixture;
    let mut images: Vec<Vec<u8>> = vec![Vec::new(), b"not an image at all".to_vec()];
    for cut in [1, 8, 40] {
        images.push(good[..cut].to_vec());
    }
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    images.push(me[..4096.min(me.len())].to_vec());
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for len in [16, 100, 1000, 4096] {
        images.push(noise(&mut seed, len));
    }
    images.extend((subject.bad_images)(good));
    let mut refused = 0;
    for image in &images {
        match dev.load(image) {
            Err(Error::InvalidBinary { .. }) => refused += 1,
            Err(e) => return format!("unexpected error {e:?}"),
            Ok(_) => return format!("an image of {} bytes loaded", image.len()),
        }
        let validated = dev.validate(image);
        assert!(
            matches!(validated, Err(Error::InvalidBinary { .. })),
            "validate of a {}-byte image that load refused: {validated:?}",
            image.len()
        );
    }
    dev.validate(good).unwrap();
    let loads = subject.fake.fake_only(if hooks.present() {
        hooks.calls(subject.load_call)
    } else {
        0
    });
    drop(dev);
    platform.deinit().unwrap();
    format!(
        "refused={refused}/{} loads={loads} {}",
        images.len(),
        subject.report(hooks)
    )
}

/// A backend whose one free fails (the fake is told to fail it; the buffer's drop cannot
/// report that): the allocation stays alive, and the fake must report the leak — at
/// context release (in the report) or at process exit (on stderr; see
/// [`expect_leak_reported`]).
pub fn leaky<B: Platform>(subject: &Subject, hooks: &FakeHooks) -> String {
    hooks.fail(subject.free_call, 1, 1);
    let platform = B::open(&Config::default()).unwrap();
    let dev = platform.devices().remove(0);
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    drop(buf); // its free "fails": the memory stays allocated
    drop(dev);
    platform.deinit().unwrap();
    let report = subject.report(hooks);
    hooks.clear(); // reported here: not again at exit
    report
}

/// More than the device has, of every kind: `OutOfMemory` naming the size; nothing left
/// behind.
pub fn oom<B: Platform>(subject: &Subject, hooks: &FakeHooks) -> String {
    let platform = B::open(&Config::default()).unwrap();
    let dev = platform.devices().remove(0);
    let mut results = Vec::new();
    for &kind in subject.kinds {
        if kind == MemKind::Shared && subject.fake.real() {
            // Managed memory may be oversubscribed on a real GPU, and asking for more than
            // it has can hang the device: the fake alone is asked.
            results.push(format!("{kind:?}:{}", 1u64 << 40));
            continue;
        }
        results.push(match dev.alloc(1 << 40, kind) {
            Err(Error::OutOfMemory { requested, .. }) => format!("{kind:?}:{requested}"),
            Err(other) => format!("{kind:?}:Err({other})"),
            Ok(_) => format!("{kind:?}:allocated"),
        });
    }
    drop(dev);
    platform.deinit().unwrap();
    format!("{}; {}", results.join(","), subject.report(hooks))
}

/// Queued work through the runtime, on every memory kind: writes, fills of 1, 2, 3 and 4
/// byte patterns at aligned and unaligned offsets, copies, host functions in order, a
/// host function's panic at the next sync, events (complete, timed, waited for by another
/// queue): `idle_before_sync=<bool>; <report>`, the first `false` when the fake defers.
pub fn queues(subject: &Subject, hooks: &FakeHooks) -> String {
    let rt = subject.start();
    let dev = rt.devices().unwrap().remove(0);
    let q = dev.queue().unwrap();
    let other = dev.queue().unwrap();
    let held = dev.alloc(4, MemKind::Device).unwrap();
    q.write(&held, 0, &[1, 2, 3, 4]).unwrap();
    let idle_before_sync = q.is_idle().unwrap();
    q.sync().unwrap();
    drop(held);
    for &kind in subject.kinds {
        let a = dev.alloc(1024, kind).unwrap();
        let b = dev.alloc(1024, kind).unwrap();
        let start = q.record().unwrap();
        q.write(&a, 0, &[3u8; 1024]).unwrap();
        q.fill(&a, 0, 16, &[1]).unwrap();
        q.fill(&a, 16, 16, &[2, 0]).unwrap();
        q.fill(&a, 32, 16, &[4, 0, 0, 0]).unwrap();
        q.fill(&a, 49, 6, &[5, 6]).unwrap(); // unaligned
        q.fill(&a, 60, 9, &[7, 8, 9]).unwrap(); // three bytes
        q.copy(&a, 0, &b, 512, 512).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
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
    drop((q, other, dev));
    rt.shutdown().unwrap();
    format!(
        "idle_before_sync={}; {}",
        subject.fake.fake_only(idle_before_sync),
        subject.report(hooks)
    )
}

/// The fault mode (`offload_testing::faults::workloads::run_all`) over the backend on its
/// fake: one injected error at every hal call the workloads reach, a panic at every site,
/// and the conformance suite through the wrapper; after each run the fake's live objects
/// and its violation count must be back where they were. Returns the report.
pub fn faults<B: Platform>(subject: &Subject, hooks: &FakeHooks) -> String
where
    B::Device: Ipc,
{
    let counters = || {
        let mut now: Vec<(&'static str, i64)> = subject
            .live
            .iter()
            .map(|&k| (k, i64::from(hooks.live(k))))
            .collect();
        now.push(("violations", hooks.violations().len() as i64));
        now
    };
    let done = crate::faults::workloads::run_all::<B>(&crate::faults::workloads::Subject {
        name: subject.library,
        fixture: subject.fixture,
        globals: true,
        extra: &|_| Ok(()),
        counters: &counters,
    });
    format!("{done}; {}", subject.report(hooks))
}

/// Whether a failure of `entry` may leave a driver object alive: a release the driver
/// refused (the object is then the driver's to leak, not offload's).
fn is_release(entry: &str) -> bool {
    ["Free", "Destroy", "Unload", "Release", "Close", "Put"]
        .iter()
        .any(|word| entry.contains(word))
}

/// The everyday fault-mode workload through a runtime with only this backend, then
/// shutdown; with a watchdog: a run that takes 60 s prints `hang` and exits the child.
fn watched_run(subject: &Subject, what: &str) -> Result<(), String> {
    let (done, finished) = std::sync::mpsc::channel();
    let entry = subject.entry;
    let fixture = subject.fixture;
    std::thread::spawn(move || {
        let run = || -> Result<(), String> {
            let rt = Offload::<Uninit, NoPlatforms>::builder()
                .backends([])
                .platform(entry())
                .start()
                .map_err(|e| e.to_string())?;
            let worked = crate::faults::workloads::everyday(
                &rt,
                &crate::faults::workloads::Subject {
                    name: "driver faults",
                    fixture,
                    globals: true,
                    extra: &|_| Ok(()),
                    counters: &Vec::new,
                },
            );
            let down = rt.shutdown().map(drop).map_err(|e| e.error().to_string());
            worked.map_err(|e| e.to_string()).and(down)
        };
        let _ = done.send(run());
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| {
            println!("RESULT hang: {what}");
            std::process::exit(0)
        })
}

/// The fake's own failure switch at every entry point the everyday workload reaches (its
/// first and its last call in one run): the failure must reach the caller as an error
/// naming the backend (or be absorbed where offload has a documented fallback, listed),
/// the fake must see no protocol violation and no object left alive — except the object
/// whose release the driver refused — and the next run must work. Returns
/// `<n> driver faults over <m> entry points; absorbed: [...]; not reached: [...]` (a call
/// number the faulted run never made, when an entry's call count varies between runs).
pub fn driver_faults(subject: &Subject, hooks: &FakeHooks) -> String {
    let live = || -> Vec<i32> { subject.live.iter().map(|k| hooks.live(k)).collect() };
    let before: std::collections::HashMap<String, u64> = hooks.entries().into_iter().collect();
    watched_run(subject, "the run without faults").unwrap();
    let calls: Vec<(String, u64)> = hooks
        .entries()
        .into_iter()
        .map(|(entry, n)| {
            let earlier = before.get(&entry).copied().unwrap_or(0);
            (entry, n - earlier)
        })
        .filter(|&(_, n)| n > 0)
        .collect();
    assert!(!calls.is_empty(), "the fake lists no entry point");
    assert_eq!(
        subject.report(hooks),
        subject.clean(),
        "the run without faults"
    );
    let backend = format!("{}:", (subject.entry)().kind().name());
    let (mut injected, mut absorbed, mut failed, mut missed) =
        (0, Vec::new(), Vec::new(), Vec::new());
    for (entry, n) in &calls {
        let mut nths = vec![1, *n];
        nths.dedup();
        for nth in nths {
            let what = format!("{entry} call #{nth}");
            let alive = live();
            let calls_before = hooks.calls(entry);
            hooks.fail(entry, i32::try_from(nth).unwrap(), subject.fail_code);
            let outcome = watched_run(subject, &what);
            // How often an entry is called can vary from run to run (which thread makes a
            // context current is the scheduler's choice): a run that never reached the
            // armed call injected nothing, and its failure is disarmed below.
            if hooks.calls(entry) - calls_before < nth {
                // Only a last call can be missed: every run makes an entry's first one.
                if nth == 1 {
                    failed.push(format!("{what}: the faulted run never called {entry}"));
                }
                missed.push(what.clone());
                hooks.clear();
                continue;
            }
            injected += 1;
            let violations: Vec<String> = hooks
                .violations()
                .into_iter()
                .filter(|v| !(is_release(entry) && v.contains("leak")))
                .collect();
            hooks.clear();
            match &outcome {
                Err(e) if !e.starts_with(&backend) => {
                    failed.push(format!("{what}: an error that names no backend: {e}"))
                }
                Err(_) => {}
                Ok(()) => absorbed.push(what.clone()),
            }
            if !violations.is_empty() {
                failed.push(format!("{what}: protocol violations {violations:?}"));
            }
            let left = live();
            let grew = left.iter().zip(&alive).any(|(now, was)| now > was);
            if grew && !is_release(entry) {
                failed.push(format!("{what}: left alive {:?} (was {alive:?})", left));
            }
            if let Err(e) = watched_run(subject, &format!("the run after {what}")) {
                failed.push(format!("{what}: the next run fails: {e}"));
            }
            hooks.clear();
        }
    }
    assert!(
        failed.is_empty(),
        "driver faults failed:\n{}",
        failed.join("\n")
    );
    format!(
        "{injected} driver faults over {} entry points; absorbed: {absorbed:?}; not reached: {missed:?}",
        calls.len()
    )
}

/// Bytes as lowercase hex, for a handle passed to a child in an environment variable.
///
/// ```
/// assert_eq!(offload_testing::fake::cases::hex(&[0, 0xab]), "00ab");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes [`hex`] wrote.
///
/// ```
/// assert_eq!(offload_testing::fake::cases::unhex("00ab"), [0, 0xab]);
/// ```
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The environment variable that hands the exported handle to the importing child.
const HANDLE_VAR: &str = "OFFLOAD_FAKE_IPC_HANDLE";

/// Exports a buffer; an import in this same process shares the allocation; a second
/// process imports it, reads it and writes into it, and the exporter sees what it wrote:
/// `same process wrote [5]; importer: <its line>; exporter sees [9, 9, 9, 9]; <report>`.
/// A handle with a descriptor goes to the child as its fd 3.
pub fn ipc_export(subject: &Subject, hooks: &FakeHooks) -> String {
    let rt = subject.start();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc_exportable(4096, MemKind::Device).unwrap();
    buf.write(0, &[7u8; 4096]).unwrap();
    let (bytes, fd) = buf.export().unwrap().into_parts();
    assert_eq!(
        fd.is_some(),
        subject.fd_handles,
        "a descriptor with the handle"
    );
    let here = dev
        .import(IpcHandle::from_parts(&bytes, fd.as_ref().map(|f| f.try_clone().unwrap())).unwrap())
        .unwrap();
    here.write(8, &[5]).unwrap();
    let mut mine = [0u8; 1];
    buf.read(8, &mut mine).unwrap();
    drop(here);
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(subject.fake.case_var, "ipc-import")
        .env(HANDLE_VAR, hex(&bytes));
    if let Some(fd) = fd {
        pass_as_fd3(&mut command, fd);
    }
    let out = command.output().unwrap();
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
        subject.report(hooks)
    )
}

/// Makes `fd` the child's descriptor 3.
fn pass_as_fd3(command: &mut std::process::Command, fd: std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: between fork and exec the closure only calls dup2, which is
    // async-signal-safe; `fd` stays open in the parent until the command has been spawned
    // (it is moved into the closure, which the command owns).
    unsafe {
        command.pre_exec(move || {
            let _keep = &fd;
            if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The importing child of [`ipc_export`]: reads, writes, imports the same handle again
/// (one open, shared), `read [7, 7, 7, 7] then [9, 9, 9, 9] with 1 open(s); <report>`.
pub fn ipc_import(subject: &Subject, hooks: &FakeHooks) -> String {
    use std::os::fd::{FromRawFd, OwnedFd};
    let bytes = unhex(&std::env::var(HANDLE_VAR).unwrap());
    let fd = subject.fd_handles.then(|| {
        // SAFETY: ipc_export passed the handle's descriptor as fd 3, which nothing else in
        // this process owns.
        unsafe { OwnedFd::from_raw_fd(3) }
    });
    let rt = subject.start();
    let dev = rt.devices().unwrap().remove(0);
    let again_fd = fd.as_ref().map(|f| f.try_clone().unwrap());
    let view = dev
        .import(IpcHandle::from_parts(&bytes, fd).unwrap())
        .unwrap();
    let mut out = [0u8; 16];
    view.read(0, &mut out).unwrap();
    view.write(100, &[9, 9, 9, 9]).unwrap();
    let again = dev
        .import(IpcHandle::from_parts(&bytes, again_fd).unwrap())
        .unwrap();
    let mut second = [0u8; 4];
    again.read(100, &mut second).unwrap();
    let opens = subject.fake.fake_only(if hooks.present() {
        hooks.calls(subject.ipc_open_call)
    } else {
        0
    });
    drop((view, again));
    rt.shutdown().unwrap();
    format!(
        "read {:?} then {second:?} with {opens} open(s); {}",
        &out[..4],
        subject.report(hooks)
    )
}

/// Runs the `leaky` case and checks that the fake reported exactly one leak, in the
/// child's report or at its exit; returns what it reported.
pub fn expect_leak_reported(subject: &Subject, dir: &std::path::Path) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(subject.fake.case_var, "leaky")
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no RESULT:\n{stdout}\n{stderr}"));
    let in_report = result.contains("leak");
    let at_exit = stderr.contains("VIOLATIONS: 1") && stderr.contains("leak");
    assert!(
        in_report != at_exit,
        "one leak report expected, in the report or at exit:\n{result}\n{stderr}"
    );
    if in_report {
        assert!(result.starts_with("violations=[\""), "{result}");
        result
    } else {
        stderr.into_owned()
    }
}

/// Checks that a case's line is exactly `expected` followed by the clean report.
pub fn expect_clean(
    subject: &Subject,
    dir: &std::path::Path,
    case: &str,
    defer: bool,
    expected: &str,
) {
    if defer
        && subject
            .fake
            .skip_on_real("deferred streams are a mode of the fake")
    {
        return;
    }
    let vars: &[(&str, &str)] = if defer {
        &[(subject.defer_var, "1")]
    } else {
        &[]
    };
    assert_eq!(
        subject.fake.run(dir, case, vars),
        format!("{expected}{}", subject.clean()),
        "case {case}, deferred: {defer}"
    );
}

/// The shared fake-backend tests of a vendor backend: its `child` test (the shared cases,
/// then `$extra`'s) and one `#[test]` per shared case, each asserting a clean report. `$B`
/// is the backend's platform type, `$P` a `Platforms` list with only it, `$subject` its
/// [`Subject`](crate::fake::cases::Subject), `$extra` a
/// `fn(&str, &FakeHooks) -> Option<String>` for its own cases.
///
/// ```ignore
/// offload_testing::fake_backend_tests!(SUBJECT, CudaPlatform, CudaOnly, own_cases);
/// ```
#[macro_export]
macro_rules! fake_backend_tests {
    ($subject:expr, $B:ty, $P:ty, $extra:expr) => {
        /// The child side: runs the case its parent named.
        #[test]
        fn child() {
            $crate::fake::cases::child::<$B, $P>(&$subject, $extra);
        }

        #[test]
        fn conformance_passes_on_the_fake_with_no_protocol_violation() {
            let Some(dir) = $subject.built() else { return };
            $crate::fake::cases::expect_clean(&$subject, &dir, "conformance", false, "");
        }

        #[test]
        fn conformance_passes_with_deferred_streams() {
            // The fake runs queued work only when something waits for it: ordering bugs show.
            let Some(dir) = $subject.built() else { return };
            $crate::fake::cases::expect_clean(&$subject, &dir, "conformance", true, "");
        }

        #[test]
        fn concurrent_runtimes_leave_nothing_behind() {
            let Some(dir) = $subject.built() else { return };
            $crate::fake::cases::expect_clean(&$subject, &dir, "runtime", false, "");
            $crate::fake::cases::expect_clean(&$subject, &dir, "runtime", true, "");
        }

        #[test]
        fn every_memory_kind_round_trips_with_no_protocol_violation() {
            let Some(dir) = $subject.built() else { return };
            $crate::fake::cases::expect_clean(&$subject, &dir, "memory", false, "");
        }

        #[test]
        fn the_fixture_loads_launches_and_has_its_global() {
            let Some(dir) = $subject.built() else { return };
            for defer in [false, true] {
                $crate::fake::cases::expect_clean(
                    &$subject,
                    &dir,
                    "programs",
                    defer,
                    "words=[7, 8, 8] g=99 read_global=99; ",
                );
            }
        }

        #[test]
        fn adopted_memory_is_the_owners_and_is_freed_once() {
            let Some(dir) = $subject.built() else { return };
            for defer in [false, true] {
                $crate::fake::cases::expect_clean(
                    &$subject,
                    &dir,
                    "adopt",
                    defer,
                    &format!(
                        "words=[1, 1, 84215045] same=true freed={}; ",
                        $subject.fake.fake_only(true)
                    ),
                );
            }
        }

        #[test]
        fn queued_writes_fills_copies_host_functions_and_events() {
            let Some(dir) = $subject.built() else { return };
            $crate::fake::cases::expect_clean(
                &$subject,
                &dir,
                "queues",
                false,
                &format!("idle_before_sync={}; ", $subject.fake.fake_only(true)),
            );
            $crate::fake::cases::expect_clean(
                &$subject,
                &dir,
                "queues",
                true,
                "idle_before_sync=false; ",
            );
        }

        #[test]
        fn bad_images_never_reach_the_driver() {
            let Some(dir) = $subject.built() else { return };
            let result = $subject.fake.run(&dir, "bad-images", &[]);
            let (counts, report) = result.split_once(" loads=").unwrap();
            let (refused, total) = counts["refused=".len()..].split_once('/').unwrap();
            assert_eq!(refused, total, "{result}");
            assert_eq!(
                report,
                format!("{} {}", $subject.fake.fake_only(0), $subject.clean()),
                "{result}"
            );
            println!("bad images refused before the driver: {refused}/{total}");
        }

        #[test]
        fn a_skipped_free_is_reported_by_the_fake() {
            if $subject
                .fake
                .skip_on_real("the fake's failure switch and leak report")
            {
                return;
            }
            let Some(dir) = $subject.built() else { return };
            let reported = $crate::fake::cases::expect_leak_reported(&$subject, &dir);
            println!("the fake reported, as it should: {reported}");
        }

        #[test]
        fn too_large_an_allocation_is_out_of_memory() {
            let Some(dir) = $subject.built() else { return };
            let expected: Vec<String> = $subject
                .kinds
                .iter()
                .map(|k| format!("{k:?}:{}", 1u64 << 40))
                .collect();
            $crate::fake::cases::expect_clean(
                &$subject,
                &dir,
                "oom",
                false,
                &format!("{}; ", expected.join(",")),
            );
        }

        #[test]
        fn every_injected_fault_is_reported_and_cleaned_up_on_the_fake() {
            if $subject
                .fake
                .skip_on_real("counts the fake's live objects after each fault")
            {
                return;
            }
            let Some(dir) = $subject.built() else { return };
            let result = $subject.fake.run(&dir, "faults", &[]);
            println!("fault mode on the fake: {result}");
            assert!(
                result.ends_with(&format!("; {}", $subject.clean())),
                "{result}"
            );
        }

        #[test]
        fn every_driver_entry_point_fails_cleanly() {
            if $subject.fake.skip_on_real("the fake's failure switch") {
                return;
            }
            let Some(dir) = $subject.built() else { return };
            let result = $subject.fake.run(&dir, "driver-faults", &[]);
            println!("the fake's failure switch: {result}");
            assert!(result.contains(" driver faults over "), "{result}");
        }

        #[test]
        fn ipc_between_two_processes() {
            let Some(dir) = $subject.built() else { return };
            let clean = $subject.clean();
            $crate::fake::cases::expect_clean(
                &$subject,
                &dir,
                "ipc-export",
                false,
                &format!(
                    "same process wrote [5]; importer: read [7, 7, 7, 7] then [9, 9, 9, 9] \
                     with {} open(s); {clean}; exporter sees [9, 9, 9, 9]; ",
                    $subject.fake.fake_only(1)
                ),
            );
        }
    };
}
