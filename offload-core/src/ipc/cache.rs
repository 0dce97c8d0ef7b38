//! The one sender-side IPC cache of a process (I2, I3): a bounded LRU of exported
//! allocations over all peers of all endpoints, each entry recording every peer's mapping.
//!
//! Pure bookkeeping: no locks, no sockets, no backend calls. The endpoint asks it what a
//! send must do ([`Cache::plan`], [`Cache::insert`]), tells it what peers answered, and
//! sends the [`Unmap`]s it returns.
//!
//! - An entry is one exported allocation, keyed by its allocation id (unique in this
//!   process and never reused, so a new allocation at a freed one's address can never hit a
//!   stale entry); the ranges of each send travel in its message.
//! - Entry numbers are slot indices with a generation bumped at every reuse; answers naming
//!   an (entry, generation) that is gone are stale and ignored, never asserted on.
//! - An entry with sends in flight (delivered, not yet answered `Done`/`Failed`) is never
//!   evicted; when every entry is busy a send goes as a one-shot mapping.

use crate::ipc::IpcHandle;
use crate::ipc::PeerId;

/// A peer of an endpoint: which endpoint (its id) and which of its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PeerRef {
    pub(crate) endpoint: u64,
    pub(crate) peer: PeerId,
}

/// A mapping a peer must close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unmap {
    pub(crate) at: PeerRef,
    pub(crate) entry: u32,
    pub(crate) generation: u32,
    pub(crate) mapping: u32,
}

/// What a send must do.
#[derive(Debug)]
pub(crate) enum Plan {
    /// The peer has the allocation mapped (or a `Map` of it is on its way): send `Use`.
    Hit {
        entry: u32,
        generation: u32,
        mapping: u32,
    },
    /// The allocation is cached but this peer has not mapped it: send `Map` with this copy
    /// of the entry's handle.
    Miss {
        entry: u32,
        generation: u32,
        handle: IpcHandle,
    },
    /// Not cached: export it and [`Cache::insert`] it.
    New,
    /// The cache is disabled: send a one-shot.
    OneShot,
}

struct Peer {
    at: PeerRef,
    /// The peer's mapping id once it answered `Mapped` (0 until then).
    mapping: u32,
    /// Deliveries not yet answered.
    in_flight: u32,
}

struct Entry {
    allocation: u64,
    handle: IpcHandle,
    peers: Vec<Peer>,
    last_use: u64,
}

impl Entry {
    fn busy(&self) -> bool {
        self.peers.iter().any(|p| p.in_flight > 0)
    }

    fn unmaps(&self, index: usize, generation: u32) -> impl Iterator<Item = Unmap> + '_ {
        self.peers.iter().map(move |p| Unmap {
            at: p.at,
            entry: index as u32,
            generation,
            mapping: p.mapping,
        })
    }
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

/// The cache. See the module docs.
pub(crate) struct Cache {
    capacity: usize,
    slots: Vec<Slot>,
    tick: u64,
}

impl Cache {
    pub(crate) fn new(capacity: usize) -> Cache {
        Cache {
            capacity,
            slots: Vec::new(),
            tick: 0,
        }
    }

    /// Entries in the cache now.
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.entry.is_some()).count()
    }

    fn live(&mut self, entry: u32, generation: u32) -> Option<&mut Entry> {
        let slot = self.slots.get_mut(entry as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.entry.as_mut()
    }

    /// What sending `allocation` to `at` must do; a hit or miss counts the delivery in
    /// flight (the peer's `Done` or `Failed` gives it back).
    pub(crate) fn plan(&mut self, allocation: u64, at: PeerRef) -> Plan {
        if self.capacity == 0 {
            return Plan::OneShot;
        }
        self.tick += 1;
        let tick = self.tick;
        let found = self.slots.iter_mut().enumerate().find_map(|(i, s)| {
            let generation = s.generation;
            s.entry
                .as_mut()
                .filter(|e| e.allocation == allocation)
                .map(|e| (i, generation, e))
        });
        let Some((index, generation, entry)) = found else {
            return Plan::New;
        };
        entry.last_use = tick;
        if let Some(peer) = entry.peers.iter_mut().find(|p| p.at == at) {
            peer.in_flight += 1;
            return Plan::Hit {
                entry: index as u32,
                generation,
                mapping: peer.mapping,
            };
        }
        match entry.handle.try_clone() {
            Ok(handle) => {
                entry.peers.push(Peer {
                    at,
                    mapping: 0,
                    in_flight: 1,
                });
                Plan::Miss {
                    entry: index as u32,
                    generation,
                    handle,
                }
            }
            // No descriptor to spare: send it as a one-shot (which exports again).
            Err(_) => Plan::OneShot,
        }
    }

    /// Caches `handle` (a fresh export of `allocation`, sent as a `Map` to `at`, which
    /// counts in flight): in a free slot, or in the least recently used entry that has
    /// nothing in flight, whose peers must then be sent the returned unmaps. Gives the
    /// entry, its generation and a copy of the handle for the message, or the handle back
    /// if every entry is busy (send it as a one-shot).
    #[allow(clippy::type_complexity)]
    pub(crate) fn insert(
        &mut self,
        allocation: u64,
        handle: IpcHandle,
        at: PeerRef,
    ) -> Result<(u32, u32, IpcHandle, Vec<Unmap>), IpcHandle> {
        let index = match self.slots.iter().position(|s| s.entry.is_none()) {
            Some(free) => free,
            None if self.slots.len() < self.capacity => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                self.slots.len() - 1
            }
            None => {
                let lru = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.entry.as_ref().map(|e| (i, e)))
                    .filter(|(_, e)| !e.busy())
                    .min_by_key(|(_, e)| e.last_use)
                    .map(|(i, _)| i);
                match lru {
                    Some(i) => i,
                    None => {
                        tracing::trace!(
                            target: "offload::ipc",
                            allocation,
                            entries = self.slots.len(),
                            "every cache entry has sends in flight: sending a one-shot"
                        );
                        return Err(handle);
                    }
                }
            }
        };
        let copy = match handle.try_clone() {
            Ok(copy) => copy,
            Err(_) => return Err(handle),
        };
        let unmaps = self.evict_slot(index, "least recently used");
        self.tick += 1;
        let slot = &mut self.slots[index];
        slot.entry = Some(Entry {
            allocation,
            handle,
            peers: vec![Peer {
                at,
                mapping: 0,
                in_flight: 1,
            }],
            last_use: self.tick,
        });
        tracing::trace!(
            target: "offload::ipc",
            entry = index,
            generation = slot.generation,
            allocation,
            "cached an exported allocation"
        );
        Ok((index as u32, slot.generation, copy, unmaps))
    }

    /// Empties slot `index` (bumping its generation) and gives its peers' unmaps; `why`
    /// says what evicted it, for the trace.
    fn evict_slot(&mut self, index: usize, why: &'static str) -> Vec<Unmap> {
        let slot = &mut self.slots[index];
        let Some(entry) = slot.entry.take() else {
            return Vec::new();
        };
        let unmaps: Vec<Unmap> = entry.unmaps(index, slot.generation).collect();
        tracing::debug!(
            target: "offload::ipc",
            entry = index,
            generation = slot.generation,
            allocation = entry.allocation,
            peers = unmaps.len(),
            why,
            "evicted a cache entry"
        );
        slot.generation = slot.generation.wrapping_add(1);
        super::stats::EVICTIONS.fetch_add(1, crate::sync::Ordering::Relaxed);
        unmaps
    }

    /// The peer mapped (entry, generation) as `mapping`. Stale answers are ignored.
    pub(crate) fn mapped(&mut self, at: PeerRef, entry: u32, generation: u32, mapping: u32) {
        if let Some(e) = self.live(entry, generation) {
            if let Some(p) = e.peers.iter_mut().find(|p| p.at == at) {
                p.mapping = mapping;
            }
        }
    }

    /// A delivery of (entry, generation) to the peer was answered (`done`: its view was
    /// dropped; otherwise it failed, and the peer has no mapping of it).
    pub(crate) fn answered(&mut self, at: PeerRef, entry: u32, generation: u32, done: bool) {
        if let Some(e) = self.live(entry, generation) {
            if let Some(i) = e.peers.iter().position(|p| p.at == at) {
                let peer = &mut e.peers[i];
                peer.in_flight = peer.in_flight.saturating_sub(1);
                if !done {
                    e.peers.remove(i);
                }
            }
        }
    }

    /// The peer is gone: it holds nothing any more, and nothing of it is in flight.
    pub(crate) fn forget_peer(&mut self, at: PeerRef) {
        for slot in &mut self.slots {
            if let Some(e) = slot.entry.as_mut() {
                e.peers.retain(|p| p.at != at);
            }
        }
    }

    /// Evicts every entry of `allocation` (its owner is freeing it): the unmaps to send.
    pub(crate) fn evict_allocation(&mut self, allocation: u64) -> Vec<Unmap> {
        let hits: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .entry
                    .as_ref()
                    .is_some_and(|e| e.allocation == allocation)
            })
            .collect();
        hits.into_iter()
            .flat_map(|i| self.evict_slot(i, "allocation freed"))
            .collect()
    }

    /// The mappings an endpoint's peers hold (the endpoint is closing): the unmaps to send,
    /// after which those peers hold nothing.
    pub(crate) fn release_endpoint(&mut self, endpoint: u64) -> Vec<Unmap> {
        let mut unmaps = Vec::new();
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let generation = slot.generation;
            if let Some(e) = slot.entry.as_mut() {
                unmaps.extend(
                    e.unmaps(index, generation)
                        .filter(|u| u.at.endpoint == endpoint),
                );
                e.peers.retain(|p| p.at.endpoint != endpoint);
            }
        }
        unmaps
    }
}
