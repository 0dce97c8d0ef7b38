//! Sending: a buffer range goes to a peer through the sender-side cache (a `Map` the first
//! time, a `Use` after, a one-shot past the cache), queued in the peer's outbox in the order
//! planned; unmaps go out when an allocation is freed or evicted and are waited for (I3).

use super::*;

impl Engine {
    pub(super) fn send(
        &self,
        to: PeerId,
        buffer: &Buffer,
        offset: usize,
        len: usize,
        tag: u64,
    ) -> Result<()> {
        const CALL: &str = "IpcEndpoint::send";
        self.check_open(CALL)?;
        if !buffer.same_generation(&self.generation) {
            buffer.read(0, &mut [])?; // a dead buffer says ShutDown
            return Err(Error::invalid(
                CALL,
                format!("{buffer} is of another runtime"),
            ));
        }
        let inside = offset
            .checked_add(len)
            .is_some_and(|end| end <= buffer.len());
        if len == 0 || !inside {
            return Err(Error::invalid(
                CALL,
                format!("range {offset}..+{len} is empty or outside {buffer}"),
            ));
        }
        let entry = buffer.entry();
        if entry.origin() != Origin::Exportable {
            return Err(Error::invalid(
                CALL,
                format!(
                    "{buffer} is not exportable memory: allocate what you send with \
                     Device::alloc_exportable"
                ),
            ));
        }
        // Wait while too many one-shots to this peer are unanswered. (What peers answered
        // is taken in by every round of progress; a send that finds the cache busy makes
        // one before it falls back to a one-shot.)
        self.one_shot_window(to, CALL)?;
        let at = self.at(to);
        let offset = (buffer.offset_in_allocation() + offset) as u64;
        let len = len as u64;
        let whole = |buffer: &Buffer| -> Result<IpcHandle> {
            let handle = buffer.export()?;
            let size = handle.size();
            handle.range(0, size)
        };
        // What the cache made of this send, for the trace.
        let how: &str;
        let mut attempt = 0;
        let place = loop {
            // The cache stays locked until the messages are queued, so two sends of one
            // allocation to one peer queue their `Map` and `Use` in the order planned.
            let mut cache = lock(&self.shared.cache);
            let (message, unmaps) = match cache.plan(entry.id, at) {
                Plan::Hit {
                    entry,
                    generation,
                    mapping,
                } => {
                    stats::CACHE_HITS.fetch_add(1, Ordering::Relaxed);
                    how = "hit";
                    let message = Message::Use {
                        entry,
                        generation,
                        mapping,
                        tag,
                        offset,
                        len,
                    };
                    (message, Vec::new())
                }
                Plan::Miss {
                    entry,
                    generation,
                    handle,
                } => {
                    stats::CACHE_MISSES.fetch_add(1, Ordering::Relaxed);
                    how = "miss";
                    let message = Message::Map {
                        entry,
                        generation,
                        tag,
                        offset,
                        len,
                        handle,
                    };
                    (message, Vec::new())
                }
                Plan::New => match cache.insert(entry.id, whole(buffer)?, at) {
                    Err(_) if attempt == 0 => {
                        // Every entry is busy: the answers that free one are likely in the
                        // socket already. Take them in and plan again, once.
                        drop(cache);
                        self.progress(Duration::ZERO);
                        attempt += 1;
                        continue;
                    }
                    Ok((entry, generation, handle, unmaps)) => {
                        stats::CACHE_MISSES.fetch_add(1, Ordering::Relaxed);
                        how = "new";
                        let message = Message::Map {
                            entry,
                            generation,
                            tag,
                            offset,
                            len,
                            handle,
                        };
                        (message, unmaps)
                    }
                    Err(handle) => {
                        how = "one-shot (cache busy)";
                        (self.one_shot(handle, tag, offset, len), Vec::new())
                    }
                },
                Plan::OneShot => {
                    how = "one-shot";
                    (self.one_shot(whole(buffer)?, tag, offset, len), Vec::new())
                }
            };
            let queued = self.queue(unmaps, to, entry.id, message);
            if queued.is_err() {
                // The peer is gone: what `plan` counted for it must not pin the entry.
                cache.forget_peer(at);
            }
            drop(cache);
            // What the queueing learnt (a peer that died under it) is applied now that the
            // cache is free.
            self.shared.apply_stashed();
            break queued?;
        };
        tracing::debug!(
            target: "offload::ipc",
            endpoint = self.id,
            peer = %to,
            allocation = entry.id,
            offset,
            len,
            tag,
            cache = how,
            "sent a buffer range"
        );
        match place {
            Some(place) => self.drain_outbox(to, place, CALL),
            None => Ok(()),
        }
    }

    pub(super) fn one_shot(&self, handle: IpcHandle, tag: u64, offset: u64, len: u64) -> Message {
        stats::ONE_SHOTS.fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        let sequence = state.next_sequence;
        state.next_sequence = state.next_sequence.wrapping_add(1).max(1);
        Message::OneShot {
            sequence,
            tag,
            offset,
            len,
            handle,
        }
    }

    /// Waits (making progress) until `to` has fewer than `ONE_SHOT_WINDOW` one-shots
    /// unanswered; fails if it is gone or does not answer in time.
    pub(super) fn one_shot_window(&self, to: PeerId, call: &'static str) -> Result<()> {
        let deadline = Instant::now() + self.unmap_timeout.max(Duration::from_secs(1));
        loop {
            let open = {
                let state = lock(&self.state);
                match state.peers.iter().find(|p| p.id == to) {
                    Some(p) if p.alive => p.one_shots.len() < ONE_SHOT_WINDOW as usize,
                    _ => return Err(self.gone(to, call)),
                }
            };
            if open {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ipc_error(
                    call,
                    format!("{to} has not answered {ONE_SHOT_WINDOW} one-shot deliveries"),
                ));
            }
            self.progress((deadline - now).min(POLL_SLICE));
        }
    }

    /// Queues `unmaps` (to whichever peers they name) and then `message` to `to`, and
    /// flushes what the sockets take now. `Some(place)`: the message is not written yet,
    /// and is once the peer's `written` count reaches `place`; `None`: it was written.
    pub(super) fn queue(
        &self,
        unmaps: Vec<Unmap>,
        to: PeerId,
        allocation: u64,
        message: Message,
    ) -> Result<Option<u64>> {
        let mut state = lock(&self.state);
        let mut news = Vec::new();
        for u in unmaps {
            if u.at.endpoint != self.id {
                // Another endpoint's peer: that endpoint sends it.
                drop(state);
                self.shared.send_unmaps(vec![u], false);
                state = lock(&self.state);
                continue;
            }
            if let Some(peer) = state
                .peers
                .iter_mut()
                .find(|p| p.id == u.at.peer && p.alive)
            {
                peer.queue_unmap(&u);
                peer.flush(&mut news);
            }
        }
        let peer = state
            .peers
            .iter_mut()
            .find(|p| p.id == to && p.alive)
            .ok_or_else(|| self.gone(to, "IpcEndpoint::send"))?;
        if let Message::OneShot { sequence, .. } = message {
            peer.one_shots.push((allocation, sequence));
        }
        peer.unanswered += 1;
        peer.outbox.push_back(message.encode());
        let place = peer.written + peer.outbox.len() as u64;
        peer.flush(&mut news);
        let written = peer.written >= place;
        // A peer killed by this flush broke before the message was written (a flush stops
        // at the first error, and the message is last).
        let gone = !peer.alive;
        drop(state);
        self.stash(news);
        if gone {
            return Err(self.gone(to, "IpcEndpoint::send"));
        }
        // Written already (the usual case): nothing to wait for, whatever the peer does
        // next; it may read the message and exit before the sender looks again.
        Ok((!written).then_some(place))
    }

    /// Waits (making progress, so answers coming back are read) until everything queued to
    /// `to` is in its socket: a send returns once its message left this process.
    pub(super) fn drain_outbox(&self, to: PeerId, place: u64, call: &'static str) -> Result<()> {
        let deadline = Instant::now() + SEND_TIMEOUT;
        loop {
            let backlog = {
                let state = lock(&self.state);
                match state.peers.iter().find(|p| p.id == to) {
                    // Written (perhaps by the progress thread, which may also have seen the
                    // peer hang up since): the send is done.
                    Some(p) if p.written >= place => return Ok(()),
                    Some(p) if p.alive => p.outbox.len(),
                    _ => return Err(self.gone(to, call)),
                }
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(ipc_error(
                    call,
                    format!("{to} has not read its messages ({backlog} queued)"),
                ));
            }
            self.progress((deadline - now).min(POLL_SLICE));
        }
    }

    /// Sends unmaps for these mappings (all of this endpoint's peers) and, if `wait`, waits
    /// until each peer acknowledged them, exited, or the bound ran out. Returns the unmaps
    /// live peers had not acknowledged by then (the caller quarantines or disconnects).
    pub(super) fn unmap(&self, unmaps: &[Unmap], wait: bool) -> Vec<Unmap> {
        let mut targets: Vec<PeerId> = Vec::new();
        {
            let mut state = lock(&self.state);
            let mut news = Vec::new();
            for u in unmaps {
                if let Some(peer) = state
                    .peers
                    .iter_mut()
                    .find(|p| p.id == u.at.peer && p.alive)
                {
                    peer.queue_unmap(u);
                    peer.flush(&mut news);
                    if !targets.contains(&peer.id) {
                        targets.push(peer.id);
                    }
                }
            }
            drop(state);
            // A send may hold the cache here (it evicted an entry another endpoint's peers
            // mapped): stash, not apply.
            self.stash(news);
        }
        if !wait {
            return Vec::new();
        }
        self.apply_stashed();
        if targets.is_empty() {
            return Vec::new(); // nobody to wait for
        }
        let started = Instant::now();
        let deadline = started + self.unmap_timeout;
        tracing::debug!(
            target: "offload::ipc",
            endpoint = self.id,
            peers = targets.len(),
            unmaps = unmaps.len(),
            timeout_ms = self.unmap_timeout.as_millis() as u64,
            "waiting for peers to unmap"
        );
        loop {
            let waiting: Vec<PeerId> = {
                let state = lock(&self.state);
                state
                    .peers
                    .iter()
                    .filter(|p| targets.contains(&p.id) && p.alive && !p.unacked.is_empty())
                    .map(|p| p.id)
                    .collect()
            };
            if waiting.is_empty() {
                tracing::debug!(
                    target: "offload::ipc",
                    endpoint = self.id,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "peers unmapped (or are gone)"
                );
                return Vec::new();
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    target: "offload::ipc",
                    endpoint = self.id,
                    peers = ?waiting,
                    timeout_ms = self.unmap_timeout.as_millis() as u64,
                    "peers did not acknowledge unmaps in time"
                );
                let state = lock(&self.state);
                return unmaps
                    .iter()
                    .filter(|u| self.still_unacked(&state, u))
                    .copied()
                    .collect();
            }
            // The peer may be another endpoint of this process that nobody is driving now:
            // help every local endpoint along while waiting.
            self.shared.help(self.id);
            self.progress((deadline - now).min(Duration::from_millis(1)));
        }
    }

    /// Whether `u`'s peer is alive and has not acknowledged it.
    pub(super) fn still_unacked(&self, state: &State, u: &Unmap) -> bool {
        u.at.endpoint == self.id
            && state.peers.iter().any(|p| {
                p.id == u.at.peer && p.alive && p.unacked.contains(&(u.entry, u.generation))
            })
    }
}

impl Peer {
    /// Queues an unmap to `peer` and remembers that it must be acknowledged.
    pub(super) fn queue_unmap(&mut self, u: &Unmap) {
        stats::UNMAPS_SENT.fetch_add(1, Ordering::Relaxed);
        self.unacked.push((u.entry, u.generation));
        self.outbox.push_back(
            Message::Unmap {
                entry: u.entry,
                generation: u.generation,
                mapping: u.mapping,
            }
            .encode(),
        );
    }
}
