//! The finalize hook (M1): an attribute on `MPI_COMM_SELF` whose delete callback shuts
//! offload down at the start of `MPI_Finalize`. Owns the process-wide hook state and the
//! only `unsafe` of the crate (the keyval FFI and the C callback). Must not let a panic
//! reach MPI, nor free a communicator after finalize.

use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use mpi::environment::Universe;
use mpi::ffi;
use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use offload_core::{Offload, Platforms, Ready, Result};

use crate::mpi_error;

/// The MPI tag of the sentinel that ends a rank's offload traffic on a communicator.
pub(crate) const SENTINEL_TAG: i32 = 0x7ff0;

/// A communicator of offload's own traffic, with its staged sends in flight. Never freed
/// here: `MPI_Finalize` reclaims it, and a `MPI_Comm_free` after finalize would abort the
/// job. The finalize callback completes its sends.
pub(crate) struct Comm {
    comm: ManuallyDrop<SimpleCommunicator>,
    pub(crate) pending: Mutex<Vec<Staged>>,
}

impl Comm {
    pub(crate) fn new(comm: SimpleCommunicator) -> Arc<Self> {
        Arc::new(Comm {
            comm: ManuallyDrop::new(comm),
            pending: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn get(&self) -> &SimpleCommunicator {
        &self.comm
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
        }
    }

    fn is_done(&mut self) -> bool {
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
    let mut report = FinalizeReport::default();
    for comm in &hook.ranks {
        report.discarded += drain(comm.get());
        // Every receiver took its messages (or discarded them): the sends complete.
        lock(&comm.pending).clear();
    }
    hook.comm.get().barrier();
    if let Some(shutdown) = hook.shutdown {
        let (was_last, errors) = shutdown();
        report.shut_down = true;
        report.was_last = was_last;
        report.errors = errors;
    }
    hook.comm.get().barrier();
    report
}

/// Sends a sentinel to every other rank of `comm` and receives from each until its
/// sentinel, discarding what nobody received. Returns how many were discarded.
fn drain(comm: &SimpleCommunicator) -> usize {
    let (me, size) = (comm.rank(), comm.size());
    let token = [0u8; 1];
    let mut discarded = 0;
    mpi::request::scope(|scope| {
        let sends: Vec<_> = (0..size)
            .filter(|&r| r != me)
            .map(|r| {
                comm.process_at_rank(r)
                    .immediate_send_with_tag(scope, &token[..], SENTINEL_TAG)
            })
            .collect();
        for r in (0..size).filter(|&r| r != me) {
            loop {
                let (msg, status) = comm.process_at_rank(r).matched_probe();
                let _ = receive_bytes(msg, &status);
                if status.tag() == SENTINEL_TAG {
                    break;
                }
                discarded += 1;
            }
        }
        for send in sends {
            send.wait();
        }
    });
    discarded
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
