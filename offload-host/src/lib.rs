//! # offload-host
//!
//! The host backend: the machine's CPU as offload devices. Its platform exposes
//! `Config::host_devices` devices (default 1, `OFFLOAD_HOST_DEVICES`), each reporting the
//! machine's memory and available cores. Device, host and shared memory are all ordinary
//! zeroed host memory here, aligned to [`ALIGNMENT`] bytes.
//!
//! The backend counts what it does in process-wide counters ([`stats`]) so tests can check
//! that every 0→1 transition opened it once, every 1→0 closed it once, and that no
//! allocation outlives its runtime.
//!
//! ```
//! use offload_core::hal::{Device, Platform};
//! use offload_core::{Config, MemKind};
//! use offload_host::HostPlatform;
//! let host = HostPlatform::open(&Config::default())?;
//! let dev = host.devices().remove(0);
//! let mut buf = dev.alloc(64, MemKind::Device)?;
//! dev.write(&mut buf, 0, &[42; 64])?;
//! let mut out = [0u8; 64];
//! dev.read(&buf, 0, &mut out)?;
//! assert_eq!(out, [42; 64]);
//! dev.free(buf)?;
//! drop(dev);
//! host.deinit()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! # Kernel ABI
//!
//! A host program is an ELF shared object for the machine it runs on (x86-64 or AArch64
//! Linux). Each kernel is an exported C function
//!
//! ```c
//! void name(void *const *args, const offload_launch *launch);
//! ```
//!
//! together with an exported string `offload_params_<name>` (the prefix is
//! [`PARAMS_PREFIX`]) that declares its parameters, one character each. The `OFFLOAD_KERNEL`
//! macro of `include/offload_host.h` (also [`HEADER`]) declares both. A function exported
//! without its string is refused by `Module::kernel` (`Error::SymbolNotFound`, with a hint);
//! a string with any other letter makes `kernel` fail with `Error::InvalidBinary`.
//!
//! | letter | parameter ([`ParamKind`]) | C type | accepted argument |
//! |---|---|---|---|
//! | `b` | `Buffer` | `T *` | a buffer (or a range of one) of the same device |
//! | `c` | `Typed(I8)` | `int8_t` | an `i8` only |
//! | `C` | `Typed(U8)` | `uint8_t` | a `u8` only |
//! | `h` | `Typed(I16)` | `int16_t` | an `i16` only |
//! | `H` | `Typed(U16)` | `uint16_t` | a `u16` only |
//! | `i` | `Typed(I32)` | `int32_t` | an `i32` only |
//! | `I` | `Typed(U32)` | `uint32_t` | a `u32` only |
//! | `q` | `Typed(I64)` | `int64_t` | an `i64` only |
//! | `Q` | `Typed(U64)` | `uint64_t` | a `u64` only |
//! | `f` | `Typed(F32)` | `float` | an `f32` only |
//! | `d` | `Typed(F64)` | `double` | an `f64` only |
//! | `1` `2` `4` `8` | `Scalar(n)` | any type of `n` bytes | any scalar of `n` bytes |
//!
//! The typed letters are checked at every launch against the argument's
//! [`ScalarType`](offload_core::ScalarType): a `'I'` parameter takes `Arg::scalar(&7u32)`,
//! and an `i32` or `f32` of the same size is `Error::InvalidArgument` before the kernel
//! runs. The size letters (what kernels declared before the typed ones) take any scalar of
//! that size. The number of arguments, buffers' devices and ranges are checked too.
//!
//! `args[i]` points to the value of argument `i`, valid for the duration of the call only:
//! for a buffer, to the buffer's base address (the address of its first byte in range; so
//! the buffer is `*(T **)args[i]`, `OFFLOAD_BUFFER(T, i)`); for a scalar, to its bytes
//! (`OFFLOAD_SCALAR(T, i)`). `launch` describes the call (ABI version 2):
//!
//! ```c
//! typedef struct offload_launch {
//!     uint32_t grid[3];     /* blocks in the grid, per dimension (Dims::grid) */
//!     uint32_t block[3];    /* threads per block, per dimension (Dims::block) */
//!     uint32_t block_id[3]; /* the block this call runs */
//!     uint32_t shared_size; /* bytes of dynamic shared memory (Dims::shared_memory) */
//!     void *shared;         /* this block's shared memory, 64-byte aligned; NULL if 0 */
//! } offload_launch;
//! ```
//!
//! - **Blocks and threads**: the device calls the kernel once per block of the grid, and the
//!   kernel runs the block's threads itself, typically a loop over `launch->block[0]` in
//!   which thread `t` has the global index `block_id[0] * block[0] + t`
//!   (`OFFLOAD_INDEX_X(t)`). Any grid and block size is accepted. The blocks of one launch
//!   run concurrently and in no set order: a kernel must not depend on the order of blocks,
//!   and blocks that write the same memory must synchronise themselves.
//! - **Threads**: launches on a queue run in order, after the work enqueued before them. A
//!   launch of one block runs on the thread running the queue; a larger one also on the
//!   device's worker threads (plain pthreads, started at the first parallel launch and joined
//!   when the device goes at shutdown), so a kernel must be thread-safe.
//! - **Shared memory**: `Dims::shared_memory(n)` gives each block `n` bytes of scratch
//!   memory at `launch->shared` (`OFFLOAD_SHARED(T)`): 64-byte aligned, its contents
//!   undefined when the block starts, at most [`MAX_SHARED_MEMORY`] (1 MiB, also
//!   `DeviceInfo::shared_memory`; more is `Error::InvalidArgument`). Kernels built for ABI
//!   version 1, which has no such fields, run unchanged.
//! - **Memory safety**: native code is not checked. A kernel must stay inside its buffers:
//!   offload checks sizes, types and devices, but the code can write anywhere, which is why
//!   `Queue::launch` is `unsafe`.
//! - **Images**: validated before `dlopen` (ELF class, machine, every header and segment
//!   inside the bytes), loaded from a memfd (never a file in `/tmp`) that stays open until
//!   `dlclose`, and really unmapped at unload. Exported data (`OFFLOAD_GLOBAL`) is reachable
//!   with `Module::global`, `read_global` and `write_global`; `const` data is read-only.
//!
//! A kernel and its build:
//!
//! ```c
//! #include "offload_host.h"
//! OFFLOAD_KERNEL(add_one, "bI") {            /* (uint32_t *buf, uint32_t n) */
//!     uint32_t *buf = OFFLOAD_BUFFER(uint32_t, 0);
//!     uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);
//!     for (uint32_t t = 0; t < launch->block[0]; t++) {
//!         uint64_t i = OFFLOAD_INDEX_X(t);
//!         if (i < n) buf[i] += 1;
//!     }
//! }
//! ```
//!
//! ```text
//! cc -shared -fPIC -O2 -I offload-host/include kernels.c -o kernels.so
//! ```
//!
//! Loaded and launched through the runtime (here the test kernels of
//! `fixtures/kernels.c`, feature `fixtures`): the parameter string `"bI"` is
//! `[Buffer, Typed(U32)]`, so an `i32` count is refused; `shared_reverse` reverses each
//! block through its shared memory:
//!
//! ```standalone_crate
//! use offload_core::{Arg, Dims, Error, MemKind, Offload, ParamKind, Program, ScalarType};
//! let rt: Offload = Offload::builder().platform(offload_host::platform()).start()?;
//! let dev = rt.devices()?.remove(0);
//! let module = Program::new(offload_host::fixtures::KERNELS).load(&dev)?;
//! let add_one = module.kernel("add_one")?;
//! assert_eq!(add_one.params(), [ParamKind::Buffer, ParamKind::Typed(ScalarType::U32)]);
//!
//! const N: u32 = 1024;
//! let buf = dev.alloc(N as usize * 4, MemKind::Device)?;
//! let queue = dev.queue()?;
//! let dims = Dims::grid([N / 256, 1, 1]).block([256, 1, 1]);
//! // SAFETY: refused by the type check before any native code runs.
//! let wrong = unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&1024i32)]) };
//! assert!(matches!(wrong, Err(Error::InvalidArgument { .. })));
//! // SAFETY: add_one writes the first n = N u32s of its buffer, which holds N.
//! unsafe { queue.launch(&add_one, dims, &[Arg::buffer(&buf), Arg::scalar(&N)]) }?;
//!
//! let reverse = module.kernel("shared_reverse")?;
//! let words: Vec<u8> = (0..N).flat_map(|i| i.to_ne_bytes()).collect();
//! queue.sync()?;
//! buf.write(0, &words)?;
//! // SAFETY: shared_reverse reads and writes block.x u32s per block, N in all (the buffer's
//! // length), through 4 * block.x bytes of shared memory per block.
//! unsafe { queue.launch(&reverse, dims.shared_memory(4 * 256), &[Arg::buffer(&buf)]) }?;
//! queue.sync()?;
//! let mut first = [0u8; 4];
//! buf.read(0, &mut first)?;
//! assert_eq!(u32::from_ne_bytes(first), 255); // block 0, reversed
//! rt.shutdown()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
//!
//! # Programs from source
//!
//! [`Program::from_source`](offload_core::Program::from_source) with
//! [`Source::c`](offload_core::Source::c) compiles C for a host device when the program is
//! first loaded on one, once per (program, compiler, target) however many devices and
//! threads load it (the core's compile cache, also on disk).
//!
//! - **The compiler** is `$CC` — one program, without arguments: a name looked up on
//!   `PATH`, or a path — else `cc` on `PATH`. The cache knows it by the first line of its
//!   `--version`, its `-dumpfullversion` (else `-dumpversion`) and its target
//!   (`-dumpmachine`), asked once per compiler and process, and remembered in the disk
//!   cache's directory (an extended attribute of it) for as long as the compiler's file is
//!   the same one, unaltered (its inode, size and times): a fresh process whose program is
//!   in the cache runs no compiler at all. A script or a known wrapper (`ccache`,
//!   `distcc`…) is asked in every process. None found is
//!   `Error::Compile` saying what was looked for: ``no C compiler: `cc` was not found on
//!   PATH (set CC to one)``.
//! - **The compile** runs without a shell, in a new directory under
//!   `std::env::temp_dir()` that only this user can open (0700, a fresh random name),
//!   holding the source as `kernel.c` and [`HEADER`] as `offload_host.h`:
//!
//!   ```text
//!   $CC -shared -fPIC -O3 -std=c11 -I <dir> <options…> -o <dir>/kernel.so <dir>/kernel.c
//!   ```
//!
//!   Each [`Source::option`](offload_core::Source::option) is one argument; a later `-O…`
//!   or `-std=…` wins over these. The directory is removed afterwards, whatever happened.
//!   `-O3` rather than `-O2`: GCC 12's `-O2` vectorises only loops whose trip count it
//!   knows to be a multiple of the vector width, which a block's range never is.
//! - **Errors**: a failed compile is `Error::Compile` whose `log` is what the compiler
//!   printed (at most 64 KiB; paths read `kernel.c:3:5: error: …`). A successful
//!   compile's warnings go to the log (`tracing`, target `offload::compile`).
//! - The cache key knows the compiler's target, not the CPU: with `-march=native`, keep
//!   the disk cache (`OFFLOAD_CACHE_DIR`) off machines with other CPUs.
//!
//! Write a kernel so that the compiler can vectorise it: compute the block's range
//! `[begin, end)`, clamped to `n`, once, then loop over it through `restrict` pointers —
//! parameters of a helper, since GCC honours `restrict` on parameters (kept through
//! inlining) but checks locals for aliasing at run time. GCC 12 vectorises this loop
//! (`-fopt-info-vec`: "loop vectorized using 16 byte vectors"); the usual GPU form, a
//! loop over the block's threads with `if (i < n)` in its body, it does not ("control flow
//! in loop"). Over 1 Mi floats, `Dims::for_num_elems` (4,096 blocks of 256), launch and
//! sync, the form below took 0.36 × the time of that one (138 µs against 379 µs, paired
//! medians, 2 EPYC cores; `cargo bench -p offload-host --bench saxpy_source`):
//!
//! ```standalone_crate
//! use offload_core::{Dims, Offload, Program, Source};
//! const SAXPY: &str = r#"
//! #include "offload_host.h"
//! static inline void saxpy_range(uint64_t begin, uint64_t end, float a,
//!                                const float *restrict x, float *restrict y) {
//!     for (uint64_t i = begin; i < end; i++)
//!         y[i] = a * x[i] + y[i];
//! }
//! OFFLOAD_KERNEL(saxpy, "bbfI") { /* (const float *x, float *y, float a, uint32_t n) */
//!     const uint64_t n = OFFLOAD_SCALAR(uint32_t, 3);
//!     const uint64_t begin = (uint64_t)launch->block_id[0] * launch->block[0];
//!     const uint64_t end = begin + launch->block[0] < n ? begin + launch->block[0] : n;
//!     saxpy_range(begin, end, OFFLOAD_SCALAR(float, 2), OFFLOAD_BUFFER(const float, 0),
//!                 OFFLOAD_BUFFER(float, 1));
//! }
//! "#;
//! let rt: Offload = Offload::builder().platform(offload_host::platform()).start()?;
//! let dev = rt.devices()?.remove(0);
//! let saxpy = Program::from_source(Source::c(SAXPY)).load(&dev)?.kernel("saxpy")?;
//! let x = dev.upload(&[1.0f32, 2.0, 3.0])?;
//! let y = dev.upload(&[10.0f32; 3])?;
//! let queue = dev.queue()?;
//! // SAFETY: saxpy reads n floats of x and writes n floats of y; both hold n = 3.
//! unsafe { queue.launch(&saxpy, Dims::for_num_elems(3), &offload_core::args![&x, &y, 2.0f32, 3u32])? };
//! queue.sync()?;
//! assert_eq!(y.to_vec()?, [12.0, 14.0, 16.0]);
//!
//! // A compile error carries the compiler's diagnostics:
//! let broken = Program::from_source(Source::c("int f( {")).load(&dev).unwrap_err();
//! assert!(matches!(&broken, offload_core::Error::Compile { log, .. } if log.contains("error:")));
//! drop((x, y, queue, saxpy));
//! rt.shutdown()?;
//! # Ok::<(), offload_core::Error>(())
//! ```
#![warn(missing_docs)]

mod compiler;
// Public only for the fuzz targets (`fuzz/`) and the image tests, which reach the parser
// of untrusted bytes as an ordinary dependency; not part of the API.
#[doc(hidden)]
pub mod elf;
mod memory;
mod pool;
mod program;
mod stream;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use offload_core::hal::{self, HostFn, KernelOf};
use offload_core::{
    BackendKind, CompilerId, Config, DeviceInfo, Dims, Error, KernelArg, Language, MemKind,
    ParamKind, PlatformEntry, Result, Source,
};

pub use memory::{ALIGNMENT, HostBuffer, MEMFD_NAME};
pub use program::{HostKernel, HostModule, MAX_SHARED_MEMORY, PARAMS_PREFIX};
pub use stream::MAX_QUEUED;

/// The C header of the host kernel ABI (`include/offload_host.h`): `OFFLOAD_KERNEL`,
/// `OFFLOAD_BUFFER`, `OFFLOAD_SCALAR`, the `offload_launch` struct.
///
/// A program from source ([`Program::from_source`](offload_core::Program::from_source))
/// has it on its include path already. A crate that compiles its own host kernels in its
/// build script finds the file with [`include_dir`] (or `DEP_OFFLOAD_HOST_INCLUDE`), or
/// writes this text next to them, so it compiles them without a path into offload's
/// sources:
///
/// ```no_run
/// // build.rs, with `offload-host` as a build-dependency
/// use std::{env, fs, path::PathBuf, process::Command};
///
/// let out = PathBuf::from(env::var("OUT_DIR").unwrap());
/// fs::write(out.join("offload_host.h"), offload_host::HEADER).unwrap();
/// let status = Command::new("cc")
///     .args(["-shared", "-fPIC", "-O3"])
///     .arg("-I")
///     .arg(&out)
///     .arg("kernels/saxpy.c")
///     .arg("-o")
///     .arg(out.join("saxpy.so"))
///     .status()
///     .unwrap();
/// assert!(status.success());
/// println!("cargo:rerun-if-changed=kernels/saxpy.c");
/// // src/main.rs then embeds it: include_bytes!(concat!(env!("OUT_DIR"), "/saxpy.so"))
/// ```
///
/// ```
/// assert!(offload_host::HEADER.contains("#define OFFLOAD_KERNEL(name, params)"));
/// ```
pub const HEADER: &str = include_str!("../include/offload_host.h");

/// The directory that holds `offload_host.h` ([`HEADER`]): `include/` in offload-host's
/// sources where this crate was built. It is for build scripts, which run where the crate
/// was built; a program that runs elsewhere writes [`HEADER`] out instead.
///
/// Cargo also gives it to the build script of every crate with `offload-host` in its
/// `[dependencies]`, as `DEP_OFFLOAD_HOST_INCLUDE` (offload-host declares
/// `links = "offload_host"` for that; it links no native library):
///
/// ```no_run
/// // build.rs of a crate with offload-host in [dependencies]
/// use std::{env, path::PathBuf, process::Command};
///
/// let include = env::var("DEP_OFFLOAD_HOST_INCLUDE").expect("offload-host says where");
/// let out = PathBuf::from(env::var("OUT_DIR").unwrap());
/// let status = Command::new("cc")
///     .args(["-shared", "-fPIC", "-O3", "-I", &include, "kernels/saxpy.c", "-o"])
///     .arg(out.join("saxpy.so"))
///     .status()
///     .unwrap();
/// assert!(status.success());
/// println!("cargo:rerun-if-changed=kernels/saxpy.c");
/// ```
///
/// ```
/// let dir = offload_host::include_dir();
/// let text = std::fs::read_to_string(dir.join("offload_host.h")).unwrap();
/// assert_eq!(text, offload_host::HEADER);
/// ```
pub fn include_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/include"))
}

/// Test kernels compiled from `fixtures/kernels.c` (feature `fixtures`): `add_one`, `fill`,
/// `noop`, `read_global`, a writable global `g` and a const `read_only_constant`.
#[cfg(feature = "fixtures")]
pub mod fixtures {
    /// The kernels, with `add_one` adding 1.
    pub const KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels.so"));
    /// The same kernels with `add_one` adding 2 (to tell two images apart).
    pub const KERNELS_STEP2: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels_step2.so"));
}

static OPENED: AtomicUsize = AtomicUsize::new(0);
static DEINITIALISED: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LIVE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Process-wide counts of what the host backend did.
///
/// ```
/// let before = offload_host::stats();
/// assert!(before.opened >= before.deinitialised);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStats {
    /// Platforms opened (one per runtime 0→1 transition that included the host backend).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
    /// Allocations not yet freed, over all platforms.
    pub live_allocations: usize,
    /// Program images loaded (`dlopen`), over all platforms.
    pub loads: usize,
    /// Program images unloaded (`dlclose`).
    pub unloads: usize,
    /// The most commands any host queue held unfinished (at most [`MAX_QUEUED`] plus the
    /// ones its own host functions enqueued).
    pub most_queued: u64,
}

/// Reads the process-wide counters.
///
/// ```
/// let s = offload_host::stats();
/// println!("{} live host allocations", s.live_allocations);
/// ```
pub fn stats() -> HostStats {
    HostStats {
        opened: OPENED.load(Ordering::SeqCst),
        deinitialised: DEINITIALISED.load(Ordering::SeqCst),
        live_allocations: LIVE_ALLOCATIONS.load(Ordering::SeqCst),
        loads: program::LOADS.load(Ordering::SeqCst),
        unloads: program::UNLOADS.load(Ordering::SeqCst),
        most_queued: stream::MOST_QUEUED.load(Ordering::Relaxed),
    }
}

/// The entry the facade registers for the `host` feature.
///
/// ```
/// assert_eq!(offload_host::platform().kind(), offload_core::BackendKind::Host);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::with_ipc::<HostPlatform>()
}

/// The host platform: `Config::host_devices` CPU devices.
#[derive(Debug)]
pub struct HostPlatform {
    devices: usize,
    shared: Arc<Shared>,
}

/// What a platform's devices share with it.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Allocations of this platform not yet released; deinit reports any as leaked.
    pub(crate) live: AtomicUsize,
    /// Machine memory, read at the first allocation or `info` (not at open: open is on the
    /// init path, which must stay cheap).
    memory: OnceLock<u64>,
    /// The kernel's boot id, read at the first IPC use: the host devices' UUIDs.
    boot_id: OnceLock<[u8; 16]>,
    /// The devices' properties, read at the first `info`.
    info: OnceLock<DeviceInfo>,
    /// The compile cache's directory (`Config::compile_cache`), where the C compiler's
    /// identity is remembered across processes (see compiler.rs).
    compile_cache: Option<std::path::PathBuf>,
}

impl Shared {
    fn memory(&self) -> u64 {
        *self.memory.get_or_init(|| {
            let info = rustix::system::sysinfo();
            (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
        })
    }

    /// What every host device of this platform says about itself (the name is the CPU
    /// model; `info` adds the device's ordinal).
    fn info(&self) -> &DeviceInfo {
        self.info.get_or_init(|| {
            let cpu = CpuInfo::read();
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let memory = self.memory();
            let mut info = DeviceInfo::new(
                cpu.model
                    .unwrap_or_else(|| std::env::consts::ARCH.to_string()),
                cpu.vendor
                    .clone()
                    .unwrap_or_else(|| std::env::consts::ARCH.to_string()),
                BackendKind::Host,
                memory,
                u32::try_from(cores).unwrap_or(u32::MAX),
            );
            info.vendor_id = match cpu.vendor.as_deref() {
                Some("GenuineIntel") => Some(0x8086),
                Some("AuthenticAMD") => Some(0x1022),
                _ => None,
            };
            let uname = rustix::system::uname();
            info.driver_version = Some(format!(
                "offload-host {} on Linux {}",
                env!("CARGO_PKG_VERSION"),
                uname.release().to_string_lossy()
            ));
            // A host kernel runs its block's threads itself: any size, any grid.
            info.max_block_threads = Some(u32::MAX);
            info.max_block = Some([u32::MAX; 3]);
            info.max_grid = Some([u32::MAX; 3]);
            info.max_alloc = Some(memory);
            info.shared_memory = Some(u64::from(program::MAX_SHARED_MEMORY));
            info.address_bits = Some(usize::BITS);
            info.clock_mhz = cpu.mhz;
            info
        })
    }

    /// /proc/sys/kernel/random/boot_id as bytes: the same in every process of this boot
    /// (zeros where the kernel does not say, which still matches within a machine).
    fn boot_id(&self) -> [u8; 16] {
        *self.boot_id.get_or_init(|| {
            let text =
                std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
            let digits: Vec<u8> = text
                .bytes()
                .filter(u8::is_ascii_hexdigit)
                .map(|c| (c as char).to_digit(16).unwrap_or(0) as u8)
                .collect();
            let mut id = [0u8; 16];
            for (byte, pair) in id.iter_mut().zip(digits.chunks_exact(2)) {
                *byte = pair[0] << 4 | pair[1];
            }
            id
        })
    }
}

/// What an exportable host allocation's payload says: these bytes, then nothing (the size
/// travels in the handle, the memory as the memfd).
const IPC_PAYLOAD: &[u8; 8] = b"OFHOST01";

/// A CPU device of the host platform. Dropping it (after the queues that share its
/// workers) joins its worker threads.
pub struct HostDevice {
    ordinal: usize,
    pool: Arc<pool::LazyPool>,
    shared: Arc<Shared>,
}

impl HostDevice {
    /// Whether this device has started its worker threads (at its first parallel launch).
    ///
    /// ```
    /// use offload_core::{Config, hal::Platform};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// assert!(!host.devices()[0].workers_started());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn workers_started(&self) -> bool {
        self.pool.started()
    }
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

/// A host queue: an in-order stream run by its own executor thread (see stream.rs);
/// `launch` and the other enqueues return once the work is queued.
pub struct HostQueue {
    stream: stream::Stream,
}

impl std::fmt::Debug for HostQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostQueue")
    }
}

/// A host event: completes when the work queued before it has finished, and holds the time
/// it did.
pub struct HostEvent {
    stream: Arc<stream::StreamCore>,
    ticket: u64,
    time: Arc<OnceLock<Instant>>,
}

impl std::fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEvent")
            .field("ticket", &self.ticket)
            .field("complete", &self.stream.reached(self.ticket))
            .finish()
    }
}

impl HostEvent {
    /// When the work before the event finished; waits for it first.
    fn time(&self) -> Result<Instant> {
        self.stream.wait(self.ticket);
        self.time.get().copied().ok_or_else(|| Error::Driver {
            backend: BackendKind::Host,
            call: "Event::elapsed_since",
            code: -1,
            message: "the event completed without a time (its queue was destroyed first)".into(),
        })
    }
}

impl HostPlatform {
    /// Allocations of this platform not yet freed.
    ///
    /// ```
    /// use offload_core::hal::Platform;
    /// let host = offload_host::HostPlatform::open(&offload_core::Config::default())?;
    /// assert_eq!(host.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }
}

fn oom(call: &'static str, requested: usize, reason: String) -> Error {
    Error::OutOfMemory {
        backend: BackendKind::Host,
        call,
        requested: requested as u64,
        reason,
    }
}

impl hal::Platform for HostPlatform {
    type Device = HostDevice;
    const KIND: BackendKind = BackendKind::Host;

    fn open(config: &Config) -> Result<Self> {
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(HostPlatform {
            devices: config.host_devices,
            shared: Arc::new(Shared {
                compile_cache: config.compile_cache.clone(),
                ..Shared::default()
            }),
        })
    }

    fn name(&self) -> String {
        "host".into()
    }

    fn devices(&self) -> Vec<HostDevice> {
        (0..self.devices)
            .map(|ordinal| HostDevice {
                ordinal,
                pool: Arc::default(),
                shared: self.shared.clone(),
            })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        DEINITIALISED.fetch_add(1, Ordering::SeqCst);
        match self.live_allocations() {
            0 => Ok(()),
            n => Err(Error::Driver {
                backend: BackendKind::Host,
                call: "Offload::shutdown",
                code: n as i64,
                message: format!("{n} host allocations were still live at deinit"),
            }),
        }
    }

    /// Shared objects for this machine (`ImageFormat::Elf` of its own `e_machine`).
    fn may_run(image: &[u8]) -> bool {
        elf::runs_here(image)
    }
}

impl hal::Device for HostDevice {
    type Buffer = HostBuffer;
    type Program = HostModule;
    type Queue = HostQueue;
    type Event = HostEvent;

    /// Read from the system once per platform (`/proc/cpuinfo`, `uname`), then copied.
    fn info(&self) -> Result<DeviceInfo> {
        let mut info = self.shared.info().clone();
        info.name = format!("host cpu {} ({})", self.ordinal, info.name);
        Ok(info)
    }

    fn alloc(&self, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(
                "Device::alloc",
                size,
                format!("the host has {memory} bytes of memory"),
            ));
        }
        let buffer = HostBuffer::new(size)
            .ok_or_else(|| oom("Device::alloc", size, "the allocator refused".into()))?;
        Ok(buffer.counted(self.shared.clone()))
    }

    /// Releases the buffer, or defers the release behind queued work that uses it (Q1). A
    /// mapping of another process's memory is the exception: it is freed when that process
    /// unmaps it, which it must see done, queued work included (I3), so this waits for the
    /// work first.
    fn free(&self, buffer: HostBuffer) -> Result<()> {
        if buffer.is_mapping() {
            buffer.mem.uses.wait();
        }
        drop(buffer);
        Ok(())
    }

    fn read(&self, buffer: &HostBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.mem.check("Buffer::read", offset, dst.len())?;
        buffer.mem.uses.wait();
        buffer.mem.read(offset, dst)
    }

    fn write(&self, buffer: &mut HostBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.mem.check("Buffer::write", offset, src.len())?;
        buffer.mem.uses.wait();
        buffer.mem.write(offset, src)
    }

    fn fill(&self, buffer: &mut HostBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.mem.check("Buffer::fill", offset, len)?;
        buffer.mem.uses.wait();
        buffer.mem.fill(offset, len, &[value])
    }

    fn copy(
        &self,
        src: &HostBuffer,
        so: usize,
        dst: &mut HostBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        src.mem.check("Buffer::copy_from", so, len)?;
        dst.mem.check("Buffer::copy_from", d, len)?;
        src.mem.uses.wait();
        dst.mem.uses.wait();
        dst.mem.copy_from(d, &src.mem, so, len)
    }

    fn copy_within(&self, buffer: &mut HostBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        buffer.mem.check("Buffer::copy_from", so, len)?;
        buffer.mem.check("Buffer::copy_from", d, len)?;
        buffer.mem.uses.wait();
        buffer.mem.copy_from(d, &buffer.mem, so, len)
    }

    fn load(&self, image: &[u8]) -> Result<HostModule> {
        program::load(image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(image)
    }

    /// C: `$CC`, else `cc` on `PATH` (probed once per compiler and process, and
    /// remembered in the compile cache's directory while the compiler's file is unchanged);
    /// other languages: none.
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        compiler::compiler(language, self.shared.compile_cache.as_deref())
    }

    /// Runs the C compiler in a private temporary directory (see the crate docs).
    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        compiler::compile(source, self.shared.compile_cache.as_deref())
    }

    /// Host memory, touched in place; not memory shared with other processes (they could
    /// write it under the slice).
    fn with_mapped(&self, buffer: &mut HostBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        let bytes = buffer.exclusive_bytes().ok_or_else(|| Error::Unsupported {
            backend: BackendKind::Host,
            call: "Buffer::with_mapped",
            reason: "the buffer's memory is shared with other processes (IPC): copy \
                     it with read and write instead"
                .into(),
        })?;
        f(bytes);
        Ok(())
    }

    fn queue(&self) -> Result<HostQueue> {
        Ok(HostQueue {
            stream: stream::Stream::new(self.pool.clone()),
        })
    }

    /// Drains the queue's work and joins its executor (L4). From one of the queue's own
    /// host functions it cannot wait; the executor drains it after the function returns.
    fn destroy_queue(&self, queue: HostQueue) -> Result<()> {
        if queue.stream.core.on_runner() {
            drop(queue);
            return Ok(());
        }
        let result = queue.stream.core.sync("Queue::destroy");
        drop(queue);
        result
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    unsafe fn launch(
        &self,
        queue: &HostQueue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, HostBuffer>],
    ) -> Result<()> {
        const CALL: &str = "Queue::launch";
        if dims.shared_memory > program::MAX_SHARED_MEMORY {
            return Err(Error::invalid(
                CALL,
                format!(
                    "{} bytes of shared memory per block; the host allows {} \
                     (DeviceInfo::shared_memory)",
                    dims.shared_memory,
                    program::MAX_SHARED_MEMORY
                ),
            ));
        }
        // Checked again here: the raw API is safe too, and native code trusts these.
        if args.len() != kernel.params.len() {
            return Err(Error::InvalidArgument {
                call: CALL,
                reason: format!(
                    "host kernel takes {} arguments, {} given",
                    kernel.params.len(),
                    args.len()
                ),
            });
        }
        let mut values = Vec::with_capacity(args.len());
        let mut memory = Vec::new();
        for (i, (arg, param)) in args.iter().zip(&kernel.params).enumerate() {
            let mut value = [0u8; 8];
            match (arg, param) {
                (KernelArg::Buffer(b), ParamKind::Buffer) => {
                    value.copy_from_slice(&(b.mem.as_ptr() as usize).to_ne_bytes());
                    memory.push(b.mem.clone());
                }
                (
                    KernelArg::Range {
                        buffer,
                        offset,
                        len,
                    },
                    ParamKind::Buffer,
                ) => {
                    buffer.mem.check(CALL, *offset, *len)?;
                    let address = buffer.mem.as_ptr() as usize + offset;
                    value.copy_from_slice(&address.to_ne_bytes());
                    memory.push(buffer.mem.clone());
                }
                (KernelArg::Scalar(bytes), p)
                    if p.scalar_size() == Some(bytes.len()) && bytes.len() <= 8 =>
                {
                    value[..bytes.len()].copy_from_slice(bytes)
                }
                _ => {
                    return Err(Error::InvalidArgument {
                        call: CALL,
                        reason: format!("host kernel argument {i} should be {param:?}"),
                    });
                }
            }
            values.push(value);
        }
        let core = &queue.stream.core;
        let uses: Vec<Arc<memory::Memory>> = memory.clone();
        let ticket = core.enqueue(
            CALL,
            stream::Command::Launch {
                function: kernel.function,
                values,
                dims: *dims,
                memory,
                code: kernel.loaded.clone(),
            },
        )?;
        for m in &uses {
            m.uses.add(core, ticket);
        }
        kernel.loaded.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_write(
        &self,
        queue: &HostQueue,
        buffer: &HostBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        const CALL: &str = "Queue::write";
        buffer.mem.check(CALL, offset, data.len())?;
        let core = &queue.stream.core;
        let memory = buffer.mem.clone();
        let ticket = core.enqueue(
            CALL,
            stream::Command::Write {
                memory,
                offset,
                data,
            },
        )?;
        buffer.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_fill(
        &self,
        queue: &HostQueue,
        buffer: &HostBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        const CALL: &str = "Queue::fill";
        buffer.mem.check(CALL, offset, len)?;
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(Error::invalid(
                CALL,
                format!(
                    "a {}-byte pattern cannot fill {len} bytes exactly",
                    pattern.len()
                ),
            ));
        }
        let core = &queue.stream.core;
        let ticket = core.enqueue(
            CALL,
            stream::Command::Fill {
                memory: buffer.mem.clone(),
                offset,
                len,
                pattern: pattern.to_vec(),
            },
        )?;
        buffer.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_copy(
        &self,
        queue: &HostQueue,
        src: &HostBuffer,
        src_offset: usize,
        dst: &HostBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Queue::copy";
        src.mem.check(CALL, src_offset, len)?;
        dst.mem.check(CALL, dst_offset, len)?;
        let core = &queue.stream.core;
        let ticket = core.enqueue(
            CALL,
            stream::Command::Copy {
                src: src.mem.clone(),
                src_offset,
                dst: dst.mem.clone(),
                dst_offset,
                len,
            },
        )?;
        src.mem.uses.add(core, ticket);
        dst.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_host_fn(&self, queue: &HostQueue, f: HostFn) -> Result<()> {
        queue
            .stream
            .core
            .enqueue("Queue::enqueue_host_fn", stream::Command::HostFn(f))
            .map(drop)
    }

    fn sync(&self, queue: &HostQueue) -> Result<()> {
        queue.stream.core.sync("Queue::sync")
    }

    fn is_idle(&self, queue: &HostQueue) -> Result<bool> {
        let core = &queue.stream.core;
        Ok(core.reached(core.last()))
    }

    fn record(&self, queue: &HostQueue) -> Result<HostEvent> {
        let core = &queue.stream.core;
        let time = Arc::new(OnceLock::new());
        let last = core.last();
        let ticket = if core.reached(last) {
            // Nothing queued: the event is complete now.
            let _ = time.set(Instant::now());
            last
        } else {
            core.enqueue("Queue::record", stream::Command::Record(time.clone()))?
        };
        Ok(HostEvent {
            stream: core.clone(),
            ticket,
            time,
        })
    }

    fn wait_event(&self, queue: &HostQueue, event: &HostEvent) -> Result<()> {
        let core = &queue.stream.core;
        if Arc::ptr_eq(core, &event.stream) || event.stream.reached(event.ticket) {
            return Ok(()); // in order, or already done
        }
        core.enqueue(
            "Queue::wait",
            stream::Command::Wait {
                stream: event.stream.clone(),
                ticket: event.ticket,
            },
        )
        .map(drop)
    }

    fn sync_event(&self, event: &HostEvent) -> Result<()> {
        event.stream.wait(event.ticket);
        Ok(())
    }

    fn is_complete(&self, event: &HostEvent) -> Result<bool> {
        Ok(event.stream.reached(event.ticket))
    }

    fn elapsed(&self, start: &HostEvent, end: &HostEvent) -> Result<Duration> {
        Ok(end.time()?.saturating_duration_since(start.time()?))
    }

    fn destroy_event(&self, _event: HostEvent) -> Result<()> {
        Ok(())
    }
}

/// Memory shared between processes as sealed memfds; the fd travels with the handle.
impl hal::Ipc for HostDevice {
    /// The boot id, its last byte mixed with the device's ordinal: host device `n` is the
    /// same device in every process of this boot.
    fn uuid(&self) -> [u8; 16] {
        let mut uuid = self.shared.boot_id();
        uuid[15] ^= self.ordinal as u8;
        uuid
    }

    fn alloc_exportable(&self, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        const CALL: &str = "Device::alloc_exportable";
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(
                CALL,
                size,
                format!("the host has {memory} bytes of memory"),
            ));
        }
        let buffer = HostBuffer::exportable(size)
            .map_err(|e| oom(CALL, size, format!("memfd_create/ftruncate/mmap: {e}")))?;
        Ok(buffer.counted(self.shared.clone()))
    }

    fn export(&self, buffer: &HostBuffer) -> Result<hal::Exported> {
        const CALL: &str = "Buffer::export";
        let fd = buffer.memfd().ok_or_else(|| Error::InvalidArgument {
            call: CALL,
            reason: "host buffer is not exportable (allocate it with alloc_exportable)".into(),
        })?;
        let fd = fd.try_clone().map_err(|e| Error::Driver {
            backend: BackendKind::Host,
            call: CALL,
            code: i64::from(e.raw_os_error().unwrap_or(0)),
            message: format!("dup of the buffer's memfd: {e}"),
        })?;
        Ok(hal::Exported {
            size: buffer.len() as u64,
            payload: IPC_PAYLOAD.to_vec(),
            fd: Some(fd),
        })
    }

    fn import(&self, exported: hal::Exported) -> Result<HostBuffer> {
        let bad = |reason: &str| Error::InvalidIpcHandle {
            backend: Some(BackendKind::Host),
            call: "Device::import",
            reason: reason.into(),
        };
        let Some(fd) = exported.fd else {
            return Err(bad("a host handle needs its memfd"));
        };
        if exported.payload != IPC_PAYLOAD {
            return Err(bad("the payload is not a host allocation's"));
        }
        let size = usize::try_from(exported.size).map_err(|_| bad("size"))?;
        if size == 0 {
            return Err(bad("size 0"));
        }
        let buffer = HostBuffer::import(fd, size)?;
        Ok(buffer.counted(self.shared.clone()))
    }
}

/// What /proc/cpuinfo says about the first CPU, where it says it.
struct CpuInfo {
    vendor: Option<String>,
    model: Option<String>,
    mhz: Option<u32>,
}

impl CpuInfo {
    fn read() -> CpuInfo {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |names: &[&str]| {
            text.lines()
                .find(|l| names.iter().any(|n| l.starts_with(n)))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        CpuInfo {
            vendor: field(&["vendor_id", "CPU implementer"]),
            model: field(&["model name", "Model"]),
            mhz: field(&["cpu MHz"])
                .and_then(|v| v.parse::<f64>().ok())
                .map(|mhz| mhz.round() as u32),
        }
    }
}
