//! Drivers, devices and contexts: `zeInit`, the driver and device enumerations and
//! properties, and the contexts offload makes per driver.

use offload_driver::{Failure, text_of};

use super::{
    ComputeLimits, ContextHandle, DeviceDescription, DeviceHandle, Driver, DriverHandle, check,
    enumerate, sys,
};

impl Driver {
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
            uuid: properties.uuid,
            clock_mhz: properties.core_clock_rate,
            max_alloc: properties.max_mem_alloc_size,
            timer_ns: properties.timer_resolution,
        })
    }

    /// `zeDeviceGetComputeProperties`.
    pub(crate) fn compute(&self, device: DeviceHandle) -> Result<ComputeLimits, Failure> {
        let mut p = sys::DeviceComputeProperties::new();
        // SAFETY: `device` came from zeDeviceGet; `p` is a writable structure of the
        // header's layout (checked in `sys`) with its stype set and a null pNext.
        let code = unsafe { (self.functions.ze_device_get_compute_properties)(device.0, &mut p) };
        check("zeDeviceGetComputeProperties", code)?;
        Ok(ComputeLimits {
            max_group_threads: p.max_total_group_size,
            max_group: p.max_group_size,
            max_groups: p.max_group_count,
            shared_memory: p.max_shared_local_memory,
        })
    }

    /// `zeContextCreate`: one context for `driver`.
    pub(crate) fn context_create(&self, driver: DriverHandle) -> Result<ContextHandle, Failure> {
        let desc = sys::ContextDesc {
            stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
            p_next: std::ptr::null(),
            flags: 0,
        };
        let mut context = std::ptr::null_mut();
        // SAFETY: `driver` came from zeDriverGet; `desc` is a valid descriptor and `context`
        // a writable handle, both alive across the call.
        let code = unsafe { (self.functions.ze_context_create)(driver.0, &desc, &mut context) };
        check("zeContextCreate", code).map(|()| ContextHandle(context))
    }

    /// `zeContextDestroy`.
    ///
    /// # Safety
    ///
    /// `context` is live, destroyed once, and nothing made in it is used afterwards.
    pub(crate) unsafe fn context_destroy(&self, context: ContextHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeContextDestroy", unsafe {
            (self.functions.ze_context_destroy)(context.0)
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
