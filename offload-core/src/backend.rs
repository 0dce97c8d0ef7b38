//! The `Backend` family trait: what a platform (one driver, one instance) must provide.
//!
//! In the style of wgpu-hal's `Api`: one trait with associated types for the objects a
//! backend owns, implemented once per backend crate. The core never calls a driver; it
//! validates arguments (ranges, sizes, ownership) *before* a backend method is called, so a
//! backend sees only well-formed requests. Backends are safe to call: their `unsafe` and FFI
//! stay inside their own crates. Optional capabilities (IPC) get traits of their own.

use std::fmt;

use crate::config::Config;
use crate::error::Result;

/// Which driver family a platform belongs to.
///
/// ```
/// use offload_core::BackendKind;
/// assert_eq!(BackendKind::Host.to_string(), "host");
/// assert_eq!("ze".parse::<BackendKind>().unwrap(), BackendKind::Ze);
/// assert!("metal".parse::<BackendKind>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BackendKind {
    /// CPU devices run by offload itself (`offload-host`).
    Host,
    /// Vulkan compute (`offload-vulkan`).
    Vulkan,
    /// NVIDIA CUDA driver API (`offload-cuda`).
    Cuda,
    /// AMD HIP (`offload-hip`).
    Hip,
    /// Intel oneAPI Level Zero (`offload-ze`).
    Ze,
    /// The core's in-memory reference backend, for tests and documentation
    /// ([`crate::reference`]). Never registered by default.
    Reference,
}

impl BackendKind {
    /// The backends a user can name in `OFFLOAD_BACKENDS`, in discovery order.
    ///
    /// ```
    /// assert_eq!(offload_core::BackendKind::ALL.len(), 5);
    /// ```
    pub const ALL: [BackendKind; 5] = [
        BackendKind::Host,
        BackendKind::Vulkan,
        BackendKind::Cuda,
        BackendKind::Hip,
        BackendKind::Ze,
    ];

    /// The lower-case name used in configuration and messages.
    ///
    /// ```
    /// assert_eq!(offload_core::BackendKind::Cuda.name(), "cuda");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Vulkan => "vulkan",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
            BackendKind::Ze => "ze",
            BackendKind::Reference => "reference",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let s = s.trim();
        BackendKind::ALL
            .into_iter()
            .chain([BackendKind::Reference])
            .find(|k| {
                k.name().eq_ignore_ascii_case(s) || (s == "level-zero" && *k == BackendKind::Ze)
            })
            .ok_or_else(|| {
                format!("unknown backend `{s}` (expected one of host, vulkan, cuda, hip, ze)")
            })
    }
}

/// Where a buffer's memory lives.
///
/// ```
/// use offload_core::MemKind;
/// assert_ne!(MemKind::Device, MemKind::Host);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemKind {
    /// Memory of the device, fastest for kernels.
    Device,
    /// Host memory the device can reach (pinned / host-visible).
    Host,
    /// Memory both sides use directly (managed / shared).
    Shared,
}

/// What a device says about itself.
///
/// ```
/// use offload_core::{BackendKind, DeviceInfo};
/// let info = DeviceInfo {
///     name: "cpu0".into(),
///     vendor: "example".into(),
///     backend: BackendKind::Host,
///     memory: 1 << 30,
///     compute_units: 4,
/// };
/// assert_eq!(info.compute_units, 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Human-readable device name.
    pub name: String,
    /// Vendor name.
    pub vendor: String,
    /// Backend that drives it.
    pub backend: BackendKind,
    /// Memory the device can allocate, in bytes.
    pub memory: u64,
    /// Parallel compute units (cores, SMs, CUs, EUs).
    pub compute_units: u32,
}

/// One platform: an initialised driver with its devices.
///
/// A backend crate implements this once. The runtime calls [`Backend::open`] at a 0→1
/// transition and [`Backend::deinit`] at the matching 1→0 transition, after every buffer
/// it handed out was given back through [`Backend::free`]. Between the two, any method may be
/// called from any thread at once, so implementations are `Send + Sync`.
///
/// The core has already checked every argument: sizes are non-zero, ranges lie inside their
/// buffers, and buffers belong to this platform. A backend may check again (cheaply) where
/// its own soundness depends on it.
///
/// See [`crate::reference::Reference`] for a complete, safe implementation.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A device of this platform.
    type Device: Send + Sync + 'static;
    /// An allocation on a device.
    type Buffer: Send + Sync + 'static;

    /// The family this backend belongs to.
    const KIND: BackendKind;

    /// Opens the driver and discovers devices. A missing driver is
    /// `Error::DriverNotFound`; the runtime then treats the platform as absent unless the
    /// user asked for it by name.
    fn open(config: &Config) -> Result<Self>;

    /// A name for this platform (driver or instance), e.g. `"host"` or `"lavapipe"`.
    fn name(&self) -> String;

    /// The devices found by `open`, in a stable order. Called once per generation.
    fn devices(&self) -> Vec<Self::Device>;

    /// Describes a device.
    fn device_info(&self, device: &Self::Device) -> Result<DeviceInfo>;

    /// Allocates `size` (> 0) bytes. An impossible size is `Error::OutOfMemory`.
    fn alloc(&self, device: &Self::Device, size: usize, kind: MemKind) -> Result<Self::Buffer>;

    /// Releases an allocation.
    fn free(&self, buffer: Self::Buffer) -> Result<()>;

    /// Copies `dst.len()` bytes at `offset` of `buffer` to `dst`.
    fn read(&self, buffer: &Self::Buffer, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies `src` to `buffer` at `offset`. Mutation takes `&mut`: the borrow checker
    /// proves exclusive access, so a backend needs no lock of its own for it.
    fn write(&self, buffer: &mut Self::Buffer, offset: usize, src: &[u8]) -> Result<()>;

    /// Sets `len` bytes at `offset` to `value`.
    fn fill(&self, buffer: &mut Self::Buffer, offset: usize, len: usize, value: u8) -> Result<()>;

    /// Copies `len` bytes from `src` to another buffer `dst` of the same device.
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

    /// Deinitialises the driver. Called exactly once, last, whatever failed before.
    fn deinit(&self) -> Result<()>;
}

/// Launch geometry: a grid of blocks, each of `block` threads (CUDA's terms).
///
/// ```
/// use offload_core::Dims;
/// let d = Dims::grid([16, 1, 1]).block([64, 1, 1]);
/// assert_eq!(d.blocks(), 16);
/// assert_eq!(d.threads_per_block(), 64);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dims {
    /// Blocks in each dimension.
    pub grid: [u32; 3],
    /// Threads per block in each dimension.
    pub block: [u32; 3],
}

impl Dims {
    /// A grid of `grid` blocks of one thread each; set the block size with [`Dims::block`].
    ///
    /// ```
    /// assert_eq!(offload_core::Dims::grid([2, 3, 1]).blocks(), 6);
    /// ```
    pub fn grid(grid: [u32; 3]) -> Self {
        Dims {
            grid,
            block: [1, 1, 1],
        }
    }

    /// Sets the threads per block.
    ///
    /// ```
    /// let d = offload_core::Dims::grid([1, 1, 1]).block([32, 2, 1]);
    /// assert_eq!(d.threads_per_block(), 64);
    /// ```
    pub fn block(mut self, block: [u32; 3]) -> Self {
        self.block = block;
        self
    }

    /// Total blocks (0 if any dimension is 0).
    ///
    /// ```
    /// assert_eq!(offload_core::Dims::grid([4, 0, 1]).blocks(), 0);
    /// ```
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }

    /// Threads in one block.
    ///
    /// ```
    /// assert_eq!(offload_core::Dims::grid([1, 1, 1]).threads_per_block(), 1);
    /// ```
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| u64::from(b)).product()
    }
}

/// What a kernel parameter is, as the kernel declares it.
///
/// ```
/// use offload_core::ParamKind;
/// assert_ne!(ParamKind::Buffer, ParamKind::Scalar(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A buffer (device pointer / storage buffer).
    Buffer,
    /// A scalar of this many bytes.
    Scalar(usize),
}

/// A launch argument as a backend sees it: its own buffer, or a scalar's bytes.
#[derive(Debug)]
pub enum KernelArg<'a, B: ?Sized> {
    /// A buffer of this backend.
    Buffer(&'a B),
    /// A scalar, in native byte order.
    Scalar(&'a [u8]),
}

impl<B: ?Sized> Clone for KernelArg<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: ?Sized> Copy for KernelArg<'_, B> {}

/// Address and size of a global variable in a loaded module.
///
/// ```
/// let g = offload_core::GlobalInfo { address: 0x1000, size: 4 };
/// assert_eq!(g.size, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalInfo {
    /// Device address of the variable.
    pub address: u64,
    /// Size in bytes.
    pub size: usize,
}

/// Programs, kernels, queues and events: what a backend needs to run code.
///
/// The runtime guarantees the ordering contract around these calls: `load` for one
/// (program, device) runs once however many threads ask (P2); `unload` runs after every
/// launch of the module's kernels returned; `destroy_queue` after `sync`; all of it before
/// [`Backend::deinit`]. A backend validates images before its driver sees them (P4).
///
/// A backend still under construction may leave this out and register itself with
/// [`crate::PlatformEntry::memory_only`]; its compute calls then return `Error::Unsupported`.
pub trait Compute: Backend {
    /// A program loaded on one device.
    type Module: Send + Sync + 'static;
    /// An entry point of a module.
    type Kernel: Send + Sync + 'static;
    /// An in-order stream of work on one device.
    type Queue: Send + Sync + 'static;
    /// A point in a queue's work, with a timestamp.
    type Event: Send + Sync + 'static;

    /// Validates `image` and loads it on `device`. A corrupt or foreign image is
    /// `Error::InvalidBinary` and never reaches the driver.
    fn load(&self, device: &Self::Device, image: &[u8]) -> Result<Self::Module>;

    /// Unloads a module.
    fn unload(&self, module: Self::Module) -> Result<()>;

    /// Looks up a kernel; a missing one is `Error::SymbolNotFound`.
    fn kernel(&self, module: &Self::Module, name: &str) -> Result<Self::Kernel>;

    /// The kernel's parameters, in order, as the image declares them.
    fn params<'k>(&self, kernel: &'k Self::Kernel) -> &'k [ParamKind];

    /// Address and size of a global variable; a missing one is `Error::SymbolNotFound`.
    fn global(&self, module: &Self::Module, name: &str) -> Result<GlobalInfo>;

    /// Copies bytes out of a global variable (the range is already checked).
    fn read_global(
        &self,
        module: &Self::Module,
        name: &str,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()>;

    /// Copies bytes into a global variable (the range is already checked).
    fn write_global(
        &self,
        module: &Self::Module,
        name: &str,
        offset: usize,
        src: &[u8],
    ) -> Result<()>;

    /// Creates a queue on `device`.
    fn queue(&self, device: &Self::Device) -> Result<Self::Queue>;

    /// Destroys a queue (after `sync`).
    fn destroy_queue(&self, queue: Self::Queue) -> Result<()>;

    /// Enqueues a kernel launch. Arguments match [`Compute::params`] (checked), and every
    /// buffer belongs to the queue's device (checked).
    fn launch(
        &self,
        queue: &Self::Queue,
        kernel: &Self::Kernel,
        dims: &Dims,
        args: &[KernelArg<'_, Self::Buffer>],
    ) -> Result<()>;

    /// Waits until all work enqueued so far has finished.
    fn sync(&self, queue: &Self::Queue) -> Result<()>;

    /// Records an event after the work enqueued so far.
    fn record(&self, queue: &Self::Queue) -> Result<Self::Event>;

    /// Makes later work on `queue` wait for `event`.
    fn wait_event(&self, queue: &Self::Queue, event: &Self::Event) -> Result<()>;

    /// Blocks until `event` has completed.
    fn sync_event(&self, event: &Self::Event) -> Result<()>;

    /// Time between two completed events.
    fn elapsed(&self, start: &Self::Event, end: &Self::Event) -> Result<std::time::Duration>;

    /// Destroys an event.
    fn destroy_event(&self, event: Self::Event) -> Result<()>;
}
