//! Devices of a stream-based vendor API: the record every object made on a device holds
//! ([`DeviceCore`]: the API, the vendor's context, the launch limits, the count of live
//! objects, the IPC mappings and exportable allocations), the platform over them
//! ([`StreamPlatform`]) and its `hal::Platform`, `hal::Device` and `hal::Ipc` impls: the
//! host's copies in and out of buffers are here; the buffers themselves are memory.rs's,
//! modules (and their `hal::Program` impl) program.rs's, queues queue.rs's, IPC ipc.rs's.
//!
//! Every buffer, module, queue and event holds its device's record (an `Arc`), so the
//! vendor's release of the device ([`StreamApi::release`]: CUDA's primary context) can
//! never come before their destruction, whatever order a user drops things in: the
//! platform's `deinit` lets go of its own references and reports the objects still alive
//! (a leak), and the record goes with the last of them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use offload_core::hal::{self, Exported};
use offload_core::{
    BackendKind, CompilerId, Config, DeviceInfo, Error, Language, MemKind, Result, Source,
};

use super::ipc::Mapping;
use super::memory::Allocation;
use super::{StreamApi, StreamBuffer, StreamEvent, StreamModule, StreamQueue, driver_error};
use crate::LaunchLimits;

/// One device: the API, the vendor's context of it, its launch limits, and the count of
/// objects made on it.
pub struct DeviceCore<A: StreamApi> {
    api: Arc<A>,
    context: A::Context,
    ordinal: u32,
    limits: LaunchLimits,
    /// Buffers, modules, queues and events made on it and not yet destroyed.
    live: AtomicUsize,
    /// The IPC mappings open on it.
    pub(crate) mappings: Mutex<Vec<Weak<Mapping<A>>>>,
    /// Its exportable allocations, for imports of their handles in this same process.
    exported: Mutex<Vec<Weak<Allocation<A>>>>,
    /// Buffers and modules whose last handle went inside a host function, released at the
    /// next blocking call outside one ([`DeviceCore::settle`]).
    later: Mutex<Vec<Box<dyn Send>>>,
    /// Host functions of its queues running now (`HostThread::counting`).
    pub(crate) host_fns: Arc<AtomicUsize>,
}

impl<A: StreamApi> DeviceCore<A> {
    /// The record of device `ordinal`, whose vendor context is `context` (released with
    /// the record, [`StreamApi::release`]).
    ///
    /// # Safety
    ///
    /// `context` is a context of `api`'s device `ordinal` that `api.release` may release
    /// once, and nothing else releases.
    ///
    /// ```no_run
    /// fn first<A: offload_driver::StreamApi>(
    ///     api: std::sync::Arc<A>,
    ///     context: A::Context,
    ///     limits: offload_driver::LaunchLimits,
    /// ) -> offload_driver::DeviceCore<A> {
    ///     // SAFETY: (in a backend) the context was acquired for this record.
    ///     unsafe { offload_driver::DeviceCore::new(api, 0, context, limits) }
    /// }
    /// ```
    #[allow(unsafe_code)]
    pub unsafe fn new(
        api: Arc<A>,
        ordinal: u32,
        context: A::Context,
        limits: LaunchLimits,
    ) -> Self {
        DeviceCore {
            api,
            context,
            ordinal,
            limits,
            live: AtomicUsize::new(0),
            mappings: Mutex::default(),
            exported: Mutex::default(),
            later: Mutex::default(),
            host_fns: Arc::default(),
        }
    }

    /// The vendor API.
    ///
    /// ```
    /// fn api<A: offload_driver::StreamApi>(d: &offload_driver::DeviceCore<A>) -> &A { d.api() }
    /// ```
    pub fn api(&self) -> &A {
        &self.api
    }

    /// The vendor's context of the device.
    ///
    /// ```
    /// fn context<A: offload_driver::StreamApi>(d: &offload_driver::DeviceCore<A>) -> &A::Context {
    ///     d.context()
    /// }
    /// ```
    pub fn context(&self) -> &A::Context {
        &self.context
    }

    /// The device's position in the vendor's order.
    ///
    /// ```
    /// fn first<A: offload_driver::StreamApi>(d: &offload_driver::DeviceCore<A>) -> bool {
    ///     d.ordinal() == 0
    /// }
    /// ```
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// What launches are checked against.
    ///
    /// ```
    /// fn threads<A: offload_driver::StreamApi>(d: &offload_driver::DeviceCore<A>) -> u32 {
    ///     d.limits().max_block_threads
    /// }
    /// ```
    pub fn limits(&self) -> &LaunchLimits {
        &self.limits
    }

    /// Makes the device current on the calling thread.
    pub(crate) fn bind(&self) -> Result<()> {
        self.api.bind(&self.context).map_err(driver_error::<A>)
    }

    /// Makes the device current for a release in a destructor, which cannot report a
    /// failure: a failed bind is tried once more (a transient failure must not leak the
    /// object); only a bind that keeps failing (a lost device) leaves it unreleased.
    pub(crate) fn bind_to_release(&self) -> Result<()> {
        self.bind().or_else(|_| self.bind())
    }

    /// Whether a release now could wait for a host function: one runs on this thread, or
    /// one of the device's is running.
    pub(crate) fn host_fn_running(&self) -> bool {
        crate::running_host_fn().is_some() || self.host_fns.load(Ordering::Acquire) > 0
    }

    /// Keeps a last reference given back while a host function runs (L6) until
    /// [`DeviceCore::settle`]: a release waits for the queued work that uses the object, on
    /// its stream and behind its queue's gate, which may be the function's own queue or wait
    /// for the function (a thread it joins).
    pub(crate) fn keep_if_in_host_fn(&self, object: impl Send + 'static) {
        if self.host_fn_running() {
            self.keep(object);
        }
    }

    /// Keeps `object` until [`DeviceCore::settle`], whatever thread this is.
    pub(crate) fn keep(&self, object: impl Send + 'static) {
        self.later
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(object));
    }

    /// Releases what host functions gave back (outside one only); called by the calls that
    /// block anyway (sync, alloc, free, load) and at deinit.
    pub(crate) fn settle(&self) {
        if self.host_fn_running() {
            return;
        }
        let kept = std::mem::take(&mut *self.later.lock().unwrap_or_else(PoisonError::into_inner));
        drop(kept);
    }

    /// Counts an object made on the device.
    pub(crate) fn made(&self) {
        self.live.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts an object destroyed.
    pub(crate) fn destroyed(&self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }

    /// Objects made on the device and not yet destroyed.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Remembers an exportable allocation.
    pub(crate) fn exported(&self, alloc: &Arc<Allocation<A>>) {
        let mut exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        exported.retain(|a| a.strong_count() > 0);
        exported.push(Arc::downgrade(alloc));
    }

    /// The live exportable allocation at device address `ptr`, of at least `len` bytes.
    pub(crate) fn exported_at(&self, ptr: u64, len: u64) -> Option<Arc<Allocation<A>>> {
        let exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        exported
            .iter()
            .filter_map(Weak::upgrade)
            .find(|a| a.ptr == ptr && a.len() as u64 >= len)
    }
}

impl<A: StreamApi> Drop for DeviceCore<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: every object made on the device holds this record, so none is left; the
        // context is released once, here (`new`'s promise).
        unsafe { self.api.release(&self.context) };
    }
}

impl<A: StreamApi> std::fmt::Debug for DeviceCore<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceCore")
            .field("backend", &A::KIND)
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

/// An API [`StreamApi::open`] opened: the API, its devices in its order, and the
/// platform's name (`CUDA 12.4`).
///
/// ```
/// fn count<A: offload_driver::StreamApi>(o: &offload_driver::OpenedApi<A>) -> usize {
///     o.devices.len()
/// }
/// ```
pub struct OpenedApi<A: StreamApi> {
    /// The API, shared by every device.
    pub api: Arc<A>,
    /// The devices, at least one.
    pub devices: Vec<Arc<DeviceCore<A>>>,
    /// The platform's name.
    pub name: String,
}

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

/// A device of a stream-based vendor API (`CudaDevice`, `HipDevice`). It holds the library
/// open, and its device record, for as long as it lives.
///
/// ```
/// fn first<A: offload_driver::StreamApi>(d: &offload_driver::StreamDevice<A>) -> bool {
///     d.ordinal() == 0
/// }
/// ```
pub struct StreamDevice<A: StreamApi> {
    core: Arc<DeviceCore<A>>,
}

impl<A: StreamApi> StreamDevice<A> {
    /// The device's position in the vendor's order (`cuDeviceGet`'s, `hipSetDevice`'s
    /// argument).
    ///
    /// ```
    /// fn first<A: offload_driver::StreamApi>(d: &offload_driver::StreamDevice<A>) -> bool {
    ///     d.ordinal() == 0
    /// }
    /// ```
    pub fn ordinal(&self) -> u32 {
        self.core.ordinal
    }
}

impl<A: StreamApi> std::fmt::Debug for StreamDevice<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&format!("{}Device", A::WORDS.prefix))
            .field("ordinal", &self.core.ordinal)
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
        self.core.api.device_info(&self.core.context)
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
        self.core.api.compiler(&self.core.context, language)
    }

    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        self.core.api.compile(&self.core.context, source)
    }

    fn queue(&self) -> Result<StreamQueue<A>> {
        StreamQueue::new(&self.core)
    }
}

/// Device memory shared with other processes through the vendor's IPC (see ipc.rs).
impl<A: StreamApi> hal::Ipc for StreamDevice<A> {
    /// [`StreamApi::uuid`].
    fn uuid(&self) -> [u8; 16] {
        self.core.api.uuid(&self.core.context, self.core.ordinal)
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<StreamBuffer<A>> {
        StreamBuffer::new(&self.core, size, kind, true)
    }

    fn export(&self, buffer: &StreamBuffer<A>) -> Result<Exported> {
        super::ipc::export(buffer)
    }

    fn import(&self, exported: Exported) -> Result<StreamBuffer<A>> {
        super::ipc::import(&self.core, exported)
    }
}
