//! Modules and kernels: building a module, its kernels and globals, a kernel's group size
//! and arguments.

use std::ffi::{CStr, c_char, c_void};

use offload_driver::{Failure, text_of};

use super::{Built, ContextHandle, DeviceHandle, Driver, KernelHandle, ModuleHandle, check, sys};

impl Driver {
    /// `zeModuleCreate` from `image` (SPIR-V or a native binary), reading and destroying
    /// the build log.
    ///
    /// # Safety
    ///
    /// `image` was validated as a module of `format` (the driver parses it).
    pub(crate) unsafe fn module_create(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        image: &[u8],
        native: bool,
    ) -> Result<Built, Failure> {
        let desc = sys::ModuleDesc {
            stype: sys::ZE_STRUCTURE_TYPE_MODULE_DESC,
            p_next: std::ptr::null(),
            format: if native {
                sys::ZE_MODULE_FORMAT_NATIVE
            } else {
                sys::ZE_MODULE_FORMAT_IL_SPIRV
            },
            input_size: image.len(),
            input: image.as_ptr(),
            build_flags: c"".as_ptr(),
            constants: std::ptr::null(),
        };
        let mut module = std::ptr::null_mut();
        let mut log = std::ptr::null_mut();
        // SAFETY: the caller's promise for the image, which lives across the call; live
        // handles; `module` and `log` are writable.
        let code = unsafe {
            (self.functions.ze_module_create)(context.0, device.0, &desc, &mut module, &mut log)
        };
        let text = if log.is_null() {
            String::new()
        } else {
            // SAFETY: `log` came from this zeModuleCreate; it is read, then destroyed once.
            let text = unsafe { self.build_log(log) };
            // SAFETY: as above.
            let _ = unsafe { (self.functions.ze_module_build_log_destroy)(log) };
            text
        };
        match check("zeModuleCreate", code) {
            Ok(()) => Ok(Ok(ModuleHandle(module))),
            Err(failure)
                if [
                    sys::ZE_RESULT_ERROR_MODULE_BUILD_FAILURE,
                    sys::ZE_RESULT_ERROR_INVALID_NATIVE_BINARY,
                ]
                .iter()
                .any(|&c| i64::from(c) == failure.code) =>
            {
                Ok(Err((failure, text)))
            }
            Err(failure) => Err(failure),
        }
    }

    /// The text of a build log (empty where it cannot be read).
    ///
    /// # Safety
    ///
    /// `log` is a live build log.
    unsafe fn build_log(&self, log: sys::ZeBuildLog) -> String {
        let get = self.functions.ze_module_build_log_get_string;
        let mut size = 0usize;
        // SAFETY: the caller's promise; with a null buffer only the size is written.
        if unsafe { get(log, &mut size, std::ptr::null_mut()) } != sys::ZE_RESULT_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut text = vec![0 as c_char; size];
        // SAFETY: `text` holds `size` writable bytes, as the driver asked.
        if unsafe { get(log, &mut size, text.as_mut_ptr()) } != sys::ZE_RESULT_SUCCESS {
            return String::new();
        }
        text_of(&text)
    }

    /// `zeModuleDestroy`.
    ///
    /// # Safety
    ///
    /// `module` is live, destroyed once, with no kernel of it left and no launch pending.
    pub(crate) unsafe fn module_destroy(&self, module: ModuleHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeModuleDestroy", unsafe {
            (self.functions.ze_module_destroy)(module.0)
        })
    }

    /// `zeModuleGetKernelNames`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn kernel_names(&self, module: ModuleHandle) -> Result<Vec<String>, Failure> {
        let get = self.functions.ze_module_get_kernel_names;
        let mut count = 0u32;
        // SAFETY: the caller's promise; a null array asks for the count.
        check("zeModuleGetKernelNames", unsafe {
            get(module.0, &mut count, std::ptr::null_mut())
        })?;
        let mut names = vec![std::ptr::null::<c_char>(); count as usize];
        if count > 0 {
            // SAFETY: `names` holds `count` writable pointers.
            check("zeModuleGetKernelNames", unsafe {
                get(module.0, &mut count, names.as_mut_ptr())
            })?;
        }
        names.truncate(count as usize);
        Ok(names
            .into_iter()
            .filter(|p| !p.is_null())
            // SAFETY: the driver's names are NUL-terminated strings owned by the live module.
            .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect())
    }

    /// `zeModuleGetGlobalPointer`: the address and size of global `name`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn global(
        &self,
        module: ModuleHandle,
        name: &CStr,
    ) -> Result<(*mut c_void, usize), Failure> {
        let mut size = 0usize;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the caller's promise; `name` is NUL-terminated; outputs writable.
        let code = unsafe {
            (self.functions.ze_module_get_global_pointer)(
                module.0,
                name.as_ptr(),
                &mut size,
                &mut ptr,
            )
        };
        check("zeModuleGetGlobalPointer", code).map(|()| (ptr, size))
    }

    /// `zeKernelCreate`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn kernel_create(
        &self,
        module: ModuleHandle,
        name: &CStr,
    ) -> Result<KernelHandle, Failure> {
        let desc = sys::KernelDesc {
            stype: sys::ZE_STRUCTURE_TYPE_KERNEL_DESC,
            p_next: std::ptr::null(),
            flags: 0,
            name: name.as_ptr(),
        };
        let mut kernel = std::ptr::null_mut();
        // SAFETY: the caller's promise; a valid descriptor; `kernel` writable.
        let code = unsafe { (self.functions.ze_kernel_create)(module.0, &desc, &mut kernel) };
        check("zeKernelCreate", code).map(|()| KernelHandle(kernel))
    }

    /// `zeKernelDestroy`.
    ///
    /// # Safety
    ///
    /// `kernel` is live, destroyed once (before its module), with no launch pending.
    pub(crate) unsafe fn kernel_destroy(&self, kernel: KernelHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeKernelDestroy", unsafe {
            (self.functions.ze_kernel_destroy)(kernel.0)
        })
    }

    /// `zeKernelSetGroupSize`.
    ///
    /// # Safety
    ///
    /// `kernel` is live and used by no other thread during the call.
    pub(crate) unsafe fn set_group_size(
        &self,
        kernel: KernelHandle,
        size: [u32; 3],
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeKernelSetGroupSize", unsafe {
            (self.functions.ze_kernel_set_group_size)(kernel.0, size[0], size[1], size[2])
        })
    }

    /// `zeKernelSetArgumentValue` of argument `index` to `value` (its bytes).
    ///
    /// # Safety
    ///
    /// As [`Driver::set_group_size`]; `value` has the parameter's size.
    pub(crate) unsafe fn set_argument(
        &self,
        kernel: KernelHandle,
        index: u32,
        value: &[u8],
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise; the driver copies the value during the call.
        check("zeKernelSetArgumentValue", unsafe {
            (self.functions.ze_kernel_set_argument_value)(
                kernel.0,
                index,
                value.len(),
                value.as_ptr().cast(),
            )
        })
    }
}
