//! The Level Zero platform and its devices: the loader opened and initialised, one context
//! per driver ([`ContextShared`]), a record per device ([`DeviceShared`]) that every object
//! made on it holds, and the `hal::Device` and `hal::Ipc` impls over them: the host's
//! copies in and out of buffers are here; the buffers themselves are memory.rs's, programs
//! (and their `hal::Program` impl) program.rs's, queues queue.rs's, IPC ipc.rs's.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use offload_core::hal::{self, ImageFormat};
use offload_core::{BackendKind, Config, DeviceInfo, Error, MemKind, Result};
use offload_driver::{Failure, LaunchLimits, driver_not_found, no_device};

use crate::ffi::{self, ContextHandle, DeviceHandle, DriverHandle, ListHandle};
use crate::memory::ZeBuffer;
use crate::program::{self, ZeModule};
use crate::queue::{ZeEvent, ZeQueue};
use crate::{BACKEND, COUNTERS, LIBRARY};

/// A failed driver call as an offload error (naming no call: the handle of the user's call
/// names it).
pub(crate) fn driver_error(failure: Failure) -> Error {
    failure.into_error(BackendKind::Ze, "")
}

/// PCI vendor id of Intel.
const INTEL: u32 = 0x8086;

/// One driver's context: every device of the driver, and every object made on them, use
/// it. Destroyed (`zeContextDestroy`) when the last of them is gone.
pub(crate) struct ContextShared {
    pub(crate) driver: Arc<ffi::Driver>,
    pub(crate) handle: ContextHandle,
}

impl Drop for ContextShared {
    fn drop(&mut self) {
        // SAFETY: the context is live and destroyed once, here: everything made in it held
        // this record, so nothing of it is left.
        let _ = unsafe { self.driver.context_destroy(self.handle) };
    }
}

/// One device: its context, its handle, its limits, the synchronous command list that the
/// host's copies go through, and the count of objects made on it.
pub(crate) struct DeviceShared {
    pub(crate) context: Arc<ContextShared>,
    pub(crate) handle: DeviceHandle,
    pub(crate) ordinal: u32,
    /// What launches are checked against, read once.
    pub(crate) limits: LaunchLimits,
    /// `ze_device_properties_t::uuid`.
    pub(crate) uuid: [u8; 16],
    /// Nanoseconds per timestamp tick.
    pub(crate) timer_ns: u64,
    /// A synchronous immediate command list for the host's copies and fills, made at the
    /// first one; its lock serialises its use (command lists are not thread-safe).
    copier: Mutex<Option<ListHandle>>,
    /// Buffers, modules, queues and events made on it and not yet destroyed.
    live: AtomicUsize,
    /// The IPC mappings open on it.
    pub(crate) mappings: Mutex<Vec<std::sync::Weak<crate::ipc::Mapping>>>,
}

impl DeviceShared {
    pub(crate) fn driver(&self) -> &ffi::Driver {
        &self.context.driver
    }

    pub(crate) fn context(&self) -> ContextHandle {
        self.context.handle
    }

    /// Counts an object made on the device.
    pub(crate) fn made(&self) {
        self.live.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts an object destroyed.
    pub(crate) fn destroyed(&self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Runs `f` with the device's synchronous command list (made at the first use), which
    /// nothing else uses meanwhile: every append on it returns once its work has run.
    pub(crate) fn with_copier<T>(
        &self,
        f: impl FnOnce(ListHandle) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let mut copier: MutexGuard<'_, Option<ListHandle>> =
            self.copier.lock().unwrap_or_else(PoisonError::into_inner);
        let list = match *copier {
            Some(list) => list,
            None => {
                let list = self
                    .driver()
                    .list_create(self.context(), self.handle, true)
                    .map_err(driver_error)?;
                *copier = Some(list);
                list
            }
        };
        f(list).map_err(driver_error)
    }

    /// Copies `len` bytes from `src` to `dst` on the device's synchronous list: done when
    /// it returns.
    ///
    /// # Safety
    ///
    /// `dst` and `src` are `len` bytes of memory the device can reach (allocations of its
    /// context, or host memory), alive, not overlapping, and not otherwise accessed until
    /// the call returns (no queued work on them may still run).
    pub(crate) unsafe fn copy_now(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
    ) -> Result<()> {
        self.with_copier(|list| {
            // SAFETY: the caller's promise; the list is synchronous and used by nothing else
            // meanwhile (with_copier).
            unsafe { self.driver().append_copy(list, dst, src, len, None, &[]) }
        })
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        let copier = self
            .copier
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(list) = copier {
            // SAFETY: the list is live, destroyed once, here; it is synchronous, so no work
            // on it is pending.
            let _ = unsafe { self.context.driver.list_destroy(list) };
        }
    }
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceShared")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

/// The Level Zero platform: the loader, initialised, with its drivers' devices (at least
/// one), and one context per driver.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_ze::ZePlatform::open(&Config::default()) {
///     Ok(ze) => {
///         println!("{}: {} device(s)", ze.name(), ze.devices().len());
///         ze.deinit()?;
///     }
///     Err(
///         Error::DriverNotFound { library, reason, .. } | Error::NoDevice { library, reason, .. },
///     ) => {
///         println!("no Level Zero ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub struct ZePlatform {
    driver: Arc<ffi::Driver>,
    /// One per device, drivers in the loader's order; taken by `deinit`.
    devices: Mutex<Option<Vec<Arc<DeviceShared>>>>,
    name: String,
}

impl std::fmt::Debug for ZePlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZePlatform")
            .field("name", &self.name)
            .field("library", &self.driver.library())
            .finish()
    }
}

/// A Level Zero device. It holds its driver's context (and the loader) for as long as it
/// lives; its `ordinal()` is its position among the platform's devices: the drivers in the
/// loader's order, each driver's devices in its order.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else {
///     return; // no Level Zero device on this machine
/// };
/// for dev in ze.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub struct ZeDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl ZeDevice {
    /// The device's position among the platform's devices.
    ///
    /// ```
    /// fn first(d: &offload_ze::ZeDevice) -> bool { d.ordinal() == 0 }
    /// ```
    pub fn ordinal(&self) -> u32 {
        self.shared.ordinal
    }
}

impl std::fmt::Debug for ZeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeDevice")
            .field("ordinal", &self.shared.ordinal)
            .finish()
    }
}

fn limits(driver: &ffi::Driver, device: DeviceHandle) -> LaunchLimits {
    // Optional properties: without them the limits fall back to the defaults below.
    let compute = driver.compute(device).ok();
    let or = |v: u32, fallback: u32| if v > 0 { v } else { fallback };
    LaunchLimits {
        max_block_threads: compute.map_or(256, |c| or(c.max_group_threads, 256)),
        max_block: compute.map_or([256, 256, 256], |c| c.max_group.map(|v| or(v, 1))),
        max_grid: compute.map_or([65535; 3], |c| c.max_groups.map(|v| or(v, 65535))),
        max_shared_memory: compute.map_or(0, |c| c.shared_memory),
        attributes: ("maxGroupSize*", "maxGroupCount*"),
    }
}

impl hal::Platform for ZePlatform {
    type Device = ZeDevice;
    const KIND: BackendKind = BACKEND;

    /// Loads the loader, `zeInit(0)`, lists the drivers and their devices and makes one
    /// context per driver that has devices.
    fn open(_config: &Config) -> Result<Self> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        if let Err(init) = driver.init() {
            // The loader answers this when it could initialise no driver (none installed,
            // or none that found its hardware).
            let reason = if init.code == i64::from(ffi::ZE_RESULT_ERROR_UNINITIALIZED) {
                format!("{init}: no Level Zero driver could be initialised")
            } else {
                init.to_string()
            };
            return Err(driver_not_found(BACKEND, LIBRARY, reason));
        }
        let on_init = driver_error;
        let drivers = driver.drivers().map_err(&on_init)?;
        let Some(&first) = drivers.first() else {
            return Err(driver_not_found(BACKEND, LIBRARY, "zeDriverGet: 0 drivers"));
        };
        let mut found: Vec<(DriverHandle, Vec<DeviceHandle>)> = Vec::new();
        for &each in &drivers {
            let devices = driver.devices(each).map_err(&on_init)?;
            if !devices.is_empty() {
                found.push((each, devices));
            }
        }
        if found.is_empty() {
            return Err(no_device(
                BACKEND,
                LIBRARY,
                format!("zeDeviceGet: 0 devices on {} driver(s)", drivers.len()),
            ));
        }
        // `Level Zero <API version of the first driver>`, e.g. `Level Zero 1.3`.
        let name = match driver.api_version(first) {
            Some((major, minor)) => format!("Level Zero {major}.{minor}"),
            None => "Level Zero".into(),
        };
        let driver = Arc::new(driver);
        let mut devices = Vec::new();
        for (each, handles) in found {
            // Made here, destroyed with the last object of it (ContextShared's drop): on a
            // later failure the ones made so far go with `devices`.
            let context = Arc::new(ContextShared {
                handle: driver.context_create(each).map_err(&on_init)?,
                driver: driver.clone(),
            });
            for handle in handles {
                // Optional: a device that will not describe itself gets generic words and values.
                let description = driver.describe(handle).ok();
                devices.push(Arc::new(DeviceShared {
                    context: context.clone(),
                    handle,
                    ordinal: devices.len() as u32,
                    limits: limits(&driver, handle),
                    uuid: description.as_ref().map_or([0; 16], |d| d.uuid),
                    timer_ns: description.as_ref().map_or(1, |d| d.timer_ns.max(1)),
                    copier: Mutex::new(None),
                    live: AtomicUsize::new(0),
                    mappings: Mutex::default(),
                }));
            }
        }
        COUNTERS.opened();
        Ok(ZePlatform {
            driver,
            devices: Mutex::new(Some(devices)),
            name,
        })
    }

    /// `Level Zero <API version>`, e.g. `Level Zero 1.3`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<ZeDevice> {
        let devices = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        devices
            .iter()
            .flatten()
            .map(|shared| ZeDevice {
                shared: shared.clone(),
            })
            .collect()
    }

    /// Level Zero has no deinitialisation (nothing undoes `zeInit`): counts it, lets go of
    /// the devices (the contexts are destroyed with the last object made in them), and
    /// reports the objects still alive (a leak; they stay valid and are freed when dropped).
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
                call: "",
                code: leaked as i64,
                message: format!(
                    "{leaked} Level Zero objects were still alive at deinit (they are freed \
                     when they are dropped)"
                ),
            });
        }
        Ok(())
    }

    /// SPIR-V (either byte order) and Intel GPU native binaries.
    fn may_run(image: &[u8]) -> bool {
        matches!(
            ImageFormat::of(image),
            ImageFormat::Spirv
                | ImageFormat::SpirvSwapped
                | ImageFormat::Elf {
                    machine: crate::program::EM_INTELGT
                }
        )
    }
}

fn info(shared: &DeviceShared) -> Result<DeviceInfo> {
    let driver = shared.driver();
    let failed = driver_error;
    let description = driver.describe(shared.handle).map_err(&failed)?;
    let mut info = DeviceInfo::new(
        description.name,
        match description.vendor_id {
            INTEL => "Intel".into(),
            other => format!("PCI vendor {other:#06x}"),
        },
        BACKEND,
        driver.total_memory(shared.handle).map_err(&failed)?,
        u32::try_from(description.execution_units).unwrap_or(u32::MAX),
    );
    info.vendor_id = Some(description.vendor_id);
    let limits = &shared.limits;
    info.max_block_threads = Some(limits.max_block_threads);
    info.max_block = Some(limits.max_block);
    info.max_grid = Some(limits.max_grid);
    info.max_alloc = (description.max_alloc > 0).then_some(description.max_alloc);
    // Dynamic work-group memory is not offered (see `launch`): none for launches.
    info.shared_memory = Some(0);
    info.address_bits = Some(64);
    info.clock_mhz = (description.clock_mhz > 0).then_some(description.clock_mhz);
    Ok(info)
}

impl hal::Device for ZeDevice {
    type Buffer = ZeBuffer;
    type Program = ZeModule;
    type Queue = ZeQueue;
    type Event = ZeEvent;

    fn info(&self) -> Result<DeviceInfo> {
        info(&self.shared)
    }

    /// `Device`: `zeMemAllocDevice`; `Host`: `zeMemAllocHost`; `Shared`: `zeMemAllocShared`.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<ZeBuffer> {
        ZeBuffer::new(&self.shared, size, kind, false)
    }

    /// The USM pointer (what SYCL and oneAPI libraries use).
    fn address(&self, buffer: &ZeBuffer) -> Result<Option<u64>> {
        Ok(Some(buffer.alloc.ptr as u64))
    }

    /// USM memory of this device's context another library allocated.
    #[allow(unsafe_code)]
    unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: hal::Owner,
    ) -> Result<Option<ZeBuffer>> {
        let ptr = std::ptr::with_exposed_provenance_mut::<c_void>(address as usize);
        Ok(Some(ZeBuffer::adopted(&self.shared, ptr, len, kind, owner)))
    }

    /// Lets go of the memory: freed once no queued work uses it.
    fn free(&self, buffer: ZeBuffer) -> Result<()> {
        if Arc::strong_count(&buffer.alloc) == 1 {
            // The last user: wait here, so a failure is reported (the drop only ignores it).
            buffer.alloc.uses.wait()?;
        }
        drop(buffer);
        Ok(())
    }

    fn read(&self, buffer: &ZeBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        let src = buffer.at(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        buffer.alloc.uses.wait()?;
        // SAFETY: the range lies inside this live allocation (checked); no queued work on it
        // runs (waited); `dst` is host memory, borrowed for the call.
        unsafe {
            buffer
                .alloc
                .device
                .copy_now(dst.as_mut_ptr().cast(), src, dst.len())
        }
    }

    fn write(&self, buffer: &mut ZeBuffer, offset: usize, src: &[u8]) -> Result<()> {
        let dst = buffer.at(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        buffer.alloc.uses.wait()?;
        // SAFETY: as in `read`; `&mut ZeBuffer` excludes every other host access.
        unsafe {
            buffer
                .alloc
                .device
                .copy_now(dst, src.as_ptr().cast(), src.len())
        }
    }

    fn fill(&self, buffer: &mut ZeBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        let dst = buffer.at(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        buffer.alloc.uses.wait()?;
        let device = &buffer.alloc.device;
        device.with_copier(|list| {
            // SAFETY: as in `write`.
            unsafe {
                device
                    .driver()
                    .append_fill(list, dst, &[value], len, None, &[])
            }
        })
    }

    /// From another buffer of the same device (a copy inside one allocation, through two
    /// handles of it, is `copy_within`'s).
    fn copy(
        &self,
        src: &ZeBuffer,
        src_offset: usize,
        dst: &mut ZeBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = src.at(src_offset, len)?;
        let to = dst.at(dst_offset, len)?;
        if !Arc::ptr_eq(&dst.alloc.device, &src.alloc.device) {
            return Err(Error::InvalidArgument {
                call: "",
                reason: "the ze buffers are on different devices".into(),
            });
        }
        if len == 0 {
            return Ok(());
        }
        if Arc::ptr_eq(&dst.alloc, &src.alloc) {
            return self.copy_within(dst, src_offset, dst_offset, len);
        }
        src.alloc.uses.wait()?;
        dst.alloc.uses.wait()?;
        // SAFETY: both ranges lie inside live allocations of this device (checked); no queued
        // work on either runs (waited); they are different allocations, so they do not
        // overlap.
        unsafe { dst.alloc.device.copy_now(to, from, len) }
    }

    /// Overlapping ranges are staged through the host.
    fn copy_within(
        &self,
        buffer: &mut ZeBuffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = buffer.at(src_offset, len)?;
        let to = buffer.at(dst_offset, len)?;
        if len == 0 || from == to {
            return Ok(());
        }
        if src_offset.abs_diff(dst_offset) < len {
            let mut staged = vec![0u8; len];
            self.read(buffer, src_offset, &mut staged)?;
            return self.write(buffer, dst_offset, &staged);
        }
        buffer.alloc.uses.wait()?;
        // SAFETY: both ranges lie inside this live allocation (checked) and do not overlap
        // (checked above); no queued work on it runs (waited).
        unsafe { buffer.alloc.device.copy_now(to, from, len) }
    }

    /// Host (`zeMemAllocHost`) and shared (`zeMemAllocShared`) memory; device memory and
    /// imports are `Unsupported`.
    /// The queued work on the buffer: a queue's later work waits for its host functions,
    /// which may use this very buffer (L7).
    fn pending(&self, buffer: &ZeBuffer) -> Option<hal::Pending> {
        buffer.alloc.uses.pending()
    }

    fn with_mapped(&self, buffer: &mut ZeBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(buffer.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<ZeModule> {
        program::load(&self.shared, image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(image).map(drop)
    }

    fn queue(&self) -> Result<ZeQueue> {
        ZeQueue::new(&self.shared)
    }
}

/// Device memory shared with other processes through Level Zero IPC (see ipc.rs).
impl hal::Ipc for ZeDevice {
    /// `ze_device_properties_t::uuid`.
    fn uuid(&self) -> [u8; 16] {
        self.shared.uuid
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<ZeBuffer> {
        ZeBuffer::new(&self.shared, size, kind, true)
    }

    fn export(&self, buffer: &ZeBuffer) -> Result<hal::Exported> {
        crate::ipc::export(buffer)
    }

    fn import(&self, exported: hal::Exported) -> Result<ZeBuffer> {
        crate::ipc::import(&self.shared, exported)
    }
}
