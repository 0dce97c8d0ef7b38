//! The HIP platform and its devices: the runtime opened and initialised, a record per
//! device ([`DeviceShared`]) that every object made on it holds, and the `hal` traits over
//! them, each call delegating to the module that owns its objects (memory.rs, queue.rs,
//! program.rs).

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use std::time::Duration;

use offload_core::hal::{self, HostFn, KernelOf};
use offload_core::{
    BackendKind, Config, DeviceInfo, Dims, Error, GlobalInfo, KernelArg, MemKind, ParamKind, Result,
};
use offload_driver::{Failure, LaunchLimits, driver_not_found};

use crate::ffi::{self, HIP_ERROR_NO_DEVICE, sys};
use crate::memory::{Allocation, HipBuffer};
use crate::program::{self, HipKernel, HipModule};
use crate::queue::{HipEvent, HipQueue};
use crate::{BACKEND, COUNTERS};

/// A failed runtime call as the offload error of `call`.
pub(crate) fn driver_error(call: &'static str) -> impl Fn(Failure) -> Error {
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

/// One device: the runtime, its ordinal, its limits, and the count of objects made on it.
pub(crate) struct DeviceShared {
    pub(crate) driver: Arc<ffi::Driver>,
    pub(crate) ordinal: c_int,
    /// What launches are checked against, read once.
    pub(crate) limits: LaunchLimits,
    /// Buffers, modules, queues and events made on it and not yet destroyed.
    live: AtomicUsize,
    /// The IPC mappings open on it.
    pub(crate) mappings: Mutex<Vec<Weak<crate::ipc::Mapping>>>,
    /// Its exportable allocations, for imports of their handles in this same process.
    exported: Mutex<Vec<Weak<Allocation>>>,
}

impl DeviceShared {
    /// Makes the device current on the calling thread (`hipSetDevice`), for `call`.
    pub(crate) fn bind(&self, call: &'static str) -> Result<()> {
        self.driver
            .set_device(self.ordinal)
            .map_err(driver_error(call))
    }

    /// Counts an object made on the device.
    pub(crate) fn made(&self) {
        self.live.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts an object destroyed.
    pub(crate) fn destroyed(&self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }

    /// Remembers an exportable allocation.
    pub(crate) fn exported(&self, alloc: &Arc<Allocation>) {
        let mut exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        exported.retain(|a| a.strong_count() > 0);
        exported.push(Arc::downgrade(alloc));
    }

    /// The live exportable allocation at device address `ptr`, of at least `len` bytes.
    pub(crate) fn exported_at(&self, ptr: u64, len: u64) -> Option<Arc<Allocation>> {
        let exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        exported
            .iter()
            .filter_map(Weak::upgrade)
            .find(|a| a.ptr as u64 == ptr && a.len() as u64 >= len)
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceShared")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

/// The HIP platform: the runtime, initialised, with at least one device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_hip::HipPlatform::open(&Config::default()) {
///     Ok(hip) => {
///         println!("{}: {} device(s)", hip.name(), hip.devices().len());
///         hip.deinit()?;
///     }
///     Err(Error::DriverNotFound { library, reason, .. }) => {
///         println!("no HIP ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub struct HipPlatform {
    driver: Arc<ffi::Driver>,
    /// One per device, in the runtime's order; taken by `deinit`.
    devices: Mutex<Option<Vec<Arc<DeviceShared>>>>,
    name: String,
}

impl std::fmt::Debug for HipPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipPlatform")
            .field("name", &self.name)
            .field("library", &self.driver.library())
            .finish()
    }
}

/// A HIP device. It holds the runtime library open for as long as it lives; its
/// `ordinal()` is `hipSetDevice`'s argument.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(hip) = offload_hip::HipPlatform::open(&Config::default()) else {
///     return; // no HIP device on this machine
/// };
/// for dev in hip.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub struct HipDevice {
    shared: Arc<DeviceShared>,
}

impl HipDevice {
    /// The device's position in the runtime's order.
    ///
    /// ```
    /// fn first(d: &offload_hip::HipDevice) -> bool { d.ordinal() == 0 }
    /// ```
    pub fn ordinal(&self) -> u32 {
        u32::try_from(self.shared.ordinal).unwrap_or(0)
    }
}

impl std::fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipDevice")
            .field("ordinal", &self.shared.ordinal)
            .finish()
    }
}

impl hal::Platform for HipPlatform {
    type Device = HipDevice;
    const KIND: BackendKind = BACKEND;

    /// Loads the runtime, `hipInit(0)`, counts the devices. No runtime, a failing `hipInit`
    /// or no device is `DriverNotFound`.
    fn open(_config: &Config) -> Result<Self> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        if let Err(init) = driver.init() {
            // ROCm 5 fails hipInit with hipErrorInvalidDevice when there is no GPU;
            // hipGetDeviceCount then says hipErrorNoDevice. Report both.
            let reason = match driver.device_count() {
                Err(count) => format!("{init}; {count}"),
                Ok(_) => init.to_string(),
            };
            return Err(driver_not_found(BACKEND, driver.library(), reason));
        }
        let on_init = driver_error("Offload::init");
        let count = match driver.device_count() {
            Ok(count) => count,
            Err(failure) if failure.code == i64::from(HIP_ERROR_NO_DEVICE) => {
                return Err(driver_not_found(
                    BACKEND,
                    driver.library(),
                    failure.to_string(),
                ));
            }
            Err(failure) => return Err(on_init(failure)),
        };
        if count <= 0 {
            return Err(driver_not_found(
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
        let driver = Arc::new(driver);
        let devices = (0..count)
            .map(|ordinal| {
                Arc::new(DeviceShared {
                    limits: read_limits(&driver, ordinal),
                    driver: driver.clone(),
                    ordinal,
                    live: AtomicUsize::new(0),
                    mappings: Mutex::default(),
                    exported: Mutex::default(),
                })
            })
            .collect();
        COUNTERS.opened();
        Ok(HipPlatform {
            driver,
            devices: Mutex::new(Some(devices)),
            name,
        })
    }

    /// `HIP <runtime version>`, e.g. `HIP 6.2.41133`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<HipDevice> {
        let devices = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        devices
            .iter()
            .flatten()
            .map(|shared| HipDevice {
                shared: shared.clone(),
            })
            .collect()
    }

    /// HIP has no global deinitialisation: counts it, and reports the buffers still alive
    /// (a leak; they stay valid and are freed when dropped).
    fn deinit(&self) -> Result<()> {
        let taken = self
            .devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(devices) = taken else {
            return Ok(()); // already deinitialised
        };
        COUNTERS.deinitialised();
        let leaked: usize = devices.iter().map(|d| d.live()).sum();
        drop(devices);
        if leaked > 0 {
            return Err(Error::Driver {
                backend: BACKEND,
                call: "Offload::shutdown",
                code: leaked as i64,
                message: format!(
                    "{leaked} HIP objects were still alive at deinit (they are freed when \
                     they are dropped)"
                ),
            });
        }
        Ok(())
    }
}

fn info(shared: &DeviceShared) -> Result<DeviceInfo> {
    let driver = &shared.driver;
    let ordinal = shared.ordinal;
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

impl hal::Device for HipDevice {
    type Buffer = HipBuffer;
    type Program = HipModule;
    type Queue = HipQueue;
    type Event = HipEvent;

    fn info(&self) -> Result<DeviceInfo> {
        info(&self.shared)
    }

    /// `Device`: `hipMalloc`; `Host`: page-locked `hipHostMalloc`; `Shared`:
    /// `hipMallocManaged`.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<HipBuffer> {
        HipBuffer::new(&self.shared, size, kind, false, "Device::alloc")
    }

    fn free(&self, buffer: HipBuffer) -> Result<()> {
        buffer.free()
    }

    fn read(&self, buffer: &HipBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.read(offset, dst)
    }

    fn write(&self, buffer: &mut HipBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.write(offset, src)
    }

    fn fill(&self, buffer: &mut HipBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.fill(offset, len, value)
    }

    fn copy(
        &self,
        src: &HipBuffer,
        src_offset: usize,
        dst: &mut HipBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        dst.copy_from(dst_offset, src, src_offset, len)
    }

    fn copy_within(&self, buffer: &mut HipBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        buffer.copy_within(so, d, len)
    }

    /// Pinned (`MemKind::Host`) and managed (`MemKind::Shared`) memory; device memory is
    /// `Unsupported`.
    fn with_mapped(&self, buffer: &mut HipBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(buffer.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<HipModule> {
        program::load(&self.shared, image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(image, "Device::validate").map(drop)
    }

    fn queue(&self) -> Result<HipQueue> {
        HipQueue::new(&self.shared)
    }

    /// Waits for the stream, then destroys it (L4).
    fn destroy_queue(&self, queue: HipQueue) -> Result<()> {
        let synced = queue.sync();
        drop(queue);
        synced
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        queue: &HipQueue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, HipBuffer>],
    ) -> Result<()> {
        queue.launch(kernel, dims, args)
    }

    fn enqueue_write(
        &self,
        queue: &HipQueue,
        buffer: &HipBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        queue.enqueue_write(buffer, offset, data)
    }

    fn enqueue_fill(
        &self,
        queue: &HipQueue,
        buffer: &HipBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        queue.enqueue_fill(buffer, offset, len, pattern)
    }

    fn enqueue_copy(
        &self,
        queue: &HipQueue,
        src: &HipBuffer,
        src_offset: usize,
        dst: &HipBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        queue.enqueue_copy(src, src_offset, dst, dst_offset, len)
    }

    /// `hipLaunchHostFunc`: `f` runs on a runtime thread and must not call offload.
    fn enqueue_host_fn(&self, queue: &HipQueue, f: HostFn) -> Result<()> {
        queue.enqueue_host_fn(f)
    }

    fn sync(&self, queue: &HipQueue) -> Result<()> {
        queue.sync()
    }

    fn is_idle(&self, queue: &HipQueue) -> Result<bool> {
        queue.is_idle()
    }

    fn record(&self, queue: &HipQueue) -> Result<HipEvent> {
        queue.record()
    }

    fn wait_event(&self, queue: &HipQueue, event: &HipEvent) -> Result<()> {
        queue.wait_event(event)
    }

    fn sync_event(&self, event: &HipEvent) -> Result<()> {
        event.sync()
    }

    fn is_complete(&self, event: &HipEvent) -> Result<bool> {
        event.is_complete()
    }

    fn elapsed(&self, start: &HipEvent, end: &HipEvent) -> Result<Duration> {
        end.since(start)
    }

    fn destroy_event(&self, event: HipEvent) -> Result<()> {
        drop(event);
        Ok(())
    }
}

/// Device memory shared with other processes through HIP IPC (see ipc.rs).
impl hal::Ipc for HipDevice {
    /// `hipDeviceGetUuid`; where the runtime lacks it, `offload-hip` and the ordinal
    /// (enough to tell this machine's devices apart in processes that see the same ones).
    fn uuid(&self) -> [u8; 16] {
        let shared = &self.shared;
        let uuid = shared
            .driver
            .device(shared.ordinal)
            .ok()
            .and_then(|device| shared.driver.uuid(device));
        uuid.unwrap_or_else(|| {
            let mut uuid = *b"offload-hip\0\0\0\0\0";
            uuid[15] = shared.ordinal as u8;
            uuid
        })
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<HipBuffer> {
        HipBuffer::new(&self.shared, size, kind, true, "Device::alloc_exportable")
    }

    fn export(&self, buffer: &HipBuffer) -> Result<hal::Exported> {
        crate::ipc::export(buffer)
    }

    fn import(&self, exported: hal::Exported) -> Result<HipBuffer> {
        crate::ipc::import(&self.shared, exported)
    }
}

impl hal::Program for HipModule {
    type Kernel = HipKernel;

    fn kernel(&self, name: &str) -> Result<HipKernel> {
        HipModule::kernel(self, name)
    }

    fn params(kernel: &HipKernel) -> &[ParamKind] {
        &kernel.params
    }

    fn kernels(&self) -> Vec<String> {
        HipModule::kernels(self)
    }

    fn globals(&self) -> Vec<String> {
        HipModule::globals(self)
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        self.global_info(name)
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        HipModule::read_global(self, name, offset, dst)
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        HipModule::write_global(self, name, offset, src)
    }

    /// Unloads now, or with the last kernel of it, after its queued launches.
    fn unload(self) -> Result<()> {
        let waited = self.inner.uses.wait("Module::unload");
        drop(self);
        waited
    }
}
