//! Runtimes, platforms and devices: `offload_init`/`offload_shutdown` (reference counted
//! as in Rust, L1, L5), the platform and device lists, typed device info.

use std::ffi::c_char;
use std::mem::MaybeUninit;

use offload::{BackendKind, Device, Offload};

use crate::ffi::{Out, fixed, out};
use crate::status::{Fail, Res, guard, offload_status_t};
use crate::table;
use offload::Error;

/// A runtime reference: one per successful `offload_init` or `offload_runtime_retain`,
/// given back by `offload_shutdown` (L1).
#[allow(non_camel_case_types)]
pub type offload_runtime_t = u64;
/// A device of a runtime.
#[allow(non_camel_case_types)]
pub type offload_device_t = u64;

/// A backend.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum offload_backend_t {
    /// CPU devices run by offload itself.
    OFFLOAD_BACKEND_HOST = 0,
    /// Vulkan compute.
    OFFLOAD_BACKEND_VULKAN = 1,
    /// NVIDIA CUDA.
    OFFLOAD_BACKEND_CUDA = 2,
    /// AMD HIP.
    OFFLOAD_BACKEND_HIP = 3,
    /// Intel Level Zero.
    OFFLOAD_BACKEND_ZE = 4,
    /// The core's in-memory reference backend (tests only).
    OFFLOAD_BACKEND_REFERENCE = 5,
}

pub(crate) fn backend_of(kind: BackendKind) -> offload_backend_t {
    use offload_backend_t::*;
    match kind {
        BackendKind::Host => OFFLOAD_BACKEND_HOST,
        BackendKind::Vulkan => OFFLOAD_BACKEND_VULKAN,
        BackendKind::Cuda => OFFLOAD_BACKEND_CUDA,
        BackendKind::Hip => OFFLOAD_BACKEND_HIP,
        BackendKind::Ze => OFFLOAD_BACKEND_ZE,
        _ => OFFLOAD_BACKEND_REFERENCE,
    }
}

/// The backend numbered `n` (an `offload_backend_t` value), checked.
pub(crate) fn kind_of(call: &'static str, n: u32) -> Res<BackendKind> {
    Ok(match n {
        0 => BackendKind::Host,
        1 => BackendKind::Vulkan,
        2 => BackendKind::Cuda,
        3 => BackendKind::Hip,
        4 => BackendKind::Ze,
        5 => BackendKind::Reference,
        _ => {
            return Err(Fail::from(Error::invalid(
                call,
                format!("{n} is no offload_backend_t"),
            )));
        }
    })
}

/// What `offload_init` asks for (L5). `offload_config_default` fills in "the defaults"
/// (the environment's, as in Rust); set only what you want to fix.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct offload_config_t {
    /// Whether `backends` says which backends to open; `false`: every compiled-in backend
    /// whose driver is found (or `OFFLOAD_BACKENDS`).
    pub set_backends: bool,
    /// A mask of `1u << OFFLOAD_BACKEND_…` bits: the backends to open at init (one whose
    /// driver is missing makes `offload_init` fail). 0 with `set_backends` opens none.
    pub backends: u32,
    /// CPU devices of the host backend; 0: the default (`OFFLOAD_HOST_DEVICES`, else 1).
    pub host_devices: u32,
    /// Entries of the sender-side IPC cache (0 disables it); negative: the default
    /// (`OFFLOAD_IPC_CACHE_SIZE`, else 16).
    pub ipc_cache_size: i64,
}

/// Fills `config` with "the defaults": nothing set, so `offload_init` uses the
/// environment's defaults (L5).
///
/// # Safety
/// `config` must point to a writable `offload_config_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_config_default(config: *mut offload_config_t) -> offload_status_t {
    guard("offload_config_default", || {
        out("offload_config_default", "config", config)?.set(offload_config_t {
            set_backends: false,
            backends: 0,
            host_devices: 0,
            ipc_cache_size: -1,
        });
        Ok(())
    })
}

/// Initialises offload, or takes another reference to the live runtime (L1), and stores
/// the reference in `runtime`. `config` may be null (the defaults). The first `init` fixes
/// the configuration; a later one that asks explicitly for something else gets
/// `OFFLOAD_ERROR_INVALID_ARGUMENT` naming both (L5). Every reference is given back with
/// `offload_shutdown`.
///
/// # Safety
/// `config` must be null or point to a readable `offload_config_t`; `runtime` must point
/// to a writable `offload_runtime_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_init(
    config: *const offload_config_t,
    runtime: *mut offload_runtime_t,
) -> offload_status_t {
    const CALL: &str = "offload_init";
    guard(CALL, || {
        let runtime = out(CALL, "runtime", runtime)?;
        // SAFETY: null or a readable config, as the caller promises.
        let config = unsafe { config.as_ref() }.copied();
        // Its refusals advise in C's words (`offload_config_t`'s `backends`).
        let builder = Offload::builder().caller(offload::Caller::C);
        let rt = match config {
            None => builder.start()?,
            Some(c) => {
                let mut b = builder;
                if c.set_backends {
                    if c.backends >> 6 != 0 {
                        return Err(Fail::from(Error::invalid(
                            CALL,
                            format!("backends mask {:#x} has bits of no backend", c.backends),
                        )));
                    }
                    let kinds: Vec<BackendKind> = (0..6)
                        .filter(|i| c.backends & (1 << i) != 0)
                        .map(|i| kind_of(CALL, i))
                        .collect::<Res<_>>()?;
                    b = b.backends(kinds);
                }
                if c.host_devices != 0 {
                    b = b.host_devices(c.host_devices as usize);
                }
                if c.ipc_cache_size >= 0 {
                    b = b.ipc_cache_size(c.ipc_cache_size as usize);
                }
                b.start()?
            }
        };
        runtime.set(table::insert_runtime(CALL, rt)?);
        Ok(())
    })
}

/// Takes another reference to the runtime `runtime` (like `clone()` in Rust, L1), given
/// back with its own `offload_shutdown`.
///
/// # Safety
/// `out_runtime` must point to a writable `offload_runtime_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_runtime_retain(
    runtime: offload_runtime_t,
    out_runtime: *mut offload_runtime_t,
) -> offload_status_t {
    const CALL: &str = "offload_runtime_retain";
    guard(CALL, || {
        let o = out(CALL, "out_runtime", out_runtime)?;
        let rt = table::get::<Offload>(CALL, runtime)?;
        o.set(table::insert_runtime(CALL, (*rt).clone())?);
        Ok(())
    })
}

/// Gives back the runtime reference `runtime` (its handle is dead from now on). The last
/// reference deinitialises everything its generation opened, in order (L4), and every
/// handle made from it answers `OFFLOAD_ERROR_SHUT_DOWN` from then on; `was_last` (may be
/// null) says whether this call did. The reference is given back whatever the status:
/// an error is the failed shutdown steps' (`OFFLOAD_ERROR_MULTIPLE` for several).
///
/// # Safety
/// `was_last` must be null or point to a writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_shutdown(
    runtime: offload_runtime_t,
    was_last: *mut bool,
) -> offload_status_t {
    const CALL: &str = "offload_shutdown";
    guard(CALL, || {
        let (rt, orphans) = table::remove_runtime(CALL, runtime)?;
        let (last, result) = match rt {
            table::Removed::Owned(rt) => match rt.shutdown() {
                Ok(down) => (down.was_last(), Ok(())),
                Err(e) => {
                    let (down, error) = e.into_parts();
                    (down.was_last(), Err(error.into()))
                }
            },
            // Another thread still uses this very handle in a call: the reference goes
            // when that call returns (the drop is the shutdown, L1).
            table::Removed::InUse(_) => (false, Ok(())),
        };
        // The runtime released their backend objects already (L4): dropping is a no-op.
        drop(orphans);
        if !was_last.is_null() {
            // SAFETY: non-null; the caller promises a writable bool.
            unsafe { was_last.write(last) };
        }
        result
    })
}

/// The runtime's generation number (L1: a fresh one after every last shutdown).
///
/// # Safety
/// `generation` must point to a writable `uint64_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_runtime_generation(
    runtime: offload_runtime_t,
    generation: *mut u64,
) -> offload_status_t {
    const CALL: &str = "offload_runtime_generation";
    guard(CALL, || {
        let o = out(CALL, "generation", generation)?;
        o.set(table::get::<Offload>(CALL, runtime)?.generation());
        Ok(())
    })
}

/// The configuration in force (L5): `set_backends` is true when the backends were fixed.
///
/// # Safety
/// `config` must point to a writable `offload_config_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_runtime_config(
    runtime: offload_runtime_t,
    config: *mut offload_config_t,
) -> offload_status_t {
    const CALL: &str = "offload_runtime_config";
    guard(CALL, || {
        let o = out(CALL, "config", config)?;
        let c = table::get::<Offload>(CALL, runtime)?.config()?;
        o.set(offload_config_t {
            set_backends: c.backends.is_some(),
            backends: c
                .backends
                .iter()
                .flatten()
                .fold(0, |m, k| m | 1 << backend_of(*k) as u32),
            host_devices: u32::try_from(c.host_devices).unwrap_or(u32::MAX),
            ipc_cache_size: i64::try_from(c.ipc_cache_size).unwrap_or(i64::MAX),
        });
        Ok(())
    })
}

/// A platform: a backend whose driver opened.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct offload_platform_info_t {
    /// Its backend.
    pub backend: offload_backend_t,
    /// Its name, NUL-terminated (cut to fit).
    pub name: [c_char; 128],
    /// How many devices it has.
    pub devices: usize,
}

/// How many platforms the runtime has (opening every backend not yet opened, L1).
///
/// # Safety
/// `count` must point to a writable `size_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_platform_count(
    runtime: offload_runtime_t,
    count: *mut usize,
) -> offload_status_t {
    const CALL: &str = "offload_platform_count";
    guard(CALL, || {
        let o = out(CALL, "count", count)?;
        o.set(table::get::<Offload>(CALL, runtime)?.platforms()?.len());
        Ok(())
    })
}

/// What platform `index` (from 0, below `offload_platform_count`) is.
///
/// # Safety
/// `info` must point to a writable `offload_platform_info_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_platform_info(
    runtime: offload_runtime_t,
    index: usize,
    info: *mut offload_platform_info_t,
) -> offload_status_t {
    const CALL: &str = "offload_platform_info";
    guard(CALL, || {
        let o = out(CALL, "info", info)?;
        let all = table::get::<Offload>(CALL, runtime)?.platforms()?;
        let Some(p) = all.get(index) else {
            return Err(Fail::from(Error::invalid(
                CALL,
                format!("platform {index} of {}: there is none", all.len()),
            )));
        };
        o.set(offload_platform_info_t {
            backend: backend_of(p.backend),
            name: fixed(&p.name),
            devices: p.devices,
        });
        Ok(())
    })
}

fn give_devices(
    call: &'static str,
    runtime: offload_runtime_t,
    list: Vec<Device>,
    to: &mut [MaybeUninit<offload_device_t>],
    count: Out<usize>,
) -> Res {
    let epoch = table::epoch_of(runtime);
    let n = list.len();
    let handles = list
        .into_iter()
        .map(|d| table::device_handle(call, epoch, d))
        .collect::<Res<Vec<u64>>>()?;
    table::remember_list(epoch, &handles);
    for (o, h) in to.iter_mut().zip(handles) {
        o.write(h);
    }
    count.set(n);
    Ok(())
}

/// Lists the runtime's devices (opening every backend not yet opened): stores the handles
/// of the first `capacity` in `devices` and their total number in `count`. `devices` may
/// be null with `capacity` 0, to ask for the number only. A device has one handle all
/// through its runtime's life: listing again gives the same handles (without a lock, once
/// a full list was made), and they need no release (liboffload's `olIterateDevices`).
///
/// # Safety
/// `devices` must point to `capacity` writable handles (or be null with `capacity` 0);
/// `count` to a writable `size_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_devices(
    runtime: offload_runtime_t,
    devices: *mut offload_device_t,
    capacity: usize,
    count: *mut usize,
) -> offload_status_t {
    const CALL: &str = "offload_devices";
    guard(CALL, || {
        let count = out(CALL, "count", count)?;
        if devices.is_null() && capacity != 0 {
            return Err(Fail::from(Error::invalid(
                CALL,
                "`devices` is a null pointer",
            )));
        }
        let to: &mut [MaybeUninit<offload_device_t>] = if capacity == 0 {
            &mut []
        } else {
            // SAFETY: non-null; the caller promises `capacity` writable handles there
            // (maybe uninitialised, hence `MaybeUninit`).
            unsafe { std::slice::from_raw_parts_mut(devices.cast(), capacity) }
        };
        if let Some(n) = table::listed(runtime, to) {
            count.set(n);
            return Ok(());
        }
        let list = table::get::<Offload>(CALL, runtime)?.devices()?;
        give_devices(CALL, runtime, list, to, count)
    })
}

/// The first device of `backend` (an `offload_backend_t`), its handle: opens the
/// backend if needed; `OFFLOAD_ERROR_DRIVER_NOT_FOUND`, `OFFLOAD_ERROR_NO_DEVICE` or
/// `OFFLOAD_ERROR_UNSUPPORTED` (not compiled in) say why there is none.
///
/// # Safety
/// `device` must point to a writable `offload_device_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_device_of(
    runtime: offload_runtime_t,
    backend: u32,
    device: *mut offload_device_t,
) -> offload_status_t {
    const CALL: &str = "offload_device_of";
    guard(CALL, || {
        let o = out(CALL, "device", device)?;
        let kind = kind_of(CALL, backend)?;
        let d = table::get::<Offload>(CALL, runtime)?.device(kind)?;
        o.set(table::device_handle(CALL, table::epoch_of(runtime), d)?);
        Ok(())
    })
}

/// Checks a device handle and does nothing else: a device's handle belongs to its runtime
/// (the same handle all through the runtime's life, like liboffload's device handles) and
/// stays valid until the last `offload_shutdown`. Kept so that code written for handles
/// it must give back stays correct; `OFFLOAD_ERROR_INVALID_HANDLE` or
/// `OFFLOAD_ERROR_SHUT_DOWN` for a handle that names no live device.
#[unsafe(no_mangle)]
pub extern "C" fn offload_device_release(device: offload_device_t) -> offload_status_t {
    const CALL: &str = "offload_device_release";
    guard(CALL, || table::check::<Device>(CALL, device))
}

/// What a device says about itself; 0 (or an empty string) for what its driver does not
/// report.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct offload_device_info_t {
    /// Its backend.
    pub backend: offload_backend_t,
    /// Its name, NUL-terminated (cut to fit).
    pub name: [c_char; 256],
    /// Its vendor's name, NUL-terminated (cut to fit).
    pub vendor: [c_char; 128],
    /// The driver's version, as the driver words it; empty if unknown.
    pub driver_version: [c_char; 128],
    /// Memory the device can allocate, in bytes.
    pub memory: u64,
    /// Parallel compute units (cores, SMs, CUs, EUs).
    pub compute_units: u32,
    /// The vendor's PCI id.
    pub vendor_id: u32,
    /// Most threads in one block, all dimensions together.
    pub max_block_threads: u32,
    /// Most threads in one block per dimension.
    pub max_block: [u32; 3],
    /// Most blocks in a grid per dimension.
    pub max_grid: [u32; 3],
    /// Width of a device address, in bits.
    pub address_bits: u32,
    /// Largest single allocation, in bytes.
    pub max_alloc: u64,
    /// Shared (work-group) memory one block can use, in bytes.
    pub shared_memory: u64,
    /// Clock rate, in MHz.
    pub clock_mhz: u32,
}

/// What `device` says about itself (typed, read from the driver once per runtime).
///
/// # Safety
/// `info` must point to a writable `offload_device_info_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_device_info(
    device: offload_device_t,
    info: *mut offload_device_info_t,
) -> offload_status_t {
    const CALL: &str = "offload_device_info";
    guard(CALL, || {
        let o = out(CALL, "info", info)?;
        let i = table::get::<Device>(CALL, device)?.info()?;
        o.set(offload_device_info_t {
            backend: backend_of(i.backend),
            name: fixed(&i.name),
            vendor: fixed(&i.vendor),
            driver_version: fixed(i.driver_version.as_deref().unwrap_or("")),
            memory: i.memory,
            compute_units: i.compute_units,
            vendor_id: i.vendor_id.unwrap_or(0),
            max_block_threads: i.max_block_threads.unwrap_or(0),
            max_block: i.max_block.unwrap_or([0; 3]),
            max_grid: i.max_grid.unwrap_or([0; 3]),
            address_bits: i.address_bits.unwrap_or(0),
            max_alloc: i.max_alloc.unwrap_or(0),
            shared_memory: i.shared_memory.unwrap_or(0),
            clock_mhz: i.clock_mhz.unwrap_or(0),
        });
        Ok(())
    })
}

/// Objects the C API holds right now, over every runtime (a leak check for tests: 0 after
/// the last `offload_shutdown`).
#[unsafe(no_mangle)]
pub extern "C" fn offload_live_handles() -> usize {
    // A forked child holds none (and must not take the table's locks, L9).
    if offload_thread::fork::forked() {
        return 0;
    }
    table::live()
}
