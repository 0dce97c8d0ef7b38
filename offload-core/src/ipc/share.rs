//! Sharing memory between processes from the handles' side (I1, I3): [`Buffer::export`]
//! describes an allocation as an [`IpcHandle`], [`Device::import`] maps one, and either
//! gives the allocation its IPC state, [`Sharing`]: the one piece of IPC a
//! [`BufferEntry`] owns (set once, at its first export or at its import), which unmaps
//! exported memory from every peer before it is freed (I3), counts an imported mapping's
//! close and knows whether its sender revoked it. These calls live with IPC, not with the
//! handles, so the handles need not know IPC: they know [`SharedMemory`], which
//! [`Sharing`] implements.

use std::fmt;

use crate::sync::{Arc, AtomicBool, Ordering};

use crate::erased::DynDevice;
use crate::error::{Error, Result};
use crate::hal::MemKind;
use crate::handles::{Buffer, BufferEntry, Device, Origin, SharedMemory};
use crate::ipc::{IpcHandle, stats};
use crate::runtime::generation::{Generation, ResourceKey};

/// An allocation's IPC state: what it is to other processes.
pub(crate) enum Sharing {
    /// Memory of this process that was exported: before an owner frees it, every process
    /// that mapped it through an endpoint is told to unmap it, and the free waits (bounded)
    /// until each did or is gone; memory a live peer had not unmapped by then is
    /// quarantined, not freed (I3). What peers hold of it is the generation's IPC state
    /// (the sender-side cache and the endpoints' one-shots, I2), found by its allocation id.
    Exported,
    /// Another process's memory, mapped here (`Device::import`, or an endpoint's
    /// delivery): its close is counted, and once its sender unmapped it (`revoked`) the
    /// calls on it answer `Error::InvalidIpcHandle`.
    Imported { revoked: AtomicBool },
}

impl SharedMemory for Sharing {
    fn before_free(
        &self,
        generation: &Arc<Generation>,
        entry: &Arc<BufferEntry>,
        key: ResourceKey,
        object: &dyn fmt::Display,
    ) -> Option<Error> {
        match self {
            Sharing::Exported => {
                super::state(generation)?.unmap_before_free(generation, entry, key, object)
            }
            Sharing::Imported { .. } => None,
        }
    }

    fn freed(&self) {
        if let Sharing::Imported { .. } = self {
            stats::closed();
        }
    }

    fn revoke(&self) {
        if let Sharing::Imported { revoked } = self {
            revoked.store(true, Ordering::SeqCst);
        }
    }

    fn revoked(&self) -> bool {
        match self {
            Sharing::Imported { revoked } => revoked.load(Ordering::SeqCst),
            Sharing::Exported => false,
        }
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
            self.entry().share(|| Box::new(Sharing::Exported));
            Ok(uuid)
        })?;
        stats::EXPORTS.fetch_add(1, Ordering::Relaxed);
        IpcHandle::new(self.entry().backend, uuid, self.entry().id, exported)?
            .range(self.offset as u64, self.len as u64)
    }
}

/// Maps `handle`'s memory on `device` as an allocation listed in the generation: the
/// checks of I1 (backend, device, the handle's own consistency), then the backend's.
pub(crate) fn import_entry(
    device: &Device,
    handle: IpcHandle,
) -> Result<(ResourceKey, Arc<BufferEntry>, usize, usize)> {
    const CALL: &str = "Device::import";
    let bad = |reason: String| Error::InvalidIpcHandle {
        backend: Some(device.backend()),
        call: CALL,
        reason,
    };
    if handle.backend() != device.backend() {
        return Err(bad(format!(
            "the handle is {} memory; {device} is {}",
            handle.backend(),
            device.backend()
        )));
    }
    let generation = device.generation();
    generation.with_live(|live| {
        let raw_device: &Arc<dyn DynDevice> = live.device(device.key())?;
        let uuid = raw_device.uuid()?;
        if handle.device_uuid() != uuid {
            return Err(bad(format!(
                "the handle names device {}, not {device} ({})",
                hex(&handle.device_uuid()),
                hex(&uuid)
            )));
        }
        let (size, offset, len) = (handle.size(), handle.offset(), handle.len());
        let size = usize::try_from(size).map_err(|_| bad(format!("size {size}")))?;
        let (offset, len) = (offset as usize, len as usize);
        let raw = raw_device
            .clone()
            .import(handle.into_exported())
            .map_err(|e| e.in_call(CALL))?;
        stats::opened();
        let (key, entry) =
            BufferEntry::register(live, device, size, MemKind::Device, Origin::Imported, raw)?;
        entry.share(|| {
            Box::new(Sharing::Imported {
                revoked: AtomicBool::new(false),
            })
        });
        Ok((key, entry, offset, len))
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
