//! The plain values the trait family and users share: which backend, which memory, what a
//! device says about itself, launch geometry, kernel parameters and arguments. No state,
//! no behaviour beyond formatting and parsing.

use std::fmt;

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
