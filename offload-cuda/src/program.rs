//! CUDA programs: PTX text and cubin/fatbin images, inspected before the driver sees them
//! ([`crate::image`]: format, target architecture against the device's compute capability,
//! kernels and their parameters, globals), then loaded with `cuModuleLoadDataEx`, whose JIT
//! error log is returned inside `Error::InvalidBinary`.
//!
//! Kernel parameters come from the image: a `.ptr` (or untyped 64-bit) PTX parameter is a
//! buffer, any other a scalar of its size; parameters of more than 8 bytes (structs by
//! value) make the kernel `Unsupported`. Globals are reached with `cuModuleGetGlobal` and
//! the synchronous copies, after the queued launches of the module (`__constant__` memory
//! too: the host sets it this way).
//!
//! Kernels hold their module: a module unloaded while kernels of it live is unloaded when
//! the last of them goes, after the launches queued with it (its `uses`).

use std::ffi::CString;
use std::sync::Arc;

use offload_core::{BackendKind, Error, GlobalInfo, ParamKind, Result};

use crate::context::{Context, driver_error};
use crate::ffi::sys::{self, CuFunction, CuModule};
use crate::image::{self, Inspected};
use crate::memory::Uses;

/// A loaded module, shared by the module handle and its kernels.
pub(crate) struct ModuleInner {
    pub(crate) context: Arc<Context>,
    raw: CuModule,
    inspected: Inspected,
    pub(crate) uses: Uses,
}

// SAFETY: the module handle may be used from any thread (the driver API is thread-safe);
// it is unloaded only in `Drop`, when no other owner is left.
unsafe impl Send for ModuleInner {}
// SAFETY: as above; `&ModuleInner` only passes the handle to the driver.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        const CALL: &str = "Module::unload";
        let waited = self.uses.wait(CALL);
        if waited.is_ok() && self.context.bind(CALL).is_ok() {
            // SAFETY: the module is live and of the bound context, unloaded once, here; no
            // queued launch uses it (waited) and no kernel of it is left (they hold this).
            let _ = unsafe { self.context.driver.module_unload(self.raw) };
        }
        self.context.destroyed();
    }
}

/// A program loaded on a CUDA device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::Config;
/// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = cuda.devices().remove(0);
/// let module = dev.load(offload_cuda::fixtures::KERNELS)?;
/// assert!(module.kernels().contains(&"add_one".to_string()));
/// module.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct CudaModule {
    pub(crate) inner: Arc<ModuleInner>,
}

impl std::fmt::Debug for CudaModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaModule")
            .field("kind", &self.inner.inspected.kind)
            .field("kernels", &self.inner.inspected.entries.len())
            .finish()
    }
}

/// A kernel of a CUDA module.
pub struct CudaKernel {
    pub(crate) module: Arc<ModuleInner>,
    pub(crate) function: CuFunction,
    pub(crate) params: Vec<ParamKind>,
    pub(crate) name: String,
}

// SAFETY: as for `ModuleInner`: the function handle lives as long as its module, which the
// kernel holds.
unsafe impl Send for CudaKernel {}
// SAFETY: as above.
unsafe impl Sync for CudaKernel {}

impl std::fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKernel")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

fn invalid_binary(call: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: BackendKind::Cuda,
        call,
        reason: reason.into(),
    }
}

/// Inspects `image` for a device of `context`, as `load` does, without loading it.
pub(crate) fn validate(context: &Context, image: &[u8], call: &'static str) -> Result<Inspected> {
    image::inspect(image, context.limits.capability).map_err(|reason| invalid_binary(call, reason))
}

/// Inspects and loads `image`.
pub(crate) fn load(context: &Arc<Context>, image: &[u8]) -> Result<CudaModule> {
    const CALL: &str = "Program::load";
    let inspected = validate(context, image, CALL)?;
    // The driver reads PTX as a C string.
    let mut owned;
    let bytes = if inspected.kind == image::ImageKind::Ptx && image.last() != Some(&0) {
        owned = image.to_vec();
        owned.push(0);
        owned.as_slice()
    } else {
        image
    };
    context.bind(CALL)?;
    // SAFETY: the image was inspected: PTX text ending in NUL, or a cubin/fatbin whose
    // headers and sections lie inside the bytes.
    let raw = unsafe { context.driver.module_load(bytes) }.map_err(|failed| {
        let code = failed.failure.code;
        let refused = [
            sys::CUDA_ERROR_INVALID_IMAGE,
            sys::CUDA_ERROR_INVALID_PTX,
            sys::CUDA_ERROR_NO_BINARY_FOR_GPU,
        ];
        if refused.iter().any(|&c| i64::from(c) == code) {
            let log = if failed.log.is_empty() {
                String::new()
            } else {
                format!("; JIT log: {}", failed.log)
            };
            invalid_binary(
                CALL,
                format!("the driver refused it: {}{log}", failed.failure),
            )
        } else {
            failed.failure.into_error(BackendKind::Cuda, CALL)
        }
    })?;
    context.made();
    Ok(CudaModule {
        inner: Arc::new(ModuleInner {
            context: context.clone(),
            raw,
            inspected,
            uses: Uses::default(),
        }),
    })
}

fn not_found(call: &'static str, name: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Cuda,
        call,
        symbol: name.to_string(),
        hint: String::new(),
    }
}

impl CudaModule {
    /// Looks a kernel up.
    pub(crate) fn kernel(&self, name: &str) -> Result<CudaKernel> {
        const CALL: &str = "Module::kernel";
        let inner = &self.inner;
        let entry = inner
            .inspected
            .entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| not_found(CALL, name))?;
        let mut params = Vec::with_capacity(entry.params.len());
        for (i, p) in entry.params.iter().enumerate() {
            params.push(match (p.pointer, p.size) {
                (Some(true), _) | (None, 8) => ParamKind::Buffer,
                (_, 1 | 2 | 4 | 8) => match p.ty {
                    Some(ty) => ParamKind::Typed(ty),
                    None => ParamKind::Scalar(p.size as usize),
                },
                (_, size) => {
                    return Err(Error::Unsupported {
                        backend: BackendKind::Cuda,
                        call: CALL,
                        reason: format!(
                            "cuda kernel `{name}`: parameter {i} (`{}`) is {size} bytes; \
                             offload passes buffers and scalars of 1, 2, 4 or 8 bytes",
                            p.name
                        ),
                    });
                }
            });
        }
        let cname = CString::new(name).map_err(|_| not_found(CALL, name))?;
        inner.context.bind(CALL)?;
        // SAFETY: the module is live (this handle holds it) and of the bound context.
        let function = unsafe { inner.context.driver.module_function(inner.raw, &cname) }
            .map_err(driver_error(CALL))?;
        Ok(CudaKernel {
            module: inner.clone(),
            function,
            params,
            name: name.to_string(),
        })
    }

    /// The kernels the image declares.
    pub(crate) fn kernels(&self) -> Vec<String> {
        self.inner
            .inspected
            .entries
            .iter()
            .map(|e| e.name.clone())
            .collect()
    }

    /// The globals the image declares.
    pub(crate) fn globals(&self) -> Vec<String> {
        self.inner
            .inspected
            .globals
            .iter()
            .map(|g| g.name.clone())
            .collect()
    }

    /// Address and size of a global (`cuModuleGetGlobal`).
    pub(crate) fn global(&self, call: &'static str, name: &str) -> Result<(u64, usize)> {
        let inner = &self.inner;
        if !inner.inspected.globals.iter().any(|g| g.name == name) {
            return Err(not_found(call, name));
        }
        let cname = CString::new(name).map_err(|_| not_found(call, name))?;
        inner.context.bind(call)?;
        // SAFETY: the module is live and of the bound context.
        unsafe { inner.context.driver.module_global(inner.raw, &cname) }.map_err(|f| {
            if f.code == 500 {
                not_found(call, name) // CUDA_ERROR_NOT_FOUND
            } else {
                f.into_error(BackendKind::Cuda, call)
            }
        })
    }

    pub(crate) fn global_info(&self, name: &str) -> Result<GlobalInfo> {
        let (address, size) = self.global("Module::global", name)?;
        Ok(GlobalInfo { address, size })
    }

    pub(crate) fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        const CALL: &str = "Module::read_global";
        let (address, size) = self.global(CALL, name)?;
        check(CALL, name, size, offset, dst.len())?;
        self.inner.uses.wait(CALL)?;
        self.inner.context.bind(CALL)?;
        // SAFETY: the range lies inside the global (checked against the driver's size), a
        // live allocation of the module, which this handle holds; no queued launch of the
        // module runs (waited).
        unsafe {
            self.inner
                .context
                .driver
                .memcpy_dtoh(dst, address + offset as u64)
        }
        .map_err(driver_error(CALL))
    }

    pub(crate) fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Module::write_global";
        let (address, size) = self.global(CALL, name)?;
        check(CALL, name, size, offset, src.len())?;
        self.inner.uses.wait(CALL)?;
        self.inner.context.bind(CALL)?;
        // SAFETY: as in `read_global`.
        unsafe {
            self.inner
                .context
                .driver
                .memcpy_htod(address + offset as u64, src)
        }
        .map_err(driver_error(CALL))?;
        // SAFETY: the null stream is the context's legacy default stream, always live.
        unsafe {
            self.inner
                .context
                .driver
                .stream_synchronize(std::ptr::null_mut())
        }
        .map_err(driver_error(CALL))
    }
}

fn check(call: &'static str, name: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument {
            call,
            reason: format!(
                "range {offset}..+{len} is outside cuda global `{name}` ({size} bytes)"
            ),
        }),
    }
}
