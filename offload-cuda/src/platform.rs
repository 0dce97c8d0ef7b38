//! The CUDA platform's driver-specific part: opening the driver (`cuInit`, the devices and
//! their primary contexts) and describing a device. The platform, its devices and the
//! `hal` traits over them are offload-driver's generic stream backend
//! ([`CudaPlatform`](crate::CudaPlatform) is `StreamPlatform<CudaApi>`).

use std::sync::Arc;

use offload_core::{BackendKind, DeviceInfo, Result};
use offload_driver::{Failure, OpenedApi, driver_not_found, no_device};

use crate::context::Context;
use crate::ffi::{self, CUDA_ERROR_NO_DEVICE, sys};
use crate::{BACKEND, LIBRARY};

fn driver_error(call: &'static str) -> impl Fn(Failure) -> offload_core::Error {
    move |failure| failure.into_error(BackendKind::Cuda, call)
}

/// Loads the driver, `cuInit(0)`, counts the devices and retains each one's primary
/// context. No driver or a failing `cuInit` is `DriverNotFound`; no device is `NoDevice`.
pub(crate) fn open() -> Result<OpenedApi<ffi::Driver>> {
    let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
    driver.init().map_err(|failure| {
        // The driver loaded and answered: no GPU (or none this process may use).
        if failure.code == i64::from(CUDA_ERROR_NO_DEVICE) {
            no_device(BACKEND, LIBRARY, failure.to_string())
        } else {
            driver_not_found(BACKEND, LIBRARY, failure.to_string())
        }
    })?;
    let count = match driver.device_count() {
        Ok(count) => count,
        Err(failure) if failure.code == i64::from(CUDA_ERROR_NO_DEVICE) => {
            return Err(no_device(BACKEND, LIBRARY, failure.to_string()));
        }
        Err(failure) => return Err(driver_error("Offload::init")(failure)),
    };
    if count <= 0 {
        return Err(no_device(
            BACKEND,
            LIBRARY,
            format!("cuDeviceGetCount: {count} devices"),
        ));
    }
    // `CUDA <driver version>`, e.g. `CUDA 12.4`.
    let name = match driver.driver_version() {
        Some(v) => format!("CUDA {}.{}", v / 1000, v % 1000 / 10),
        None => "CUDA".into(),
    };
    let api = Arc::new(driver);
    // A failure drops the contexts retained so far, which releases them.
    let devices = (0..count.unsigned_abs())
        .map(|ordinal| Context::retain(&api, ordinal).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    Ok(OpenedApi { api, devices, name })
}

/// `cuDeviceGetName`, `cuDeviceTotalMem` and the attributes offload reports.
pub(crate) fn info(driver: &ffi::Driver, context: &Context) -> Result<DeviceInfo> {
    let device = context.device;
    let failed = driver_error("Device::info");
    let multiprocessors = driver.multiprocessor_count(device).map_err(&failed)?;
    let mut info = DeviceInfo::new(
        driver.device_name(device).map_err(&failed)?,
        "NVIDIA",
        BACKEND,
        driver.total_memory(device).map_err(&failed)?,
        u32::try_from(multiprocessors).unwrap_or(0),
    );
    let get = |attribute| {
        driver
            .attribute(device, attribute)
            .ok()
            .and_then(|v| u32::try_from(v).ok())
    };
    let three = |first| Some([get(first)?, get(first + 1)?, get(first + 2)?]);
    info.vendor_id = Some(0x10DE);
    info.driver_version = driver
        .driver_version()
        .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10));
    info.max_block_threads = get(sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info.max_block = three(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    info.max_grid = three(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    info.shared_memory = get(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK).map(u64::from);
    info.clock_mhz = get(sys::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).map(|khz| khz / 1000);
    info.address_bits = Some(64);
    Ok(info)
}
