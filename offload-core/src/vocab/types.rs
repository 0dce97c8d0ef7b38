//! The plain values the trait family and users share: which backend, which memory, what a
//! device says about itself, launch geometry, kernel parameters and arguments. No state,
//! no behaviour beyond formatting and parsing.

use std::fmt;

/// Which driver family a platform belongs to.
///
/// ```
/// use offload::BackendKind;
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
    /// assert_eq!(offload::BackendKind::ALL.len(), 5);
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
    /// assert_eq!(offload::BackendKind::Cuda.name(), "cuda");
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
/// use offload::MemKind;
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

/// What a device says about itself: typed properties, read from the driver once per
/// runtime (the core caches them at the first query). A property the backend's driver
/// does not report is `None`.
///
/// Made with [`DeviceInfo::new`]; backends then set the optional properties (the struct
/// is `#[non_exhaustive]`, so new properties can be added without breaking anyone).
///
/// ```
/// use offload::{BackendKind, DeviceInfo};
/// let mut info = DeviceInfo::new("cpu0", "example", BackendKind::Host, 1 << 30, 4);
/// info.max_block_threads = Some(1024);
/// assert_eq!(info.compute_units, 4);
/// assert_eq!(info.max_grid, None); // not reported
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The vendor's PCI id (0x10DE NVIDIA, 0x1002 AMD GPUs, 0x1022 AMD CPUs, 0x8086
    /// Intel, 0x10005 Mesa for lavapipe), where the driver or the CPU says.
    pub vendor_id: Option<u32>,
    /// The driver's version, as the driver words it.
    pub driver_version: Option<String>,
    /// Most threads in one block (work-group), all dimensions together.
    pub max_block_threads: Option<u32>,
    /// Most threads in one block per dimension.
    pub max_block: Option<[u32; 3]>,
    /// Most blocks in a grid per dimension.
    pub max_grid: Option<[u32; 3]>,
    /// Largest single allocation, in bytes.
    pub max_alloc: Option<u64>,
    /// Shared (work-group, local) memory one block can use, in bytes: the limit of a
    /// launch's dynamic shared memory where the backend has it.
    pub shared_memory: Option<u64>,
    /// Width of a device address, in bits.
    pub address_bits: Option<u32>,
    /// Clock rate, in MHz.
    pub clock_mhz: Option<u32>,
}

impl DeviceInfo {
    /// A device's info with the properties every backend knows; the others `None`.
    ///
    /// ```
    /// use offload::{BackendKind, DeviceInfo};
    /// let info = DeviceInfo::new("gpu", "acme", BackendKind::Vulkan, 1 << 32, 16);
    /// assert_eq!((info.name.as_str(), info.vendor_id), ("gpu", None));
    /// ```
    pub fn new(
        name: impl Into<String>,
        vendor: impl Into<String>,
        backend: BackendKind,
        memory: u64,
        compute_units: u32,
    ) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            vendor: vendor.into(),
            backend,
            memory,
            compute_units,
            vendor_id: None,
            driver_version: None,
            max_block_threads: None,
            max_block: None,
            max_grid: None,
            max_alloc: None,
            shared_memory: None,
            address_bits: None,
            clock_mhz: None,
        }
    }
}

/// Launch geometry: a grid of blocks, each of `block` threads (CUDA's terms), and the
/// dynamic shared memory each block gets.
///
/// ```
/// use offload::Dims;
/// let d = Dims::grid([16, 1, 1]).block([64, 1, 1]).shared_memory(256);
/// assert_eq!(d.blocks(), 16);
/// assert_eq!(d.threads_per_block(), 64);
/// assert_eq!(d.shared_memory, 256);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Dims {
    /// Blocks in each dimension.
    pub grid: [u32; 3],
    /// Threads per block in each dimension.
    pub block: [u32; 3],
    /// Bytes of dynamic shared (work-group) memory each block gets, up to the device's
    /// [`DeviceInfo::shared_memory`]; 0 for none. A backend without dynamic shared memory
    /// refuses a launch that asks for some with `Error::Unsupported`.
    pub shared_memory: u32,
}

impl Dims {
    /// A grid of `grid` blocks of one thread each; set the block size with [`Dims::block`].
    ///
    /// ```
    /// assert_eq!(offload::Dims::grid([2, 3, 1]).blocks(), 6);
    /// ```
    pub fn grid(grid: [u32; 3]) -> Self {
        Dims {
            grid,
            block: [1, 1, 1],
            shared_memory: 0,
        }
    }

    /// Threads per block of [`Dims::for_num_elems`].
    pub const BLOCK_1D: u32 = 256;

    /// A 1-D launch with at least one thread per element: blocks of
    /// [`Dims::BLOCK_1D`] threads, as many as `n` needs (the last one partly idle, so the
    /// kernel compares its index with `n`). `n == 0` gives an empty grid.
    ///
    /// ```
    /// let d = offload::Dims::for_num_elems(1000);
    /// assert_eq!((d.grid, d.block), ([4, 1, 1], [256, 1, 1]));
    /// assert_eq!(offload::Dims::for_num_elems(0).blocks(), 0);
    /// ```
    pub fn for_num_elems(n: u32) -> Self {
        Dims::grid([n.div_ceil(Self::BLOCK_1D), 1, 1]).block([Self::BLOCK_1D, 1, 1])
    }

    /// Sets the bytes of dynamic shared memory each block gets.
    ///
    /// ```
    /// let d = offload::Dims::grid([1, 1, 1]).shared_memory(1024);
    /// assert_eq!(d.shared_memory, 1024);
    /// ```
    pub fn shared_memory(mut self, bytes: u32) -> Self {
        self.shared_memory = bytes;
        self
    }

    /// Sets the threads per block.
    ///
    /// ```
    /// let d = offload::Dims::grid([1, 1, 1]).block([32, 2, 1]);
    /// assert_eq!(d.threads_per_block(), 64);
    /// ```
    pub fn block(mut self, block: [u32; 3]) -> Self {
        self.block = block;
        self
    }

    /// Total blocks (0 if any dimension is 0).
    ///
    /// ```
    /// assert_eq!(offload::Dims::grid([4, 0, 1]).blocks(), 0);
    /// ```
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }

    /// Threads in one block.
    ///
    /// ```
    /// assert_eq!(offload::Dims::grid([1, 1, 1]).threads_per_block(), 1);
    /// ```
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| u64::from(b)).product()
    }
}

/// The type of a scalar kernel argument or parameter.
///
/// ```
/// use offload::ScalarType;
/// assert_eq!(ScalarType::F32.size(), 4);
/// assert_eq!(ScalarType::U64.to_string(), "u64");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScalarType {
    /// `u8`
    U8,
    /// `i8`
    I8,
    /// `u16`
    U16,
    /// `i16`
    I16,
    /// `u32`
    U32,
    /// `i32`
    I32,
    /// `f32`
    F32,
    /// `u64`
    U64,
    /// `i64`
    I64,
    /// `f64`
    F64,
}

impl ScalarType {
    /// Its size in bytes.
    ///
    /// ```
    /// assert_eq!(offload::ScalarType::I16.size(), 2);
    /// ```
    pub const fn size(self) -> usize {
        match self {
            ScalarType::U8 | ScalarType::I8 => 1,
            ScalarType::U16 | ScalarType::I16 => 2,
            ScalarType::U32 | ScalarType::I32 | ScalarType::F32 => 4,
            ScalarType::U64 | ScalarType::I64 | ScalarType::F64 => 8,
        }
    }

    /// The Rust name of the type (`"f32"`).
    ///
    /// ```
    /// assert_eq!(offload::ScalarType::I8.name(), "i8");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            ScalarType::U8 => "u8",
            ScalarType::I8 => "i8",
            ScalarType::U16 => "u16",
            ScalarType::I16 => "i16",
            ScalarType::U32 => "u32",
            ScalarType::I32 => "i32",
            ScalarType::F32 => "f32",
            ScalarType::U64 => "u64",
            ScalarType::I64 => "i64",
            ScalarType::F64 => "f64",
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a kernel parameter is, as the kernel's image declares it.
///
/// ```
/// use offload::{ParamKind, ScalarType};
/// assert_ne!(ParamKind::Buffer, ParamKind::Scalar(4));
/// assert_eq!(ParamKind::Typed(ScalarType::F32).scalar_size(), Some(4));
/// assert_eq!(ParamKind::Typed(ScalarType::F32).to_string(), "an f32");
/// let vec2 = ParamKind::Pod { name: "vec2<f32>", size: 8, elem: Some(ScalarType::F32) };
/// assert_eq!(vec2.to_string(), "a vec2<f32> (8 bytes)");
/// assert_eq!(ParamKind::Uniform.to_string(), "a uniform buffer");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A buffer (device pointer / storage buffer).
    Buffer,
    /// A scalar the image declares by its size only (bytes).
    Scalar(usize),
    /// A scalar of a declared type: only an argument of that type is accepted.
    Typed(ScalarType),
    /// A value passed by its bytes whose type is a composite the image lays out: a vector,
    /// matrix, array or struct (a Vulkan push-constant member such as `vec2<f32>`). It
    /// takes any `bytemuck::Pod` value of exactly `size` bytes (`Arg::pod`); where `elem`
    /// is known, a value whose element type is known too must have that one (an `f64`
    /// is refused for a `vec2<f32>`, though both are 8 bytes).
    Pod {
        /// The image's type, as WGSL would name it where it can (`vec2<f32>`,
        /// `mat4x4<f32>`, `array of u32`, `struct of f32`, `struct`): for messages.
        name: &'static str,
        /// Its size in bytes, the layout's padding included.
        size: usize,
        /// The scalar type of every element or member, where the image declares one
        /// type for all of them; `None` for mixed or unknown ones (a struct of a `u32` and
        /// an `f32`, 16-bit floats).
        elem: Option<ScalarType>,
    },
    /// A uniform buffer (Vulkan `UNIFORM_BUFFER`, WGSL `var<uniform>`): takes a buffer
    /// passed as one, with `Arg::uniform`. Backends without uniform buffers never declare
    /// it, and the core refuses a uniform argument for their buffer parameters.
    Uniform,
}

impl ParamKind {
    /// The size of a by-value parameter (a scalar or a [`ParamKind::Pod`]); `None` for a
    /// buffer.
    ///
    /// ```
    /// use offload::ParamKind;
    /// assert_eq!(ParamKind::Buffer.scalar_size(), None);
    /// assert_eq!(ParamKind::Uniform.scalar_size(), None);
    /// assert_eq!(ParamKind::Pod { name: "struct", size: 12, elem: None }.scalar_size(), Some(12));
    /// ```
    pub const fn scalar_size(&self) -> Option<usize> {
        match self {
            ParamKind::Buffer | ParamKind::Uniform => None,
            ParamKind::Scalar(n) => Some(*n),
            ParamKind::Typed(t) => Some(t.size()),
            ParamKind::Pod { size, .. } => Some(*size),
        }
    }
}

/// "an" before a vowel's sound ("an i32", "an f32", "an array"), "a" otherwise.
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'f']) {
        "an"
    } else {
        "a"
    }
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamKind::Buffer => f.write_str("a buffer"),
            ParamKind::Uniform => f.write_str("a uniform buffer"),
            ParamKind::Scalar(n) => write!(f, "a {n}-byte scalar"),
            ParamKind::Typed(t) => write!(f, "{} {t}", article(t.name())),
            ParamKind::Pod { name, size, .. } => {
                write!(f, "{} {name} ({size} bytes)", article(name))
            }
        }
    }
}

/// A launch argument as a backend sees it: its own buffer (whole, or a byte range of
/// it), or a scalar's bytes.
#[derive(Debug)]
pub enum KernelArg<'a, B: ?Sized> {
    /// A whole buffer of this backend.
    Buffer(&'a B),
    /// `len` bytes at `offset` of a buffer of this backend (checked by the core to lie
    /// inside it): the kernel sees the address of byte `offset`.
    Range {
        /// The buffer.
        buffer: &'a B,
        /// Where the range starts, in bytes.
        offset: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// A value's bytes, in native byte order: a scalar, or a [`ParamKind::Pod`] value (as
    /// long as the parameter's size). A uniform-buffer argument reaches the backend as
    /// `Buffer` or `Range`, for a parameter the backend declared [`ParamKind::Uniform`].
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
/// let g = offload::GlobalInfo { address: 0x1000, size: 4 };
/// assert_eq!(g.size, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalInfo {
    /// Device address of the variable.
    pub address: u64,
    /// Size in bytes.
    pub size: usize,
}
