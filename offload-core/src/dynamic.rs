//! Type erasure of [`Backend`] so one runtime holds platforms of different backends.
//!
//! A blanket `impl<B: Backend> DynPlatform for B` (as in wgpu-hal's `dynamic/`) turns each
//! backend's devices and buffers into `dyn Any` and back with a `downcast_ref`, which is one
//! type-id comparison. A downcast that fails means the core mixed up two platforms' objects:
//! it is reported as `Error::InvalidArgument`, never a panic. No backend is written twice.

use std::any::Any;

use crate::backend::{Backend, BackendKind, DeviceInfo, MemKind};
use crate::config::Config;
use crate::error::{Error, Result};

/// A backend object with its type erased.
pub(crate) type AnyObject = Box<dyn Any + Send + Sync>;

/// The object-safe face of a [`Backend`]. Implemented for every backend; not implementable
/// (or callable) outside the core.
pub(crate) trait DynPlatform: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn name(&self) -> String;
    fn devices(&self) -> Vec<AnyObject>;
    fn device_info(&self, device: &dyn Any) -> Result<DeviceInfo>;
    fn alloc(&self, device: &dyn Any, size: usize, kind: MemKind) -> Result<AnyObject>;
    fn free(&self, buffer: AnyObject) -> Result<()>;
    fn read(&self, buffer: &dyn Any, offset: usize, dst: &mut [u8]) -> Result<()>;
    fn write(&self, buffer: &mut dyn Any, offset: usize, src: &[u8]) -> Result<()>;
    fn fill(&self, buffer: &mut dyn Any, offset: usize, len: usize, value: u8) -> Result<()>;
    fn copy(
        &self,
        src: &dyn Any,
        src_offset: usize,
        dst: &mut dyn Any,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;
    fn copy_within(
        &self,
        buffer: &mut dyn Any,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;
    fn deinit(&self) -> Result<()>;
}

fn foreign(kind: BackendKind, what: &str) -> Error {
    Error::invalid(
        "offload (internal)",
        format!("a {what} of another platform was passed to the {kind} platform"),
    )
}

fn downcast<'a, T: 'static>(object: &'a dyn Any, kind: BackendKind, what: &str) -> Result<&'a T> {
    object
        .downcast_ref::<T>()
        .ok_or_else(|| foreign(kind, what))
}

fn downcast_mut<T: 'static>(object: &mut dyn Any, kind: BackendKind) -> Result<&mut T> {
    object
        .downcast_mut::<T>()
        .ok_or_else(|| foreign(kind, "buffer"))
}

impl<B: Backend> DynPlatform for B {
    fn kind(&self) -> BackendKind {
        B::KIND
    }

    fn name(&self) -> String {
        Backend::name(self)
    }

    fn devices(&self) -> Vec<AnyObject> {
        Backend::devices(self)
            .into_iter()
            .map(|d| Box::new(d) as AnyObject)
            .collect()
    }

    fn device_info(&self, device: &dyn Any) -> Result<DeviceInfo> {
        Backend::device_info(self, downcast(device, B::KIND, "device")?)
    }

    fn alloc(&self, device: &dyn Any, size: usize, kind: MemKind) -> Result<AnyObject> {
        let device = downcast::<B::Device>(device, B::KIND, "device")?;
        Ok(Box::new(Backend::alloc(self, device, size, kind)?))
    }

    fn free(&self, buffer: AnyObject) -> Result<()> {
        match buffer.downcast::<B::Buffer>() {
            Ok(buffer) => Backend::free(self, *buffer),
            Err(_) => Err(foreign(B::KIND, "buffer")),
        }
    }

    fn read(&self, buffer: &dyn Any, offset: usize, dst: &mut [u8]) -> Result<()> {
        Backend::read(self, downcast(buffer, B::KIND, "buffer")?, offset, dst)
    }

    fn write(&self, buffer: &mut dyn Any, offset: usize, src: &[u8]) -> Result<()> {
        Backend::write(self, downcast_mut(buffer, B::KIND)?, offset, src)
    }

    fn fill(&self, buffer: &mut dyn Any, offset: usize, len: usize, value: u8) -> Result<()> {
        Backend::fill(self, downcast_mut(buffer, B::KIND)?, offset, len, value)
    }

    fn copy(
        &self,
        src: &dyn Any,
        src_offset: usize,
        dst: &mut dyn Any,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let src = downcast(src, B::KIND, "buffer")?;
        let dst = downcast_mut(dst, B::KIND)?;
        Backend::copy(self, src, src_offset, dst, dst_offset, len)
    }

    fn copy_within(
        &self,
        buffer: &mut dyn Any,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let buffer = downcast_mut(buffer, B::KIND)?;
        Backend::copy_within(self, buffer, src_offset, dst_offset, len)
    }

    fn deinit(&self) -> Result<()> {
        Backend::deinit(self)
    }
}

/// How the runtime opens one platform: a backend's `open`, erased.
///
/// Built-in backends provide one (`offload_host::platform()`); tests and plugins add their
/// own with [`crate::Offload::builder`]`().platform(..)`.
///
/// ```
/// use offload_core::{BackendKind, PlatformEntry};
/// let entry = PlatformEntry::of::<offload_core::reference::Reference>();
/// assert_eq!(entry.kind(), BackendKind::Reference);
/// ```
#[derive(Clone, Copy)]
pub struct PlatformEntry {
    kind: BackendKind,
    open: fn(&Config) -> Result<Box<dyn DynPlatform>>,
}

fn open_erased<B: Backend>(config: &Config) -> Result<Box<dyn DynPlatform>> {
    Ok(Box::new(B::open(config)?))
}

impl PlatformEntry {
    /// The entry for backend `B`.
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::of::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind().name(), "reference");
    /// ```
    pub fn of<B: Backend>() -> Self {
        PlatformEntry {
            kind: B::KIND,
            open: open_erased::<B>,
        }
    }

    /// The backend family this entry opens.
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::of::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind(), offload_core::BackendKind::Reference);
    /// ```
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    pub(crate) fn open(&self, config: &Config) -> Result<Box<dyn DynPlatform>> {
        (self.open)(config)
    }
}

impl std::fmt::Debug for PlatformEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlatformEntry")
            .field("kind", &self.kind)
            .finish()
    }
}

/// The platforms a runtime type opens by default: the facade implements this for the
/// backends compiled in; [`NoPlatforms`] opens none (add them with the builder).
///
/// ```
/// use offload_core::{Platforms, PlatformEntry, reference::Reference};
/// struct OnlyReference;
/// impl Platforms for OnlyReference {
///     fn platforms() -> Vec<PlatformEntry> {
///         vec![PlatformEntry::of::<Reference>()]
///     }
/// }
/// assert_eq!(OnlyReference::platforms().len(), 1);
/// ```
pub trait Platforms: 'static {
    /// The entries, in discovery order.
    fn platforms() -> Vec<PlatformEntry>;
}

/// No default platforms.
///
/// ```
/// use offload_core::{NoPlatforms, Platforms};
/// assert!(NoPlatforms::platforms().is_empty());
/// ```
#[derive(Debug)]
pub struct NoPlatforms;

impl Platforms for NoPlatforms {
    fn platforms() -> Vec<PlatformEntry> {
        Vec::new()
    }
}
