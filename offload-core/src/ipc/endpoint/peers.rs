//! The connections and the endpoint's end: a peer is added and greeted, written to
//! through its outbox without blocking (`Peer::flush`), and killed once it is gone; a dead
//! peer's mappings are closed; the endpoint is open until `close`, which asks every peer to
//! unmap what was sent from here (bounded wait, I3) and lets every connection go.

use super::*;

impl Peer {
    /// Writes what the peer's socket takes now; a broken socket kills the self.
    pub(super) fn flush(&mut self, news: &mut Vec<CacheNews>) {
        while let Some((bytes, fd)) = self.outbox.front() {
            match socket::send(self.socket.as_fd(), bytes, fd.as_ref().map(|f| f.as_fd())) {
                Ok(Sent::Done) => {
                    self.outbox.pop_front();
                    self.written += 1;
                }
                Ok(Sent::WouldBlock) => return,
                Err(_) => {
                    self.kill(news, "its socket broke");
                    return;
                }
            }
        }
    }

    /// The peer is gone (its socket broke, it broke the protocol, or it did not answer in
    /// time): nothing more is sent to it, and the cache forgets it. Its mappings are closed
    /// by the caller.
    pub(super) fn kill(&mut self, news: &mut Vec<CacheNews>, why: &'static str) {
        if !self.alive {
            return;
        }
        tracing::info!(
            target: "offload::ipc",
            endpoint = self.endpoint,
            peer = %self.id,
            pid = self.pid,
            why,
            "a peer is gone"
        );
        self.alive = false;
        self.outbox.clear();
        self.unacked.clear();
        // The peer is already marked dead; a socket the other side closed fails here harmlessly.
        let _ = rustix::net::shutdown(&*self.socket, rustix::net::Shutdown::Both);
        news.push(CacheNews::Gone(self.id));
    }
}

impl Engine {
    pub(super) fn check_open(&self, call: &'static str) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.closed_error(call));
        }
        Ok(())
    }

    /// The error of a call on a closed endpoint: `ShutDown` if its runtime ended.
    pub(super) fn closed_error(&self, call: &'static str) -> Error {
        if self.generation.is_live() && !self.generation.is_closing() {
            ipc_error(call, "the endpoint is closed")
        } else {
            Error::ShutDown {
                call,
                object: "the IPC endpoint".into(),
                caller: crate::Caller::Rust,
            }
        }
    }

    /// Lists a connected socket as a peer and greets it.
    pub(super) fn add_peer(&self, fd: OwnedFd, pid: u32) -> PeerId {
        let mut state = lock(&self.state);
        let id = PeerId(state.next_peer);
        state.next_peer += 1;
        let mut peer = Peer {
            id,
            endpoint: self.id,
            socket: Arc::new(fd),
            pid,
            greeted: false,
            alive: true,
            outbox: VecDeque::new(),
            written: 0,
            mappings: Vec::new(),
            unacked: Vec::new(),
            one_shots: Vec::new(),
            unanswered: 0,
        };
        peer.outbox.push_back(
            Message::Hello {
                token: crate::ipc::process_token(),
                pid: std::process::id(),
            }
            .encode(),
        );
        let mut news = Vec::new();
        peer.flush(&mut news);
        state.peers.push(peer);
        id
    }

    pub(super) fn gone(&self, id: PeerId, call: &'static str) -> Error {
        // Closed under the call (by its runtime's shutdown): say that, not the peer.
        if self.closed.load(Ordering::SeqCst) {
            return self.closed_error(call);
        }
        ipc_error(
            call,
            format!(
                "{id} is not connected (its socket closed, it exited or was cut off, or it \
                 never was a peer of this endpoint)"
            ),
        )
    }

    /// Cache news, then the mappings of dead peers are closed.
    pub(super) fn finish_dead(&self, news: Vec<CacheNews>) {
        if news.is_empty() {
            return; // nobody died in this round (a death always brings news)
        }
        self.apply(news);
        let closing: Vec<Mapping> = {
            let mut state = lock(&self.state);
            state
                .peers
                .iter_mut()
                .filter(|p| !p.alive)
                .flat_map(|p| std::mem::take(&mut p.mappings))
                .collect()
        };
        for m in closing {
            self.close_mapping(m);
        }
    }

    /// Closes the endpoint (idempotent): peers unmap what was sent from here (bounded
    /// wait), this endpoint's mappings of theirs are closed, connections and the socket go.
    pub(super) fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let unmaps = lock(&self.shared.cache).release_endpoint(self.id);
        tracing::info!(
            target: "offload::ipc",
            endpoint = self.id,
            unmaps = unmaps.len(),
            "closing an IPC endpoint"
        );
        let unanswered = self.unmap(&unmaps, true);
        // Every peer goes with the endpoint, through `kill`: the cache and the quarantine
        // hear of it (`Gone`), so memory quarantined for one of them is released now, not
        // at shutdown, and the dead peers' mappings close.
        let mut news = Vec::new();
        {
            let mut state = lock(&self.state);
            for peer in state.peers.iter_mut() {
                let why = if unanswered.iter().any(|u| u.at.peer == peer.id) {
                    "it did not acknowledge unmaps in time"
                } else {
                    "its endpoint closed"
                };
                peer.kill(&mut news, why);
            }
        }
        self.finish_dead(news);
        let (mappings, deliveries, peers) = {
            let mut state = lock(&self.state);
            let mappings: Vec<Mapping> = state
                .peers
                .iter_mut()
                .flat_map(|p| std::mem::take(&mut p.mappings))
                .collect();
            let deliveries = std::mem::take(&mut state.deliveries);
            let peers = std::mem::take(&mut state.peers);
            (mappings, deliveries, peers)
        };
        for m in mappings {
            self.close_mapping(m);
        }
        drop(deliveries); // their views answer errors now; their drops find no peer
        drop(peers); // their sockets were shut down by `kill`
        self.shared.remove_endpoint(self.id);
        // Best effort: the socket file may be gone already; a stale one is swept at bind.
        let _ = std::fs::remove_file(&self.path);
        self.signal();
        Ok(())
    }
}
