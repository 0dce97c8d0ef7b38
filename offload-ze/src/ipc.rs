//! Level Zero memory shared between processes: `zeMemGetIpcHandle` / `zeMemPutIpcHandle` on
//! the exporting side, `zeMemOpenIpcHandle` / `zeMemCloseIpcHandle` on the importing side.
//!
//! On Linux a Level Zero IPC handle holds a file descriptor of the exporting process (Intel's
//! driver puts a dma-buf fd in its first eight bytes): the number means nothing elsewhere.
//! So `export` duplicates that descriptor into the handle's fd (the core's endpoint sends it
//! with SCM_RIGHTS), zeroes it in the bytes, and gives the driver's handle back at once
//! (`zeMemPutIpcHandle`, where the loader has it: every get is paired with one put; the
//! duplicate keeps the memory shareable). `import` writes the descriptor it received into
//! the handle, opens it, and closes the descriptor whatever happened (I1). Level Zero
//! returns a new mapping for every open, so a device keeps one mapping per exported
//! allocation — keyed by its identity, the exporter's pid and `zeMemGetAllocProperties().id`
//! — shared by every import of it and closed (`zeMemCloseIpcHandle`) with the last: every
//! open is paired with exactly one close, and a handle imported twice is opened once.
//!
//! The payload is `OFZE`, a version byte, three zero bytes, the driver's 64-byte handle
//! (descriptor bytes zeroed), then the exporter's pid, the allocation's identity there
//! (`zeMemGetAllocProperties().id`) and its size (u64s, little-endian): 96 bytes.
//!
//! This module owns the export and import and the device's `hal::Ipc` impl; a mapping
//! itself ([`Mapping`], closed with its last buffer) and the device's table of them are
//! shared.rs's, since the device record and imported buffers hold them.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, PoisonError, Weak};

use offload_core::hal::{self, Exported};
use offload_core::{BackendKind, Error, MemKind, Result};

use crate::ffi::{MemoryKind, sys};
use crate::memory::{Origin, ZeBuffer};
use crate::shared::{DeviceShared, Mapping, ZeDevice, driver_error};

const MAGIC: &[u8; 4] = b"OFZE";
const VERSION: u8 = 1;
const PAYLOAD_LEN: usize = 96;
/// Where the handle keeps its descriptor (a u64).
const FD_BYTES: std::ops::Range<usize> = 0..8;

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidIpcHandle {
        backend: Some(BackendKind::Ze),
        call: "",
        reason: reason.into(),
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// What another process needs to map `buffer`: the payload and a descriptor of the memory.
pub(crate) fn export(buffer: &ZeBuffer) -> Result<Exported> {
    if !buffer.exportable || buffer.alloc.origin != Origin::Made(MemoryKind::Device) {
        return Err(Error::InvalidArgument {
            call: "",
            reason: "ze buffer is not exportable (allocate it with alloc_exportable)".into(),
        });
    }
    let device = buffer.device();
    let driver = device.driver();
    let context = device.context();
    let ptr = buffer.alloc.ptr;
    let id = driver.alloc_id(context, ptr).map_err(driver_error)?;
    // SAFETY: `ptr` is the base of this live device allocation of the context.
    let mut handle = unsafe { driver.ipc_get(context, ptr) }.map_err(driver_error)?;
    let raw = u64_at(&handle.data, FD_BYTES.start);
    let duplicated = i32::try_from(raw)
        .ok()
        .filter(|&fd| fd >= 0)
        // SAFETY: the driver gave this descriptor in the handle; it stays open until the
        // handle is put back (below), and it is only duplicated here.
        .map(|fd| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned());
    // The handle goes back to the driver whatever happened (every get, one put).
    let put = driver
        .ipc_put(context, handle)
        .transpose()
        .map_err(driver_error);
    let fd: OwnedFd = match duplicated {
        Some(Ok(fd)) => fd,
        Some(Err(e)) => {
            return Err(Error::Driver {
                backend: BackendKind::Ze,
                call: "",
                code: i64::from(e.raw_os_error().unwrap_or(0)),
                message: format!("cannot duplicate the IPC handle's descriptor {raw}: {e}"),
            });
        }
        None => {
            return Err(Error::Driver {
                backend: BackendKind::Ze,
                call: "",
                code: 0,
                message: format!(
                    "zeMemGetIpcHandle gave {raw} where a file descriptor was expected"
                ),
            });
        }
    };
    put?;
    handle.data[FD_BYTES].fill(0);
    let mut payload = Vec::with_capacity(PAYLOAD_LEN);
    payload.extend_from_slice(MAGIC);
    payload.extend_from_slice(&[VERSION, 0, 0, 0]);
    payload.extend_from_slice(&handle.data);
    payload.extend_from_slice(&u64::from(std::process::id()).to_le_bytes());
    payload.extend_from_slice(&id.to_le_bytes());
    payload.extend_from_slice(&(buffer.len() as u64).to_le_bytes());
    Ok(Exported {
        size: buffer.len() as u64,
        payload,
        fd: Some(fd),
    })
}

/// Maps memory another process (or this one) exported; the descriptor is closed whatever
/// happens.
pub(crate) fn import(device: &Arc<DeviceShared>, exported: Exported) -> Result<ZeBuffer> {
    let Exported { size, payload, fd } = exported;
    let Some(fd) = fd else {
        return Err(bad("a Level Zero handle travels with its file descriptor"));
    };
    let p = payload.as_slice();
    if p.len() != PAYLOAD_LEN || &p[..4] != MAGIC || p[4] != VERSION || p[5..8] != [0, 0, 0] {
        return Err(bad("the payload is not a Level Zero allocation's"));
    }
    let mut handle = sys::IpcMemHandle {
        data: [0; sys::ZE_MAX_IPC_HANDLE_SIZE],
    };
    handle.data.copy_from_slice(&p[8..72]);
    if handle.data[FD_BYTES] != [0; 8] {
        return Err(bad("the handle's descriptor bytes are not cleared"));
    }
    let key = (u64_at(p, 72), u64_at(p, 80));
    let len = u64_at(p, 88);
    let bytes = usize::try_from(size).map_err(|_| bad("size"))?;
    if bytes == 0 || size > len {
        return Err(bad(format!(
            "the handle says {size} bytes of a {len}-byte allocation"
        )));
    }
    let mut mappings = device
        .mappings
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    mappings.retain(|m| m.strong_count() > 0);
    if let Some(mapping) = mappings
        .iter()
        .filter_map(Weak::upgrade)
        .find(|m| m.key == key)
    {
        drop(fd); // already mapped: this descriptor is not needed
        return Ok(ZeBuffer::imported(device, mapping, bytes));
    }
    let number = u64::try_from(fd.as_raw_fd()).map_err(|_| bad("a negative descriptor"))?;
    handle.data[FD_BYTES].copy_from_slice(&number.to_le_bytes());
    let driver = device.driver();
    let context = device.context();
    // SAFETY: the handle holds `fd`, open in this process until after the call (dropped
    // below).
    let opened = unsafe { driver.ipc_open(context, device.handle, handle) };
    drop(fd); // the driver has what it needs (or refused it): closed either way
    let ptr = opened.map_err(|f| {
        let out_of_memory = [
            sys::ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
            sys::ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY,
        ];
        if out_of_memory.iter().any(|&c| i64::from(c) == f.code) {
            driver_error(f)
        } else {
            bad(format!("the driver refused it: {}", f.message()))
        }
    })?;
    // The mapping is owned from here: every failure below closes it (its drop).
    let mapping = Arc::new(Mapping {
        device: device.clone(),
        ptr,
        key,
    });
    // A driver that cannot say (zeMemGetAddressRange failing) is taken at its word.
    if let Ok((base, mapped)) = driver.address_range(context, ptr) {
        if base != ptr as u64 || (mapped as u64) < size {
            return Err(bad(format!(
                "the driver mapped {mapped} bytes at {base:#x} for a {size}-byte allocation"
            )));
        }
    }
    mappings.push(Arc::downgrade(&mapping));
    Ok(ZeBuffer::imported(device, mapping, bytes))
}

/// Device memory shared with other processes through Level Zero IPC (see the top of this file).
impl hal::Ipc for ZeDevice {
    /// `ze_device_properties_t::uuid`.
    fn uuid(&self) -> [u8; 16] {
        self.shared.uuid
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<ZeBuffer> {
        ZeBuffer::new(&self.shared, size, kind, true)
    }

    fn export(&self, buffer: &ZeBuffer) -> Result<hal::Exported> {
        export(buffer)
    }

    fn import(&self, exported: hal::Exported) -> Result<ZeBuffer> {
        import(&self.shared, exported)
    }
}
