//! The backend-facing trait family (as wgpu-hal is to wgpu): what a backend crate implements.
//!
//! | trait | is | liboffload | CUDA |
//! |---|---|---|---|
//! | [`Platform`] | one driver instance: opens, lists its devices, deinitialises | platform | the driver after `cuInit` |
//! | [`Device`] | one device: info, memory and copies, queues, events, loading an image | device | device + its primary context |
//! | [`Program`] | an image loaded on one device: kernels, parameters, globals, unload | program | `CUmodule` (kernels: `CUfunction`) |
//!
//! Buffers, queues, events and kernels are associated types; each method sits on the
//! object it acts on. Objects keep their parents alive (a device holds what it needs of its
//! platform). Optional capabilities get traits of their own: [`Ipc`] (sharing memory with
//! other processes).
//!
//! The core never calls a driver itself, and it validates arguments — sizes, ranges,
//! ownership, launch arguments against declared parameters — *before* a backend method
//! is called, so a backend sees only well-formed requests. The traits are safe: a backend's
//! `unsafe` and FFI stay inside its own crate, and its methods must be sound for any input
//! a safe caller can build (check cheaply what soundness depends on). Users never see these
//! traits: the runtime erases them (`DynPlatform`, `DynDevice`, … in the `erased` module)
//! and hands out the handles of the crate root.

mod ipc;

use std::time::Duration;

use crate::config::Config;
use crate::error::Result;

pub use crate::error::panic_text;
pub use crate::vocab::format::ImageFormat;
pub(crate) use crate::vocab::format::REFERENCE_MAGIC;
pub use crate::vocab::source::{CompilerId, Language, Source};
pub use crate::vocab::types::{
    BackendKind, DeviceInfo, Dims, GlobalInfo, KernelArg, MemKind, ParamKind, ScalarType,
};
pub use ipc::{Exported, Ipc};

/// One platform: an initialised driver with its devices.
///
/// The runtime calls [`Platform::open`] at a 0→1 transition and [`Platform::deinit`] at the
/// matching 1→0 transition, after every object it made through the devices was given back
/// and the devices were dropped. Between the two, any method of the family may be called
/// from any thread at once.
///
/// ```
/// use offload_core::hal::{Device, Platform};
/// use offload_core::{Config, MemKind, reference::Reference};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let mut buf = dev.alloc(4, MemKind::Device)?;
/// dev.write(&mut buf, 0, &[1, 2, 3, 4])?;
/// dev.free(buf)?;
/// drop(dev);
/// assert_eq!(platform.live_allocations(), 0);
/// platform.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Platform: Send + Sync + Sized + 'static {
    /// A device of this platform.
    type Device: Device;

    /// The family this backend belongs to.
    const KIND: BackendKind;

    /// Opens the driver and discovers devices. A missing driver is
    /// `Error::DriverNotFound`; the runtime then treats the platform as absent unless the
    /// user asked for it by name.
    fn open(config: &Config) -> Result<Self>;

    /// A name for this platform (driver or instance), e.g. `"host"` or `"vulkan (llvmpipe)"`.
    fn name(&self) -> String;

    /// The devices found by `open`, in a stable order. Called once per generation.
    fn devices(&self) -> Vec<Self::Device>;

    /// Deinitialises the driver. Called exactly once, last, whatever failed before.
    fn deinit(&self) -> Result<()>;

    /// Whether this platform's devices may run `image`, judged by its container alone
    /// ([`ImageFormat`]) and without opening the driver: `Offload::devices_for` opens only
    /// the platforms that may, then asks their devices' [`Device::validate`]. The default,
    /// `true`, means "open me and let `validate` decide"; a backend that knows its formats
    /// says so, so that a program for another backend never pays for opening this one.
    ///
    /// ```
    /// use offload_core::hal::Platform;
    /// use offload_core::reference::{MAGIC, Reference};
    /// assert!(Reference::may_run(MAGIC.as_bytes()));
    /// assert!(!Reference::may_run(&0x0723_0203u32.to_ne_bytes()));
    /// ```
    fn may_run(image: &[u8]) -> bool {
        let _ = image;
        true
    }
}

/// The kernel type of device `D`'s programs.
pub type KernelOf<D> = <<D as Device>::Program as Program>::Kernel;

/// A host function enqueued on a queue ([`Device::enqueue_host_fn`]).
pub type HostFn = Box<dyn FnOnce() + Send + 'static>;

/// One device: its memory, queues and events, and the images loaded on it.
///
/// Buffers, queues and events are plain associated types; the device's methods act on
/// them (as wgpu-hal's `Device::create_buffer` / `destroy_buffer` do). Mutation of a buffer
/// takes `&mut`: the borrow checker proves exclusive access, so a backend needs no lock of
/// its own for it.
///
/// The runtime's ordering contract: a program's `unload` comes after every launch of its
/// kernels returned; `destroy_queue` after `sync`; everything before the platform's
/// `deinit`. A backend validates images before its driver sees them (P4).
///
/// ```
/// use offload_core::hal::{Device, Platform, Program};
/// use offload_core::{Config, Dims, KernelArg, MemKind, reference::{self, Reference}};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let program = dev.load(&reference::fixture_image())?;
/// let add_one = program.kernel("add_one")?;
/// let buf = dev.alloc(16, MemKind::Device)?;
/// let queue = dev.queue()?;
/// let n = 4u32.to_ne_bytes();
/// let dims = Dims::grid([1, 1, 1]).block([4, 1, 1]);
/// // SAFETY: the reference add_one touches the first n u32s of its 16-byte buffer.
/// unsafe { dev.launch(&queue, &add_one, &dims, &[KernelArg::Buffer(&buf), KernelArg::Scalar(&n)])? };
/// dev.sync(&queue)?;
/// let mut out = [0u8; 4];
/// dev.read(&buf, 12, &mut out)?;
/// assert_eq!(u32::from_ne_bytes(out), 1);
/// dev.destroy_queue(queue)?;
/// dev.free(buf)?;
/// drop(add_one);
/// program.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Device: Send + Sync + Sized + 'static {
    /// An allocation on this device.
    type Buffer: Send + Sync + 'static;
    /// An image loaded on this device.
    type Program: Program;
    /// An in-order stream of work on this device.
    type Queue: Send + Sync + 'static;
    /// A point in a queue's work, with a timestamp.
    type Event: Send + Sync + 'static;

    /// Describes the device.
    fn info(&self) -> Result<DeviceInfo>;

    /// Allocates `size` (> 0) bytes. An impossible size is `Error::OutOfMemory`.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<Self::Buffer>;

    /// Releases an allocation.
    fn free(&self, buffer: Self::Buffer) -> Result<()>;

    /// Copies `dst.len()` bytes at `offset` of `buffer` to `dst`.
    fn read(&self, buffer: &Self::Buffer, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies `src` to `buffer` at `offset`.
    fn write(&self, buffer: &mut Self::Buffer, offset: usize, src: &[u8]) -> Result<()>;

    /// Sets `len` bytes at `offset` to `value`.
    fn fill(&self, buffer: &mut Self::Buffer, offset: usize, len: usize, value: u8) -> Result<()>;

    /// Copies `len` bytes from `src` to another buffer `dst` of this device.
    fn copy(
        &self,
        src: &Self::Buffer,
        src_offset: usize,
        dst: &mut Self::Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Copies `len` bytes inside one buffer; the ranges may overlap (memmove semantics).
    fn copy_within(
        &self,
        buffer: &mut Self::Buffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Runs `f` on the buffer's bytes in place, where the host can touch them directly
    /// (host memory, or memory the driver maps), after the queued work that uses the
    /// buffer; `Error::Unsupported` where it cannot (unmappable device memory, or memory
    /// another process may write). Nothing else can use the buffer meanwhile (`&mut`).
    fn with_mapped(&self, buffer: &mut Self::Buffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()>;

    /// Validates `image` and loads it. A corrupt or foreign image is
    /// `Error::InvalidBinary` and never reaches the driver.
    fn load(&self, image: &[u8]) -> Result<Self::Program>;

    /// Checks that `image` is a program this device could load, without loading it
    /// (liboffload's `olIsValidBinary`): `Ok`, or `Error::InvalidBinary` saying why.
    fn validate(&self, image: &[u8]) -> Result<()>;

    /// The compiler this device uses for `language`: its identity and target, which the
    /// compile cache keys on. `Ok(None)` (the default) when the backend compiles no such
    /// source; `Error::Compile` when it would but its compiler is missing.
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        let _ = language;
        Ok(None)
    }

    /// Compiles `source` into an image [`Device::load`] accepts, with the compiler
    /// [`Device::compiler`] named. Diagnostics are `Error::Compile` with the compiler's
    /// log. The core calls it once per (program, compiler, target) and caches the result;
    /// only for a language `compiler` answered `Some` for.
    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        Err(crate::Error::invalid(
            "Program::load",
            format!("this device has no {} compiler", source.language()),
        ))
    }

    /// Creates a queue.
    fn queue(&self) -> Result<Self::Queue>;

    /// Destroys a queue once the work enqueued on it has finished: it waits for that work,
    /// or defers the destruction behind it (L4: nothing enqueued is dropped). An error of
    /// that work not yet reported (a host function's panic) is returned here.
    fn destroy_queue(&self, queue: Self::Queue) -> Result<()>;

    /// Enqueues a kernel launch. Arguments match [`Program::params`] (checked by the core),
    /// and the queue, the kernel and every buffer belong to this device (checked by the
    /// core; a backend whose soundness depends on it checks again).
    ///
    /// # Safety
    ///
    /// This hands control to the kernel's code, which nothing verified: the caller takes
    /// on the contract of [`Queue::launch`](crate::Queue::launch) — the kernel accesses
    /// only its arguments, within their bounds, and (on the host) returns without
    /// unwinding. Implementations check what they can and rely on the rest.
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        queue: &Self::Queue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, Self::Buffer>],
    ) -> Result<()>;

    /// Enqueues a copy of `data` into `buffer` at `offset` (the range is checked), after the
    /// work enqueued on `queue` so far. Returns once enqueued (Q1).
    fn enqueue_write(
        &self,
        queue: &Self::Queue,
        buffer: &Self::Buffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()>;

    /// Enqueues filling `len` bytes of `buffer` at `offset` with `pattern` repeated (`len` is
    /// a multiple of the pattern's length, which is not zero; checked).
    fn enqueue_fill(
        &self,
        queue: &Self::Queue,
        buffer: &Self::Buffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()>;

    /// Enqueues a copy of `len` bytes between two buffers of this device (or two
    /// non-overlapping ranges of one; checked).
    fn enqueue_copy(
        &self,
        queue: &Self::Queue,
        src: &Self::Buffer,
        src_offset: usize,
        dst: &Self::Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Enqueues a host function: it runs once the work enqueued before it has finished, and
    /// the work enqueued after it waits for it (liboffload's `olLaunchHostFunction`).
    fn enqueue_host_fn(&self, queue: &Self::Queue, f: HostFn) -> Result<()>;

    /// Waits until all work enqueued on `queue` so far has finished.
    fn sync(&self, queue: &Self::Queue) -> Result<()>;

    /// Whether all work enqueued on `queue` so far has finished, without waiting.
    fn is_idle(&self, queue: &Self::Queue) -> Result<bool>;

    /// Records an event after the work enqueued on `queue` so far.
    fn record(&self, queue: &Self::Queue) -> Result<Self::Event>;

    /// Makes later work on `queue` wait for `event`.
    fn wait_event(&self, queue: &Self::Queue, event: &Self::Event) -> Result<()>;

    /// Blocks until `event` has completed.
    fn sync_event(&self, event: &Self::Event) -> Result<()>;

    /// Whether `event` has completed, without waiting.
    fn is_complete(&self, event: &Self::Event) -> Result<bool>;

    /// Time between two completed events.
    fn elapsed(&self, start: &Self::Event, end: &Self::Event) -> Result<Duration>;

    /// Destroys an event.
    fn destroy_event(&self, event: Self::Event) -> Result<()>;
}

/// An image loaded on one device: its kernels, their parameters, its globals.
///
/// ```
/// use offload_core::hal::{Device, Platform, Program};
/// use offload_core::{Config, ParamKind, ScalarType::U32, reference::{self, RefModule, Reference}};
/// let platform = Reference::open(&Config::default())?;
/// let program = platform.devices()[0].load(&reference::fixture_image())?;
/// let fill = program.kernel("fill")?;
/// assert_eq!(RefModule::params(&fill), [ParamKind::Buffer, ParamKind::Typed(U32), ParamKind::Typed(U32)]);
/// program.write_global("g", 0, &7u32.to_ne_bytes())?;
/// assert_eq!(program.global("g")?.size, 4);
/// drop(fill);
/// program.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Program: Send + Sync + Sized + 'static {
    /// An entry point of this program.
    type Kernel: Send + Sync + 'static;

    /// Looks up a kernel; a missing one is `Error::SymbolNotFound`.
    fn kernel(&self, name: &str) -> Result<Self::Kernel>;

    /// Whether every kernel of this program is proven to access memory only inside the
    /// buffers it is given, whatever the arguments that pass the core's checks and the
    /// backend's launch checks (e.g. WGSL compiled with clamped indices, launched with
    /// buffers at least their bindings' minimum size). Such kernels may be launched
    /// without `unsafe` ([`Queue::run`](crate::Queue::run)). The default, `false`, is the
    /// only honest answer for native code and for device code offload did not compile.
    fn verified(&self) -> bool {
        false
    }

    /// The kernel's parameters, in order, as the image declares them.
    fn params(kernel: &Self::Kernel) -> &[ParamKind];

    /// The names of the program's kernels, in the image's order.
    fn kernels(&self) -> Vec<String>;

    /// The names of the program's globals the host can reach, in the image's order.
    fn globals(&self) -> Vec<String>;

    /// Address and size of a global variable; a missing one is `Error::SymbolNotFound`.
    fn global(&self, name: &str) -> Result<GlobalInfo>;

    /// Copies bytes out of a global variable (the range is already checked).
    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies bytes into a global variable (the range is already checked).
    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()>;

    /// Unloads the image. Kernels looked up from it are gone by then.
    fn unload(self) -> Result<()>;
}

/// A type with no values: the object a backend cannot make. A platform without devices
/// uses it as its `Device`; a memory-only device (a backend still under construction) as
/// its `Program`, `Queue` and `Event`, with [`no_compute!`](crate::no_compute) writing the methods.
/// Everything that would take one is unreachable.
///
/// ```
/// use offload_core::hal::{Never, Platform};
/// use offload_core::{BackendKind, Config, Result};
/// /// A platform that finds no device.
/// struct Empty;
/// impl Platform for Empty {
///     type Device = Never;
///     const KIND: BackendKind = BackendKind::Reference;
///     fn open(_: &Config) -> Result<Self> { Ok(Empty) }
///     fn name(&self) -> String { "empty".into() }
///     fn devices(&self) -> Vec<Never> { Vec::new() }
///     fn deinit(&self) -> Result<()> { Ok(()) }
/// }
/// assert!(Empty::open(&Config::default())?.devices().is_empty());
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Never {}

impl Never {
    /// Whatever holds a `Never` is unreachable code.
    ///
    /// ```
    /// fn unreachable(n: &offload_core::hal::Never) -> ! {
    ///     n.absurd()
    /// }
    /// ```
    pub fn absurd(&self) -> ! {
        match *self {}
    }
}

impl Device for Never {
    type Buffer = Never;
    type Program = Never;
    type Queue = Never;
    type Event = Never;

    fn info(&self) -> Result<DeviceInfo> {
        self.absurd()
    }
    fn alloc(&self, _: usize, _: MemKind) -> Result<Never> {
        self.absurd()
    }
    fn free(&self, _: Never) -> Result<()> {
        self.absurd()
    }
    fn read(&self, _: &Never, _: usize, _: &mut [u8]) -> Result<()> {
        self.absurd()
    }
    fn write(&self, _: &mut Never, _: usize, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    fn fill(&self, _: &mut Never, _: usize, _: usize, _: u8) -> Result<()> {
        self.absurd()
    }
    fn copy(&self, _: &Never, _: usize, _: &mut Never, _: usize, _: usize) -> Result<()> {
        self.absurd()
    }
    fn copy_within(&self, _: &mut Never, _: usize, _: usize, _: usize) -> Result<()> {
        self.absurd()
    }
    fn with_mapped(&self, _: &mut Never, _: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        self.absurd()
    }
    fn load(&self, _: &[u8]) -> Result<Never> {
        self.absurd()
    }
    fn validate(&self, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    crate::no_compute!(BackendKind::Reference);
}

impl Ipc for Never {
    fn uuid(&self) -> [u8; 16] {
        self.absurd()
    }
    fn alloc_exportable(&self, _: usize, _: MemKind) -> Result<Never> {
        self.absurd()
    }
    fn export(&self, _: &Never) -> Result<Exported> {
        self.absurd()
    }
    fn import(&self, _: Exported) -> Result<Never> {
        self.absurd()
    }
}

impl Program for Never {
    type Kernel = Never;

    fn kernel(&self, _: &str) -> Result<Never> {
        self.absurd()
    }
    fn params(kernel: &Never) -> &[ParamKind] {
        kernel.absurd()
    }
    fn kernels(&self) -> Vec<String> {
        self.absurd()
    }
    fn globals(&self) -> Vec<String> {
        self.absurd()
    }
    fn global(&self, _: &str) -> Result<GlobalInfo> {
        self.absurd()
    }
    fn read_global(&self, _: &str, _: usize, _: &mut [u8]) -> Result<()> {
        self.absurd()
    }
    fn write_global(&self, _: &str, _: usize, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    fn unload(self) -> Result<()> {
        self.absurd()
    }
}

/// Writes the queue and event methods of a [`Device`] whose `Queue` and `Event` are
/// [`Never`](crate::hal::Never): `queue` answers `Error::Unsupported` naming the backend, and the
/// rest are unreachable. With `load` too (answering `Unsupported`) when the device's
/// `Program` is `Never` as well: `no_compute!(kind, load)`.
///
/// ```
/// use offload_core::hal::{Device, Never};
/// use offload_core::{BackendKind, DeviceInfo, MemKind, Result, no_compute};
/// /// A device with memory but no programs or queues yet.
/// struct Bytes;
/// impl Device for Bytes {
///     type Buffer = Vec<u8>;
///     type Program = Never;
///     type Queue = Never;
///     type Event = Never;
///     fn info(&self) -> Result<DeviceInfo> {
///         Ok(DeviceInfo::new("bytes", "example", BackendKind::Reference, 1 << 20, 1))
///     }
///     fn alloc(&self, size: usize, _: MemKind) -> Result<Vec<u8>> { Ok(vec![0; size]) }
///     fn free(&self, _: Vec<u8>) -> Result<()> { Ok(()) }
///     fn read(&self, b: &Vec<u8>, o: usize, dst: &mut [u8]) -> Result<()> {
///         dst.copy_from_slice(&b[o..o + dst.len()]); Ok(())
///     }
///     fn write(&self, b: &mut Vec<u8>, o: usize, src: &[u8]) -> Result<()> {
///         b[o..o + src.len()].copy_from_slice(src); Ok(())
///     }
///     fn fill(&self, b: &mut Vec<u8>, o: usize, len: usize, v: u8) -> Result<()> {
///         b[o..o + len].fill(v); Ok(())
///     }
///     fn copy(&self, s: &Vec<u8>, so: usize, d: &mut Vec<u8>, o: usize, len: usize) -> Result<()> {
///         d[o..o + len].copy_from_slice(&s[so..so + len]); Ok(())
///     }
///     fn copy_within(&self, b: &mut Vec<u8>, so: usize, o: usize, len: usize) -> Result<()> {
///         b.copy_within(so..so + len, o); Ok(())
///     }
///     fn with_mapped(&self, b: &mut Vec<u8>, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
///         f(b); Ok(())
///     }
///     no_compute!(BackendKind::Reference, load);
/// }
/// assert!(matches!(Bytes.queue(), Err(offload_core::Error::Unsupported { .. })));
/// assert!(matches!(Bytes.load(b"x"), Err(offload_core::Error::Unsupported { .. })));
/// ```
#[macro_export]
macro_rules! no_compute {
    ($kind:expr, load) => {
        fn load(&self, _image: &[u8]) -> $crate::Result<$crate::hal::Never> {
            Err($crate::Error::Unsupported {
                backend: $kind,
                call: "Program::load",
                reason: "this backend has no programs yet".into(),
            })
        }
        fn validate(&self, _image: &[u8]) -> $crate::Result<()> {
            Err($crate::Error::Unsupported {
                backend: $kind,
                call: "Device::validate",
                reason: "this backend has no programs yet".into(),
            })
        }
        $crate::no_compute!($kind);
    };
    ($kind:expr) => {
        fn queue(&self) -> $crate::Result<$crate::hal::Never> {
            Err($crate::Error::Unsupported {
                backend: $kind,
                call: "Device::queue",
                reason: "this backend has no queues yet".into(),
            })
        }
        fn destroy_queue(&self, queue: $crate::hal::Never) -> $crate::Result<()> {
            queue.absurd()
        }
        #[allow(unsafe_code)]
        unsafe fn launch(
            &self,
            queue: &$crate::hal::Never,
            _kernel: &$crate::hal::KernelOf<Self>,
            _dims: &$crate::Dims,
            _args: &[$crate::KernelArg<'_, Self::Buffer>],
        ) -> $crate::Result<()> {
            queue.absurd()
        }
        fn enqueue_write(
            &self,
            queue: &$crate::hal::Never,
            _buffer: &Self::Buffer,
            _offset: usize,
            _data: ::std::vec::Vec<u8>,
        ) -> $crate::Result<()> {
            queue.absurd()
        }
        fn enqueue_fill(
            &self,
            queue: &$crate::hal::Never,
            _buffer: &Self::Buffer,
            _offset: usize,
            _len: usize,
            _pattern: &[u8],
        ) -> $crate::Result<()> {
            queue.absurd()
        }
        fn enqueue_copy(
            &self,
            queue: &$crate::hal::Never,
            _src: &Self::Buffer,
            _src_offset: usize,
            _dst: &Self::Buffer,
            _dst_offset: usize,
            _len: usize,
        ) -> $crate::Result<()> {
            queue.absurd()
        }
        fn enqueue_host_fn(
            &self,
            queue: &$crate::hal::Never,
            _f: $crate::hal::HostFn,
        ) -> $crate::Result<()> {
            queue.absurd()
        }
        fn sync(&self, queue: &$crate::hal::Never) -> $crate::Result<()> {
            queue.absurd()
        }
        fn is_idle(&self, queue: &$crate::hal::Never) -> $crate::Result<bool> {
            queue.absurd()
        }
        fn is_complete(&self, event: &$crate::hal::Never) -> $crate::Result<bool> {
            event.absurd()
        }
        fn record(&self, queue: &$crate::hal::Never) -> $crate::Result<$crate::hal::Never> {
            queue.absurd()
        }
        fn wait_event(
            &self,
            queue: &$crate::hal::Never,
            _event: &$crate::hal::Never,
        ) -> $crate::Result<()> {
            queue.absurd()
        }
        fn sync_event(&self, event: &$crate::hal::Never) -> $crate::Result<()> {
            event.absurd()
        }
        fn elapsed(
            &self,
            start: &$crate::hal::Never,
            _end: &$crate::hal::Never,
        ) -> $crate::Result<::std::time::Duration> {
            start.absurd()
        }
        fn destroy_event(&self, event: $crate::hal::Never) -> $crate::Result<()> {
            event.absurd()
        }
    };
}
