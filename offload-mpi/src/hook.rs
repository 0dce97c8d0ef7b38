//! The finalize hook (M1): an attribute on `MPI_COMM_SELF` whose delete callback shuts
//! offload down at the start of `MPI_Finalize`. Owns the process-wide hook state, the
//! keyval FFI and the C callback (the crate's other `unsafe` is the staged sends' bytes,
//! in `comm`). Must not let a panic
//! reach MPI, nor free a communicator after finalize.
//!
//! Must not hang on a dead rank either: MPICH never reports one (a barrier or receive
//! with it waits forever), so the protocol is made of point-to-point messages it polls
//! (`exchange`), looking every [`LIVENESS_POLL`] whether the ranks it waits for died
//! (`procs`), and each wait ends after `OFFLOAD_MPI_FINALIZE_TIMEOUT` at the latest. Sends
//! that cannot complete are abandoned, never waited for (`settle`). See the crate docs,
//! "A rank that dies".

use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpi::environment::Universe;
use mpi::ffi;
use mpi::traits::*;
use offload_core::{Offload, Platforms, Ready, Result};

use crate::comm::{
    CloseAtFinalize, Comm, LIVENESS_POLL, Lost, Staged, lock, receive_bytes, settle,
};
use crate::{FINALIZE_TIMEOUT_ENV, mpi_error};

/// The MPI tag of the sentinel that ends a rank's offload traffic on a communicator.
pub(crate) const SENTINEL_TAG: i32 = 0x7ff0;
/// The MPI tags of the tokens of the finalize protocol's two barriers (on the duplicate of
/// the world, which carries nothing else).
const BARRIER_TAGS: [i32; 2] = [0x7ff1, 0x7ff2];
/// How long each wait of the finalize protocol waits for ranks, unless
/// `OFFLOAD_MPI_FINALIZE_TIMEOUT` says otherwise.
pub(crate) const FINALIZE_TIMEOUT: Duration = Duration::from_secs(60);

type ShutdownFn = Box<dyn FnOnce() -> (bool, Vec<String>) + Send>;

struct Hook {
    /// Gives back the runtime reference `attach` was handed: (was it the last, errors).
    /// `None` once [`give_back`] did.
    shutdown: Option<ShutdownFn>,
    /// The duplicate of the world taken at `attach`, for the finalize barriers.
    comm: Arc<Comm>,
    /// The communicators of every `Ranks`, drained at finalize.
    ranks: Vec<Arc<Comm>>,
    /// The job cache, closed first at finalize.
    job_cache: Option<Arc<dyn CloseAtFinalize>>,
}

enum State {
    Detached,
    Attached(Hook),
    Finalized,
}

static HOOK: Mutex<State> = Mutex::new(State::Detached);
static REPORT: Mutex<Option<FinalizeReport>> = Mutex::new(None);

/// What the finalize callback did on this rank, for [`finalize_report`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FinalizeReport {
    /// The callback ran its protocol and gave back the runtime reference (`shutdown`
    /// returned, with or without errors).
    pub shut_down: bool,
    /// That reference was the last one: the runtime was deinitialised inside
    /// `MPI_Finalize` (queues drained, IPC peers unmapped).
    pub was_last: bool,
    /// Staged messages no one received, discarded by the sentinel exchange.
    pub discarded: usize,
    /// Errors met (shutdown steps that failed, a panic caught), in words.
    pub errors: Vec<String>,
    /// Ranks (of `MPI_COMM_WORLD`) found dead — their process on this node ended — before
    /// or during the protocol: it neither sent to them nor waited for them.
    pub dead: Vec<i32>,
    /// Ranks (of `MPI_COMM_WORLD`) not known dead that did not answer within the
    /// protocol's timeout (`OFFLOAD_MPI_FINALIZE_TIMEOUT`): a rank of another node that
    /// died, or one that never reached `MPI_Finalize`. The protocol went on without them.
    pub unresponsive: Vec<i32>,
    /// Sends (staged messages, sentinels, barrier tokens) to dead or unresponsive ranks
    /// that could not complete: left to MPI, their bytes never freed.
    pub abandoned: usize,
}

/// Hooks the shutdown of `rt` to `MPI_Finalize` (the drop of `universe`): `rt` is a
/// reference of its own (pass `rt.clone()` to keep using yours), given back inside
/// `MPI_Finalize` after the finalize protocol of the [crate docs](crate). When it is the
/// last reference then, the runtime is deinitialised there; a reference the program still
/// holds keeps it alive instead (it shuts down when that is dropped, without MPI).
///
/// Collective over `MPI_COMM_WORLD` (it duplicates it). Once per process:
/// `Error::InvalidArgument` on a second call, also after finalize.
pub fn attach<P: Platforms>(universe: &Universe, rt: Offload<Ready, P>) -> Result<()>
where
    Offload<Ready, P>: Send,
{
    const CALL: &str = "offload_mpi::attach";
    let mut state = lock(&HOOK);
    if !matches!(*state, State::Detached) {
        return Err(offload_core::Error::InvalidArgument {
            call: CALL,
            reason: "offload is already attached to MPI_Finalize in this process".into(),
        });
    }
    let comm = Comm::new(universe.world().duplicate());
    let mut key: c_int = 0;
    // SAFETY: MPI is initialised (a `Universe` exists and is borrowed); the copy function
    // is null (MPI_COMM_NULL_COPY_FN: COMM_SELF is never duplicated with it) and the
    // delete function is an `extern "C"` function that catches every panic.
    let rc =
        unsafe { ffi::MPI_Comm_create_keyval(None, Some(on_finalize), &mut key, ptr::null_mut()) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(mpi_error(
            CALL,
            format!("MPI_Comm_create_keyval failed ({rc})"),
        ));
    }
    // SAFETY: `RSMPI_COMM_SELF` is the predefined MPI_COMM_SELF, valid while MPI is
    // initialised; the attribute value is unused (null) and `key` was just created.
    let rc = unsafe { ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, key, ptr::null_mut()) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(mpi_error(CALL, format!("MPI_Comm_set_attr failed ({rc})")));
    }
    *state = State::Attached(Hook {
        shutdown: Some(Box::new(move || match rt.shutdown() {
            Ok(down) => (down.was_last(), Vec::new()),
            Err(e) => {
                let last = e.was_last();
                (last, e.errors().map(ToString::to_string).collect())
            }
        })),
        comm,
        ranks: Vec::new(),
        job_cache: None,
    });
    Ok(())
}

/// Gives back the runtime reference [`attach`] was handed, now (the program wants to
/// shut offload down itself before `MPI_Finalize`): `None` when there is none to give
/// back (not attached, given back already, or finalize ran). The report says whether it
/// was the last reference. Finalize then still runs the MPI part of its protocol
/// (sentinels, barriers), and reports `shut_down: false`.
pub fn give_back() -> Option<FinalizeReport> {
    let shutdown = match &mut *lock(&HOOK) {
        State::Attached(hook) => hook.shutdown.take()?,
        _ => return None,
    };
    // Outside the lock: a shutdown may take a while (it drains queues, waits for unmaps).
    let (was_last, errors) = shutdown();
    Some(FinalizeReport {
        shut_down: true,
        was_last,
        errors,
        ..FinalizeReport::default()
    })
}

/// Whether [`attach`] hooked offload to `MPI_Finalize` and finalize has not run yet.
pub fn is_attached() -> bool {
    matches!(*lock(&HOOK), State::Attached(_))
}

/// What the finalize callback did in this process: `None` before `MPI_Finalize` ran it (or
/// when nothing was attached).
pub fn finalize_report() -> Option<FinalizeReport> {
    lock(&REPORT).clone()
}

/// Registers a `Ranks` communicator for the sentinel exchange at finalize.
pub(crate) fn register(call: &'static str, comm: Arc<Comm>) -> Result<()> {
    match &mut *lock(&HOOK) {
        State::Attached(hook) => {
            hook.ranks.push(comm);
            Ok(())
        }
        _ => Err(offload_core::Error::InvalidArgument {
            call,
            reason: "offload_mpi::attach must run first (and MPI_Finalize not yet)".into(),
        }),
    }
}

/// Whether a job cache may be registered now: attached, finalize not run, none yet.
pub(crate) fn may_register_job_cache(call: &'static str) -> Result<()> {
    match &*lock(&HOOK) {
        State::Attached(hook) if hook.job_cache.is_none() => Ok(()),
        State::Attached(_) => Err(offload_core::Error::InvalidArgument {
            call,
            reason: "a job cache is installed in this process already".into(),
        }),
        _ => Err(offload_core::Error::InvalidArgument {
            call,
            reason: "offload_mpi::attach must run first (and MPI_Finalize not yet)".into(),
        }),
    }
}

/// Registers the job cache, for its close at the start of finalize.
pub(crate) fn register_job_cache(
    call: &'static str,
    cache: Arc<dyn CloseAtFinalize>,
) -> Result<()> {
    may_register_job_cache(call)?;
    if let State::Attached(hook) = &mut *lock(&HOOK) {
        hook.job_cache = Some(cache);
    }
    Ok(())
}

/// The delete callback MPI runs at the start of `MPI_Finalize`.
unsafe extern "C" fn on_finalize(
    _comm: ffi::MPI_Comm,
    _key: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    let report = catch_unwind(AssertUnwindSafe(run_finalize)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        FinalizeReport {
            errors: vec![format!("the finalize callback panicked: {what}")],
            ..FinalizeReport::default()
        }
    });
    *lock(&REPORT) = Some(report);
    ffi::MPI_SUCCESS as c_int
}

fn run_finalize() -> FinalizeReport {
    let hook = match std::mem::replace(&mut *lock(&HOOK), State::Finalized) {
        State::Attached(hook) => hook,
        _ => return FinalizeReport::default(),
    };
    let timeout = finalize_timeout();
    let mut report = FinalizeReport::default();
    let mut lost = Lost::default();
    // The job cache first: after its close no rank asks it, and its server's thread (the
    // one thread of offload that calls MPI on its own) has ended.
    if let Some(cache) = &hook.job_cache {
        let (abandoned, errors) = cache.close(&mut lost, timeout);
        report.abandoned += abandoned;
        report.errors.extend(errors);
    }
    for comm in &hook.ranks {
        let sent = std::mem::take(&mut *lock(&comm.pending));
        let (discarded, tokens) = exchange(comm, SENTINEL_TAG, true, timeout, &mut lost);
        report.discarded += discarded;
        // Every live receiver took its messages (or discarded them): those sends complete;
        // the ones to dead or silent ranks are abandoned.
        let sends = sent.into_iter().chain(tokens).collect();
        report.abandoned += settle(comm, sends, Instant::now() + timeout, &mut lost);
    }
    let (_, tokens) = exchange(&hook.comm, BARRIER_TAGS[0], false, timeout, &mut lost);
    report.abandoned += settle(&hook.comm, tokens, Instant::now() + timeout, &mut lost);
    if let Some(shutdown) = hook.shutdown {
        let (was_last, errors) = shutdown();
        report.shut_down = true;
        report.was_last = was_last;
        report.errors.extend(errors);
    }
    let (_, tokens) = exchange(&hook.comm, BARRIER_TAGS[1], false, timeout, &mut lost);
    report.abandoned += settle(&hook.comm, tokens, Instant::now() + timeout, &mut lost);
    report.dead = lost.dead.iter().copied().collect();
    report.unresponsive = lost.unresponsive.difference(&lost.dead).copied().collect();
    report
}

/// The finalize protocol's wait for ranks: `OFFLOAD_MPI_FINALIZE_TIMEOUT` (seconds, a
/// decimal number ≥ 0), else [`FINALIZE_TIMEOUT`].
pub(crate) fn finalize_timeout() -> Duration {
    std::env::var(FINALIZE_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(FINALIZE_TIMEOUT)
}

/// Sends a token with `tag` to every other rank of `comm` that is not lost, and waits for
/// each one's token with `tag`: a barrier of the live ranks, made of point-to-point
/// messages so that it can stop waiting for a rank (a collective cannot). With `drain`,
/// it receives every message from each rank until its token (the sentinel) and discards
/// them; it returns how many, with the token sends for [`settle`].
///
/// A rank found dead (its process on this node ended: looked up every
/// [`LIVENESS_POLL`]) is neither sent to nor waited for; one that sent nothing within
/// `timeout` is recorded unresponsive, and the wait ends.
fn exchange(
    comm: &Comm,
    tag: i32,
    drain: bool,
    timeout: Duration,
    lost: &mut Lost,
) -> (usize, Vec<Staged>) {
    let c = comm.get();
    let (me, size) = (c.rank(), c.size());
    let deadline = Instant::now() + timeout;
    let mut waiting = Vec::new();
    for r in (0..size).filter(|&r| r != me) {
        let world = comm.procs.world(r);
        if lost.contains(world) {
            continue;
        }
        if comm.is_dead(r) {
            lost.dead.insert(world);
            continue;
        }
        waiting.push(r);
    }
    let tokens = waiting
        .iter()
        .map(|&r| Staged::start(c, r, tag, vec![0]))
        .collect();
    let mut discarded = 0;
    let mut looked = Instant::now();
    while !waiting.is_empty() {
        let mut progressed = false;
        waiting.retain(|&r| {
            let from = c.process_at_rank(r);
            loop {
                let probed = if drain {
                    from.immediate_matched_probe()
                } else {
                    from.immediate_matched_probe_with_tag(tag)
                };
                let Some((msg, status)) = probed else {
                    return true;
                };
                progressed = true;
                // Drained to make progress; its contents were already matched by tag above.
                let _ = receive_bytes(msg, &status);
                if status.tag() == tag {
                    return false;
                }
                discarded += 1;
            }
        });
        if waiting.is_empty() {
            break;
        }
        let now = Instant::now();
        if now.duration_since(looked) >= LIVENESS_POLL {
            looked = now;
            waiting.retain(|&r| {
                let dead = comm.is_dead(r);
                if dead {
                    lost.dead.insert(comm.procs.world(r));
                }
                !dead
            });
        }
        if now >= deadline {
            for &r in &waiting {
                lost.unresponsive.insert(comm.procs.world(r));
            }
            break;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
    (discarded, tokens)
}
