//! Level Zero programs: SPIR-V modules (OpenCL flavour: the Kernel capability), validated and
//! reflected before the driver sees them ([`crate::spirv`]: kernels, their parameters,
//! globals), and native binaries (an Intel GPU ELF, `EM_INTELGT`), both built with
//! `zeModuleCreate`. A build failure is `Error::InvalidBinary` with the driver's build log.
//! Kernels are `zeKernelCreate`; globals `zeModuleGetGlobalPointer`, read and written
//! through the device's synchronous command list.
//!
//! A native binary cannot be reflected: its kernels are the driver's
//! (`zeModuleGetKernelNames`), and they take no arguments as far as offload knows (a launch
//! with arguments is `Error::InvalidArgument`); it has no globals offload can name.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use offload_core::hal;
use offload_core::{BackendKind, Error, GlobalInfo, ParamKind, Result};

use crate::ffi::{KernelHandle, ModuleHandle, sys};
use crate::shared::{DeviceShared, driver_error};
use crate::spirv::{self, KernelModule};
use crate::stream::Uses;

/// `EM_INTELGT`: the ELF machine of Intel GPU native binaries.
pub(crate) const EM_INTELGT: u16 = 205;

/// What an image is, as `load` reads it.
#[derive(Clone, Debug)]
pub(crate) enum Image {
    /// A SPIR-V module and what reflection found in it.
    Spirv(KernelModule),
    /// A native binary (no reflection).
    Native,
}

/// A loaded module, shared by the program and its kernels.
pub(crate) struct ModuleInner {
    pub(crate) device: Arc<DeviceShared>,
    raw: ModuleHandle,
    image: Image,
    /// Kernel names (the reflection's, or the driver's for a native binary).
    names: Vec<String>,
    /// The queued launches of its kernels.
    pub(crate) uses: Uses,
    /// Set when the driver refused to destroy a kernel of it: the module is then left to
    /// the driver too (destroying it under a live kernel breaks its rules).
    kernel_left: AtomicBool,
}

// SAFETY: the module handle is only passed to free-threaded driver calls; it is destroyed
// only in `Drop`, when no other owner (no kernel) is left.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if self.uses.wait().is_ok() && !self.kernel_left.load(Ordering::SeqCst) {
            // SAFETY: the module is live, destroyed once, here; no queued launch uses it
            // (waited) and no kernel of it is left (they hold this).
            let _ = unsafe { self.device.driver().module_destroy(self.raw) };
        }
        self.device.destroyed();
    }
}

/// A program loaded on a Level Zero device.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::Config;
/// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = ze.devices().remove(0);
/// let module = dev.load(offload_ze::fixtures::KERNELS)?;
/// assert!(module.kernels().contains(&"add_one".to_string()));
/// module.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct ZeModule {
    pub(crate) inner: Arc<ModuleInner>,
}

impl std::fmt::Debug for ZeModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeModule")
            .field("kernels", &self.inner.names)
            .finish()
    }
}

/// A kernel of a Level Zero module. Its arguments and group size are state of the driver's
/// kernel object: a launch sets them and appends under the kernel's lock.
pub struct ZeKernel {
    pub(crate) module: Arc<ModuleInner>,
    raw: Mutex<KernelHandle>,
    pub(crate) params: Vec<ParamKind>,
    pub(crate) name: String,
    /// The queued launches of it.
    pub(crate) uses: Uses,
}

impl ZeKernel {
    /// The kernel object, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, KernelHandle> {
        self.raw.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ZeKernel {
    fn drop(&mut self) {
        if self.uses.wait().is_ok() {
            let raw = *self.raw.get_mut().unwrap_or_else(PoisonError::into_inner);
            // SAFETY: the kernel is live, destroyed once, here, before its module (which
            // this holds); no queued launch of it is pending (waited).
            if unsafe { self.module.device.driver().kernel_destroy(raw) }.is_err() {
                self.module.kernel_left.store(true, Ordering::SeqCst);
            }
        }
    }
}

impl std::fmt::Debug for ZeKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeKernel")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

fn invalid_binary(reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: BackendKind::Ze,
        call: "",
        reason: reason.into(),
    }
}

/// Reads `image` as `load` does, without loading it: SPIR-V (validated and reflected by
/// offload-spirv) or an Intel GPU native binary; anything else is `InvalidBinary`.
pub(crate) fn validate(image: &[u8]) -> Result<Image> {
    let mut swapped = spirv::MAGIC;
    swapped.reverse();
    if image.starts_with(&spirv::MAGIC) || image.starts_with(&swapped) {
        return spirv::kernels(image).map(Image::Spirv);
    }
    if image.starts_with(b"\x7fELF") {
        // The header as every backend reads it: offload-core's image sniff.
        let hal::ImageFormat::Elf { machine } = hal::ImageFormat::of(image) else {
            return Err(invalid_binary(
                "a truncated ELF, or not 64-bit little-endian: not an Intel GPU native binary",
            ));
        };
        if machine != EM_INTELGT {
            return Err(invalid_binary(format!(
                "an ELF for machine {machine}, not an Intel GPU native binary \
                     (EM_INTELGT = {EM_INTELGT})"
            )));
        }
        return Ok(Image::Native);
    }
    Err(invalid_binary(
        "neither a SPIR-V module (magic 0x07230203) nor an Intel GPU native binary (ELF)",
    ))
}

/// Validates and loads `image`.
pub(crate) fn load(device: &Arc<DeviceShared>, image: &[u8]) -> Result<ZeModule> {
    let read = validate(image)?;
    let native = matches!(read, Image::Native);
    let driver = device.driver();
    // SAFETY: the image was validated as a module of that format (above); it lives across
    // the call (the driver copies what it keeps).
    let built = unsafe { driver.module_create(device.context(), device.handle, image, native) }
        .map_err(driver_error)?;
    let raw = match built {
        Ok(raw) => raw,
        Err((failure, log)) => {
            let log = log.trim();
            return Err(invalid_binary(if log.is_empty() {
                format!("the driver could not build it: {failure}")
            } else {
                format!("the driver could not build it: {failure}; build log: {log}")
            }));
        }
    };
    let names = match &read {
        Image::Spirv(module) => module.kernels.iter().map(|k| k.name.clone()).collect(),
        // SAFETY: the module was made just above.
        Image::Native => match unsafe { driver.kernel_names(raw) } {
            Ok(names) => names,
            Err(e) => {
                // SAFETY: made just above, no kernel of it.
                let _ = unsafe { driver.module_destroy(raw) };
                return Err(driver_error(e));
            }
        },
    };
    device.made();
    Ok(ZeModule {
        inner: Arc::new(ModuleInner {
            device: device.clone(),
            raw,
            image: read,
            names,
            uses: Uses::default(),
            kernel_left: AtomicBool::new(false),
        }),
    })
}

fn not_found(name: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Ze,
        call: "",
        symbol: name.to_string(),
        hint: String::new(),
    }
}

impl ZeModule {
    /// Address and size of a global (`zeModuleGetGlobalPointer`; the size is the smaller of
    /// the driver's and the reflection's).
    fn locate_global(&self, name: &str) -> Result<(*mut std::ffi::c_void, usize)> {
        let inner = &self.inner;
        let Image::Spirv(module) = &inner.image else {
            return Err(not_found(name));
        };
        let Some(known) = module.globals.iter().find(|g| g.name == name) else {
            return Err(not_found(name));
        };
        let cname = CString::new(name).map_err(|_| not_found(name))?;
        // SAFETY: the module is live.
        let (ptr, size) =
            unsafe { inner.device.driver().global(inner.raw, &cname) }.map_err(|f| {
                if f.code == i64::from(sys::ZE_RESULT_ERROR_INVALID_GLOBAL_NAME) {
                    not_found(name)
                } else {
                    driver_error(f)
                }
            })?;
        Ok((ptr, size.min(known.size)))
    }
}

/// Kernels (`zeKernelCreate`), the reflected globals (`zeModuleGetGlobalPointer`, read and
/// written through the device's synchronous command list) and the unload.
impl hal::Program for ZeModule {
    type Kernel = ZeKernel;

    fn kernel(&self, name: &str) -> Result<ZeKernel> {
        let inner = &self.inner;
        if !inner.names.iter().any(|n| n == name) {
            return Err(not_found(name));
        }
        let params = match &inner.image {
            Image::Spirv(module) => module
                .kernels
                .iter()
                .find(|k| k.name == name)
                .map(|k| k.params.clone())
                .unwrap_or_default(),
            Image::Native => Vec::new(),
        };
        let cname = CString::new(name).map_err(|_| not_found(name))?;
        // SAFETY: the module is live (this handle holds it).
        let raw =
            unsafe { inner.device.driver().kernel_create(inner.raw, &cname) }.map_err(|f| {
                if f.code == i64::from(sys::ZE_RESULT_ERROR_INVALID_KERNEL_NAME) {
                    not_found(name)
                } else {
                    driver_error(f)
                }
            })?;
        Ok(ZeKernel {
            module: inner.clone(),
            raw: Mutex::new(raw),
            params,
            name: name.to_string(),
            uses: Uses::default(),
        })
    }

    fn params(kernel: &ZeKernel) -> &[ParamKind] {
        &kernel.params
    }

    fn kernels(&self) -> Vec<String> {
        self.inner.names.clone()
    }

    fn globals(&self) -> Vec<String> {
        match &self.inner.image {
            Image::Spirv(module) => module.globals.iter().map(|g| g.name.clone()).collect(),
            Image::Native => Vec::new(),
        }
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        let (address, size) = self.locate_global(name)?;
        Ok(GlobalInfo {
            address: address as u64,
            size,
        })
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        let (address, size) = self.locate_global(name)?;
        check(name, size, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.inner.uses.wait()?;
        let at = address.cast::<u8>().wrapping_add(offset).cast();
        // SAFETY: the range lies inside the global (checked against its size), memory of the
        // live module; no queued launch of the module runs (waited); `dst` is host memory,
        // borrowed for the call.
        unsafe {
            self.inner
                .device
                .copy_now(dst.as_mut_ptr().cast(), at, dst.len())
        }
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        let (address, size) = self.locate_global(name)?;
        check(name, size, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner.uses.wait()?;
        let at = address.cast::<u8>().wrapping_add(offset).cast();
        // SAFETY: as in `read_global`.
        unsafe {
            self.inner
                .device
                .copy_now(at, src.as_ptr().cast(), src.len())
        }
    }

    /// Unloads now, or with the last kernel of it, after its queued launches.
    fn unload(self) -> Result<()> {
        let waited = self.inner.uses.wait();
        drop(self);
        waited
    }
}

fn check(name: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument {
            call: "",
            reason: format!("range {offset}..+{len} is outside ze global `{name}` ({size} bytes)"),
        }),
    }
}
