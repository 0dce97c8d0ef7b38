//! The platform of a stream-based vendor API ([`StreamPlatform`]: the library, opened, with
//! a record per device) and its `hal::Platform` impl, and the devices' `hal::Device` impl:
//! allocation, the host's copies in and out of buffers, loading programs, making queues.
//! The device record and the device itself are shared.rs's; the buffers memory.rs's,
//! modules (and their `hal::Program` impl) program.rs's, queues and events queue.rs's, IPC
//! (the `hal::Ipc` impl) ipc.rs's.

use std::sync::{Arc, Mutex, PoisonError};

use offload_core::hal;
use offload_core::{
    BackendKind, CompilerId, Config, DeviceInfo, Error, Language, MemKind, Result, Source,
};

use super::memory::StreamBuffer;
use super::program::StreamModule;
use super::queue::{StreamEvent, StreamQueue};
use super::shared::{DeviceCore, OpenedApi, StreamDevice};
use super::{StreamApi, driver_error};

/// The platform of a stream-based vendor API: the library, initialised, with a record per
/// device (`CudaPlatform`, `HipPlatform`).
///
/// ```
/// use offload_core::hal::Platform;
/// fn names<A: offload_driver::StreamApi>(p: &offload_driver::StreamPlatform<A>) -> String {
///     format!("{}: {} device(s)", p.name(), p.devices().len())
/// }
/// ```
pub struct StreamPlatform<A: StreamApi> {
    api: Arc<A>,
    /// One per device, in the vendor's order; taken by `deinit`.
    devices: Mutex<Option<Vec<Arc<DeviceCore<A>>>>>,
    name: String,
}

impl<A: StreamApi> std::fmt::Debug for StreamPlatform<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&format!("{}Platform", A::WORDS.prefix))
            .field("name", &self.name)
            .field("library", &self.api.library())
            .finish()
    }
}

impl<A: StreamApi> hal::Platform for StreamPlatform<A> {
    type Device = StreamDevice<A>;
    const KIND: BackendKind = A::KIND;

    /// [`StreamApi::open`]: no library, a failing initialisation or no device is
    /// `DriverNotFound`.
    fn open(_config: &Config) -> Result<Self> {
        let OpenedApi { api, devices, name } = A::open()?;
        A::counters().opened();
        Ok(StreamPlatform {
            api,
            devices: Mutex::new(Some(devices)),
            name,
        })
    }

    /// The vendor and its version, e.g. `CUDA 12.4`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<StreamDevice<A>> {
        let devices = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        devices
            .iter()
            .flatten()
            .map(|core| StreamDevice { core: core.clone() })
            .collect()
    }

    /// Lets go of the devices: each is released now, or with the last object still made
    /// on it, which is reported as a leak.
    fn deinit(&self) -> Result<()> {
        let taken = self
            .devices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(devices) = taken else {
            return Ok(()); // already deinitialised
        };
        A::counters().deinitialised();
        for device in &devices {
            device.settle();
        }
        let leaked: usize = devices.iter().map(|d| d.live()).sum();
        drop(devices);
        if leaked > 0 {
            return Err(Error::Driver {
                backend: A::KIND,
                call: "",
                code: leaked as i64,
                message: format!(
                    "{leaked} {} objects were still alive at deinit ({})",
                    A::WORDS.title,
                    A::WORDS.leak
                ),
            });
        }
        Ok(())
    }

    /// [`StreamApi::may_run`].
    fn may_run(image: &[u8]) -> bool {
        A::may_run(image)
    }
}

impl<A: StreamApi> hal::Device for StreamDevice<A> {
    type Buffer = StreamBuffer<A>;
    type Program = StreamModule<A>;
    type Queue = StreamQueue<A>;
    type Event = StreamEvent<A>;

    fn info(&self) -> Result<DeviceInfo> {
        self.core.api().device_info(self.core.context())
    }

    /// `Device`: device memory; `Host`: page-locked host memory; `Shared`: managed memory.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<StreamBuffer<A>> {
        StreamBuffer::new(&self.core, size, kind, false)
    }

    /// The device pointer (`CUdeviceptr`, `hipDeviceptr_t`); for pinned host memory the
    /// host address, which is also its device address (unified addressing).
    fn address(&self, buffer: &StreamBuffer<A>) -> Result<Option<u64>> {
        Ok(Some(buffer.alloc.ptr))
    }

    /// Memory of this device another library allocated (a CuPy or PyTorch tensor's, by
    /// DLPack): device, pinned or managed, used through its address like offload's own.
    /// First waits for the legacy default stream, where that library's work (or DLPack's
    /// hand-over, for a consumer that names no stream) is ordered: offload's streams do
    /// not wait for it.
    #[allow(unsafe_code)]
    unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: hal::Owner,
    ) -> Result<Option<StreamBuffer<A>>> {
        self.core.settle();
        let buffer = StreamBuffer::adopted(&self.core, address, len, kind, owner);
        // The buffer's own waits: bind the device (no queued work on it yet), then the
        // legacy default stream (the one the synchronous copies run on).
        buffer.quiesce()?;
        buffer.settle()?;
        Ok(Some(buffer))
    }

    /// Lets go of the memory: freed once no buffer and no queued work uses it.
    fn free(&self, buffer: StreamBuffer<A>) -> Result<()> {
        let alloc = &buffer.alloc;
        alloc.core.settle();
        // While a host function runs the release waits for later (its drop keeps it).
        if Arc::strong_count(alloc) == 1 && !alloc.core.host_fn_running() {
            // The last user: wait here, so a failure is reported (the drop only ignores it).
            alloc.uses.wait()?;
        }
        drop(buffer);
        Ok(())
    }

    #[allow(unsafe_code)]
    fn read(&self, buffer: &StreamBuffer<A>, offset: usize, dst: &mut [u8]) -> Result<()> {
        let src = buffer.at(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        buffer.quiesce()?;
        // SAFETY: the range lies inside this live allocation (checked) of the bound
        // device; no queued work on it runs (waited).
        unsafe { buffer.alloc.core.api().memcpy_dtoh(dst, src) }.map_err(driver_error::<A>)
    }

    #[allow(unsafe_code)]
    fn write(&self, buffer: &mut StreamBuffer<A>, offset: usize, src: &[u8]) -> Result<()> {
        let dst = buffer.at(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        buffer.quiesce()?;
        // SAFETY: as in `read`; `&mut StreamBuffer` excludes every other host access.
        unsafe { buffer.alloc.core.api().memcpy_htod(dst, src) }.map_err(driver_error::<A>)?;
        buffer.settle()
    }

    #[allow(unsafe_code)]
    fn fill(&self, buffer: &mut StreamBuffer<A>, offset: usize, len: usize, v: u8) -> Result<()> {
        let dst = buffer.at(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        buffer.quiesce()?;
        // SAFETY: as in `write`.
        unsafe { buffer.alloc.core.api().memset_d8(dst, v, len) }.map_err(driver_error::<A>)?;
        buffer.settle()
    }

    /// From another buffer of the same device.
    #[allow(unsafe_code)]
    fn copy(
        &self,
        src: &StreamBuffer<A>,
        src_offset: usize,
        dst: &mut StreamBuffer<A>,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = src.at(src_offset, len)?;
        let to = dst.at(dst_offset, len)?;
        if !Arc::ptr_eq(&dst.alloc.core, &src.alloc.core) {
            return Err(Error::InvalidArgument {
                call: "",
                reason: format!("the {} buffers are on different devices", A::WORDS.name),
            });
        }
        if len == 0 {
            return Ok(());
        }
        src.alloc.uses.wait()?;
        dst.quiesce()?;
        // SAFETY: both ranges lie inside live allocations of the bound device (checked);
        // no queued work on either runs (waited); they are different allocations (`&mut
        // dst` and `&src` cannot alias) so the ranges do not overlap.
        unsafe { dst.alloc.core.api().memcpy_dtod(to, from, len) }.map_err(driver_error::<A>)?;
        dst.settle()
    }

    /// Overlapping ranges are staged through the host.
    #[allow(unsafe_code)]
    fn copy_within(
        &self,
        buffer: &mut StreamBuffer<A>,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let staged =
            crate::copy_within(self, buffer, src_offset, dst_offset, len, StreamBuffer::at);
        let Some((from, to)) = staged? else {
            return Ok(()); // nothing to copy, or staged through the host
        };
        buffer.quiesce()?;
        // SAFETY: both ranges lie inside this live allocation (checked) and do not overlap
        // (checked above); no queued work on it runs (waited).
        unsafe { buffer.alloc.core.api().memcpy_dtod(to, from, len) }.map_err(driver_error::<A>)?;
        buffer.settle()
    }

    /// Pinned (`MemKind::Host`) and managed (`MemKind::Shared`) memory; device memory is
    /// `Unsupported`.
    /// The queued work on the buffer: its queues' held work may wait for a host function
    /// that uses this very buffer (L7).
    fn pending(&self, b: &StreamBuffer<A>) -> Option<hal::Pending> {
        b.alloc.uses.pending()
    }

    fn with_mapped(&self, b: &mut StreamBuffer<A>, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(b.mapped_bytes()?);
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<StreamModule<A>> {
        super::program::load(&self.core, image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        super::program::validate(&self.core, image).map(drop)
    }

    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        self.core.api().compiler(self.core.context(), language)
    }

    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        self.core.api().compile(self.core.context(), source)
    }

    fn queue(&self) -> Result<StreamQueue<A>> {
        StreamQueue::new(&self.core)
    }
}
