//! The HIP platform's runtime-specific part: opening the runtime (`hipInit`, the devices
//! and their launch limits), describing a device, and the address-range check of an
//! export. The platform, its devices and the `hal` traits over them are offload-driver's
//! generic stream backend ([`HipPlatform`](crate::HipPlatform) is `StreamPlatform<HipApi>`);
//! a device's vendor context is its ordinal, made current with `hipSetDevice`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use offload_core::{BackendKind, DeviceInfo, Error, Result};
use offload_driver::{
    DeviceCore, Failure, LaunchLimits, OpenedApi, StreamApi, driver_not_found, no_device,
};

use crate::BACKEND;
use crate::ffi::{self, HIP_ERROR_NO_DEVICE, sys};

/// A failed runtime call as the offload error of `call`.
fn driver_error(call: &'static str) -> impl Fn(Failure) -> Error {
    move |failure| failure.into_error(BackendKind::Hip, call)
}

/// The device's launch limits; where the runtime does not say, those of every GPU ROCm 5
/// to 7 supports.
fn read_limits(driver: &ffi::Driver, ordinal: c_int) -> LaunchLimits {
    let get = |attribute, fallback| {
        driver
            .attribute(ordinal, attribute)
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
            .unwrap_or(fallback)
    };
    let three = |first, fallback: [u32; 3]| {
        [
            get(first, fallback[0]),
            get(first + 1, fallback[1]),
            get(first + 2, fallback[2]),
        ]
    };
    LaunchLimits {
        max_block_threads: get(sys::HIP_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
        max_block: three(
            sys::HIP_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            [1024, 1024, 1024],
        ),
        max_grid: three(
            sys::HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
            [i32::MAX as u32, 65535, 65535],
        ),
        max_shared_memory: get(
            sys::HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            64 << 10,
        ),
        attributes: (
            "hipDeviceAttributeMaxBlockDim*",
            "hipDeviceAttributeMaxGridDim*",
        ),
    }
}

/// Loads the runtime, `hipInit(0)`, counts the devices. No runtime, a failing `hipInit`
/// is `DriverNotFound`; a runtime that answers "no device" is `NoDevice`.
#[allow(unsafe_code)]
pub(crate) fn open() -> Result<OpenedApi<ffi::Driver>> {
    let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
    if let Err(init) = driver.init() {
        // ROCm 5 fails hipInit with hipErrorInvalidDevice when there is no GPU;
        // hipGetDeviceCount then says hipErrorNoDevice. Report both.
        return Err(match driver.device_count() {
            // The runtime loaded and answered: there is no device.
            Err(count) if count.code == i64::from(HIP_ERROR_NO_DEVICE) => {
                no_device(BACKEND, driver.library(), format!("{init}; {count}"))
            }
            Err(count) => driver_not_found(BACKEND, driver.library(), format!("{init}; {count}")),
            Ok(_) => driver_not_found(BACKEND, driver.library(), init.to_string()),
        });
    }
    let on_init = driver_error("Offload::init");
    let count = match driver.device_count() {
        Ok(count) => count,
        Err(failure) if failure.code == i64::from(HIP_ERROR_NO_DEVICE) => {
            return Err(no_device(BACKEND, driver.library(), failure.to_string()));
        }
        Err(failure) => return Err(on_init(failure)),
    };
    if count <= 0 {
        return Err(no_device(
            BACKEND,
            driver.library(),
            format!("hipGetDeviceCount: {count} devices"),
        ));
    }
    // `HIP <runtime version>`, e.g. `HIP 6.2.41133`.
    let name = match driver.runtime_version() {
        Some(v) => format!(
            "HIP {}.{}.{}",
            v / 10_000_000,
            v / 100_000 % 100,
            v % 100_000
        ),
        None => "HIP".into(),
    };
    driver.set_archs((0..count).map(|o| driver.device_arch(o)).collect());
    let api = Arc::new(driver);
    let devices = (0..count)
        .map(|ordinal| {
            let limits = read_limits(&api, ordinal);
            // SAFETY: HIP's context is the ordinal, whose release is nothing.
            Arc::new(unsafe {
                DeviceCore::new(api.clone(), ordinal.unsigned_abs(), ordinal, limits)
            })
        })
        .collect();
    Ok(OpenedApi { api, devices, name })
}

/// `hipDeviceGetName`, `hipDeviceTotalMem` and the attributes offload reports.
pub(crate) fn info(driver: &ffi::Driver, ordinal: c_int) -> Result<DeviceInfo> {
    let failed = driver_error("Device::info");
    let device = driver.device(ordinal).map_err(&failed)?;
    let multiprocessors = driver.multiprocessor_count(ordinal).map_err(&failed)?;
    let mut info = DeviceInfo::new(
        driver.device_name(device).map_err(&failed)?,
        "AMD",
        BACKEND,
        driver.total_memory(device).map_err(&failed)?,
        u32::try_from(multiprocessors).unwrap_or(0),
    );
    // Each property by its own hipDeviceGetAttribute: hipDeviceProp_t changed layout in
    // ROCm 6. A property the runtime does not report is `None`.
    let get = |attribute| {
        driver
            .attribute(ordinal, attribute)
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
    };
    let three = |first| Some([get(first)?, get(first + 1)?, get(first + 2)?]);
    info.vendor_id = Some(0x1002);
    info.driver_version = driver
        .runtime_version()
        .map(|v| format!("{}.{}.{}", v / 10_000_000, v / 100_000 % 100, v % 100_000));
    info.max_block_threads = get(sys::HIP_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info.max_block = three(sys::HIP_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    info.max_grid = three(sys::HIP_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    info.shared_memory = get(sys::HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK).map(u64::from);
    info.clock_mhz = get(sys::HIP_DEVICE_ATTRIBUTE_CLOCK_RATE).map(|khz| khz / 1000);
    info.address_bits = Some(64);
    Ok(info)
}

/// Checks, before an allocation's IPC handle travels, that `hipMemGetAddressRange` says
/// the allocation starts at `ptr` and holds at least `len` bytes.
pub(crate) fn check_range(driver: &ffi::Driver, ptr: *mut c_void, len: usize) -> Result<()> {
    let (base, size) = driver
        .address_range(ptr)
        .ok_or_else(|| Error::Unsupported {
            backend: BACKEND,
            call: "",
            reason: format!(
                "the runtime has no HIP IPC ({})",
                <ffi::Driver as StreamApi>::WORDS.ipc
            ),
        })?
        .map_err(driver_error(""))?;
    if base != ptr as u64 || size < len as u64 {
        return Err(Error::Driver {
            backend: BACKEND,
            call: "",
            code: 0,
            message: format!(
                "hipMemGetAddressRange says {size} bytes at {base:#x} for the {len}-byte \
                 allocation at {ptr:p}"
            ),
        });
    }
    Ok(())
}
