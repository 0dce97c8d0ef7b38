//! The IPC capability: a device whose memory another process can map (contract clause I1).
//! A backend implements [`Ipc`] for its device and registers with
//! [`crate::PlatformEntry::with_ipc`]; the core builds handles, caches and the wire
//! protocol on top, so a backend only exports and imports its own memory.

use std::os::fd::OwnedFd;

use crate::error::Result;
use crate::hal::{Device, MemKind};

/// What another process needs to map an allocation: the backend's own description of it
/// (`payload`, validated by the importing backend: it may be forged) and, where the backend
/// shares memory through one, a file descriptor.
#[derive(Debug)]
pub struct Exported {
    /// Size of the allocation in bytes.
    pub size: u64,
    /// Backend-specific bytes (at most [`Exported::MAX_PAYLOAD`]); the importing backend
    /// checks them.
    pub payload: Vec<u8>,
    /// The memory's file descriptor (memfd, `OPAQUE_FD`), when the backend uses one. The
    /// importer owns it and must close it whatever happens (Vulkan takes ownership only on
    /// success, so the backend closes it on failure).
    pub fd: Option<OwnedFd>,
}

impl Exported {
    /// The most payload bytes a handle carries.
    pub const MAX_PAYLOAD: usize = 128;
}

/// A device that can export its memory to another process and import another process's.
///
/// Memory another process may map is asked for at allocation ([`Ipc::alloc_exportable`]):
/// Vulkan must declare it then, and on the host an exportable allocation is a memfd
/// (several system calls) where an ordinary one is a heap block.
///
/// An imported buffer is an ordinary [`Device::Buffer`]: the core reads, writes and launches
/// on it as on any other, and its `free` unmaps it (closes the driver's mapping).
///
/// ```
/// use offload_core::hal::{Device, Ipc};
/// // Export on one device, import on the same device (another process does the same).
/// fn round_trip<D: Ipc>(dev: &D) -> offload_core::Result<()> {
///     let mut mine = dev.alloc_exportable(64, offload_core::MemKind::Device)?;
///     dev.write(&mut mine, 0, &[7; 64])?;
///     let theirs = dev.import(dev.export(&mine)?)?;
///     let mut out = [0u8; 64];
///     dev.read(&theirs, 0, &mut out)?;
///     assert_eq!(out, [7; 64]);
///     dev.free(theirs)?;
///     dev.free(mine)
/// }
/// # let _ = round_trip::<offload_core::hal::Never>;
/// ```
pub trait Ipc: Device {
    /// Sixteen bytes that name this device alike in every process of the machine (Vulkan:
    /// `deviceUUID`; host: the boot id with the device's ordinal).
    fn uuid(&self) -> [u8; 16];

    /// Allocates `size` (> 0) bytes that [`Ipc::export`] can share.
    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<Self::Buffer>;

    /// Describes `buffer` for another process. A buffer not made by
    /// [`Ipc::alloc_exportable`] (or an imported one) is `Error::InvalidArgument`.
    fn export(&self, buffer: &Self::Buffer) -> Result<Exported>;

    /// Maps memory another process exported. A payload this backend did not write, or an
    /// fd that is not such memory, is `Error::InvalidIpcHandle`; the fd is closed whatever
    /// happens.
    fn import(&self, exported: Exported) -> Result<Self::Buffer>;
}
