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
//! use offload_core::hal::{Device, Platform};
//! use offload_core::{Config, MemKind};
//! use offload_host::HostPlatform;
//! let host = HostPlatform::open(&Config::default())?;
//! let dev = host.devices().remove(0);
//! let mut buf = dev.alloc(64, MemKind::Device)?;
//! dev.write(&mut buf, 0, &[42; 64])?;
//! let mut out = [0u8; 64];
//! dev.read(&buf, 0, &mut out)?;
//! assert_eq!(out, [42; 64]);
//! dev.free(buf)?;
//! drop(dev);
//! host.deinit()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
#![warn(missing_docs)]

mod elf;
mod memory;
mod pool;
mod program;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use offload_core::hal::{self, KernelOf};
use offload_core::{
    BackendKind, Config, DeviceInfo, Dims, Error, KernelArg, MemKind, ParamKind, PlatformEntry,
    Result,
};

pub use memory::{ALIGNMENT, HostBuffer, MEMFD_NAME};
pub use program::{HostKernel, HostModule, PARAMS_PREFIX};

/// Test kernels compiled from `fixtures/kernels.c` (feature `fixtures`): `add_one`, `fill`,
/// `noop`, `read_global`, a writable global `g` and a const `read_only_constant`.
#[cfg(feature = "fixtures")]
pub mod fixtures {
    /// The kernels, with `add_one` adding 1.
    pub const KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels.so"));
    /// The same kernels with `add_one` adding 2 (to tell two images apart).
    pub const KERNELS_STEP2: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels_step2.so"));
}

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
    /// Program images loaded (`dlopen`), over all platforms.
    pub loads: usize,
    /// Program images unloaded (`dlclose`).
    pub unloads: usize,
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
        loads: program::LOADS.load(Ordering::SeqCst),
        unloads: program::UNLOADS.load(Ordering::SeqCst),
    }
}

/// The entry the facade registers for the `host` feature.
///
/// ```
/// assert_eq!(offload_host::platform().kind(), offload_core::BackendKind::Host);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::with_ipc::<HostPlatform>()
}

/// The host platform: `Config::host_devices` CPU devices.
#[derive(Debug)]
pub struct HostPlatform {
    devices: usize,
    shared: Arc<Shared>,
}

/// What a platform's devices share with it.
#[derive(Debug, Default)]
struct Shared {
    /// Allocations of this platform not yet freed; deinit reports any as leaked.
    live: AtomicUsize,
    /// Machine memory, read at the first allocation or `info` (not at open: open is on the
    /// init path, which must stay cheap).
    memory: OnceLock<u64>,
    /// The kernel's boot id, read at the first IPC use: the host devices' UUIDs.
    boot_id: OnceLock<[u8; 16]>,
}

impl Shared {
    fn memory(&self) -> u64 {
        *self.memory.get_or_init(|| {
            let info = rustix::system::sysinfo();
            (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
        })
    }

    /// /proc/sys/kernel/random/boot_id as bytes: the same in every process of this boot
    /// (zeros where the kernel does not say, which still matches within a machine).
    fn boot_id(&self) -> [u8; 16] {
        *self.boot_id.get_or_init(|| {
            let text =
                std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
            let digits: Vec<u8> = text
                .bytes()
                .filter(u8::is_ascii_hexdigit)
                .map(|c| (c as char).to_digit(16).unwrap_or(0) as u8)
                .collect();
            let mut id = [0u8; 16];
            for (byte, pair) in id.iter_mut().zip(digits.chunks_exact(2)) {
                *byte = pair[0] << 4 | pair[1];
            }
            id
        })
    }

    fn counted(&self, buffer: HostBuffer) -> HostBuffer {
        self.live.fetch_add(1, Ordering::SeqCst);
        LIVE_ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        buffer
    }
}

/// What an exportable host allocation's payload says: these bytes, then nothing (the size
/// travels in the handle, the memory as the memfd).
const IPC_PAYLOAD: &[u8; 8] = b"OFHOST01";

/// A CPU device of the host platform. Dropping it (after the queues that share its
/// workers) joins its worker threads.
pub struct HostDevice {
    ordinal: usize,
    pool: Arc<pool::LazyPool>,
    shared: Arc<Shared>,
}

impl HostDevice {
    /// Whether this device has started its worker threads (at its first parallel launch).
    ///
    /// ```
    /// use offload_core::{Config, hal::Platform};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// assert!(!host.devices()[0].workers_started());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn workers_started(&self) -> bool {
        self.pool.started()
    }
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

/// A host queue. Launches run to completion before `launch` returns, in order.
pub struct HostQueue {
    pool: Arc<pool::LazyPool>,
}

impl std::fmt::Debug for HostQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostQueue")
    }
}

/// A host event: the time it was recorded (all earlier work had finished then).
#[derive(Debug)]
pub struct HostEvent(Instant);

impl HostPlatform {
    /// Allocations of this platform not yet freed.
    ///
    /// ```
    /// use offload_core::hal::Platform;
    /// let host = offload_host::HostPlatform::open(&offload_core::Config::default())?;
    /// assert_eq!(host.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
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

impl hal::Platform for HostPlatform {
    type Device = HostDevice;
    const KIND: BackendKind = BackendKind::Host;

    fn open(config: &Config) -> Result<Self> {
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(HostPlatform {
            devices: config.host_devices,
            shared: Arc::default(),
        })
    }

    fn name(&self) -> String {
        "host".into()
    }

    fn devices(&self) -> Vec<HostDevice> {
        (0..self.devices)
            .map(|ordinal| HostDevice {
                ordinal,
                pool: Arc::default(),
                shared: self.shared.clone(),
            })
            .collect()
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

impl hal::Device for HostDevice {
    type Buffer = HostBuffer;
    type Program = HostModule;
    type Queue = HostQueue;
    type Event = HostEvent;

    fn info(&self) -> Result<DeviceInfo> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(DeviceInfo {
            name: format!("host cpu {}", self.ordinal),
            vendor: cpu_vendor().unwrap_or_else(|| std::env::consts::ARCH.to_string()),
            backend: BackendKind::Host,
            memory: self.shared.memory(),
            compute_units: u32::try_from(cores).unwrap_or(u32::MAX),
        })
    }

    fn alloc(&self, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(size, format!("the host has {memory} bytes of memory")));
        }
        let buffer =
            HostBuffer::new(size).ok_or_else(|| oom(size, "the allocator refused".into()))?;
        Ok(self.shared.counted(buffer))
    }

    fn free(&self, buffer: HostBuffer) -> Result<()> {
        drop(buffer);
        self.shared.live.fetch_sub(1, Ordering::SeqCst);
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

    fn load(&self, image: &[u8]) -> Result<HostModule> {
        program::load(image)
    }

    fn queue(&self) -> Result<HostQueue> {
        Ok(HostQueue {
            pool: self.pool.clone(),
        })
    }

    fn destroy_queue(&self, _queue: HostQueue) -> Result<()> {
        Ok(())
    }

    fn launch(
        &self,
        queue: &HostQueue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, HostBuffer>],
    ) -> Result<()> {
        // Checked again here: the raw API is safe too, and native code trusts these.
        if args.len() != kernel.params.len() {
            return Err(Error::InvalidArgument {
                call: "Queue::launch",
                reason: format!(
                    "host kernel takes {} arguments, {} given",
                    kernel.params.len(),
                    args.len()
                ),
            });
        }
        let mut values = Vec::with_capacity(args.len());
        for (i, (arg, param)) in args.iter().zip(&kernel.params).enumerate() {
            let mut value = [0u8; 8];
            match (arg, param) {
                (KernelArg::Buffer(b), ParamKind::Buffer) => {
                    value.copy_from_slice(&(b.as_ptr() as usize).to_ne_bytes())
                }
                (KernelArg::Scalar(bytes), ParamKind::Scalar(n))
                    if bytes.len() == *n && *n <= 8 =>
                {
                    value[..*n].copy_from_slice(bytes)
                }
                _ => {
                    return Err(Error::InvalidArgument {
                        call: "Queue::launch",
                        reason: format!("host kernel argument {i} should be {param:?}"),
                    });
                }
            }
            values.push(value);
        }
        queue
            .pool
            .run(kernel.function, values, dims.grid, dims.block);
        Ok(())
    }

    fn sync(&self, _queue: &HostQueue) -> Result<()> {
        Ok(()) // launches complete before they return
    }

    fn record(&self, _queue: &HostQueue) -> Result<HostEvent> {
        Ok(HostEvent(Instant::now()))
    }

    fn wait_event(&self, _queue: &HostQueue, _event: &HostEvent) -> Result<()> {
        Ok(())
    }

    fn sync_event(&self, _event: &HostEvent) -> Result<()> {
        Ok(())
    }

    fn elapsed(&self, start: &HostEvent, end: &HostEvent) -> Result<Duration> {
        Ok(end.0.saturating_duration_since(start.0))
    }

    fn destroy_event(&self, _event: HostEvent) -> Result<()> {
        Ok(())
    }
}

/// Memory shared between processes as sealed memfds; the fd travels with the handle.
impl hal::Ipc for HostDevice {
    /// The boot id, its last byte mixed with the device's ordinal: host device `n` is the
    /// same device in every process of this boot.
    fn uuid(&self) -> [u8; 16] {
        let mut uuid = self.shared.boot_id();
        uuid[15] ^= self.ordinal as u8;
        uuid
    }

    fn alloc_exportable(&self, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(size, format!("the host has {memory} bytes of memory")));
        }
        let buffer = HostBuffer::exportable(size)
            .map_err(|e| oom(size, format!("memfd_create/ftruncate/mmap: {e}")))?;
        Ok(self.shared.counted(buffer))
    }

    fn export(&self, buffer: &HostBuffer) -> Result<hal::Exported> {
        const CALL: &str = "Buffer::export";
        let fd = buffer.memfd().ok_or_else(|| Error::InvalidArgument {
            call: CALL,
            reason: "host buffer is not exportable (allocate it with alloc_exportable)".into(),
        })?;
        let fd = fd.try_clone().map_err(|e| Error::Driver {
            backend: BackendKind::Host,
            call: CALL,
            code: i64::from(e.raw_os_error().unwrap_or(0)),
            message: format!("dup of the buffer's memfd: {e}"),
        })?;
        Ok(hal::Exported {
            size: buffer.len() as u64,
            payload: IPC_PAYLOAD.to_vec(),
            fd: Some(fd),
        })
    }

    fn import(&self, exported: hal::Exported) -> Result<HostBuffer> {
        let bad = |reason: &str| Error::InvalidIpcHandle {
            backend: BackendKind::Host,
            call: "Device::import",
            reason: reason.into(),
        };
        let Some(fd) = exported.fd else {
            return Err(bad("a host handle needs its memfd"));
        };
        if exported.payload != IPC_PAYLOAD {
            return Err(bad("the payload is not a host allocation's"));
        }
        let size = usize::try_from(exported.size).map_err(|_| bad("size"))?;
        if size == 0 {
            return Err(bad("size 0"));
        }
        let buffer = HostBuffer::import(fd, size)?;
        Ok(self.shared.counted(buffer))
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
