//! The backend's process-wide counters (the modules that count write them here) and
//! [`stats`](stats()), which reads them: platforms
//! opened and deinitialised, live allocations, images loaded and unloaded, the deepest
//! queue.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub(crate) static OPENED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Images loaded and unloaded (program.rs counts them).
pub(crate) static LOADS: AtomicUsize = AtomicUsize::new(0);
pub(crate) static UNLOADS: AtomicUsize = AtomicUsize::new(0);
/// The largest backlog any host queue reached, for tests and the soak (stream.rs).
pub(crate) static MOST_QUEUED: AtomicU64 = AtomicU64::new(0);

/// Process-wide counts of what the host backend did.
///
/// ```
/// let before = offload_host::stats();
/// assert!(before.opened >= before.deinitialised);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStats {
    /// Platforms opened (one per runtime 0→1 transition that included the host backend).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
    /// Allocations not yet freed, over all platforms.
    pub live_allocations: usize,
    /// Program images loaded (`dlopen`), over all platforms.
    pub loads: usize,
    /// Program images unloaded (`dlclose`).
    pub unloads: usize,
    /// The most commands any host queue held unfinished (at most
    /// [`MAX_QUEUED`](crate::MAX_QUEUED) plus the ones its own host functions enqueued).
    pub most_queued: u64,
}

/// Reads the process-wide counters.
///
/// ```
/// let s = offload_host::stats();
/// println!("{} live host allocations", s.live_allocations);
/// ```
pub fn stats() -> HostStats {
    HostStats {
        opened: OPENED.load(Ordering::SeqCst),
        deinitialised: DEINITIALISED.load(Ordering::SeqCst),
        live_allocations: LIVE_ALLOCATIONS.load(Ordering::SeqCst),
        loads: LOADS.load(Ordering::SeqCst),
        unloads: UNLOADS.load(Ordering::SeqCst),
        most_queued: MOST_QUEUED.load(Ordering::Relaxed),
    }
}
