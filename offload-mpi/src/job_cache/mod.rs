//! The job-wide compile cache ([`JobCache`]): offload's shared compile cache
//! (`offload_core::SharedCache`) over MPI, so that one rank of a job compiles each program
//! and the others receive its image. Owns the client side (the asks of this rank, the
//! `Bye` of its close) and, on rank 0, the server ([`server`]); the directory and the byte
//! format live beside it ([`directory`], [`wire`]). Every wait polls MPI and ends when the
//! rank it waits for is seen dead or the wait runs out; the caller then compiles alone, so
//! the cache can cost a compile, never fail or hang a load.

mod directory;
mod server;
mod wire;

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mpi::Threading;
use mpi::environment::Universe;
use mpi::traits::*;
use offload_core::{CompileKey, Result, SharedCache};

use self::directory::Answer;
use self::server::{Board, Server, Service};
use self::wire::Msg;
use crate::comm::{self, CloseAtFinalize, Comm, LIVENESS_POLL, Lost, Staged, lock};
use crate::hook;
use crate::mpi_error;

/// The MPI tag of every message to the server (its kind is in the message).
const REQUEST_TAG: i32 = 1;
/// The MPI tag of the server's last message to a rank, the answer to its `Bye`.
const BYE_TAG: i32 = 2;
/// The MPI tags of answers: each ask takes the next one, so threads of one rank can ask at
/// once (a tag reused after `REPLY_TAGS` asks meets at worst a stale answer, which names
/// another key or the same image). Within the 32767 every MPI allows.
const FIRST_REPLY_TAG: i32 = 16;
const REPLY_TAGS: u32 = 32_000;
/// How often a rank waiting for an answer looks for it.
const POLL: Duration = Duration::from_millis(1);
/// The rank of the server.
const SERVER: i32 = 0;

/// What a [`JobCache`] did in this process (see [`JobCache::stats`]).
///
/// ```no_run
/// # let universe = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap().0;
/// let cache = offload_mpi::JobCache::install(&universe)?;
/// let stats = cache.stats();
/// println!(
///     "received {} images, compiled {} for the job and {} alone",
///     stats.fetched, stats.compiled_for_job, stats.compiled_alone
/// );
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobCacheStats {
    /// Images this rank received from the job: another rank compiled them.
    pub fetched: u64,
    /// Images this rank compiled and gave to the job (the server told it to).
    pub compiled_for_job: u64,
    /// Compiles this rank ran without the job: the rank compiling its key or the server
    /// died, that rank's compile failed (each waiter then gets the compiler's error
    /// itself), the wait ran out, or the cache was closing.
    pub compiled_alone: u64,
    /// On the server (rank 0): images it handed out, to other ranks or its own threads.
    pub served: u64,
    /// On the server: asks waiting for a rank's compile now.
    pub waiting: u64,
    /// On the server: images it holds.
    pub images: u64,
}

/// Whether this rank still asks, and how many asks are running.
#[derive(Default)]
struct Gate {
    closing: bool,
    active: usize,
}

/// The server's part on rank 0: the board, and the service thread until the hook stops it.
struct ServerSide {
    board: Arc<Board>,
    service: Mutex<Option<(Arc<AtomicBool>, Service)>>,
}

/// A compile cache for the whole MPI job (Proteus's `PROTEUS_OBJECT_CACHE_CHAIN=mpi-storage`):
/// each program the ranks load is compiled by one rank, and the others receive its image
/// instead of compiling it again. See the [crate docs](crate#the-job-cache) for the
/// protocol and its limits.
///
/// Installed in every rank with [`JobCache::install`], which makes it offload's shared
/// compile cache: a program's load asks it after a miss in the program's memory and in the
/// disk cache, and writes what it gets to the disk cache
/// (`offload_core::CompileStats::shared_hits` counts the images it gave).
///
/// Dropping it closes it, and it borrows the `Universe`, so Rust drops it before
/// `MPI_Finalize` (the `Universe`'s drop): its server's thread then ends while MPI is fully
/// threaded. The drop is collective: on rank 0 it waits until every other rank dropped its
/// own (or died, or `OFFLOAD_MPI_FINALIZE_TIMEOUT` ran out). One left open (leaked with
/// `mem::forget`) is closed by the finalize hook; see the crate docs for why rank 0's
/// should not be.
///
/// ```no_run
/// // Run with `mpiexec -n 4 ./program`: one rank compiles, the others receive its image.
/// use offload_core::{PlatformEntry, Platforms, Offload, Program, Source};
///
/// struct Host;
/// impl Platforms for Host {
///     fn platforms() -> Vec<PlatformEntry> { vec![offload_host::platform()] }
/// }
///
/// // The cache's server answers on a thread of its own: MPI_THREAD_MULTIPLE.
/// let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple)
///     .expect("MPI initialises once");
/// let rt = Offload::<_, Host>::init()?;
/// offload_mpi::attach(&universe, rt.clone())?;
/// let cache = offload_mpi::JobCache::install(&universe)?;
/// let dev = rt.devices()?.remove(0);
/// let program = Program::from_source(Source::c(r#"
///     #include "offload_host.h"
///     OFFLOAD_KERNEL(put, "bI") {
///         uint32_t *buf = OFFLOAD_BUFFER(uint32_t, 0);
///         uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);
///         for (uint32_t t = 0; t < launch->block[0]; t++) {
///             uint64_t i = OFFLOAD_INDEX_X(t);
///             if (i < n) buf[i] = 7;
///         }
///     }
/// "#)).load(&dev)?; // compiled by one rank of the job
/// let stats = cache.stats();
/// assert_eq!(stats.fetched + stats.compiled_for_job + stats.compiled_alone, 1);
/// drop(program);
/// drop(cache); // closed: collective (rank 0 waits for the others' close)
/// drop(rt);
/// drop(universe); // MPI_Finalize: the hook shuts offload down
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct JobCache<'u> {
    cache: Arc<Cache>,
    /// Borrowed for as long as the cache runs: it is closed before `MPI_Finalize`.
    universe: PhantomData<&'u Universe>,
}

/// The cache itself: offload's shared cache, the finalize hook's to close.
pub(crate) struct Cache {
    comm: Arc<Comm>,
    rank: i32,
    /// How long an ask waits for a rank before compiling alone.
    timeout: Duration,
    gate: Mutex<Gate>,
    idle: Condvar,
    next_tag: AtomicU32,
    /// The server was seen dead: every ask compiles alone.
    server_gone: AtomicBool,
    /// On rank 0 only.
    server: Option<ServerSide>,
    fetched: AtomicU64,
    compiled_for_job: AtomicU64,
    compiled_alone: AtomicU64,
    /// Whether the close ran, and what it found until the finalize hook takes it.
    closed: Mutex<Closing>,
}

/// The close of a cache: not yet, or done (with its outcome, until the hook took it).
enum Closing {
    Open,
    Closed(Option<Closed>),
}

/// What a close found.
struct Closed {
    abandoned: usize,
    errors: Vec<String>,
    lost: Lost,
}

impl<'u> JobCache<'u> {
    /// Starts the job cache and installs it as offload's shared compile cache
    /// (`offload_core::set_shared_cache`). Collective over `MPI_COMM_WORLD`: it duplicates
    /// it for its own traffic, gathers every rank's process (to tell dead ranks) and, on
    /// rank 0, starts the server's thread.
    ///
    /// Needs MPI initialised with `MPI_THREAD_MULTIPLE`
    /// (`mpi::initialize_with_threading(mpi::Threading::Multiple)`): the server answers on a
    /// thread of its own while the rank's program runs; with less, `Error::Ipc` (call
    /// `offload_mpi::JobCache::install`) names the level required and the one provided.
    /// [`crate::attach`] must run first (its finalize hook closes a cache left open), and a
    /// process installs one job cache: `Error::InvalidArgument` otherwise. Neither check
    /// is collective, so a refusal leaves MPI as it was.
    ///
    /// ```no_run
    /// let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Multiple)
    ///     .expect("MPI initialises once");
    /// assert_eq!(threading, mpi::Threading::Multiple);
    /// # struct Host;
    /// # impl offload_core::Platforms for Host {
    /// #     fn platforms() -> Vec<offload_core::PlatformEntry> { vec![offload_host::platform()] }
    /// # }
    /// let rt = offload_core::Offload::<_, Host>::init()?;
    /// offload_mpi::attach(&universe, rt.clone())?;
    /// let cache = offload_mpi::JobCache::install(&universe)?;
    /// assert_eq!(cache.is_server(), cache.rank() == 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn install(universe: &'u Universe) -> Result<JobCache<'u>> {
        const CALL: &str = "offload_mpi::JobCache::install";
        let provided = mpi::environment::threading_support();
        if provided != Threading::Multiple {
            return Err(mpi_error(
                CALL,
                format!(
                    "the job cache needs MPI_THREAD_MULTIPLE (its server answers on a thread \
                     of its own), and MPI provides {provided:?}: initialise MPI with \
                     mpi::initialize_with_threading(mpi::Threading::Multiple)"
                ),
            ));
        }
        hook::may_register_job_cache(CALL)?;
        let comm = Comm::new(universe.world().duplicate());
        let rank = comm.get().rank();
        let timeout = hook::finalize_timeout();
        let server = (rank == SERVER).then(|| ServerSide {
            board: Arc::new(Board::default()),
            service: Mutex::new(None),
        });
        let cache = Arc::new(Cache {
            comm: comm.clone(),
            rank,
            timeout,
            gate: Mutex::new(Gate::default()),
            idle: Condvar::new(),
            next_tag: AtomicU32::new(0),
            server_gone: AtomicBool::new(false),
            server,
            fetched: AtomicU64::new(0),
            compiled_for_job: AtomicU64::new(0),
            compiled_alone: AtomicU64::new(0),
            closed: Mutex::new(Closing::Open),
        });
        if let Some(side) = &cache.server {
            let stop = Arc::new(AtomicBool::new(false));
            let service = Server::new(comm, side.board.clone(), timeout)
                .spawn(stop.clone())
                .map_err(|e| mpi_error(CALL, format!("the server's thread: {e}")))?;
            *lock(&side.service) = Some((stop, service));
        }
        if let Err(e) = hook::register_job_cache(CALL, cache.clone()) {
            // Another thread installed one meanwhile: this one's thread stops here.
            if let Some((stop, service)) =
                cache.server.as_ref().and_then(|s| lock(&s.service).take())
            {
                stop.store(true, Ordering::Release);
                // The loser's thread: its panic would only repeat the error returned below.
                let _ = service.join();
            }
            return Err(e);
        }
        offload_core::set_shared_cache(Some(cache.clone()));
        Ok(JobCache {
            cache,
            universe: PhantomData,
        })
    }

    /// This process's rank (in `MPI_COMM_WORLD`).
    ///
    /// ```no_run
    /// # let universe = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap().0;
    /// let cache = offload_mpi::JobCache::install(&universe)?;
    /// println!("rank {} of the job cache", cache.rank());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn rank(&self) -> i32 {
        self.cache.rank
    }

    /// Whether this rank is the server (rank 0): it keeps the job's images and answers the
    /// others.
    ///
    /// ```no_run
    /// # let universe = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap().0;
    /// let cache = offload_mpi::JobCache::install(&universe)?;
    /// if cache.is_server() {
    ///     println!("the job's images live here");
    /// }
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_server(&self) -> bool {
        self.cache.server.is_some()
    }

    /// What the cache did in this process so far.
    ///
    /// ```no_run
    /// # let universe = mpi::initialize_with_threading(mpi::Threading::Multiple).unwrap().0;
    /// let cache = offload_mpi::JobCache::install(&universe)?;
    /// // ... load programs ...
    /// let stats = cache.stats();
    /// assert!(stats.compiled_for_job + stats.compiled_alone <= offload_core::compile_stats().compiles);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn stats(&self) -> JobCacheStats {
        self.cache.stats()
    }
}

impl Drop for JobCache<'_> {
    /// Closes the cache (see [`JobCache`]): on the server, waits until every other rank
    /// closed its own (or died, or the finalize timeout ran out).
    fn drop(&mut self) {
        let cache = &self.cache;
        if catch_unwind(AssertUnwindSafe(|| {
            cache.close_once(hook::finalize_timeout())
        }))
        .is_err()
        {
            *lock(&cache.closed) = Closing::Closed(Some(Closed {
                abandoned: 0,
                errors: vec!["closing the job cache panicked".into()],
                lost: Lost::default(),
            }));
        }
    }
}

impl std::fmt::Debug for JobCache<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobCache")
            .field("rank", &self.rank())
            .field("server", &self.is_server())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Cache {
    fn stats(&self) -> JobCacheStats {
        let (served, waiting, images) = self
            .server
            .as_ref()
            .map_or((0, 0, 0), |side| side.board.counts());
        JobCacheStats {
            fetched: self.fetched.load(Ordering::Relaxed),
            compiled_for_job: self.compiled_for_job.load(Ordering::Relaxed),
            compiled_alone: self.compiled_alone.load(Ordering::Relaxed),
            served,
            waiting,
            images,
        }
    }

    /// Counts an ask in, unless the cache is closing.
    fn enter(&self) -> Option<Active<'_>> {
        let mut gate = lock(&self.gate);
        if gate.closing {
            return None;
        }
        gate.active += 1;
        Some(Active(self))
    }

    fn alone(&self, compile: &mut dyn FnMut() -> Result<Vec<u8>>) -> Result<Vec<u8>> {
        self.compiled_alone.fetch_add(1, Ordering::Relaxed);
        compile()
    }

    /// An ask of rank 0: through the board, without MPI.
    fn ask_here(
        &self,
        side: &ServerSide,
        key: &CompileKey,
        compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let gone = || lock(&side.service).is_none();
        match side.board.ask_here(*key, self.timeout, gone) {
            Answer::Image(image) => {
                self.fetched.fetch_add(1, Ordering::Relaxed);
                Ok(image.to_vec())
            }
            Answer::Compile => {
                let compiled = leased(compile, || side.board.failed(*key, SERVER));
                match compiled {
                    Ok(image) => {
                        self.compiled_for_job.fetch_add(1, Ordering::Relaxed);
                        side.board.put(*key, Arc::from(&image[..]));
                        Ok(image)
                    }
                    Err(e) => {
                        side.board.failed(*key, SERVER);
                        Err(e)
                    }
                }
            }
            Answer::Local => self.alone(compile),
        }
    }

    /// An ask of another rank: `Ask` to the server, then its answer on a tag of this ask's
    /// own, polled; the server's death or the timeout ends the wait.
    fn ask_server(
        &self,
        key: &CompileKey,
        compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        if self.server_gone.load(Ordering::Relaxed) {
            return self.alone(compile);
        }
        let tag =
            FIRST_REPLY_TAG + (self.next_tag.fetch_add(1, Ordering::Relaxed) % REPLY_TAGS) as i32;
        if !self.send(&Msg::Ask { key: *key, tag }) {
            return self.alone(compile);
        }
        let server = self.comm.get().process_at_rank(SERVER);
        let deadline = Instant::now() + self.timeout;
        let mut looked = Instant::now();
        loop {
            if let Some((msg, status)) = server.immediate_matched_probe_with_tag(tag) {
                let bytes = comm::receive_bytes(msg, &status);
                match Msg::decode(&bytes) {
                    Ok(Msg::Image { key: of, image }) if of == *key => {
                        self.fetched.fetch_add(1, Ordering::Relaxed);
                        return Ok(image);
                    }
                    Ok(Msg::Compile { key: of }) if of == *key => {
                        return self.compile_for_job(key, compile);
                    }
                    Ok(Msg::Local { key: of }) if of == *key => return self.alone(compile),
                    // A stale lease (an earlier ask on this tag stopped waiting before it
                    // came): given back, so nobody waits for its image.
                    Ok(Msg::Compile { key: of }) => {
                        self.send(&Msg::Failed { key: of });
                    }
                    // Another stale answer to an earlier ask that used this tag.
                    Ok(_) => {}
                    // Not an answer to trust (an image that does not match its checksum).
                    Err(_) => {
                        self.send(&Msg::Cancel { key: *key, tag });
                        return self.alone(compile);
                    }
                }
            }
            let now = Instant::now();
            if now.duration_since(looked) >= LIVENESS_POLL {
                looked = now;
                if self.comm.is_dead(SERVER) {
                    self.server_gone.store(true, Ordering::Relaxed);
                    return self.alone(compile);
                }
            }
            if now >= deadline {
                self.send(&Msg::Cancel { key: *key, tag });
                return self.alone(compile);
            }
            std::thread::sleep(POLL);
        }
    }

    /// The server told this rank to compile `key`: it does, and sends the image (or says
    /// that it failed, so the waiters compile themselves).
    fn compile_for_job(
        &self,
        key: &CompileKey,
        compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        match leased(compile, || {
            self.send(&Msg::Failed { key: *key });
        }) {
            Ok(image) => {
                self.compiled_for_job.fetch_add(1, Ordering::Relaxed);
                self.send(&Msg::Put {
                    key: *key,
                    image: image.clone(),
                });
                Ok(image)
            }
            Err(e) => {
                self.send(&Msg::Failed { key: *key });
                Err(e)
            }
        }
    }

    /// Sends `msg` to the server and waits until MPI is done with it: `false` when the
    /// server died or it did not complete within the timeout (the send is abandoned).
    fn send(&self, msg: &Msg) -> bool {
        if self.server_gone.load(Ordering::Relaxed) {
            return false;
        }
        let mut send = Staged::start(self.comm.get(), SERVER, REQUEST_TAG, msg.encode());
        let deadline = Instant::now() + self.timeout;
        let mut looked = Instant::now();
        loop {
            if send.is_done() {
                return true;
            }
            let now = Instant::now();
            let dead = now.duration_since(looked) >= LIVENESS_POLL && {
                looked = now;
                self.comm.is_dead(SERVER)
            };
            if dead {
                self.server_gone.store(true, Ordering::Relaxed);
            }
            if dead || now >= deadline {
                send.abandon();
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Closes the cache unless it was: the outcome waits for the finalize hook. A second
    /// caller waits for the first one's close.
    fn close_once(&self, timeout: Duration) {
        let mut closed = lock(&self.closed);
        if matches!(*closed, Closing::Open) {
            let mut lost = Lost::default();
            let (abandoned, errors) = self.shut(&mut lost, timeout);
            *closed = Closing::Closed(Some(Closed {
                abandoned,
                errors,
                lost,
            }));
        }
    }

    fn shut(&self, lost: &mut Lost, timeout: Duration) -> (usize, Vec<String>) {
        let deadline = Instant::now() + timeout;
        let mut errors = Vec::new();
        {
            let mut gate = lock(&self.gate);
            gate.closing = true;
            while gate.active > 0 && Instant::now() < deadline {
                gate = self
                    .idle
                    .wait_timeout(gate, LIVENESS_POLL)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            if gate.active > 0 {
                errors.push(format!(
                    "the job cache closed with {} loads still asking it",
                    gate.active
                ));
            }
        }
        // Removed from offload, unless another cache replaced it meanwhile.
        let installed = offload_core::set_shared_cache(None);
        let ours = |other: &Arc<dyn SharedCache>| {
            std::ptr::addr_eq(Arc::as_ptr(other), self as *const Cache)
        };
        if installed.as_ref().is_some_and(|other| !ours(other)) {
            offload_core::set_shared_cache(installed);
        }
        let abandoned = match &self.server {
            Some(side) => {
                let Some((stop, service)) = lock(&side.service).take() else {
                    return (0, errors);
                };
                stop.store(true, Ordering::Release);
                match service.join() {
                    Ok((server, panicked)) => {
                        errors.extend(panicked);
                        server.finish(lost, timeout)
                    }
                    Err(_) => {
                        errors.push("the job cache's service thread panicked".into());
                        0
                    }
                }
            }
            None => self.say_bye(lost, timeout),
        };
        (abandoned, errors)
    }

    /// A client's close: `Bye` to the server, then every message from it is received (and
    /// dropped: answers nobody waits for any more) until its `ByeAck`, so nothing it sent
    /// is left in MPI. Returns the sends abandoned.
    fn say_bye(&self, lost: &mut Lost, timeout: Duration) -> usize {
        let world = self.comm.procs.world(SERVER);
        if lost.contains(world) {
            return 0;
        }
        if self.server_gone.load(Ordering::Relaxed) || self.comm.is_dead(SERVER) {
            lost.dead.insert(world);
            return 0;
        }
        let c = self.comm.get();
        let bye = Staged::start(c, SERVER, REQUEST_TAG, Msg::Bye.encode());
        let server = c.process_at_rank(SERVER);
        let deadline = Instant::now() + timeout;
        let mut looked = Instant::now();
        loop {
            if let Some((msg, status)) = server.immediate_matched_probe() {
                // Drained while waiting for the server's goodbye; only its tag matters.
                let _ = comm::receive_bytes(msg, &status);
                if status.tag() == BYE_TAG {
                    break;
                }
                continue;
            }
            let now = Instant::now();
            if now.duration_since(looked) >= LIVENESS_POLL {
                looked = now;
                if self.comm.is_dead(SERVER) {
                    lost.dead.insert(world);
                    break;
                }
            }
            if now >= deadline {
                lost.unresponsive.insert(world);
                break;
            }
            std::thread::sleep(POLL);
        }
        comm::settle(&self.comm, vec![bye], Instant::now() + timeout, lost)
    }
}

impl CloseAtFinalize for Cache {
    /// Closes the cache, in the finalize hook before anything else: no new asks (they
    /// compile alone), the running ones end, offload's shared cache is removed; then a
    /// client says `Bye` and receives until the server's last message, and the server stops
    /// its thread and answers until every live rank said `Bye`. Dead ranks are skipped and
    /// every wait ends after `timeout` (recorded in `lost`). Returns the sends abandoned and
    /// the errors met.
    fn close(&self, lost: &mut Lost, timeout: Duration) -> (usize, Vec<String>) {
        self.close_once(timeout);
        match &mut *lock(&self.closed) {
            Closing::Closed(outcome) => match outcome.take() {
                Some(closed) => {
                    lost.dead.extend(closed.lost.dead);
                    lost.unresponsive.extend(closed.lost.unresponsive);
                    (closed.abandoned, closed.errors)
                }
                None => (0, Vec::new()),
            },
            Closing::Open => (0, Vec::new()),
        }
    }
}

impl SharedCache for Cache {
    fn get_or_compile(
        &self,
        key: &CompileKey,
        compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let Some(_active) = self.enter() else {
            return self.alone(compile);
        };
        match &self.server {
            Some(side) => self.ask_here(side, key, compile),
            None => self.ask_server(key, compile),
        }
    }
}

/// An ask running (counted in the gate until dropped, also when a compile panics).
struct Active<'a>(&'a Cache);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        let mut gate = lock(&self.0.gate);
        gate.active -= 1;
        if gate.active == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// Runs `compile` under a lease: if it panics, `give_back` frees the lease first (so the
/// waiters do not wait for an image that never comes), then the panic goes on.
fn leased(
    compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    give_back: impl FnOnce(),
) -> Result<Vec<u8>> {
    match catch_unwind(AssertUnwindSafe(compile)) {
        Ok(result) => result,
        Err(panic) => {
            give_back();
            resume_unwind(panic)
        }
    }
}
