//! Sharing memory between processes from the handles' side (I1, I3): [`Buffer::export`]
//! describes an allocation as an [`IpcHandle`] and [`Device::import`] maps one. An
//! exported allocation's IPC state is [`Exported`], the one piece of IPC its
//! [`BufferEntry`] owns (set once, at its first export), which unmaps the memory from every
//! peer before it is freed (I3, through the endpoints' shared state); an imported one's is
//! `import.rs`'s. These calls live with IPC, not with the handles, so the handles need not
//! know IPC: they know [`SharedMemory`], which both implement.

use std::fmt;

use crate::sync::{Arc, Ordering};

use crate::error::{Error, Result};
use crate::handles::{Buffer, BufferEntry, Device, Origin, SharedMemory};
use crate::ipc::import::import_entry;
use crate::ipc::{IpcHandle, stats};
use crate::runtime::generation::{Generation, ResourceKey};

/// Memory of this process that was exported: before an owner frees it, every process that
/// mapped it through an endpoint is told to unmap it, and the free waits (bounded) until
/// each did or is gone; memory a live peer had not unmapped by then is quarantined, not
/// freed (I3). What peers hold of it is the generation's IPC state (the sender-side cache
/// and the endpoints' one-shots, I2), found by its allocation id.
pub(crate) struct Exported;

impl SharedMemory for Exported {
    fn before_free(
        &self,
        generation: &Arc<Generation>,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        object: &dyn fmt::Display,
    ) -> Option<Error> {
        super::state(generation)?.unmap_before_free(generation, entry, key, object)
    }

    fn freed(&self) {}

    fn revoke(&self) {}

    fn revoked(&self) -> bool {
        false
    }
}

impl Device {
    /// Maps memory another process exported ([`Buffer::export`]) as a buffer of this device
    /// covering the handle's range; dropping or freeing it unmaps. A handle of another
    /// backend or device, or a malformed or forged one, is `Error::InvalidIpcHandle`, and the
    /// handle's descriptor is closed whatever happens (I1).
    ///
    /// ```
    /// use offload::{Error, MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc_exportable(16, MemKind::Device)?;
    /// let view = dev.import(buf.export()?.range(8, 8)?)?;
    /// view.write(0, &[1; 8])?;
    /// let mut out = [0u8; 16];
    /// buf.read(0, &mut out)?;
    /// assert_eq!(out[8..], [1; 8]);
    /// let forged = offload::ipc::IpcHandle::from_parts(b"OFIH....", None);
    /// assert!(matches!(forged, Err(Error::InvalidIpcHandle { .. })));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn import(&self, handle: IpcHandle) -> Result<Buffer> {
        Buffer::imported(self, handle).map_err(|e| e.on("Device::import", self))
    }
}

impl Buffer {
    /// Maps `handle` on `device`: its range of the memory, as a buffer that owns the
    /// mapping (dropping it unmaps).
    fn imported(device: &Device, handle: IpcHandle) -> Result<Buffer> {
        let (key, entry, offset, len) = import_entry(device, handle)?;
        let mut buffer = Buffer::owner(device.generation().clone(), key, entry);
        buffer.offset = offset;
        buffer.len = len;
        Ok(buffer)
    }

    /// Describes this buffer's bytes to another process (I1): an [`IpcHandle`] naming the
    /// backend, the device, the allocation (by id, never by address), its size and this
    /// buffer's range of it, with the memory's descriptor where the backend uses one. Only
    /// memory from `Device::alloc_exportable` can be exported (`InvalidArgument` otherwise);
    /// a backend without IPC answers `Error::Unsupported`.
    ///
    /// ```
    /// use offload::{MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc_exportable(64, MemKind::Device)?;
    /// buf.write(0, &[9; 64])?;
    /// let handle = buf.export()?; // bytes (+ fd) to send to another process
    /// let mapped = dev.import(handle)?; // what that process does (here: this one)
    /// let mut out = [0u8; 64];
    /// mapped.read(0, &mut out)?;
    /// assert_eq!(out, [9; 64]);
    /// assert!(dev.alloc(8, MemKind::Device)?.export().is_err()); // not exportable
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn export(&self) -> Result<IpcHandle> {
        const CALL: &str = "Buffer::export";
        let exported = self.with_raw(CALL, |raw| {
            if self.entry().origin != Origin::Exportable {
                return Err(Error::invalid(
                    CALL,
                    format!(
                        "{self} was not allocated exportable, and only exportable memory can be \
                         mapped by other processes: allocate it as exportable memory"
                    ),
                ));
            }
            raw.export()
        })?;
        // The generation's lock, once: the device's UUID, and the allocation's IPC state
        // set under it (not under the buffer's lock above: the generation's comes first).
        let uuid = self.generation.with_live(|live| {
            let uuid = live.device(self.entry().device)?.uuid()?;
            self.entry().share(|| Box::new(Exported));
            Ok(uuid)
        })?;
        stats::EXPORTS.fetch_add(1, Ordering::Relaxed);
        IpcHandle::new(self.entry().backend, uuid, self.entry().id, exported)?
            .range(self.offset as u64, self.len as u64)
    }
}
