//! Process-wide IPC counters: what tests and benchmarks check (one export per allocation,
//! one import per peer, no mapping held longer than the contract allows, every bad message
//! counted). Const-initialised; they start over with the library.

use crate::sync::{AtomicUsize, Ordering, statics};

statics! {
    pub(crate) static EXPORTS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static IMPORTS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static LIVE_IMPORTS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static MAX_LIVE_IMPORTS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static CACHED_MAPPINGS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static MAX_CACHED_MAPPINGS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static CACHE_HITS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static CACHE_MISSES: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static ONE_SHOTS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static EVICTIONS: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static UNMAPS_SENT: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static UNMAPS_ACKED: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static UNMAPS_RECEIVED: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static REJECTED: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static PEERS_REFUSED: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static QUARANTINED: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static QUARANTINED_BYTES: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static QUARANTINES: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static QUARANTINE_RELEASES: AtomicUsize = AtomicUsize::new(0);
}

/// An allocation of `bytes` went into quarantine.
pub(crate) fn quarantined(bytes: usize) {
    QUARANTINES.fetch_add(1, Ordering::Relaxed);
    QUARANTINED.fetch_add(1, Ordering::SeqCst);
    QUARANTINED_BYTES.fetch_add(bytes, Ordering::SeqCst);
}

/// An allocation of `bytes` left quarantine.
pub(crate) fn unquarantined(bytes: usize) {
    QUARANTINED.fetch_sub(1, Ordering::SeqCst);
    QUARANTINED_BYTES.fetch_sub(bytes, Ordering::SeqCst);
}

/// A mapping opened here (an import).
pub(crate) fn opened() {
    IMPORTS.fetch_add(1, Ordering::Relaxed);
    let now = LIVE_IMPORTS.fetch_add(1, Ordering::SeqCst) + 1;
    MAX_LIVE_IMPORTS.fetch_max(now, Ordering::SeqCst);
}

/// A mapping closed here.
pub(crate) fn closed() {
    LIVE_IMPORTS.fetch_sub(1, Ordering::SeqCst);
}

/// A receiver keeps a mapping for its sender's cache entry (not a one-shot).
pub(crate) fn cached_mapping_opened() {
    let now = CACHED_MAPPINGS.fetch_add(1, Ordering::SeqCst) + 1;
    MAX_CACHED_MAPPINGS.fetch_max(now, Ordering::SeqCst);
}

/// A receiver closed a mapping of a cache entry.
pub(crate) fn cached_mapping_closed() {
    CACHED_MAPPINGS.fetch_sub(1, Ordering::SeqCst);
}

/// What this process did with IPC so far.
///
/// ```
/// let s = offload::ipc::stats();
/// assert!(s.imports >= s.live_imports);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IpcStats {
    /// `Buffer::export` calls that succeeded (the endpoint exports once per cache entry).
    pub exports: usize,
    /// Mappings opened (`Device::import`, endpoint imports).
    pub imports: usize,
    /// Mappings open now.
    pub live_imports: usize,
    /// The most mappings open at once so far.
    pub max_live_imports: usize,
    /// Mappings this process keeps, as a receiver, for its senders' cache entries (each
    /// sender's share is at most its cache's size; one-shot mappings are not counted: they
    /// close with their view).
    pub cached_mappings: usize,
    /// The most of those at once so far.
    pub max_cached_mappings: usize,
    /// Sends that found their range in the sender-side cache.
    pub cache_hits: usize,
    /// Sends that exported and sent a handle (a new cache entry, or a new peer of one).
    pub cache_misses: usize,
    /// Sends that went as one-shot mappings (cache disabled, or every entry busy).
    pub one_shots: usize,
    /// Cache entries evicted (LRU, free, address reuse, shutdown).
    pub evictions: usize,
    /// Unmap notices sent to peers.
    pub unmaps_sent: usize,
    /// Unmap notices peers acknowledged.
    pub unmaps_acked: usize,
    /// Unmap notices this process received (and obeyed) as a receiver.
    pub unmaps_received: usize,
    /// Malformed, forged, oversized or unexpected messages rejected.
    pub rejected: usize,
    /// Connections refused (another user, a failed handshake).
    pub peers_refused: usize,
    /// Allocations freed by their owner but kept now, because a live peer had not
    /// acknowledged unmapping them when the free's wait ran out (`Error::Quarantined`).
    pub quarantined: usize,
    /// Their bytes.
    pub quarantined_bytes: usize,
    /// Allocations that went into quarantine so far.
    pub quarantines: usize,
    /// Quarantined allocations released so far (their peers answered or were seen dead;
    /// a shutdown frees the rest without counting here).
    pub quarantine_releases: usize,
}

/// Reads the counters.
///
/// ```
/// println!("{:?}", offload::ipc::stats());
/// ```
pub fn stats() -> IpcStats {
    let get = |c: &AtomicUsize| c.load(Ordering::SeqCst);
    IpcStats {
        exports: get(&EXPORTS),
        imports: get(&IMPORTS),
        live_imports: get(&LIVE_IMPORTS),
        max_live_imports: get(&MAX_LIVE_IMPORTS),
        cached_mappings: get(&CACHED_MAPPINGS),
        max_cached_mappings: get(&MAX_CACHED_MAPPINGS),
        cache_hits: get(&CACHE_HITS),
        cache_misses: get(&CACHE_MISSES),
        one_shots: get(&ONE_SHOTS),
        evictions: get(&EVICTIONS),
        unmaps_sent: get(&UNMAPS_SENT),
        unmaps_acked: get(&UNMAPS_ACKED),
        unmaps_received: get(&UNMAPS_RECEIVED),
        rejected: get(&REJECTED),
        peers_refused: get(&PEERS_REFUSED),
        quarantined: get(&QUARANTINED),
        quarantined_bytes: get(&QUARANTINED_BYTES),
        quarantines: get(&QUARANTINES),
        quarantine_releases: get(&QUARANTINE_RELEASES),
    }
}
