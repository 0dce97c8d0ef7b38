//! # offload-host
//!
//! The host backend: the machine's CPU as offload devices. Its platform exposes
//! `Config::host_devices` devices (default 1, `OFFLOAD_HOST_DEVICES`), each reporting the
//! machine's memory and available cores. Device, host and shared memory are all ordinary
//! zeroed host memory here, aligned to [`ALIGNMENT`] bytes.
//!
//! The backend counts what it does in process-wide counters ([`stats`]) so tests can check
//! that every 0→1 transition opened it once, every 1→0 closed it once, and that no
//! allocation outlives its runtime.
//!
//! ```
//! use offload_core::{Backend, Config, MemKind};
//! use offload_host::HostPlatform;
//! let host = HostPlatform::open(&Config::default())?;
//! let dev = host.devices().remove(0);
//! let mut buf = host.alloc(&dev, 64, MemKind::Device)?;
//! host.write(&mut buf, 0, &[42; 64])?;
//! let mut out = [0u8; 64];
//! host.read(&buf, 0, &mut out)?;
//! assert_eq!(out, [42; 64]);
//! host.free(buf)?;
//! host.deinit()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
#![warn(missing_docs)]

mod memory;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_core::{
    Backend, BackendKind, Config, DeviceInfo, Error, MemKind, PlatformEntry, Result,
};

pub use memory::{ALIGNMENT, HostBuffer};

static OPENED: AtomicUsize = AtomicUsize::new(0);
static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);
static LIVE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Process-wide counts of what the host backend did.
///
/// ```
/// let before = offload_host::stats();
/// assert!(before.opened >= before.deinitialised);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStats {
    /// Platforms opened (one per runtime 0→1 transition that included the host backend).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
    /// Allocations not yet freed, over all platforms.
    pub live_allocations: usize,
}

/// Reads the process-wide counters.
///
/// ```
/// let s = offload_host::stats();
/// println!("{} live host allocations", s.live_allocations);
/// ```
pub fn stats() -> HostStats {
    HostStats {
        opened: OPENED.load(Ordering::SeqCst),
        deinitialised: DEINITIALISED.load(Ordering::SeqCst),
        live_allocations: LIVE_ALLOCATIONS.load(Ordering::SeqCst),
    }
}

/// The entry the facade registers for the `host` feature.
///
/// ```
/// assert_eq!(offload_host::platform().kind(), offload_core::BackendKind::Host);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::of::<HostPlatform>()
}

/// The host platform: `Config::host_devices` CPU devices.
#[derive(Debug)]
pub struct HostPlatform {
    devices: usize,
    /// Allocations of this platform not yet freed; deinit reports any as leaked.
    live: AtomicUsize,
    /// Machine memory, read at the first allocation or `info` (not at open: open is on the
    /// init path, which must stay cheap).
    memory: OnceLock<u64>,
}

/// A CPU device of the host platform.
#[derive(Debug)]
pub struct HostDevice {
    ordinal: usize,
}

impl HostPlatform {
    fn memory(&self) -> u64 {
        *self.memory.get_or_init(|| {
            let info = rustix::system::sysinfo();
            (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
        })
    }

    /// Allocations of this platform not yet freed.
    ///
    /// ```
    /// use offload_core::Backend;
    /// let host = offload_host::HostPlatform::open(&offload_core::Config::default())?;
    /// assert_eq!(host.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

fn oom(requested: usize, reason: String) -> Error {
    Error::OutOfMemory {
        backend: BackendKind::Host,
        call: "Device::alloc",
        requested: requested as u64,
        reason,
    }
}

impl Backend for HostPlatform {
    type Device = HostDevice;
    type Buffer = HostBuffer;
    const KIND: BackendKind = BackendKind::Host;

    fn open(config: &Config) -> Result<Self> {
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(HostPlatform {
            devices: config.host_devices,
            live: AtomicUsize::new(0),
            memory: OnceLock::new(),
        })
    }

    fn name(&self) -> String {
        "host".into()
    }

    fn devices(&self) -> Vec<HostDevice> {
        (0..self.devices)
            .map(|ordinal| HostDevice { ordinal })
            .collect()
    }

    fn device_info(&self, device: &HostDevice) -> Result<DeviceInfo> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(DeviceInfo {
            name: format!("host cpu {}", device.ordinal),
            vendor: cpu_vendor().unwrap_or_else(|| std::env::consts::ARCH.to_string()),
            backend: BackendKind::Host,
            memory: self.memory(),
            compute_units: u32::try_from(cores).unwrap_or(u32::MAX),
        })
    }

    fn alloc(&self, _device: &HostDevice, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        let memory = self.memory();
        if size as u64 > memory {
            return Err(oom(size, format!("the host has {memory} bytes of memory")));
        }
        let buffer =
            HostBuffer::new(size).ok_or_else(|| oom(size, "the allocator refused".into()))?;
        self.live.fetch_add(1, Ordering::SeqCst);
        LIVE_ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        Ok(buffer)
    }

    fn free(&self, buffer: HostBuffer) -> Result<()> {
        drop(buffer);
        self.live.fetch_sub(1, Ordering::SeqCst);
        LIVE_ALLOCATIONS.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn read(&self, buffer: &HostBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.read(offset, dst)
    }

    fn write(&self, buffer: &mut HostBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.write(offset, src)
    }

    fn fill(&self, buffer: &mut HostBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.fill(offset, len, value)
    }

    fn copy(
        &self,
        src: &HostBuffer,
        so: usize,
        dst: &mut HostBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        dst.copy_from(d, src, so, len)
    }

    fn copy_within(&self, buffer: &mut HostBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        buffer.copy_within(so, d, len)
    }

    fn deinit(&self) -> Result<()> {
        DEINITIALISED.fetch_add(1, Ordering::SeqCst);
        match self.live_allocations() {
            0 => Ok(()),
            n => Err(Error::Driver {
                backend: BackendKind::Host,
                call: "Offload::shutdown",
                code: n as i64,
                message: format!("{n} host allocations were still live at deinit"),
            }),
        }
    }
}

/// The CPU vendor from /proc/cpuinfo, if the kernel says.
fn cpu_vendor() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("vendor_id") || l.starts_with("CPU implementer"))
        .and_then(|l| l.split(':').nth(1))
        .map(|v| v.trim().to_string())
}
