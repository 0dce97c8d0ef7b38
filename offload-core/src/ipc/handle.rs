//! [`IpcHandle`]: what names an allocation to another process (I1), and its byte format.
//!
//! A handle is bytes plus, where the backend shares memory through one, a file descriptor.
//! The bytes are versioned and length-checked; decoding never trusts them (a handle may come
//! from anyone) and never maps anything: mapping is `Device::import`'s job, after these
//! checks and the backend's own.
//!
//! Layout, version 1, little-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `OFIH` |
//! | 4 | 2 | version (1) |
//! | 6 | 1 | backend (see [`backend_code`]) |
//! | 7 | 1 | flags: bit 0 set = a file descriptor travels with the bytes; others 0 |
//! | 8 | 16 | device UUID |
//! | 24 | 8 | process token of the exporting process |
//! | 32 | 8 | allocation id (unique in the exporting process, never reused) |
//! | 40 | 8 | allocation size |
//! | 48 | 8 | offset of the range this handle names |
//! | 56 | 8 | length of that range |
//! | 64 | 2 | payload length (≤ 128: a CUDA, HIP or Level Zero IPC handle is 64 bytes by itself) |
//! | 66 | 2 | reserved (0) |
//! | 68 | n | the backend's payload |

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::{Error, Result};
use crate::hal::{BackendKind, Exported};

const MAGIC: [u8; 4] = *b"OFIH";
const VERSION: u16 = 1;
const HEADER: usize = 68;
const FLAG_FD: u8 = 1;

/// The longest handle in bytes.
pub const MAX_HANDLE_BYTES: usize = HEADER + Exported::MAX_PAYLOAD;

/// The byte that names a backend in a handle.
///
/// ```
/// use offload::{BackendKind, ipc};
/// assert_eq!(ipc::backend_code(BackendKind::Host), 1);
/// ```
pub fn backend_code(kind: BackendKind) -> u8 {
    match kind {
        BackendKind::Host => 1,
        BackendKind::Vulkan => 2,
        BackendKind::Cuda => 3,
        BackendKind::Hip => 4,
        BackendKind::Ze => 5,
        BackendKind::Reference => 6,
    }
}

fn backend_of(code: u8) -> Option<BackendKind> {
    BackendKind::ALL
        .into_iter()
        .chain([BackendKind::Reference])
        .find(|k| backend_code(*k) == code)
}

/// An exported allocation, or a range of one: what `Device::import` needs in another
/// process. Send [`IpcHandle::to_bytes`] and the descriptor of [`IpcHandle::fd`] (with
/// `SCM_RIGHTS`), and rebuild it there with [`IpcHandle::from_parts`]; or let an
/// `IpcEndpoint` do all of it. Dropping a handle closes its descriptor.
///
/// ```
/// use offload::{MemKind, Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let buf = dev.alloc_exportable(64, MemKind::Device)?;
/// let handle = buf.export()?;
/// assert_eq!((handle.offset(), handle.len()), (0, 64));
/// let allocation = handle.allocation();
/// // The host backend shares its memory as a memfd: the bytes and that descriptor.
/// let (bytes, fd) = handle.into_parts();
/// let again = offload::ipc::IpcHandle::from_parts(&bytes, fd)?;
/// assert_eq!(again.allocation(), allocation);
/// # Ok::<(), offload::Error>(())
/// ```
pub struct IpcHandle {
    backend: BackendKind,
    uuid: [u8; 16],
    token: u64,
    allocation: u64,
    size: u64,
    offset: u64,
    len: u64,
    payload: Vec<u8>,
    fd: Option<OwnedFd>,
}

fn invalid(call: &'static str, backend: Option<BackendKind>, reason: impl Into<String>) -> Error {
    Error::InvalidIpcHandle {
        backend,
        call,
        reason: reason.into(),
    }
}

impl IpcHandle {
    /// A handle of a whole allocation (the core makes these in `Buffer::export`).
    pub(crate) fn new(
        backend: BackendKind,
        uuid: [u8; 16],
        allocation: u64,
        exported: Exported,
    ) -> Result<IpcHandle> {
        if exported.payload.len() > Exported::MAX_PAYLOAD {
            return Err(Error::Driver {
                backend,
                call: "Buffer::export",
                code: exported.payload.len() as i64,
                message: format!(
                    "the backend's export payload has {} bytes, more than the {} a handle \
                     carries",
                    exported.payload.len(),
                    Exported::MAX_PAYLOAD
                ),
            });
        }
        tracing::debug!(
            target: "offload::ipc",
            backend = %backend,
            allocation,
            size = exported.size,
            fd = exported.fd.is_some(),
            "exported an allocation"
        );
        Ok(IpcHandle {
            backend,
            uuid,
            token: super::process_token(),
            allocation,
            size: exported.size,
            offset: 0,
            len: exported.size,
            payload: exported.payload,
            fd: exported.fd,
        })
    }

    /// The backend whose memory this is.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert_eq!(buf.export()?.backend(), offload::BackendKind::Host);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// The exporting device's UUID.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (dev.alloc_exportable(8, MemKind::Device)?, dev.alloc_exportable(8, MemKind::Device)?);
    /// // Whatever the allocation, its device's.
    /// assert_eq!(a.export()?.device_uuid(), b.export()?.device_uuid());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn device_uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// The exporting process's token and the allocation's id there: the allocation's
    /// identity (never its address).
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let a = dev.alloc_exportable(8, MemKind::Device)?.export()?;
    /// let b = dev.alloc_exportable(8, MemKind::Device)?.export()?;
    /// assert_ne!(a.allocation(), b.allocation());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn allocation(&self) -> (u64, u64) {
        (self.token, self.allocation)
    }

    /// Size of the whole allocation.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert_eq!(buf.export()?.size(), 8);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where the range this handle names starts.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert_eq!(buf.export()?.range(2, 4)?.offset(), 2);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How long the range this handle names is.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert_eq!(buf.export()?.len(), 8);
    /// # Ok::<(), offload::Error>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // a range is never empty
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The same memory, narrowed to `len` bytes at `offset` of the allocation; a range
    /// outside it is `Error::InvalidArgument`.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert!(buf.export()?.range(4, 8).is_err());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn range(mut self, offset: u64, len: u64) -> Result<IpcHandle> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size && len > 0 => {
                self.offset = offset;
                self.len = len;
                Ok(self)
            }
            _ => Err(Error::invalid(
                "IpcHandle::range",
                format!(
                    "range {offset}..+{len} is empty or outside the {} bytes of the allocation",
                    self.size
                ),
            )),
        }
    }

    /// The descriptor that travels with the bytes, where the backend uses one.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert!(buf.export()?.fd().is_some()); // the host backend shares a memfd
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|fd| fd.as_fd())
    }

    /// The handle's bytes (the descriptor travels separately).
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// assert_eq!(&buf.export()?.to_bytes()[..4], b"OFIH");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.payload.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(backend_code(self.backend));
        out.push(if self.fd.is_some() { FLAG_FD } else { 0 });
        out.extend_from_slice(&self.uuid);
        for v in [
            self.token,
            self.allocation,
            self.size,
            self.offset,
            self.len,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.payload.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Rebuilds a handle from its bytes and the descriptor that came with them. Anything
    /// malformed — wrong magic or version, unknown backend, a length that does not match,
    /// a range outside the allocation, a descriptor where the bytes say none or none where
    /// they say one — is `Error::InvalidIpcHandle`, and `fd` is closed.
    ///
    /// ```
    /// use offload::{Error, ipc::IpcHandle};
    /// assert!(matches!(IpcHandle::from_parts(b"garbage", None), Err(Error::InvalidIpcHandle { .. })));
    /// ```
    pub fn from_parts(bytes: &[u8], fd: Option<OwnedFd>) -> Result<IpcHandle> {
        const CALL: &str = "IpcHandle::from_parts";
        // Bytes that name no backend are nobody's handle: the error names none.
        let bad = |reason: String| invalid(CALL, None, reason);
        if bytes.len() < HEADER || bytes.len() > MAX_HANDLE_BYTES {
            return Err(bad(format!(
                "{} bytes; a handle has {HEADER} to {MAX_HANDLE_BYTES}",
                bytes.len()
            )));
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        if bytes[..4] != MAGIC {
            return Err(bad("not an offload IPC handle (magic)".into()));
        }
        if u16_at(4) != VERSION {
            return Err(bad(format!(
                "handle version {}; this offload reads version {VERSION}",
                u16_at(4)
            )));
        }
        let backend =
            backend_of(bytes[6]).ok_or_else(|| bad(format!("backend code {}", bytes[6])))?;
        let bad = |reason: String| invalid(CALL, Some(backend), reason);
        let flags = bytes[7];
        if flags & !FLAG_FD != 0 || u16_at(66) != 0 {
            return Err(bad("reserved bits are set".into()));
        }
        if (flags & FLAG_FD != 0) != fd.is_some() {
            return Err(bad(if fd.is_some() {
                "a descriptor came with a handle that takes none".into()
            } else {
                "the handle needs a descriptor and none came with it".into()
            }));
        }
        let payload_len = usize::from(u16_at(64));
        if bytes.len() != HEADER + payload_len {
            return Err(bad(format!(
                "{} bytes for a payload of {payload_len}",
                bytes.len()
            )));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&bytes[8..24]);
        let (size, offset, len) = (u64_at(40), u64_at(48), u64_at(56));
        if size == 0 || len == 0 || offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(bad(format!(
                "range {offset}..+{len} of a {size}-byte allocation"
            )));
        }
        Ok(IpcHandle {
            backend,
            uuid,
            token: u64_at(24),
            allocation: u64_at(32),
            size,
            offset,
            len,
            payload: bytes[HEADER..].to_vec(),
            fd,
        })
    }

    /// The bytes and the descriptor, for sending them yourself.
    ///
    /// ```
    /// # use offload::{MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// # let buf = rt.devices()?[0].alloc_exportable(8, MemKind::Device)?;
    /// let (bytes, fd) = buf.export()?.into_parts();
    /// assert!(fd.is_some() && bytes.len() > 4); // the host backend's memfd
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn into_parts(self) -> (Vec<u8>, Option<OwnedFd>) {
        let bytes = self.to_bytes();
        (bytes, self.fd)
    }

    /// Another handle to the same memory, with a duplicate of the descriptor.
    pub(crate) fn try_clone(&self) -> std::io::Result<IpcHandle> {
        Ok(IpcHandle {
            backend: self.backend,
            uuid: self.uuid,
            token: self.token,
            allocation: self.allocation,
            size: self.size,
            offset: self.offset,
            len: self.len,
            payload: self.payload.clone(),
            fd: self.fd.as_ref().map(|fd| fd.try_clone()).transpose()?,
        })
    }

    /// What the backend needs to map it (consumes the descriptor): called by
    /// `Device::import` (and an endpoint's imports) just before the backend maps it.
    pub(crate) fn into_exported(self) -> Exported {
        tracing::debug!(
            target: "offload::ipc",
            backend = %self.backend,
            allocation = self.allocation,
            size = self.size,
            offset = self.offset,
            len = self.len,
            fd = self.fd.is_some(),
            "importing an allocation"
        );
        Exported {
            size: self.size,
            payload: self.payload,
            fd: self.fd,
        }
    }
}

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcHandle")
            .field("backend", &self.backend)
            .field("allocation", &self.allocation)
            .field("size", &self.size)
            .field("range", &(self.offset..self.offset + self.len))
            .field("fd", &self.fd.is_some())
            .finish()
    }
}
