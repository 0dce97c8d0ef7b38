//! The lifecycle and the handles.
//!
//! One runtime generation at a time: the first `olInit` (reference count 0 → 1) starts
//! offload (`Offload::init`); the first call that needs devices lists them (opening the
//! platforms, as liboffload 22 does lazily); later `olInit`s only count; the `olShutDown`
//! that brings the count to 0 frees every allocation still held, shuts offload down
//! (really: offload deinitialises its platforms, L1) and ends the generation. The next
//! `olInit` starts a fresh one (L2). A failed `olInit` leaves the count at 0 and drops
//! whatever it had started: nothing is left behind.
//!
//! A device or platform handle is not a pointer C could follow: its bits are a type tag
//! (bits 63–56, so it is never a valid address), the generation (bits 55–32, modulo 2^24)
//! and an index. A handle of a generation that ended is refused with
//! `OL_ERRC_INVALID_DEVICE` / `OL_ERRC_INVALID_PLATFORM` while a later generation runs, and
//! every call but `olInit` answers `OL_ERRC_UNINITIALIZED` while none runs — never a crash.
//!
//! Calls take one standard mutex ([`STATE`], const-initialised: `dlclose` unmaps it with
//! the library). It is not held while `olIterateDevices` runs the caller's callback, so the
//! callback may call any function, `olShutDown` included.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use offload::{BackendKind, Buffer, Device, DeviceInfo, Offload};

use crate::abi::*;
use crate::result::{Fail, Fixed, Kept, Res, stat};

/// The state of the library; one per process (per load of the library).
pub(crate) struct State {
    /// `olInit`s not yet matched by an `olShutDown`.
    pub(crate) refs: usize,
    /// Generations started so far (the handles' generation bits).
    pub(crate) epoch: u32,
    pub(crate) live: Option<Live>,
    /// The message of the last failed `olInit` / `olShutDown`.
    pub(crate) init_fail: Fixed,
    pub(crate) shutdown_fail: Fixed,
    /// Allocations made so far whose memory has no host address (fake addresses).
    pub(crate) fake_next: u64,
}

pub(crate) static STATE: Mutex<State> = Mutex::new(State {
    refs: 0,
    epoch: 0,
    live: None,
    init_fail: Fixed::new(),
    shutdown_fail: Fixed::new(),
    fake_next: 0,
});

/// The state, also after a panic under the lock (every change is completed before a call
/// can panic, so the data stays consistent).
#[inline]
pub(crate) fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One runtime generation.
pub(crate) struct Live {
    pub(crate) rt: Offload,
    pub(crate) epoch: u32,
    /// Whether `devices` and `platforms` were filled in (at the first call that needs them).
    listed: bool,
    pub(crate) devices: Vec<Dev>,
    pub(crate) platforms: Vec<Plat>,
    /// Allocations by base address.
    pub(crate) allocs: BTreeMap<usize, Arc<Alloc>>,
    /// Results with offload's messages, once per (code, text), until this generation ends.
    results: HashMap<(u32, String), Box<Kept>>,
}

pub(crate) enum DevKind {
    /// liboffload's HOST device: a memcpy endpoint for host pointers, no allocations.
    Endpoint,
    /// A device of offload's.
    Offload(Box<(Device, DeviceInfo)>),
}

pub(crate) struct Dev {
    pub(crate) kind: DevKind,
    pub(crate) platform: usize,
    /// The device's index among its backend's devices (its UID).
    pub(crate) index: u32,
}

pub(crate) struct Plat {
    pub(crate) name: &'static str,
    pub(crate) backend: ol_platform_backend_t,
    pub(crate) kind: Option<BackendKind>,
}

pub(crate) struct Alloc {
    pub(crate) buffer: Buffer,
    pub(crate) size: usize,
    pub(crate) device: usize,
    pub(crate) ty: ol_alloc_type_t,
    /// The address is offload's host address of the memory (it can be dereferenced).
    pub(crate) host_visible: bool,
    /// The caller's host memory, registered by `olMemRegister` (freed by the caller after
    /// `olMemUnregister`, never by `olMemFree`).
    pub(crate) registered: bool,
}

/// The platform backend liboffload 22 has nearest to an offload backend.
pub(crate) fn backend_of(kind: BackendKind) -> (ol_platform_backend_t, &'static str) {
    match kind {
        BackendKind::Host => (
            ol_platform_backend_t::OL_PLATFORM_BACKEND_HOST,
            "offload host",
        ),
        BackendKind::Cuda => (
            ol_platform_backend_t::OL_PLATFORM_BACKEND_CUDA,
            "offload CUDA",
        ),
        BackendKind::Hip => (
            ol_platform_backend_t::OL_PLATFORM_BACKEND_AMDGPU,
            "offload HIP",
        ),
        BackendKind::Ze => (
            ol_platform_backend_t::OL_PLATFORM_BACKEND_LEVEL_ZERO,
            "offload Level Zero",
        ),
        // Vulkan, and any backend added later: liboffload 22 has no value for it.
        BackendKind::Vulkan => (
            ol_platform_backend_t::OL_PLATFORM_BACKEND_UNKNOWN,
            "offload Vulkan",
        ),
        _ => (
            ol_platform_backend_t::OL_PLATFORM_BACKEND_UNKNOWN,
            "offload",
        ),
    }
}

impl Live {
    /// Starts offload (`Offload::init`); its platforms open when first listed, as
    /// liboffload's do (an `olInit`/`olShutDown` pair that lists nothing stays cheap).
    pub(crate) fn start(epoch: u32) -> Result<Live, offload::Error> {
        Ok(Live {
            rt: Offload::init()?,
            epoch,
            listed: false,
            devices: Vec::new(),
            platforms: Vec::new(),
            allocs: BTreeMap::new(),
            results: HashMap::new(),
        })
    }

    /// Lists the devices (once per generation): liboffload's HOST endpoint first, then
    /// offload's, each backend a platform.
    #[inline]
    pub(crate) fn list(&mut self) -> Res<&mut Live> {
        match self.listed {
            true => Ok(self),
            false => self.list_now(),
        }
    }

    /// [`list`](Live::list)'s first call in a generation.
    #[cold]
    #[inline(never)]
    fn list_now(&mut self) -> Res<&mut Live> {
        let listed = self
            .rt
            .devices()
            .and_then(|devices| {
                devices
                    .into_iter()
                    .map(|d| d.info().map(|info| (d, info)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| fail("olIterateDevices", e))?;
        let mut platforms = vec![Plat {
            name: "Host",
            backend: ol_platform_backend_t::OL_PLATFORM_BACKEND_HOST,
            kind: None,
        }];
        let mut devices = vec![Dev {
            kind: DevKind::Endpoint,
            platform: 0,
            index: 0,
        }];
        for (device, info) in listed {
            let kind = device.backend();
            let platform = match platforms.iter().position(|p| p.kind == Some(kind)) {
                Some(p) => p,
                None => {
                    let (backend, name) = backend_of(kind);
                    platforms.push(Plat {
                        name,
                        backend,
                        kind: Some(kind),
                    });
                    platforms.len() - 1
                }
            };
            let index = device.index();
            devices.push(Dev {
                kind: DevKind::Offload(Box::new((device, info))),
                platform,
                index,
            });
        }
        self.devices = devices;
        self.platforms = platforms;
        self.listed = true;
        Ok(self)
    }

    /// Keeps `text` until this generation ends and returns its result.
    pub(crate) fn keep(&mut self, code: ol_errc_t, text: String) -> ol_result_t {
        self.results
            .entry((code.0, text))
            .or_insert_with_key(|(_, text)| Kept::new(code, text))
            .as_result()
    }

    /// The allocation holding `ptr`, with the offset of `ptr` in it.
    pub(crate) fn alloc_at(&self, ptr: usize) -> Option<(usize, &Arc<Alloc>)> {
        let (&base, alloc) = self.allocs.range(..=ptr).next_back()?;
        (ptr - base < alloc.size.max(1)).then_some((ptr - base, alloc))
    }
}

const DEVICE_TAG: usize = 0xD1;
const PLATFORM_TAG: usize = 0xB1;

fn encode(tag: usize, epoch: u32, index: usize) -> usize {
    (tag << 56) | (((epoch & 0xFF_FFFF) as usize) << 32) | (index & 0xFFFF_FFFF)
}

pub(crate) fn device_handle(epoch: u32, index: usize) -> ol_device_handle_t {
    std::ptr::without_provenance_mut(encode(DEVICE_TAG, epoch, index))
}

pub(crate) fn platform_handle(epoch: u32, index: usize) -> ol_platform_handle_t {
    std::ptr::without_provenance_mut(encode(PLATFORM_TAG, epoch, index))
}

/// The live generation, or `OL_ERRC_UNINITIALIZED`.
#[inline]
pub(crate) fn live(state: &mut State) -> Res<&mut Live> {
    state.live.as_mut().ok_or_else(uninit)
}

/// The live generation with its devices listed, or why not.
#[inline]
pub(crate) fn listed(state: &mut State) -> Res<&mut Live> {
    live(state)?.list()
}

/// `OL_ERRC_UNINITIALIZED`: no generation runs.
pub(crate) fn uninit() -> Fail {
    Fail::Static(stat!(
        OL_ERRC_UNINITIALIZED,
        "offload's libLLVMOffload is not initialised: call olInit first (every olInit was matched by an olShutDown)"
    ))
}

/// Which object of the live generation a handle names.
fn decode(live: &Live, handle: usize, tag: usize, stale: Fail, foreign: Fail) -> Res<usize> {
    if handle >> 56 != tag {
        return Err(foreign);
    }
    if (handle >> 32) & 0xFF_FFFF != (live.epoch & 0xFF_FFFF) as usize {
        return Err(stale);
    }
    Ok(handle & 0xFFFF_FFFF)
}

pub(crate) fn device_index(live: &Live, device: ol_device_handle_t) -> Res<usize> {
    if device.is_null() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_NULL_HANDLE,
            "the device handle is NULL"
        )));
    }
    let index = decode(
        live,
        device.addr(),
        DEVICE_TAG,
        Fail::Static(stat!(
            OL_ERRC_INVALID_DEVICE,
            "the device handle belongs to a runtime generation that olShutDown ended; list the devices again after olInit"
        )),
        Fail::Static(stat!(
            OL_ERRC_INVALID_DEVICE,
            "not a device handle of this library (garbage, or another object's handle)"
        )),
    )?;
    if index >= live.devices.len() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_DEVICE,
            "not a device handle of this library (no such device)"
        )));
    }
    Ok(index)
}

pub(crate) fn platform_index(live: &Live, platform: ol_platform_handle_t) -> Res<usize> {
    if platform.is_null() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_NULL_HANDLE,
            "the platform handle is NULL"
        )));
    }
    let index = decode(
        live,
        platform.addr(),
        PLATFORM_TAG,
        Fail::Static(stat!(
            OL_ERRC_INVALID_PLATFORM,
            "the platform handle belongs to a runtime generation that olShutDown ended"
        )),
        Fail::Static(stat!(
            OL_ERRC_INVALID_PLATFORM,
            "not a platform handle of this library (garbage, or another object's handle)"
        )),
    )?;
    if index >= live.platforms.len() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_PLATFORM,
            "not a platform handle of this library (no such platform)"
        )));
    }
    Ok(index)
}

/// The `ol_errc_t` nearest to an offload error (docs/liboffload.md, "Error codes").
pub(crate) fn errc(e: &offload::Error) -> ol_errc_t {
    use offload::Error as E;
    match e {
        E::ShutDown { .. } => ol_errc_t::OL_ERRC_UNINITIALIZED,
        E::InvalidBinary { .. } => ol_errc_t::OL_ERRC_INVALID_BINARY,
        E::SymbolNotFound { .. } => ol_errc_t::OL_ERRC_NOT_FOUND,
        E::OutOfMemory { .. } => ol_errc_t::OL_ERRC_OUT_OF_RESOURCES,
        E::InvalidArgument { .. } => ol_errc_t::OL_ERRC_INVALID_ARGUMENT,
        E::Unsupported { .. } => ol_errc_t::OL_ERRC_UNSUPPORTED,
        E::Compile { .. } => ol_errc_t::OL_ERRC_COMPILE_FAILURE,
        E::DriverNotFound { .. } | E::NoDevice { .. } | E::Driver { .. } => {
            ol_errc_t::OL_ERRC_BACKEND_FAILURE
        }
        _ => ol_errc_t::OL_ERRC_UNKNOWN,
    }
}

/// An offload error as a failure with its message, in the words of liboffload's call.
pub(crate) fn fail(call: &'static str, e: offload::Error) -> Fail {
    let e = e.for_call(offload::Caller::Liboffload, call);
    Fail::Message(errc(&e), e.to_string())
}

/// A failure of work done without the state's lock as a result pointer (offload's
/// message is kept in the live generation's store, or, with none, in the shutdown
/// buffer).
pub(crate) fn finish(done: Res) -> Result<(), ol_result_t> {
    match done {
        Ok(()) => Ok(()),
        Err(fail) => with_state(|_| Err(fail)),
    }
}

/// Runs `body` on the live generation, under the state's lock.
pub(crate) fn with_live<T>(body: impl FnOnce(&mut Live) -> Res<T>) -> Res<T> {
    body(live(&mut state())?)
}

/// A failure's message, kept until the live generation ends (or, with none, in the
/// shutdown buffer).
#[cold]
#[inline(never)]
fn kept(state: &mut State, code: ol_errc_t, text: String) -> ol_result_t {
    match state.live.as_mut() {
        Some(live) => live.keep(code, text),
        None => state.shutdown_fail.set(code, &text),
    }
}

/// Runs `body` on the state and turns its failure into a result pointer.
#[inline]
pub(crate) fn with_state(body: impl FnOnce(&mut State) -> Res) -> Result<(), ol_result_t> {
    let mut state = state();
    match body(&mut state) {
        Ok(()) => Ok(()),
        Err(Fail::Static(s)) => Err(&s.0),
        Err(Fail::Message(code, text)) => Err(kept(&mut state, code, text)),
    }
}
