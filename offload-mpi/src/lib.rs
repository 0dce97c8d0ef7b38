//! # offload-mpi
//!
//! offload inside MPI programs (docs/contract.md M1), over [rsmpi](https://docs.rs/mpi) 0.8 and the
//! system MPI (Debian's MPICH):
//!
//! - [`attach`] hooks offload's shutdown to `MPI_Finalize`: a program that never calls
//!   `shutdown` still drains its queues and unmaps its IPC peers, while MPI still works.
//! - [`Ranks`] makes the ranks of a job IPC peers: ranks on one node (an
//!   `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` communicator) send buffer ranges through
//!   offload's IPC endpoints and its one sender-side cache (one export per allocation, one
//!   import per peer); ranks on other nodes, or every rank when `OFFLOAD_MPI_STAGED=1`, get
//!   the bytes staged through host memory and sent with MPI point-to-point.
//! - [`JobCache`] is a compile cache for the whole job: one rank compiles each program the
//!   ranks load from source, the others receive its image ([the job cache](#the-job-cache)).
//!
//! ## The finalize protocol
//!
//! [`attach`] duplicates `MPI_COMM_WORLD` for offload's own traffic and sets an attribute
//! on `MPI_COMM_SELF` whose delete callback MPI runs at the very start of `MPI_Finalize`
//! (the standard's "allowing user functions at process termination": `MPI_COMM_SELF` is
//! freed first, while MPI is still fully usable — the technique Proteus #402 uses). The callback, on every rank:
//!
//! 0. closes a [`JobCache`] left open (one dropped before finalize is closed already; see
//!    [the job cache](#the-job-cache));
//! 1. for every [`Ranks`], sends a sentinel to every other rank and receives from every
//!    other rank until its sentinel, discarding staged messages nobody received, so no
//!    offload message is pending in MPI when MPI goes away (then completes its staged
//!    sends);
//! 2. waits in a barrier on the duplicated communicator: from here no rank sends offload
//!    traffic any more;
//! 3. gives back the runtime reference [`attach`] was handed (`shutdown`), unless
//!    [`give_back`] did already: when it is the last one, the runtime drains its queues,
//!    runs teardowns and unmaps its memory from every IPC peer (the peers, in the same
//!    step, answer the unmaps);
//! 4. waits in a second barrier, so no rank leaves while a peer still waits on it;
//!
//! and records what happened in [`finalize_report`]. No panic crosses the C callback; an
//! error is recorded, never raised inside MPI. The barriers are point-to-point tokens
//! (each rank sends one to every other and waits for theirs), not `MPI_Barrier`, so that
//! the protocol can stop waiting for a rank that died (next section).
//!
//! ## A rank that dies
//!
//! MPICH (4.0, ch4) does not report a dead rank to the others: with `MPI_ERRORS_RETURN` a
//! small send to it still returns `MPI_SUCCESS`, and a receive from it, a large
//! (rendezvous) send to it, a barrier with it and `MPI_Finalize` wait forever. So offload
//! learns it from the operating system: every communicator it takes gathers each rank's
//! process id, start time and node, and a rank of this node whose process ended (gone from
//! `/proc`, all its threads zombies, or its pid reused) is dead ([`Ranks::is_dead`]).
//!
//! - [`Ranks::send`] to a dead rank fails with `Error::Ipc { call: "Ranks::send", .. }`
//!   whose reason names the rank and its process ("rank 2 is dead (its process 1234 on
//!   this node ended: exited or killed)"), followed, through IPC, by the endpoint's own
//!   error (the socket closed: `IpcEndpoint::send: peer 3 is not connected ...`). Staged,
//!   the send is refused before MPI gets it. [`Ranks::recv`] from a dead rank fails the
//!   same way once nothing it sent is left. Neither hangs nor panics.
//! - The finalize hook neither sends to a dead rank nor waits for it: its sentinel
//!   exchange and barriers look every 50 ms whether the ranks they wait for died, staged
//!   sends to a dead rank are abandoned (left to MPI, their bytes leaked), and the
//!   runtime's shutdown drops the dead IPC peer. [`FinalizeReport::dead`] lists the dead
//!   ranks (of `MPI_COMM_WORLD`).
//! - A rank of another node cannot be seen dead from here: as the last defence each wait
//!   of the protocol gives up after `OFFLOAD_MPI_FINALIZE_TIMEOUT` seconds (default 60;
//!   [`FINALIZE_TIMEOUT_ENV`]), and [`FinalizeReport::unresponsive`] lists the ranks it
//!   stopped waiting for. (So does a live rank that never calls `MPI_Finalize`; the
//!   runtime's shutdown then also waits for that IPC peer's unmap answers up to offload's
//!   own bound, `OFFLOAD_IPC_UNMAP_TIMEOUT_MS`.)
//!
//! What MPI itself does next is MPI's. Measured with Debian's MPICH 4.0.2 (Hydra, ch4:ucx):
//! a plain `mpiexec` kills every rank as soon as one dies (exit code 9), so the survivors
//! never finalize; with `mpiexec -disable-auto-cleanup` they go on (Hydra signals them
//! `SIGUSR1`, which MPICH catches), but `MPI_Finalize`, after offload's hook returned,
//! waits for the dead rank and never returns (until `mpiexec` is killed). A rank that is
//! Hydra's own child and dies by a signal also makes Hydra 4.0.2's proxy fail
//! (`HYDU_sock_write ... Bad file descriptor`), which kills the survivors; the test runs
//! each rank under `sh -c 'trap "" USR1; ...'` to keep them (`tests/mpiexec.rs`).
//!
//! ```no_run
//! // Run with `mpiexec -n 2 ./program`.
//! use offload_core::{MemKind, PlatformEntry, Platforms, Offload};
//!
//! struct Host;
//! impl Platforms for Host {
//!     fn platforms() -> Vec<PlatformEntry> { vec![offload_host::platform()] }
//! }
//!
//! let universe = mpi::initialize().expect("MPI initialises once");
//! let world = universe.world();
//! let rt = Offload::<_, Host>::init()?;
//! let dev = rt.devices()?.remove(0);
//! offload_mpi::attach(&universe, rt.clone())?; // the hook's reference, given back in MPI_Finalize
//! let ranks = offload_mpi::Ranks::new(&rt, &world, &dev)?;
//! drop(rt); // only the hook's reference is left
//! if ranks.rank() == 0 {
//!     let buf = dev.alloc_exportable(4096, MemKind::Device)?;
//!     buf.write(0, &[7; 4096])?;
//!     ranks.send(&buf, 0..4096, 1, 5)?;
//!     ranks.wait_sent(1)?; // rank 1 dropped its view: `buf` may change again
//! } else if ranks.rank() == 1 {
//!     let got = ranks.recv(0, 5)?; // a view of rank 0's memory (IPC) or a copy (staged)
//!     let mut bytes = vec![0; got.len()];
//!     got.read(0, &mut bytes)?;
//!     assert!(bytes.iter().all(|&b| b == 7));
//! }
//! drop(ranks);
//! drop(universe); // MPI_Finalize: offload shuts down inside it
//! assert!(offload_mpi::finalize_report().unwrap().shut_down);
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! A program that wants to shut offload down itself before finalize calls [`give_back`]
//! first (the hook's reference keeps the runtime alive otherwise); finalize then runs only
//! the MPI steps (1, 2, 4).
//!
//! Communicators this crate keeps (the duplicate of the world, one per [`Ranks`]) are never
//! freed by it: `MPI_Finalize` reclaims them, and a handle freed after it would abort the
//! job. A [`Ranks`] may be dropped after `MPI_Finalize`, but not used: its IPC calls answer
//! offload's `Error::ShutDown`, its staged calls `Error::Ipc`.
//!
//! ## The job cache
//!
//! [`JobCache`] is what Proteus calls `PROTEUS_OBJECT_CACHE_CHAIN=mpi-storage`: a compile
//! cache shared by every rank of the job, behind offload's own shared-cache hook
//! (`offload_core::set_shared_cache`). A load asks it after a miss in the program's memory
//! and in the rank's disk cache; what it answers is written to that disk cache, and
//! `offload_core::CompileStats::shared_hits` counts it. The key is offload's compile key
//! (a SHA-256 of the language, the compiler's identity and version, its target, the
//! options and the text), so an image is only ever the one the rank would have compiled.
//!
//! **A server rank.** Rank 0 of a duplicate of `MPI_COMM_WORLD` keeps a directory, key →
//! image, or key → the rank compiling it (its lease) and the asks waiting; a thread of its
//! own answers the other ranks, and rank 0's own loads use the directory without MPI. This
//! is Proteus's shape too. It makes "one compile per key" a local decision of one process
//! and the death of the compiling rank one process's business; the other shapes cost more
//! here: a key's owner chosen by hash spreads the directory but makes every rank a server
//! (a thread polling MPI in each), and one-sided windows need the target to progress MPI
//! anyway, in MPICH. The price is rank 0's memory (every image of the job) and its thread.
//!
//! | who | sends | on tag | when |
//! |---|---|---|---|
//! | client | `Ask(key, reply tag)` | 1 | a miss; the answer comes on the reply tag |
//! | server | `Image(key, bytes, SHA-256)` | reply | the key is done: the client checks the checksum |
//! | server | `Compile(key)` | reply | nobody has it: the client holds the lease |
//! | client | `Put(key, bytes, SHA-256)` / `Failed(key)` | 1 | its compile ended; the waiters get `Image` / `Local` |
//! | server | `Local(key)` | reply | compile alone: the holder failed or died, or the server closes |
//! | client | `Cancel(key, reply tag)` | 1 | it stopped waiting |
//! | client / server | `Bye` / `ByeAck` | 1 / 2 | the close |
//!
//! Each ask takes a reply tag of its own, so threads of one rank ask at once. A compile
//! that fails sends its waiters to compile alone: each gets the compiler's error, with its
//! whole log, itself.
//!
//! **Nobody hangs.** A waiting client polls for its answer (every millisecond) and looks
//! every 50 ms whether the server died; the server looks as often whether a lease holder
//! died, and then tells its waiters `Local` (deaths are seen as in
//! [A rank that dies](#a-rank-that-dies): on this node, through `/proc`). A lease held longer
//! than `OFFLOAD_MPI_FINALIZE_TIMEOUT` (default 60 s) is freed, and every wait for another
//! rank ends after as long: the asker compiles alone. So the cache can cost a compile,
//! never fail or hang a load ([`JobCacheStats::compiled_alone`] counts those compiles).
//!
//! **The close.** Dropping the [`JobCache`] closes it; it borrows the `Universe`, so it
//! is dropped before `MPI_Finalize`. New asks then compile alone, the running ones end,
//! and it is removed from offload. A client sends `Bye` and receives everything the server
//! sends it until `ByeAck`; rank 0 stops its thread, then answers until every other rank
//! said `Bye`, is dead, or the finalize timeout ran out, and completes its sends. No job
//! cache message is then left in MPI. The drop is collective: rank 0's waits for the
//! others' `Bye`. A cache left open (leaked) is closed by the finalize hook, first thing.
//!
//! It needs `MPI_THREAD_MULTIPLE`: initialise MPI with
//! `mpi::initialize_with_threading(mpi::Threading::Multiple)`; [`JobCache::install`]
//! refuses less with `Error::Ipc` naming the level it needs.
//!
//! Limits:
//! - Rank 0 keeps every image in memory for the job's life (no bound), and all traffic
//!   goes through its one thread.
//! - A compile that takes longer than the finalize timeout makes its waiters compile too.
//! - Ranks share images only when they compile with the same compiler (its identity is in
//!   the key); ranks of other nodes cannot be seen dead, so one that dies costs its waiters
//!   the timeout.
//! - Do not leak rank 0's `JobCache`: MPICH 4.0 stops taking its own locks as
//!   `MPI_Finalize` begins, before the hook runs, so a server thread then inside an MPI
//!   call leaves MPICH's global mutex locked, and `MPI_Finalize` aborts at its end
//!   (`pthread_mutex_destroy: Device or resource busy`; 2 jobs in 20 with the cache busy
//!   just before finalize). Leaking a client's is safe: it has no thread.
//! - With `mpiexec -disable-auto-cleanup`, once a rank died Hydra 4.0.2 sends `SIGUSR1` to
//!   each survivor's process group: MPICH catches it in the rank, but a compiler the rank
//!   runs then (the host backend's `cc`) dies of it, and that load fails. The test gives
//!   the ranks a compiler wrapper that ignores `SIGUSR1`.
//!
//! ```no_run
//! let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple)
//!     .expect("MPI initialises once");
//! # struct Host;
//! # impl offload_core::Platforms for Host {
//! #     fn platforms() -> Vec<offload_core::PlatformEntry> { vec![offload_host::platform()] }
//! # }
//! let rt = offload_core::Offload::<_, Host>::init()?;
//! offload_mpi::attach(&universe, rt.clone())?;
//! let cache = offload_mpi::JobCache::install(&universe)?;
//! // ... every load from source now asks the job first ...
//! let stats = cache.stats();
//! println!("{} images from the job, {} compiled here for it", stats.fetched, stats.compiled_for_job);
//! drop(cache); // before MPI_Finalize (the borrow checker sees to it)
//! drop(rt);
//! drop(universe);
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! ## Limits
//!
//! - Tags are `u32`; a rank receives with [`Ranks::recv`] from one rank and tag at a time
//!   (no wildcard), without a timeout (it fails when that rank is seen dead).
//! - Dead ranks are seen only on this node and on Linux (`/proc`); a rank of another node
//!   that dies costs the finalize protocol its timeout, and sends to it are not refused
//!   (MPI takes them). Nothing makes `MPI_Finalize` itself return after a rank died.
//! - Built and tested with Debian's MPICH 4.0 only (an MPI whose `MPI_Comm` is an integer,
//!   so communicators are `Send`).
//!
//! ## Tests and programs
//!
//! `tests/mpiexec.rs` runs the programs of `src/bin` under `mpiexec -n 2..4` (they are
//! `[[bin]]` targets so the test finds them with `CARGO_BIN_EXE_*`):
//! `offload-mpi-finalize` (offload shut down inside `MPI_Finalize`), `offload-mpi-ring`
//! (a buffer around a ring, IPC or staged), `offload-mpi-killed` (a rank SIGKILLs itself:
//! the survivors' sends to it fail typed and their finalize hook skips it),
//! `offload-mpi-job-cache` (four ranks load programs through the job cache: one compile per
//! program in the job, each rank its own values; a rank killed while it compiles for the
//! job, or the server, costs the others a compile and no hang) and the `mpi_ring` example;
//! `offload-mpi-bench` times a cached IPC send against `MPI_Send` of the same bytes
//! (`mpiexec -n 2 target/release/offload-mpi-bench`), `offload-mpi-job-cache-bench` the
//! first launch on 4 ranks with the job cache against each rank compiling
//! (`mpiexec -n 4 target/release/offload-mpi-job-cache-bench`).

mod hook;
mod job_cache;
mod procs;
mod ranks;

pub use hook::{FinalizeReport, attach, finalize_report, give_back, is_attached};
pub use job_cache::{JobCache, JobCacheStats};
pub use ranks::{Ranks, Route};

/// The `OFFLOAD_MPI_STAGED` variable: `1` stages every send through host memory and MPI,
/// also between ranks of one node.
pub const STAGED_ENV: &str = "OFFLOAD_MPI_STAGED";

/// The `OFFLOAD_MPI_FINALIZE_TIMEOUT` variable: how many seconds (a decimal number) each
/// wait of the finalize protocol waits for ranks that are not known dead before it goes on
/// without them (default 60). The last defence only: ranks of this node that died are seen
/// dead at once and not waited for (see the [crate docs](crate#a-rank-that-dies)). Keep it
/// above what the runtime's shutdown takes (it may wait for IPC peers' unmap answers up to
/// `OFFLOAD_IPC_UNMAP_TIMEOUT_MS`): the barrier after the shutdown waits for the slowest
/// rank's.
pub const FINALIZE_TIMEOUT_ENV: &str = "OFFLOAD_MPI_FINALIZE_TIMEOUT";

pub(crate) fn mpi_error(call: &'static str, reason: impl Into<String>) -> offload_core::Error {
    offload_core::Error::Ipc {
        call,
        reason: reason.into(),
    }
}
