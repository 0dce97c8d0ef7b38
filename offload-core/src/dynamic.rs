//! Type erasure of [`Backend`] (and [`Compute`]) so one runtime holds platforms of
//! different backends.
//!
//! Two wrappers implement the object-safe [`DynPlatform`]: `Full<B>` for a backend with
//! compute, `MemoryOnly<B>` for one without (its compute calls answer
//! `Error::Unsupported`). Buffers are erased together with their platform (`Typed<B>`), so
//! the copy calls on the hot path need no downcast. Objects cross the erasure as `dyn Any` and come back with a
//! `downcast_ref`, one type-id comparison; a failed downcast means two platforms' objects
//! were mixed up and is reported as `Error::InvalidArgument`, never a panic.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{
    Backend, BackendKind, Compute, DeviceInfo, Dims, GlobalInfo, KernelArg, MemKind, ParamKind,
};
use crate::config::Config;
use crate::error::{Error, Result};

/// A backend object with its type erased.
pub(crate) type AnyObject = Box<dyn Any + Send + Sync>;

/// The object-safe face of a platform. Implemented only by the wrappers below.
pub(crate) trait DynPlatform: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn name(&self) -> String;
    fn devices(&self) -> Vec<AnyObject>;
    fn device_info(&self, device: &dyn Any) -> Result<DeviceInfo>;
    fn alloc(&self, device: &dyn Any, size: usize, kind: MemKind) -> Result<Box<dyn DynBuffer>>;
    fn deinit(&self) -> Result<()>;

    fn load(&self, device: &dyn Any, image: &[u8]) -> Result<AnyObject>;
    fn unload(&self, module: AnyObject) -> Result<()>;
    fn kernel(&self, module: &dyn Any, name: &str) -> Result<AnyObject>;
    fn params(&self, kernel: &dyn Any) -> Result<Vec<ParamKind>>;
    fn global(&self, module: &dyn Any, name: &str) -> Result<GlobalInfo>;
    fn read_global(
        &self,
        module: &dyn Any,
        name: &str,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()>;
    fn write_global(&self, module: &dyn Any, name: &str, offset: usize, src: &[u8]) -> Result<()>;
    fn queue(&self, device: &dyn Any) -> Result<AnyObject>;
    fn destroy_queue(&self, queue: AnyObject) -> Result<()>;
    fn launch(
        &self,
        queue: &dyn Any,
        kernel: &dyn Any,
        dims: &Dims,
        args: &[KernelArg<'_, dyn Any>],
    ) -> Result<()>;
    fn sync(&self, queue: &dyn Any) -> Result<()>;
    fn record(&self, queue: &dyn Any) -> Result<AnyObject>;
    fn wait_event(&self, queue: &dyn Any, event: &dyn Any) -> Result<()>;
    fn sync_event(&self, event: &dyn Any) -> Result<()>;
    fn elapsed(&self, start: &dyn Any, end: &dyn Any) -> Result<Duration>;
    fn destroy_event(&self, event: AnyObject) -> Result<()>;
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

fn unbox<T: 'static>(object: AnyObject, kind: BackendKind, what: &str) -> Result<T> {
    object
        .downcast::<T>()
        .map(|b| *b)
        .map_err(|_| foreign(kind, what))
}

/// A buffer with its type erased, together with its platform: the memory calls go straight
/// to the backend's code with no downcast (only a copy's source and a launch's buffer
/// arguments are downcast, once each).
pub(crate) trait DynBuffer: Send + Sync {
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()>;
    fn write(&mut self, offset: usize, src: &[u8]) -> Result<()>;
    fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()>;
    fn copy_within(&mut self, so: usize, d: usize, len: usize) -> Result<()>;
    fn copy_from(&mut self, d: usize, src: &dyn DynBuffer, so: usize, len: usize) -> Result<()>;
    /// The buffer as `dyn Any` (a `Typed<B>`), for downcasts.
    fn as_any(&self) -> &(dyn Any + Send + Sync);
    fn free(self: Box<Self>) -> Result<()>;
}

/// A backend's buffer and the platform that made it.
pub(crate) struct Typed<B: Backend> {
    platform: Arc<B>,
    raw: B::Buffer,
}

impl<B: Backend> DynBuffer for Typed<B> {
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.platform.read(&self.raw, offset, dst)
    }

    fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.platform.write(&mut self.raw, offset, src)
    }

    fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.platform.fill(&mut self.raw, offset, len, value)
    }

    fn copy_within(&mut self, so: usize, d: usize, len: usize) -> Result<()> {
        self.platform.copy_within(&mut self.raw, so, d, len)
    }

    fn copy_from(&mut self, d: usize, src: &dyn DynBuffer, so: usize, len: usize) -> Result<()> {
        let src = downcast::<Typed<B>>(src.as_any(), B::KIND, "buffer")?;
        self.platform.copy(&src.raw, so, &mut self.raw, d, len)
    }

    fn as_any(&self) -> &(dyn Any + Send + Sync) {
        self
    }

    fn free(self: Box<Self>) -> Result<()> {
        let Typed { platform, raw } = *self;
        platform.free(raw)
    }
}

/// A backend with compute.
pub(crate) struct Full<B>(pub(crate) Arc<B>);

/// A backend without compute (still under construction).
pub(crate) struct MemoryOnly<B>(pub(crate) Arc<B>);

/// The memory half of `DynPlatform`, the same for both wrappers.
macro_rules! memory_methods {
    () => {
        fn kind(&self) -> BackendKind {
            B::KIND
        }

        fn name(&self) -> String {
            Backend::name(&*self.0)
        }

        fn devices(&self) -> Vec<AnyObject> {
            Backend::devices(&*self.0)
                .into_iter()
                .map(|d| Box::new(d) as AnyObject)
                .collect()
        }

        fn device_info(&self, device: &dyn Any) -> Result<DeviceInfo> {
            Backend::device_info(&*self.0, downcast(device, B::KIND, "device")?)
        }

        fn alloc(
            &self,
            device: &dyn Any,
            size: usize,
            kind: MemKind,
        ) -> Result<Box<dyn DynBuffer>> {
            let device = downcast::<B::Device>(device, B::KIND, "device")?;
            Ok(Box::new(Typed::<B> {
                raw: Backend::alloc(&*self.0, device, size, kind)?,
                platform: self.0.clone(),
            }))
        }

        fn deinit(&self) -> Result<()> {
            Backend::deinit(&*self.0)
        }
    };
}

impl<B: Compute> DynPlatform for Full<B> {
    memory_methods!();

    fn load(&self, device: &dyn Any, image: &[u8]) -> Result<AnyObject> {
        let device = downcast::<B::Device>(device, B::KIND, "device")?;
        Ok(Box::new(Compute::load(&*self.0, device, image)?))
    }

    fn unload(&self, module: AnyObject) -> Result<()> {
        Compute::unload(&*self.0, unbox(module, B::KIND, "module")?)
    }

    fn kernel(&self, module: &dyn Any, name: &str) -> Result<AnyObject> {
        let module = downcast::<B::Module>(module, B::KIND, "module")?;
        Ok(Box::new(Compute::kernel(&*self.0, module, name)?))
    }

    fn params(&self, kernel: &dyn Any) -> Result<Vec<ParamKind>> {
        Ok(Compute::params(&*self.0, downcast(kernel, B::KIND, "kernel")?).to_vec())
    }

    fn global(&self, module: &dyn Any, name: &str) -> Result<GlobalInfo> {
        Compute::global(&*self.0, downcast(module, B::KIND, "module")?, name)
    }

    fn read_global(
        &self,
        module: &dyn Any,
        name: &str,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        Compute::read_global(
            &*self.0,
            downcast(module, B::KIND, "module")?,
            name,
            offset,
            dst,
        )
    }

    fn write_global(&self, module: &dyn Any, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        Compute::write_global(
            &*self.0,
            downcast(module, B::KIND, "module")?,
            name,
            offset,
            src,
        )
    }

    fn queue(&self, device: &dyn Any) -> Result<AnyObject> {
        let device = downcast::<B::Device>(device, B::KIND, "device")?;
        Ok(Box::new(Compute::queue(&*self.0, device)?))
    }

    fn destroy_queue(&self, queue: AnyObject) -> Result<()> {
        Compute::destroy_queue(&*self.0, unbox(queue, B::KIND, "queue")?)
    }

    fn launch(
        &self,
        queue: &dyn Any,
        kernel: &dyn Any,
        dims: &Dims,
        args: &[KernelArg<'_, dyn Any>],
    ) -> Result<()> {
        let queue = downcast(queue, B::KIND, "queue")?;
        let kernel = downcast(kernel, B::KIND, "kernel")?;
        let mut typed: Vec<KernelArg<'_, B::Buffer>> = Vec::with_capacity(args.len());
        for arg in args {
            typed.push(match *arg {
                KernelArg::Buffer(b) => {
                    KernelArg::Buffer(&downcast::<Typed<B>>(b, B::KIND, "buffer")?.raw)
                }
                KernelArg::Scalar(bytes) => KernelArg::Scalar(bytes),
            });
        }
        Compute::launch(&*self.0, queue, kernel, dims, &typed)
    }

    fn sync(&self, queue: &dyn Any) -> Result<()> {
        Compute::sync(&*self.0, downcast(queue, B::KIND, "queue")?)
    }

    fn record(&self, queue: &dyn Any) -> Result<AnyObject> {
        Ok(Box::new(Compute::record(
            &*self.0,
            downcast(queue, B::KIND, "queue")?,
        )?))
    }

    fn wait_event(&self, queue: &dyn Any, event: &dyn Any) -> Result<()> {
        let queue = downcast(queue, B::KIND, "queue")?;
        Compute::wait_event(&*self.0, queue, downcast(event, B::KIND, "event")?)
    }

    fn sync_event(&self, event: &dyn Any) -> Result<()> {
        Compute::sync_event(&*self.0, downcast(event, B::KIND, "event")?)
    }

    fn elapsed(&self, start: &dyn Any, end: &dyn Any) -> Result<Duration> {
        let start = downcast(start, B::KIND, "event")?;
        Compute::elapsed(&*self.0, start, downcast(end, B::KIND, "event")?)
    }

    fn destroy_event(&self, event: AnyObject) -> Result<()> {
        Compute::destroy_event(&*self.0, unbox(event, B::KIND, "event")?)
    }
}

impl<B: Backend> MemoryOnly<B> {
    fn unsupported<T>(&self, call: &'static str) -> Result<T> {
        Err(Error::Unsupported {
            backend: B::KIND,
            call,
            reason: "this backend has no programs, kernels or queues yet".into(),
        })
    }
}

impl<B: Backend> DynPlatform for MemoryOnly<B> {
    memory_methods!();

    fn load(&self, _: &dyn Any, _: &[u8]) -> Result<AnyObject> {
        self.unsupported("Program::load")
    }
    fn unload(&self, _: AnyObject) -> Result<()> {
        self.unsupported("Module::unload")
    }
    fn kernel(&self, _: &dyn Any, _: &str) -> Result<AnyObject> {
        self.unsupported("Module::kernel")
    }
    fn params(&self, _: &dyn Any) -> Result<Vec<ParamKind>> {
        self.unsupported("Module::kernel")
    }
    fn global(&self, _: &dyn Any, _: &str) -> Result<GlobalInfo> {
        self.unsupported("Module::global")
    }
    fn read_global(&self, _: &dyn Any, _: &str, _: usize, _: &mut [u8]) -> Result<()> {
        self.unsupported("Module::read_global")
    }
    fn write_global(&self, _: &dyn Any, _: &str, _: usize, _: &[u8]) -> Result<()> {
        self.unsupported("Module::write_global")
    }
    fn queue(&self, _: &dyn Any) -> Result<AnyObject> {
        self.unsupported("Device::queue")
    }
    fn destroy_queue(&self, _: AnyObject) -> Result<()> {
        self.unsupported("Queue::drop")
    }
    fn launch(
        &self,
        _: &dyn Any,
        _: &dyn Any,
        _: &Dims,
        _: &[KernelArg<'_, dyn Any>],
    ) -> Result<()> {
        self.unsupported("Queue::launch")
    }
    fn sync(&self, _: &dyn Any) -> Result<()> {
        self.unsupported("Queue::sync")
    }
    fn record(&self, _: &dyn Any) -> Result<AnyObject> {
        self.unsupported("Queue::record")
    }
    fn wait_event(&self, _: &dyn Any, _: &dyn Any) -> Result<()> {
        self.unsupported("Queue::wait")
    }
    fn sync_event(&self, _: &dyn Any) -> Result<()> {
        self.unsupported("Event::sync")
    }
    fn elapsed(&self, _: &dyn Any, _: &dyn Any) -> Result<Duration> {
        self.unsupported("Event::elapsed")
    }
    fn destroy_event(&self, _: AnyObject) -> Result<()> {
        self.unsupported("Event::drop")
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

fn open_full<B: Compute>(config: &Config) -> Result<Box<dyn DynPlatform>> {
    Ok(Box::new(Full(Arc::new(B::open(config)?))))
}

fn open_memory_only<B: Backend>(config: &Config) -> Result<Box<dyn DynPlatform>> {
    Ok(Box::new(MemoryOnly(Arc::new(B::open(config)?))))
}

impl PlatformEntry {
    /// The entry for backend `B`, with memory and compute.
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::of::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind().name(), "reference");
    /// ```
    pub fn of<B: Compute>() -> Self {
        PlatformEntry {
            kind: B::KIND,
            open: open_full::<B>,
        }
    }

    /// The entry for a backend without compute yet: devices and memory work, and programs,
    /// kernels and queues answer `Error::Unsupported` naming the backend.
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::memory_only::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind().name(), "reference");
    /// ```
    pub fn memory_only<B: Backend>() -> Self {
        PlatformEntry {
            kind: B::KIND,
            open: open_memory_only::<B>,
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
