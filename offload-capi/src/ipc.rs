//! IPC from C: exporting a buffer as bytes and a file descriptor, importing them in
//! another process (I1), and endpoints that send buffer ranges through the sender-side
//! cache (I2–I5).

use std::ffi::c_char;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use offload::ipc::{IpcEndpoint, IpcHandle, MAX_HANDLE_BYTES, PeerId};
use offload::{Buffer, Device, Offload};

use crate::ffi::{bytes, copy_text, out, text};
use crate::memory::offload_buffer_t;
use crate::runtime::{offload_device_t, offload_runtime_t};
use crate::status::{Fail, Res, guard, offload_status_t};
use crate::table;
use offload::Error;

/// An IPC endpoint of a runtime.
#[allow(non_camel_case_types)]
pub type offload_endpoint_t = u64;

/// The most bytes an exported handle has (`offload_ipc_export`): room for any handle of
/// any backend.
pub const OFFLOAD_IPC_HANDLE_MAX_BYTES: usize = 256;

// The header's number is a literal (cbindgen writes what C can read); it must hold every
// handle the runtime makes.
const _: () = assert!(OFFLOAD_IPC_HANDLE_MAX_BYTES >= MAX_HANDLE_BYTES);

/// An endpoint and the peers it knows, numbered for C from 1 in the order it met them.
pub(crate) struct Endpoint {
    endpoint: IpcEndpoint,
    peers: Mutex<Vec<PeerId>>,
}

impl table::Held for Endpoint {
    const KIND: table::Kind = table::Kind::Endpoint;
}

impl Endpoint {
    fn peers(&self) -> MutexGuard<'_, Vec<PeerId>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn number(&self, peer: PeerId) -> u64 {
        let mut all = self.peers();
        let i = match all.iter().position(|p| *p == peer) {
            Some(i) => i,
            None => {
                all.push(peer);
                all.len() - 1
            }
        };
        i as u64 + 1
    }

    fn peer(&self, call: &'static str, n: u64) -> Res<PeerId> {
        let all = self.peers();
        n.checked_sub(1)
            .and_then(|i| all.get(i as usize).copied())
            .ok_or_else(|| {
                Fail::from(Error::invalid(
                    call,
                    format!("peer {n} is no peer of this endpoint"),
                ))
            })
    }
}

/// Exports `buffer` (made by `offload_buffer_alloc_exportable`) for another process (I1):
/// writes the handle's bytes to `bytes` (`cap` bytes; `OFFLOAD_IPC_HANDLE_MAX_BYTES` is
/// always enough), their number to `len`, and the descriptor that goes with them (or -1
/// when the backend needs none) to `fd`. The caller owns `fd`: it passes it to the other
/// process (`SCM_RIGHTS`) and closes its copy.
///
/// # Safety
/// `bytes` must point to `cap` writable bytes; `len` and `fd` to writable values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_ipc_export(
    buffer: offload_buffer_t,
    bytes: *mut u8,
    cap: usize,
    len: *mut usize,
    fd: *mut i32,
) -> offload_status_t {
    const CALL: &str = "offload_ipc_export";
    guard(CALL, || {
        let len = out(CALL, "len", len)?;
        let fd = out(CALL, "fd", fd)?;
        if bytes.is_null() {
            return Err(Fail::from(Error::invalid(
                CALL,
                "`bytes` is a null pointer",
            )));
        }
        let handle = table::get::<Buffer>(CALL, buffer)?.export()?;
        let (data, descriptor) = handle.into_parts();
        if data.len() > cap {
            // `descriptor` is closed by its drop: nothing leaks.
            return Err(Fail::from(Error::invalid(
                CALL,
                format!("`bytes` holds {cap} bytes; the handle has {}", data.len()),
            )));
        }
        // SAFETY: the caller promises `cap >= data.len()` writable bytes at `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), bytes, data.len()) };
        len.set(data.len());
        fd.set(descriptor.map_or(-1, IntoRawFd::into_raw_fd));
        Ok(())
    })
}

/// Maps, on `device`, the memory another process exported (I1): `len` bytes of handle
/// and its descriptor `fd` (-1 for none). `fd` is taken over and closed in every case,
/// success or error (I1: every received descriptor is closed after import or on failure).
/// A handle for another device, forged or stale, is `OFFLOAD_ERROR_INVALID_IPC_HANDLE`.
///
/// # Safety
/// `bytes` must point to `len` readable bytes; `fd` must be -1 or a descriptor the caller
/// owns and gives up; `buffer` must point to a writable handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_ipc_import(
    device: offload_device_t,
    bytes_in: *const u8,
    len: usize,
    fd: i32,
    buffer: *mut offload_buffer_t,
) -> offload_status_t {
    const CALL: &str = "offload_ipc_import";
    // SAFETY: the caller gives up `fd` (or passes -1): owned from here, closed by the drop.
    let owned = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
    guard(CALL, move || {
        let o = out(CALL, "buffer", buffer)?;
        // SAFETY: the caller promises `len` readable bytes at `bytes_in`.
        let data = unsafe { bytes(CALL, "bytes", bytes_in, len) }?;
        let handle = IpcHandle::from_parts(data, owned)?;
        let b = table::get::<Device>(CALL, device)?.import(handle)?;
        o.set(table::insert(CALL, table::epoch_of(device), b)?);
        Ok(())
    })
}

/// Makes an IPC endpoint of the runtime (a Unix socket private to this user, I4);
/// `offload_endpoint_name` gives the name peers connect to.
///
/// # Safety
/// `endpoint` must point to a writable handle (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_endpoint_create(
    runtime: offload_runtime_t,
    endpoint: *mut offload_endpoint_t,
) -> offload_status_t {
    const CALL: &str = "offload_endpoint_create";
    guard(CALL, || {
        let o = out(CALL, "endpoint", endpoint)?;
        let e = table::get::<Offload>(CALL, runtime)?.ipc_endpoint()?;
        let held = Endpoint {
            endpoint: e,
            peers: Mutex::new(Vec::new()),
        };
        o.set(table::insert(CALL, table::epoch_of(runtime), held)?);
        Ok(())
    })
}

/// The endpoint's name, copied into `buf` (`cap` bytes, NUL included); `needed` (may be
/// null) gets the bytes needed. `buf` null with `cap` 0 asks for the size only.
///
/// # Safety
/// `buf` must point to `cap` writable bytes (or be null with `cap` 0); `needed` null or a
/// writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_endpoint_name(
    endpoint: offload_endpoint_t,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> offload_status_t {
    const CALL: &str = "offload_endpoint_name";
    guard(CALL, || {
        let e = table::get::<Endpoint>(CALL, endpoint)?;
        // SAFETY: as this function's caller promises.
        unsafe { copy_text(CALL, e.endpoint.name(), buf, cap, needed) }
    })
}

/// Connects to the endpoint named `name` (in this process or another of this user) and
/// stores its peer number (from 1) in `peer`.
///
/// # Safety
/// `name` must point to a NUL-terminated string; `peer` to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_endpoint_connect(
    endpoint: offload_endpoint_t,
    name: *const c_char,
    peer: *mut u64,
) -> offload_status_t {
    const CALL: &str = "offload_endpoint_connect";
    guard(CALL, || {
        let o = out(CALL, "peer", peer)?;
        // SAFETY: the caller promises a NUL-terminated string.
        let name = unsafe { text(CALL, "name", name) }?;
        let e = table::get::<Endpoint>(CALL, endpoint)?;
        let p = e.endpoint.connect(name)?;
        o.set(e.number(p));
        Ok(())
    })
}

/// Sends `len` bytes of `buffer` at `offset` to `peer`, with `tag`, through the
/// sender-side cache (I2): a miss sends the handle, a hit only the range.
#[unsafe(no_mangle)]
pub extern "C" fn offload_endpoint_send(
    endpoint: offload_endpoint_t,
    peer: u64,
    buffer: offload_buffer_t,
    offset: usize,
    len: usize,
    tag: u64,
) -> offload_status_t {
    const CALL: &str = "offload_endpoint_send";
    guard(CALL, || {
        let e = table::get::<Endpoint>(CALL, endpoint)?;
        let p = e.peer(CALL, peer)?;
        let b = table::get::<Buffer>(CALL, buffer)?;
        e.endpoint.send(p, &b, offset, len, tag)?;
        Ok(())
    })
}

/// Waits at most `timeout_ms` for a range a peer sent: stores a new buffer handle for the
/// view in `buffer` (free it with `offload_buffer_free`, which answers the sender, I3),
/// its tag in `tag` and the sender's peer number in `peer` (both may be null).
/// `received` says whether anything came (the outputs are left alone when not).
///
/// # Safety
/// `buffer` and `received` must point to writable values; `tag` and `peer` be null or
/// point to writable `uint64_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_endpoint_recv(
    endpoint: offload_endpoint_t,
    timeout_ms: u32,
    buffer: *mut offload_buffer_t,
    tag: *mut u64,
    peer: *mut u64,
    received: *mut bool,
) -> offload_status_t {
    const CALL: &str = "offload_endpoint_recv";
    guard(CALL, || {
        let o = out(CALL, "buffer", buffer)?;
        let got_out = out(CALL, "received", received)?;
        let e = table::get::<Endpoint>(CALL, endpoint)?;
        let Some(got) = e
            .endpoint
            .recv_timeout(Duration::from_millis(u64::from(timeout_ms)))?
        else {
            got_out.set(false);
            return Ok(());
        };
        let (n, t) = (e.number(got.peer()), got.tag());
        o.set(table::insert(
            CALL,
            table::epoch_of(endpoint),
            got.into_buffer(),
        )?);
        if !tag.is_null() {
            // SAFETY: non-null; the caller promises a writable uint64_t.
            unsafe { tag.write(t) };
        }
        if !peer.is_null() {
            // SAFETY: non-null; the caller promises a writable uint64_t.
            unsafe { peer.write(n) };
        }
        got_out.set(true);
        Ok(())
    })
}

/// Waits at most `timeout_ms` until `peer` answered everything sent to it (dropped its
/// views); `OFFLOAD_ERROR_IPC` if it did not in time.
#[unsafe(no_mangle)]
pub extern "C" fn offload_endpoint_wait_answered(
    endpoint: offload_endpoint_t,
    peer: u64,
    timeout_ms: u32,
) -> offload_status_t {
    const CALL: &str = "offload_endpoint_wait_answered";
    guard(CALL, || {
        let e = table::get::<Endpoint>(CALL, endpoint)?;
        let p = e.peer(CALL, peer)?;
        e.endpoint
            .wait_answered(p, Duration::from_millis(u64::from(timeout_ms)))?;
        Ok(())
    })
}

/// Closes the endpoint (its socket file goes; peers are told to unmap, I3) and gives back
/// its handle.
#[unsafe(no_mangle)]
pub extern "C" fn offload_endpoint_close(endpoint: offload_endpoint_t) -> offload_status_t {
    const CALL: &str = "offload_endpoint_close";
    guard(CALL, || {
        let e = table::remove::<Endpoint>(CALL, endpoint)?;
        if let table::Removed::Owned(e) = e {
            e.endpoint.close()?;
        }
        Ok(())
    })
}
