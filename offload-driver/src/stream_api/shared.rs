//! What every object of a device of a stream-based vendor API holds, below them all: the
//! device record ([`DeviceCore`]: the API, the vendor's context, the launch limits, the
//! count of live objects, the objects kept for a later release, the IPC mappings open on
//! it, each a [`Mapping`], and its exportable allocations), the device itself
//! ([`StreamDevice`]) and what [`StreamApi::open`] gives ([`OpenedApi`]). The device's
//! `hal::Device` impl and the platform are device.rs's, its `hal::Ipc` impl ipc.rs's.
//! Queues, memory, modules and IPC all name these, so they sit below them.
//!
//! Every buffer, module, queue and event holds its device's record (an `Arc`), so the
//! vendor's release of the device ([`StreamApi::release`]: CUDA's primary context) can
//! never come before their destruction, whatever order a user drops things in: the
//! platform's `deinit` lets go of its own references and reports the objects still alive
//! (a leak), and the record goes with the last of them.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use offload_core::Result;

use super::{StreamApi, driver_error};
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
    /// Its exportable allocations (memory.rs's `Allocation`s, held as `Any`: this record
    /// sits below memory), for imports of their handles in this same process.
    exported: Mutex<Vec<Weak<dyn Any + Send + Sync>>>,
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
    pub(crate) fn exported<T: Send + Sync + 'static>(&self, alloc: &Arc<T>) {
        let mut exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        exported.retain(|a| a.strong_count() > 0);
        let alloc = Arc::downgrade(alloc);
        exported.push(alloc);
    }

    /// The first live exportable allocation (of memory.rs's type `T`) that `matches`.
    pub(crate) fn exported_where<T: Send + Sync + 'static>(
        &self,
        matches: impl Fn(&T) -> bool,
    ) -> Option<Arc<T>> {
        let exported = self.exported.lock().unwrap_or_else(PoisonError::into_inner);
        exported
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|a| a.downcast::<T>().ok())
            .find(|a| matches(a))
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

/// A device of a stream-based vendor API (`CudaDevice`, `HipDevice`). It holds the library
/// open, and its device record, for as long as it lives.
///
/// ```
/// fn first<A: offload_driver::StreamApi>(d: &offload_driver::StreamDevice<A>) -> bool {
///     d.ordinal() == 0
/// }
/// ```
pub struct StreamDevice<A: StreamApi> {
    pub(crate) core: Arc<DeviceCore<A>>,
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

/// The exporter's pid, the allocation's address and size there, and its id (where the
/// vendor gives one).
pub(crate) type Exporter = (u64, u64, u64, Option<u64>);

/// One open IPC mapping in this process.
pub(crate) struct Mapping<A: StreamApi> {
    pub(crate) core: Arc<DeviceCore<A>>,
    pub(crate) ptr: u64,
    pub(crate) handle: [u8; 64],
    pub(crate) exporter: Exporter,
    /// Closed early (stale); its buffers' accesses fail in the vendor.
    pub(crate) closed: AtomicBool,
}

impl<A: StreamApi> Mapping<A> {
    /// Closes the mapping, once (early, for a stale one; else with its last buffer).
    #[allow(unsafe_code)]
    pub(crate) fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.core.bind_to_release()?;
        // SAFETY: `ptr` came from the vendor's IPC open on this (bound) device and is
        // closed once (`closed`); every buffer over it waited for its queued work before it
        // went (or this is a stale mapping, whose memory the exporter freed already).
        match unsafe { self.core.api().ipc_close(self.ptr) } {
            Some(closed) => closed.map_err(driver_error::<A>),
            None => Ok(()),
        }
    }
}

impl<A: StreamApi> Drop for Mapping<A> {
    fn drop(&mut self) {
        // The endpoint closes mappings explicitly (reporting errors); this is the fallback of a
        // mapping dropped on an error path, which has no caller to tell.
        let _ = self.close();
    }
}
