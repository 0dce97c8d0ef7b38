//! The erased family: one object-safe trait per object of [`crate::hal`], and one generic
//! wrapper implementing each for every backend, so no backend is written twice.
//!
//! Every erased object carries its device (an `Arc` of the erased device) and its backend
//! type, so a call on it goes straight to the backend with no downcast: buffer copies, a
//! queue's launch and sync, a program's lookups. Only an object passed as an *argument* to another
//! (a copy's source buffer, a launch's kernel and buffers, an awaited event) is downcast,
//! one type-id comparison each; a failed downcast means two backends' objects were mixed
//! up and is `Error::InvalidArgument`, never a panic.

use crate::sync::{Arc, OnceLock};
use std::any::Any;
use std::marker::PhantomData;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::hal::{
    self, BackendKind, CompilerId, DeviceInfo, Dims, Event as _, Exported, GlobalInfo, KernelArg,
    KernelOf, Language, MemKind, ParamKind, Queue as _, Source,
};

type DeviceOf<P> = <P as hal::Platform>::Device;
type BufferOf<P> = <DeviceOf<P> as hal::Device>::Buffer;
type ProgramOf<P> = <DeviceOf<P> as hal::Device>::Program;
type QueueOf<P> = <DeviceOf<P> as hal::Device>::Queue;
type EventOf<P> = <DeviceOf<P> as hal::Device>::Event;

#[cold]
#[inline(never)]
fn foreign(kind: BackendKind, what: &str) -> Error {
    Error::invalid(
        "offload (internal)",
        format!("a {what} of another backend was passed to a {kind} object"),
    )
}

#[inline(always)]
fn downcast<'a, T: 'static>(object: &'a dyn Any, kind: BackendKind, what: &str) -> Result<&'a T> {
    match object.downcast_ref::<T>() {
        Some(x) => Ok(x),
        None => Err(foreign(kind, what)),
    }
}

/// A platform with its type erased.
pub(crate) trait DynPlatform: Send + Sync {
    fn name(&self) -> String;
    fn devices(&self) -> Vec<Arc<dyn DynDevice>>;
    fn deinit(&self) -> Result<()>;
}

/// A device with its type erased. The objects it makes hold it (an `Arc` of it).
pub(crate) trait DynDevice: Send + Sync {
    fn info(&self) -> Result<DeviceInfo>;
    fn alloc(self: Arc<Self>, size: usize, kind: MemKind) -> Result<Box<dyn DynBuffer>>;
    fn load(self: Arc<Self>, image: &[u8]) -> Result<Box<dyn DynProgram>>;
    fn validate(&self, image: &[u8]) -> Result<()>;
    /// The device's compiler for `language`; `Error::Unsupported` when it has none.
    fn compiler(&self, language: Language) -> Result<CompilerId>;
    fn compile(&self, source: &Source) -> Result<Vec<u8>>;
    fn queue(self: Arc<Self>) -> Result<Box<dyn DynQueue>>;
    /// IPC (`Error::Unsupported` where the backend has none): the device's identity.
    fn uuid(&self) -> Result<[u8; 16]>;
    fn alloc_exportable(self: Arc<Self>, size: usize, kind: MemKind) -> Result<Box<dyn DynBuffer>>;
    fn import(self: Arc<Self>, exported: Exported) -> Result<Box<dyn DynBuffer>>;
    /// Memory another library allocated (`hal::Device::adopt`); `Error::Unsupported` where
    /// the backend cannot adopt.
    ///
    /// # Safety
    /// As `hal::Device::adopt`.
    #[allow(unsafe_code)]
    unsafe fn adopt(
        self: Arc<Self>,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: hal::Owner,
    ) -> Result<Box<dyn DynBuffer>>;
}

/// A buffer with its type erased, together with its device.
pub(crate) trait DynBuffer: Any + Send + Sync {
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()>;
    fn write(&mut self, offset: usize, src: &[u8]) -> Result<()>;
    fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()>;
    fn copy_within(&mut self, src_offset: usize, dst_offset: usize, len: usize) -> Result<()>;
    fn with_mapped(&mut self, f: &mut dyn FnMut(&mut [u8])) -> Result<()>;
    /// `hal::Device::pending`.
    fn pending(&self) -> Option<hal::Pending>;
    /// `hal::Device::address`; `Error::Unsupported` where the backend has none.
    fn address(&self) -> Result<u64>;
    fn copy_from(
        &mut self,
        dst_offset: usize,
        src: &dyn DynBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()>;
    /// IPC: what another process needs to map it.
    fn export(&self) -> Result<Exported>;
    fn free(self: Box<Self>) -> Result<()>;
}

/// A loaded program with its type erased, together with its device.
pub(crate) trait DynProgram: Send + Sync {
    fn kernel(&self, name: &str) -> Result<Box<dyn DynKernel>>;
    fn verified(&self) -> bool;
    fn kernels(&self) -> Vec<String>;
    fn globals(&self) -> Vec<String>;
    fn global(&self, name: &str) -> Result<GlobalInfo>;
    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()>;
    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()>;
    fn unload(self: Box<Self>) -> Result<()>;
}

/// A kernel with its type erased.
pub(crate) trait DynKernel: Any + Send + Sync {
    fn params(&self) -> &[ParamKind];
    fn workgroup_size(&self) -> Option<[u32; 3]>;
}

/// A queue with its type erased, together with its device.
pub(crate) trait DynQueue: Send + Sync {
    /// # Safety
    /// The contract of [`hal::Queue::launch`].
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        kernel: &dyn DynKernel,
        dims: &Dims,
        args: &[KernelArg<'_, dyn DynBuffer>],
    ) -> Result<()>;
    fn enqueue_write(&self, buffer: &dyn DynBuffer, offset: usize, data: Vec<u8>) -> Result<()>;
    fn enqueue_fill(
        &self,
        buffer: &dyn DynBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()>;
    fn enqueue_copy(
        &self,
        src: &dyn DynBuffer,
        src_offset: usize,
        dst: &dyn DynBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;
    fn enqueue_host_fn(&self, f: hal::HostFn) -> Result<()>;
    fn sync(&self) -> Result<()>;
    fn is_idle(&self) -> Result<bool>;
    fn record(&self) -> Result<Box<dyn DynEvent>>;
    fn wait(&self, event: &dyn DynEvent) -> Result<()>;
    /// Drains, then destroys the queue.
    fn destroy(self: Box<Self>) -> Result<()>;
}

/// An event with its type erased, together with its device.
pub(crate) trait DynEvent: Any + Send + Sync {
    fn sync(&self) -> Result<()>;
    fn is_complete(&self) -> Result<bool>;
    fn elapsed_since(&self, start: &dyn DynEvent) -> Result<Duration>;
    fn destroy(self: Box<Self>) -> Result<()>;
}

/// The IPC entry points of device type `D`, where it implements [`hal::Ipc`].
struct IpcFns<D: hal::Device> {
    uuid: fn(&D) -> [u8; 16],
    alloc: fn(&D, usize, MemKind) -> Result<D::Buffer>,
    export: fn(&D, &D::Buffer) -> Result<Exported>,
    import: fn(&D, Exported) -> Result<D::Buffer>,
}

impl<D: hal::Device> Clone for IpcFns<D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: hal::Device> Copy for IpcFns<D> {}

impl<D: hal::Ipc> IpcFns<D> {
    const TABLE: IpcFns<D> = IpcFns {
        uuid: <D as hal::Ipc>::uuid,
        alloc: <D as hal::Ipc>::alloc_exportable,
        export: <D as hal::Ipc>::export,
        import: <D as hal::Ipc>::import,
    };
}

fn no_ipc(kind: BackendKind, call: &'static str) -> Error {
    Error::Unsupported {
        backend: kind,
        call,
        reason: format!("the {kind} backend cannot share memory with other processes"),
    }
}

/// Platform `P`, erased, with its devices' IPC entry points where it has them.
pub(crate) struct Erased<P: hal::Platform> {
    platform: P,
    ipc: Option<IpcFns<DeviceOf<P>>>,
}

impl<P: hal::Platform> Erased<P> {
    /// A platform without IPC.
    pub(crate) fn new(platform: P) -> Self {
        Erased {
            platform,
            ipc: None,
        }
    }
}

impl<P: hal::Platform> Erased<P>
where
    DeviceOf<P>: hal::Ipc,
{
    /// A platform whose devices share memory between processes.
    pub(crate) fn with_ipc(platform: P) -> Self {
        Erased {
            platform,
            ipc: Some(IpcFns::TABLE),
        }
    }
}

impl<P: hal::Platform> DynPlatform for Erased<P> {
    fn name(&self) -> String {
        self.platform.name()
    }

    fn devices(&self) -> Vec<Arc<dyn DynDevice>> {
        self.platform
            .devices()
            .into_iter()
            .map(|device| {
                Arc::new(ErasedDevice::<P> {
                    raw: device,
                    ipc: self.ipc,
                    info: OnceLock::new(),
                }) as Arc<dyn DynDevice>
            })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        self.platform.deinit()
    }
}

/// A device of platform `P`, erased.
struct ErasedDevice<P: hal::Platform> {
    raw: DeviceOf<P>,
    ipc: Option<IpcFns<DeviceOf<P>>>,
    /// The device's properties, asked of the backend once (its first successful `info`).
    info: OnceLock<DeviceInfo>,
}

impl<P: hal::Platform> ErasedDevice<P> {
    fn ipc(&self, call: &'static str) -> Result<&IpcFns<DeviceOf<P>>> {
        self.ipc.as_ref().ok_or_else(|| no_ipc(P::KIND, call))
    }
}

impl<P: hal::Platform> DynDevice for ErasedDevice<P> {
    fn info(&self) -> Result<DeviceInfo> {
        if let Some(info) = self.info.get() {
            return Ok(info.clone());
        }
        let info = hal::Device::info(&self.raw)?;
        Ok(self.info.get_or_init(|| info).clone())
    }

    fn alloc(self: Arc<Self>, size: usize, kind: MemKind) -> Result<Box<dyn DynBuffer>> {
        Ok(Box::new(ErasedBuffer::<P> {
            raw: hal::Device::alloc(&self.raw, size, kind)?,
            device: self,
        }))
    }

    fn load(self: Arc<Self>, image: &[u8]) -> Result<Box<dyn DynProgram>> {
        Ok(Box::new(ErasedProgram::<P> {
            raw: hal::Device::load(&self.raw, image)?,
            _device: self,
        }))
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        hal::Device::validate(&self.raw, image)
    }

    fn compiler(&self, language: Language) -> Result<CompilerId> {
        hal::Device::compiler(&self.raw, language)?.ok_or_else(|| Error::Unsupported {
            backend: P::KIND,
            call: "Program::load",
            reason: format!("the {} backend compiles no {language} source", P::KIND),
        })
    }

    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        hal::Device::compile(&self.raw, source)
    }

    fn queue(self: Arc<Self>) -> Result<Box<dyn DynQueue>> {
        Ok(Box::new(ErasedQueue::<P> {
            raw: hal::Device::queue(&self.raw)?,
            device: self,
        }))
    }

    fn uuid(&self) -> Result<[u8; 16]> {
        Ok((self.ipc("Buffer::export")?.uuid)(&self.raw))
    }

    fn alloc_exportable(self: Arc<Self>, size: usize, kind: MemKind) -> Result<Box<dyn DynBuffer>> {
        let alloc = self.ipc("Device::alloc_exportable")?.alloc;
        Ok(Box::new(ErasedBuffer::<P> {
            raw: alloc(&self.raw, size, kind)?,
            device: self,
        }))
    }

    fn import(self: Arc<Self>, exported: Exported) -> Result<Box<dyn DynBuffer>> {
        // Without IPC, `exported` (and its fd) is dropped, i.e. closed.
        let import = self.ipc("Device::import")?.import;
        Ok(Box::new(ErasedBuffer::<P> {
            raw: import(&self.raw, exported)?,
            device: self,
        }))
    }

    #[allow(unsafe_code)]
    unsafe fn adopt(
        self: Arc<Self>,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: hal::Owner,
    ) -> Result<Box<dyn DynBuffer>> {
        // SAFETY: the caller's promise, passed on unchanged.
        let adopted = unsafe { hal::Device::adopt(&self.raw, address, len, kind, owner) }?;
        let Some(raw) = adopted else {
            return Err(Error::Unsupported {
                backend: P::KIND,
                call: "",
                reason: format!(
                    "the {} backend cannot adopt memory another library allocated",
                    P::KIND
                ),
            });
        };
        Ok(Box::new(ErasedBuffer::<P> { raw, device: self }))
    }
}

struct ErasedBuffer<P: hal::Platform> {
    device: Arc<ErasedDevice<P>>,
    raw: BufferOf<P>,
}

impl<P: hal::Platform> DynBuffer for ErasedBuffer<P> {
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        hal::Device::read(&self.device.raw, &self.raw, offset, dst)
    }

    fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        hal::Device::write(&self.device.raw, &mut self.raw, offset, src)
    }

    fn fill(&mut self, offset: usize, len: usize, value: u8) -> Result<()> {
        hal::Device::fill(&self.device.raw, &mut self.raw, offset, len, value)
    }

    fn copy_within(&mut self, src_offset: usize, dst_offset: usize, len: usize) -> Result<()> {
        hal::Device::copy_within(&self.device.raw, &mut self.raw, src_offset, dst_offset, len)
    }

    fn with_mapped(&mut self, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        hal::Device::with_mapped(&self.device.raw, &mut self.raw, f)
    }

    fn pending(&self) -> Option<hal::Pending> {
        hal::Device::pending(&self.device.raw, &self.raw)
    }

    fn address(&self) -> Result<u64> {
        hal::Device::address(&self.device.raw, &self.raw)?.ok_or_else(|| Error::Unsupported {
            backend: P::KIND,
            call: "",
            reason: format!("{} buffers have no address other libraries use", P::KIND),
        })
    }

    fn copy_from(
        &mut self,
        dst_offset: usize,
        src: &dyn DynBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        let src = downcast::<Self>(src as &dyn Any, P::KIND, "buffer")?;
        hal::Device::copy(
            &self.device.raw,
            &src.raw,
            src_offset,
            &mut self.raw,
            dst_offset,
            len,
        )
    }

    fn export(&self) -> Result<Exported> {
        let export = self.device.ipc("Buffer::export")?.export;
        export(&self.device.raw, &self.raw)
    }

    fn free(self: Box<Self>) -> Result<()> {
        let ErasedBuffer { device, raw } = *self;
        hal::Device::free(&device.raw, raw)
    }
}

struct ErasedProgram<P: hal::Platform> {
    raw: ProgramOf<P>,
    /// The program's device lives at least as long as the program.
    _device: Arc<ErasedDevice<P>>,
}

impl<P: hal::Platform> DynProgram for ErasedProgram<P> {
    fn verified(&self) -> bool {
        hal::Program::verified(&self.raw)
    }

    fn kernel(&self, name: &str) -> Result<Box<dyn DynKernel>> {
        Ok(Box::new(ErasedKernel::<P> {
            raw: hal::Program::kernel(&self.raw, name)?,
            platform: PhantomData,
        }))
    }

    fn kernels(&self) -> Vec<String> {
        hal::Program::kernels(&self.raw)
    }

    fn globals(&self) -> Vec<String> {
        hal::Program::globals(&self.raw)
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        hal::Program::global(&self.raw, name)
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        hal::Program::read_global(&self.raw, name, offset, dst)
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        hal::Program::write_global(&self.raw, name, offset, src)
    }

    fn unload(self: Box<Self>) -> Result<()> {
        hal::Program::unload(self.raw)
    }
}

struct ErasedKernel<P: hal::Platform> {
    raw: KernelOf<DeviceOf<P>>,
    platform: PhantomData<fn() -> P>,
}

impl<P: hal::Platform> DynKernel for ErasedKernel<P> {
    fn params(&self) -> &[ParamKind] {
        <ProgramOf<P> as hal::Program>::params(&self.raw)
    }

    fn workgroup_size(&self) -> Option<[u32; 3]> {
        <ProgramOf<P> as hal::Program>::workgroup_size(&self.raw)
    }
}

/// Launch arguments that fit here need no allocation (most kernels take a few).
const INLINE_ARGS: usize = 8;

struct ErasedQueue<P: hal::Platform> {
    device: Arc<ErasedDevice<P>>,
    raw: QueueOf<P>,
}

impl<P: hal::Platform> ErasedQueue<P> {
    fn buffer(b: &dyn DynBuffer) -> Result<&BufferOf<P>> {
        Ok(&downcast::<ErasedBuffer<P>>(b as &dyn Any, P::KIND, "buffer")?.raw)
    }

    fn typed<'a>(arg: &KernelArg<'a, dyn DynBuffer>) -> Result<KernelArg<'a, BufferOf<P>>> {
        Ok(match *arg {
            KernelArg::Buffer(b) => KernelArg::Buffer(
                &downcast::<ErasedBuffer<P>>(b as &dyn Any, P::KIND, "buffer")?.raw,
            ),
            KernelArg::Range {
                buffer,
                offset,
                len,
            } => KernelArg::Range {
                buffer: &downcast::<ErasedBuffer<P>>(buffer as &dyn Any, P::KIND, "buffer")?.raw,
                offset,
                len,
            },
            KernelArg::Scalar(bytes) => KernelArg::Scalar(bytes),
        })
    }
}

impl<P: hal::Platform> DynQueue for ErasedQueue<P> {
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        kernel: &dyn DynKernel,
        dims: &Dims,
        args: &[KernelArg<'_, dyn DynBuffer>],
    ) -> Result<()> {
        let kernel = &downcast::<ErasedKernel<P>>(kernel as &dyn Any, P::KIND, "kernel")?.raw;
        if args.len() <= INLINE_ARGS {
            let mut typed = [KernelArg::Scalar(&[][..]); INLINE_ARGS];
            for (slot, arg) in typed.iter_mut().zip(args) {
                *slot = Self::typed(arg)?;
            }
            // SAFETY: our caller took on the launch contract (`DynQueue::launch`).
            unsafe { self.raw.launch(kernel, dims, &typed[..args.len()]) }
        } else {
            let typed = args.iter().map(Self::typed).collect::<Result<Vec<_>>>()?;
            // SAFETY: as above.
            unsafe { self.raw.launch(kernel, dims, &typed) }
        }
    }

    fn enqueue_write(&self, buffer: &dyn DynBuffer, offset: usize, data: Vec<u8>) -> Result<()> {
        let buffer = Self::buffer(buffer)?;
        self.raw.enqueue_write(buffer, offset, data)
    }

    fn enqueue_fill(
        &self,
        buffer: &dyn DynBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        let buffer = Self::buffer(buffer)?;
        self.raw.enqueue_fill(buffer, offset, len, pattern)
    }

    fn enqueue_copy(
        &self,
        src: &dyn DynBuffer,
        src_offset: usize,
        dst: &dyn DynBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let (src, dst) = (Self::buffer(src)?, Self::buffer(dst)?);
        self.raw.enqueue_copy(src, src_offset, dst, dst_offset, len)
    }

    fn enqueue_host_fn(&self, f: hal::HostFn) -> Result<()> {
        self.raw.enqueue_host_fn(f)
    }

    fn sync(&self) -> Result<()> {
        hal::Queue::sync(&self.raw)
    }

    fn is_idle(&self) -> Result<bool> {
        self.raw.is_idle()
    }

    fn record(&self) -> Result<Box<dyn DynEvent>> {
        Ok(Box::new(ErasedEvent::<P> {
            raw: self.raw.record()?,
            device: self.device.clone(),
        }))
    }

    fn wait(&self, event: &dyn DynEvent) -> Result<()> {
        let event = downcast::<ErasedEvent<P>>(event as &dyn Any, P::KIND, "event")?;
        self.raw.wait_event(&event.raw)
    }

    fn destroy(self: Box<Self>) -> Result<()> {
        let ErasedQueue { device, raw } = *self;
        // The backend drains the queue first (see `hal::Queue::destroy`); the device outlives
        // it.
        let destroyed = hal::Queue::destroy(raw);
        drop(device);
        destroyed
    }
}

struct ErasedEvent<P: hal::Platform> {
    device: Arc<ErasedDevice<P>>,
    raw: EventOf<P>,
}

impl<P: hal::Platform> DynEvent for ErasedEvent<P> {
    fn sync(&self) -> Result<()> {
        hal::Event::sync(&self.raw)
    }

    fn is_complete(&self) -> Result<bool> {
        self.raw.is_complete()
    }

    fn elapsed_since(&self, start: &dyn DynEvent) -> Result<Duration> {
        let start = downcast::<Self>(start as &dyn Any, P::KIND, "event")?;
        self.raw.elapsed_since(&start.raw)
    }

    fn destroy(self: Box<Self>) -> Result<()> {
        let ErasedEvent { device, raw } = *self;
        let destroyed = hal::Event::destroy(raw);
        drop(device);
        destroyed
    }
}
