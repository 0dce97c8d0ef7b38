//! Quarantined memory (I3): exported memory its owner freed while a live peer had not yet
//! acknowledged the unmap.
//!
//! The sender never releases memory a live peer may still map. When the bounded wait of a
//! free runs out, the allocation stays listed in its generation, owned by no handle, and
//! waits here for every (peer, entry, generation) it was unmapped from: an `UnmapAck`, or
//! the peer seen dead (its socket hung up, it broke the protocol, its endpoint closed),
//! takes one off; the last one releases the memory. Shutdown releases what is left (the
//! generation's teardown frees every listed allocation). Counted in [`super::stats`].

use crate::sync::{Arc, Mutex, Ordering, lock};

use crate::handles::BufferEntry;
use crate::ipc::cache::PeerRef;
use crate::ipc::stats;
use crate::runtime::generation::{Generation, ResourceKey};

/// An unmap a quarantined allocation waits for: which peer, which cache entry.
pub(crate) type Awaited = (PeerRef, u32, u32);

struct Held {
    entry: Arc<BufferEntry>,
    key: ResourceKey,
    waiting: Vec<Awaited>,
}

/// The quarantine of one generation.
#[derive(Default)]
pub(crate) struct Quarantine {
    held: Mutex<Vec<Held>>,
}

impl Quarantine {
    /// Holds `entry` until every unmap in `waiting` for which `still_waited` holds is
    /// answered. `still_waited` is asked under the quarantine's lock, which every answer
    /// also takes, so an answer that came meanwhile is never missed. Returns whether the
    /// allocation was held (false: nothing is awaited any more; free it now).
    pub(crate) fn hold(
        &self,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        waiting: Vec<Awaited>,
        still_waited: impl Fn(&Awaited) -> bool,
    ) -> bool {
        let mut held = lock(&self.held);
        let waiting: Vec<Awaited> = waiting.into_iter().filter(|a| still_waited(a)).collect();
        if waiting.is_empty() {
            return false;
        }
        stats::quarantined(entry.size());
        tracing::warn!(
            target: "offload::ipc",
            allocation = entry.id,
            bytes = entry.size(),
            peers = waiting.len(),
            "peers did not acknowledge unmapping freed memory in time: it is quarantined"
        );
        held.push(Held {
            entry: entry.clone(),
            key,
            waiting,
        });
        true
    }

    /// `at` acknowledged the unmap of (entry, generation): the allocations that waited for
    /// nothing else are released.
    pub(crate) fn acked(
        &self,
        generation: &Generation,
        at: PeerRef,
        entry: u32,
        entry_generation: u32,
    ) {
        self.settle(generation, |a| *a == (at, entry, entry_generation));
    }

    /// `at` is gone: nothing of it is awaited any more.
    pub(crate) fn gone(&self, generation: &Generation, at: PeerRef) {
        self.settle(generation, |a| a.0 == at);
    }

    /// Every endpoint's peers are gone (the generation ends): the counters forget what is
    /// held; the teardown frees it with the generation's other allocations.
    pub(crate) fn clear(&self) {
        for h in std::mem::take(&mut *lock(&self.held)) {
            stats::unquarantined(h.entry.size());
        }
    }

    fn settle(&self, generation: &Generation, answered: impl Fn(&Awaited) -> bool) {
        let released: Vec<Held> = {
            let mut held = lock(&self.held);
            if held.is_empty() {
                return;
            }
            for h in held.iter_mut() {
                h.waiting.retain(|a| !answered(a));
            }
            let (done, kept) = std::mem::take(&mut *held)
                .into_iter()
                .partition(|h| h.waiting.is_empty());
            *held = kept;
            done
        };
        for h in released {
            stats::unquarantined(h.entry.size());
            stats::QUARANTINE_RELEASES.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                target: "offload::ipc",
                allocation = h.entry.id,
                bytes = h.entry.size(),
                "quarantined memory released: its peers unmapped it or are gone"
            );
            // After shutdown began, its teardown frees it.
            match h.entry.forget_and_free(generation, h.key) {
                Ok(()) | Err(crate::Error::ShutDown { .. }) => {}
                Err(e) => generation.defer(Err(e)),
            }
        }
    }
}
