//! The Level Zero loader, loaded at run time: the library guard and its symbol table
//! ([`Driver`]), and every Level Zero call offload makes, each returning `Result` (cudarc's
//! `result` layer), grouped by API area: drivers, devices and contexts (`device`), memory
//! (`memory`), IPC (`ipc`), command lists (`list`), events (`event`), modules and kernels
//! (`module`) — each an `impl Driver` block of its own file.
//!
//! These modules (with [`sys`], the raw table) hold the calls; calls whose soundness depends
//! on what the caller passes (addresses, live handles) are `unsafe fn`s whose `# Safety`
//! says what, and the modules that own the objects (shared.rs, stream.rs, memory.rs,
//! queue.rs, program.rs, ipc.rs) call them with their `SAFETY` argument. It decides nothing: which failures mean
//! "no Level Zero here" is the platform's call, and how a failure reads as an offload error
//! is `offload_driver::Failure`'s.

mod device;
mod event;
mod ipc;
mod list;
mod memory;
mod module;
pub(crate) mod sys;

use std::ffi::c_void;

use offload_driver::{Failure, LoadError, Loaded};

pub(crate) use sys::{ZE_RESULT_ERROR_UNINITIALIZED, ZeResult};

/// Declares a handle type: an opaque pointer the driver owns, `Send` and `Sync` because the
/// Level Zero calls offload makes with it are free-threaded, except those on command lists
/// and kernels, which offload serialises itself (stream.rs, shared.rs and program.rs hold a
/// lock around them).
macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) *mut c_void);
        // SAFETY: an opaque identifier, valid in every thread until it is destroyed; see the
        // macro's comment for which calls offload serialises.
        unsafe impl Send for $name {}
        // SAFETY: as for `Send`.
        unsafe impl Sync for $name {}
    )*};
}

handles! {
    /// A context (`ze_context_handle_t`).
    ContextHandle;
    /// An immediate command list.
    ListHandle;
    /// An event pool.
    PoolHandle;
    /// An event.
    EventHandle;
    /// A module.
    ModuleHandle;
    /// A kernel.
    KernelHandle;
}

/// The library the backend opens: the Level Zero loader, which finds the drivers.
pub(crate) const LIBRARY: &str = "libze_loader.so.1";

/// A driver found by the loader. Level Zero handles are opaque pointers the driver owns
/// for the life of the process (there is no counterpart to `zeInit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DriverHandle(sys::ZeDriverHandle);

/// A device of a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceHandle(sys::ZeDeviceHandle);

// SAFETY: a handle is an opaque identifier, valid in every thread for the life of the
// process; the calls made with it here (zeDeviceGet, zeDeviceGetProperties,
// zeDeviceGetMemoryProperties, zeDriverGetApiVersion) are free-threaded in the Level Zero
// specification ("the application may call this function from simultaneous threads").
unsafe impl Send for DriverHandle {}
// SAFETY: as for `Send`: shared use only passes the identifier to free-threaded calls.
unsafe impl Sync for DriverHandle {}
// SAFETY: as for `DriverHandle`.
unsafe impl Send for DeviceHandle {}
// SAFETY: as for `DriverHandle`.
unsafe impl Sync for DeviceHandle {}

/// What a device says about itself, read from its property structures.
#[derive(Clone, Debug)]
pub(crate) struct DeviceDescription {
    /// `ze_device_properties_t::name`.
    pub(crate) name: String,
    /// `ze_device_properties_t::vendorId` (PCI vendor id).
    pub(crate) vendor_id: u32,
    /// Execution units: slices × sub-slices per slice × EUs per sub-slice.
    pub(crate) execution_units: u64,
    /// `ze_device_properties_t::uuid`.
    pub(crate) uuid: [u8; 16],
    /// `ze_device_properties_t::coreClockRate` (MHz).
    pub(crate) clock_mhz: u32,
    /// `ze_device_properties_t::maxMemAllocSize`.
    pub(crate) max_alloc: u64,
    /// `ze_device_properties_t::timerResolution`: nanoseconds per timestamp tick.
    pub(crate) timer_ns: u64,
}

/// What a device's compute properties say about launches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ComputeLimits {
    pub(crate) max_group_threads: u32,
    pub(crate) max_group: [u32; 3],
    pub(crate) max_groups: [u32; 3],
    pub(crate) shared_memory: u32,
}

/// Where an allocation lives, as `zeMemAllocDevice`/`Host`/`Shared` made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryKind {
    Device,
    Host,
    Shared,
}

/// What a module build gave: the module, or the failure and the build log.
pub(crate) type Built = Result<ModuleHandle, (Failure, String)>;

/// The opened loader and its entry points. Whatever calls Level Zero holds this in an
/// `Arc`, so the table never outlives the library it points into.
pub(crate) struct Driver {
    functions: Loaded<sys::Functions>,
}

impl Driver {
    /// Opens [`LIBRARY`] and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        // SAFETY: dlopen runs the loader's initialisers, which only set up its own state and
        // are sound to run at any time (it stays mapped, and so do the drivers it loads:
        // `RTLD_NODELETE`, as the drivers' threads may still run their code). Every address
        // comes from the loader for a name `sys` declares with the signature `ze_api.h`
        // gives it.
        let functions = unsafe { Loaded::open(&[LIBRARY]) }?;
        Ok(Driver { functions })
    }

    /// The name the loader was found under.
    pub(crate) fn library(&self) -> &'static str {
        self.functions.library().name()
    }
}

/// Runs a count-then-fill enumeration: `get(&mut count, null)` for the count, then
/// `get(&mut count, array)` for the handles.
///
/// # Safety
///
/// `get` must call a Level Zero enumeration with that contract: given a null array it writes
/// only the count; given an array of `count` handles it writes at most `count` of them and
/// sets `count` to how many it wrote.
unsafe fn enumerate(
    function: &'static str,
    mut get: impl FnMut(*mut u32, *mut *mut c_void) -> ZeResult,
) -> Result<Vec<*mut c_void>, Failure> {
    let mut count: u32 = 0;
    check(function, get(&mut count, std::ptr::null_mut()))?;
    let mut handles = vec![std::ptr::null_mut(); count as usize];
    if count > 0 {
        check(function, get(&mut count, handles.as_mut_ptr()))?;
    }
    handles.truncate(count as usize);
    Ok(handles)
}

/// The wait list as the driver takes it: null when empty.
fn waits_ptr(waits: &mut [*mut c_void]) -> *mut sys::ZeEvent {
    if waits.is_empty() {
        std::ptr::null_mut()
    } else {
        waits.as_mut_ptr()
    }
}

/// `Ok` for `ZE_RESULT_SUCCESS`, else the failure.
pub(crate) fn check(function: &'static str, code: ZeResult) -> Result<(), Failure> {
    if code == sys::ZE_RESULT_SUCCESS {
        Ok(())
    } else {
        let name = sys::RESULTS
            .iter()
            .find(|(known, _)| *known == code)
            .map_or("unknown ze_result_t", |(_, name)| name);
        Err(Failure::new(function, code, name).hex())
    }
}
