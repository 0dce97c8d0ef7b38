//! Test fixture: a C-ABI shared library that embeds offload.
//!
//! `tests/dlopen.rs` loads it with `dlopen`, drives the runtime through the exported
//! functions and `dlclose`s it again, to check lifecycle rule L2 (a library embedding
//! offload unloads cleanly and starts over when loaded again) and the exit hook.
//!
//! `tests/two_copies.rs` loads two copies of it at once (`RTLD_LOCAL`), each with its own
//! runtime, and sends buffer ranges between them through the IPC endpoints the
//! `offload_embed_endpoint`/`_send`/`_recv` exports drive (I4: two copies of offload in one
//! process never share an endpoint name, and each delivery reaches its addressee).
//!
//! Every export returns a status: 0 for success, a negative number for an error. Nothing
//! panics, so no unwinding ever crosses the C boundary.

use std::collections::HashMap;
use std::ffi::{CStr, c_char};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use offload::ipc::{IpcEndpoint, PeerId};
use offload::plugin::{PlatformEntry, hal};
use offload::{BackendKind, Config, MemKind, Offload};

/// Status: success.
pub const OK: i32 = 0;
/// Status: `init` was called while a runtime is already held.
pub const ERR_ALREADY_INIT: i32 = -1;
/// Status: no runtime is held (call `offload_embed_init` first).
pub const ERR_NOT_INIT: i32 = -2;
/// Status: the runtime returned an error.
pub const ERR_RUNTIME: i32 = -3;
/// Status: the runtime has no host device (or none of the backend asked for).
pub const ERR_NO_HOST_DEVICE: i32 = -4;
/// Status: the bytes read back differ from the bytes written.
pub const ERR_MISMATCH: i32 = -5;
/// Status: no IPC endpoint is held (call `offload_embed_endpoint` first).
pub const ERR_NO_ENDPOINT: i32 = -6;
/// Status: `offload_embed_endpoint` was called while an endpoint is already held.
pub const ERR_ENDPOINT_HELD: i32 = -7;
/// Status: `offload_embed_recv` timed out: nothing arrived.
pub const ERR_NOTHING_ARRIVED: i32 = -8;
/// Status: a null pointer, a name that is not UTF-8, or an output too small.
pub const ERR_INVALID_ARGUMENT: i32 = -9;

/// How long `offload_embed_send` waits for the addressee to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The runtime this library holds between `init` and `shutdown`. Const-initialised, so it
/// starts over whenever the library is loaded again.
static RUNTIME: Mutex<Option<Offload>> = Mutex::new(None);

/// The IPC endpoint this library holds between `offload_embed_endpoint` and
/// `offload_embed_close_endpoint` (or `offload_embed_shutdown`). An `Arc`, so a long call
/// (a `recv` waiting, a `send` waiting for its answer) does not hold the lock.
static ENDPOINT: Mutex<Option<Arc<Held>>> = Mutex::new(None);

/// An endpoint, and the peers it connected to, by name.
struct Held {
    endpoint: IpcEndpoint,
    peers: Mutex<HashMap<String, PeerId>>,
}

/// Calls of [`offload_embed_counter`] since this copy of the library was loaded.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The line [`Traced`] writes to stderr when it is deinitialised.
pub const DEINIT_LINE: &str = "offload-embed: deinit\n";

fn runtime() -> MutexGuard<'static, Option<Offload>> {
    // Nothing panics while holding the lock, but stay usable if something ever did.
    RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn endpoint() -> MutexGuard<'static, Option<Arc<Held>>> {
    ENDPOINT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn install(start: impl FnOnce() -> offload::Result<Offload>) -> i32 {
    let mut held = runtime();
    if held.is_some() {
        return ERR_ALREADY_INIT;
    }
    match start() {
        Ok(rt) => {
            *held = Some(rt);
            OK
        }
        Err(_) => ERR_RUNTIME,
    }
}

/// Initialises offload with its defaults and keeps the runtime in this library.
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_init() -> i32 {
    install(Offload::init)
}

/// Like [`offload_embed_init`], with the extra platform [`Traced`], whose deinit writes
/// [`DEINIT_LINE`] to stderr (so a test can see when the runtime was deinitialised).
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_init_traced() -> i32 {
    install(|| {
        Offload::builder()
            .platform(PlatformEntry::of::<Traced>())
            .start()
    })
}

fn host_device(rt: &Offload) -> offload::Result<Option<offload::Device>> {
    Ok(rt
        .devices()?
        .into_iter()
        .find(|d| d.backend() == BackendKind::Host))
}

fn work(rt: &Offload) -> offload::Result<i32> {
    let Some(dev) = host_device(rt)? else {
        return Ok(ERR_NO_HOST_DEVICE);
    };
    let buf = dev.alloc(4096, MemKind::Device)?;
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    buf.write(0, &pattern)?;
    let mut back = vec![0u8; 4096];
    buf.read(0, &mut back)?;
    buf.free()?;
    Ok(if back == pattern { OK } else { ERR_MISMATCH })
}

/// Allocates 4096 bytes on a host device, writes a pattern, reads it back, checks it and
/// frees the buffer.
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_work() -> i32 {
    match runtime().as_ref() {
        None => ERR_NOT_INIT,
        Some(rt) => work(rt).unwrap_or(ERR_RUNTIME),
    }
}

fn launch(rt: &Offload, image: &[u8]) -> offload::Result<i32> {
    launch_on(rt, BackendKind::Host, image)
}

/// Runs `add_one` of `image` over 64 blocks on the first device of `backend`, and checks.
fn launch_on(rt: &Offload, backend: BackendKind, image: &[u8]) -> offload::Result<i32> {
    let Some(dev) = rt.devices()?.into_iter().find(|d| d.backend() == backend) else {
        return Ok(ERR_NO_HOST_DEVICE);
    };
    let add_one = offload::Program::new(image).load(&dev)?.kernel("add_one")?;
    let n = 64 * 64u32;
    let buf = dev.alloc(4 * n as usize, MemKind::Device)?;
    let queue = dev.queue()?;
    // 64 blocks: a parallel launch, so the device starts its worker threads.
    // SAFETY: add_one writes n u32s of its buffer, which holds n.
    unsafe {
        queue.launch(
            &add_one,
            offload::Dims::grid([64, 1, 1]).block([64, 1, 1]),
            &[offload::Arg::buffer(&buf), offload::Arg::scalar(&n)],
        )
    }?;
    let mut back = vec![0u8; 4 * n as usize];
    queue.read(&buf, 0, &mut back)?;
    let ok = back.chunks_exact(4).all(|w| w == 1u32.to_ne_bytes());
    Ok(if ok { OK } else { ERR_MISMATCH })
}

/// Loads the host program `image` (`len` bytes, with kernel `add_one(buf u32[], n u32)`),
/// runs `add_one` over 64 blocks and checks the result. The module, queue and buffer are
/// dropped before it returns.
///
/// # Safety
/// `image` must point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_embed_launch(image: *const u8, len: usize) -> i32 {
    if image.is_null() {
        return ERR_RUNTIME;
    }
    // SAFETY: the caller promises `len` readable bytes at `image`; `Program::new` copies
    // them before this returns.
    let image = unsafe { std::slice::from_raw_parts(image, len) };
    match runtime().as_ref() {
        None => ERR_NOT_INIT,
        Some(rt) => launch(rt, image).unwrap_or(ERR_RUNTIME),
    }
}

/// [`offload_embed_launch`] on the first device of a vendor backend: `backend` 0 is CUDA
/// (a PTX image, say), 1 HIP (an AMD code object), 2 Level Zero (SPIR-V).
/// [`ERR_NO_HOST_DEVICE`] when there is no such device (or no such backend).
///
/// # Safety
/// `image` must point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_embed_launch_on(
    backend: u32,
    image: *const u8,
    len: usize,
) -> i32 {
    let kind = match backend {
        0 => BackendKind::Cuda,
        1 => BackendKind::Hip,
        2 => BackendKind::Ze,
        _ => return ERR_NO_HOST_DEVICE,
    };
    if image.is_null() {
        return ERR_RUNTIME;
    }
    // SAFETY: as in `offload_embed_launch`.
    let image = unsafe { std::slice::from_raw_parts(image, len) };
    match runtime().as_ref() {
        None => ERR_NOT_INIT,
        Some(rt) => launch_on(rt, kind, image).unwrap_or(ERR_RUNTIME),
    }
}

/// Enqueues a host function that panics on a queue of the first host device and syncs: the
/// panic must come back as `Error::Callback` (L6), wherever it ran (the queue's executor
/// or this thread, which runs queued work itself when it waits). `OK` when it did.
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_panicking_host_fn() -> i32 {
    let Some(rt) = runtime().clone() else {
        return ERR_NOT_INIT;
    };
    let run = || -> offload::Result<i32> {
        let Some(dev) = rt
            .devices()?
            .into_iter()
            .find(|d| d.backend() == BackendKind::Host)
        else {
            return Ok(ERR_NO_HOST_DEVICE);
        };
        let queue = dev.queue()?;
        queue.enqueue_host_fn(|| panic!("a planted panic in a host function"))?;
        Ok(match queue.sync() {
            Err(offload::Error::Callback { .. }) => OK,
            _ => ERR_MISMATCH,
        })
    };
    run().unwrap_or(ERR_RUNTIME)
}

/// Makes an IPC endpoint of the runtime this library holds and keeps it (one at a time);
/// writes its name (the socket's path) to `name_out`, NUL-terminated. On
/// [`ERR_INVALID_ARGUMENT`] (a null `name_out`, or `cap` too small for the name and its
/// NUL) the endpoint is not kept.
///
/// # Safety
/// `name_out` must point to `cap` writable bytes (or be null, which is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_embed_endpoint(name_out: *mut u8, cap: usize) -> i32 {
    if name_out.is_null() {
        return ERR_INVALID_ARGUMENT;
    }
    let Some(rt) = runtime().clone() else {
        return ERR_NOT_INIT;
    };
    let mut held = endpoint();
    if held.is_some() {
        return ERR_ENDPOINT_HELD;
    }
    let Ok(made) = rt.ipc_endpoint() else {
        return ERR_RUNTIME;
    };
    let name = made.name().as_bytes();
    if name.is_empty() || name.contains(&0) || name.len() >= cap {
        return ERR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller promises `cap` writable bytes at `name_out`, and
    // `name.len() + 1 <= cap`; `name` is this library's own memory, so they do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(name.as_ptr(), name_out, name.len());
        *name_out.add(name.len()) = 0;
    }
    *held = Some(Arc::new(Held {
        endpoint: made,
        peers: Mutex::new(HashMap::new()),
    }));
    OK
}

fn held_endpoint() -> Option<Arc<Held>> {
    endpoint().clone()
}

fn send(rt: &Offload, held: &Held, name: &str, value: u8, tag: u64) -> offload::Result<i32> {
    let Some(dev) = host_device(rt)? else {
        return Ok(ERR_NO_HOST_DEVICE);
    };
    let peer = {
        let mut peers = lock(&held.peers);
        match peers.get(name) {
            Some(&peer) => peer,
            None => {
                let peer = held.endpoint.connect(name)?;
                peers.insert(name.to_owned(), peer);
                peer
            }
        }
    };
    let buf = dev.alloc_exportable(64, MemKind::Device)?;
    buf.write(0, &[value; 64])?;
    held.endpoint.send(peer, &buf, 0, 64, tag)?;
    held.endpoint.wait_answered(peer, ANSWER_TIMEOUT)?;
    // The addressee unmaps it first (its progress thread answers, bounded).
    buf.free()?;
    Ok(OK)
}

/// Sends 64 bytes of `value`, with `tag`, from the endpoint this library holds to the
/// endpoint named `name` (connecting the first time; the connection is kept per name), and
/// waits (at most 10 s) until the addressee answered: it dropped the view, which needs it to
/// receive meanwhile (`offload_embed_recv` of the copy that holds it, from another thread
/// when both copies are in this process). The buffer is freed before this returns.
///
/// # Safety
/// `name` must point to a NUL-terminated string (or be null, which is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_embed_send(name: *const c_char, value: u8, tag: u64) -> i32 {
    if name.is_null() {
        return ERR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller promises a NUL-terminated string at `name`, read only here.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return ERR_INVALID_ARGUMENT;
    };
    let Some(rt) = runtime().clone() else {
        return ERR_NOT_INIT;
    };
    let Some(held) = held_endpoint() else {
        return ERR_NO_ENDPOINT;
    };
    send(&rt, &held, name, value, tag).unwrap_or(ERR_RUNTIME)
}

/// Receives one delivery at the endpoint this library holds, waiting at most `timeout_ms`:
/// writes the first byte of the range received to `value_out` and its tag to `tag_out`,
/// and drops the view (which answers the sender). [`ERR_NOTHING_ARRIVED`] when nothing
/// arrived in time (the outputs are left alone then).
///
/// # Safety
/// `value_out` and `tag_out` must each point to a writable, aligned value of its type (or
/// be null, which is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_embed_recv(
    timeout_ms: u32,
    value_out: *mut u8,
    tag_out: *mut u64,
) -> i32 {
    if value_out.is_null() || tag_out.is_null() {
        return ERR_INVALID_ARGUMENT;
    }
    let Some(held) = held_endpoint() else {
        return ERR_NO_ENDPOINT;
    };
    let timeout = Duration::from_millis(u64::from(timeout_ms));
    let got = match held.endpoint.recv_timeout(timeout) {
        Ok(Some(got)) => got,
        Ok(None) => return ERR_NOTHING_ARRIVED,
        Err(_) => return ERR_RUNTIME,
    };
    let mut first = [0u8; 1];
    if got.buffer().read(0, &mut first).is_err() {
        return ERR_RUNTIME;
    }
    let tag = got.tag();
    drop(got);
    // SAFETY: the caller promises both are valid for writes.
    unsafe {
        *value_out = first[0];
        *tag_out = tag;
    }
    OK
}

/// Closes the endpoint this library holds (its socket file goes).
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_close_endpoint() -> i32 {
    let Some(held) = endpoint().take() else {
        return ERR_NO_ENDPOINT;
    };
    match Arc::try_unwrap(held) {
        Ok(held) => match held.endpoint.close() {
            Ok(()) => OK,
            Err(_) => ERR_RUNTIME,
        },
        // A call in another thread still uses it: it closes when that call returns.
        Err(_) => OK,
    }
}

/// Takes the runtime out of this library and shuts it down (closing the IPC endpoint
/// first, if one is held).
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_shutdown() -> i32 {
    let Some(rt) = runtime().take() else {
        return ERR_NOT_INIT;
    };
    drop(endpoint().take());
    match rt.shutdown() {
        Ok(_) => OK,
        Err(_) => ERR_RUNTIME,
    }
}

/// The generation of the runtime this library holds, or 0 if it holds none.
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_generation() -> u64 {
    runtime().as_ref().map_or(0, |rt| rt.generation())
}

/// Increments and returns a static counter: 1 on the first call after each fresh load.
#[unsafe(no_mangle)]
pub extern "C" fn offload_embed_counter() -> u64 {
    COUNTER.fetch_add(1, Ordering::Relaxed) + 1
}

/// A platform without devices whose `deinit` writes [`DEINIT_LINE`] to stderr.
#[derive(Debug)]
pub struct Traced;

impl hal::Platform for Traced {
    type Device = hal::Never;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(_config: &Config) -> offload::Result<Self> {
        Ok(Traced)
    }

    fn name(&self) -> String {
        "offload-embed traced".into()
    }

    fn devices(&self) -> Vec<hal::Never> {
        Vec::new()
    }

    fn deinit(&self) -> offload::Result<()> {
        // Unbuffered, so the line is in order with the test's own stderr markers.
        let _ = std::io::stderr().write_all(DEINIT_LINE.as_bytes());
        Ok(())
    }
}
