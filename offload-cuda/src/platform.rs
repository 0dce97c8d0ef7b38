//! The CUDA platform and its devices: the `hal` traits over the driver, each call
//! delegating to the module that owns its objects (memory.rs, queue.rs, program.rs,
//! ipc.rs).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use offload_core::hal::{self, Exported, HostFn, KernelOf};
use offload_core::{
    BackendKind, CompilerId, Config, DeviceInfo, Dims, Error, GlobalInfo, KernelArg, Language,
    MemKind, ParamKind, Result, Source,
};
use offload_driver::driver_not_found;

use crate::context::{Context, driver_error};
use crate::ffi::{self, CUDA_ERROR_NO_DEVICE, sys};
use crate::memory::CudaBuffer;
use crate::program::{self, CudaKernel, CudaModule};
use crate::queue::{CudaEvent, CudaQueue};
use crate::{BACKEND, COUNTERS, LIBRARY};

/// The CUDA platform: the driver, initialised, with a retained primary context per device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::{Config, Error};
/// match offload_cuda::CudaPlatform::open(&Config::default()) {
///     Ok(cuda) => {
///         println!("{}: {} device(s)", cuda.name(), cuda.devices().len());
///         cuda.deinit()?;
///     }
///     Err(Error::DriverNotFound { library, reason, .. }) => {
///         println!("no CUDA ({library}): {reason}")
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
pub struct CudaPlatform {
    driver: Arc<ffi::Driver>,
    /// One per device, in the driver's order; taken by `deinit`.
    contexts: Mutex<Option<Vec<Arc<Context>>>>,
    name: String,
}

impl std::fmt::Debug for CudaPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPlatform")
            .field("name", &self.name)
            .field("library", &self.driver.library())
            .finish()
    }
}

/// A CUDA device, with its primary context.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else {
///     return; // no CUDA on this machine
/// };
/// for dev in cuda.devices() {
///     println!("device {}", dev.ordinal());
/// }
/// ```
pub struct CudaDevice {
    ordinal: u32,
    context: Arc<Context>,
}

impl CudaDevice {
    /// The device's position in the driver's order (`cuDeviceGet`'s argument).
    ///
    /// ```
    /// fn first(d: &offload_cuda::CudaDevice) -> bool { d.ordinal() == 0 }
    /// ```
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

impl hal::Platform for CudaPlatform {
    type Device = CudaDevice;
    const KIND: BackendKind = BACKEND;

    /// Loads the driver, `cuInit(0)`, counts the devices and retains each one's primary
    /// context. No driver, a failing `cuInit` or no device is `DriverNotFound`.
    fn open(_config: &Config) -> Result<Self> {
        let driver = ffi::Driver::open().map_err(|e| e.into_error(BACKEND))?;
        driver
            .init()
            .map_err(|failure| driver_not_found(BACKEND, LIBRARY, failure.to_string()))?;
        let on_init = driver_error("Offload::init");
        let count = match driver.device_count() {
            Ok(count) => count,
            Err(failure) if failure.code == i64::from(CUDA_ERROR_NO_DEVICE) => {
                return Err(driver_not_found(BACKEND, LIBRARY, failure.to_string()));
            }
            Err(failure) => return Err(on_init(failure)),
        };
        if count <= 0 {
            return Err(driver_not_found(
                BACKEND,
                LIBRARY,
                format!("cuDeviceGetCount: {count} devices"),
            ));
        }
        let name = match driver.driver_version() {
            Some(v) => format!("CUDA {}.{}", v / 1000, v % 1000 / 10),
            None => "CUDA".into(),
        };
        let driver = Arc::new(driver);
        let mut contexts = Vec::new();
        for ordinal in 0..count {
            let device = driver.device(ordinal).map_err(&on_init)?;
            // A failure drops the contexts retained so far, which releases them.
            contexts.push(Arc::new(Context::retain(driver.clone(), device)?));
        }
        COUNTERS.opened();
        Ok(CudaPlatform {
            driver,
            contexts: Mutex::new(Some(contexts)),
            name,
        })
    }

    /// `CUDA <driver version>`, e.g. `CUDA 12.4`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<CudaDevice> {
        let contexts = self.contexts.lock().unwrap_or_else(PoisonError::into_inner);
        contexts
            .iter()
            .flatten()
            .zip(0..)
            .map(|(context, ordinal)| CudaDevice {
                ordinal,
                context: context.clone(),
            })
            .collect()
    }

    /// Lets go of the primary contexts: each is released now, or with the last object
    /// still made in it, which is reported as a leak.
    fn deinit(&self) -> Result<()> {
        let taken = self
            .contexts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(contexts) = taken else {
            return Ok(()); // already deinitialised
        };
        COUNTERS.deinitialised();
        let leaked: usize = contexts.iter().map(|c| c.live()).sum();
        drop(contexts);
        if leaked > 0 {
            return Err(Error::Driver {
                backend: BACKEND,
                call: "Offload::shutdown",
                code: leaked as i64,
                message: format!(
                    "{leaked} CUDA objects were still alive at deinit (their primary contexts \
                     stay retained until they are gone)"
                ),
            });
        }
        Ok(())
    }
}

fn info(context: &Context) -> Result<DeviceInfo> {
    let driver = &context.driver;
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

impl hal::Device for CudaDevice {
    type Buffer = CudaBuffer;
    type Program = CudaModule;
    type Queue = CudaQueue;
    type Event = CudaEvent;

    fn info(&self) -> Result<DeviceInfo> {
        info(&self.context)
    }

    /// `Device`: `cuMemAlloc`; `Host`: page-locked `cuMemAllocHost`; `Shared`:
    /// `cuMemAllocManaged`.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<CudaBuffer> {
        CudaBuffer::new(&self.context, size, kind, false, "Device::alloc")
    }

    fn free(&self, buffer: CudaBuffer) -> Result<()> {
        buffer.free()
    }

    fn read(&self, buffer: &CudaBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.read(offset, dst)
    }

    fn write(&self, buffer: &mut CudaBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.write(offset, src)
    }

    fn fill(&self, buffer: &mut CudaBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.fill(offset, len, value)
    }

    fn copy(
        &self,
        src: &CudaBuffer,
        src_offset: usize,
        dst: &mut CudaBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        dst.copy_from(dst_offset, src, src_offset, len)
    }

    fn copy_within(&self, buffer: &mut CudaBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        buffer.copy_within(so, d, len)
    }

    /// Pinned (`MemKind::Host`) and managed (`MemKind::Shared`) memory; device memory is
    /// `Unsupported`.
    fn with_mapped(&self, buffer: &mut CudaBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(buffer.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<CudaModule> {
        program::load(&self.context, image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(&self.context, image, "Device::validate").map(drop)
    }

    /// CUDA C++: `nvrtc <version>` for `compute_<XY>` (see nvrtc.rs); a missing NVRTC is
    /// `Error::Compile` naming the libraries tried. No other language.
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        match language {
            Language::Cuda => crate::nvrtc::compiler_id(self.context.limits.capability).map(Some),
            _ => Ok(None),
        }
    }

    /// CUDA C++ to PTX with NVRTC; `Error::Compile` with NVRTC's log on failure.
    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        match source.language() {
            Language::Cuda => crate::nvrtc::compile(source, self.context.limits.capability),
            other => Err(Error::Unsupported {
                backend: BACKEND,
                call: "Program::load",
                reason: format!("the cuda backend compiles no {other} source"),
            }),
        }
    }

    fn queue(&self) -> Result<CudaQueue> {
        CudaQueue::new(&self.context)
    }

    /// Waits for the stream, then destroys it (L4).
    fn destroy_queue(&self, queue: CudaQueue) -> Result<()> {
        let synced = queue.sync();
        drop(queue);
        synced
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        queue: &CudaQueue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, CudaBuffer>],
    ) -> Result<()> {
        queue.launch(kernel, dims, args)
    }

    fn enqueue_write(
        &self,
        queue: &CudaQueue,
        buffer: &CudaBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        queue.enqueue_write(buffer, offset, data)
    }

    fn enqueue_fill(
        &self,
        queue: &CudaQueue,
        buffer: &CudaBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        queue.enqueue_fill(buffer, offset, len, pattern)
    }

    fn enqueue_copy(
        &self,
        queue: &CudaQueue,
        src: &CudaBuffer,
        src_offset: usize,
        dst: &CudaBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        queue.enqueue_copy(src, src_offset, dst, dst_offset, len)
    }

    /// `cuLaunchHostFunc`: `f` runs on a driver thread and must not call offload.
    fn enqueue_host_fn(&self, queue: &CudaQueue, f: HostFn) -> Result<()> {
        queue.enqueue_host_fn(f)
    }

    fn sync(&self, queue: &CudaQueue) -> Result<()> {
        queue.sync()
    }

    fn is_idle(&self, queue: &CudaQueue) -> Result<bool> {
        queue.is_idle()
    }

    fn record(&self, queue: &CudaQueue) -> Result<CudaEvent> {
        queue.record()
    }

    fn wait_event(&self, queue: &CudaQueue, event: &CudaEvent) -> Result<()> {
        queue.wait_event(event)
    }

    fn sync_event(&self, event: &CudaEvent) -> Result<()> {
        event.sync()
    }

    fn is_complete(&self, event: &CudaEvent) -> Result<bool> {
        event.is_complete()
    }

    fn elapsed(&self, start: &CudaEvent, end: &CudaEvent) -> Result<Duration> {
        end.since(start)
    }

    fn destroy_event(&self, event: CudaEvent) -> Result<()> {
        drop(event);
        Ok(())
    }
}

/// Device memory shared with other processes through CUDA IPC (see ipc.rs).
impl hal::Ipc for CudaDevice {
    /// `cuDeviceGetUuid`; where the driver lacks it, the ordinal in an otherwise zero UUID
    /// (enough to tell this machine's devices apart).
    fn uuid(&self) -> [u8; 16] {
        self.context
            .driver
            .uuid(self.context.device)
            .unwrap_or_else(|| {
                let mut uuid = [0u8; 16];
                uuid[15] = self.ordinal as u8;
                uuid
            })
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<CudaBuffer> {
        CudaBuffer::new(&self.context, size, kind, true, "Device::alloc_exportable")
    }

    fn export(&self, buffer: &CudaBuffer) -> Result<Exported> {
        crate::ipc::export(buffer)
    }

    fn import(&self, exported: Exported) -> Result<CudaBuffer> {
        crate::ipc::import(&self.context, exported)
    }
}

impl hal::Program for CudaModule {
    type Kernel = CudaKernel;

    fn kernel(&self, name: &str) -> Result<CudaKernel> {
        CudaModule::kernel(self, name)
    }

    fn params(kernel: &CudaKernel) -> &[ParamKind] {
        &kernel.params
    }

    fn kernels(&self) -> Vec<String> {
        CudaModule::kernels(self)
    }

    fn globals(&self) -> Vec<String> {
        CudaModule::globals(self)
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        self.global_info(name)
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        CudaModule::read_global(self, name, offset, dst)
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        CudaModule::write_global(self, name, offset, src)
    }

    /// Unloads now, or with the last kernel of it, after its queued launches.
    fn unload(self) -> Result<()> {
        let waited = self.inner.uses.wait("Module::unload");
        drop(self);
        waited
    }
}
