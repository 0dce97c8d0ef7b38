//! Programs of a stream-based vendor API: images inspected by the vendor crate before the
//! vendor sees them ([`StreamApi::inspect`]: format, target, kernels and their parameters,
//! globals), then loaded as modules ([`StreamModule`]) whose kernels
//! ([`StreamKernel`]) launch on queues. Globals are reached with the vendor's
//! module-global lookup and the synchronous copies, after the queued launches of the
//! module.
//!
//! Kernels hold their module: a module unloaded while kernels of it live is unloaded when
//! the last of them goes, after the launches queued with it (its `uses`).

use std::ffi::CString;
use std::sync::Arc;

use offload_core::hal;
use offload_core::{Error, GlobalInfo, ParamKind, Result};

use super::shared::DeviceCore;
use super::stream::Uses;
use super::{StreamApi, driver_error};

/// A loaded module, shared by the module handle and its kernels.
pub(crate) struct ModuleInner<A: StreamApi> {
    pub(crate) core: Arc<DeviceCore<A>>,
    raw: A::Module,
    image: A::Image,
    pub(crate) uses: Uses<A>,
    /// The bytes the vendor loaded, kept until it is unloaded (it may read them in place).
    _bytes: Vec<u8>,
}

// SAFETY: the module handle may be used from any thread (`StreamApi`'s contract); it is
// unloaded only in `Drop`, when no other owner is left.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for ModuleInner<A> {}
// SAFETY: as above; `&ModuleInner` only passes the handle to the vendor.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for ModuleInner<A> {}

impl<A: StreamApi> Drop for ModuleInner<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        let waited = self.uses.wait();
        if waited.is_ok() && self.core.bind_to_release().is_ok() {
            // SAFETY: the module is live and of the bound device, unloaded once, here; no
            // queued launch uses it (waited) and no kernel of it is left (they hold this).
            let _ = unsafe { self.core.api().module_unload(self.raw) };
        }
        self.core.destroyed();
    }
}

impl<A: StreamApi> Drop for StreamModule<A> {
    /// Inside a host function the module is kept for a later unload (L6,
    /// `DeviceCore::keep_if_in_host_fn`).
    fn drop(&mut self) {
        self.inner.core.keep_if_in_host_fn(self.inner.clone());
    }
}

impl<A: StreamApi> Drop for StreamKernel<A> {
    /// As a module's (the kernel holds its module).
    fn drop(&mut self) {
        self.module.core.keep_if_in_host_fn(self.module.clone());
    }
}

/// A program loaded on a device of a stream-based vendor backend (`CudaModule`,
/// `HipModule`).
///
/// ```
/// use offload_core::hal::Program;
/// fn has_add_one<A: offload_driver::StreamApi>(m: &offload_driver::StreamModule<A>) -> bool {
///     m.kernels().iter().any(|k| k == "add_one")
/// }
/// ```
pub struct StreamModule<A: StreamApi> {
    pub(crate) inner: Arc<ModuleInner<A>>,
}

impl<A: StreamApi> std::fmt::Debug for StreamModule<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&format!("{}Module", A::WORDS.prefix))
            .field("kernels", &A::image_kernels(&self.inner.image).len())
            .finish()
    }
}

/// A kernel of a module of a stream-based vendor backend (`CudaKernel`, `HipKernel`).
///
/// ```
/// fn show<A: offload_driver::StreamApi>(k: &offload_driver::StreamKernel<A>) -> String {
///     format!("{k:?}")
/// }
/// ```
pub struct StreamKernel<A: StreamApi> {
    pub(crate) module: Arc<ModuleInner<A>>,
    pub(crate) function: A::Function,
    pub(crate) params: Vec<ParamKind>,
    pub(crate) name: String,
}

// SAFETY: as for `ModuleInner`: the function handle lives as long as its module, which the
// kernel holds.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for StreamKernel<A> {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for StreamKernel<A> {}

impl<A: StreamApi> std::fmt::Debug for StreamKernel<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&format!("{}Kernel", A::WORDS.prefix))
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

fn invalid_binary<A: StreamApi>(reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: A::KIND,
        call: "",
        reason: reason.into(),
    }
}

/// Inspects `image` for `core`'s device, as `load` does, without loading it.
pub(crate) fn validate<A: StreamApi>(core: &DeviceCore<A>, image: &[u8]) -> Result<A::Image> {
    core.api()
        .inspect(core.context(), image)
        .map_err(invalid_binary::<A>)
}

/// Inspects and loads `image`.
#[allow(unsafe_code)]
pub(crate) fn load<A: StreamApi>(
    core: &Arc<DeviceCore<A>>,
    image: &[u8],
) -> Result<StreamModule<A>> {
    core.settle();
    let inspected = validate(core, image)?;
    let bytes = A::module_bytes(image, &inspected).map_err(invalid_binary::<A>)?;
    core.bind()?;
    // SAFETY: the bytes are `module_bytes` of this very inspection, and the module keeps
    // them until it is unloaded (`_bytes`).
    let raw = unsafe { core.api().module_load(&bytes, &inspected) }?;
    core.made();
    Ok(StreamModule {
        inner: Arc::new(ModuleInner {
            core: core.clone(),
            raw,
            image: inspected,
            uses: Uses::default(),
            _bytes: bytes,
        }),
    })
}

fn not_found<A: StreamApi>(name: &str) -> Error {
    Error::SymbolNotFound {
        backend: A::KIND,
        call: "",
        symbol: name.to_string(),
        hint: String::new(),
    }
}

impl<A: StreamApi> StreamModule<A> {
    /// Address and size of a global.
    #[allow(unsafe_code)]
    fn locate_global(&self, name: &str) -> Result<(u64, usize)> {
        let inner = &self.inner;
        if !A::image_globals(&inner.image).iter().any(|g| g == name) {
            return Err(not_found::<A>(name));
        }
        let cname = CString::new(name).map_err(|_| not_found::<A>(name))?;
        inner.core.bind()?;
        // SAFETY: the module is live and of the bound device.
        unsafe { inner.core.api().module_global(inner.raw, &cname) }.map_err(|f| {
            if f.code == A::NOT_FOUND {
                not_found::<A>(name)
            } else {
                driver_error::<A>(f)
            }
        })
    }
}

/// Kernels (the vendor's function lookup), the image's globals (its module-global
/// lookup, read and written with the synchronous copies after the module's queued launches)
/// and the unload.
impl<A: StreamApi> hal::Program for StreamModule<A> {
    type Kernel = StreamKernel<A>;

    #[allow(unsafe_code)]
    fn kernel(&self, name: &str) -> Result<StreamKernel<A>> {
        let inner = &self.inner;
        let params = A::kernel_params(&inner.image, name).ok_or_else(|| not_found::<A>(name))??;
        let cname = CString::new(name).map_err(|_| not_found::<A>(name))?;
        inner.core.bind()?;
        // SAFETY: the module is live (this handle holds it) and of the bound device.
        let function = unsafe { inner.core.api().module_function(inner.raw, &cname) }
            .map_err(driver_error::<A>)?;
        Ok(StreamKernel {
            module: inner.clone(),
            function,
            params,
            name: name.to_string(),
        })
    }

    fn params(kernel: &StreamKernel<A>) -> &[ParamKind] {
        &kernel.params
    }

    fn kernels(&self) -> Vec<String> {
        A::image_kernels(&self.inner.image)
    }

    fn globals(&self) -> Vec<String> {
        A::image_globals(&self.inner.image)
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        let (address, size) = self.locate_global(name)?;
        Ok(GlobalInfo { address, size })
    }

    #[allow(unsafe_code)]
    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        let (address, size) = self.locate_global(name)?;
        check::<A>(name, size, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.inner.uses.wait()?;
        let core = &self.inner.core;
        core.bind()?;
        // SAFETY: the range lies inside the global (checked against the vendor's size), a
        // live allocation of the module, which this handle holds; no queued launch of the
        // module runs (waited).
        unsafe { core.api().memcpy_dtoh(dst, address + offset as u64) }.map_err(driver_error::<A>)
    }

    #[allow(unsafe_code)]
    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        let (address, size) = self.locate_global(name)?;
        check::<A>(name, size, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner.uses.wait()?;
        let core = &self.inner.core;
        core.bind()?;
        // SAFETY: as in `read_global`.
        unsafe { core.api().memcpy_htod(address + offset as u64, src) }
            .map_err(driver_error::<A>)?;
        // SAFETY: the synchronous copies' stream is the bound device's own, always live.
        unsafe { core.api().stream_synchronize(None) }.map_err(driver_error::<A>)
    }

    /// Unloads now, or with the last kernel of it, after its queued launches.
    fn unload(self) -> Result<()> {
        let waited = self.inner.uses.wait();
        drop(self);
        waited
    }
}

fn check<A: StreamApi>(name: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument {
            call: "",
            reason: format!(
                "range {offset}..+{len} is outside {} global `{name}` ({size} bytes)",
                A::WORDS.name
            ),
        }),
    }
}
