//! The backend-facing trait family (as wgpu-hal is to wgpu): what a backend crate implements.
//!
//! | trait | is | liboffload | CUDA |
//! |---|---|---|---|
//! | [`Platform`] | one driver instance: opens, lists its devices, deinitialises | platform | the driver after `cuInit` |
//! | [`Device`] | one device: info, memory and copies, making queues, loading an image | device | device + its primary context |
//! | [`Queue`] | an in-order stream of work: launches, queued copies, host functions, events | queue | `CUstream` |
//! | [`Event`] | a point in a queue's work, with its time | event | `CUevent` |
//! | [`Program`] | an image loaded on one device: kernels, parameters, globals, unload | program | `CUmodule` (kernels: `CUfunction`) |
//!
//! Each trait is in a file of its own (a device's queue trait in a child of the device's,
//! `device/queue.rs`: each names the other). Buffers, queues, events, programs and kernels are
//! associated types of the device; each method sits on the object it acts on (a queue
//! launches, an event is waited for), and [`Never`] stands for an object a backend cannot
//! make. Objects keep their parents alive (a device holds what it needs of its
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

mod device;
mod event;
mod ipc;
mod never;
mod platform;
mod program;

pub use crate::error::{HOST_FN_CALLBACK, panic_text};
pub use crate::vocab::format::ImageFormat;
pub(crate) use crate::vocab::format::REFERENCE_MAGIC;
pub use crate::vocab::source::{CompilerId, Language, Source};
pub use crate::vocab::types::{
    BackendKind, DeviceInfo, Dims, GlobalInfo, KernelArg, MemKind, ParamKind, ScalarType,
};
pub use device::{Device, Owner, Pending, Queue, check_fill};
pub use event::Event;
pub use ipc::{Exported, Ipc};
pub use never::Never;
pub use platform::Platform;
pub use program::Program;

/// The kernel type of device `D`'s programs.
pub type KernelOf<D> = <<D as Device>::Program as Program>::Kernel;

/// A host function enqueued on a queue ([`Queue::enqueue_host_fn`]).
pub type HostFn = Box<dyn FnOnce() + Send + 'static>;
