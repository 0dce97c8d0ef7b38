//! # offload-hip
//!
//! The HIP backend of offload, for AMD GPUs through ROCm's HIP runtime. The runtime
//! (`libamdhip64.so`, else the ROCm 7, 6 or 5 soname `libamdhip64.so.7`/`.6`/`.5`) is opened
//! at run time with libloading, never linked: this crate builds and starts on any Linux
//! machine, and a machine without HIP simply has no HIP platform.
//!
//! What it does: devices, memory, queues, programs (AMD GPU code objects) and IPC.
//!
//! - **Platform** ([`HipPlatform`]): opening it loads the runtime, reads its entry points,
//!   calls `hipInit(0)` and counts the devices. A runtime that no name loads, or that lacks
//!   a required symbol, is `Error::DriverNotFound` with the dynamic loader's messages (or
//!   `missing symbol X`); so is a runtime that fails `hipInit` otherwise. A runtime that
//!   answers "no device" is `Error::NoDevice`, with a reason naming the calls and their
//!   codes: ROCm 5 on a machine without an AMD GPU answers `hipInit:
//!   hipErrorInvalidDevice (101); hipGetDeviceCount: hipErrorNoDevice (100)` (when
//!   `hipInit` fails, `hipGetDeviceCount` is asked too, for the reason). The
//!   runtime then lists the platform as unavailable with that reason: a missing driver is an
//!   absent platform, never a panic. Other HIP failures are `Error::Driver` with the
//!   `hipError_t` as `code`. The device is made current (`hipSetDevice`) on the calling
//!   thread before every device-dependent call.
//! - **Devices** ([`HipDevice`]): every device HIP counts, in its order. `device_info`
//!   gives `hipDeviceGetName`, `AMD` (vendor id 0x1002), `hipDeviceTotalMem`, the compute
//!   units, the runtime version, block and grid limits, shared memory per block and the
//!   clock, each read by its own `hipDeviceGetAttribute`: `hipDeviceProp_t` changed its
//!   layout in ROCm 6, so offload never passes one.
//! - **Memory** ([`HipBuffer`]): `MemKind::Device` is `hipMalloc`, `Host` page-locked
//!   `hipHostMalloc`, `Shared` managed `hipMallocManaged` (`Unsupported` on a runtime
//!   without it); out of memory is `Error::OutOfMemory` naming the size. Host copies are
//!   `hipMemcpy` with the kind of their direction, fills `hipMemset`, both after the queued
//!   work on the buffer and followed by a synchronisation of the null stream; pinned and
//!   managed memory can be touched in place (`with_mapped`).
//! - **Queues** ([`HipQueue`], [`HipEvent`]): non-blocking streams
//!   (`hipStreamCreateWithFlags(hipStreamNonBlocking)`); queued writes (`hipMemcpyAsync`,
//!   the bytes kept until the stream passed them), fills (`hipMemsetAsync`, `D16`, `D32` for
//!   1/2/4-byte patterns at aligned addresses, an expanded write otherwise), copies and
//!   host functions (`hipLaunchHostFunc`, on a runtime thread; `f` must not call offload)
//!   return once enqueued (Q1); events time with `hipEventElapsedTime`; `is_idle` and
//!   `is_complete` are `hipStreamQuery` and `hipEventQuery`.
//! - **Programs** ([`HipModule`], [`HipKernel`]): AMD GPU code objects (an ELF64 shared
//!   object for `EM_AMDGPU`, linked with `ld.lld -shared`), or a clang offload bundle
//!   (`__CLANG_OFFLOAD_BUNDLE__`) holding one, are read before the runtime sees them: the
//!   format, the target from `e_flags` (`gfx90a`, …), the kernels and their parameters
//!   from the `NT_AMDGPU_METADATA` note (MessagePack, read by a small reader here:
//!   `global_buffer` is a buffer, `by_value` a scalar of its size, hidden arguments are the
//!   runtime's), the globals from the dynamic symbols. A corrupt or foreign image is
//!   `Error::InvalidBinary` with the reason and never reaches `hipModuleLoadData`; so is a
//!   bundle of several code objects (offload does not yet pick one by the device's
//!   architecture, which it does not read: the runtime refuses a code object for another
//!   GPU, also `InvalidBinary`). Kernels are `hipModuleGetFunction`, launches
//!   `hipModuleLaunchKernel` with `kernelParams`, checked against the device's block,
//!   grid and shared-memory limits; globals `hipModuleGetGlobal`. [`fixtures::KERNELS`]
//!   is the conformance kernels' code object.
//! - **IPC**: `alloc_exportable` is `hipMalloc` memory; `export` is `hipIpcGetMemHandle`
//!   with the allocation's range from `hipMemGetAddressRange`; `import` is
//!   `hipIpcOpenMemHandle`, one mapping per device and handle, closed
//!   (`hipIpcCloseMemHandle`) with its last buffer: every open is paired with one close. A
//!   handle of this same process shares the allocation itself. The device's IPC UUID is
//!   `hipDeviceGetUuid` (its ordinal where the runtime lacks that).
//! - **Shutdown**: HIP has no global deinitialisation, so `deinit` only counts ([`stats`]),
//!   and reports buffers, modules, queues and events still alive as an error (they stay
//!   valid and are freed when dropped). The runtime stays mapped (it is opened with
//!   `RTLD_NODELETE`): once initialised its threads run its code, and a later open finds
//!   it again.
//!
//! How it is tested: against a protocol-checking stand-in runtime over host memory
//! (`offload-driver/fake/fake_hip.c`, which runs the fixture kernels by name and reports
//! use after free, double frees, wrong `hipMemcpy` kinds, leaks at exit, dead streams,
//! events and modules, code objects that should never have reached it, IPC opens without
//! a close, host copies and frees that did not wait for queued work when the fake defers
//! it, …: the conformance suite passes on it with no violation, also with deferred
//! streams) and against Debian's ROCm 5.2 runtime on a machine without an AMD GPU (the
//! no-device path). It has never run on AMD hardware: the
//! fixture code object was built by clang but never executed by a GPU.
//!
//! ```
//! use offload_core::hal::{Device as _, Platform as _};
//! use offload_core::{Config, Error};
//! use offload_hip::HipPlatform;
//! match HipPlatform::open(&Config::default()) {
//!     Ok(hip) => {
//!         for dev in hip.devices() {
//!             let info = dev.info()?;
//!             println!("{}: {} bytes, {} CUs", info.name, info.memory, info.compute_units);
//!         }
//!         hip.deinit()?;
//!     }
//!     // With ROCm 5 installed but no AMD GPU: "hip: no device: libamdhip64.so.5 loaded,
//!     // but hipInit: hipErrorInvalidDevice (101); hipGetDeviceCount: hipErrorNoDevice
//!     // (100) (…)"; without the runtime, `Error::DriverNotFound`.
//!     Err(e @ (Error::DriverNotFound { .. } | Error::NoDevice { .. })) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```
//!
//! The backend itself — platform, devices, memory, queues, events, modules, kernels, IPC
//! and the `hal` traits over them — is offload-driver's generic stream backend, shared with
//! offload-cuda: this crate implements `offload_driver::StreamApi` for the HIP runtime API
//! ([`HipApi`]) and names the generic types ([`HipPlatform`] is `StreamPlatform<HipApi>`,
//! …). What is HIP's own stays here: the runtime's symbols and error names (`ffi/`),
//! the `StreamApi` impl (`stream_api.rs`), opening and describing devices (`platform.rs`) and AMD code objects (`image.rs`,
//! `program.rs`).
#![deny(unsafe_code)]
#![warn(missing_docs)]

// HIP's C API, behind `Result`-returning calls; `unsafe fn`s where the runtime trusts
// addresses.
#[allow(unsafe_code)]
mod ffi;
// The `unsafe impl` of offload-driver's `StreamApi` over `ffi`'s table (its generated
// one-call methods call the table's symbols).
#[allow(unsafe_code)]
mod stream_api;
// Code objects, read before the runtime sees them (safe code).
// Public only for the fuzz targets (`fuzz/`) and the image tests, which reach the parser
// of untrusted bytes as an ordinary dependency; not part of the API.
#[doc(hidden)]
pub mod image;
// Opening the runtime; `open` makes the device records (`DeviceCore::new`, allowed there
// alone, with its `SAFETY` argument).
mod platform;
mod program;

pub use ffi::Driver as HipApi;

offload_driver::stream_backend_types! {
    offload_hip::HipApi "HIP": HipStats
    HipPlatform HipDevice HipBuffer HipQueue HipEvent HipModule HipKernel
}

/// The names the HIP runtime is looked for under, in order.
///
/// ```
/// assert_eq!(offload_hip::LIBRARIES[0], "libamdhip64.so");
/// assert!(offload_hip::LIBRARIES.contains(&"libamdhip64.so.5"));
/// ```
pub const LIBRARIES: [&str; 4] = ffi::LIBRARIES;

/// The conformance kernels as an AMD GPU code object for `gfx90a` (`fixtures/kernels.c`,
/// built by `fixtures/build.sh` with clang and lld; never run on AMD hardware): `add_one`,
/// `fill`, `noop`, `read_global` and a global `g`.
pub mod fixtures {
    /// The kernels.
    pub const KERNELS: &[u8] = include_bytes!("../fixtures/kernels.hsaco");

    /// A clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`, as `clang-offload-bundler`
    /// writes it) of a host entry and one entry per `(id, code object)`: what
    /// `hipcc --offload-arch=A --offload-arch=B` embeds. For tests of the bundle reader.
    ///
    /// ```
    /// use offload_hip::fixtures::{KERNELS, bundle};
    /// let fat = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", KERNELS)]);
    /// assert!(fat.starts_with(b"__CLANG_OFFLOAD_BUNDLE__"));
    /// assert!(fat.ends_with(KERNELS));
    /// ```
    pub fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        const MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
        let host = "host-x86_64-unknown-linux-gnu-";
        let ids: usize = entries.iter().map(|(id, _)| id.len()).sum();
        let mut at = MAGIC.len() + 8 + (entries.len() + 1) * 24 + ids + host.len();
        let mut out = MAGIC.to_vec();
        out.extend((entries.len() as u64 + 1).to_le_bytes());
        let mut table = vec![(host, at, 0)];
        for (id, object) in entries {
            table.push((id, at, object.len()));
            at += object.len();
        }
        for (id, offset, size) in table {
            out.extend((offset as u64).to_le_bytes());
            out.extend((size as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
        }
        for (_, object) in entries {
            out.extend(*object);
        }
        out
    }

    /// [`KERNELS`] relabelled for another processor: `EF_AMDGPU_MACH` (the low byte of
    /// `e_flags`) set to `mach` (0x2f is gfx906, 0x41 gfx1100). Never loadable on a GPU; for
    /// tests of the architecture checks.
    ///
    /// ```
    /// let gfx906 = offload_hip::fixtures::for_mach(0x2f);
    /// assert_eq!(gfx906[48], 0x2f);
    /// ```
    pub fn for_mach(mach: u8) -> Vec<u8> {
        let mut object = KERNELS.to_vec();
        object[48] = mach;
        object
    }
}
