//! # offload-mpi
//!
//! offload inside MPI programs (DESIGN.md M1), over [rsmpi](https://docs.rs/mpi) 0.8 and the
//! system MPI (Debian's MPICH):
//!
//! - [`attach`] hooks offload's shutdown to `MPI_Finalize`: a program that never calls
//!   `shutdown` still drains its queues and unmaps its IPC peers, while MPI still works.
//! - [`Ranks`] makes the ranks of a job IPC peers: ranks on one node (an
//!   `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` communicator) send buffer ranges through
//!   offload's IPC endpoints and its one sender-side cache (one export per allocation, one
//!   import per peer); ranks on other nodes, or every rank when `OFFLOAD_MPI_STAGED=1`, get
//!   the bytes staged through host memory and sent with MPI point-to-point.
//!
//! ## The finalize protocol
//!
//! [`attach`] duplicates `MPI_COMM_WORLD` for offload's own traffic and sets an attribute
//! on `MPI_COMM_SELF` whose delete callback MPI runs at the very start of `MPI_Finalize`
//! (the standard's "allowing user functions at process termination": `MPI_COMM_SELF` is
//! freed first, while MPI is still fully usable — the technique Proteus #402 uses). The callback, on every rank:
//!
//! 1. for every [`Ranks`], sends a sentinel to every other rank and receives from every
//!    other rank until its sentinel, discarding staged messages nobody received, so no
//!    offload message is pending in MPI when MPI goes away;
//! 2. waits in a barrier on the duplicated communicator: from here no rank sends offload
//!    traffic any more;
//! 3. gives back the runtime reference [`attach`] was handed (`shutdown`), unless
//!    [`give_back`] did already: when it is the last one, the runtime drains its queues,
//!    runs teardowns and unmaps its memory from every IPC peer (the peers, in the same
//!    step, answer the unmaps);
//! 4. waits in a second barrier, so no rank leaves while a peer still waits on it;
//!
//! and records what happened in [`finalize_report`]. No panic crosses the C callback; an
//! error is recorded, never raised inside MPI.
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
//! ## Limits
//!
//! - Tags are `u32`; a rank receives with [`Ranks::recv`] from one rank and tag at a time
//!   (no wildcard), without a timeout.
//! - A rank that dies (SIGKILL) is not handled: MPICH's `mpiexec` ends the whole job, and
//!   the finalize protocol would wait for it in its sentinel exchange and barriers.
//! - Built and tested with Debian's MPICH 4.0 only (an MPI whose `MPI_Comm` is an integer,
//!   so communicators are `Send`).
//!
//! ## Tests and programs
//!
//! `tests/mpiexec.rs` runs the programs of `src/bin` under `mpiexec -n 2..4` (they are
//! `[[bin]]` targets so the test finds them with `CARGO_BIN_EXE_*`):
//! `offload-mpi-finalize` (offload shut down inside `MPI_Finalize`), `offload-mpi-ring`
//! (a buffer around a ring, IPC or staged) and the `mpi_ring` example;
//! `offload-mpi-bench` times a cached IPC send against `MPI_Send` of the same bytes
//! (`mpiexec -n 2 target/release/offload-mpi-bench`).

mod hook;
mod ranks;

pub use hook::{FinalizeReport, attach, finalize_report, give_back, is_attached};
pub use ranks::{Ranks, Route};

/// The `OFFLOAD_MPI_STAGED` variable: `1` stages every send through host memory and MPI,
/// also between ranks of one node.
pub const STAGED_ENV: &str = "OFFLOAD_MPI_STAGED";

pub(crate) fn mpi_error(call: &'static str, reason: impl Into<String>) -> offload_core::Error {
    offload_core::Error::Ipc {
        call,
        reason: reason.into(),
    }
}
