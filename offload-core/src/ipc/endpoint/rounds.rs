//! Progress: one round accepts connections, reads what peers sent, answers it and flushes
//! the outboxes — made by whoever calls into the endpoint, or by the progress thread when
//! nobody does (I5). `handle` is the protocol: what each message does to the endpoint.
//! Who waits for a round waits here, and `signal` wakes them.

use super::*;

impl Engine {
    /// Wakes the threads waiting for a round of progress, if any.
    pub(super) fn signal(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this after a waiter's registration and its wait.
            drop(lock(&self.state));
            self.changed.notify_all();
        }
    }

    /// One round of progress, waiting at most `wait` for something to happen: accept, read
    /// and answer, flush. If another thread is making progress, waits for its round instead.
    pub(super) fn progress(&self, wait: Duration) {
        let Ok(turn) = self.progress.try_lock() else {
            if !wait.is_zero() {
                let state = lock(&self.state);
                self.waiting.fetch_add(1, Ordering::SeqCst);
                // A wake-up or a timeout: either way the loop looks again.
                let _ = self.changed.wait_timeout(state, wait.min(POLL_SLICE));
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
            return;
        };
        // Poll on copies of the sockets (the state is not locked while waiting).
        let sockets: Vec<(PeerId, Arc<OwnedFd>, bool)> = {
            let state = lock(&self.state);
            state
                .peers
                .iter()
                .filter(|p| p.alive)
                .map(|p| (p.id, p.socket.clone(), !p.outbox.is_empty()))
                .collect()
        };
        // One peer and nothing to write (a ping-pong): try its socket directly while
        // spinning, so an answer costs one read and no poll.
        if let [(id, socket, false)] = sockets.as_slice() {
            if !wait.is_zero() {
                let until = Instant::now() + SPIN.min(wait);
                loop {
                    match socket::recv(socket.as_fd()) {
                        Ok(None) => {}
                        read => {
                            self.finish_round(turn, Some((*id, read)), Vec::new(), false);
                            return;
                        }
                    }
                    if Instant::now() >= until {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
        }
        let mut fds = Vec::with_capacity(sockets.len() + 1);
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        for (_, socket, writing) in &sockets {
            let mut flags = PollFlags::IN;
            if *writing {
                flags |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&**socket, flags));
        }
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut ready = rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0);
        if ready == 0 && !wait.is_zero() {
            let spin_until = Instant::now() + SPIN.min(wait);
            while ready == 0 && Instant::now() < spin_until {
                std::hint::spin_loop();
                ready = rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0);
            }
            if ready == 0 {
                let timeout = wait.min(POLL_SLICE);
                let timeout = rustix::event::Timespec {
                    tv_sec: timeout.as_secs() as i64,
                    tv_nsec: i64::from(timeout.subsec_nanos()),
                };
                // Readiness or an interrupt: the round reads whatever is there either way.
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
        }
        let ready: Vec<(PeerId, PollFlags)> = sockets
            .iter()
            .zip(&fds[1..])
            .map(|((id, _, _), fd)| (*id, fd.revents()))
            .collect();
        let listening = !fds[0].revents().is_empty();
        drop(fds);

        if listening {
            self.accept_all();
        }
        self.finish_round(turn, None, ready, true);
    }

    /// The second half of a round of progress: handle a packet read while spinning, or read
    /// the peers `poll` found ready; flush; close what died; wake waiters.
    pub(super) fn finish_round(
        &self,
        turn: crate::sync::MutexGuard<'_, ()>,
        spun: Option<(PeerId, std::io::Result<Option<socket::Packet>>)>,
        ready: Vec<(PeerId, PollFlags)>,
        flush_all: bool,
    ) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        let mut news = Vec::new();
        let mut closing = Closing::default();
        {
            let mut state = lock(&self.state);
            let mut touched = Vec::new();
            if let Some((id, read)) = spun {
                if let Some(index) = state.peers.iter().position(|p| p.id == id && p.alive) {
                    self.take_packet(&mut state, index, read, &mut news, &mut closing);
                    touched.push(id);
                }
            }
            for (id, revents) in ready {
                if revents.is_empty() {
                    continue;
                }
                let Some(index) = state.peers.iter().position(|p| p.id == id && p.alive) else {
                    continue;
                };
                if revents.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                    self.read_peer(&mut state, index, &mut news, &mut closing);
                }
                touched.push(id);
            }
            for peer in state
                .peers
                .iter_mut()
                .filter(|p| p.alive && (flush_all || touched.contains(&p.id)))
            {
                peer.flush(&mut news);
            }
            state.peers.retain(|p| p.alive || !p.mappings.is_empty());
        }
        // The turn ends before mappings close: closing waits for the work queued on them,
        // which may itself call into this endpoint (a host function that receives).
        drop(turn);
        // I3: an `UnmapAck` enters its peer's outbox only once its mapping is really
        // closed (queued work on it finished, the memory unmapped), so no other thread's
        // flush can send it early.
        if !closing.mappings.is_empty() || !closing.acks.is_empty() {
            for m in closing.mappings {
                self.close_mapping(m);
            }
            let mut state = lock(&self.state);
            for (id, ack) in closing.acks {
                if let Some(peer) = state.peers.iter_mut().find(|p| p.id == id && p.alive) {
                    peer.outbox.push_back(ack.encode());
                }
            }
            for peer in state
                .peers
                .iter_mut()
                .filter(|p| p.alive && !p.outbox.is_empty())
            {
                peer.flush(&mut news);
            }
        }
        self.finish_dead(news);
        self.apply_stashed();
        self.signal();
    }

    pub(super) fn accept_all(&self) {
        loop {
            match socket::accept(self.listener.as_fd()) {
                Ok(Some((fd, Ok(pid)))) => {
                    let peer = self.add_peer(fd, pid);
                    tracing::info!(
                        target: "offload::ipc",
                        endpoint = self.id,
                        %peer,
                        pid,
                        "accepted a peer"
                    );
                }
                Ok(Some((fd, Err(e)))) => {
                    // Another user, or credentials we cannot read: refused.
                    stats::PEERS_REFUSED.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        target: "offload::ipc",
                        endpoint = self.id,
                        error = %e,
                        "refused a connection"
                    );
                    drop(fd);
                }
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Reads and handles what peer `index` sent. Returns whether something was delivered.
    pub(super) fn read_peer(
        &self,
        state: &mut State,
        index: usize,
        news: &mut Vec<CacheNews>,
        closing: &mut Closing,
    ) -> bool {
        let mut delivered = false;
        for _ in 0..READ_BATCH {
            let socket = state.peers[index].socket.clone();
            match self.take_packet(state, index, socket::recv(socket.as_fd()), news, closing) {
                Some(d) => delivered |= d,
                None => break,
            }
        }
        delivered
    }

    /// Handles what one read of peer `index` gave: `None` when there is nothing more to
    /// read from it now (no packet, or it was cut off), else whether a delivery came.
    pub(super) fn take_packet(
        &self,
        state: &mut State,
        index: usize,
        read: std::io::Result<Option<socket::Packet>>,
        news: &mut Vec<CacheNews>,
        closing: &mut Closing,
    ) -> Option<bool> {
        let cut_off = |state: &mut State, news: &mut Vec<CacheNews>, why: Option<&'static str>| {
            let why = match why {
                Some(violation) => {
                    stats::REJECTED.fetch_add(1, Ordering::Relaxed);
                    let peer = &state.peers[index];
                    tracing::warn!(
                        target: "offload::ipc",
                        endpoint = self.id,
                        peer = %peer.id,
                        pid = peer.pid,
                        violation,
                        "a peer broke the protocol: cutting it off"
                    );
                    "it broke the protocol"
                }
                None => "its socket closed",
            };
            state.peers[index].kill(news, why);
            std::mem::take(&mut state.peers[index].mappings)
        };
        let packet = match read {
            Ok(Some(packet)) => packet,
            Ok(None) => return None,
            Err(_) => {
                closing.mappings.extend(cut_off(state, news, None));
                return None;
            }
        };
        let message = if packet.truncated {
            Err(wire::WireError::Oversized)
        } else {
            wire::decode(&packet.bytes, packet.fds)
        };
        // Malformed, forged or oversized: counted, and the peer is cut off (its
        // descriptors were closed with the packet).
        let Ok(message) = message else {
            closing.mappings.extend(cut_off(
                state,
                news,
                Some("a malformed, forged or oversized message"),
            ));
            return None;
        };
        match self.handle(state, index, message, news, closing) {
            Ok(delivered) => Some(delivered),
            Err(()) => {
                closing
                    .mappings
                    .extend(cut_off(state, news, Some("a message out of turn")));
                None
            }
        }
    }

    /// Handles one well-formed message from peer `index`: `Err` for a protocol violation.
    pub(super) fn handle(
        &self,
        state: &mut State,
        index: usize,
        message: Message,
        news: &mut Vec<CacheNews>,
        closing: &mut Closing,
    ) -> std::result::Result<bool, ()> {
        let peer_id = state.peers[index].id;
        if !state.peers[index].greeted {
            return match message {
                Message::Hello { .. } => {
                    state.peers[index].greeted = true;
                    Ok(false)
                }
                _ => Err(()), // anything before `Hello`
            };
        }
        match message {
            Message::Hello { .. } => return Err(()), // a second one
            Message::Map { entry, .. } if entry == ONE_SHOT => return Err(()),
            Message::Map { .. } | Message::Use { .. } | Message::OneShot { .. } => {
                if let Some((tag, what)) = Pending::of(message) {
                    state.deliveries.push_back(Delivery {
                        peer: peer_id,
                        tag,
                        what,
                    });
                }
                return Ok(true);
            }
            Message::Unmap {
                entry,
                generation,
                mapping: _,
            } => {
                stats::UNMAPS_RECEIVED.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    target: "offload::ipc",
                    endpoint = self.id,
                    peer = %peer_id,
                    entry,
                    generation,
                    "the sender unmapped memory it sent"
                );
                let peer = &mut state.peers[index];
                let ack = Message::UnmapAck { entry, generation };
                match peer
                    .mappings
                    .iter()
                    .position(|m| m.entry == entry && m.generation == generation)
                {
                    Some(i) => {
                        closing.mappings.push(peer.mappings.remove(i));
                        closing.acks.push((peer_id, ack));
                    }
                    None => peer.outbox.push_back(ack.encode()),
                }
                // Deliveries of it not taken yet go too (their descriptors close): the
                // sender no longer has it. Each is answered, so the sender does not wait
                // for it.
                let mut dropped = 0;
                state.deliveries.retain(|d| {
                    let of_it = d.peer == peer_id
                        && match d.what {
                            Pending::Map {
                                entry: e,
                                generation: g,
                                ..
                            }
                            | Pending::Use {
                                entry: e,
                                generation: g,
                                ..
                            } => e == entry && g == generation,
                            Pending::OneShot { sequence, .. } => {
                                entry == ONE_SHOT && sequence == generation
                            }
                        };
                    dropped += usize::from(of_it);
                    !of_it
                });
                for _ in 0..dropped {
                    let failed = Message::Failed {
                        entry,
                        generation,
                        code: FailCode::UnknownMapping,
                    };
                    state.peers[index].outbox.push_back(failed.encode());
                }
            }
            Message::Mapped {
                entry,
                generation,
                mapping,
            } => news.push(CacheNews::Mapped(peer_id, entry, generation, mapping)),
            Message::Failed {
                entry, generation, ..
            } => {
                let peer = &mut state.peers[index];
                peer.unanswered = peer.unanswered.saturating_sub(1);
                if entry == ONE_SHOT {
                    peer.one_shots.retain(|&(_, s)| s != generation);
                } else {
                    news.push(CacheNews::Answered(peer_id, entry, generation, false));
                }
            }
            Message::Done { entry, generation } => {
                let peer = &mut state.peers[index];
                peer.unanswered = peer.unanswered.saturating_sub(1);
                if entry == ONE_SHOT {
                    peer.one_shots.retain(|&(_, s)| s != generation);
                } else {
                    news.push(CacheNews::Answered(peer_id, entry, generation, true));
                }
            }
            Message::UnmapAck { entry, generation } => {
                let peer = &mut state.peers[index];
                if let Some(i) = peer
                    .unacked
                    .iter()
                    .position(|&(e, g)| e == entry && g == generation)
                {
                    peer.unacked.remove(i);
                    if entry == ONE_SHOT {
                        // Unmapped: it no longer counts against the window (its `Done`
                        // still comes when the receiver drops the view).
                        peer.one_shots.retain(|&(_, s)| s != generation);
                    }
                    stats::UNMAPS_ACKED.fetch_add(1, Ordering::Relaxed);
                    news.push(CacheNews::Acked(peer_id, entry, generation));
                }
                // An acknowledgement nobody waits for is stale: dropped.
            }
        }
        Ok(false)
    }
}
