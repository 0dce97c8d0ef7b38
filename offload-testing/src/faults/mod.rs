//! Fault injection over the [`hal`] traits.
//!
//! [`Faulty<P>`] wraps any backend `P`: every [`hal`] method that can fail first counts the
//! call at its [`Site`] and consults a process-wide fault plan ([`plan`]); when the plan
//! names that call (the `n`th call of the site since the last [`clear`]), the wrapper
//! returns an injected backend error (or panics) instead of, or after, delegating to `P`.
//! [`calls`] tells a harness which sites a workload reached, and [`sweep`] injects one
//! failure at every call it reached, checking that offload reports it, shuts down, and
//! leaks nothing.
//!
//! The plan, the call counters and the live-object counters ([`live`]) are process-wide:
//! run one fault-injecting test at a time per process (the runtime's lifecycle is
//! process-wide too).
//!
//! # The two faults
//!
//! - [`Fault::Error`]: the call returns `Error::Driver { backend: P::KIND, call: <the hal
//!   method>, code: `[`INJECTED_CODE`]`, message: "injected fault at <site> call #n" }`.
//!   A call that creates an object fails before the backend sees it (nothing is created).
//!   A call that releases an object (`free`, `unload`, a queue's or an event's `destroy`,
//!   `deinit`) releases it in the backend and then reports the error: a driver that failed
//!   to release would leak in the backend, which is the backend's business, not offload's.
//! - [`Fault::Panic`]: the call panics before delegating. offload does not catch panics
//!   of backend code (the only `catch_unwind` of the core guards the exit hook): a backend
//!   must not panic, and a panic reaches the offload call that made it. This mode is for a
//!   backend's own unwind-safety tests; [`sweep`] injects errors only.
//!
//! ```standalone_crate
//! use offload_testing::faults::{self, Fault, Site};
//! use offload_core::{MemKind, Offload, reference::Reference};
//! faults::clear();
//! faults::plan(Site::Alloc, 2, Fault::Error);
//! let rt: Offload = Offload::builder()
//!     .backends([])
//!     .platform(faults::entry_with_ipc::<Reference>())
//!     .start()?;
//! let dev = rt.devices()?.remove(0);
//! let first = dev.alloc(4, MemKind::Device)?;
//! let e = dev.alloc(4, MemKind::Device).unwrap_err();
//! assert!(e.to_string().contains("injected fault at alloc call #2"), "{e}");
//! assert_eq!(faults::calls(Site::Alloc), 2);
//! first.free()?;
//! rt.shutdown()?;
//! faults::clear();
//! assert_eq!(faults::live().total(), 0);
//! # Ok::<(), offload_core::Error>(())
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::lock;
use offload_core::Config;
use offload_core::hal::panic_text;
use offload_core::hal::{
    self, BackendKind, CompilerId, DeviceInfo, Dims, Exported, GlobalInfo, HostFn, KernelArg,
    Language, MemKind, ParamKind, Source,
};
use offload_core::{Error, Result};
use offload_core::{Offload, PlatformEntry, Platforms};

// Its workloads launch the fixture kernels: `Queue::launch` is unsafe by contract.
#[allow(unsafe_code)]
pub mod workloads;

/// The driver code of an injected error.
pub const INJECTED_CODE: i64 = -999;

macro_rules! sites {
    ($($site:ident => $name:literal, $call:literal;)*) => {
        /// A [`hal`] method that can fail: where a fault can be injected.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Site {
            $(
                #[doc = concat!("`", $call, "`")]
                $site,
            )*
        }

        impl Site {
            /// Every site, in declaration order.
            pub const ALL: &'static [Site] = &[$(Site::$site),*];

            /// The site's short name (`"alloc"`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Site::$site => $name,)*
                }
            }

            /// The hal method, as an injected error's `call` names it (`"Device::alloc"`).
            pub fn call(self) -> &'static str {
                match self {
                    $(Site::$site => $call,)*
                }
            }
        }
    };
}

sites! {
    Open => "open", "Platform::open";
    Deinit => "deinit", "Platform::deinit";
    Info => "info", "Device::info";
    Alloc => "alloc", "Device::alloc";
    Free => "free", "Device::free";
    Read => "read", "Device::read";
    Write => "write", "Device::write";
    Fill => "fill", "Device::fill";
    Copy => "copy", "Device::copy";
    CopyWithin => "copy_within", "Device::copy_within";
    Map => "with_mapped", "Device::with_mapped";
    Load => "load", "Device::load";
    Validate => "validate", "Device::validate";
    Compiler => "compiler", "Device::compiler";
    Compile => "compile", "Device::compile";
    Queue => "queue", "Device::queue";
    DestroyQueue => "destroy_queue", "Queue::destroy";
    Launch => "launch", "Queue::launch";
    EnqueueWrite => "enqueue_write", "Queue::enqueue_write";
    EnqueueFill => "enqueue_fill", "Queue::enqueue_fill";
    EnqueueCopy => "enqueue_copy", "Queue::enqueue_copy";
    HostFn => "enqueue_host_fn", "Queue::enqueue_host_fn";
    Sync => "sync", "Queue::sync";
    IsIdle => "is_idle", "Queue::is_idle";
    Record => "record", "Queue::record";
    WaitEvent => "wait_event", "Queue::wait_event";
    SyncEvent => "sync_event", "Event::sync";
    IsComplete => "is_complete", "Event::is_complete";
    Elapsed => "elapsed", "Event::elapsed_since";
    DestroyEvent => "destroy_event", "Event::destroy";
    Kernel => "kernel", "Program::kernel";
    Global => "global", "Program::global";
    ReadGlobal => "read_global", "Program::read_global";
    WriteGlobal => "write_global", "Program::write_global";
    Unload => "unload", "Program::unload";
    AllocExportable => "alloc_exportable", "Ipc::alloc_exportable";
    Export => "export", "Ipc::export";
    Import => "import", "Ipc::import";
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call returns an `Error::Driver` with code [`INJECTED_CODE`].
    Error,
    /// The call panics (see the module documentation: offload does not catch it).
    Panic,
}

const SITES: usize = Site::ALL.len();

static PLAN: Mutex<Vec<(Site, u64, Fault)>> = Mutex::new(Vec::new());
static FIRED: Mutex<Vec<(Site, u64, Fault)>> = Mutex::new(Vec::new());
static CALLS: [AtomicU64; SITES] = [const { AtomicU64::new(0) }; SITES];

/// Plans `fault` at the `nth` call (1-based, counted since the last [`clear`]) of `site`.
pub fn plan(site: Site, nth: u64, fault: Fault) {
    lock(&PLAN).push((site, nth, fault));
}

/// Forgets the plan, the faults that fired and the call counters (not the live-object
/// counters, which follow the objects).
pub fn clear() {
    lock(&PLAN).clear();
    lock(&FIRED).clear();
    for c in &CALLS {
        c.store(0, Ordering::SeqCst);
    }
}

/// Calls of `site` since the last [`clear`] (those that failed by injection included).
pub fn calls(site: Site) -> u64 {
    CALLS[site as usize].load(Ordering::SeqCst)
}

/// Every site called since the last [`clear`], with its number of calls.
pub fn all_calls() -> Vec<(Site, u64)> {
    Site::ALL
        .iter()
        .map(|&s| (s, calls(s)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// The planned faults that fired since the last [`clear`]: site, call number, fault.
pub fn fired() -> Vec<(Site, u64, Fault)> {
    lock(&FIRED).clone()
}

/// Counts a call of `site`; the fault planned for it, if any, with the call's number.
fn hit(site: Site) -> Option<(u64, Fault)> {
    let n = CALLS[site as usize].fetch_add(1, Ordering::SeqCst) + 1;
    let mut plan = lock(&PLAN);
    let i = plan.iter().position(|&(s, k, _)| s == site && k == n)?;
    let (_, _, fault) = plan.remove(i);
    drop(plan);
    lock(&FIRED).push((site, n, fault));
    Some((n, fault))
}

/// The injected error of the `n`th call of `site` on backend `kind`.
pub fn injected(kind: BackendKind, site: Site, n: u64) -> Error {
    Error::Driver {
        backend: kind,
        call: site.call(),
        code: INJECTED_CODE,
        message: format!("injected fault at {site} call #{n}"),
    }
}

/// Whether `e` is an injected error, or contains one: in `Error::Multiple`, or as the
/// source of an `Error::Callback` (a callback whose offload call failed).
pub fn is_injected(e: &Error) -> bool {
    match e {
        Error::Driver { code, .. } => *code == INJECTED_CODE,
        Error::Multiple(all) => all.iter().any(is_injected),
        Error::Callback { source, .. } => source.downcast_ref::<Error>().is_some_and(is_injected),
        _ => false,
    }
}

/// Fails or panics if a fault is planned for this call of `site`.
fn check(kind: BackendKind, site: Site) -> Result<()> {
    match hit(site) {
        None => Ok(()),
        Some((n, Fault::Error)) => Err(injected(kind, site, n)),
        Some((n, Fault::Panic)) => panic!("{kind}: injected panic at {site} call #{n}"),
    }
}

/// For a call that releases an object: an error fault releases it first (`release`), then
/// reports the error; a panic fault panics first (the object is dropped unreleased).
fn releasing(kind: BackendKind, site: Site, release: impl FnOnce() -> Result<()>) -> Result<()> {
    match hit(site) {
        None => release(),
        Some((n, Fault::Error)) => {
            let _ = release();
            Err(injected(kind, site, n))
        }
        Some((n, Fault::Panic)) => panic!("{kind}: injected panic at {site} call #{n}"),
    }
}

/// Objects of the wrapped backends alive now, process-wide: made by a successful call and
/// not yet released by the hal call that releases them (kernels: not yet dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// Platforms opened and not deinitialised.
    pub platforms: i64,
    /// Buffers allocated or imported and not freed.
    pub buffers: i64,
    /// Programs loaded and not unloaded.
    pub programs: i64,
    /// Kernels looked up and not dropped.
    pub kernels: i64,
    /// Queues created and not destroyed.
    pub queues: i64,
    /// Events recorded and not destroyed.
    pub events: i64,
}

impl Live {
    /// All objects together.
    pub fn total(&self) -> i64 {
        self.platforms + self.buffers + self.programs + self.kernels + self.queues + self.events
    }
}

static LIVE: [AtomicI64; 6] = [const { AtomicI64::new(0) }; 6];
const PLATFORMS: usize = 0;
const BUFFERS: usize = 1;
const PROGRAMS: usize = 2;
const KERNELS: usize = 3;
const QUEUES: usize = 4;
const EVENTS: usize = 5;

fn made<T>(counter: usize, result: Result<T>) -> Result<T> {
    if result.is_ok() {
        LIVE[counter].fetch_add(1, Ordering::SeqCst);
    }
    result
}

fn released(counter: usize) {
    LIVE[counter].fetch_sub(1, Ordering::SeqCst);
}

/// The live-object counters of every wrapped backend.
pub fn live() -> Live {
    let get = |i: usize| LIVE[i].load(Ordering::SeqCst);
    Live {
        platforms: get(PLATFORMS),
        buffers: get(BUFFERS),
        programs: get(PROGRAMS),
        kernels: get(KERNELS),
        queues: get(QUEUES),
        events: get(EVENTS),
    }
}

/// Backend `P` with faults injected at the planned calls.
#[derive(Debug)]
pub struct Faulty<P: hal::Platform> {
    raw: P,
}

impl<P: hal::Platform> Faulty<P> {
    /// The wrapped platform.
    pub fn inner(&self) -> &P {
        &self.raw
    }
}

/// A device of [`Faulty<P>`].
pub struct FaultyDevice<P: hal::Platform> {
    raw: P::Device,
}

impl<P: hal::Platform> FaultyDevice<P> {
    /// The wrapped device.
    pub fn inner(&self) -> &P::Device {
        &self.raw
    }
}

/// A program of [`FaultyDevice<P>`].
pub struct FaultyProgram<P: hal::Platform> {
    raw: <P::Device as hal::Device>::Program,
}

/// A kernel of [`FaultyProgram<P>`].
pub struct FaultyKernel<P: hal::Platform> {
    raw: hal::KernelOf<P::Device>,
    platform: PhantomData<fn() -> P>,
}

impl<P: hal::Platform> Drop for FaultyKernel<P> {
    fn drop(&mut self) {
        released(KERNELS);
    }
}

/// A queue of [`FaultyDevice<P>`].
pub struct FaultyQueue<P: hal::Platform> {
    raw: Que<P>,
}

/// An event of a [`FaultyQueue<P>`].
pub struct FaultyEvent<P: hal::Platform> {
    raw: Evt<P>,
}

type Buf<P> = <<P as hal::Platform>::Device as hal::Device>::Buffer;
type Que<P> = <<P as hal::Platform>::Device as hal::Device>::Queue;
type Evt<P> = <<P as hal::Platform>::Device as hal::Device>::Event;

impl<P: hal::Platform> hal::Platform for Faulty<P> {
    type Device = FaultyDevice<P>;
    const KIND: BackendKind = P::KIND;

    fn open(config: &Config) -> Result<Self> {
        check(P::KIND, Site::Open)?;
        made(PLATFORMS, P::open(config).map(|raw| Faulty { raw }))
    }

    fn name(&self) -> String {
        format!("faulty {}", self.raw.name())
    }

    fn devices(&self) -> Vec<FaultyDevice<P>> {
        self.raw
            .devices()
            .into_iter()
            .map(|raw| FaultyDevice { raw })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        released(PLATFORMS);
        releasing(P::KIND, Site::Deinit, || self.raw.deinit())
    }

    fn may_run(image: &[u8]) -> bool {
        P::may_run(image)
    }
}

impl<P: hal::Platform> hal::Device for FaultyDevice<P> {
    type Buffer = Buf<P>;
    type Program = FaultyProgram<P>;
    type Queue = FaultyQueue<P>;
    type Event = FaultyEvent<P>;

    fn info(&self) -> Result<DeviceInfo> {
        check(P::KIND, Site::Info)?;
        self.raw.info()
    }

    fn alloc(&self, size: usize, kind: MemKind) -> Result<Buf<P>> {
        check(P::KIND, Site::Alloc)?;
        made(BUFFERS, self.raw.alloc(size, kind))
    }

    fn free(&self, buffer: Buf<P>) -> Result<()> {
        released(BUFFERS);
        releasing(P::KIND, Site::Free, || self.raw.free(buffer))
    }

    fn read(&self, buffer: &Buf<P>, offset: usize, dst: &mut [u8]) -> Result<()> {
        check(P::KIND, Site::Read)?;
        self.raw.read(buffer, offset, dst)
    }

    fn write(&self, buffer: &mut Buf<P>, offset: usize, src: &[u8]) -> Result<()> {
        check(P::KIND, Site::Write)?;
        self.raw.write(buffer, offset, src)
    }

    fn fill(&self, buffer: &mut Buf<P>, offset: usize, len: usize, value: u8) -> Result<()> {
        check(P::KIND, Site::Fill)?;
        self.raw.fill(buffer, offset, len, value)
    }

    fn copy(
        &self,
        src: &Buf<P>,
        src_offset: usize,
        dst: &mut Buf<P>,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        check(P::KIND, Site::Copy)?;
        self.raw.copy(src, src_offset, dst, dst_offset, len)
    }

    fn copy_within(
        &self,
        buffer: &mut Buf<P>,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        check(P::KIND, Site::CopyWithin)?;
        self.raw.copy_within(buffer, src_offset, dst_offset, len)
    }

    fn with_mapped(&self, buffer: &mut Buf<P>, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        check(P::KIND, Site::Map)?;
        self.raw.with_mapped(buffer, f)
    }

    fn pending(&self, buffer: &Buf<P>) -> Option<hal::Pending> {
        self.raw.pending(buffer)
    }

    fn load(&self, image: &[u8]) -> Result<FaultyProgram<P>> {
        check(P::KIND, Site::Load)?;
        made(
            PROGRAMS,
            self.raw.load(image).map(|raw| FaultyProgram { raw }),
        )
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        check(P::KIND, Site::Validate)?;
        self.raw.validate(image)
    }

    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        check(P::KIND, Site::Compiler)?;
        self.raw.compiler(language)
    }

    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        check(P::KIND, Site::Compile)?;
        self.raw.compile(source)
    }

    fn queue(&self) -> Result<FaultyQueue<P>> {
        check(P::KIND, Site::Queue)?;
        made(QUEUES, self.raw.queue().map(|raw| FaultyQueue { raw }))
    }
}

impl<P: hal::Platform> hal::Queue<FaultyDevice<P>> for FaultyQueue<P> {
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        kernel: &FaultyKernel<P>,
        dims: &Dims,
        args: &[KernelArg<'_, Buf<P>>],
    ) -> Result<()> {
        check(P::KIND, Site::Launch)?;
        // SAFETY: our caller took on the launch contract for this kernel and these
        // arguments; they are passed on unchanged.
        unsafe { self.raw.launch(&kernel.raw, dims, args) }
    }

    fn enqueue_write(&self, buffer: &Buf<P>, offset: usize, data: Vec<u8>) -> Result<()> {
        check(P::KIND, Site::EnqueueWrite)?;
        self.raw.enqueue_write(buffer, offset, data)
    }

    fn enqueue_fill(
        &self,
        buffer: &Buf<P>,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        check(P::KIND, Site::EnqueueFill)?;
        self.raw.enqueue_fill(buffer, offset, len, pattern)
    }

    fn enqueue_copy(
        &self,
        src: &Buf<P>,
        src_offset: usize,
        dst: &Buf<P>,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        check(P::KIND, Site::EnqueueCopy)?;
        self.raw.enqueue_copy(src, src_offset, dst, dst_offset, len)
    }

    fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        check(P::KIND, Site::HostFn)?;
        self.raw.enqueue_host_fn(f)
    }

    fn sync(&self) -> Result<()> {
        check(P::KIND, Site::Sync)?;
        self.raw.sync()
    }

    fn is_idle(&self) -> Result<bool> {
        check(P::KIND, Site::IsIdle)?;
        self.raw.is_idle()
    }

    fn record(&self) -> Result<FaultyEvent<P>> {
        check(P::KIND, Site::Record)?;
        made(EVENTS, self.raw.record().map(|raw| FaultyEvent { raw }))
    }

    fn wait_event(&self, event: &FaultyEvent<P>) -> Result<()> {
        check(P::KIND, Site::WaitEvent)?;
        self.raw.wait_event(&event.raw)
    }

    fn destroy(self) -> Result<()> {
        released(QUEUES);
        releasing(P::KIND, Site::DestroyQueue, || self.raw.destroy())
    }
}

impl<P: hal::Platform> hal::Event for FaultyEvent<P> {
    fn sync(&self) -> Result<()> {
        check(P::KIND, Site::SyncEvent)?;
        self.raw.sync()
    }

    fn is_complete(&self) -> Result<bool> {
        check(P::KIND, Site::IsComplete)?;
        self.raw.is_complete()
    }

    fn elapsed_since(&self, start: &FaultyEvent<P>) -> Result<Duration> {
        check(P::KIND, Site::Elapsed)?;
        self.raw.elapsed_since(&start.raw)
    }

    fn destroy(self) -> Result<()> {
        released(EVENTS);
        releasing(P::KIND, Site::DestroyEvent, || self.raw.destroy())
    }
}

impl<P: hal::Platform> hal::Program for FaultyProgram<P> {
    type Kernel = FaultyKernel<P>;

    fn kernel(&self, name: &str) -> Result<FaultyKernel<P>> {
        check(P::KIND, Site::Kernel)?;
        made(
            KERNELS,
            self.raw.kernel(name).map(|raw| FaultyKernel {
                raw,
                platform: PhantomData,
            }),
        )
    }

    fn verified(&self) -> bool {
        self.raw.verified()
    }

    fn params(kernel: &FaultyKernel<P>) -> &[ParamKind] {
        <<P::Device as hal::Device>::Program as hal::Program>::params(&kernel.raw)
    }

    fn kernels(&self) -> Vec<String> {
        self.raw.kernels()
    }

    fn globals(&self) -> Vec<String> {
        self.raw.globals()
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        check(P::KIND, Site::Global)?;
        self.raw.global(name)
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        check(P::KIND, Site::ReadGlobal)?;
        self.raw.read_global(name, offset, dst)
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        check(P::KIND, Site::WriteGlobal)?;
        self.raw.write_global(name, offset, src)
    }

    fn unload(self) -> Result<()> {
        released(PROGRAMS);
        let raw = self.raw;
        releasing(P::KIND, Site::Unload, || raw.unload())
    }
}

impl<P: hal::Platform> hal::Ipc for FaultyDevice<P>
where
    P::Device: hal::Ipc,
{
    fn uuid(&self) -> [u8; 16] {
        self.raw.uuid()
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<Buf<P>> {
        check(P::KIND, Site::AllocExportable)?;
        made(BUFFERS, self.raw.alloc_exportable(size, kind))
    }

    fn export(&self, buffer: &Buf<P>) -> Result<Exported> {
        check(P::KIND, Site::Export)?;
        self.raw.export(buffer)
    }

    fn import(&self, exported: Exported) -> Result<Buf<P>> {
        // On an injected failure `exported` (and its fd) is dropped, i.e. closed.
        check(P::KIND, Site::Import)?;
        made(BUFFERS, self.raw.import(exported))
    }
}

/// The entry that opens [`Faulty<P>`] (without IPC: see [`entry_with_ipc`]).
pub fn entry<P: hal::Platform>() -> PlatformEntry {
    PlatformEntry::of::<Faulty<P>>()
}

/// The entry that opens [`Faulty<P>`] with its devices' IPC.
pub fn entry_with_ipc<P: hal::Platform>() -> PlatformEntry
where
    P::Device: hal::Ipc,
{
    PlatformEntry::with_ipc::<Faulty<P>>()
}

/// What [`sweep`] did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// The sites the workload reached (with init and shutdown), with their call counts.
    pub sites: Vec<(Site, u64)>,
    /// The (site, call) injections that ran and passed every check.
    pub passed: Vec<(Site, u64)>,
    /// The injections skipped by the caller's `skip`, with the reason it gave.
    pub skipped: Vec<(Site, u64, &'static str)>,
    /// The injections that failed a check, with what went wrong.
    pub failed: Vec<(Site, u64, String)>,
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} injections over {} sites: {} passed, {} skipped, {} failed",
            self.passed.len() + self.skipped.len() + self.failed.len(),
            self.sites.len(),
            self.passed.len(),
            self.skipped.len(),
            self.failed.len()
        )?;
        for (site, n, why) in &self.skipped {
            write!(f, "\n  skipped {site} #{n}: {why}")?;
        }
        for (site, n, why) in &self.failed {
            write!(f, "\n  FAILED {site} #{n}: {why}")?;
        }
        Ok(())
    }
}

/// How [`sweep`] runs.
pub struct SweepOptions<'a> {
    /// Counters of the backend that must come back to their value before the run
    /// (e.g. the host backend's live allocations and loads minus unloads).
    pub counters: &'a (dyn Fn() -> Vec<(&'static str, i64)> + Sync),
    /// Which (site, call) injections to skip, with the reason (a known bug).
    pub skip: &'a (dyn Fn(Site, u64) -> Option<&'static str> + Sync),
    /// Every call of a site is injected up to this many calls; beyond it, the first
    /// `all_up_to` calls and the last.
    pub all_up_to: u64,
    /// How long one run may take before it counts as a hang.
    pub timeout: Duration,
}

impl Default for SweepOptions<'_> {
    fn default() -> Self {
        SweepOptions {
            counters: &|| Vec::new(),
            skip: &|_, _| None,
            all_up_to: 16,
            timeout: Duration::from_secs(60),
        }
    }
}

/// One run: init (`Offload::builder().backends([]).platform(entry).compile_cache(None)`),
/// the workload, shutdown. Every error met, in order; whether the workload ran.
fn run_once<F, R>(entry: PlatformEntry, workload: &F) -> std::result::Result<Vec<Error>, String>
where
    F: Fn(&Offload<offload_core::Ready, R>) -> Result<()>,
    R: Platforms,
{
    let mut errors = Vec::new();
    let rt = match Offload::<offload_core::Uninit, R>::builder()
        .backends([])
        .platform(entry)
        // No disk cache: a source compiled in one run would not be compiled in the next,
        // and the sites a run reaches must not depend on the runs before it.
        .compile_cache(None)
        .start()
    {
        Ok(rt) => rt,
        Err(e) => {
            errors.push(e);
            return Ok(errors);
        }
    };
    if let Err(e) = workload(&rt) {
        // The first error after the fault must be the fault's, as the backend reported it.
        if !fired().is_empty() && !is_injected(&e) {
            let _ = rt.shutdown();
            return Err(format!(
                "the workload failed with another error than the injected one: {e}"
            ));
        }
        errors.push(e);
    }
    match rt.shutdown() {
        Ok(down) if !down.was_last() => return Err("shutdown was not the last".into()),
        Ok(_) => {}
        Err(e) => {
            if !e.was_last() {
                return Err(format!("shutdown was not the last: {e}"));
            }
            errors.push(e.into_parts().1);
        }
    }
    Ok(errors)
}

/// Runs `run_once` on a thread of its own: a panic or a hang is an `Err` saying so.
fn guarded<F, R>(
    entry: PlatformEntry,
    workload: &F,
    timeout: Duration,
) -> std::result::Result<Vec<Error>, String>
where
    F: Fn(&Offload<offload_core::Ready, R>) -> Result<()> + Sync,
    R: Platforms,
{
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = s.spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_once(entry, workload)
            }));
            let _ = tx.send(());
            r
        });
        match rx.recv_timeout(timeout) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // The scope would wait for the hung thread forever: fail loudly instead.
                eprintln!("fault sweep: a run hung for {timeout:?}; aborting");
                std::process::abort();
            }
        }
        match handle.join() {
            Ok(Ok(r)) => r,
            Ok(Err(p)) | Err(p) => Err(format!("panicked: {}", panic_text(&*p))),
        }
    })
}

fn snapshot(opts: &SweepOptions<'_>) -> (Live, Vec<(&'static str, i64)>) {
    (live(), (opts.counters)())
}

fn leaks(before: &(Live, Vec<(&'static str, i64)>), opts: &SweepOptions<'_>) -> Option<String> {
    let after = snapshot(opts);
    (after != *before).then(|| format!("counters {before:?} became {after:?}"))
}

/// Injects one error at every call of every site that `workload` reaches on backend `P`
/// (opened through `entry`, e.g. [`entry_with_ipc::<P>()`](entry_with_ipc), by
/// `Offload::builder().backends([]).platform(entry).compile_cache(None).start()`), with
/// init and shutdown, and checks each time that:
///
/// - the injected error reached the caller: returned by `init`, by the workload, or by
///   `shutdown` (errors of drops are deferred to it), typed (`Error::Driver`, code
///   [`INJECTED_CODE`]) and naming the backend and the hal call in its text; an error the
///   workload returns after the fault fired is the injected one itself;
/// - shutdown completed (no panic, no hang) and deinitialised the runtime;
/// - [`take_unreported_errors`](offload_core::take_unreported_errors) holds nothing of it;
/// - the wrapper's live-object counters and `opts.counters` came back to their values
///   before the run;
/// - a following run without faults succeeds, and leaves the counters as they were.
///
/// The workload runs once first without faults (it must succeed) to find the sites.
/// Runs one at a time; do not run anything else on offload in the process meanwhile.
pub fn sweep<R, F>(entry: PlatformEntry, workload: F, opts: &SweepOptions<'_>) -> SweepReport
where
    R: Platforms,
    F: Fn(&Offload<offload_core::Ready, R>) -> Result<()> + Sync,
{
    let mut report = SweepReport::default();
    let _ = offload_core::take_unreported_errors();
    clear();
    let start = snapshot(opts);
    match guarded(entry, &workload, opts.timeout) {
        Ok(errors) if errors.is_empty() => {}
        Ok(errors) => panic!("fault sweep: the workload fails without faults: {errors:?}"),
        Err(e) => panic!("fault sweep: the workload fails without faults: {e}"),
    }
    report.sites = all_calls();
    clear();
    if let Some(leak) = leaks(&start, opts) {
        panic!("fault sweep: the run without faults leaks: {leak}");
    }
    let mut cases = Vec::new();
    for &(site, count) in &report.sites {
        for n in 1..=count.min(opts.all_up_to) {
            cases.push((site, n));
        }
        if count > opts.all_up_to {
            cases.push((site, count));
        }
    }
    for (site, n) in cases {
        if let Some(why) = (opts.skip)(site, n) {
            report.skipped.push((site, n, why));
            continue;
        }
        match one_case(entry, &workload, opts, site, n) {
            Ok(()) => report.passed.push((site, n)),
            Err(why) => report.failed.push((site, n, why)),
        }
    }
    clear();
    report
}

fn one_case<R, F>(
    entry: PlatformEntry,
    workload: &F,
    opts: &SweepOptions<'_>,
    site: Site,
    n: u64,
) -> std::result::Result<(), String>
where
    R: Platforms,
    F: Fn(&Offload<offload_core::Ready, R>) -> Result<()> + Sync,
{
    let before = snapshot(opts);
    clear();
    plan(site, n, Fault::Error);
    let outcome = guarded(entry, workload, opts.timeout);
    let fired = fired();
    clear();
    let unreported = offload_core::take_unreported_errors();
    let errors = outcome?;
    let mut problems = Vec::new();
    if fired.is_empty() {
        problems.push("the fault was not reached (the workload is not deterministic?)".into());
    } else {
        let kind = entry.kind();
        let found = errors.iter().flat_map(Error::iter).find(|e| is_injected(e));
        match found {
            None => problems.push(format!(
                "the injected error never reached the caller (errors: {errors:?})"
            )),
            Some(e) => {
                let text = e.to_string();
                if !text.contains(kind.name()) || !text.contains(site.call()) {
                    problems.push(format!(
                        "the error does not name {kind} and the call: {text}"
                    ));
                }
            }
        }
    }
    if !unreported.is_empty() {
        problems.push(format!("unreported errors: {unreported:?}"));
    }
    if let Some(leak) = leaks(&before, opts) {
        problems.push(format!("after the fault: {leak}"));
    }
    match guarded(entry, workload, opts.timeout) {
        Ok(errors) if errors.is_empty() => {}
        Ok(errors) => problems.push(format!("the next run without faults failed: {errors:?}")),
        Err(e) => problems.push(format!("the next run without faults: {e}")),
    }
    let unreported = offload_core::take_unreported_errors();
    if !unreported.is_empty() {
        problems.push(format!(
            "unreported errors after the next run: {unreported:?}"
        ));
    }
    if let Some(leak) = leaks(&before, opts) {
        problems.push(format!("after the next run: {leak}"));
    }
    clear();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Plans a [`Fault::Panic`] at the first call of each of `sites` in turn and runs init,
/// `workload` and shutdown as [`sweep`] does; then runs them again without faults. Returns
/// the sites where something went wrong: no panic reached the caller, or the next run
/// failed, panicked or hung (after `timeout`, the process aborts). offload does not catch
/// backend panics (see the module documentation); this checks that one leaves the
/// lifecycle usable. The objects the panic dropped unreleased may leak in the backend, so
/// counters are not compared, and the errors of the run with the panic are discarded.
///
/// Panics print through the panic hook: a caller that wants a quiet log installs one.
pub fn panic_sweep<R, F>(
    entry: PlatformEntry,
    workload: F,
    sites: &[Site],
    timeout: Duration,
) -> Vec<(Site, String)>
where
    R: Platforms,
    F: Fn(&Offload<offload_core::Ready, R>) -> Result<()> + Sync,
{
    let mut failed = Vec::new();
    for &site in sites {
        clear();
        plan(site, 1, Fault::Panic);
        let outcome = guarded(entry, &workload, timeout);
        let reached = !fired().is_empty();
        clear();
        let _ = offload_core::take_unreported_errors();
        let mut problems = Vec::new();
        match outcome {
            Err(p) if p.contains("injected panic") => {}
            Err(p) => problems.push(format!("another panic than the injected one: {p}")),
            Ok(errors) if !reached => problems.push(format!("not reached ({errors:?})")),
            Ok(errors) => problems.push(format!("no panic reached the caller ({errors:?})")),
        }
        match guarded(entry, &workload, timeout) {
            Ok(errors) if errors.is_empty() => {}
            Ok(errors) => problems.push(format!("the next run failed: {errors:?}")),
            Err(e) => problems.push(format!("the next run: {e}")),
        }
        let _ = offload_core::take_unreported_errors();
        if !problems.is_empty() {
            failed.push((site, problems.join("; ")));
        }
    }
    clear();
    failed
}
