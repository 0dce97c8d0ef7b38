//! The stream-based vendor APIs (the CUDA driver API, the HIP runtime API) as one trait,
//! [`StreamApi`], and the whole offload backend over it, written once: the device record
//! and the device ([`DeviceCore`], [`StreamDevice`], `shared.rs`), the stream under a queue
//! (its gate, held operations and events, `stream.rs`), memory ([`StreamBuffer`],
//! `memory.rs`), loaded images ([`StreamModule`], [`StreamKernel`], `program.rs`), IPC
//! (`ipc.rs`), queues and events ([`StreamQueue`], [`StreamEvent`], `queue.rs`), the
//! platform and the `hal::Device` impl ([`StreamPlatform`], `device.rs`); the
//! vendor calls that are one C call each, generated from a table of symbols
//! ([`stream_api_calls!`](crate::stream_api_calls), [`device_calls!`](crate::device_calls),
//! `calls.rs`); and the vendor crates' public names
//! ([`stream_backend_types!`](crate::stream_backend_types), `names.rs`).
//!
//! Why a trait over the vendor calls rather than shared helpers: CUDA and HIP have the same
//! object model — a current device per thread, streams, events with timing, modules with
//! functions and globals, 64-byte IPC handles — and differ only in the names of their calls
//! and in a few answers (CUDA's `ALREADY_MAPPED`, HIP's address ranges). Everything offload
//! builds on that model (kept write bytes, host-function failures, the streams that use a
//! buffer, the IPC mapping registry, the `hal` delegation) is the same code, so it lives
//! here once, generic over the API; each vendor crate implements [`StreamApi`] in a
//! module of its own (`stream_api.rs`, over its `ffi/` bindings: raw symbols, error names;
//! a table for `stream_api_calls!`), keeps what is really
//! its own (CUDA's primary contexts and `hipSetDevice`, opening the library and describing
//! a device, PTX/cubin/fatbin inspection and AMD code objects, NVRTC) and names the
//! generic types (`pub type CudaBuffer = StreamBuffer<CudaApi>`, by
//! `stream_backend_types!`). Level Zero's model
//! (command lists, event pools) is different and does not use this module.
//!
//! The trait is `unsafe` to implement: the generic code trusts an implementation's calls to
//! do what their documentation says (see [`StreamApi`]'s safety section), and every
//! `unsafe` call it makes rests on that, on the `# Safety` promise of the method called and
//! on its own checks (ranges inside allocations, work waited for), each argued in a
//! `// SAFETY:` comment.

use std::ffi::{CStr, c_void};

use offload_core::{
    BackendKind, CompilerId, DeviceInfo, Error, Language, ParamKind, Result, Source,
};

use crate::{Counters, Failure};

// Each child uses only those before it in this order (scripts/circles.sh checks that none
// imports another in a circle): `shared` (the device record, `StreamDevice`, the IPC
// mappings), `stream` (the stream under a queue: its gate, held operations and events, and
// `Uses`), `memory`, `program`, `ipc`, `queue`, then `device` (the platform and the
// `hal::Device` impl) on top; `names` (the vendor crates' public names) over them all, and
// `calls` (the vendor calls) apart.
mod calls;
mod device;
mod ipc;
mod memory;
mod names;
mod program;
mod queue;
mod shared;
mod stream;

pub use calls::RawAddress;
pub use device::StreamPlatform;
pub use memory::StreamBuffer;
pub use program::{StreamKernel, StreamModule};
pub use queue::{StreamEvent, StreamQueue};
pub use shared::{DeviceCore, OpenedApi, StreamDevice};

/// A fill pattern the vendor fills with natively: one 1-, 2- or 4-byte word.
///
/// ```
/// let word = offload_driver::Word::W16(0xBEEF);
/// assert!(matches!(word, offload_driver::Word::W16(0xBEEF)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// A byte (`cuMemsetD8Async`, `hipMemsetAsync`).
    W8(u8),
    /// A 16-bit word (`cuMemsetD16Async`, `hipMemsetD16Async`).
    W16(u16),
    /// A 32-bit word (`cuMemsetD32Async`, `hipMemsetD32Async`).
    W32(u32),
}

/// How a backend names itself and its calls in the messages of its errors.
///
/// ```
/// let words = offload_driver::Words {
///     name: "cuda",
///     title: "CUDA",
///     prefix: "Cuda",
///     driver: "driver",
///     managed: "cuMemAllocManaged",
///     ipc: "cuIpcGetMemHandle/cuIpcOpenMemHandle",
///     leak: "their primary contexts stay retained until they are gone",
/// };
/// assert_eq!(words.name, "cuda");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Words {
    /// Lower case, in argument errors: `cuda` (`cuda buffer: range …`).
    pub name: &'static str,
    /// As the vendor writes it: `CUDA` (`zero-size allocation on a CUDA device`).
    pub title: &'static str,
    /// The prefix of the public type names: `Cuda` (`CudaBuffer` in `Debug`).
    pub prefix: &'static str,
    /// What the library is: `driver` or `runtime` (`the driver refused it`).
    pub driver: &'static str,
    /// The managed-memory allocation call, named when it is missing.
    pub managed: &'static str,
    /// The IPC calls, named when they are missing (`cuIpcGetMemHandle/cuIpcOpenMemHandle`).
    pub ipc: &'static str,
    /// What happens to objects still alive at deinit.
    pub leak: &'static str,
}

/// A stream-based vendor API (the CUDA driver API, the HIP runtime API): the calls the
/// generic backend of this module makes, each returning `Result` with the vendor's names
/// for a failure. Implemented by the vendor crate's opened library.
///
/// Device addresses are `u64` (`CUdeviceptr`; HIP's `void *` as an integer). A thread
/// calls [`StreamApi::bind`] for a device before every call that acts on the device's
/// objects.
///
/// # Safety
///
/// The generic backend's `unsafe` code relies on every implementation guaranteeing that:
///
/// - each method makes the vendor call its documentation names, with the arguments given,
///   and nothing else that touches memory offload owns;
/// - the handles ([`StreamApi::Context`], streams, events, modules, functions) may be
///   moved to and used from any thread (the vendor API is thread-safe; the current device
///   is per-thread state that `bind` sets);
/// - every safe method is sound for any argument: a bad handle, device or address is an
///   error code, never a write elsewhere;
/// - [`StreamApi::alloc_device`], [`StreamApi::alloc_managed`] and
///   [`StreamApi::ipc_open`] return the base address of at least the requested (or
///   exported) bytes, owned by the caller until freed (closed); [`StreamApi::alloc_host`]
///   returns page-locked host memory of that size whose host address is also its device
///   address (unified addressing); managed memory is host-accessible at its address;
/// - [`StreamApi::module_bytes`] returns bytes that [`StreamApi::module_load`] may hand to
///   the vendor: an image [`StreamApi::inspect`] checked (its headers and sections lie
///   inside the bytes);
/// - [`StreamApi::kernel_params`] describes the function the vendor's module has under
///   that name: one entry per explicit parameter, of at most 8 bytes each.
#[allow(unsafe_code)]
pub unsafe trait StreamApi: Send + Sync + Sized + 'static {
    /// The backend family.
    const KIND: BackendKind;
    /// How the backend names itself in error messages.
    const WORDS: Words;
    /// The vendor's out-of-memory code (`CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorOutOfMemory`).
    const OUT_OF_MEMORY: i64;
    /// The code of a global the module does not have (`CUDA_ERROR_NOT_FOUND`, …).
    const NOT_FOUND: i64;
    /// The code of an IPC open of memory already mapped here, where the vendor has one
    /// (`CUDA_ERROR_ALREADY_MAPPED`): a stale mapping of freed memory is closed and the
    /// open retried (the defence UCX and Open MPI use).
    const ALREADY_MAPPED: Option<i64>;
    /// The first bytes of an IPC payload (`OFCU`, `OFHP`).
    const IPC_MAGIC: [u8; 4];
    /// Whether an IPC payload carries the allocation's id ([`StreamApi::ipc_identity`]).
    const IPC_ID: bool;

    /// What a device is to the vendor (CUDA: its primary context; HIP: its ordinal) and
    /// what the backend read of it once.
    type Context: Send + Sync + 'static;
    /// A stream handle.
    type Stream: Copy + 'static;
    /// An event handle.
    type Event: Copy + 'static;
    /// A module handle.
    type Module: Copy + 'static;
    /// A function (kernel) handle.
    type Function: Copy + 'static;
    /// What inspecting an image found (format, kernels and their parameters, globals).
    type Image: Send + Sync + 'static;

    /// Loads the library, initialises it and lists the devices, each a [`DeviceCore`]:
    /// at least one, else `Error::DriverNotFound` (an absent platform, never a panic).
    fn open() -> Result<OpenedApi<Self>>;
    /// The backend's process-wide counters.
    fn counters() -> &'static Counters;
    /// The name the library was found under.
    fn library(&self) -> &'static str;
    /// Makes the device current on the calling thread (`cuCtxSetCurrent`, `hipSetDevice`).
    fn bind(&self, context: &Self::Context) -> std::result::Result<(), Failure>;
    /// Lets go of a device, once, when nothing made on it is left (CUDA releases its
    /// primary context).
    ///
    /// # Safety
    ///
    /// Every object made on the device is gone, and it is released once.
    unsafe fn release(&self, context: &Self::Context);
    /// What the vendor says about the device.
    fn device_info(&self, context: &Self::Context) -> Result<DeviceInfo>;
    /// The device's identity for IPC (`cuDeviceGetUuid`, …, or a stand-in).
    fn uuid(&self, context: &Self::Context, ordinal: u32) -> [u8; 16];
    /// The compiler the device uses for `language` (`hal::Device::compiler`).
    fn compiler(&self, context: &Self::Context, language: Language) -> Result<Option<CompilerId>> {
        let _ = (context, language);
        Ok(None)
    }
    /// Compiles `source` (`hal::Device::compile`).
    fn compile(&self, context: &Self::Context, source: &Source) -> Result<Vec<u8>> {
        let _ = context;
        Err(Error::invalid(
            "",
            format!("this device has no {} compiler", source.language()),
        ))
    }

    /// Device memory (`cuMemAlloc_v2`, `hipMalloc`).
    fn alloc_device(&self, bytes: usize) -> std::result::Result<u64, Failure>;
    /// Page-locked host memory (`cuMemAllocHost_v2`, `hipHostMalloc`).
    fn alloc_host(&self, bytes: usize) -> std::result::Result<*mut c_void, Failure>;
    /// Managed memory; `None` where the vendor lacks it.
    fn alloc_managed(&self, bytes: usize) -> Option<std::result::Result<u64, Failure>>;
    /// Frees device or managed memory.
    ///
    /// # Safety
    ///
    /// `ptr` is a live allocation of `alloc_device`/`alloc_managed` on the current device,
    /// freed once, unused by pending work.
    unsafe fn free_device(&self, ptr: u64) -> std::result::Result<(), Failure>;
    /// Frees page-locked host memory.
    ///
    /// # Safety
    ///
    /// As for [`StreamApi::free_device`], for memory of `alloc_host`.
    unsafe fn free_host(&self, ptr: *mut c_void) -> std::result::Result<(), Failure>;
    /// A synchronous copy from the host.
    ///
    /// # Safety
    ///
    /// `dst..dst + src.len()` lies inside a live allocation of the current device that no
    /// pending work uses.
    unsafe fn memcpy_htod(&self, dst: u64, src: &[u8]) -> std::result::Result<(), Failure>;
    /// A synchronous copy to the host.
    ///
    /// # Safety
    ///
    /// `src..src + dst.len()` lies inside a live allocation of the current device that no
    /// pending work writes.
    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: u64) -> std::result::Result<(), Failure>;
    /// A synchronous device-to-device copy.
    ///
    /// # Safety
    ///
    /// Both ranges of `len` bytes lie inside live allocations of the current device, do
    /// not overlap, and no pending work uses them.
    unsafe fn memcpy_dtod(
        &self,
        dst: u64,
        src: u64,
        len: usize,
    ) -> std::result::Result<(), Failure>;
    /// A synchronous byte fill.
    ///
    /// # Safety
    ///
    /// `dst..dst + len` lies inside a live allocation of the current device that no
    /// pending work uses.
    unsafe fn memset_d8(&self, dst: u64, value: u8, len: usize)
    -> std::result::Result<(), Failure>;
    /// A copy from the host queued on `stream`.
    ///
    /// # Safety
    ///
    /// As for [`StreamApi::memcpy_htod`], and the allocation and `src`'s bytes stay alive
    /// and unchanged until `stream` has passed the copy; `stream` is live.
    unsafe fn memcpy_htod_async(
        &self,
        dst: u64,
        src: &[u8],
        stream: Self::Stream,
    ) -> std::result::Result<(), Failure>;
    /// A device-to-device copy queued on `stream`.
    ///
    /// # Safety
    ///
    /// As for [`StreamApi::memcpy_dtod`], and both allocations outlive the copy on the
    /// live `stream`.
    unsafe fn memcpy_dtod_async(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        stream: Self::Stream,
    ) -> std::result::Result<(), Failure>;
    /// A fill of `count` words queued on `stream`.
    ///
    /// # Safety
    ///
    /// `count` words from `dst` (aligned to the word size) lie inside a live allocation of
    /// the current device that outlives the fill on the live `stream`.
    unsafe fn memset_async(
        &self,
        dst: u64,
        word: Word,
        count: usize,
        stream: Self::Stream,
    ) -> std::result::Result<(), Failure>;

    /// A non-blocking stream on the current device.
    fn stream_create(&self) -> std::result::Result<Self::Stream, Failure>;
    /// Destroys a stream.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the current device, destroyed once.
    unsafe fn stream_destroy(&self, stream: Self::Stream) -> std::result::Result<(), Failure>;
    /// Waits for `stream`, or (`None`) for the stream the synchronous copies and fills run
    /// on (CUDA's legacy default stream, HIP's null stream).
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the current device.
    unsafe fn stream_synchronize(
        &self,
        stream: Option<Self::Stream>,
    ) -> std::result::Result<(), Failure>;
    /// Whether everything enqueued on `stream` has finished.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the current device.
    unsafe fn stream_query(&self, stream: Self::Stream) -> std::result::Result<bool, Failure>;
    /// Makes `stream`'s later work wait for `event`.
    ///
    /// # Safety
    ///
    /// Both are live objects of the current device.
    unsafe fn stream_wait_event(
        &self,
        stream: Self::Stream,
        event: Self::Event,
    ) -> std::result::Result<(), Failure>;
    /// An event with timing on the current device.
    fn event_create(&self) -> std::result::Result<Self::Event, Failure>;
    /// Records `event` on `stream`.
    ///
    /// # Safety
    ///
    /// Both are live objects of the current device.
    unsafe fn event_record(
        &self,
        event: Self::Event,
        stream: Self::Stream,
    ) -> std::result::Result<(), Failure>;
    /// Waits for `event`.
    ///
    /// # Safety
    ///
    /// `event` is a live event of the current device.
    unsafe fn event_synchronize(&self, event: Self::Event) -> std::result::Result<(), Failure>;
    /// Whether the work before `event` has finished.
    ///
    /// # Safety
    ///
    /// `event` is a live event of the current device.
    unsafe fn event_query(&self, event: Self::Event) -> std::result::Result<bool, Failure>;
    /// Milliseconds from `start` to `end`.
    ///
    /// # Safety
    ///
    /// Both are live, completed events of the current device.
    unsafe fn event_elapsed(
        &self,
        start: Self::Event,
        end: Self::Event,
    ) -> std::result::Result<f32, Failure>;
    /// Destroys an event (the vendor defers the release of one still pending).
    ///
    /// # Safety
    ///
    /// `event` is a live event of the current device, destroyed once.
    unsafe fn event_destroy(&self, event: Self::Event) -> std::result::Result<(), Failure>;

    /// Whether `image`'s container is one of the vendor's (by its first bytes; no driver
    /// call): `Offload::devices_for` opens the platform only for those
    /// (`hal::Platform::may_run`).
    fn may_run(image: &[u8]) -> bool;

    /// Inspects `image` for the device, before the vendor sees it: what it holds, or why
    /// it is no image this device could load.
    fn inspect(
        &self,
        context: &Self::Context,
        image: &[u8],
    ) -> std::result::Result<Self::Image, String>;
    /// The kernels an inspected image declares.
    fn image_kernels(image: &Self::Image) -> Vec<String>;
    /// The globals an inspected image declares.
    fn image_globals(image: &Self::Image) -> Vec<String>;
    /// The parameters of kernel `name` (`None`: the image has no such kernel; an error: a
    /// parameter offload cannot pass).
    fn kernel_params(image: &Self::Image, name: &str) -> Option<Result<Vec<ParamKind>>>;
    /// The bytes the vendor loads for an inspected image (kept until the module is
    /// unloaded): PTX with its NUL, the code object out of a bundle, …
    fn module_bytes(image: &[u8], inspected: &Self::Image) -> std::result::Result<Vec<u8>, String>;
    /// Loads a module on the current device; a refused image is `Error::InvalidBinary`.
    ///
    /// # Safety
    ///
    /// `bytes` came from [`StreamApi::module_bytes`] for `inspected`, an inspection of the
    /// same image, and stay alive until the module is unloaded.
    unsafe fn module_load(&self, bytes: &[u8], inspected: &Self::Image) -> Result<Self::Module>;
    /// Unloads a module.
    ///
    /// # Safety
    ///
    /// `module` is a live module of the current device, unloaded once, unused by pending
    /// work, with no function of it left in use.
    unsafe fn module_unload(&self, module: Self::Module) -> std::result::Result<(), Failure>;
    /// A module's function.
    ///
    /// # Safety
    ///
    /// `module` is a live module of the current device.
    unsafe fn module_function(
        &self,
        module: Self::Module,
        name: &CStr,
    ) -> std::result::Result<Self::Function, Failure>;
    /// Address and size of a module's global.
    ///
    /// # Safety
    ///
    /// `module` is a live module of the current device.
    unsafe fn module_global(
        &self,
        module: Self::Module,
        name: &CStr,
    ) -> std::result::Result<(u64, usize), Failure>;
    /// Launches a kernel on `stream`.
    ///
    /// # Safety
    ///
    /// `function` is a live kernel of the current device; `params` holds one pointer per
    /// parameter, to a value of that parameter's size, alive across the call; every buffer
    /// address among them lies in a live allocation that outlives the launch on the live
    /// `stream`; the geometry is within the device's limits. The kernel is device code the
    /// caller chose to run.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_kernel(
        &self,
        function: Self::Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: Self::Stream,
        params: &mut [*mut c_void],
    ) -> std::result::Result<(), Failure>;

    /// The IPC handle of an allocation; `None` where the vendor lacks IPC.
    ///
    /// # Safety
    ///
    /// `ptr` is the base of a live `alloc_device` allocation of the current device.
    unsafe fn ipc_get(&self, ptr: u64) -> Option<std::result::Result<[u8; 64], Failure>>;
    /// Opens another process's IPC handle on the current device; `None` where the vendor
    /// lacks IPC. The vendor checks the handle's bytes (a forged one is an error code).
    fn ipc_open(&self, handle: [u8; 64]) -> Option<std::result::Result<u64, Failure>>;
    /// Closes an opened IPC handle; `None` where the vendor lacks IPC.
    ///
    /// # Safety
    ///
    /// `ptr` came from `ipc_open` on the current device, closed once, unused by pending
    /// work.
    unsafe fn ipc_close(&self, ptr: u64) -> Option<std::result::Result<(), Failure>>;
    /// Checks an exportable allocation before its handle travels, and gives the id the
    /// payload carries when [`StreamApi::IPC_ID`] (CUDA's buffer id).
    fn ipc_identity(&self, ptr: u64, len: usize) -> Result<Option<u64>>;
}

/// A failed vendor call as an offload error (naming no call: the handle of the user's call
/// names it).
pub(crate) fn driver_error<A: StreamApi>(failure: Failure) -> Error {
    failure.into_error(A::KIND, "")
}
