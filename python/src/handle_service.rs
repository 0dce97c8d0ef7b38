//! Picklable IPC handles for `multiprocessing` (I1–I5 over endpoints): the handle's data
//! ([`PyIpcHandle`]), the sender's handle service and the receiver's client. `Buffer.ipc_handle`
//! (buffer.rs) makes handles and `IpcHandle.open` (handle.rs) opens them, above this.
//!
//! `buf.ipc_handle(offset=, nbytes=)` gives an [`PyIpcHandle`]: a few numbers and a name,
//! never a descriptor or an address, so it pickles through any `multiprocessing` channel
//! (a `Pool`'s or `ProcessPoolExecutor`'s task queue, spawn or forkserver). `open()` in
//! another process of the same user maps that range, through offload's endpoints, so the
//! sender-side cache and its guarantees are those of `IpcEndpoint.send`:
//!
//! - **The sender** (the process that made the handle) has one *handle service* per
//!   runtime generation, made by its first `ipc_handle()`: an endpoint (its name is in
//!   every handle), a registry from random 56-bit keys to (buffer, range), and a thread
//!   (`offload-py-ipc-handles`, no Python in it) that answers requests. The registry holds
//!   each buffer weakly: a handle never keeps memory its `Buffer` gave back. Two ranges
//!   of one allocation get two keys, each naming its own range.
//! - **The receiver** (`open()`) has one endpoint per runtime generation (of the `rt`
//!   given, else of a runtime the package starts for the process and keeps until exit),
//!   connected once to each sender it opens from. It asks by sending a small exportable
//!   buffer of its own tagged with the key; the service answers by sending the range with
//!   the same tag (`IpcEndpoint::send`: a cache miss exports and maps the allocation once
//!   per peer, later opens carry only the range, I2), or, when there is nothing to send
//!   (the key is unknown, the buffer was freed or collected), its own small buffer tagged
//!   with the reason. Both ends' progress threads answer unmap notices (I5).
//! - **Freeing** the sender's buffer (`free()`, its collection, shutdown) unmaps it from
//!   every process that opened a handle of it before the memory is released (I3): `free`
//!   returns once each has acknowledged (their progress threads answer, whatever the
//!   worker's Python does; docs/python.md has the times measured), and their views answer
//!   `InvalidIpcHandleError` from then on. A receiver that does not
//!   answer in `OFFLOAD_IPC_UNMAP_TIMEOUT_MS` leaves the memory quarantined
//!   (`QuarantinedError`), as for any send.
//!
//! Memory shared between processes has no zero-copy view (the core refuses `with_mapped`
//! of it): views read and write by copy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use offload::ipc::{IpcEndpoint, PeerId};
use offload::{BackendKind, Buffer, MemKind, Offload};
use pyo3::prelude::*;

use crate::calls::lock;

/// The version of a handle's pickled state.
pub(crate) const STATE_VERSION: u32 = 1;
/// Keys are 56 random bits; the tag's top byte says what an answer is.
pub(crate) const KEY_BITS: u64 = (1 << 56) - 1;
/// Answer kinds (the top byte of the tag): the range itself, or why there is none.
const SENT: u64 = 0;
const UNKNOWN: u64 = 1;
pub(crate) const FREED: u64 = 2;
/// How long `open()` waits for the sender's answer.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the service's thread waits in one `recv` before it looks whether its runtime
/// is still there.
const SERVICE_SLICE: Duration = Duration::from_millis(250);

/// A range of another process's exportable memory, picklable; `open()` maps it.
#[pyclass(name = "IpcHandle", module = "offload", frozen)]
pub(crate) struct PyIpcHandle {
    /// The sender's handle-service endpoint.
    pub(crate) name: String,
    pub(crate) key: u64,
    pub(crate) offset: u64,
    pub(crate) nbytes: u64,
    pub(crate) backend: String,
    pub(crate) pid: u32,
}

/// One registered range.
struct Registered {
    slot: Weak<RwLock<Option<Buffer>>>,
    offset: usize,
    len: usize,
}

/// The sender's side: one per runtime generation (see the module comment).
pub(crate) struct Service {
    generation: u64,
    pub(crate) name: String,
    endpoint: IpcEndpoint,
    /// Sent, with a reason in its tag, when there is no range to send.
    refusal: Buffer,
    registry: Mutex<HashMap<u64, Registered>>,
}

static SERVICE: Mutex<Option<Arc<Service>>> = Mutex::new(None);

/// The receiver's side: one per runtime generation.
struct Client {
    generation: u64,
    endpoint: IpcEndpoint,
    /// Sent to ask, tagged with the key.
    request: Buffer,
    peers: HashMap<String, PeerId>,
}

/// One at a time: opens are rare next to the reads and writes of what they open, and one
/// endpoint's answers are then never another open's.
static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

/// 56 bits from the kernel.
fn random_key() -> std::io::Result<u64> {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes) & KEY_BITS)
}

/// The service of `rt`'s generation, started by the first handle made in it.
pub(crate) fn service(rt: &Offload, device: BackendKind) -> offload::Result<Arc<Service>> {
    let mut slot = lock(&SERVICE);
    if let Some(s) = slot.as_ref()
        && s.generation == rt.generation()
    {
        return Ok(s.clone());
    }
    let endpoint = rt.ipc_endpoint()?;
    // Any device that allocates exportable memory serves for the refusals; the host
    // device is there unless the runtime was started without it.
    let refusal = rt
        .device(BackendKind::Host)
        .or_else(|_| rt.device(device))?
        .alloc_exportable(8, MemKind::Device)?;
    let service = Arc::new(Service {
        generation: rt.generation(),
        name: endpoint.name().to_string(),
        endpoint,
        refusal,
        registry: Mutex::new(HashMap::new()),
    });
    let serving = service.clone();
    std::thread::Builder::new()
        .name("offload-py-ipc-handles".into())
        .spawn(move || serve(&serving))
        .map_err(|e| {
            offload::Error::invalid(
                "Buffer.ipc_handle",
                format!("starting the handle service's thread: {e}"),
            )
        })?;
    *slot = Some(service.clone());
    Ok(service)
}

/// The service's thread: answers every request until its runtime ends (its endpoint is
/// closed by the shutdown, L4: the thread sees it within `SERVICE_SLICE` and returns). It
/// runs no Python, so it never holds up the interpreter's exit.
fn serve(service: &Service) {
    loop {
        match service.endpoint.recv_timeout(SERVICE_SLICE) {
            Ok(Some(request)) => {
                let (peer, key) = (request.peer(), request.tag() & KEY_BITS);
                // Dropped at once: the receiver's request buffer is answered `Done`.
                drop(request);
                service.answer(peer, key);
            }
            Ok(None) => {}
            // A delivery this process could not map (it was answered `Failed`): the
            // asker's own problem; it times out or retries.
            Err(offload::Error::InvalidIpcHandle { .. }) => {}
            Err(offload::Error::Ipc { .. }) if !service.endpoint_closed() => {}
            // Closed: the runtime ended.
            Err(_) => break,
        }
    }
    let mut slot = lock(&SERVICE);
    if slot
        .as_ref()
        .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), service))
    {
        *slot = None;
    }
}

impl Service {
    fn endpoint_closed(&self) -> bool {
        self.endpoint.poll().is_err()
    }

    pub(crate) fn register(
        &self,
        slot: Weak<RwLock<Option<Buffer>>>,
        offset: usize,
        len: usize,
    ) -> u64 {
        let mut registry = lock(&self.registry);
        registry.retain(|_, e| e.slot.strong_count() > 0);
        if let Some((key, _)) = registry
            .iter()
            .find(|(_, e)| e.slot.ptr_eq(&slot) && (e.offset, e.len) == (offset, len))
        {
            return *key;
        }
        loop {
            // Without the kernel's randomness, a clock-and-counter key is still unique here
            // (the same-user check of I4 is what keeps others out).
            let key = random_key().unwrap_or_else(|_| {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                (nanos ^ (registry.len() as u64).rotate_left(40)) & KEY_BITS
            });
            if let std::collections::hash_map::Entry::Vacant(free) = registry.entry(key) {
                free.insert(Registered { slot, offset, len });
                return key;
            }
        }
    }

    /// Sends the range registered as `key` to `peer`, or the refusal tagged with why.
    fn answer(&self, peer: PeerId, key: u64) {
        let found = lock(&self.registry)
            .get(&key)
            .map(|e| (e.slot.upgrade(), e.offset, e.len));
        let why = match found {
            None => UNKNOWN,
            Some((None, ..)) => FREED,
            Some((Some(slot), offset, len)) => {
                // The read lock only for the send: a concurrent `free()` waits for it, and
                // then unmaps what this sent (I3).
                let guard = slot.read().unwrap_or_else(|p| p.into_inner());
                match guard.as_ref() {
                    Some(b) => match self.endpoint.send(peer, b, offset, len, key) {
                        Ok(()) => return,
                        // Freed under it, or the asker is gone: told the memory is gone.
                        Err(_) => FREED,
                    },
                    None => FREED,
                }
            }
        };
        // The asker times out if even this fails (its process is gone, most likely).
        let _ = self
            .endpoint
            .send(peer, &self.refusal, 0, 8, key | (why << 56));
    }
}

/// The client of `rt`'s generation (made on first use).
fn client<'a>(slot: &'a mut Option<Client>, rt: &Offload) -> offload::Result<&'a mut Client> {
    if slot
        .as_ref()
        .is_none_or(|c| c.generation != rt.generation())
    {
        // The old generation's: its handles answer ShutDown and drop as no-ops (no GIL
        // is held here, none is needed).
        drop(slot.take());
        let endpoint = rt.ipc_endpoint()?;
        let host = rt.device(BackendKind::Host);
        let request = match host {
            Ok(d) => d.alloc_exportable(8, MemKind::Device)?,
            Err(_) => {
                let mut made = None;
                for d in rt.devices()? {
                    if let Ok(b) = d.alloc_exportable(8, MemKind::Device) {
                        made = Some(b);
                        break;
                    }
                }
                made.ok_or_else(|| {
                    offload::Error::invalid(
                        "IpcHandle.open",
                        "no device of this runtime allocates exportable memory: start it \
                         with the host backend",
                    )
                })?
            }
        };
        *slot = Some(Client {
            generation: rt.generation(),
            endpoint,
            request,
            peers: HashMap::new(),
        });
    }
    slot.as_mut()
        .ok_or_else(|| offload::Error::invalid("IpcHandle.open", "no client"))
}

/// What went wrong opening, before it is a Python exception (made with the GIL).
pub(crate) enum OpenError {
    Offload(offload::Error),
    /// The sender's service could not be reached (I1: a stale handle).
    Gone(offload::Error),
    Refused(u64),
    NoAnswer,
}

impl PyIpcHandle {
    pub(crate) fn state(&self) -> (u32, String, u64, u64, u64, String, u32) {
        (
            STATE_VERSION,
            self.name.clone(),
            self.key,
            self.offset,
            self.nbytes,
            self.backend.clone(),
            self.pid,
        )
    }

    /// Asks the sender and waits for its answer (GIL released by the caller).
    pub(crate) fn ask(&self, rt: &Offload) -> Result<Buffer, OpenError> {
        let mut slot = lock(&CLIENT);
        let client = client(&mut slot, rt).map_err(OpenError::Offload)?;
        let peer = match client.peers.get(&self.name) {
            Some(p) => *p,
            None => {
                let p = client
                    .endpoint
                    .connect(&self.name)
                    .map_err(OpenError::Gone)?;
                client.peers.insert(self.name.clone(), p);
                p
            }
        };
        if let Err(e) = client.endpoint.send(peer, &client.request, 0, 8, self.key) {
            // The connection is gone (the sender exited or shut down): forget it, so a
            // later open connects again.
            client.peers.remove(&self.name);
            return Err(OpenError::Offload(e));
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(OpenError::NoAnswer);
            }
            let got = client
                .endpoint
                .recv_timeout(left)
                .map_err(OpenError::Offload)?;
            let Some(got) = got else {
                return Err(OpenError::NoAnswer);
            };
            // An answer to an earlier open that gave up waiting is dropped.
            if got.peer() != peer || got.tag() & KEY_BITS != self.key {
                continue;
            }
            return match got.tag() >> 56 {
                SENT => Ok(got.into_buffer()),
                why => Err(OpenError::Refused(why)),
            };
        }
    }
}
