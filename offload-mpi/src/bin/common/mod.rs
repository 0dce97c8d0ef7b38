//! What the MPI programs of src/bin share: a runtime with only the host backend.

use offload_core::{PlatformEntry, Platforms};

/// The host backend only.
pub struct Host;

impl Platforms for Host {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_host::platform()]
    }
}

/// The runtime of these programs.
pub type Rt = offload_core::Offload<offload_core::Ready, Host>;

/// Prints a failure of rank `rank` and exits non-zero (mpiexec then fails the job).
pub fn fail(rank: i32, what: impl std::fmt::Display) -> ! {
    eprintln!("rank {rank}: FAIL: {what}");
    std::process::exit(1)
}
