//! HIP memory shared between processes: `hipIpcGetMemHandle` on the exporting side,
//! `hipIpcOpenMemHandle` and `hipIpcCloseMemHandle` on the importing side.
//!
//! A handle's payload is `OFHP`, a version byte, three zero bytes, the runtime's 64-byte
//! `hipIpcMemHandle_t`, then the exporter's pid, the allocation's device address in the
//! exporter and its size (`hipMemGetAddressRange`; u64s, little-endian): 96 bytes. No file
//! descriptor travels.
//!
//! Every open is paired with one close: the mappings of a device are shared ([`Mapping`],
//! one per handle, closed with its last buffer), so a handle imported twice is opened once.
//! A handle of this same process shares the allocation itself (the runtime does not open
//! its own process's handles). Unlike the CUDA backend, no stale-mapping defence is needed
//! nor tried: HIP has no `ALREADY_MAPPED` answer to recover from.

use std::sync::{Arc, PoisonError, Weak};

use offload_core::hal::Exported;
use offload_core::{BackendKind, Error, Result};

use crate::memory::{HipBuffer, Origin};
use crate::platform::{DeviceShared, driver_error};

const MAGIC: &[u8; 4] = b"OFHP";
const VERSION: u8 = 1;
const PAYLOAD_LEN: usize = 96;

/// One open IPC mapping in this process.
pub(crate) struct Mapping {
    device: Arc<DeviceShared>,
    pub(crate) ptr: *mut std::ffi::c_void,
    handle: [u8; 64],
}

// SAFETY: the mapping's address is only handed to the runtime (thread-safe); it is closed
// once, in `Drop`.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        const CALL: &str = "Buffer::free";
        if self.device.bind(CALL).is_ok() {
            // SAFETY: `ptr` came from hipIpcOpenMemHandle on this device and is closed once,
            // here; every buffer over it waited for its queued work before it went.
            let _ = unsafe { self.device.driver.ipc_close(self.ptr) };
        }
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidIpcHandle {
        backend: BackendKind::Hip,
        call: "Device::import",
        reason: reason.into(),
    }
}

fn unsupported(call: &'static str) -> Error {
    Error::Unsupported {
        backend: BackendKind::Hip,
        call,
        reason: "the runtime has no HIP IPC (hipIpcGetMemHandle/hipIpcOpenMemHandle)".into(),
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// What another process needs to open `buffer`.
pub(crate) fn export(buffer: &HipBuffer) -> Result<Exported> {
    const CALL: &str = "Buffer::export";
    if !buffer.exportable || buffer.alloc.origin != Origin::Device {
        return Err(Error::InvalidArgument {
            call: CALL,
            reason: "hip buffer is not exportable (allocate it with alloc_exportable)".into(),
        });
    }
    let device = buffer.device();
    device.bind(CALL)?;
    let ptr = buffer.alloc.ptr;
    // SAFETY: `ptr` is the base of this live hipMalloc allocation.
    let handle = unsafe { device.driver.ipc_get(ptr) }
        .ok_or_else(|| unsupported(CALL))?
        .map_err(driver_error(CALL))?;
    let (base, size) = device
        .driver
        .address_range(ptr)
        .ok_or_else(|| unsupported(CALL))?
        .map_err(driver_error(CALL))?;
    if base != ptr as u64 || size < buffer.len() as u64 {
        return Err(Error::Driver {
            backend: BackendKind::Hip,
            call: CALL,
            code: 0,
            message: format!(
                "hipMemGetAddressRange says {size} bytes at {base:#x} for the {}-byte \
                 allocation at {ptr:p}",
                buffer.len()
            ),
        });
    }
    let mut payload = Vec::with_capacity(PAYLOAD_LEN);
    payload.extend_from_slice(MAGIC);
    payload.extend_from_slice(&[VERSION, 0, 0, 0]);
    payload.extend_from_slice(&handle);
    payload.extend_from_slice(&u64::from(std::process::id()).to_le_bytes());
    payload.extend_from_slice(&base.to_le_bytes());
    payload.extend_from_slice(&(buffer.len() as u64).to_le_bytes());
    Ok(Exported {
        size: buffer.len() as u64,
        payload,
        fd: None,
    })
}

/// Opens memory another process exported, sharing this device's mapping of it.
pub(crate) fn import(device: &Arc<DeviceShared>, exported: Exported) -> Result<HipBuffer> {
    const CALL: &str = "Device::import";
    if exported.fd.is_some() {
        return Err(bad("a HIP handle carries no file descriptor"));
    }
    let p = exported.payload.as_slice();
    if p.len() != PAYLOAD_LEN || &p[..4] != MAGIC || p[4] != VERSION {
        return Err(bad("the payload is not a HIP allocation's"));
    }
    let mut handle = [0u8; 64];
    handle.copy_from_slice(&p[8..72]);
    let (pid, base, len) = (u64_at(p, 72), u64_at(p, 80), u64_at(p, 88));
    let size = usize::try_from(exported.size).map_err(|_| bad("size"))?;
    if size == 0 || exported.size > len {
        return Err(bad(format!(
            "the handle says {} bytes of a {len}-byte allocation",
            exported.size
        )));
    }
    if pid == u64::from(std::process::id()) {
        // The runtime does not open a handle in the process that made it: share the
        // allocation itself (it lives until both buffers are gone).
        return device
            .exported_at(base, exported.size)
            .map(|alloc| HipBuffer::alias(alloc, size))
            .ok_or_else(|| bad("no live exportable allocation of this process has that address"));
    }
    let mut mappings = device
        .mappings
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    mappings.retain(|m| m.strong_count() > 0);
    if let Some(m) = mappings
        .iter()
        .filter_map(Weak::upgrade)
        .find(|m| m.handle == handle)
    {
        return Ok(HipBuffer::imported(device, m, size));
    }
    device.bind(CALL)?;
    let ptr = device
        .driver
        .ipc_open(handle)
        .ok_or_else(|| unsupported(CALL))?
        .map_err(|f| {
            if f.code == i64::from(crate::ffi::sys::HIP_ERROR_OUT_OF_MEMORY) {
                f.into_error(BackendKind::Hip, CALL)
            } else {
                bad(format!("the runtime refused it: {}", f.message()))
            }
        })?;
    let mapping = Arc::new(Mapping {
        device: device.clone(),
        ptr,
        handle,
    });
    mappings.push(Arc::downgrade(&mapping));
    Ok(HipBuffer::imported(device, mapping, size))
}
