//! [`IpcEndpoint`], the public face of an endpoint: bind, connect, send, receive, wait,
//! close. Each call checks its arguments and hands the work to the endpoint's engine.

use super::*;

/// An IPC endpoint of a runtime: a Unix-domain socket other processes of this user connect
/// to, and the connections it made. See the [`crate::ipc`] module docs for the protocol, the
/// cache and what freeing does.
///
/// ```
/// use offload::{MemKind, Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// // Two endpoints of one process stand in for two processes here.
/// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
/// let to_b = a.connect(b.name())?;
/// let buf = dev.alloc_exportable(64, MemKind::Device)?;
/// buf.write(0, &[5; 64])?;
/// a.send(to_b, &buf, 0, 64, 7)?;
/// let got = b.recv()?;
/// assert_eq!(got.tag(), 7);
/// let mut out = [0u8; 64];
/// got.buffer().read(0, &mut out)?;
/// assert_eq!(out, [5; 64]);
/// # Ok::<(), offload::Error>(())
/// ```
pub struct IpcEndpoint {
    engine: Arc<Engine>,
    key: ResourceKey,
}

impl IpcEndpoint {
    /// Binds a new endpoint of `generation`'s runtime.
    pub(crate) fn bind(generation: &Arc<Generation>) -> Result<IpcEndpoint> {
        const CALL: &str = "Offload::ipc_endpoint";
        let shared = crate::ipc::state(generation)
            .ok_or_else(|| ipc_error(CALL, "this runtime was started without IPC state"))?
            .clone();
        generation.with_live(|live| {
            if generation.is_closing() {
                return Err(Error::shut_down());
            }
            let (listener, path) =
                socket::listen().map_err(|e| ipc_error(CALL, format!("socket: {e}")))?;
            let engine = Arc::new(Engine {
                id: NEXT_ENDPOINT.fetch_add(1, Ordering::Relaxed),
                generation: generation.clone(),
                shared: shared.clone(),
                path,
                listener,
                progress: Mutex::new(()),
                state: Mutex::new(State {
                    peers: Vec::new(),
                    next_peer: 1,
                    next_mapping: 1,
                    next_sequence: 1,
                    deliveries: VecDeque::new(),
                }),
                changed: Condvar::new(),
                waiting: AtomicUsize::new(0),
                unmap_timeout: Duration::from_millis(generation.config.ipc_unmap_timeout_ms),
                closed: AtomicBool::new(false),
                stashed: Mutex::new(Vec::new()),
                rounds: AtomicU64::new(0),
            });
            shared.add_endpoint(engine.id, Arc::downgrade(&engine));
            let (key, engine) = live.register(Kind::Ipc, |_| engine)?;
            shared.progress.start(generation);
            tracing::info!(
                target: "offload::ipc",
                endpoint = engine.id,
                path = %engine.path.display(),
                "bound an IPC endpoint"
            );
            Ok(IpcEndpoint { engine, key })
        })
    }

    /// The name peers connect to: the socket's path.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// let e = rt.ipc_endpoint()?;
    /// assert!(e.name().ends_with(".sock"));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.engine.path.to_str().unwrap_or("")
    }

    /// The socket's path.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// assert!(rt.ipc_endpoint()?.path().exists());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.engine.path
    }

    /// Connects to the endpoint named `name` (its [`IpcEndpoint::name`], from another
    /// process or this one). The peer must run as this user (`SO_PEERCRED`).
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// assert!(a.connect("/nonexistent/offload.sock").is_err());
    /// # let _ = peer;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn connect(&self, name: &str) -> Result<PeerId> {
        const CALL: &str = "IpcEndpoint::connect";
        self.engine.check_open(CALL)?;
        let (fd, pid) = socket::connect(Path::new(name)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                stats::PEERS_REFUSED.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "offload::ipc",
                    endpoint = self.engine.id,
                    to = name,
                    error = %e,
                    "refused to connect to an endpoint"
                );
            }
            ipc_error(CALL, format!("{name}: {e}"))
        })?;
        let peer = self.engine.add_peer(fd, pid);
        tracing::info!(
            target: "offload::ipc",
            endpoint = self.engine.id,
            %peer,
            pid,
            to = name,
            "connected to an IPC endpoint"
        );
        Ok(peer)
    }

    /// Sends `len` bytes at `offset` of `buffer` to `peer`, with a `tag` it receives too.
    /// `buffer` must be exportable memory (`Device::alloc_exportable`) of this runtime.
    /// The first send of an allocation to a peer exports it (once for all peers) and the
    /// peer maps it; later sends carry only the range (I2). Returns once the message is in
    /// the peer's socket (waiting, and reading answers, while the peer's queue is full; a
    /// peer that reads nothing for 30 s is an error); a peer that is gone is `Error::Ipc`.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// let buf = dev.alloc_exportable(256, MemKind::Device)?;
    /// let exports = offload::ipc::stats().exports;
    /// for i in 0..10 {
    ///     a.send(peer, &buf, 16 * i, 16, i as u64)?;
    ///     drop(b.recv()?);
    /// }
    /// assert_eq!(offload::ipc::stats().exports - exports, 1);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn send(
        &self,
        peer: PeerId,
        buffer: &Buffer,
        offset: usize,
        len: usize,
        tag: u64,
    ) -> Result<()> {
        let _span = tracing::debug_span!(target: "offload::ipc", "ipc_send", len, tag).entered();
        self.engine.send(peer, buffer, offset, len, tag)
    }

    /// Waits for the next buffer range a peer sent, making progress on every connection
    /// meanwhile.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// # let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// # let peer = a.connect(b.name())?;
    /// # let buf = dev.alloc_exportable(8, MemKind::Device)?;
    /// a.send(peer, &buf, 0, 8, 1)?;
    /// assert_eq!(b.recv()?.buffer().len(), 8);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn recv(&self) -> Result<Received> {
        loop {
            if let Some(r) = self.recv_timeout(Duration::from_secs(3600))? {
                return Ok(r);
            }
        }
    }

    /// Like [`IpcEndpoint::recv`], giving up after `timeout` (`Ok(None)`).
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// let e = rt.ipc_endpoint()?;
    /// assert!(e.recv_timeout(std::time::Duration::from_millis(1))?.is_none());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Received>> {
        const CALL: &str = "IpcEndpoint::recv";
        let deadline = Instant::now() + timeout;
        loop {
            self.engine.check_open(CALL)?;
            if let Some(r) = self.engine.take_delivery() {
                return r.map(Some);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.engine.progress(deadline - now);
        }
    }

    /// Waits until `peer` answered every send so far (it dropped the views, or could not
    /// deliver), making progress meanwhile: after this, the memory sent may be written
    /// again without the peer seeing it change under a view. `Error::Ipc` if the peer is
    /// gone or `timeout` passes first.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// let buf = dev.alloc_exportable(8, MemKind::Device)?;
    /// a.send(peer, &buf, 0, 8, 0)?;
    /// drop(b.recv()?); // the receiver is done with it
    /// a.wait_answered(peer, std::time::Duration::from_secs(1))?;
    /// buf.write(0, &[1; 8])?; // no view of it is alive any more
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn wait_answered(&self, peer: PeerId, timeout: Duration) -> Result<()> {
        const CALL: &str = "IpcEndpoint::wait_answered";
        let deadline = Instant::now() + timeout;
        loop {
            self.engine.check_open(CALL)?;
            let left = {
                let state = lock(&self.engine.state);
                match state.peers.iter().find(|p| p.id == peer) {
                    Some(p) if p.alive => p.unanswered,
                    _ => return Err(self.engine.gone(peer, CALL)),
                }
            };
            if left == 0 {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ipc_error(
                    CALL,
                    format!("{peer} has {left} sends unanswered"),
                ));
            }
            self.engine.shared.help(self.engine.id);
            self.engine.progress((deadline - now).min(POLL_SLICE));
        }
    }

    /// Makes progress on every connection without waiting (answers peers, flushes what is
    /// queued). `recv`, `send` and frees do this themselves; a process that only sends and
    /// then idles calls it to answer its peers.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// rt.ipc_endpoint()?.poll()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn poll(&self) -> Result<()> {
        self.engine.check_open("IpcEndpoint::poll")?;
        self.engine.progress(Duration::ZERO);
        Ok(())
    }

    /// The peers connected now, by id, with their process ids.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    /// let peer = a.connect(b.name())?;
    /// assert_eq!(a.peers(), vec![(peer, std::process::id())]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn peers(&self) -> Vec<(PeerId, u32)> {
        lock(&self.engine.state)
            .peers
            .iter()
            .filter(|p| p.alive)
            .map(|p| (p.id, p.pid))
            .collect()
    }

    /// Mappings of peers' memory this endpoint holds now (as a receiver).
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// assert_eq!(rt.ipc_endpoint()?.mappings(), 0);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn mappings(&self) -> usize {
        lock(&self.engine.state)
            .peers
            .iter()
            .map(|p| p.mappings.len())
            .sum()
    }

    /// Entries in the process's sender-side cache now (over all endpoints): at most
    /// `Config::ipc_cache_size`.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// assert_eq!(rt.ipc_endpoint()?.cache_entries(), 0);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn cache_entries(&self) -> usize {
        lock(&self.engine.shared.cache).len()
    }

    /// Closes the endpoint now: peers that mapped memory sent from here unmap it (waiting
    /// for them, bounded), mappings of theirs are closed (their views answer an error), the
    /// connections and the socket go. Dropping the endpoint does the same.
    ///
    /// ```
    /// # use offload::Offload;
    /// # let rt = Offload::init()?;
    /// let e = rt.ipc_endpoint()?;
    /// let path = e.path().to_owned();
    /// e.close()?;
    /// assert!(!path.exists());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn close(self) -> Result<()> {
        let result = self.engine.generation.with_live(|live| {
            live.forget(Kind::Ipc, self.key);
            Ok(())
        });
        let closed = self.engine.close();
        // After its runtime's shutdown the endpoint was closed by the teardown: `ShutDown`
        // (L3), as every call on it.
        Error::join(
            [
                result.err().map(|e| e.in_call("IpcEndpoint::close")),
                closed.err(),
            ]
            .into_iter()
            .flatten()
            .collect(),
        )
    }
}

impl Drop for IpcEndpoint {
    fn drop(&mut self) {
        // In a forked child the endpoint is forgotten, with its engine (L9).
        if crate::runtime::fork::forget_in_child(&self.engine) {
            return;
        }
        // `ShutDown` only: the teardown already forgot (and closed) it.
        let _ = self.engine.generation.with_live(|live| {
            live.forget(Kind::Ipc, self.key);
            Ok(())
        });
        let closed = self.engine.close();
        self.engine.generation.defer(closed);
    }
}

impl fmt::Debug for IpcEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcEndpoint")
            .field("name", &self.engine.path)
            .field("peers", &self.peers().len())
            .finish()
    }
}
