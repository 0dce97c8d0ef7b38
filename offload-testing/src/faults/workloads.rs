//! The workloads of every backend's fault-mode test, once: an everyday workload
//! that makes every kind of call (memory, programs, globals, queues, launches, queued
//! memory work, host functions, events, IPC, explicit releases), one that leaves every
//! release to shutdown's teardown (L4), one whose module callbacks call offload, and one
//! over IPC endpoints; [`run_all`] sweeps each with [`sweep`](super::sweep), probes a panic
//! at every site with [`panic_sweep`](super::panic_sweep), and runs the conformance suite
//! through the wrapper. A backend's test describes itself in a [`Subject`].
//!
//! Test support: a failed check panics, as a test would.
#![allow(clippy::unwrap_used, clippy::panic, clippy::missing_panics_doc)]

use std::any::Any;
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::Duration;

use crate::conformance::{self, Fixtures, SuiteConfig};
use crate::faults::{self, Site, SweepOptions};
use offload_core::{
    Device, Dims, Error, MemKind, Offload, PlatformEntry, Platforms, Program, Result, args, hal,
};

/// A backend's fault-mode test: what [`run_all`] needs beyond the backend's type.
pub struct Subject<'a> {
    /// The backend's name in the printed reports.
    pub name: &'a str,
    /// A program with the conformance kernels `add_one(buf, n)` and `noop()` (and, with
    /// `globals`, a `u32` global `g`).
    pub fixture: &'a [u8],
    /// Whether the backend's programs have globals (Vulkan's have none).
    pub globals: bool,
    /// Calls only this backend has (e.g. a program compiled from source), made by the
    /// everyday workload.
    pub extra: &'a (dyn Fn(&Device) -> Result<()> + Sync),
    /// The backend's own live-object counters, checked back at their start after each run.
    pub counters: &'a (dyn Fn() -> Vec<(&'static str, i64)> + Sync),
}

/// Backend `P` wrapped in [`Faulty`](super::Faulty), alone, for the conformance suite.
pub struct FaultyOnly<P>(std::marker::PhantomData<P>);

impl<P: hal::Platform> Platforms for FaultyOnly<P>
where
    P::Device: hal::Ipc,
{
    fn platforms() -> Vec<PlatformEntry> {
        vec![faults::entry_with_ipc::<P>()]
    }
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument {
        call: "faults workload",
        reason: what,
    }
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Every kind of call: memory, programs, globals, queues, launches, queued memory work,
/// host functions, events, IPC, and explicit releases.
pub fn everyday(rt: &Offload, subject: &Subject<'_>) -> Result<()> {
    let dev = rt.devices()?.remove(0);
    dev.info()?;
    let a = dev.alloc(64, MemKind::Device)?;
    let b = dev.alloc(64, MemKind::Device)?;
    a.write(0, &[1; 64])?;
    a.fill(32, 32, 2)?;
    b.copy_from(0, &a, 0, 64)?;
    b.copy_from(0, &b, 32, 16)?;
    // Device memory a backend cannot map says so (CUDA, HIP); that is no fault.
    match a.with_mapped(|bytes| bytes[63] = 3) {
        Err(Error::Unsupported { .. }) | Ok(()) => {}
        Err(e) => return Err(e),
    }
    let mut out = [0u8; 64];
    b.read(0, &mut out)?;
    if out[..16] != [2; 16] || out[16..32] != [1; 16] {
        return Err(invalid(format!("memory calls gave {out:?}")));
    }
    dev.validate(subject.fixture)?;
    let module = Program::new(subject.fixture).load(&dev)?;
    // What only this backend has (e.g. the host compiles a C program from source).
    (subject.extra)(&dev)?;
    let add_one = module.kernel("add_one")?;
    if subject.globals {
        module.write_global("g", 0, &7u32.to_ne_bytes())?;
        let mut g = [0u8; 4];
        module.read_global("g", 0, &mut g)?;
        if u32::from_ne_bytes(g) != 7 {
            return Err(invalid(format!("global reads {g:?}")));
        }
        module.global("g")?;
    }
    let q = dev.queue()?;
    let q2 = dev.queue()?;
    q.write(&a, 0, &[0; 16])?;
    q.fill(&a, 16, 16, &[0; 4])?;
    // SAFETY: add_one adds 1 to the first n = 8 u32s of its buffer, which holds 16.
    unsafe { q.launch(&add_one, Dims::for_num_elems(8), &args![&a, 8u32])? };
    q.copy(&a, 0, &b, 0, 32)?;
    let (tx, rx) = mpsc::channel();
    q.enqueue_host_fn(move || {
        let _ = tx.send(());
    })?;
    let start = q.record()?;
    q2.wait(&start)?;
    let end = q.record()?;
    end.sync()?;
    end.is_complete()?;
    end.elapsed_since(&start)?;
    q.is_idle()?;
    q.sync()?;
    q2.sync()?;
    if rx.try_recv().is_err() {
        return Err(invalid("the host function did not run".into()));
    }
    b.read(0, &mut out)?;
    if u32s(&out[..32]) != [1; 8] {
        return Err(invalid(format!("queued work gave {out:?}")));
    }
    let shared = dev.alloc_exportable(64, MemKind::Device)?;
    shared.write(0, &[9; 64])?;
    let mapped = dev.import(shared.export()?)?;
    mapped.read(0, &mut out)?;
    if out != [9; 64] {
        return Err(invalid(format!("imported memory reads {out:?}")));
    }
    mapped.free()?;
    shared.free()?;
    drop((start, end, q, q2, add_one));
    module.unload()?;
    a.free()?;
    b.free()
}

/// Handles the teardown workload keeps past shutdown (dropped at its next run: by then they
/// answer `Error::ShutDown`, and dropping them does nothing).
static KEPT: Mutex<Vec<Box<dyn Any + Send>>> = Mutex::new(Vec::new());

/// Makes objects of every kind, leaves work queued, and releases nothing: shutdown's
/// teardown (L4) drains, unloads, destroys and frees it all, so the faults of the release
/// calls are met there and must come back from `shutdown`.
fn teardown_workload(rt: &Offload, subject: &Subject<'_>) -> Result<()> {
    drop(std::mem::take(
        &mut *KEPT.lock().unwrap_or_else(PoisonError::into_inner),
    ));
    let dev = rt.devices()?.remove(0);
    let a = dev.alloc(64, MemKind::Device)?;
    a.write(0, &[1; 64])?;
    let module = Program::new(subject.fixture).load(&dev)?;
    let add_one = module.kernel("add_one")?;
    let q = dev.queue()?;
    // SAFETY: add_one adds 1 to the first n = 8 u32s of its buffer, which holds 16.
    unsafe { q.launch(&add_one, Dims::for_num_elems(8), &args![&a, 8u32])? };
    q.fill(&a, 32, 32, &[5; 4])?;
    let event = q.record()?;
    let shared = dev.alloc_exportable(64, MemKind::Device)?;
    let mapped = dev.import(shared.export()?)?;
    let kept: Vec<Box<dyn Any + Send>> = vec![
        Box::new(a),
        Box::new(module),
        Box::new(add_one),
        Box::new(q),
        Box::new(event),
        Box::new(shared),
        Box::new(mapped),
    ];
    KEPT.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(kept);
    Ok(())
}

/// Module callbacks that call offload: a fault inside `on_setup` fails the load (the module
/// is unloaded), one inside `on_teardown` fails the unload.
fn callback_workload(rt: &Offload, subject: &Subject<'_>) -> Result<()> {
    let dev = rt.devices()?.remove(0);
    let globals = subject.globals;
    let module = Program::new(subject.fixture)
        .on_setup(move |m| {
            m.kernel("noop")?;
            if globals {
                m.write_global("g", 0, &3u32.to_ne_bytes())?;
            }
            Ok(())
        })
        .on_teardown(move |m| {
            if globals {
                let mut g = [0u8; 4];
                m.read_global("g", 0, &mut g)?;
            } else {
                m.kernel("add_one")?;
            }
            Ok(())
        })
        .load(&dev)?;
    let q = dev.queue()?;
    let noop = module.kernel("noop")?;
    // SAFETY: noop touches nothing.
    unsafe { q.launch(&noop, Dims::grid([1, 1, 1]), &[])? };
    q.sync()?;
    drop((noop, q));
    module.unload()
}

/// Two IPC endpoints of this process stand in for two processes: a send exports (first
/// send) and the receiver imports, a second send hits the sender's cache, the views are
/// dropped, the endpoints closed and the memory freed.
fn endpoint_workload(rt: &Offload) -> Result<()> {
    let dev = rt.devices()?.remove(0);
    let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    let to_b = a.connect(b.name())?;
    let buf = dev.alloc_exportable(64, MemKind::Device)?;
    buf.write(0, &[5; 64])?;
    let mut out = [0u8; 64];
    for (tag, len) in [(7, 64), (8, 32)] {
        a.send(to_b, &buf, 0, len, tag)?;
        let got = b
            .recv_timeout(Duration::from_secs(5))?
            .ok_or_else(|| invalid(format!("message {tag} did not arrive")))?;
        got.buffer().read(0, &mut out[..len])?;
        if got.tag() != tag || out[..len] != vec![5; len][..] {
            return Err(invalid(format!("message {tag} reads {out:?}")));
        }
    }
    b.close()?;
    a.close()?;
    buf.free()
}

/// Every sweep, on backend `P` wrapped in [`Faulty`](super::Faulty): the everyday
/// workload, panics at each site it reaches, releases left to shutdown, offload calls
/// inside module callbacks, IPC endpoints, and the conformance suite through the wrapper
/// with no fault planned. Prints what it did and returns it in one line (injections per
/// workload, sites, panic probes); panics (a test failure) on any failed check.
///
/// ```no_run
/// use offload_testing::faults::workloads::{Subject, run_all};
/// use offload_core::reference::{Reference, fixture_image};
/// let fixture = fixture_image();
/// run_all::<Reference>(&Subject {
///     name: "reference",
///     fixture: &fixture,
///     globals: true,
///     extra: &|_| Ok(()),
///     counters: &Vec::new,
/// });
/// ```
pub fn run_all<P: hal::Platform>(subject: &Subject<'_>) -> String
where
    P::Device: hal::Ipc,
{
    let name = subject.name;
    let entry = faults::entry_with_ipc::<P>;
    let opts = SweepOptions {
        counters: subject.counters,
        skip: &|_: Site, _: u64| None,
        ..SweepOptions::default()
    };
    let report = faults::sweep(entry(), |rt: &Offload| everyday(rt, subject), &opts);
    println!("fault mode: {name}: {report}");
    for (site, n) in &report.sites {
        println!("  {site}: {n} calls");
    }
    assert!(report.failed.is_empty(), "{report}");
    assert!(report.passed.len() > 20, "{report}");

    // A backend panic (offload does not catch it) must leave the lifecycle usable.
    let sites: Vec<Site> = report.sites.iter().map(|&(s, _)| s).collect();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let bad = faults::panic_sweep(
        entry(),
        |rt: &Offload| everyday(rt, subject),
        &sites,
        Duration::from_secs(60),
    );
    std::panic::set_hook(hook);
    println!(
        "fault mode: {name}: {} panic probes, {} failed",
        sites.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "backend panics: {bad:?}");

    // Release calls met by shutdown's teardown instead of by the workload.
    let teardown = faults::sweep(
        entry(),
        |rt: &Offload| teardown_workload(rt, subject),
        &opts,
    );
    println!("fault mode: {name} (released by shutdown): {teardown}");
    let reached: Vec<String> = teardown
        .sites
        .iter()
        .map(|(s, n)| format!("{s}×{n}"))
        .collect();
    println!("  sites: {}", reached.join(" "));
    assert!(teardown.failed.is_empty(), "{teardown}");
    drop(std::mem::take(
        &mut *KEPT.lock().unwrap_or_else(PoisonError::into_inner),
    ));

    // Offload calls inside module callbacks.
    let callbacks = faults::sweep(
        entry(),
        |rt: &Offload| callback_workload(rt, subject),
        &opts,
    );
    println!("fault mode: {name} (module callbacks): {callbacks}");
    assert!(callbacks.failed.is_empty(), "{callbacks}");

    // IPC endpoints: export on a first send, import on receipt, unmapping on close.
    let endpoints = faults::sweep(
        entry(),
        endpoint_workload,
        &SweepOptions {
            timeout: Duration::from_secs(20),
            // The receiver's import error reaches `recv` typed (it used to be answered
            // `Failed` to the sender and dropped, leaving `recv` waiting).
            ..opts
        },
    );
    println!("fault mode: {name} (IPC endpoints): {endpoints}");
    let reached: Vec<String> = endpoints
        .sites
        .iter()
        .map(|(s, n)| format!("{s}×{n}"))
        .collect();
    println!("  sites: {}", reached.join(" "));
    assert!(endpoints.failed.is_empty(), "{endpoints}");

    // With no fault planned the wrapper is transparent: the backend still passes the
    // conformance suite through it, and every object it made was released.
    faults::clear();
    conformance::run::<FaultyOnly<P>>(
        &Fixtures {
            image: subject.fixture.to_vec(),
        },
        SuiteConfig::default(),
    );
    assert_eq!(faults::live().total(), 0, "{:?}", faults::live());
    println!(
        "fault mode: {name}: the conformance suite passes through the wrapper ({} sites reached)",
        faults::all_calls().len()
    );
    let count = |r: &faults::SweepReport| r.passed.len() + r.skipped.len();
    format!(
        "{}+{}+{}+{} injections over {} sites, {} panic probes",
        count(&report),
        count(&teardown),
        count(&callbacks),
        count(&endpoints),
        report.sites.len(),
        sites.len()
    )
}
