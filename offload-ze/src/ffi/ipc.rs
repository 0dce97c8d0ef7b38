//! IPC: `zeMemGetIpcHandle`, `zeMemPutIpcHandle`, `zeMemOpenIpcHandle`, `zeMemCloseIpcHandle`.

use std::ffi::c_void;

use offload_driver::Failure;

use super::{ContextHandle, DeviceHandle, Driver, check, sys};

impl Driver {
    /// `zeMemGetIpcHandle`.
    ///
    /// # Safety
    ///
    /// `ptr` is the base of a live device allocation of `context`.
    pub(crate) unsafe fn ipc_get(
        &self,
        context: ContextHandle,
        ptr: *const c_void,
    ) -> Result<sys::IpcMemHandle, Failure> {
        let mut handle = sys::IpcMemHandle {
            data: [0; sys::ZE_MAX_IPC_HANDLE_SIZE],
        };
        // SAFETY: the caller's promise; `handle` is writable.
        let code = unsafe { (self.functions.ze_mem_get_ipc_handle)(context.0, ptr, &mut handle) };
        check("zeMemGetIpcHandle", code).map(|()| handle)
    }

    /// `zeMemPutIpcHandle`, where the loader has it (`None` where it does not: the driver
    /// then releases the handle with its allocation).
    pub(crate) fn ipc_put(
        &self,
        context: ContextHandle,
        handle: sys::IpcMemHandle,
    ) -> Option<Result<(), Failure>> {
        let put = self.functions.ze_mem_put_ipc_handle?;
        // SAFETY: the handle is passed by value; a handle the driver does not know is an
        // error code.
        Some(check("zeMemPutIpcHandle", unsafe {
            put(context.0, handle)
        }))
    }

    /// `zeMemOpenIpcHandle`: maps another process's allocation.
    ///
    /// # Safety
    ///
    /// `handle` holds, where the driver keeps its file descriptor, a descriptor open in
    /// this process for the duration of the call.
    pub(crate) unsafe fn ipc_open(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        handle: sys::IpcMemHandle,
    ) -> Result<*mut c_void, Failure> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the caller's promise; `ptr` is writable; the handles are live.
        let code = unsafe {
            (self.functions.ze_mem_open_ipc_handle)(context.0, device.0, handle, 0, &mut ptr)
        };
        check("zeMemOpenIpcHandle", code)?;
        if ptr.is_null() {
            return Err(Failure::new("zeMemOpenIpcHandle", 0, "a null mapping").hex());
        }
        Ok(ptr)
    }

    /// `zeMemCloseIpcHandle`.
    ///
    /// # Safety
    ///
    /// `ptr` came from `zeMemOpenIpcHandle` in `context`, is closed once, with no work on it
    /// pending.
    pub(crate) unsafe fn ipc_close(
        &self,
        context: ContextHandle,
        ptr: *mut c_void,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeMemCloseIpcHandle", unsafe {
            (self.functions.ze_mem_close_ipc_handle)(context.0, ptr)
        })
    }
}
