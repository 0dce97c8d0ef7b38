//! Memory of a stream-based vendor API shared between processes, the device's `hal::Ipc`
//! impl: the vendor's IPC handle of an allocation on the exporting side, its open and close
//! on the importing side.
//!
//! A handle's payload is the vendor's magic ([`StreamApi::IPC_MAGIC`]: `OFCU`, `OFHP`), a
//! version byte, three zero bytes, the vendor's 64-byte handle, then the exporter's pid,
//! the allocation's device address in the exporter, its size and, where the vendor has one
//! ([`StreamApi::IPC_ID`]: CUDA's `CU_POINTER_ATTRIBUTE_BUFFER_ID`), the allocation's id
//! (u64s, little-endian): 96 or 104 bytes. No file descriptor travels.
//!
//! Every open is paired with one close: the mappings of a device are shared (`Mapping`,
//! shared.rs's, one per handle, closed with its last buffer), so a handle imported twice is opened
//! once. A handle of this same process shares the allocation itself (the vendor does not
//! open its own process's handles). Where the vendor answers an open of memory it mapped
//! already ([`StreamApi::ALREADY_MAPPED`]: CUDA maps an allocation once per context) for a
//! handle offload has no mapping of, a mapping of an earlier allocation at an overlapping
//! address of the same exporter — memory the exporter freed, whose address it reused — is
//! stale: it is closed (its buffers answer vendor errors from then on, never touch the new
//! memory) and the open is retried once (the defence UCX and Open MPI use).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, Weak};

use offload_core::hal::{self, Exported};
use offload_core::{Error, MemKind, Result};

use super::memory::{Allocation, Origin, StreamBuffer};
use super::shared::{Exporter, Mapping, StreamDevice};
use super::{StreamApi, driver_error};

const VERSION: u8 = 1;

fn payload_len<A: StreamApi>() -> usize {
    if A::IPC_ID { 104 } else { 96 }
}

fn bad<A: StreamApi>(reason: impl Into<String>) -> Error {
    Error::InvalidIpcHandle {
        backend: Some(A::KIND),
        call: "",
        reason: reason.into(),
    }
}

fn unsupported<A: StreamApi>() -> Error {
    let words = A::WORDS;
    Error::Unsupported {
        backend: A::KIND,
        call: "",
        reason: format!(
            "the {} has no {} IPC ({})",
            words.driver, words.title, words.ipc
        ),
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Device memory shared with other processes through the vendor's IPC (module docs).
impl<A: StreamApi> hal::Ipc for StreamDevice<A> {
    /// [`StreamApi::uuid`].
    fn uuid(&self) -> [u8; 16] {
        let core = &self.core;
        core.api().uuid(core.context(), core.ordinal())
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<StreamBuffer<A>> {
        StreamBuffer::new(&self.core, size, kind, true)
    }

    /// What another process needs to open `buffer`.
    #[allow(unsafe_code)]
    fn export(&self, buffer: &StreamBuffer<A>) -> Result<Exported> {
        if !buffer.exportable || !matches!(buffer.alloc.origin, Origin::Device) {
            return Err(Error::InvalidArgument {
                call: "",
                reason: format!(
                    "{} buffer is not exportable (allocate it with alloc_exportable)",
                    A::WORDS.name
                ),
            });
        }
        let core = buffer.core();
        core.bind()?;
        let ptr = buffer.ptr();
        // SAFETY: `ptr` is the base of this live device allocation of the bound device.
        let handle = unsafe { core.api().ipc_get(ptr) }
            .ok_or_else(|| unsupported::<A>())?
            .map_err(driver_error::<A>)?;
        let id = core.api().ipc_identity(ptr, buffer.len())?;
        let mut payload = Vec::with_capacity(payload_len::<A>());
        payload.extend_from_slice(&A::IPC_MAGIC);
        payload.extend_from_slice(&[VERSION, 0, 0, 0]);
        payload.extend_from_slice(&handle);
        payload.extend_from_slice(&u64::from(std::process::id()).to_le_bytes());
        payload.extend_from_slice(&ptr.to_le_bytes());
        payload.extend_from_slice(&(buffer.len() as u64).to_le_bytes());
        if A::IPC_ID {
            payload.extend_from_slice(&id.unwrap_or(0).to_le_bytes());
        }
        Ok(Exported {
            size: buffer.len() as u64,
            payload,
            fd: None,
        })
    }

    /// Opens memory another process exported, sharing this device's mapping of it.
    fn import(&self, exported: Exported) -> Result<StreamBuffer<A>> {
        let core = &self.core;
        let title = A::WORDS.title;
        if exported.fd.is_some() {
            return Err(bad::<A>(format!(
                "a {title} handle carries no file descriptor"
            )));
        }
        let p = exported.payload.as_slice();
        if p.len() != payload_len::<A>() || p[..4] != A::IPC_MAGIC || p[4] != VERSION {
            return Err(bad::<A>(format!(
                "the payload is not a {title} allocation's"
            )));
        }
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&p[8..72]);
        let id = A::IPC_ID.then(|| u64_at(p, 96));
        let exporter: Exporter = (u64_at(p, 72), u64_at(p, 80), u64_at(p, 88), id);
        let size = usize::try_from(exported.size).map_err(|_| bad::<A>("size"))?;
        if size == 0 || exported.size > exporter.2 {
            return Err(bad::<A>(format!(
                "the handle says {} bytes of a {}-byte allocation",
                exported.size, exporter.2
            )));
        }
        if exporter.0 == u64::from(std::process::id()) {
            // The vendor refuses to open a handle in the process that made it: share the
            // allocation itself (it lives until both buffers are gone).
            let (ptr, len) = (exporter.1, exported.size);
            return core
                .exported_where(|a: &Allocation<A>| a.ptr == ptr && a.len() as u64 >= len)
                .map(|alloc| StreamBuffer::alias(alloc, size))
                .ok_or_else(|| {
                    bad::<A>("no live exportable allocation of this process has that address")
                });
        }
        let mut mappings = core.mappings.lock().unwrap_or_else(PoisonError::into_inner);
        mappings.retain(|m| m.strong_count() > 0);
        let open: Vec<Arc<Mapping<A>>> = mappings.iter().filter_map(Weak::upgrade).collect();
        // The same allocation of the same exporter: its mapping (one per device).
        let same = |m: &&Arc<Mapping<A>>| {
            let same_id = id.is_some() && (m.exporter.0, m.exporter.3) == (exporter.0, exporter.3);
            (m.handle == handle || same_id) && !m.closed.load(Ordering::SeqCst)
        };
        if let Some(m) = open.iter().find(same) {
            return Ok(StreamBuffer::imported(core, m.clone(), size));
        }
        core.bind()?;
        let api = core.api();
        let mut opened = api.ipc_open(handle).ok_or_else(|| unsupported::<A>())?;
        if matches!(&opened, Err(f) if Some(f.code) == A::ALREADY_MAPPED) {
            let (pid, base, len, id) = exporter;
            for stale in open.iter().filter(|m| {
                let (p, b, l, i) = m.exporter;
                p == pid && i != id && b < base + len && base < b + l
            }) {
                stale.close()?;
            }
            opened = api.ipc_open(handle).ok_or_else(|| unsupported::<A>())?;
        }
        let ptr = opened.map_err(|f| {
            if f.code == A::OUT_OF_MEMORY {
                driver_error::<A>(f)
            } else {
                bad::<A>(format!(
                    "the {} refused it: {}",
                    A::WORDS.driver,
                    f.message()
                ))
            }
        })?;
        let mapping = Arc::new(Mapping {
            core: core.clone(),
            ptr,
            handle,
            exporter,
            closed: AtomicBool::new(false),
        });
        mappings.push(Arc::downgrade(&mapping));
        Ok(StreamBuffer::imported(core, mapping, size))
    }
}
