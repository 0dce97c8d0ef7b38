//! The finalize hook (M1): an attribute on `MPI_COMM_SELF` whose delete callback shuts
//! offload down at the start of `MPI_Finalize`. Owns the process-wide hook state and the
//! only `unsafe` of the crate (the keyval FFI and the C callback). Must not let a panic
//! reach MPI, nor free a communicator after finalize.
//!
//! Must not hang on a dead rank either: MPICH never reports one (a barrier or receive
//! with it waits forever), so the protocol is made of point-to-point messages it polls
//! (`exchange`), looking every [`LIVENESS_POLL`] whether the ranks it waits for died
//! (`procs`), and each wait ends after `OFFLOAD_MPI_FINALIZE_TIMEOUT` at the latest. Sends
//! that cannot complete are abandoned, never waited for (`settle`). See the crate docs,
//! "A rank that dies".

use std::collections::BTreeSet;
use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mpi::environment::Universe;
use mpi::ffi;
use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use offload_core::{Offload, Platforms, Ready, Result};

use crate::job_cache::Cache;
use crate::procs::{Liveness, Table};
use crate::{FINALIZE_TIMEOUT_ENV, mpi_error};

/// The MPI tag of the sentinel that ends a rank's offload traffic on a communicator.
pub(crate) const SENTINEL_TAG: i32 = 0x7ff0;
/// The MPI tags of the tokens of the finalize protocol's two barriers (on the duplicate of
/// the world, which carries nothing else).
const BARRIER_TAGS: [i32; 2] = [0x7ff1, 0x7ff2];
/// How long each wait of the finalize protocol waits for ranks, unless
/// `OFFLOAD_MPI_FINALIZE_TIMEOUT` says otherwise.
pub(crate) const FINALIZE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a wait for ranks looks whether the ranks it waits for are still alive.
pub(crate) const LIVENESS_POLL: Duration = Duration::from_millis(50);

/// A communicator of offload's own traffic, with its staged sends in flight. Never freed
/// here: `MPI_Finalize` reclaims it, and a `MPI_Comm_free` after finalize would abort the
/// job. The finalize callback completes its sends.
pub(crate) struct Comm {
    comm: ManuallyDrop<SimpleCommunicator>,
    pub(crate) pending: Mutex<Vec<Staged>>,
    /// Its ranks' processes, to tell which are dead.
    pub(crate) procs: Table,
}

impl Comm {
    /// Takes `comm` for offload's traffic. Collective over `comm` (it gathers the ranks'
    /// processes).
    pub(crate) fn new(comm: SimpleCommunicator) -> Arc<Self> {
        let procs = Table::gather(&comm);
        Arc::new(Comm {
            comm: ManuallyDrop::new(comm),
            pending: Mutex::new(Vec::new()),
            procs,
        })
    }

    pub(crate) fn get(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Whether `rank`'s process is known to have ended (ranks of this node only).
    pub(crate) fn is_dead(&self, rank: i32) -> bool {
        self.procs.liveness(rank) == Liveness::Dead
    }

    /// Forgets the staged sends that completed.
    pub(crate) fn reap(&self) {
        lock(&self.pending).retain_mut(|s| !s.is_done());
    }
}

/// A staged send in flight (`MPI_Isend`) that owns its bytes until MPI is done with them.
pub(crate) struct Staged {
    request: Option<Request<'static, [u8]>>,
    bytes: NonNull<[u8]>,
    /// The rank it goes to.
    to: i32,
}

// SAFETY: `bytes` is owned by this value alone (a leaked box, see `start`): MPI only reads
// it while the request runs, and it is freed once, in `drop`, after the request completed.
unsafe impl Send for Staged {}

impl Staged {
    /// Starts sending `bytes` to `rank` of `comm` with `tag`.
    pub(crate) fn start(comm: &SimpleCommunicator, rank: i32, tag: i32, bytes: Vec<u8>) -> Self {
        let raw: *mut [u8] = Box::into_raw(bytes.into_boxed_slice());
        // SAFETY: `raw` comes from `Box::into_raw` just above, so it is valid and aligned;
        // no `&mut` to it exists, and it is freed only in `drop`, after the request that
        // reads it completed (`wait`), so the `'static` borrow never dangles while used.
        let shared: &'static [u8] = unsafe { &*raw };
        let request = comm
            .process_at_rank(rank)
            .immediate_send_with_tag(StaticScope, shared, tag);
        Staged {
            request: Some(request),
            bytes: NonNull::from(shared),
            to: rank,
        }
    }

    /// Gives up on a send that cannot complete (its receiver is dead or does not answer):
    /// the request is left to MPI, and the bytes stay allocated (leaked), since MPI may
    /// still read them. Never waits.
    pub(crate) fn abandon(mut self) {
        if let Some(request) = self.request.take() {
            // An MPI request handle, forgotten: rsmpi would panic on dropping it
            // unfinished, and waiting for it would never end.
            std::mem::forget(request);
        }
        // Not dropped: `drop` would free the bytes MPI may still read.
        std::mem::forget(self);
    }

    /// The rank it goes to.
    pub(crate) fn to(&self) -> i32 {
        self.to
    }

    /// Whether MPI is done with it (then its bytes may be freed).
    pub(crate) fn is_done(&mut self) -> bool {
        match self.request.take().map(Request::test) {
            Some(Err(request)) => {
                self.request = Some(request);
                false
            }
            _ => true,
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            request.wait();
        }
        // SAFETY: the pointer came from `Box::into_raw` in `start` and is freed only here,
        // once; the request that read it has completed, so nothing refers to it any more.
        drop(unsafe { Box::from_raw(self.bytes.as_ptr()) });
    }
}

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
    job_cache: Option<Arc<Cache>>,
}

enum State {
    Detached,
    Attached(Hook),
    Finalized,
}

static HOOK: Mutex<State> = Mutex::new(State::Detached);
static REPORT: Mutex<Option<FinalizeReport>> = Mutex::new(None);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

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
pub(crate) fn register_job_cache(call: &'static str, cache: Arc<Cache>) -> Result<()> {
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

/// The ranks (of `MPI_COMM_WORLD`) the finalize protocol stopped waiting for.
#[derive(Default)]
pub(crate) struct Lost {
    pub(crate) dead: BTreeSet<i32>,
    pub(crate) unresponsive: BTreeSet<i32>,
}

impl Lost {
    pub(crate) fn contains(&self, world: i32) -> bool {
        self.dead.contains(&world) || self.unresponsive.contains(&world)
    }
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

/// Completes `sends` on `comm` (MPI progresses while it tests them): a send to a lost or
/// dead rank, or one still running at `deadline` (its rank is then unresponsive), is
/// abandoned. Returns how many were.
pub(crate) fn settle(
    comm: &Comm,
    mut sends: Vec<Staged>,
    deadline: Instant,
    lost: &mut Lost,
) -> usize {
    let mut abandoned = 0;
    let mut looked = Instant::now();
    loop {
        sends.retain_mut(|s| !s.is_done());
        let now = Instant::now();
        let look = now.duration_since(looked) >= LIVENESS_POLL;
        if look {
            looked = now;
        }
        let mut left = Vec::with_capacity(sends.len());
        for s in sends {
            let world = comm.procs.world(s.to);
            if look && !lost.contains(world) && comm.is_dead(s.to) {
                lost.dead.insert(world);
            }
            if lost.contains(world) {
                s.abandon();
                abandoned += 1;
            } else if now >= deadline {
                lost.unresponsive.insert(world);
                s.abandon();
                abandoned += 1;
            } else {
                left.push(s);
            }
        }
        if left.is_empty() {
            return abandoned;
        }
        sends = left;
        std::thread::yield_now();
    }
}

/// Receives a probed message of bytes.
pub(crate) fn receive_bytes(
    msg: mpi::point_to_point::Message,
    status: &mpi::point_to_point::Status,
) -> Vec<u8> {
    let len = status.count(u8::equivalent_datatype()).max(0) as usize;
    let mut bytes = vec![0u8; len];
    msg.matched_receive_into(&mut bytes[..]);
    bytes
}
