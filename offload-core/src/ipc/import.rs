//! Another process's memory mapped here (I1): [`import_entry`] maps an [`IpcHandle`] on a
//! device as an allocation listed in the generation (for `Device::import` and the
//! endpoints' deliveries alike), and [`Imported`] is that allocation's IPC state, the one
//! piece of IPC its [`BufferEntry`] owns: it counts the mapping's close and knows whether
//! its sender revoked it. Below the endpoints, which deliver through it.

use std::fmt;

use crate::sync::{Arc, AtomicBool, Ordering};

use crate::erased::DynDevice;
use crate::error::{Error, Result};
use crate::hal::MemKind;
use crate::handles::{BufferEntry, Device, Origin, SharedMemory};
use crate::ipc::{IpcHandle, stats};
use crate::runtime::generation::{Generation, ResourceKey};

/// Another process's memory, mapped here (`Device::import`, or an endpoint's delivery):
/// its close is counted, and once its sender unmapped it (`revoked`) the calls on it
/// answer `Error::InvalidIpcHandle`.
pub(crate) struct Imported {
    revoked: AtomicBool,
}

impl SharedMemory for Imported {
    fn before_free(
        &self,
        _generation: &Arc<Generation>,
        _entry: &Arc<BufferEntry>,
        _key: ResourceKey,
        _object: &dyn fmt::Display,
    ) -> Option<Error> {
        None
    }

    fn freed(&self) {
        stats::closed();
    }

    fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
    }

    fn revoked(&self) -> bool {
        self.revoked.load(Ordering::SeqCst)
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
            Box::new(Imported {
                revoked: AtomicBool::new(false),
            })
        });
        Ok((key, entry, offset, len))
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
