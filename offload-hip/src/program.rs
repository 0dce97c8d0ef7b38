//! HIP programs: AMD GPU code objects (or a clang offload bundle of one), inspected before
//! the runtime sees them ([`crate::image`]: ELF format, `EM_AMDGPU`, target, kernels and
//! their parameters from the `NT_AMDGPU_METADATA` note, globals), then loaded with
//! `hipModuleLoadData`.
//!
//! Kernel parameters come from the metadata: a `global_buffer` is a buffer, a `by_value`
//! a scalar of its size; the hidden arguments are the runtime's. Globals are reached with
//! `hipModuleGetGlobal` and the synchronous copies, after the queued launches of the module.
//!
//! Kernels hold their module: a module unloaded while kernels of it live is unloaded when
//! the last of them goes, after the launches queued with it (its `uses`).

use std::ffi::CString;
use std::sync::Arc;

use offload_core::{BackendKind, Error, GlobalInfo, ParamKind, Result};

use crate::ffi::{HipFunction, HipModule as RawModule, sys};
use crate::image::{self, CodeObject};
use crate::memory::Uses;
use crate::platform::{DeviceShared, driver_error};

/// A loaded module, shared by the module handle and its kernels.
pub(crate) struct ModuleInner {
    pub(crate) device: Arc<DeviceShared>,
    raw: RawModule,
    object: CodeObject,
    pub(crate) uses: Uses,
    /// The code object the runtime loaded, kept until it is unloaded (ROCm may read it
    /// in place rather than copy it).
    _code: Vec<u8>,
}

// SAFETY: the module handle may be used from any thread (the runtime is thread-safe); it
// is unloaded only in `Drop`, when no other owner is left.
unsafe impl Send for ModuleInner {}
// SAFETY: as above; `&ModuleInner` only passes the handle to the runtime.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        const CALL: &str = "Module::unload";
        let waited = self.uses.wait(CALL);
        if waited.is_ok() && self.device.bind(CALL).is_ok() {
            // SAFETY: the module is live, unloaded once, here; no queued launch uses it
            // (waited) and no kernel of it is left (they hold this).
            let _ = unsafe { self.device.driver.module_unload(self.raw) };
        }
        self.device.destroyed();
    }
}

/// A program loaded on a HIP device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::Config;
/// let Ok(hip) = offload_hip::HipPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = hip.devices().remove(0);
/// let module = dev.load(offload_hip::fixtures::KERNELS)?;
/// assert!(module.kernels().contains(&"add_one".to_string()));
/// module.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct HipModule {
    pub(crate) inner: Arc<ModuleInner>,
}

impl std::fmt::Debug for HipModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipModule")
            .field("target", &self.inner.object.target)
            .field("kernels", &self.inner.object.kernels.len())
            .finish()
    }
}

/// A kernel of a HIP module.
pub struct HipKernel {
    pub(crate) module: Arc<ModuleInner>,
    pub(crate) function: HipFunction,
    pub(crate) params: Vec<ParamKind>,
    pub(crate) name: String,
}

// SAFETY: as for `ModuleInner`: the function handle lives as long as its module, which the
// kernel holds.
unsafe impl Send for HipKernel {}
// SAFETY: as above.
unsafe impl Sync for HipKernel {}

impl std::fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipKernel")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

fn invalid_binary(call: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: BackendKind::Hip,
        call,
        reason: reason.into(),
    }
}

/// Inspects `image`, as `load` does, without loading it.
pub(crate) fn validate(image: &[u8], call: &'static str) -> Result<CodeObject> {
    image::inspect(image).map_err(|reason| invalid_binary(call, reason))
}

/// Inspects and loads `image` (the code object itself, unpacked from a bundle).
pub(crate) fn load(device: &Arc<DeviceShared>, image: &[u8]) -> Result<HipModule> {
    const CALL: &str = "Program::load";
    let object = validate(image, CALL)?;
    let code = image::code_object(image)
        .map_err(|reason| invalid_binary(CALL, reason))?
        .to_vec();
    device.bind(CALL)?;
    // SAFETY: the code object was inspected: an AMD GPU ELF whose headers, sections and
    // notes lie inside the bytes, which the module keeps until it is unloaded.
    let raw = unsafe { device.driver.module_load(&code) }.map_err(|failure| {
        let refused = [
            sys::HIP_ERROR_INVALID_IMAGE,
            sys::HIP_ERROR_NO_BINARY_FOR_GPU,
        ];
        if refused.iter().any(|&c| i64::from(c) == failure.code) {
            invalid_binary(
                CALL,
                format!(
                    "the runtime refused the {} code object: {failure}",
                    object.target
                ),
            )
        } else {
            failure.into_error(BackendKind::Hip, CALL)
        }
    })?;
    device.made();
    Ok(HipModule {
        inner: Arc::new(ModuleInner {
            device: device.clone(),
            raw,
            object,
            uses: Uses::default(),
            _code: code,
        }),
    })
}

fn not_found(call: &'static str, name: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Hip,
        call,
        symbol: name.to_string(),
        hint: String::new(),
    }
}

impl HipModule {
    /// Looks a kernel up.
    pub(crate) fn kernel(&self, name: &str) -> Result<HipKernel> {
        const CALL: &str = "Module::kernel";
        let inner = &self.inner;
        let entry = inner
            .object
            .kernels
            .iter()
            .find(|k| k.name == name)
            .ok_or_else(|| not_found(CALL, name))?;
        let cname = CString::new(name).map_err(|_| not_found(CALL, name))?;
        inner.device.bind(CALL)?;
        // SAFETY: the module is live (this handle holds it).
        let function = unsafe { inner.device.driver.module_function(inner.raw, &cname) }
            .map_err(driver_error(CALL))?;
        Ok(HipKernel {
            module: inner.clone(),
            function,
            params: entry.params.clone(),
            name: name.to_string(),
        })
    }

    /// The kernels the code object declares.
    pub(crate) fn kernels(&self) -> Vec<String> {
        let kernels = &self.inner.object.kernels;
        kernels.iter().map(|k| k.name.clone()).collect()
    }

    /// The globals the code object exports.
    pub(crate) fn globals(&self) -> Vec<String> {
        self.inner.object.globals.clone()
    }

    /// Address and size of a global (`hipModuleGetGlobal`).
    fn global(&self, call: &'static str, name: &str) -> Result<(*mut std::ffi::c_void, usize)> {
        let inner = &self.inner;
        if !inner.object.globals.iter().any(|g| g == name) {
            return Err(not_found(call, name));
        }
        let cname = CString::new(name).map_err(|_| not_found(call, name))?;
        inner.device.bind(call)?;
        // SAFETY: the module is live.
        unsafe { inner.device.driver.module_global(inner.raw, &cname) }.map_err(|f| {
            if f.code == i64::from(sys::HIP_ERROR_NOT_FOUND) {
                not_found(call, name)
            } else {
                f.into_error(BackendKind::Hip, call)
            }
        })
    }

    pub(crate) fn global_info(&self, name: &str) -> Result<GlobalInfo> {
        let (address, size) = self.global("Module::global", name)?;
        Ok(GlobalInfo {
            address: address as u64,
            size,
        })
    }

    pub(crate) fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        const CALL: &str = "Module::read_global";
        let (address, size) = self.global(CALL, name)?;
        check(CALL, name, size, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.inner.uses.wait(CALL)?;
        self.inner.device.bind(CALL)?;
        // SAFETY: the range lies inside the global (checked against the runtime's size), a
        // live allocation of the module, which this handle holds; no queued launch of the
        // module runs (waited).
        unsafe {
            self.inner
                .device
                .driver
                .memcpy_dtoh(dst, address.cast::<u8>().wrapping_add(offset).cast())
        }
        .map_err(driver_error(CALL))
    }

    pub(crate) fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Module::write_global";
        let (address, size) = self.global(CALL, name)?;
        check(CALL, name, size, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner.uses.wait(CALL)?;
        let device = &self.inner.device;
        device.bind(CALL)?;
        // SAFETY: as in `read_global`.
        unsafe {
            device
                .driver
                .memcpy_htod(address.cast::<u8>().wrapping_add(offset).cast(), src)
        }
        .map_err(driver_error(CALL))?;
        // SAFETY: the null stream of the bound device, always live.
        unsafe { device.driver.stream_synchronize(std::ptr::null_mut()) }
            .map_err(driver_error(CALL))
    }
}

fn check(call: &'static str, name: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument {
            call,
            reason: format!("range {offset}..+{len} is outside hip global `{name}` ({size} bytes)"),
        }),
    }
}
