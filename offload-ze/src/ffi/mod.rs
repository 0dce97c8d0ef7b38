//! The Level Zero loader, loaded at run time: the library guard and its symbol table
//! ([`Driver`]), and every Level Zero call offload makes, each returning `Result` (cudarc's
//! `result` layer).
//!
//! This module (with [`sys`], the raw table) is the crate's only `unsafe` code. It decides
//! nothing: which failures mean "no Level Zero here" is the platform's call (`crate::open`),
//! and how a failure reads as an offload error is `offload_driver::Failure`'s.

mod sys;

use std::ffi::c_void;

use offload_driver::{Failure, LoadError, Loaded, text_of};

pub(crate) use sys::{ZE_RESULT_ERROR_UNINITIALIZED, ZeResult};

/// The library the backend opens: the Level Zero loader, which finds the drivers.
pub(crate) const LIBRARY: &str = "libze_loader.so.1";

/// A driver found by the loader. Level Zero handles are opaque pointers the driver owns
/// for the life of the process (there is no counterpart to `zeInit`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DriverHandle(sys::ZeDriverHandle);

/// A device of a driver.
#[derive(Clone, Copy, Debug)]
pub struct DeviceHandle(sys::ZeDeviceHandle);

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
}

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

    /// `zeInit(0)`: every driver type.
    pub(crate) fn init(&self) -> Result<(), Failure> {
        // SAFETY: zeInit takes its flags by value; 0 is the documented default.
        let code = unsafe { (self.functions.ze_init)(0) };
        check("zeInit", code)
    }

    /// `zeDriverGet`: every driver the loader initialised.
    pub(crate) fn drivers(&self) -> Result<Vec<DriverHandle>, Failure> {
        let get = self.functions.ze_driver_get;
        // SAFETY: `get` is zeDriverGet, whose contract is the count-then-fill one
        // `enumerate` follows.
        let handles = unsafe { enumerate("zeDriverGet", |count, out| get(count, out)) }?;
        Ok(handles.into_iter().map(DriverHandle).collect())
    }

    /// `zeDeviceGet`: the devices of `driver`.
    pub(crate) fn devices(&self, driver: DriverHandle) -> Result<Vec<DeviceHandle>, Failure> {
        let get = self.functions.ze_device_get;
        // SAFETY: `get` is zeDeviceGet on a handle zeDriverGet gave, whose contract is the
        // count-then-fill one `enumerate` follows.
        let handles = unsafe { enumerate("zeDeviceGet", |count, out| get(driver.0, count, out)) }?;
        Ok(handles.into_iter().map(DeviceHandle).collect())
    }

    /// `zeDeviceGetProperties`.
    pub(crate) fn describe(&self, device: DeviceHandle) -> Result<DeviceDescription, Failure> {
        let mut properties = sys::DeviceProperties::new();
        // SAFETY: `device` came from zeDeviceGet; `properties` is a writable structure of
        // the header's layout (checked at compile time in `sys`) with its stype set and a
        // null pNext, so the driver writes only inside it.
        let code = unsafe { (self.functions.ze_device_get_properties)(device.0, &mut properties) };
        check("zeDeviceGetProperties", code)?;
        let execution_units = u64::from(properties.num_slices)
            * u64::from(properties.num_subslices_per_slice)
            * u64::from(properties.num_eus_per_subslice);
        Ok(DeviceDescription {
            name: text_of(&properties.name),
            vendor_id: properties.vendor_id,
            execution_units,
        })
    }

    /// `zeDeviceGetMemoryProperties`: the sum of the sizes of the device's memories.
    pub(crate) fn total_memory(&self, device: DeviceHandle) -> Result<u64, Failure> {
        let get = self.functions.ze_device_get_memory_properties;
        let mut count: u32 = 0;
        // SAFETY: with a null array the call only writes the count into `count`.
        let code = unsafe { get(device.0, &mut count, std::ptr::null_mut()) };
        check("zeDeviceGetMemoryProperties", code)?;
        let mut memories = vec![sys::DeviceMemoryProperties::new(); count as usize];
        // SAFETY: `memories` holds `count` writable structures of the header's layout, each
        // with its stype set and a null pNext; the driver fills at most `count` of them and
        // writes back how many it did.
        let code = unsafe { get(device.0, &mut count, memories.as_mut_ptr()) };
        check("zeDeviceGetMemoryProperties", code)?;
        memories.truncate(count as usize);
        Ok(memories
            .iter()
            .fold(0u64, |sum, m| sum.saturating_add(m.total_size)))
    }

    /// `zeDriverGetApiVersion` as `(major, minor)`, where the loader has it.
    pub(crate) fn api_version(&self, driver: DriverHandle) -> Option<(u32, u32)> {
        let get = self.functions.ze_driver_get_api_version?;
        let mut version: sys::ZeApiVersion = 0;
        // SAFETY: `driver` came from zeDriverGet; `version` is a valid, writable u32.
        let code = unsafe { get(driver.0, &mut version) };
        (code == sys::ZE_RESULT_SUCCESS).then_some((version >> 16, version & 0xffff))
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

/// `Ok` for `ZE_RESULT_SUCCESS`, else the failure.
fn check(function: &'static str, code: ZeResult) -> Result<(), Failure> {
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
