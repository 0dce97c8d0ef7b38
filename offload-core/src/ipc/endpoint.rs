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

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::error::{Error, Result};
use crate::handles::{Buffer, BufferEntry, Device, Origin, ViewOwner};
use crate::ipc::cache::{PeerRef, Plan, Unmap};
use crate::ipc::progress::Progress;
use crate::ipc::quarantine::Quarantine;
use crate::ipc::share::import_entry;
use crate::ipc::socket::{self, Sent};
use crate::ipc::wire::{self, FailCode, Message, ONE_SHOT};
use crate::ipc::{IpcHandle, PeerId, stats};
use crate::runtime::generation::{Extension, Generation, Kind, Resource, ResourceKey};
use crate::sync::lock;

/// Numbers endpoints within this process (const-initialised).
static NEXT_ENDPOINT: AtomicU64 = AtomicU64::new(1);

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
    /// fn from(r: &offload_core::ipc::Received) -> offload_core::ipc::PeerId {
    ///     r.peer()
    /// }
    /// ```
    pub fn peer(&self) -> PeerId {
        self.peer
    }

    /// The sender's tag.
    ///
    /// ```
    /// fn tag(r: &offload_core::ipc::Received) -> u64 {
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
    /// fn len(r: &offload_core::ipc::Received) -> usize {
    ///     r.buffer().len()
    /// }
    /// ```
    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// The view, to keep.
    ///
    /// ```
    /// fn keep(r: offload_core::ipc::Received) -> offload_core::Buffer {
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

/// An IPC endpoint of a runtime: a Unix-domain socket other processes of this user connect
/// to, and the connections it made. See the [`crate::ipc`] module docs for the protocol, the
/// cache and what freeing does.
///
/// ```
/// use offload_core::{MemKind, PlatformEntry, reference::{Offload, Reference}};
/// let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
/// let dev = rt.devices()?.remove(0);
/// // Two endpoints of one process stand in for two processes here.
/// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
/// let to_b = a.connect(b.name())?;
/// let buf = dev.alloc_exportable(64, MemKind::Device)?;
/// buf.write(0, &[5; 64])?;
/// a.send(to_b, &buf, 0, 64, 7)?;
/// let got = b.recv()?;
/// assert_eq!(got.tag(), 7);
/// let mut out = [0u8; 64];
/// got.buffer().read(0, &mut out)?;
/// assert_eq!(out, [5; 64]);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct IpcEndpoint {
    engine: Arc<Engine>,
    key: ResourceKey,
}

impl IpcEndpoint {
    /// Binds a new endpoint of `generation`'s runtime.
    pub(crate) fn bind(generation: &Arc<Generation>) -> Result<IpcEndpoint> {
        const CALL: &str = "Offload::ipc_endpoint";
        let shared = super::state(generation)
            .ok_or_else(|| ipc_error(CALL, "this runtime was started without IPC state"))?
            .clone();
        generation.with_live(|live| {
            if generation.is_closing() {
                return Err(Error::shut_down());
            }
            let (listener, path) =
                socket::listen().map_err(|e| ipc_error(CALL, format!("socket: {e}")))?;
            let engine = Arc::new(Engine {
                id: NEXT_ENDPOINT.fetch_add(1, Ordering::Relaxed),
                generation: generation.clone(),
                shared: shared.clone(),
                path,
                listener,
                progress: Mutex::new(()),
                state: Mutex::new(State {
                    peers: Vec::new(),
                    next_peer: 1,
                    next_mapping: 1,
                    next_sequence: 1,
                    deliveries: VecDeque::new(),
                }),
                changed: Condvar::new(),
                waiting: AtomicUsize::new(0),
                unmap_timeout: Duration::from_millis(generation.config.ipc_unmap_timeout_ms),
                closed: AtomicBool::new(false),
                stashed: Mutex::new(Vec::new()),
                rounds: AtomicU64::new(0),
            });
            shared.add_endpoint(engine.id, Arc::downgrade(&engine));
            let (key, engine) = live.register(Kind::Ipc, |_| engine)?;
            shared.progress.start(generation);
            tracing::info!(
                target: "offload::ipc",
                endpoint = engine.id,
                path = %engine.path.display(),
                "bound an IPC endpoint"
            );
            Ok(IpcEndpoint { engine, key })
        })
    }

    /// The name peers connect to: the socket's path.
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// let e = rt.ipc_endpoint()?;
    /// assert!(e.name().ends_with(".sock"));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.engine.path.to_str().unwrap_or("")
    }

    /// The socket's path.
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// assert!(rt.ipc_endpoint()?.path().exists());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.engine.path
    }

    /// Connects to the endpoint named `name` (its [`IpcEndpoint::name`], from another
    /// process or this one). The peer must run as this user (`SO_PEERCRED`).
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// assert!(a.connect("/nonexistent/offload.sock").is_err());
    /// # let _ = peer;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn connect(&self, name: &str) -> Result<PeerId> {
        const CALL: &str = "IpcEndpoint::connect";
        self.engine.check_open(CALL)?;
        let (fd, pid) = socket::connect(Path::new(name)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                stats::PEERS_REFUSED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "offload::ipc",
                    endpoint = self.engine.id,
                    to = name,
                    error = %e,
                    "refused to connect to an endpoint"
                );
            }
            ipc_error(CALL, format!("{name}: {e}"))
        })?;
        let peer = self.engine.add_peer(fd, pid);
        tracing::info!(
            target: "offload::ipc",
            endpoint = self.engine.id,
            %peer,
            pid,
            to = name,
            "connected to an IPC endpoint"
        );
        Ok(peer)
    }

    /// Sends `len` bytes at `offset` of `buffer` to `peer`, with a `tag` it receives too.
    /// `buffer` must be exportable memory (`Device::alloc_exportable`) of this runtime.
    /// The first send of an allocation to a peer exports it (once for all peers) and the
    /// peer maps it; later sends carry only the range (I2). Returns once the message is in
    /// the peer's socket (waiting, and reading answers, while the peer's queue is full; a
    /// peer that reads nothing for 30 s is an error); a peer that is gone is `Error::Ipc`.
    ///
    /// ```
    /// # use offload_core::{MemKind, PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// let buf = dev.alloc_exportable(256, MemKind::Device)?;
    /// let exports = offload_core::ipc::stats().exports;
    /// for i in 0..10 {
    ///     a.send(peer, &buf, 16 * i, 16, i as u64)?;
    ///     drop(b.recv()?);
    /// }
    /// assert_eq!(offload_core::ipc::stats().exports - exports, 1);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn send(
        &self,
        peer: PeerId,
        buffer: &Buffer,
        offset: usize,
        len: usize,
        tag: u64,
    ) -> Result<()> {
        self.engine.send(peer, buffer, offset, len, tag)
    }

    /// Waits for the next buffer range a peer sent, making progress on every connection
    /// meanwhile.
    ///
    /// ```
    /// # use offload_core::{MemKind, PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// # let dev = rt.devices()?.remove(0);
    /// # let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// # let peer = a.connect(b.name())?;
    /// # let buf = dev.alloc_exportable(8, MemKind::Device)?;
    /// a.send(peer, &buf, 0, 8, 1)?;
    /// assert_eq!(b.recv()?.buffer().len(), 8);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn recv(&self) -> Result<Received> {
        loop {
            if let Some(r) = self.recv_timeout(Duration::from_secs(3600))? {
                return Ok(r);
            }
        }
    }

    /// Like [`IpcEndpoint::recv`], giving up after `timeout` (`Ok(None)`).
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// let e = rt.ipc_endpoint()?;
    /// assert!(e.recv_timeout(std::time::Duration::from_millis(1))?.is_none());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Received>> {
        const CALL: &str = "IpcEndpoint::recv";
        let deadline = Instant::now() + timeout;
        loop {
            self.engine.check_open(CALL)?;
            if let Some(r) = self.engine.take_delivery() {
                return r.map(Some);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.engine.progress(deadline - now);
        }
    }

    /// Waits until `peer` answered every send so far (it dropped the views, or could not
    /// deliver), making progress meanwhile: after this, the memory sent may be written
    /// again without the peer seeing it change under a view. `Error::Ipc` if the peer is
    /// gone or `timeout` passes first.
    ///
    /// ```
    /// # use offload_core::{MemKind, PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// let buf = dev.alloc_exportable(8, MemKind::Device)?;
    /// a.send(peer, &buf, 0, 8, 0)?;
    /// drop(b.recv()?); // the receiver is done with it
    /// a.wait_answered(peer, std::time::Duration::from_secs(1))?;
    /// buf.write(0, &[1; 8])?; // no view of it is alive any more
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn wait_answered(&self, peer: PeerId, timeout: Duration) -> Result<()> {
        const CALL: &str = "IpcEndpoint::wait_answered";
        let deadline = Instant::now() + timeout;
        loop {
            self.engine.check_open(CALL)?;
            let left = {
                let state = lock(&self.engine.state);
                match state.peers.iter().find(|p| p.id == peer) {
                    Some(p) if p.alive => p.unanswered,
                    _ => return Err(self.engine.gone(peer, CALL)),
                }
            };
            if left == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ipc_error(
                    CALL,
                    format!("{peer} has {left} sends unanswered"),
                ));
            }
            self.engine.shared.help(self.engine.id);
            self.engine.progress((deadline - now).min(POLL_SLICE));
        }
    }

    /// Makes progress on every connection without waiting (answers peers, flushes what is
    /// queued). `recv`, `send` and frees do this themselves; a process that only sends and
    /// then idles calls it to answer its peers.
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// rt.ipc_endpoint()?.poll()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn poll(&self) -> Result<()> {
        self.engine.check_open("IpcEndpoint::poll")?;
        self.engine.progress(Duration::ZERO);
        Ok(())
    }

    /// The peers connected now, by id, with their process ids.
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// assert_eq!(a.peers(), vec![(peer, std::process::id())]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn peers(&self) -> Vec<(PeerId, u32)> {
        lock(&self.engine.state)
            .peers
            .iter()
            .filter(|p| p.alive)
            .map(|p| (p.id, p.pid))
            .collect()
    }

    /// Mappings of peers' memory this endpoint holds now (as a receiver).
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// assert_eq!(rt.ipc_endpoint()?.mappings(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn mappings(&self) -> usize {
        lock(&self.engine.state)
            .peers
            .iter()
            .map(|p| p.mappings.len())
            .sum()
    }

    /// Entries in the process's sender-side cache now (over all endpoints): at most
    /// `Config::ipc_cache_size`.
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// assert_eq!(rt.ipc_endpoint()?.cache_entries(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn cache_entries(&self) -> usize {
        lock(&self.engine.shared.cache).len()
    }

    /// Closes the endpoint now: peers that mapped memory sent from here unmap it (waiting
    /// for them, bounded), mappings of theirs are closed (their views answer an error), the
    /// connections and the socket go. Dropping the endpoint does the same.
    ///
    /// ```
    /// # use offload_core::{PlatformEntry, reference::{Offload, Reference}};
    /// # let rt = Offload::builder().backends([]).platform(PlatformEntry::with_ipc::<Reference>()).start()?;
    /// let e = rt.ipc_endpoint()?;
    /// let path = e.path().to_owned();
    /// e.close()?;
    /// assert!(!path.exists());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn close(self) -> Result<()> {
        let result = self.engine.generation.with_live(|live| {
            live.forget(Kind::Ipc, self.key);
            Ok(())
        });
        let closed = self.engine.close();
        match result {
            Ok(()) | Err(Error::ShutDown { .. }) => closed,
            Err(e) => Err(e),
        }
    }
}

impl Drop for IpcEndpoint {
    fn drop(&mut self) {
        let _ = self.engine.generation.with_live(|live| {
            live.forget(Kind::Ipc, self.key);
            Ok(())
        });
        let closed = self.engine.close();
        self.engine.generation.defer(closed);
    }
}

impl fmt::Debug for IpcEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcEndpoint")
            .field("name", &self.engine.path)
            .field("peers", &self.peers().len())
            .finish()
    }
}

impl Resource for Engine {
    fn release(self: Arc<Self>) -> Result<()> {
        self.close()
    }
}

impl Engine {
    /// Wakes the threads waiting for a round of progress, if any.
    fn signal(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this after a waiter's registration and its wait.
            drop(lock(&self.state));
            self.changed.notify_all();
        }
    }

    fn check_open(&self, call: &'static str) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.closed_error(call));
        }
        Ok(())
    }

    /// The error of a call on a closed endpoint: `ShutDown` if its runtime ended.
    fn closed_error(&self, call: &'static str) -> Error {
        if self.generation.is_live() && !self.generation.is_closing() {
            ipc_error(call, "the endpoint is closed")
        } else {
            Error::ShutDown {
                call,
                object: "the IPC endpoint".into(),
            }
        }
    }

    fn at(&self, peer: PeerId) -> PeerRef {
        PeerRef {
            endpoint: self.id,
            peer,
        }
    }

    /// Lists a connected socket as a peer and greets it.
    fn add_peer(&self, fd: OwnedFd, pid: u32) -> PeerId {
        let mut state = lock(&self.state);
        let id = PeerId(state.next_peer);
        state.next_peer += 1;
        let mut peer = Peer {
            id,
            endpoint: self.id,
            socket: Arc::new(fd),
            pid,
            greeted: false,
            alive: true,
            outbox: VecDeque::new(),
            written: 0,
            mappings: Vec::new(),
            unacked: Vec::new(),
            one_shots: Vec::new(),
            unanswered: 0,
        };
        peer.outbox.push_back(
            Message::Hello {
                token: super::process_token(),
                pid: std::process::id(),
            }
            .encode(),
        );
        let mut news = Vec::new();
        flush(&mut peer, &mut news);
        state.peers.push(peer);
        id
    }

    fn send(&self, to: PeerId, buffer: &Buffer, offset: usize, len: usize, tag: u64) -> Result<()> {
        const CALL: &str = "IpcEndpoint::send";
        self.check_open(CALL)?;
        if !buffer.same_generation(&self.generation) {
            buffer.read(0, &mut [])?; // a dead buffer says ShutDown
            return Err(Error::invalid(
                CALL,
                format!("{buffer} is of another runtime"),
            ));
        }
        let inside = offset
            .checked_add(len)
            .is_some_and(|end| end <= buffer.len());
        if len == 0 || !inside {
            return Err(Error::invalid(
                CALL,
                format!("range {offset}..+{len} is empty or outside {buffer}"),
            ));
        }
        let entry = buffer.entry();
        if entry.origin() != Origin::Exportable {
            return Err(Error::invalid(
                CALL,
                format!(
                    "{buffer} is not exportable memory: allocate what you send with \
                     Device::alloc_exportable"
                ),
            ));
        }
        // Wait while too many one-shots to this peer are unanswered. (What peers answered
        // is taken in by every round of progress; a send that finds the cache busy makes
        // one before it falls back to a one-shot.)
        self.one_shot_window(to, CALL)?;
        let at = self.at(to);
        let offset = (buffer.offset_in_allocation() + offset) as u64;
        let len = len as u64;
        let whole = |buffer: &Buffer| -> Result<IpcHandle> {
            let handle = buffer.export()?;
            let size = handle.size();
            handle.range(0, size)
        };
        // What the cache made of this send, for the trace.
        let how: &str;
        let mut attempt = 0;
        let place = loop {
            // The cache stays locked until the messages are queued, so two sends of one
            // allocation to one peer queue their `Map` and `Use` in the order planned.
            let mut cache = lock(&self.shared.cache);
            let (message, unmaps) = match cache.plan(entry.id, at) {
                Plan::Hit {
                    entry,
                    generation,
                    mapping,
                } => {
                    stats::CACHE_HITS.fetch_add(1, Ordering::Relaxed);
                    how = "hit";
                    let message = Message::Use {
                        entry,
                        generation,
                        mapping,
                        tag,
                        offset,
                        len,
                    };
                    (message, Vec::new())
                }
                Plan::Miss {
                    entry,
                    generation,
                    handle,
                } => {
                    stats::CACHE_MISSES.fetch_add(1, Ordering::Relaxed);
                    how = "miss";
                    let message = Message::Map {
                        entry,
                        generation,
                        tag,
                        offset,
                        len,
                        handle,
                    };
                    (message, Vec::new())
                }
                Plan::New => match cache.insert(entry.id, whole(buffer)?, at) {
                    Err(_) if attempt == 0 => {
                        // Every entry is busy: the answers that free one are likely in the
                        // socket already. Take them in and plan again, once.
                        drop(cache);
                        self.progress(Duration::ZERO);
                        attempt += 1;
                        continue;
                    }
                    Ok((entry, generation, handle, unmaps)) => {
                        stats::CACHE_MISSES.fetch_add(1, Ordering::Relaxed);
                        how = "new";
                        let message = Message::Map {
                            entry,
                            generation,
                            tag,
                            offset,
                            len,
                            handle,
                        };
                        (message, unmaps)
                    }
                    Err(handle) => {
                        how = "one-shot (cache busy)";
                        (self.one_shot(handle, tag, offset, len), Vec::new())
                    }
                },
                Plan::OneShot => {
                    how = "one-shot";
                    (self.one_shot(whole(buffer)?, tag, offset, len), Vec::new())
                }
            };
            let queued = self.queue(unmaps, to, entry.id, message);
            if queued.is_err() {
                // The peer is gone: what `plan` counted for it must not pin the entry.
                cache.forget_peer(at);
            }
            drop(cache);
            // What the queueing learnt (a peer that died under it) is applied now that the
            // cache is free.
            self.shared.apply_stashed();
            break queued?;
        };
        tracing::debug!(
            target: "offload::ipc",
            endpoint = self.id,
            peer = %to,
            allocation = entry.id,
            offset,
            len,
            tag,
            cache = how,
            "sent a buffer range"
        );
        match place {
            Some(place) => self.drain_outbox(to, place, CALL),
            None => Ok(()),
        }
    }

    fn one_shot(&self, handle: IpcHandle, tag: u64, offset: u64, len: u64) -> Message {
        stats::ONE_SHOTS.fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        let sequence = state.next_sequence;
        state.next_sequence = state.next_sequence.wrapping_add(1).max(1);
        Message::OneShot {
            sequence,
            tag,
            offset,
            len,
            handle,
        }
    }

    /// Waits (making progress) until `to` has fewer than `ONE_SHOT_WINDOW` one-shots
    /// unanswered; fails if it is gone or does not answer in time.
    fn one_shot_window(&self, to: PeerId, call: &'static str) -> Result<()> {
        let deadline = Instant::now() + self.unmap_timeout.max(Duration::from_secs(1));
        loop {
            let open = {
                let state = lock(&self.state);
                match state.peers.iter().find(|p| p.id == to) {
                    Some(p) if p.alive => p.one_shots.len() < ONE_SHOT_WINDOW as usize,
                    _ => return Err(self.gone(to, call)),
                }
            };
            if open {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ipc_error(
                    call,
                    format!("{to} has not answered {ONE_SHOT_WINDOW} one-shot deliveries"),
                ));
            }
            self.progress((deadline - now).min(POLL_SLICE));
        }
    }

    fn gone(&self, id: PeerId, call: &'static str) -> Error {
        // Closed under the call (by its runtime's shutdown): say that, not the peer.
        if self.closed.load(Ordering::SeqCst) {
            return self.closed_error(call);
        }
        ipc_error(
            call,
            format!(
                "{id} is not connected (its socket closed, it exited or was cut off, or it \
                 never was a peer of this endpoint)"
            ),
        )
    }

    /// Queues `unmaps` (to whichever peers they name) and then `message` to `to`, and
    /// flushes what the sockets take now. `Some(place)`: the message is not written yet,
    /// and is once the peer's `written` count reaches `place`; `None`: it was written.
    fn queue(
        &self,
        unmaps: Vec<Unmap>,
        to: PeerId,
        allocation: u64,
        message: Message,
    ) -> Result<Option<u64>> {
        let mut state = lock(&self.state);
        let mut news = Vec::new();
        for u in unmaps {
            if u.at.endpoint != self.id {
                // Another endpoint's peer: that endpoint sends it.
                drop(state);
                self.shared.send_unmaps(vec![u], false);
                state = lock(&self.state);
                continue;
            }
            if let Some(peer) = state
                .peers
                .iter_mut()
                .find(|p| p.id == u.at.peer && p.alive)
            {
                queue_unmap(peer, &u);
                flush(peer, &mut news);
            }
        }
        let peer = state
            .peers
            .iter_mut()
            .find(|p| p.id == to && p.alive)
            .ok_or_else(|| self.gone(to, "IpcEndpoint::send"))?;
        if let Message::OneShot { sequence, .. } = message {
            peer.one_shots.push((allocation, sequence));
        }
        peer.unanswered += 1;
        peer.outbox.push_back(message.encode());
        let place = peer.written + peer.outbox.len() as u64;
        flush(peer, &mut news);
        let written = peer.written >= place;
        // A peer killed by this flush broke before the message was written (a flush stops
        // at the first error, and the message is last).
        let gone = !peer.alive;
        drop(state);
        self.stash(news);
        if gone {
            return Err(self.gone(to, "IpcEndpoint::send"));
        }
        // Written already (the usual case): nothing to wait for, whatever the peer does
        // next; it may read the message and exit before the sender looks again.
        Ok((!written).then_some(place))
    }

    /// Waits (making progress, so answers coming back are read) until everything queued to
    /// `to` is in its socket: a send returns once its message left this process.
    fn drain_outbox(&self, to: PeerId, place: u64, call: &'static str) -> Result<()> {
        let deadline = Instant::now() + SEND_TIMEOUT;
        loop {
            let backlog = {
                let state = lock(&self.state);
                match state.peers.iter().find(|p| p.id == to) {
                    // Written (perhaps by the progress thread, which may also have seen the
                    // peer hang up since): the send is done.
                    Some(p) if p.written >= place => return Ok(()),
                    Some(p) if p.alive => p.outbox.len(),
                    _ => return Err(self.gone(to, call)),
                }
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(ipc_error(
                    call,
                    format!("{to} has not read its messages ({backlog} queued)"),
                ));
            }
            self.progress((deadline - now).min(POLL_SLICE));
        }
    }

    /// Sends unmaps for these mappings (all of this endpoint's peers) and, if `wait`, waits
    /// until each peer acknowledged them, exited, or the bound ran out. Returns the unmaps
    /// live peers had not acknowledged by then (the caller quarantines or disconnects).
    fn unmap(&self, unmaps: &[Unmap], wait: bool) -> Vec<Unmap> {
        let mut targets: Vec<PeerId> = Vec::new();
        {
            let mut state = lock(&self.state);
            let mut news = Vec::new();
            for u in unmaps {
                if let Some(peer) = state
                    .peers
                    .iter_mut()
                    .find(|p| p.id == u.at.peer && p.alive)
                {
                    queue_unmap(peer, u);
                    flush(peer, &mut news);
                    if !targets.contains(&peer.id) {
                        targets.push(peer.id);
                    }
                }
            }
            drop(state);
            // A send may hold the cache here (it evicted an entry another endpoint's peers
            // mapped): stash, not apply.
            self.stash(news);
        }
        if !wait {
            return Vec::new();
        }
        self.apply_stashed();
        if targets.is_empty() {
            return Vec::new(); // nobody to wait for
        }
        let started = Instant::now();
        let deadline = started + self.unmap_timeout;
        tracing::debug!(
            target: "offload::ipc",
            endpoint = self.id,
            peers = targets.len(),
            unmaps = unmaps.len(),
            timeout_ms = self.unmap_timeout.as_millis() as u64,
            "waiting for peers to unmap"
        );
        loop {
            let waiting: Vec<PeerId> = {
                let state = lock(&self.state);
                state
                    .peers
                    .iter()
                    .filter(|p| targets.contains(&p.id) && p.alive && !p.unacked.is_empty())
                    .map(|p| p.id)
                    .collect()
            };
            if waiting.is_empty() {
                tracing::debug!(
                    target: "offload::ipc",
                    endpoint = self.id,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "peers unmapped (or are gone)"
                );
                return Vec::new();
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    target: "offload::ipc",
                    endpoint = self.id,
                    peers = ?waiting,
                    timeout_ms = self.unmap_timeout.as_millis() as u64,
                    "peers did not acknowledge unmaps in time"
                );
                let state = lock(&self.state);
                return unmaps
                    .iter()
                    .filter(|u| self.still_unacked(&state, u))
                    .copied()
                    .collect();
            }
            // The peer may be another endpoint of this process that nobody is driving now:
            // help every local endpoint along while waiting.
            self.shared.help(self.id);
            self.progress((deadline - now).min(Duration::from_millis(1)));
        }
    }

    /// Whether `u`'s peer is alive and has not acknowledged it.
    fn still_unacked(&self, state: &State, u: &Unmap) -> bool {
        u.at.endpoint == self.id
            && state.peers.iter().any(|p| {
                p.id == u.at.peer && p.alive && p.unacked.contains(&(u.entry, u.generation))
            })
    }

    /// A view of (entry, generation) from `peer` was dropped: tell the peer; a one-shot
    /// mapping closes with its view.
    fn view_dropped(&self, peer: PeerId, entry: u32, generation: u32) {
        let closing = {
            let mut state = lock(&self.state);
            let mut news = Vec::new();
            let mut closing = None;
            if let Some(p) = state.peers.iter_mut().find(|p| p.id == peer && p.alive) {
                if let Some(i) = p
                    .mappings
                    .iter()
                    .position(|m| m.entry == entry && m.generation == generation)
                {
                    let m = &mut p.mappings[i];
                    m.views = m.views.saturating_sub(1);
                    if m.one_shot && m.views == 0 {
                        closing = Some(p.mappings.remove(i));
                    }
                }
                p.outbox
                    .push_back(Message::Done { entry, generation }.encode());
                flush(p, &mut news);
            }
            drop(state);
            self.finish_dead(news);
            closing
        };
        if let Some(m) = closing {
            self.close_mapping(m);
        }
        self.signal();
    }

    /// Closes a mapping: its allocation is forgotten and freed, and its views answer
    /// `InvalidIpcHandle` from now on.
    fn close_mapping(&self, m: Mapping) {
        if !m.one_shot {
            stats::cached_mapping_closed();
        }
        // Forgotten and freed under the generation's lock, as `Buffer::free` does: a
        // teardown in between would find it in no registry and deinitialise its platform
        // with it still allocated.
        let freed = match self.generation.with_live(|live| {
            live.forget(Kind::Buffer, m.key);
            Ok(m.buffer.revoke())
        }) {
            Ok(freed) => freed,
            // The runtime is ending: its teardown frees what is listed; this one too.
            Err(_) => m.buffer.revoke(),
        };
        self.generation.defer(freed);
    }

    /// One round of progress, waiting at most `wait` for something to happen: accept, read
    /// and answer, flush. If another thread is making progress, waits for its round instead.
    fn progress(&self, wait: Duration) {
        let Ok(turn) = self.progress.try_lock() else {
            if !wait.is_zero() {
                let state = lock(&self.state);
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let _ = self.changed.wait_timeout(state, wait.min(POLL_SLICE));
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
            return;
        };
        // Poll on copies of the sockets (the state is not locked while waiting).
        let sockets: Vec<(PeerId, Arc<OwnedFd>, bool)> = {
            let state = lock(&self.state);
            state
                .peers
                .iter()
                .filter(|p| p.alive)
                .map(|p| (p.id, p.socket.clone(), !p.outbox.is_empty()))
                .collect()
        };
        // One peer and nothing to write (a ping-pong): try its socket directly while
        // spinning, so an answer costs one read and no poll.
        if let [(id, socket, false)] = sockets.as_slice() {
            if !wait.is_zero() {
                let until = Instant::now() + SPIN.min(wait);
                loop {
                    match socket::recv(socket.as_fd()) {
                        Ok(None) => {}
                        read => {
                            self.finish_round(turn, Some((*id, read)), Vec::new(), false);
                            return;
                        }
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
        }
        let mut fds = Vec::with_capacity(sockets.len() + 1);
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        for (_, socket, writing) in &sockets {
            let mut flags = PollFlags::IN;
            if *writing {
                flags |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&**socket, flags));
        }
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut ready = rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0);
        if ready == 0 && !wait.is_zero() {
            let spin_until = Instant::now() + SPIN.min(wait);
            while ready == 0 && Instant::now() < spin_until {
                std::hint::spin_loop();
                ready = rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0);
            }
            if ready == 0 {
                let timeout = wait.min(POLL_SLICE);
                let timeout = rustix::event::Timespec {
                    tv_sec: timeout.as_secs() as i64,
                    tv_nsec: i64::from(timeout.subsec_nanos()),
                };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
        }
        let ready: Vec<(PeerId, PollFlags)> = sockets
            .iter()
            .zip(&fds[1..])
            .map(|((id, _, _), fd)| (*id, fd.revents()))
            .collect();
        let listening = !fds[0].revents().is_empty();
        drop(fds);

        if listening {
            self.accept_all();
        }
        self.finish_round(turn, None, ready, true);
    }

    /// The second half of a round of progress: handle a packet read while spinning, or read
    /// the peers `poll` found ready; flush; close what died; wake waiters.
    fn finish_round(
        &self,
        turn: std::sync::MutexGuard<'_, ()>,
        spun: Option<(PeerId, std::io::Result<Option<socket::Packet>>)>,
        ready: Vec<(PeerId, PollFlags)>,
        flush_all: bool,
    ) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        let mut news = Vec::new();
        let mut closing = Closing::default();
        {
            let mut state = lock(&self.state);
            let mut touched = Vec::new();
            if let Some((id, read)) = spun {
                if let Some(index) = state.peers.iter().position(|p| p.id == id && p.alive) {
                    self.take_packet(&mut state, index, read, &mut news, &mut closing);
                    touched.push(id);
                }
            }
            for (id, revents) in ready {
                if revents.is_empty() {
                    continue;
                }
                let Some(index) = state.peers.iter().position(|p| p.id == id && p.alive) else {
                    continue;
                };
                if revents.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                    self.read_peer(&mut state, index, &mut news, &mut closing);
                }
                touched.push(id);
            }
            for peer in state
                .peers
                .iter_mut()
                .filter(|p| p.alive && (flush_all || touched.contains(&p.id)))
            {
                flush(peer, &mut news);
            }
            state.peers.retain(|p| p.alive || !p.mappings.is_empty());
        }
        // The turn ends before mappings close: closing waits for the work queued on them,
        // which may itself call into this endpoint (a host function that receives).
        drop(turn);
        // I3: an `UnmapAck` enters its peer's outbox only once its mapping is really
        // closed (queued work on it finished, the memory unmapped), so no other thread's
        // flush can send it early.
        if !closing.mappings.is_empty() || !closing.acks.is_empty() {
            for m in closing.mappings {
                self.close_mapping(m);
            }
            let mut state = lock(&self.state);
            for (id, ack) in closing.acks {
                if let Some(peer) = state.peers.iter_mut().find(|p| p.id == id && p.alive) {
                    peer.outbox.push_back(ack.encode());
                }
            }
            for peer in state
                .peers
                .iter_mut()
                .filter(|p| p.alive && !p.outbox.is_empty())
            {
                flush(peer, &mut news);
            }
        }
        self.finish_dead(news);
        self.apply_stashed();
        self.signal();
    }

    fn accept_all(&self) {
        loop {
            match socket::accept(self.listener.as_fd()) {
                Ok(Some((fd, Ok(pid)))) => {
                    let peer = self.add_peer(fd, pid);
                    tracing::info!(
                        target: "offload::ipc",
                        endpoint = self.id,
                        %peer,
                        pid,
                        "accepted a peer"
                    );
                }
                Ok(Some((fd, Err(e)))) => {
                    // Another user, or credentials we cannot read: refused.
                    stats::PEERS_REFUSED.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        target: "offload::ipc",
                        endpoint = self.id,
                        error = %e,
                        "refused a connection"
                    );
                    drop(fd);
                }
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Reads and handles what peer `index` sent. Returns whether something was delivered.
    fn read_peer(
        &self,
        state: &mut State,
        index: usize,
        news: &mut Vec<CacheNews>,
        closing: &mut Closing,
    ) -> bool {
        let mut delivered = false;
        for _ in 0..READ_BATCH {
            let socket = state.peers[index].socket.clone();
            match self.take_packet(state, index, socket::recv(socket.as_fd()), news, closing) {
                Some(d) => delivered |= d,
                None => break,
            }
        }
        delivered
    }

    /// Handles what one read of peer `index` gave: `None` when there is nothing more to
    /// read from it now (no packet, or it was cut off), else whether a delivery came.
    fn take_packet(
        &self,
        state: &mut State,
        index: usize,
        read: std::io::Result<Option<socket::Packet>>,
        news: &mut Vec<CacheNews>,
        closing: &mut Closing,
    ) -> Option<bool> {
        let cut_off = |state: &mut State, news: &mut Vec<CacheNews>, why: Option<&'static str>| {
            let why = match why {
                Some(violation) => {
                    stats::REJECTED.fetch_add(1, Ordering::Relaxed);
                    let peer = &state.peers[index];
                    tracing::warn!(
                        target: "offload::ipc",
                        endpoint = self.id,
                        peer = %peer.id,
                        pid = peer.pid,
                        violation,
                        "a peer broke the protocol: cutting it off"
                    );
                    "it broke the protocol"
                }
                None => "its socket closed",
            };
            kill(&mut state.peers[index], news, why);
            std::mem::take(&mut state.peers[index].mappings)
        };
        let packet = match read {
            Ok(Some(packet)) => packet,
            Ok(None) => return None,
            Err(_) => {
                closing.mappings.extend(cut_off(state, news, None));
                return None;
            }
        };
        let message = if packet.truncated {
            Err(wire::WireError::Oversized)
        } else {
            wire::decode(&packet.bytes, packet.fds)
        };
        // Malformed, forged or oversized: counted, and the peer is cut off (its
        // descriptors were closed with the packet).
        let Ok(message) = message else {
            closing.mappings.extend(cut_off(
                state,
                news,
                Some("a malformed, forged or oversized message"),
            ));
            return None;
        };
        match self.handle(state, index, message, news, closing) {
            Ok(delivered) => Some(delivered),
            Err(()) => {
                closing
                    .mappings
                    .extend(cut_off(state, news, Some("a message out of turn")));
                None
            }
        }
    }

    /// Handles one well-formed message from peer `index`: `Err` for a protocol violation.
    fn handle(
        &self,
        state: &mut State,
        index: usize,
        message: Message,
        news: &mut Vec<CacheNews>,
        closing: &mut Closing,
    ) -> std::result::Result<bool, ()> {
        let peer_id = state.peers[index].id;
        if !state.peers[index].greeted {
            return match message {
                Message::Hello { .. } => {
                    state.peers[index].greeted = true;
                    Ok(false)
                }
                _ => Err(()), // anything before `Hello`
            };
        }
        match message {
            Message::Hello { .. } => return Err(()), // a second one
            Message::Map { entry, .. } if entry == ONE_SHOT => return Err(()),
            Message::Map { .. } | Message::Use { .. } | Message::OneShot { .. } => {
                if let Some((tag, what)) = Pending::of(message) {
                    state.deliveries.push_back(Delivery {
                        peer: peer_id,
                        tag,
                        what,
                    });
                }
                return Ok(true);
            }
            Message::Unmap {
                entry,
                generation,
                mapping: _,
            } => {
                stats::UNMAPS_RECEIVED.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    target: "offload::ipc",
                    endpoint = self.id,
                    peer = %peer_id,
                    entry,
                    generation,
                    "the sender unmapped memory it sent"
                );
                let peer = &mut state.peers[index];
                let ack = Message::UnmapAck { entry, generation };
                match peer
                    .mappings
                    .iter()
                    .position(|m| m.entry == entry && m.generation == generation)
                {
                    Some(i) => {
                        closing.mappings.push(peer.mappings.remove(i));
                        closing.acks.push((peer_id, ack));
                    }
                    None => peer.outbox.push_back(ack.encode()),
                }
                // Deliveries of it not taken yet go too (their descriptors close): the
                // sender no longer has it. Each is answered, so the sender does not wait
                // for it.
                let mut dropped = 0;
                state.deliveries.retain(|d| {
                    let of_it = d.peer == peer_id
                        && match d.what {
                            Pending::Map {
                                entry: e,
                                generation: g,
                                ..
                            }
                            | Pending::Use {
                                entry: e,
                                generation: g,
                                ..
                            } => e == entry && g == generation,
                            Pending::OneShot { sequence, .. } => {
                                entry == ONE_SHOT && sequence == generation
                            }
                        };
                    dropped += usize::from(of_it);
                    !of_it
                });
                for _ in 0..dropped {
                    let failed = Message::Failed {
                        entry,
                        generation,
                        code: FailCode::UnknownMapping,
                    };
                    state.peers[index].outbox.push_back(failed.encode());
                }
            }
            Message::Mapped {
                entry,
                generation,
                mapping,
            } => news.push(CacheNews::Mapped(peer_id, entry, generation, mapping)),
            Message::Failed {
                entry, generation, ..
            } => {
                let peer = &mut state.peers[index];
                peer.unanswered = peer.unanswered.saturating_sub(1);
                if entry == ONE_SHOT {
                    peer.one_shots.retain(|&(_, s)| s != generation);
                } else {
                    news.push(CacheNews::Answered(peer_id, entry, generation, false));
                }
            }
            Message::Done { entry, generation } => {
                let peer = &mut state.peers[index];
                peer.unanswered = peer.unanswered.saturating_sub(1);
                if entry == ONE_SHOT {
                    peer.one_shots.retain(|&(_, s)| s != generation);
                } else {
                    news.push(CacheNews::Answered(peer_id, entry, generation, true));
                }
            }
            Message::UnmapAck { entry, generation } => {
                let peer = &mut state.peers[index];
                if let Some(i) = peer
                    .unacked
                    .iter()
                    .position(|&(e, g)| e == entry && g == generation)
                {
                    peer.unacked.remove(i);
                    if entry == ONE_SHOT {
                        // Unmapped: it no longer counts against the window (its `Done`
                        // still comes when the receiver drops the view).
                        peer.one_shots.retain(|&(_, s)| s != generation);
                    }
                    stats::UNMAPS_ACKED.fetch_add(1, Ordering::Relaxed);
                    news.push(CacheNews::Acked(peer_id, entry, generation));
                }
                // An acknowledgement nobody waits for is stale: dropped.
            }
        }
        Ok(false)
    }

    /// Takes the next delivery and maps what it names: a `Map` or `OneShot` imports (and a
    /// `Map` answers `Mapped`), a `Use` finds its mapping. A delivery that cannot be made
    /// is answered `Failed` and skipped.
    /// A delivery that cannot be made is answered `Failed` to its sender and returned
    /// here as the typed error (a backend's import error, or the peer's bad reference), so
    /// the receiver never waits for a message that will not come.
    fn take_delivery(&self) -> Option<Result<Received>> {
        let mut closing = Vec::new();
        let mut news = Vec::new();
        let taken = {
            let mut state = lock(&self.state);
            loop {
                let Some(d) = state.deliveries.pop_front() else {
                    break None;
                };
                let Some(index) = state.peers.iter().position(|p| p.id == d.peer && p.alive) else {
                    continue; // its peer is gone: so is the memory
                };
                let peer_id = d.peer;
                let how = match d.what {
                    Pending::Map { .. } => "map",
                    Pending::Use { .. } => "cached",
                    Pending::OneShot { .. } => "one-shot",
                };
                let made = self.materialize(&mut state, index, d.what, &mut closing);
                let peer = &mut state.peers[index];
                match made {
                    Ok(buffer) => {
                        tracing::debug!(
                            target: "offload::ipc",
                            endpoint = self.id,
                            peer = %peer_id,
                            tag = d.tag,
                            len = buffer.len(),
                            mapping = how,
                            "received a buffer range"
                        );
                        flush(peer, &mut news);
                        break Some(Ok(Received {
                            peer: peer_id,
                            tag: d.tag,
                            buffer,
                        }));
                    }
                    Err(undelivered) => {
                        let (failed, error) = *undelivered;
                        stats::REJECTED.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            target: "offload::ipc",
                            endpoint = self.id,
                            peer = %peer_id,
                            tag = d.tag,
                            mapping = how,
                            answer = ?failed,
                            "could not deliver a buffer range"
                        );
                        let reason = format!(
                            "{peer_id} sent tag {} ({how}), which could not be delivered: \
                             {failed:?}",
                            d.tag
                        );
                        peer.outbox.push_back(failed.encode());
                        flush(peer, &mut news);
                        // The backend's own error when there is one (typed, naming its
                        // backend and call); else the peer's bad reference.
                        break Some(Err(match error {
                            Some(e) => e,
                            None => ipc_error("IpcEndpoint::recv", reason),
                        }));
                    }
                }
            }
        };
        for m in closing {
            self.close_mapping(m);
        }
        self.finish_dead(news);
        taken
    }

    /// Makes the view a delivery names, or the `Failed` answer to send instead (with the
    /// error that caused it, when there is one).
    fn materialize(
        &self,
        state: &mut State,
        index: usize,
        what: Pending,
        closing: &mut Vec<Mapping>,
    ) -> std::result::Result<Buffer, Box<(Message, Option<Error>)>> {
        let peer_id = state.peers[index].id;
        match what {
            Pending::Map {
                entry,
                generation,
                offset,
                len,
                handle,
            } => {
                // A stale mapping of this entry (an older generation, or the same one
                // again): the sender no longer has it, so neither do we.
                let peer = &mut state.peers[index];
                while let Some(i) = peer.mappings.iter().position(|m| m.entry == entry) {
                    closing.push(peer.mappings.remove(i));
                }
                let (buffer, key) = self.import(handle).map_err(|(code, e)| {
                    let failed = Message::Failed {
                        entry,
                        generation,
                        code,
                    };
                    Box::new((failed, e))
                })?;
                let id = state.next_mapping;
                state.next_mapping = state.next_mapping.wrapping_add(1).max(1);
                let view = self.view(peer_id, &buffer, entry, generation, offset, len);
                stats::cached_mapping_opened();
                let peer = &mut state.peers[index];
                peer.mappings.push(Mapping {
                    entry,
                    generation,
                    id,
                    buffer,
                    key,
                    views: 1,
                    one_shot: false,
                });
                let mapped = Message::Mapped {
                    entry,
                    generation,
                    mapping: id,
                };
                peer.outbox.push_back(mapped.encode());
                Ok(view)
            }
            Pending::Use {
                entry,
                generation,
                mapping,
                offset,
                len,
            } => {
                let failed = |code| Message::Failed {
                    entry,
                    generation,
                    code,
                };
                let peer = &mut state.peers[index];
                let m = peer
                    .mappings
                    .iter_mut()
                    .find(|m| {
                        m.entry == entry
                            && m.generation == generation
                            && !m.one_shot
                            && (mapping == 0 || m.id == mapping)
                    })
                    .ok_or_else(|| Box::new((failed(FailCode::UnknownMapping), None)))?;
                if offset.saturating_add(len) > m.buffer.size() as u64 {
                    return Err(Box::new((failed(FailCode::Range), None)));
                }
                m.views += 1;
                let buffer = m.buffer.clone();
                Ok(self.view(peer_id, &buffer, entry, generation, offset, len))
            }
            Pending::OneShot {
                sequence,
                offset,
                len,
                handle,
            } => {
                let (buffer, key) = self.import(handle).map_err(|(code, e)| {
                    let failed = Message::Failed {
                        entry: ONE_SHOT,
                        generation: sequence,
                        code,
                    };
                    Box::new((failed, e))
                })?;
                let view = self.view(peer_id, &buffer, ONE_SHOT, sequence, offset, len);
                state.peers[index].mappings.push(Mapping {
                    entry: ONE_SHOT,
                    generation: sequence,
                    id: 0,
                    buffer,
                    key,
                    views: 1,
                    one_shot: true,
                });
                Ok(view)
            }
        }
    }

    /// Maps a peer's memory on the device the handle names.
    fn import(
        &self,
        handle: IpcHandle,
    ) -> std::result::Result<(Arc<BufferEntry>, ResourceKey), (FailCode, Option<Error>)> {
        if self.closed.load(Ordering::SeqCst) || self.generation.is_closing() {
            return Err((FailCode::Closing, None));
        }
        let no_device = || Error::InvalidIpcHandle {
            backend: Some(handle.backend()),
            call: "IpcEndpoint::recv",
            reason: "no device of this runtime has the memory's device UUID".into(),
        };
        let Some(device) = self.device_for(&handle) else {
            return Err((FailCode::Import, Some(no_device())));
        };
        match import_entry(&device, handle) {
            Ok((key, entry, _, _)) => Ok((entry, key)),
            Err(e) => Err((FailCode::Import, Some(e))),
        }
    }

    /// The device of this runtime a handle names (backend and UUID); opens the platforms
    /// of that backend if nothing opened them yet.
    fn device_for(&self, handle: &IpcHandle) -> Option<Device> {
        let generation = &self.generation;
        let backend = handle.backend();
        generation
            .with_live(|live| {
                Ok(live
                    .platforms
                    .iter()
                    .enumerate()
                    .filter(|(_, slot)| slot.kind() == backend)
                    .flat_map(|(index, _)| live.devices_of(index, &generation.config))
                    .find(|(_, raw)| raw.uuid().ok() == Some(handle.device_uuid()))
                    .map(|(key, _)| Device::new(generation.clone(), key, backend)))
            })
            .ok()
            .flatten()
    }

    fn view(
        &self,
        peer: PeerId,
        buffer: &Arc<BufferEntry>,
        entry: u32,
        generation: u32,
        offset: u64,
        len: u64,
    ) -> Buffer {
        let token = ViewToken {
            engine: self.weak(),
            peer,
            entry,
            generation,
        };
        Buffer::view(
            self.generation.clone(),
            buffer.clone(),
            offset as usize,
            len as usize,
            Arc::new(token),
        )
    }

    fn weak(&self) -> Weak<Engine> {
        self.shared.endpoint(self.id).unwrap_or_default()
    }

    /// Keeps cache news for later (the caller may hold the cache).
    fn stash(&self, news: Vec<CacheNews>) {
        if !news.is_empty() {
            lock(&self.stashed).extend(news);
        }
    }

    /// Applies stashed news (the cache must not be held), closing dead peers' mappings.
    fn apply_stashed(&self) {
        let news = std::mem::take(&mut *lock(&self.stashed));
        self.finish_dead(news);
    }

    /// Applies what peers answered to the cache, then to the quarantine (which may free
    /// memory: not under the cache's lock).
    fn apply(&self, news: Vec<CacheNews>) {
        if news.is_empty() {
            return;
        }
        {
            let mut cache = lock(&self.shared.cache);
            for n in &news {
                match *n {
                    CacheNews::Mapped(peer, entry, generation, mapping) => {
                        cache.mapped(self.at(peer), entry, generation, mapping)
                    }
                    CacheNews::Answered(peer, entry, generation, done) => {
                        cache.answered(self.at(peer), entry, generation, done)
                    }
                    CacheNews::Gone(peer) => cache.forget_peer(self.at(peer)),
                    CacheNews::Acked(..) => {}
                }
            }
        }
        let quarantine = &self.shared.quarantine;
        for n in news {
            match n {
                CacheNews::Acked(peer, entry, generation) => {
                    quarantine.acked(&self.generation, self.at(peer), entry, generation)
                }
                CacheNews::Gone(peer) => quarantine.gone(&self.generation, self.at(peer)),
                CacheNews::Mapped(..) | CacheNews::Answered(..) => {}
            }
        }
    }

    /// Cache news, then the mappings of dead peers are closed.
    fn finish_dead(&self, news: Vec<CacheNews>) {
        if news.is_empty() {
            return; // nobody died in this round (a death always brings news)
        }
        self.apply(news);
        let closing: Vec<Mapping> = {
            let mut state = lock(&self.state);
            state
                .peers
                .iter_mut()
                .filter(|p| !p.alive)
                .flat_map(|p| std::mem::take(&mut p.mappings))
                .collect()
        };
        for m in closing {
            self.close_mapping(m);
        }
    }

    /// Closes the endpoint (idempotent): peers unmap what was sent from here (bounded
    /// wait), this endpoint's mappings of theirs are closed, connections and the socket go.
    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let unmaps = lock(&self.shared.cache).release_endpoint(self.id);
        tracing::info!(
            target: "offload::ipc",
            endpoint = self.id,
            unmaps = unmaps.len(),
            "closing an IPC endpoint"
        );
        let unanswered = self.unmap(&unmaps, true);
        // Every peer goes with the endpoint, through `kill`: the cache and the quarantine
        // hear of it (`Gone`), so memory quarantined for one of them is released now, not
        // at shutdown, and the dead peers' mappings close.
        let mut news = Vec::new();
        {
            let mut state = lock(&self.state);
            for peer in state.peers.iter_mut() {
                let why = if unanswered.iter().any(|u| u.at.peer == peer.id) {
                    "it did not acknowledge unmaps in time"
                } else {
                    "its endpoint closed"
                };
                kill(peer, &mut news, why);
            }
        }
        self.finish_dead(news);
        let (mappings, deliveries, peers) = {
            let mut state = lock(&self.state);
            let mappings: Vec<Mapping> = state
                .peers
                .iter_mut()
                .flat_map(|p| std::mem::take(&mut p.mappings))
                .collect();
            let deliveries = std::mem::take(&mut state.deliveries);
            let peers = std::mem::take(&mut state.peers);
            (mappings, deliveries, peers)
        };
        for m in mappings {
            self.close_mapping(m);
        }
        drop(deliveries); // their views answer errors now; their drops find no peer
        drop(peers); // their sockets were shut down by `kill`
        self.shared.remove_endpoint(self.id);
        let _ = std::fs::remove_file(&self.path);
        self.signal();
        Ok(())
    }
}

/// Queues an unmap to `peer` and remembers that it must be acknowledged.
fn queue_unmap(peer: &mut Peer, u: &Unmap) {
    stats::UNMAPS_SENT.fetch_add(1, Ordering::Relaxed);
    peer.unacked.push((u.entry, u.generation));
    peer.outbox.push_back(
        Message::Unmap {
            entry: u.entry,
            generation: u.generation,
            mapping: u.mapping,
        }
        .encode(),
    );
}

/// Writes what the peer's socket takes now; a broken socket kills the peer.
fn flush(peer: &mut Peer, news: &mut Vec<CacheNews>) {
    while let Some((bytes, fd)) = peer.outbox.front() {
        match socket::send(peer.socket.as_fd(), bytes, fd.as_ref().map(|f| f.as_fd())) {
            Ok(Sent::Done) => {
                peer.outbox.pop_front();
                peer.written += 1;
            }
            Ok(Sent::WouldBlock) => return,
            Err(_) => {
                kill(peer, news, "its socket broke");
                return;
            }
        }
    }
}

/// The peer is gone (its socket broke, it broke the protocol, or it did not answer in
/// time): nothing more is sent to it, and the cache forgets it. Its mappings are closed
/// by the caller.
fn kill(peer: &mut Peer, news: &mut Vec<CacheNews>, why: &'static str) {
    if !peer.alive {
        return;
    }
    tracing::info!(
        target: "offload::ipc",
        endpoint = peer.endpoint,
        peer = %peer.id,
        pid = peer.pid,
        why,
        "a peer is gone"
    );
    peer.alive = false;
    peer.outbox.clear();
    peer.unacked.clear();
    let _ = rustix::net::shutdown(&*peer.socket, rustix::net::Shutdown::Both);
    news.push(CacheNews::Gone(peer.id));
}

/// The IPC state a generation owns: its one sender-side cache, its endpoints, its
/// quarantine and its progress thread.
pub(crate) struct Shared {
    pub(crate) cache: Mutex<super::cache::Cache>,
    endpoints: Mutex<Vec<(u64, Weak<Engine>)>>,
    quarantine: Quarantine,
    progress: Progress,
}

impl Extension for Arc<Shared> {
    fn stop(&self) {
        self.stop_progress();
    }

    fn released(&self) {
        Shared::released(self);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Shared {
    pub(crate) fn new(capacity: usize) -> Shared {
        Shared {
            cache: Mutex::new(super::cache::Cache::new(capacity)),
            endpoints: Mutex::new(Vec::new()),
            quarantine: Quarantine::default(),
            progress: Progress::default(),
        }
    }

    /// Stops and joins the progress thread (a teardown begins releasing).
    pub(crate) fn stop_progress(&self) {
        self.progress.stop();
    }

    /// The teardown released every endpoint and buffer: quarantined memory went with them.
    pub(crate) fn released(&self) {
        self.quarantine.clear();
    }

    /// One tick of the progress thread: a round, without waiting, on every endpoint
    /// nobody made progress on since the last tick. `seen` is the thread's memory of
    /// (endpoint, rounds).
    pub(crate) fn tick(&self, seen: &mut Vec<(u64, u64)>) {
        let engines = self.engines();
        seen.retain(|(id, _)| engines.iter().any(|e| e.id == *id));
        for engine in engines {
            if engine.closed.load(Ordering::SeqCst) {
                continue;
            }
            let rounds = engine.rounds.load(Ordering::Relaxed);
            let last = match seen.iter().position(|(id, _)| *id == engine.id) {
                Some(i) => i,
                None => {
                    seen.push((engine.id, u64::MAX));
                    seen.len() - 1
                }
            };
            if seen[last].1 == rounds {
                engine.progress(Duration::ZERO);
            }
            seen[last].1 = engine.rounds.load(Ordering::Relaxed);
        }
    }

    /// The unmaps of the one-shot mappings of `allocation` peers may still hold (sent,
    /// neither answered nor unmapped yet): its owner is freeing it (I3).
    pub(crate) fn one_shot_unmaps(&self, allocation: u64) -> Vec<Unmap> {
        let mut unmaps = Vec::new();
        for engine in self.engines() {
            let state = lock(&engine.state);
            for peer in state.peers.iter().filter(|p| p.alive) {
                for &(_, sequence) in peer.one_shots.iter().filter(|(a, _)| *a == allocation) {
                    unmaps.push(Unmap {
                        at: engine.at(peer.id),
                        entry: ONE_SHOT,
                        generation: sequence,
                        mapping: 0,
                    });
                }
            }
        }
        unmaps
    }

    /// Quarantines `entry` for the unmaps live peers had not acknowledged (see
    /// `quarantine.rs`); false if every one of them was answered meanwhile.
    pub(crate) fn quarantine(
        &self,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        unanswered: &[Unmap],
    ) -> bool {
        let awaited = unanswered
            .iter()
            .map(|u| (u.at, u.entry, u.generation))
            .collect();
        self.quarantine
            .hold(entry, key, awaited, |&(at, entry, generation)| {
                let Some(engine) = self.endpoint(at.endpoint).and_then(|w| w.upgrade()) else {
                    return false;
                };
                let state = lock(&engine.state);
                engine.still_unacked(
                    &state,
                    &Unmap {
                        at,
                        entry,
                        generation,
                        mapping: 0,
                    },
                )
            })
    }

    /// The pids of the peers these unmaps went to, for messages (`pid 12, pid 40`).
    pub(crate) fn pids(&self, unmaps: &[Unmap]) -> String {
        let mut pids: Vec<u32> = Vec::new();
        for u in unmaps {
            if let Some(engine) = self.endpoint(u.at.endpoint).and_then(|w| w.upgrade()) {
                let state = lock(&engine.state);
                if let Some(p) = state.peers.iter().find(|p| p.id == u.at.peer) {
                    if !pids.contains(&p.pid) {
                        pids.push(p.pid);
                    }
                }
            }
        }
        let named: Vec<String> = pids.iter().map(|p| format!("pid {p}")).collect();
        match named.len() {
            0 => "a peer".into(),
            _ => named.join(", "),
        }
    }

    fn add_endpoint(&self, id: u64, engine: Weak<Engine>) {
        lock(&self.endpoints).push((id, engine));
    }

    fn remove_endpoint(&self, id: u64) {
        lock(&self.endpoints).retain(|(e, _)| *e != id);
    }

    /// The endpoints still alive.
    fn engines(&self) -> Vec<Arc<Engine>> {
        lock(&self.endpoints)
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    fn endpoint(&self, id: u64) -> Option<Weak<Engine>> {
        lock(&self.endpoints)
            .iter()
            .find(|(e, _)| *e == id)
            .map(|(_, w)| w.clone())
    }

    /// Applies the news every endpoint stashed (the cache must not be held).
    fn apply_stashed(&self) {
        for engine in self.engines() {
            engine.apply_stashed();
        }
    }

    /// One round of progress, without waiting, on every endpoint but `except`.
    fn help(&self, except: u64) {
        let endpoints = lock(&self.endpoints);
        if endpoints.len() < 2 {
            return;
        }
        drop(endpoints);
        let others: Vec<Arc<Engine>> = lock(&self.endpoints)
            .iter()
            .filter(|(id, _)| *id != except)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for engine in others {
            engine.progress(Duration::ZERO);
        }
    }

    /// Sends these unmaps through the endpoints that own their peers; `wait` for the
    /// acknowledgements (bounded). Returns those live peers had not acknowledged in time.
    pub(crate) fn send_unmaps(&self, unmaps: Vec<Unmap>, wait: bool) -> Vec<Unmap> {
        let mut by_endpoint: Vec<(u64, Vec<Unmap>)> = Vec::new();
        for u in unmaps {
            match by_endpoint.iter_mut().find(|(e, _)| *e == u.at.endpoint) {
                Some((_, list)) => list.push(u),
                None => by_endpoint.push((u.at.endpoint, vec![u])),
            }
        }
        let mut unanswered = Vec::new();
        for (endpoint, list) in by_endpoint {
            if let Some(engine) = self.endpoint(endpoint).and_then(|w| w.upgrade()) {
                unanswered.extend(engine.unmap(&list, wait));
            }
        }
        unanswered
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer {}", self.0)
    }
}
