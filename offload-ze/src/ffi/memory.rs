//! Memory: `zeMemAlloc{Device,Host,Shared}`, `zeMemFree` and the allocation queries.

use std::ffi::c_void;

use offload_driver::Failure;

use super::{ContextHandle, DeviceHandle, Driver, MemoryKind, check, sys};

impl Driver {
    /// `zeMemAllocDevice`, `zeMemAllocHost` or `zeMemAllocShared` of `size` bytes.
    pub(crate) fn alloc(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        kind: MemoryKind,
        size: usize,
    ) -> Result<*mut c_void, Failure> {
        let device_desc = sys::DeviceMemAllocDesc {
            stype: sys::ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
            p_next: std::ptr::null(),
            flags: 0,
            ordinal: 0,
        };
        let host_desc = sys::HostMemAllocDesc {
            stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
            p_next: std::ptr::null(),
            flags: 0,
        };
        // 64-byte alignment: every scalar and vector type of OpenCL C.
        const ALIGN: usize = 64;
        let mut ptr = std::ptr::null_mut();
        let f = &self.functions;
        // SAFETY: `context` and `device` are live handles of one driver (the platform made
        // both); the descriptors are valid, with null pNext; `ptr` is writable; a bad size
        // is an error code, not undefined behaviour.
        let (function, code) = unsafe {
            match kind {
                MemoryKind::Device => (
                    "zeMemAllocDevice",
                    (f.ze_mem_alloc_device)(
                        context.0,
                        &device_desc,
                        size,
                        ALIGN,
                        device.0,
                        &mut ptr,
                    ),
                ),
                MemoryKind::Host => (
                    "zeMemAllocHost",
                    (f.ze_mem_alloc_host)(context.0, &host_desc, size, ALIGN, &mut ptr),
                ),
                MemoryKind::Shared => (
                    "zeMemAllocShared",
                    (f.ze_mem_alloc_shared)(
                        context.0,
                        &device_desc,
                        &host_desc,
                        size,
                        ALIGN,
                        device.0,
                        &mut ptr,
                    ),
                ),
            }
        };
        check(function, code)?;
        if ptr.is_null() {
            return Err(Failure::new(function, 0, "a null allocation").hex());
        }
        Ok(ptr)
    }

    /// `zeMemFree`.
    ///
    /// # Safety
    ///
    /// `ptr` is a live allocation of `context`, freed once, with no work on it pending.
    pub(crate) unsafe fn free(
        &self,
        context: ContextHandle,
        ptr: *mut c_void,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeMemFree", unsafe {
            (self.functions.ze_mem_free)(context.0, ptr)
        })
    }

    /// `zeMemGetAllocProperties(...).id`: the driver's identity of the allocation at `ptr`.
    pub(crate) fn alloc_id(
        &self,
        context: ContextHandle,
        ptr: *const c_void,
    ) -> Result<u64, Failure> {
        let mut p = sys::MemoryAllocationProperties {
            stype: sys::ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES,
            p_next: std::ptr::null_mut(),
            memory_type: 0,
            id: 0,
            page_size: 0,
        };
        let mut device = std::ptr::null_mut();
        // SAFETY: the call only reads the driver's records for `ptr` (any pointer is
        // allowed: an unknown one is ZE_MEMORY_TYPE_UNKNOWN); `p` and `device` are writable.
        let code = unsafe {
            (self.functions.ze_mem_get_alloc_properties)(context.0, ptr, &mut p, &mut device)
        };
        check("zeMemGetAllocProperties", code).map(|()| p.id)
    }

    /// `zeMemGetAddressRange`: the base and size of the allocation holding `ptr`.
    pub(crate) fn address_range(
        &self,
        context: ContextHandle,
        ptr: *const c_void,
    ) -> Result<(u64, usize), Failure> {
        let mut base = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: a query of the driver's records; `base` and `size` are writable.
        let code = unsafe {
            (self.functions.ze_mem_get_address_range)(context.0, ptr, &mut base, &mut size)
        };
        check("zeMemGetAddressRange", code).map(|()| (base as u64, size))
    }
}
