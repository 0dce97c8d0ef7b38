//! What the objects of a host platform hold: the platform's record its devices share
//! ([`Shared`]: the machine's memory, the devices' properties read from `/proc/cpuinfo` and
//! `uname`, the boot id and the compile cache's directory) and the device itself
//! ([`HostDevice`]; its `hal::Device` impl is device.rs's). Below the platform, the
//! device's impl, queues and memory, which all name them.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};

use offload_core::{BackendKind, DeviceInfo};

use crate::{pool, program};

/// A CPU device of the host platform. Dropping it (after the queues that share its
/// workers) joins its worker threads.
pub struct HostDevice {
    pub(crate) ordinal: usize,
    pub(crate) pool: Arc<pool::LazyPool>,
    pub(crate) shared: Arc<Shared>,
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

/// What a platform's devices share with it.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Allocations of this platform not yet released; deinit reports any as leaked.
    pub(crate) live: AtomicUsize,
    /// Machine memory, read at the first allocation or `info` (not at open: open is on the
    /// init path, which must stay cheap).
    memory: OnceLock<u64>,
    /// The kernel's boot id, read at the first IPC use: the host devices' UUIDs.
    boot_id: OnceLock<[u8; 16]>,
    /// The devices' properties, read at the first `info`.
    info: OnceLock<DeviceInfo>,
    /// The compile cache's directory (`Config::compile_cache`), where the C compiler's
    /// identity is remembered across processes (see compiler.rs).
    pub(crate) compile_cache: Option<std::path::PathBuf>,
}

impl Shared {
    /// The record of a platform whose compile cache is `compile_cache`.
    pub(crate) fn new(compile_cache: Option<std::path::PathBuf>) -> Shared {
        Shared {
            compile_cache,
            ..Shared::default()
        }
    }

    pub(crate) fn memory(&self) -> u64 {
        *self.memory.get_or_init(|| {
            let info = rustix::system::sysinfo();
            (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
        })
    }

    /// What every host device of this platform says about itself (the name is the CPU
    /// model; `info` adds the device's ordinal).
    pub(crate) fn info(&self) -> &DeviceInfo {
        self.info.get_or_init(|| {
            let cpu = CpuInfo::read();
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let memory = self.memory();
            let mut info = DeviceInfo::new(
                cpu.model
                    .unwrap_or_else(|| std::env::consts::ARCH.to_string()),
                cpu.vendor
                    .clone()
                    .unwrap_or_else(|| std::env::consts::ARCH.to_string()),
                BackendKind::Host,
                memory,
                u32::try_from(cores).unwrap_or(u32::MAX),
            );
            info.vendor_id = match cpu.vendor.as_deref() {
                Some("GenuineIntel") => Some(0x8086),
                Some("AuthenticAMD") => Some(0x1022),
                _ => None,
            };
            let uname = rustix::system::uname();
            info.driver_version = Some(format!(
                "offload-host {} on Linux {}",
                env!("CARGO_PKG_VERSION"),
                uname.release().to_string_lossy()
            ));
            // A host kernel runs its block's threads itself: any size, any grid.
            info.max_block_threads = Some(u32::MAX);
            info.max_block = Some([u32::MAX; 3]);
            info.max_grid = Some([u32::MAX; 3]);
            info.max_alloc = Some(memory);
            info.shared_memory = Some(u64::from(program::MAX_SHARED_MEMORY));
            info.address_bits = Some(usize::BITS);
            info.clock_mhz = cpu.mhz;
            info
        })
    }

    /// /proc/sys/kernel/random/boot_id as bytes: the same in every process of this boot
    /// (zeros where the kernel does not say, which still matches within a machine).
    pub(crate) fn boot_id(&self) -> [u8; 16] {
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
}

/// What /proc/cpuinfo says about the first CPU, where it says it.
struct CpuInfo {
    vendor: Option<String>,
    model: Option<String>,
    mhz: Option<u32>,
}

impl CpuInfo {
    fn read() -> CpuInfo {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |names: &[&str]| {
            text.lines()
                .find(|l| names.iter().any(|n| l.starts_with(n)))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        CpuInfo {
            vendor: field(&["vendor_id", "CPU implementer"]),
            model: field(&["model name", "Model"]),
            mhz: field(&["cpu MHz"])
                .and_then(|v| v.parse::<f64>().ok())
                .map(|mhz| mhz.round() as u32),
        }
    }
}
