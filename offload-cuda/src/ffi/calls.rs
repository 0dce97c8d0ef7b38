//! The driver calls of the CUDA backend that are not in offload-driver's `StreamApi`
//! table: primary contexts (retain, release, make current), device UUIDs, module loads
//! with the JIT log, and an allocation's buffer id; each returning `Result` with the
//! driver's names for a failure (cudarc's `result` layer). The `StreamApi` impl that uses
//! them is `crate::stream_api`'s. Every context-dependent call needs the handle's context
//! current on the calling thread (`set_current`).

use std::ffi::{c_uint, c_void};

use offload_driver::Failure;

use super::Driver;
use super::sys::{self, CuContext, CuDevice, CuDevicePtr, CuModule, CuUuid};

/// A failed module load: the driver's failure and its JIT error log.
pub(crate) struct LoadFailure {
    pub(crate) failure: Failure,
    pub(crate) log: String,
}

impl Driver {
    /// `cuDevicePrimaryCtxRetain`.
    pub(crate) fn retain_primary(&self, device: CuDevice) -> Result<CuContext, Failure> {
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer; a bad device is an error code.
        let code = unsafe { (self.functions.cu_device_primary_ctx_retain)(&mut context, device) };
        self.check("cuDevicePrimaryCtxRetain", code)
            .map(|()| context)
    }

    /// `cuDevicePrimaryCtxRelease_v2`.
    ///
    /// # Safety
    /// Every object made in the context is gone, and it is released once per retain.
    pub(crate) unsafe fn release_primary(&self, device: CuDevice) -> Result<(), Failure> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe { (self.functions.cu_device_primary_ctx_release)(device) };
        self.check("cuDevicePrimaryCtxRelease_v2", code)
    }

    /// `cuCtxSetCurrent`: binds `context` to the calling thread.
    pub(crate) fn set_current(&self, context: CuContext) -> Result<(), Failure> {
        // SAFETY: the context is a retained primary context (callers hold it); binding it
        // only changes the driver's thread-local state.
        let code = unsafe { (self.functions.cu_ctx_set_current)(context) };
        self.check("cuCtxSetCurrent", code)
    }

    /// `cuDeviceGetUuid`, where the driver has it.
    pub(crate) fn device_uuid(&self, device: CuDevice) -> Option<[u8; 16]> {
        let get = self.functions.cu_device_get_uuid?;
        let mut uuid = CuUuid::default();
        // SAFETY: `uuid` is a valid out-pointer of the declared type.
        let code = unsafe { get(&mut uuid, device) };
        (code == sys::CUDA_SUCCESS).then_some(uuid.bytes)
    }

    /// `cuModuleLoadDataEx` with a JIT error log of up to 8 KiB.
    ///
    /// # Safety
    /// `image` is an image the driver accepts to parse: PTX text ending in NUL, or a
    /// cubin/fatbin whose headers were validated (the driver trusts its sizes).
    pub(crate) unsafe fn module_load_logged(&self, image: &[u8]) -> Result<CuModule, LoadFailure> {
        let mut log = vec![0u8; 8192];
        let mut options = [
            sys::CU_JIT_ERROR_LOG_BUFFER,
            sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let mut module: CuModule = std::ptr::null_mut();
        // SAFETY: guaranteed by the caller for `image`; the options are documented ones
        // whose values are a writable buffer and its size (passed by value in the pointer,
        // as cuda.h specifies), both alive across the call.
        let code = unsafe {
            (self.functions.cu_module_load_data_ex)(
                &mut module,
                image.as_ptr().cast(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        self.check("cuModuleLoadDataEx", code)
            .map(|()| module)
            .map_err(|failure| LoadFailure {
                failure,
                log: offload_driver::text_of(
                    &log.iter()
                        .map(|&b| b as std::ffi::c_char)
                        .collect::<Vec<_>>(),
                )
                .trim()
                .to_string(),
            })
    }

    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`: the allocation's
    /// process-unique id.
    pub(crate) fn buffer_id(&self, ptr: CuDevicePtr) -> Result<u64, Failure> {
        let mut id: u64 = 0;
        // SAFETY: the attribute's value is a 64-bit integer, written into `id`; a pointer
        // the driver does not know is an error code.
        let code = unsafe {
            (self.functions.cu_pointer_get_attribute)(
                (&raw mut id).cast(),
                sys::CU_POINTER_ATTRIBUTE_BUFFER_ID,
                ptr,
            )
        };
        self.check("cuPointerGetAttribute", code).map(|()| id)
    }
}
