#![doc = include_str!("../docs/manual.md")]

mod comm;
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
