//! The IPC state one generation carries (its extension): the sender-side cache, the
//! endpoints, the quarantine and the progress thread, and what an endpoint does to the
//! others (help them along, send their unmaps).

use super::*;

/// The IPC state a generation owns: its one sender-side cache, its endpoints, its
/// quarantine and its progress thread.
pub(crate) struct Shared {
    pub(crate) cache: Mutex<crate::ipc::cache::Cache>,
    pub(super) endpoints: Mutex<Vec<(u64, Weak<Engine>)>>,
    pub(super) quarantine: Quarantine,
    pub(super) progress: Progress,
}

impl Extension for Arc<Shared> {
    /// Stops and joins the progress thread (a teardown begins releasing).
    fn stop(&self) {
        self.progress.stop();
    }

    /// The teardown released every endpoint and buffer: quarantined memory went with them.
    fn released(&self) {
        self.quarantine.clear();
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Shared {
    pub(crate) fn new(capacity: usize) -> Shared {
        Shared {
            cache: Mutex::new(crate::ipc::cache::Cache::new(capacity)),
            endpoints: Mutex::new(Vec::new()),
            quarantine: Quarantine::default(),
            progress: Progress::default(),
        }
    }

    /// One tick of the progress thread: a round, without waiting, on every endpoint
    /// nobody made progress on since the last tick. `seen` is the thread's memory of
    /// (endpoint, rounds).
    pub(crate) fn tick(&self, seen: &mut Vec<(u64, u64)>) {
        let engines = self.engines();
        seen.retain(|(id, _)| engines.iter().any(|e| e.id == *id));
        for engine in engines {
            if engine.closed.load(Ordering::SeqCst) {
                continue;
            }
            let rounds = engine.rounds.load(Ordering::Relaxed);
            let last = match seen.iter().position(|(id, _)| *id == engine.id) {
                Some(i) => i,
                None => {
                    seen.push((engine.id, u64::MAX));
                    seen.len() - 1
                }
            };
            if seen[last].1 == rounds {
                engine.progress(Duration::ZERO);
            }
            seen[last].1 = engine.rounds.load(Ordering::Relaxed);
        }
    }

    /// What freeing exported memory does first (an owner frees `entry`, listed as `key`;
    /// `object` names it): every process that mapped it through an endpoint is told to
    /// unmap it, and the call waits (bounded) until each did or is gone (I3). Returns
    /// `Some` — the typed outcome for the free to return — when a live peer had not
    /// answered by then: the memory is then quarantined, not freed (see `quarantine.rs`);
    /// `None`: free it now.
    pub(crate) fn unmap_before_free(
        &self,
        generation: &Generation,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        object: &dyn fmt::Display,
    ) -> Option<Error> {
        let mut unmaps = lock(&self.cache).evict_allocation(entry.id);
        unmaps.extend(self.one_shot_unmaps(entry.id));
        if unmaps.is_empty() {
            return None;
        }
        tracing::debug!(
            target: "offload::ipc",
            allocation = entry.id,
            mappings = unmaps.len(),
            "freeing exported memory: peers unmap it first"
        );
        // The wait for the peers' acknowledgements, up to the unmap timeout: its own span,
        // so a trace shows where a free's time went, and whether it ended in quarantine (I3).
        let wait = tracing::debug_span!(
            target: "offload::ipc",
            "ipc_unmap_wait",
            allocation = entry.id,
            mappings = unmaps.len(),
            unanswered = tracing::field::Empty,
            quarantined = tracing::field::Empty,
        )
        .entered();
        let unanswered = self.send_unmaps(unmaps, true);
        wait.record("unanswered", unanswered.len());
        if unanswered.is_empty() {
            wait.record("quarantined", false);
            return None;
        }
        let peers = self.pids(&unanswered);
        let quarantined = self.quarantine(entry, key, &unanswered);
        wait.record("quarantined", quarantined);
        drop(wait);
        quarantined.then(|| Error::Quarantined {
            backend: entry.backend(),
            call: "Buffer::free",
            object: object.to_string(),
            peers,
            timeout_ms: generation.config.ipc_unmap_timeout_ms,
        })
    }

    /// The unmaps of the one-shot mappings of `allocation` peers may still hold (sent,
    /// neither answered nor unmapped yet): its owner is freeing it (I3).
    pub(crate) fn one_shot_unmaps(&self, allocation: u64) -> Vec<Unmap> {
        let mut unmaps = Vec::new();
        for engine in self.engines() {
            let state = lock(&engine.state);
            for peer in state.peers.iter().filter(|p| p.alive) {
                for &(_, sequence) in peer.one_shots.iter().filter(|(a, _)| *a == allocation) {
                    unmaps.push(Unmap {
                        at: engine.at(peer.id),
                        entry: ONE_SHOT,
                        generation: sequence,
                        mapping: 0,
                    });
                }
            }
        }
        unmaps
    }

    /// Quarantines `entry` for the unmaps live peers had not acknowledged (see
    /// `quarantine.rs`); false if every one of them was answered meanwhile.
    pub(crate) fn quarantine(
        &self,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        unanswered: &[Unmap],
    ) -> bool {
        let awaited = unanswered
            .iter()
            .map(|u| (u.at, u.entry, u.generation))
            .collect();
        self.quarantine
            .hold(entry, key, awaited, |&(at, entry, generation)| {
                let Some(engine) = self.endpoint(at.endpoint).and_then(|w| w.upgrade()) else {
                    return false;
                };
                let state = lock(&engine.state);
                engine.still_unacked(
                    &state,
                    &Unmap {
                        at,
                        entry,
                        generation,
                        mapping: 0,
                    },
                )
            })
    }

    /// The pids of the peers these unmaps went to, for messages (`pid 12, pid 40`).
    pub(crate) fn pids(&self, unmaps: &[Unmap]) -> String {
        let mut pids: Vec<u32> = Vec::new();
        for u in unmaps {
            if let Some(engine) = self.endpoint(u.at.endpoint).and_then(|w| w.upgrade()) {
                let state = lock(&engine.state);
                if let Some(p) = state.peers.iter().find(|p| p.id == u.at.peer) {
                    if !pids.contains(&p.pid) {
                        pids.push(p.pid);
                    }
                }
            }
        }
        let named: Vec<String> = pids.iter().map(|p| format!("pid {p}")).collect();
        match named.len() {
            0 => "a peer".into(),
            _ => named.join(", "),
        }
    }

    pub(super) fn add_endpoint(&self, id: u64, engine: Weak<Engine>) {
        lock(&self.endpoints).push((id, engine));
    }

    pub(super) fn remove_endpoint(&self, id: u64) {
        lock(&self.endpoints).retain(|(e, _)| *e != id);
    }

    /// The endpoints still alive.
    pub(super) fn engines(&self) -> Vec<Arc<Engine>> {
        lock(&self.endpoints)
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    pub(super) fn endpoint(&self, id: u64) -> Option<Weak<Engine>> {
        lock(&self.endpoints)
            .iter()
            .find(|(e, _)| *e == id)
            .map(|(_, w)| w.clone())
    }

    /// Applies the news every endpoint stashed (the cache must not be held).
    pub(super) fn apply_stashed(&self) {
        for engine in self.engines() {
            engine.apply_stashed();
        }
    }

    /// One round of progress, without waiting, on every endpoint but `except`.
    pub(super) fn help(&self, except: u64) {
        let endpoints = lock(&self.endpoints);
        if endpoints.len() < 2 {
            return;
        }
        drop(endpoints);
        let others: Vec<Arc<Engine>> = lock(&self.endpoints)
            .iter()
            .filter(|(id, _)| *id != except)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for engine in others {
            engine.progress(Duration::ZERO);
        }
    }

    /// Sends these unmaps through the endpoints that own their peers; `wait` for the
    /// acknowledgements (bounded). Returns those live peers had not acknowledged in time.
    pub(crate) fn send_unmaps(&self, unmaps: Vec<Unmap>, wait: bool) -> Vec<Unmap> {
        let mut by_endpoint: Vec<(u64, Vec<Unmap>)> = Vec::new();
        for u in unmaps {
            match by_endpoint.iter_mut().find(|(e, _)| *e == u.at.endpoint) {
                Some((_, list)) => list.push(u),
                None => by_endpoint.push((u.at.endpoint, vec![u])),
            }
        }
        let mut unanswered = Vec::new();
        for (endpoint, list) in by_endpoint {
            if let Some(engine) = self.endpoint(endpoint).and_then(|w| w.upgrade()) {
                unanswered.extend(engine.unmap(&list, wait));
            }
        }
        unanswered
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer {}", self.0)
    }
}
