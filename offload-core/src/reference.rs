//! The reference backend: safe, simple, in-memory.
//!
//! Like wgpu-hal's `noop` backend it really performs its commands (on `Vec<u8>`s), so it is
//! the oracle that tests and the conformance model compare real backends with, and the
//! backend the core's own documentation runs on. It is never registered by default.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::backend::{Backend, BackendKind, DeviceInfo, MemKind};
use crate::config::Config;
use crate::dynamic::{PlatformEntry, Platforms};
use crate::error::{Error, Result};

/// Memory each reference device claims to have: 1 GiB.
pub const DEVICE_MEMORY: u64 = 1 << 30;

/// The reference platform: `config.host_devices` devices of [`DEVICE_MEMORY`] bytes.
///
/// ```
/// use offload_core::{Backend, Config, MemKind, reference::Reference};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let mut buf = platform.alloc(&dev, 4, MemKind::Device)?;
/// platform.write(&mut buf, 0, &[1, 2, 3, 4])?;
/// platform.free(buf)?;
/// assert_eq!(platform.live_allocations(), 0);
/// platform.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Reference {
    devices: usize,
    live: Arc<AtomicUsize>,
}

/// A reference device.
#[derive(Debug)]
pub struct RefDevice {
    ordinal: usize,
}

/// A reference allocation.
#[derive(Debug)]
pub struct RefBuffer {
    bytes: Vec<u8>,
}

impl Reference {
    /// Allocations not yet freed.
    ///
    /// ```
    /// use offload_core::{Backend, Config, reference::Reference};
    /// assert_eq!(Reference::open(&Config::default())?.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

fn range(
    call: &'static str,
    buf: &[u8],
    offset: usize,
    len: usize,
) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= buf.len() => Ok(offset..end),
        _ => Err(Error::invalid(
            call,
            "reference backend: range outside buffer",
        )),
    }
}

impl Backend for Reference {
    type Device = RefDevice;
    type Buffer = RefBuffer;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(config: &Config) -> Result<Self> {
        Ok(Reference {
            devices: config.host_devices,
            live: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn name(&self) -> String {
        "reference".into()
    }

    fn devices(&self) -> Vec<RefDevice> {
        (0..self.devices)
            .map(|ordinal| RefDevice { ordinal })
            .collect()
    }

    fn device_info(&self, device: &RefDevice) -> Result<DeviceInfo> {
        Ok(DeviceInfo {
            name: format!("reference device {}", device.ordinal),
            vendor: "offload".into(),
            backend: BackendKind::Reference,
            memory: DEVICE_MEMORY,
            compute_units: 1,
        })
    }

    fn alloc(&self, _device: &RefDevice, size: usize, _kind: MemKind) -> Result<RefBuffer> {
        if size as u64 > DEVICE_MEMORY {
            return Err(Error::OutOfMemory {
                backend: BackendKind::Reference,
                call: "Device::alloc",
                requested: size as u64,
                reason: format!("the device has {DEVICE_MEMORY} bytes"),
            });
        }
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size)
            .map_err(|e| Error::OutOfMemory {
                backend: BackendKind::Reference,
                call: "Device::alloc",
                requested: size as u64,
                reason: e.to_string(),
            })?;
        bytes.resize(size, 0);
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(RefBuffer { bytes })
    }

    fn free(&self, _buffer: RefBuffer) -> Result<()> {
        self.live.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn read(&self, buffer: &RefBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        let r = range("Buffer::read", &buffer.bytes, offset, dst.len())?;
        dst.copy_from_slice(&buffer.bytes[r]);
        Ok(())
    }

    fn write(&self, buffer: &mut RefBuffer, offset: usize, src: &[u8]) -> Result<()> {
        let r = range("Buffer::write", &buffer.bytes, offset, src.len())?;
        buffer.bytes[r].copy_from_slice(src);
        Ok(())
    }

    fn fill(&self, buffer: &mut RefBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        let r = range("Buffer::fill", &buffer.bytes, offset, len)?;
        buffer.bytes[r].fill(value);
        Ok(())
    }

    fn copy(
        &self,
        src: &RefBuffer,
        so: usize,
        dst: &mut RefBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        let s = range("Buffer::copy_from", &src.bytes, so, len)?;
        let t = range("Buffer::copy_from", &dst.bytes, d, len)?;
        dst.bytes[t].copy_from_slice(&src.bytes[s]);
        Ok(())
    }

    fn copy_within(&self, buffer: &mut RefBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        let s = range("Buffer::copy_from", &buffer.bytes, so, len)?;
        range("Buffer::copy_from", &buffer.bytes, d, len)?;
        buffer.bytes.copy_within(s, d);
        Ok(())
    }

    fn deinit(&self) -> Result<()> {
        match self.live_allocations() {
            0 => Ok(()),
            n => Err(Error::Driver {
                backend: BackendKind::Reference,
                call: "Offload::shutdown",
                code: n as i64,
                message: format!("{n} allocations were never freed"),
            }),
        }
    }
}

/// Default platforms of [`Offload`]: the reference backend only.
#[derive(Debug)]
pub struct Only;

impl Platforms for Only {
    fn platforms() -> Vec<PlatformEntry> {
        vec![PlatformEntry::of::<Reference>()]
    }
}

/// A runtime type whose default platform is the reference backend (for tests and docs).
///
/// ```
/// let rt = offload_core::reference::Offload::init()?;
/// assert_eq!(rt.devices()?.len(), 1);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub type Offload<S = crate::Ready> = crate::Offload<S, Only>;
