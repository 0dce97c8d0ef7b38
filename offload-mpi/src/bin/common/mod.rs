//! What the MPI programs of src/bin share: a runtime with only the host backend, failing a
//! rank, and one step of a ring exchange.

use offload_core::{Buffer, Device, MemKind, PlatformEntry, Platforms};
use offload_mpi::Ranks;

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

/// One step of a ring: this rank sends `len` bytes of its number to `next` (tag 7) and
/// checks the `len` bytes of `prev`'s number it receives; returns the buffer it sent.
#[allow(dead_code)] // not every program of src/bin runs a ring
pub fn ring_step(ranks: &Ranks, dev: &Device, len: usize, next: i32, prev: i32) -> Buffer {
    let me = ranks.rank();
    let buf = dev
        .alloc_exportable(len, MemKind::Device)
        .unwrap_or_else(|e| fail(me, e));
    buf.write(0, &vec![me as u8; len])
        .unwrap_or_else(|e| fail(me, e));
    ranks
        .send(&buf, 0..len, next, 7)
        .unwrap_or_else(|e| fail(me, e));
    let got = ranks.recv(prev, 7).unwrap_or_else(|e| fail(me, e));
    let mut bytes = vec![0u8; len];
    got.read(0, &mut bytes).unwrap_or_else(|e| fail(me, e));
    if bytes.iter().any(|&b| b != prev as u8) {
        fail(me, format!("data from rank {prev} is wrong"));
    }
    buf
}
