//! One device's primary context: retained when the platform opens, made current on the
//! calling thread before every context-dependent call ([`Context::bind`]), and released
//! when the last object made in it is gone.
//!
//! Every buffer, module, queue and event holds the context (an `Arc`), so the release can
//! never come before their destruction, whatever order a user drops things in: the
//! platform's `deinit` lets go of its own reference and reports the objects still alive
//! (a leak), and the context goes with the last of them — as the Vulkan backend's devices
//! do. Objects made in the context are counted ([`Context::live`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use offload_core::{BackendKind, Error, Result};
use offload_driver::Failure;

use crate::ffi::{self, CuDevice, sys};
use crate::memory::Allocation;

/// What launches and loads check against, read from the device once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Compute capability (major, minor).
    pub(crate) capability: (u32, u32),
    pub(crate) max_block_threads: u32,
    pub(crate) max_block: [u32; 3],
    pub(crate) max_grid: [u32; 3],
    pub(crate) max_shared_memory: u32,
}

/// A retained primary context.
pub(crate) struct Context {
    pub(crate) driver: Arc<ffi::Driver>,
    pub(crate) device: CuDevice,
    raw: sys::CuContext,
    pub(crate) limits: Limits,
    /// Buffers, modules, queues and events made in it and not yet destroyed.
    live: AtomicUsize,
    /// The IPC mappings open in it.
    pub(crate) mappings: crate::ipc::Registry,
    /// Its exportable allocations, for imports of their handles in this same process.
    exported: Mutex<Vec<Weak<Allocation>>>,
}

// SAFETY: a CUDA context handle may be used from any thread (the driver API is
// thread-safe; binding it to a thread is per-thread driver state), and the context is
// released only in `Drop`, when no other owner is left.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only reads the handle.
unsafe impl Sync for Context {}

/// A failed driver call as the offload error of `call`.
pub(crate) fn driver_error(call: &'static str) -> impl Fn(Failure) -> Error {
    move |failure| failure.into_error(BackendKind::Cuda, call)
}

impl Context {
    /// Retains `device`'s primary context and reads its limits.
    pub(crate) fn retain(driver: Arc<ffi::Driver>, device: CuDevice) -> Result<Context> {
        const CALL: &str = "Offload::init";
        let raw = driver.retain_primary(device).map_err(driver_error(CALL))?;
        let get = |attribute| {
            driver
                .attribute(device, attribute)
                .ok()
                .and_then(|v| u32::try_from(v).ok())
        };
        let three = |first, fallback| {
            [
                get(first).unwrap_or(fallback),
                get(first + 1).unwrap_or(fallback),
                get(first + 2).unwrap_or(fallback),
            ]
        };
        let limits = Limits {
            capability: (
                get(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap_or(0),
                get(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).unwrap_or(0),
            ),
            // The limits every CUDA device has had since compute capability 2.0, where the
            // driver does not say.
            max_block_threads: get(sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK).unwrap_or(1024),
            max_block: three(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 64),
            max_grid: three(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 65535),
            max_shared_memory: get(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
                .unwrap_or(48 << 10),
        };
        Ok(Context {
            driver,
            device,
            raw,
            limits,
            live: AtomicUsize::new(0),
            mappings: crate::ipc::Registry::default(),
            exported: Mutex::default(),
        })
    }

    /// Makes the context current on the calling thread, for `call`.
    pub(crate) fn bind(&self, call: &'static str) -> Result<()> {
        self.driver
            .set_current(self.raw)
            .map_err(driver_error(call))
    }

    /// Counts an object made in the context.
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
            .find(|a| a.ptr == ptr && a.len() as u64 >= len)
    }

    /// Objects made in the context and not yet destroyed.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every object made in the context holds it, so none is left; the context
        // was retained once, in `retain`, and is released once, here. Nothing can be
        // done about a failure (a lost device) but to go on.
        let _ = unsafe { self.driver.release_primary(self.device) };
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device)
            .field("capability", &self.limits.capability)
            .finish()
    }
}
