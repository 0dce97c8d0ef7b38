//! Ranks as IPC peers (M1): ranks of one node send buffer ranges through offload's IPC
//! endpoints and its one sender-side cache; other ranks (or all, with
//! `OFFLOAD_MPI_STAGED=1`) get the bytes staged through host memory over MPI
//! point-to-point. Owns the routing and the messages received before they were asked for;
//! must not free its communicator (see `comm::Comm`).

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpi::topology::Communicator;
use mpi::traits::*;
use offload_core::ipc::{IpcEndpoint, PeerId};
use offload_core::{Buffer, Device, Error, MemKind, Offload, Ready, Result};

use crate::comm::{self, Comm, Staged};
use crate::hook;
use crate::{STAGED_ENV, mpi_error};

/// The MPI tag of staged messages (the user's tag travels in the message).
const STAGED_TAG: i32 = 1;
/// Bytes of one rank's record in the endpoint exchange: its rank, then its endpoint name.
const RECORD: usize = 256;
/// How long [`Ranks::wait_sent`] waits for a peer to drop its views.
const WAIT_SENT: Duration = Duration::from_secs(120);
/// How long [`Ranks::recv`] waits for a delivery before it looks whether its rank died.
const RECV_SLICE: Duration = Duration::from_millis(100);

/// How bytes reach a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// This rank itself (sending to it is `Error::InvalidArgument`).
    Me,
    /// Through offload's IPC endpoint: the receiver maps the sender's memory.
    Ipc,
    /// Staged through host memory and MPI point-to-point: the receiver gets a copy.
    Staged,
}

enum Inbound {
    View(Buffer),
    Bytes(Vec<u8>),
}

/// How long an IPC failure with a local rank that still looks alive waits for it to be
/// seen dead (its process ending) before it is reported as a plain IPC error.
const DEATH_GRACE: Duration = Duration::from_secs(2);

/// The ranks of a communicator as peers of this process's offload runtime.
///
/// Made collectively over a communicator (usually the world) after [`crate::attach`]:
/// `Ranks::new` duplicates it for its own traffic, finds the ranks of this node
/// (`MPI_COMM_TYPE_SHARED`), exchanges IPC endpoint names with them and connects to each.
/// See the [crate docs](crate) for an example.
pub struct Ranks {
    comm: Arc<Comm>,
    rank: i32,
    routes: Vec<Route>,
    peers: Vec<Option<PeerId>>,
    endpoint: IpcEndpoint,
    device: Device,
    /// Received while waiting for something else: (from, tag, what).
    inbox: Mutex<Vec<(i32, u32, Inbound)>>,
}

impl Ranks {
    /// Makes the ranks of `comm` peers of `rt`, receiving staged bytes into buffers of
    /// `device`. Collective over `comm`. `Error::InvalidArgument` before [`crate::attach`].
    pub fn new<P, C: Communicator>(
        rt: &Offload<Ready, P>,
        comm: &C,
        device: &Device,
    ) -> Result<Self> {
        const CALL: &str = "Ranks::new";
        if !hook::is_attached() {
            return Err(Error::InvalidArgument {
                call: CALL,
                reason: "offload_mpi::attach must run first (and MPI_Finalize not yet)".into(),
            });
        }
        let endpoint = rt.ipc_endpoint()?;
        let own = Comm::new(comm.duplicate());
        hook::register(CALL, own.clone())?;
        let (rank, size) = (own.get().rank(), own.get().size());
        let staged = std::env::var(STAGED_ENV).is_ok_and(|v| v == "1");
        let mut routes = vec![Route::Staged; size as usize];
        routes[rank as usize] = Route::Me;
        let mut peers = vec![None; size as usize];

        let node = own.get().split_shared(rank);
        let mut record = [0u8; RECORD];
        let name = endpoint.name().as_bytes();
        let fits = name.len() <= RECORD - 8;
        record[..4].copy_from_slice(&rank.to_le_bytes());
        if fits {
            record[4..8].copy_from_slice(&(name.len() as u32).to_le_bytes());
            record[8..8 + name.len()].copy_from_slice(name);
        }
        let mut all = vec![0u8; RECORD * node.size() as usize];
        node.all_gather_into(&record[..], &mut all[..]);
        drop(node); // freed now, before finalize
        let mut failure = None;
        for r in all.chunks_exact(RECORD) {
            let peer = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            let len = u32::from_le_bytes([r[4], r[5], r[6], r[7]]) as usize;
            if peer == rank || staged || peer < 0 || peer >= size || len == 0 {
                continue; // a rank whose name did not fit stays staged
            }
            let name = String::from_utf8_lossy(&r[8..8 + len.min(RECORD - 8)]);
            match endpoint.connect(&name) {
                Ok(id) => {
                    routes[peer as usize] = Route::Ipc;
                    peers[peer as usize] = Some(id);
                }
                Err(e) => failure = Some(e),
            }
        }
        // Every rank connected (or failed) before anyone sends; a failure is reported
        // after the barrier, so no rank is left waiting in it.
        own.get().barrier();
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(Ranks {
            comm: own,
            rank,
            routes,
            peers,
            endpoint,
            device: device.clone(),
            inbox: Mutex::new(Vec::new()),
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> i32 {
        self.routes.len() as i32
    }

    /// How bytes reach `rank`.
    pub fn route(&self, rank: i32) -> Option<Route> {
        usize::try_from(rank)
            .ok()
            .and_then(|r| self.routes.get(r).copied())
    }

    /// Sends `range` of `buffer` to `rank` with `tag`.
    ///
    /// Through IPC (`buffer` must then be exportable memory, `Device::alloc_exportable`)
    /// the receiver reads this process's memory: the first send of an allocation to a rank
    /// exports and maps it, later ones carry only the range. It returns once delivered;
    /// call [`Ranks::wait_sent`] before writing the range again. Staged, the bytes are
    /// copied out of `buffer` into host memory that an `MPI_Isend` sends from: it returns
    /// at once (no rank waits on its receiver, as through IPC), and `buffer` may change
    /// right away; sends that nobody receives are completed and discarded at finalize.
    ///
    /// A rank that is dead ([`Ranks::is_dead`]) is `Error::Ipc` with call `Ranks::send`,
    /// naming the rank and its process (through IPC the endpoint's error follows: its
    /// socket closed); so is any other IPC failure, naming the rank. A staged send to a
    /// rank of another node that died is taken by MPI and never delivered. After
    /// `MPI_Finalize` staged sends are `Error::Ipc` too.
    pub fn send(&self, buffer: &Buffer, range: Range<usize>, rank: i32, tag: u32) -> Result<()> {
        const CALL: &str = "Ranks::send";
        let len = range
            .end
            .checked_sub(range.start)
            .ok_or_else(|| Error::InvalidArgument {
                call: CALL,
                reason: format!("range {range:?} is reversed"),
            })?;
        match self.route(rank) {
            Some(Route::Ipc) => {
                let peer = self.peers[rank as usize].ok_or_else(|| mpi_error(CALL, "no peer"))?;
                let tag = (u64::from(self.rank as u32) << 32) | u64::from(tag);
                self.endpoint
                    .send(peer, buffer, range.start, len, tag)
                    .map_err(|e| self.peer_error(CALL, rank, e))
            }
            Some(Route::Staged) => {
                if !hook::is_attached() {
                    return Err(mpi_error(
                        CALL,
                        "MPI_Finalize ran: no staged sends any more",
                    ));
                }
                // MPI would take the message (and never deliver it, or never complete a
                // large one): a dead rank is refused here.
                if self.comm.is_dead(rank) {
                    return Err(mpi_error(CALL, self.dead(rank)));
                }
                self.comm.reap();
                let mut bytes = vec![0u8; 8 + len];
                bytes[..4].copy_from_slice(&tag.to_le_bytes());
                buffer.read(range.start, &mut bytes[8..])?;
                let send = Staged::start(self.comm.get(), rank, STAGED_TAG, bytes);
                comm::lock(&self.comm.pending).push(send);
                Ok(())
            }
            Some(Route::Me) | None => Err(Error::InvalidArgument {
                call: CALL,
                reason: format!(
                    "rank {rank}: not a peer of rank {} of {}",
                    self.rank,
                    self.size()
                ),
            }),
        }
    }

    /// Waits until `rank` dropped every view of what this process sent it (IPC), so the
    /// memory sent may be written again; at once for a staged rank. A rank that closed its
    /// endpoint or exited holds no views: `Ok`.
    pub fn wait_sent(&self, rank: i32) -> Result<()> {
        match self.route(rank) {
            Some(Route::Ipc) => match self.peers[rank as usize] {
                Some(peer) => match self.endpoint.wait_answered(peer, WAIT_SENT) {
                    // A peer that closed its endpoint or exited holds no views any more.
                    Err(Error::Ipc { .. }) if self.is_gone(rank) => Ok(()),
                    other => other,
                },
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Receives the next range `rank` sent with `tag`: through IPC a view of the sender's
    /// memory (drop it when done: the sender's [`Ranks::wait_sent`] waits for that),
    /// staged a buffer of this rank's device that the receiver owns (an empty send arrives
    /// as a 1-byte buffer: offload allocates no empty buffers). Messages of other tags that
    /// arrive meanwhile are kept for their own `recv`. Through IPC it waits for the next
    /// delivery of any node-local rank, so a rank that never sends blocks it (no timeout),
    /// unless it dies: once `rank` is dead and nothing it sent is left, `Error::Ipc`.
    pub fn recv(&self, rank: i32, tag: u32) -> Result<Buffer> {
        const CALL: &str = "Ranks::recv";
        if let Some(kept) = self.take_kept(rank, tag) {
            return self.to_buffer(kept);
        }
        match self.route(rank) {
            Some(Route::Ipc) => loop {
                let Some(got) = self.endpoint.recv_timeout(RECV_SLICE)? else {
                    if self.comm.is_dead(rank) {
                        return Err(mpi_error(CALL, self.dead(rank)));
                    }
                    continue;
                };
                let (from, got_tag) = ((got.tag() >> 32) as i32, got.tag() as u32);
                if from == rank && got_tag == tag {
                    return Ok(got.into_buffer());
                }
                self.keep(from, got_tag, Inbound::View(got.into_buffer()));
            },
            Some(Route::Staged) => loop {
                if !hook::is_attached() {
                    return Err(mpi_error(
                        CALL,
                        "MPI_Finalize ran: no staged messages any more",
                    ));
                }
                self.comm.reap();
                let (msg, status) = self.probe_staged(CALL, rank)?;
                let bytes = comm::receive_bytes(msg, &status);
                if bytes.len() < 8 {
                    return Err(mpi_error(
                        CALL,
                        format!("a staged message of {} bytes from rank {rank}", bytes.len()),
                    ));
                }
                let got_tag = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                if got_tag == tag {
                    return self.to_buffer(Inbound::Bytes(bytes));
                }
                self.keep(rank, got_tag, Inbound::Bytes(bytes));
            },
            Some(Route::Me) | None => Err(Error::InvalidArgument {
                call: CALL,
                reason: format!(
                    "rank {rank}: not a peer of rank {} of {}",
                    self.rank,
                    self.size()
                ),
            }),
        }
    }

    /// Whether `rank`'s process is known to have ended: a rank of this node whose process
    /// exited or was killed. A rank of another node is never known dead (`false`).
    ///
    /// Sends to a dead rank fail (`Error::Ipc` naming [`Ranks::send`] and the rank), and
    /// so do receives from it once nothing it sent is left; `MPI_Finalize` neither sends
    /// to it nor waits for it (see the [crate docs](crate#a-rank-that-dies)).
    pub fn is_dead(&self, rank: i32) -> bool {
        rank != self.rank && self.comm.is_dead(rank)
    }

    /// Probes for the next staged message of `rank`, looking every [`RECV_SLICE`] whether
    /// it died (MPI itself would wait for it forever).
    fn probe_staged(
        &self,
        call: &'static str,
        rank: i32,
    ) -> Result<(mpi::point_to_point::Message, mpi::point_to_point::Status)> {
        let from = self.comm.get().process_at_rank(rank);
        let mut looked = Instant::now();
        loop {
            if let Some(got) = from.immediate_matched_probe_with_tag(STAGED_TAG) {
                return Ok(got);
            }
            if looked.elapsed() >= RECV_SLICE {
                looked = Instant::now();
                if self.comm.is_dead(rank) {
                    return Err(mpi_error(call, self.dead(rank)));
                }
            }
            std::thread::yield_now();
        }
    }

    /// Why a rank is dead, in words.
    fn dead(&self, rank: i32) -> String {
        match self.comm.procs.pid(rank) {
            Some(pid) => format!(
                "rank {rank} is dead (its process {pid} on this node ended: exited or killed)"
            ),
            None => format!("rank {rank} is dead"),
        }
    }

    /// An IPC error of a call to `rank`, naming the rank (and saying whether it died): one
    /// outcome for a dead rank whichever side noticed first — its process seen ended, or its
    /// socket closed a moment before (a killed process's socket closes while its last
    /// thread exits, before `/proc` shows it ended: [`Ranks::seen_dead`] gives it that
    /// moment).
    fn peer_error(&self, call: &'static str, rank: i32, e: Error) -> Error {
        match e {
            Error::Ipc { .. } if self.seen_dead(rank) => {
                mpi_error(call, format!("{}; {e}", self.dead(rank)))
            }
            Error::Ipc { .. } => mpi_error(call, format!("rank {rank}: {e}")),
            other => other,
        }
    }

    /// Whether `rank` is dead, after an IPC failure with it: waits up to [`DEATH_GRACE`]
    /// for a local rank that still looks alive to be seen ended.
    fn seen_dead(&self, rank: i32) -> bool {
        let until = Instant::now() + DEATH_GRACE;
        loop {
            match self.comm.procs.liveness(rank) {
                crate::procs::Liveness::Dead => return true,
                crate::procs::Liveness::Unknown => return false,
                crate::procs::Liveness::Alive if Instant::now() >= until => return false,
                crate::procs::Liveness::Alive => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Whether `rank`'s endpoint is gone (closed, or its process exited).
    fn is_gone(&self, rank: i32) -> bool {
        self.peers[rank as usize]
            .is_some_and(|peer| !self.endpoint.peers().iter().any(|p| p.0 == peer))
    }

    fn keep(&self, from: i32, tag: u32, what: Inbound) {
        comm::lock(&self.inbox).push((from, tag, what));
    }

    fn take_kept(&self, from: i32, tag: u32) -> Option<Inbound> {
        let mut inbox = comm::lock(&self.inbox);
        let at = inbox.iter().position(|(f, t, _)| *f == from && *t == tag)?;
        Some(inbox.remove(at).2)
    }

    fn to_buffer(&self, what: Inbound) -> Result<Buffer> {
        match what {
            Inbound::View(view) => Ok(view),
            Inbound::Bytes(bytes) => {
                let buffer = self
                    .device
                    .alloc((bytes.len() - 8).max(1), MemKind::Device)?;
                buffer.write(0, &bytes[8..])?;
                Ok(buffer)
            }
        }
    }
}
