//! The host platform ([`HostPlatform`]) and its `hal::Platform` impl, with what its devices
//! share: the machine's memory, the devices' properties (read from `/proc/cpuinfo` and
//! `uname`), the boot id and the compile cache's directory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use offload_core::hal;
use offload_core::{BackendKind, Config, DeviceInfo, Error, Result};

use crate::device::HostDevice;
use crate::stats::{DEINITIALISED, OPENED};
use crate::{elf, program};

/// The host platform: `Config::host_devices` CPU devices.
#[derive(Debug)]
pub struct HostPlatform {
    devices: usize,
    shared: Arc<Shared>,
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

impl hal::Platform for HostPlatform {
    type Device = HostDevice;
    const KIND: BackendKind = BackendKind::Host;

    fn open(config: &Config) -> Result<Self> {
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(HostPlatform {
            devices: config.host_devices,
            shared: Arc::new(Shared {
                compile_cache: config.compile_cache.clone(),
                ..Shared::default()
            }),
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
                call: "",
                code: n as i64,
                message: format!("{n} host allocations were still live at deinit"),
            }),
        }
    }

    /// Shared objects for this machine (`ImageFormat::Elf` of its own `e_machine`).
    fn may_run(image: &[u8]) -> bool {
        elf::runs_here(image)
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
