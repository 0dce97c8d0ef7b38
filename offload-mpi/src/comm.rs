//! offload's own communicators and their point-to-point traffic: [`Comm`] (a communicator
//! with its staged sends, never freed), [`Staged`] (a send that owns its bytes until MPI is
//! done with them, or is abandoned to a dead rank), the ranks a wait stopped waiting for
//! ([`Lost`]), completing sends without hanging on a dead rank ([`settle`]), and what
//! finalize closes before its barriers ([`CloseAtFinalize`]). Used by the finalize hook,
//! `Ranks` and the job cache alike, so it sits below all three.

use std::collections::BTreeSet;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::procs::{Liveness, Table};

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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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

/// What the finalize hook closes first, before its barriers (the job cache): its traffic
/// ends there, and what it gave up on is counted in the finalize report.
pub(crate) trait CloseAtFinalize: Send + Sync {
    /// Ends the traffic within `timeout`, adding the ranks it stopped waiting for to `lost`;
    /// returns the sends abandoned and the errors met.
    fn close(&self, lost: &mut Lost, timeout: Duration) -> (usize, Vec<String>);
}
