//! CUDA memory shared between processes: `cuIpcGetMemHandle` on the exporting side,
//! `cuIpcOpenMemHandle` (lazy peer access) and `cuIpcCloseMemHandle` on the importing side.
//!
//! A handle's payload is `OFCU`, a version byte, three zero bytes, the driver's 64-byte
//! `CUipcMemHandle`, then the exporter's pid, the allocation's device address in the
//! exporter, its size and its `CU_POINTER_ATTRIBUTE_BUFFER_ID` (u64s, little-endian): 104
//! bytes. No file descriptor travels.
//!
//! The driver maps an allocation once per context: opening a handle that is open already
//! is `CUDA_ERROR_ALREADY_MAPPED`. So the mappings of a context are shared ([`Mapping`],
//! one per handle, closed with its last buffer), and when the driver still answers
//! `ALREADY_MAPPED` for a handle offload has no mapping of, a mapping of an earlier
//! allocation at an overlapping address of the same exporter — memory the exporter freed,
//! whose address it reused — is stale: it is closed (its buffers answer driver errors from
//! then on, never touch the new memory) and the open is retried once (the defence UCX and
//! Open MPI use).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::hal::Exported;
use offload_core::{BackendKind, Error, Result};

use crate::context::{Context, driver_error};
use crate::ffi::sys::{self, CuDevicePtr};
use crate::memory::{CudaBuffer, Origin};

const MAGIC: &[u8; 4] = b"OFCU";
const VERSION: u8 = 1;
const PAYLOAD_LEN: usize = 104;

/// One open IPC mapping in this process.
#[derive(Debug)]
pub(crate) struct Mapping {
    context: Arc<Context>,
    pub(crate) ptr: CuDevicePtr,
    handle: [u8; 64],
    /// The exporter's pid, the allocation's address range there and its buffer id.
    exporter: (u64, u64, u64, u64),
    /// Closed early (stale); its buffers' accesses fail in the driver.
    closed: AtomicBool,
}

impl Mapping {
    fn close(&self, call: &'static str) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.context.bind(call)?;
        // SAFETY: `ptr` came from cuIpcOpenMemHandle in this (bound) context and is closed
        // once (`closed`); every buffer over it waited for its queued work before it went
        // (or this is a stale mapping, whose memory the exporter freed already).
        match unsafe { self.context.driver.ipc_close(self.ptr) } {
            Some(closed) => closed.map_err(driver_error(call)),
            None => Ok(()),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let _ = self.close("Buffer::free");
    }
}

/// The IPC mappings of one context.
#[derive(Debug, Default)]
pub(crate) struct Registry(Mutex<Vec<Weak<Mapping>>>);

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Vec<Weak<Mapping>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::InvalidIpcHandle {
        backend: BackendKind::Cuda,
        call: "Device::import",
        reason: reason.into(),
    }
}

fn unsupported(call: &'static str) -> Error {
    Error::Unsupported {
        backend: BackendKind::Cuda,
        call,
        reason: "the driver has no CUDA IPC (cuIpcGetMemHandle/cuIpcOpenMemHandle)".into(),
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// What another process needs to open `buffer`.
pub(crate) fn export(buffer: &CudaBuffer) -> Result<Exported> {
    const CALL: &str = "Buffer::export";
    if !buffer.exportable || !matches!(buffer.alloc.origin, Origin::Device) {
        return Err(Error::InvalidArgument {
            call: CALL,
            reason: "cuda buffer is not exportable (allocate it with alloc_exportable)".into(),
        });
    }
    let context = buffer.context();
    context.bind(CALL)?;
    // SAFETY: `ptr` is the base of this live cuMemAlloc allocation of the bound context.
    let handle = unsafe { context.driver.ipc_get(buffer.ptr()) }
        .ok_or_else(|| unsupported(CALL))?
        .map_err(driver_error(CALL))?;
    let id = context
        .driver
        .buffer_id(buffer.ptr())
        .map_err(driver_error(CALL))?;
    let mut payload = Vec::with_capacity(PAYLOAD_LEN);
    payload.extend_from_slice(MAGIC);
    payload.extend_from_slice(&[VERSION, 0, 0, 0]);
    payload.extend_from_slice(&handle);
    payload.extend_from_slice(&u64::from(std::process::id()).to_le_bytes());
    payload.extend_from_slice(&buffer.ptr().to_le_bytes());
    payload.extend_from_slice(&(buffer.len() as u64).to_le_bytes());
    payload.extend_from_slice(&id.to_le_bytes());
    Ok(Exported {
        size: buffer.len() as u64,
        payload,
        fd: None,
    })
}

/// Opens memory another process exported, sharing this context's mapping of it.
pub(crate) fn import(context: &Arc<Context>, exported: Exported) -> Result<CudaBuffer> {
    const CALL: &str = "Device::import";
    if exported.fd.is_some() {
        return Err(bad("a CUDA handle carries no file descriptor"));
    }
    let p = exported.payload.as_slice();
    if p.len() != PAYLOAD_LEN || &p[..4] != MAGIC || p[4] != VERSION {
        return Err(bad("the payload is not a CUDA allocation's"));
    }
    let mut handle = [0u8; 64];
    handle.copy_from_slice(&p[8..72]);
    let exporter = (u64_at(p, 72), u64_at(p, 80), u64_at(p, 88), u64_at(p, 96));
    let size = usize::try_from(exported.size).map_err(|_| bad("size"))?;
    if size == 0 || exported.size > exporter.2 {
        return Err(bad(format!(
            "the handle says {} bytes of a {}-byte allocation",
            exported.size, exporter.2
        )));
    }
    if exporter.0 == u64::from(std::process::id()) {
        // The driver refuses to open a handle in the process that made it: share the
        // allocation itself (it lives until both buffers are gone).
        return context
            .exported_at(exporter.1, exported.size)
            .filter(|a| a.ptr == exporter.1)
            .map(|alloc| CudaBuffer::alias(alloc, size))
            .ok_or_else(|| bad("no live exportable allocation of this process has that address"));
    }
    let registry = &context.mappings;
    let mut mappings = registry.lock();
    mappings.retain(|m| m.strong_count() > 0);
    let open: Vec<Arc<Mapping>> = mappings.iter().filter_map(Weak::upgrade).collect();
    // The same allocation of the same exporter: its mapping (one per context).
    let same = |m: &&Arc<Mapping>| {
        (m.handle == handle || (m.exporter.0, m.exporter.3) == (exporter.0, exporter.3))
            && !m.closed.load(Ordering::SeqCst)
    };
    if let Some(m) = open.iter().find(same) {
        return Ok(CudaBuffer::imported(context, m.clone(), size));
    }
    context.bind(CALL)?;
    let driver = &context.driver;
    let mut opened = driver.ipc_open(handle).ok_or_else(|| unsupported(CALL))?;
    if matches!(&opened, Err(f) if f.code == i64::from(sys::CUDA_ERROR_ALREADY_MAPPED)) {
        let (pid, base, len, id) = exporter;
        for stale in open.iter().filter(|m| {
            let (p, b, l, i) = m.exporter;
            p == pid && i != id && b < base + len && base < b + l
        }) {
            stale.close(CALL)?;
        }
        opened = driver.ipc_open(handle).ok_or_else(|| unsupported(CALL))?;
    }
    let ptr = opened.map_err(|f| {
        if f.code == i64::from(sys::CUDA_ERROR_OUT_OF_MEMORY) {
            f.into_error(BackendKind::Cuda, CALL)
        } else {
            bad(format!("the driver refused it: {}", f.message()))
        }
    })?;
    let mapping = Arc::new(Mapping {
        context: context.clone(),
        ptr,
        handle,
        exporter,
        closed: AtomicBool::new(false),
    });
    mappings.push(Arc::downgrade(&mapping));
    Ok(CudaBuffer::imported(context, mapping, size))
}
