//! What every object of a Level Zero device holds, below them all: the driver's context
//! ([`ContextShared`]), the device record ([`DeviceShared`]: handle, launch limits, the
//! synchronous command list of the host's copies, the count of live objects, the IPC
//! mappings open on it, each a [`Mapping`]), the device itself ([`ZeDevice`]), and how a
//! failed driver call reads as an offload error ([`driver_error`]). The device's
//! `hal::Device` impl is device.rs's, its `hal::Ipc` impl ipc.rs's; the platform
//! (platform.rs) makes the records. Queues, memory, programs and IPC all name these, so they
//! sit below them.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::{BackendKind, Error, Result};
use offload_driver::{Failure, LaunchLimits};

use crate::ffi::{self, ContextHandle, DeviceHandle, ListHandle};

/// A failed driver call as an offload error (naming no call: the handle of the user's call
/// names it).
pub(crate) fn driver_error(failure: Failure) -> Error {
    failure.into_error(BackendKind::Ze, "")
}

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
    pub(crate) mappings: Mutex<Vec<Weak<Mapping>>>,
}

impl DeviceShared {
    /// The record of device `handle` of `context`, `ordinal` among the platform's devices,
    /// with nothing made on it yet.
    pub(crate) fn new(
        context: Arc<ContextShared>,
        handle: DeviceHandle,
        ordinal: u32,
        limits: LaunchLimits,
        uuid: [u8; 16],
        timer_ns: u64,
    ) -> DeviceShared {
        DeviceShared {
            context,
            handle,
            ordinal,
            limits,
            uuid,
            timer_ns,
            copier: Mutex::new(None),
            live: AtomicUsize::new(0),
            mappings: Mutex::default(),
        }
    }

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

    /// Objects made on the device and not yet destroyed.
    pub(crate) fn live(&self) -> usize {
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

/// One open IPC mapping in this process, shared by the imports of one allocation.
pub(crate) struct Mapping {
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) ptr: *mut c_void,
    /// The exporter's pid and the allocation's id there.
    pub(crate) key: (u64, u64),
}

// SAFETY: the mapping's address is only handed to the driver; it is closed once, in `Drop`.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from zeMemOpenIpcHandle in this device's context and is closed
        // once, here; every buffer over it waited for its queued work before it went.
        let _ = unsafe {
            self.device
                .driver()
                .ipc_close(self.device.context(), self.ptr)
        };
    }
}
