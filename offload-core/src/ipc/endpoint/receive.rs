//! Receiving: deliveries become views (`Received`) of memory mapped from the sender (I2,
//! I4), and a view's drop or a mapping's close tells the sender.

use super::*;

impl Engine {
    /// This engine, weakly: what a view it hands out tells when it is dropped (a view
    /// must not keep its endpoint alive).
    pub(super) fn weak(&self) -> Weak<Engine> {
        self.shared.endpoint(self.id).unwrap_or_default()
    }

    /// A view of (entry, generation) from `peer` was dropped: tell the peer; a one-shot
    /// mapping closes with its view.
    pub(super) fn view_dropped(&self, peer: PeerId, entry: u32, generation: u32) {
        let closing = {
            let mut state = lock(&self.state);
            let mut news = Vec::new();
            let mut closing = None;
            if let Some(p) = state.peers.iter_mut().find(|p| p.id == peer && p.alive) {
                if let Some(i) = p
                    .mappings
                    .iter()
                    .position(|m| m.entry == entry && m.generation == generation)
                {
                    let m = &mut p.mappings[i];
                    m.views = m.views.saturating_sub(1);
                    if m.one_shot && m.views == 0 {
                        closing = Some(p.mappings.remove(i));
                    }
                }
                p.outbox
                    .push_back(Message::Done { entry, generation }.encode());
                p.flush(&mut news);
            }
            drop(state);
            self.finish_dead(news);
            closing
        };
        if let Some(m) = closing {
            self.close_mapping(m);
        }
        self.signal();
    }

    /// Closes a mapping: its allocation is forgotten and freed, and its views answer
    /// `InvalidIpcHandle` from now on.
    pub(super) fn close_mapping(&self, m: Mapping) {
        if !m.one_shot {
            stats::cached_mapping_closed();
        }
        // Forgotten and freed under the generation's lock, as `Buffer::free` does: a
        // teardown in between would find it in no registry and deinitialise its platform
        // with it still allocated.
        let freed = match self.generation.with_live(|live| {
            live.forget(Kind::Buffer, m.key);
            Ok(m.buffer.revoke())
        }) {
            Ok(freed) => freed,
            // The runtime is ending: its teardown frees what is listed; this one too.
            Err(_) => m.buffer.revoke(),
        };
        self.generation.defer(freed);
    }

    /// Takes the next delivery and maps what it names: a `Map` or `OneShot` imports (and a
    /// `Map` answers `Mapped`), a `Use` finds its mapping. A delivery that cannot be made
    /// is answered `Failed` and skipped.
    /// A delivery that cannot be made is answered `Failed` to its sender and returned
    /// here as the typed error (a backend's import error, or the peer's bad reference), so
    /// the receiver never waits for a message that will not come.
    pub(super) fn take_delivery(&self) -> Option<Result<Received>> {
        let mut closing = Vec::new();
        let mut news = Vec::new();
        let taken = {
            let mut state = lock(&self.state);
            loop {
                let Some(d) = state.deliveries.pop_front() else {
                    break None;
                };
                let Some(index) = state.peers.iter().position(|p| p.id == d.peer && p.alive) else {
                    continue; // its peer is gone: so is the memory
                };
                let peer_id = d.peer;
                let how = match d.what {
                    Pending::Map { .. } => "map",
                    Pending::Use { .. } => "cached",
                    Pending::OneShot { .. } => "one-shot",
                };
                let made = self.materialize(&mut state, index, d.what, &mut closing);
                let peer = &mut state.peers[index];
                match made {
                    Ok(buffer) => {
                        tracing::debug!(
                            target: "offload::ipc",
                            endpoint = self.id,
                            peer = %peer_id,
                            tag = d.tag,
                            len = buffer.len(),
                            mapping = how,
                            "received a buffer range"
                        );
                        peer.flush(&mut news);
                        break Some(Ok(Received {
                            peer: peer_id,
                            tag: d.tag,
                            buffer,
                        }));
                    }
                    Err(undelivered) => {
                        let (failed, error) = *undelivered;
                        stats::REJECTED.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            target: "offload::ipc",
                            endpoint = self.id,
                            peer = %peer_id,
                            tag = d.tag,
                            mapping = how,
                            answer = ?failed,
                            "could not deliver a buffer range"
                        );
                        let reason = format!(
                            "{peer_id} sent tag {} ({how}), which could not be delivered: \
                             {failed:?}",
                            d.tag
                        );
                        peer.outbox.push_back(failed.encode());
                        peer.flush(&mut news);
                        // The backend's own error when there is one (typed, naming its
                        // backend and call); else the peer's bad reference.
                        break Some(Err(match error {
                            Some(e) => e,
                            None => ipc_error("IpcEndpoint::recv", reason),
                        }));
                    }
                }
            }
        };
        for m in closing {
            self.close_mapping(m);
        }
        self.finish_dead(news);
        taken
    }

    /// Makes the view a delivery names, or the `Failed` answer to send instead (with the
    /// error that caused it, when there is one).
    pub(super) fn materialize(
        &self,
        state: &mut State,
        index: usize,
        what: Pending,
        closing: &mut Vec<Mapping>,
    ) -> std::result::Result<Buffer, Box<(Message, Option<Error>)>> {
        let peer_id = state.peers[index].id;
        match what {
            Pending::Map {
                entry,
                generation,
                offset,
                len,
                handle,
            } => {
                // A stale mapping of this entry (an older generation, or the same one
                // again): the sender no longer has it, so neither do we.
                let peer = &mut state.peers[index];
                while let Some(i) = peer.mappings.iter().position(|m| m.entry == entry) {
                    closing.push(peer.mappings.remove(i));
                }
                let (buffer, key) = self.import(handle).map_err(|(code, e)| {
                    let failed = Message::Failed {
                        entry,
                        generation,
                        code,
                    };
                    Box::new((failed, e))
                })?;
                let id = state.next_mapping;
                state.next_mapping = state.next_mapping.wrapping_add(1).max(1);
                let view = self.view(peer_id, &buffer, entry, generation, offset, len);
                stats::cached_mapping_opened();
                let peer = &mut state.peers[index];
                peer.mappings.push(Mapping {
                    entry,
                    generation,
                    id,
                    buffer,
                    key,
                    views: 1,
                    one_shot: false,
                });
                let mapped = Message::Mapped {
                    entry,
                    generation,
                    mapping: id,
                };
                peer.outbox.push_back(mapped.encode());
                Ok(view)
            }
            Pending::Use {
                entry,
                generation,
                mapping,
                offset,
                len,
            } => {
                let failed = |code| Message::Failed {
                    entry,
                    generation,
                    code,
                };
                let peer = &mut state.peers[index];
                let m = peer
                    .mappings
                    .iter_mut()
                    .find(|m| {
                        m.entry == entry
                            && m.generation == generation
                            && !m.one_shot
                            && (mapping == 0 || m.id == mapping)
                    })
                    .ok_or_else(|| Box::new((failed(FailCode::UnknownMapping), None)))?;
                if offset.saturating_add(len) > m.buffer.size() as u64 {
                    return Err(Box::new((failed(FailCode::Range), None)));
                }
                m.views += 1;
                let buffer = m.buffer.clone();
                Ok(self.view(peer_id, &buffer, entry, generation, offset, len))
            }
            Pending::OneShot {
                sequence,
                offset,
                len,
                handle,
            } => {
                let (buffer, key) = self.import(handle).map_err(|(code, e)| {
                    let failed = Message::Failed {
                        entry: ONE_SHOT,
                        generation: sequence,
                        code,
                    };
                    Box::new((failed, e))
                })?;
                let view = self.view(peer_id, &buffer, ONE_SHOT, sequence, offset, len);
                state.peers[index].mappings.push(Mapping {
                    entry: ONE_SHOT,
                    generation: sequence,
                    id: 0,
                    buffer,
                    key,
                    views: 1,
                    one_shot: true,
                });
                Ok(view)
            }
        }
    }

    /// Maps a peer's memory on the device the handle names.
    pub(super) fn import(
        &self,
        handle: IpcHandle,
    ) -> std::result::Result<(Arc<BufferEntry>, ResourceKey), (FailCode, Option<Error>)> {
        if self.closed.load(Ordering::SeqCst) || self.generation.is_closing() {
            return Err((FailCode::Closing, None));
        }
        let no_device = || Error::InvalidIpcHandle {
            backend: Some(handle.backend()),
            call: "IpcEndpoint::recv",
            reason: "no device of this runtime has the memory's device UUID".into(),
        };
        let Some(device) = self.device_for(&handle) else {
            return Err((FailCode::Import, Some(no_device())));
        };
        match import_entry(&device, handle) {
            Ok((key, entry, _, _)) => Ok((entry, key)),
            Err(e) => Err((FailCode::Import, Some(e))),
        }
    }

    /// The device of this runtime a handle names (backend and UUID); opens the platforms
    /// of that backend if nothing opened them yet.
    pub(super) fn device_for(&self, handle: &IpcHandle) -> Option<Device> {
        let generation = &self.generation;
        let backend = handle.backend();
        generation
            .with_live(|live| {
                Ok(live
                    .platforms
                    .iter()
                    .enumerate()
                    .filter(|(_, slot)| slot.kind() == backend)
                    .flat_map(|(index, _)| live.devices_of(index, &generation.config))
                    .find(|(_, raw)| raw.uuid().ok() == Some(handle.device_uuid()))
                    .map(|(key, _)| Device::new(generation.clone(), key, backend)))
            })
            .ok()
            .flatten()
    }

    pub(super) fn view(
        &self,
        peer: PeerId,
        buffer: &Arc<BufferEntry>,
        entry: u32,
        generation: u32,
        offset: u64,
        len: u64,
    ) -> Buffer {
        let token = ViewToken {
            engine: self.weak(),
            peer,
            entry,
            generation,
        };
        Buffer::view(
            self.generation.clone(),
            buffer.clone(),
            offset as usize,
            len as usize,
            Arc::new(token),
        )
    }
}
