//! [`IpcEndpoint`]: sends buffer ranges to peers through the process's one sender-side
//! cache, and receives theirs as views (I2–I4).
//!
//! An endpoint is a listening socket plus its connections. Whoever calls into the endpoint
//! (`send`, `recv`, a free that waits for unmaps, shutdown) makes progress for everyone —
//! accepts connections, reads and answers messages, flushes what is queued — one caller at
//! a time, the others waiting on a condition variable; when nobody does, the generation's
//! progress thread (`progress.rs`) makes a round every few milliseconds, so a receiver that
//! computes, sleeps or blocks elsewhere still answers unmaps (I3, I5). Every write goes
//! through a per-peer outbox flushed without blocking, so two processes that both send
//! never deadlock on full socket buffers.
//!
//! Lock order: the cache, then the endpoint's state, then the generation. Answers and
//! deaths that concern the cache are read under the state lock and applied after it is
//! released; code that may run while a send holds the cache stashes them instead, for the
//! send (or the next round of progress) to apply once the cache is free.
//!
//! The engine's methods by concern, one file each: `send` (a buffer range sent through the
//! cache's plan, the outbox drained, unmaps sent and waited for), `receive` (deliveries
//! become views, views dropped, mappings closed), `rounds` (a round of progress and the
//! protocol: what each message does; waking who waits for a round), `peers` (connections
//! added, written to, killed; dead peers' mappings closed; the endpoint closed), `news`
//! (what peers answered, applied to the cache and the quarantine, or stashed). Besides:
//! `api` (the public [`IpcEndpoint`], which hands each call to the engine) and `shared`
//! (the generation's IPC state: its cache, endpoints, quarantine, progress thread, and the
//! unmapping before exported memory is freed). This file holds only what they share: the
//! engine's state and the types its parts pass each other (peers, mappings, pending
//! deliveries, cache news), with no method of the engine.

use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, Weak, lock, statics,
};
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::error::{Error, Result};
use crate::handles::{Buffer, BufferEntry, Device, Origin, ViewOwner};
use crate::ipc::cache::{PeerRef, Plan, Unmap};
use crate::ipc::import::import_entry;
use crate::ipc::progress::Progress;
use crate::ipc::quarantine::Quarantine;
use crate::ipc::socket::{self, Sent};
use crate::ipc::wire::{self, FailCode, Message, ONE_SHOT};
use crate::ipc::{IpcHandle, PeerId, stats};
use crate::runtime::generation::{Extension, Generation, Kind, Resource, ResourceKey};

mod api;
mod news;
mod peers;
mod receive;
mod rounds;
mod send;
mod shared;

pub use api::IpcEndpoint;
pub(crate) use shared::Shared;

statics! {
    /// Numbers endpoints within this process (const-initialised).
    static NEXT_ENDPOINT: AtomicU64 = AtomicU64::new(1);
}

/// How long a send waits for its peer to take its message (the peer reads whenever it
/// calls into its endpoint) before it gives up with an error.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Packets read from one peer per round of progress, so one peer cannot starve the rest.
const READ_BATCH: usize = 256;
/// One-shot deliveries to one peer not yet answered, at most (each carries a descriptor,
/// and descriptors in flight count against the sender's open-file limit).
const ONE_SHOT_WINDOW: u32 = 64;
/// The longest one round of progress waits in `poll` (others may be waiting to take over).
const POLL_SLICE: Duration = Duration::from_millis(20);
/// How long a waiting round of progress polls without sleeping first. Waking a sleeping
/// process costs 20–75 µs on the project's VMs (measured); an answer that comes within
/// this window is seen at once, the way MPI progress engines poll before they block.
const SPIN: Duration = Duration::from_micros(50);

fn ipc_error(call: &'static str, reason: impl Into<String>) -> Error {
    Error::Ipc {
        call,
        reason: reason.into(),
    }
}

/// A mapping of a peer's memory, made by a `Map` or `OneShot` it sent.
struct Mapping {
    entry: u32,
    generation: u32,
    id: u32,
    buffer: Arc<BufferEntry>,
    key: ResourceKey,
    /// Views handed out and not dropped yet.
    views: usize,
    one_shot: bool,
}

struct Peer {
    id: PeerId,
    /// The endpoint it is a peer of (for the trace).
    endpoint: u64,
    socket: Arc<OwnedFd>,
    pid: u32,
    /// Its `Hello` arrived.
    greeted: bool,
    alive: bool,
    outbox: VecDeque<(Vec<u8>, Option<OwnedFd>)>,
    /// How many messages were written whole into its socket, ever: a send is done once the
    /// count passes its message's place, even if the peer hangs up right after reading it.
    written: u64,
    /// Mappings of its memory, as a receiver.
    mappings: Vec<Mapping>,
    /// Unmaps sent to it and not yet acknowledged: (entry, generation).
    unacked: Vec<(u32, u32)>,
    /// One-shots sent to it and neither answered nor unmapped: (allocation, sequence). A
    /// free of the allocation unmaps them too (I3).
    one_shots: Vec<(u64, u32)>,
    /// Deliveries (`Map`, `Use`, `OneShot`) sent to it and not yet answered.
    unanswered: u64,
}

/// A delivery a peer sent, not yet taken by `recv`: its memory is mapped only then, so a
/// receiver holds the mappings of what it took, not of everything queued.
enum Pending {
    Map {
        entry: u32,
        generation: u32,
        offset: u64,
        len: u64,
        handle: IpcHandle,
    },
    Use {
        entry: u32,
        generation: u32,
        mapping: u32,
        offset: u64,
        len: u64,
    },
    OneShot {
        sequence: u32,
        offset: u64,
        len: u64,
        handle: IpcHandle,
    },
}

impl Pending {
    /// The delivery a `Map`, `Use` or `OneShot` makes, with its tag.
    fn of(message: Message) -> Option<(u64, Pending)> {
        Some(match message {
            Message::Map {
                entry,
                generation,
                tag,
                offset,
                len,
                handle,
            } => (
                tag,
                Pending::Map {
                    entry,
                    generation,
                    offset,
                    len,
                    handle,
                },
            ),
            Message::Use {
                entry,
                generation,
                mapping,
                tag,
                offset,
                len,
            } => (
                tag,
                Pending::Use {
                    entry,
                    generation,
                    mapping,
                    offset,
                    len,
                },
            ),
            Message::OneShot {
                sequence,
                tag,
                offset,
                len,
                handle,
            } => (
                tag,
                Pending::OneShot {
                    sequence,
                    offset,
                    len,
                    handle,
                },
            ),
            _ => return None,
        })
    }
}

struct Delivery {
    peer: PeerId,
    tag: u64,
    what: Pending,
}

struct State {
    peers: Vec<Peer>,
    next_peer: u64,
    next_mapping: u32,
    next_sequence: u32,
    deliveries: VecDeque<Delivery>,
}

/// What a round of progress learnt that the cache must know (applied after the state
/// lock is released).
enum CacheNews {
    Mapped(PeerId, u32, u32, u32),
    Answered(PeerId, u32, u32, bool),
    /// An `UnmapAck` (for the quarantine).
    Acked(PeerId, u32, u32),
    Gone(PeerId),
}

struct Engine {
    id: u64,
    generation: Arc<Generation>,
    /// The generation's IPC state (its cache, endpoints, quarantine and progress thread).
    shared: Arc<Shared>,
    path: PathBuf,
    listener: OwnedFd,
    /// Held by whoever is making progress.
    progress: Mutex<()>,
    state: Mutex<State>,
    /// Signalled after every round of progress and every view dropped, when `waiting` says
    /// someone waits on it (a signal is a system call).
    changed: Condvar,
    waiting: AtomicUsize,
    unmap_timeout: Duration,
    closed: AtomicBool,
    /// Cache news learnt where the cache may be held (see the module docs).
    stashed: Mutex<Vec<CacheNews>>,
    /// Rounds of progress made so far (the progress thread skips endpoints others drive).
    rounds: AtomicU64,
}

/// Mappings a round of progress closes once the state lock is released, with the
/// `UnmapAck`s that may leave only after their mapping is closed (I3).
#[derive(Default)]
struct Closing {
    mappings: Vec<Mapping>,
    acks: Vec<(PeerId, Message)>,
}

/// A peer's buffer range, received: a view of the mapping its memory has in this process,
/// and the sender's tag. Drop it (or its buffer) when done: the sender counts the send in
/// flight until then, and a one-shot mapping is closed then.
pub struct Received {
    peer: PeerId,
    tag: u64,
    buffer: Buffer,
}

impl Received {
    /// Who sent it.
    ///
    /// ```
    /// fn from(r: &offload::ipc::Received) -> offload::ipc::PeerId {
    ///     r.peer()
    /// }
    /// ```
    pub fn peer(&self) -> PeerId {
        self.peer
    }

    /// The sender's tag.
    ///
    /// ```
    /// fn tag(r: &offload::ipc::Received) -> u64 {
    ///     r.tag()
    /// }
    /// ```
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The view: a buffer of this process's device covering the range sent. Its calls
    /// answer `Error::InvalidIpcHandle` once the sender unmapped the memory.
    ///
    /// ```
    /// fn len(r: &offload::ipc::Received) -> usize {
    ///     r.buffer().len()
    /// }
    /// ```
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// The view, to keep.
    ///
    /// ```
    /// fn keep(r: offload::ipc::Received) -> offload::Buffer {
    ///     r.into_buffer()
    /// }
    /// ```
    pub fn into_buffer(self) -> Buffer {
        self.buffer
    }
}

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("peer", &self.peer)
            .field("tag", &self.tag)
            .field("buffer", &self.buffer)
            .finish()
    }
}

/// Tells the engine when a view is dropped.
struct ViewToken {
    engine: Weak<Engine>,
    peer: PeerId,
    entry: u32,
    generation: u32,
}

impl ViewOwner for ViewToken {
    fn view_dropped(&self) {
        if let Some(engine) = self.engine.upgrade() {
            engine.view_dropped(self.peer, self.entry, self.generation);
        }
    }
}

impl Resource for Engine {
    fn release(self: Arc<Self>) -> Result<()> {
        self.close()
    }
}
