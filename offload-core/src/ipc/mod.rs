//! Sharing device memory between processes (contract clauses I1–I4).
//!
//! - [`IpcHandle`] (`handle.rs`): what names an allocation to another process, with its
//!   versioned byte format (I1).
//! - `Buffer::export` and `Device::import` (`share.rs`): they make and map handles, and
//!   give the allocation its IPC state, the one piece of IPC its buffer entry owns (set
//!   once; the free of exported memory asks it to unmap the memory from every peer first,
//!   I3). An imported allocation's state and the mapping itself (`import.rs`) sit below
//!   the endpoints, which deliver through them; the exported state, which asks the
//!   endpoints to unmap, above.
//! - [`IpcEndpoint`] (`endpoint/`): a Unix-domain socket that sends buffer ranges to peers
//!   and receives theirs as views ([`Received`]), over the wire format of `wire.rs` and the
//!   sockets of `socket.rs` (I2, I4).
//! - The one sender-side cache of the process (`cache.rs`, I2): sends of an allocation
//!   already mapped by a peer carry only the range; freeing exported memory unmaps it from
//!   every peer first (I3).
//! - The progress thread of a generation (`progress.rs`, I5): started with its first
//!   endpoint, it answers peers when the application does not call in.
//! - The quarantine (`quarantine.rs`, I3): memory freed while a live peer had not
//!   acknowledged its unmap, kept until that peer answers or is gone.
//! - [`stats`]: process-wide counters.
//!
//! Memory other processes will map is allocated with `Device::alloc_exportable`: Vulkan must
//! declare it exportable at allocation, and on the host it is a memfd instead of a heap block.
//!
//! Everything here reports to [`tracing`](https://docs.rs/tracing) under the target
//! `offload::ipc` (never memory contents, never handle bytes): exports and imports of
//! handles (debug: backend, allocation id, size), endpoints bound, connected, accepted,
//! closed and peers gone (info; a refused connection or a peer cut off for breaking the
//! protocol is a warning), deliveries sent and received (debug), cache hits, misses and
//! entries (trace) and evictions (debug), and the unmaps a free waits for (debug; a peer
//! that does not acknowledge in time is a warning).

mod cache;
pub(crate) mod endpoint;
mod handle;
mod import;
mod progress;
mod quarantine;
mod share;
mod socket;
pub(crate) mod stats;
pub mod wire;

pub use endpoint::{IpcEndpoint, Received};

use crate::sync::{Arc, AtomicU64, Ordering, statics};

pub use handle::{IpcHandle, MAX_HANDLE_BYTES, backend_code};
pub use stats::{IpcStats, stats};

use crate::config::Config;
use crate::runtime::generation::{Extension, Generation};

statics! {
    /// This process's token, part of every allocation's identity in a handle: allocation ids
    /// restart when a library embedding offload is loaded again, the token does not repeat.
    /// Const-initialised (0 = not drawn yet).
    static TOKEN: AtomicU64 = AtomicU64::new(0);
}

pub(crate) fn process_token() -> u64 {
    let token = TOKEN.load(Ordering::Relaxed);
    if token != 0 {
        return token;
    }
    let drawn = draw_token();
    match TOKEN.compare_exchange(0, drawn, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => drawn,
        Err(other) => other,
    }
}

/// 64 random bits from the kernel, or (without /dev/urandom) the pid, the time and an
/// address, mixed; never 0.
fn draw_token() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    let mut x = if random.is_ok() {
        u64::from_le_bytes(bytes)
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let local = 0u8;
        nanos ^ (u64::from(std::process::id()) << 32) ^ (&local as *const u8 as u64)
    };
    // splitmix64's finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) | 1
}

/// A peer of an endpoint, as [`IpcEndpoint::connect`] gives it or a [`Received`] names it.
///
/// ```
/// # use offload::Offload;
/// # let rt = Offload::init()?;
/// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
/// let peer = a.connect(b.name())?;
/// assert_eq!(peer.to_string(), "peer 1");
/// # Ok::<(), offload::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerId(pub(crate) u64);

/// Makes the IPC state of a generation (its one `Extension`): the
/// sender-side cache of `config.ipc_cache_size` entries, no endpoint yet.
pub(crate) fn extension(config: &Config) -> Box<dyn Extension> {
    Box::new(Arc::new(endpoint::Shared::new(config.ipc_cache_size)))
}

/// The IPC state of `generation`; `None` only for a generation started without it (every
/// runtime `Offload` starts has it), which has no endpoint and exported nothing.
pub(crate) fn state(generation: &Generation) -> Option<&Arc<endpoint::Shared>> {
    generation.extension::<Arc<endpoint::Shared>>()
}
