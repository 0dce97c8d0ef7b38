//! The C API's handles: every object a C caller holds lives in the library's
//! [`offload_handles::Table`] (slots with generations, a released handle never reaching a
//! new object, standard locks only: that crate's documentation says how, L9), and C sees
//! only an opaque 64-bit handle naming its slot. This file holds what is the C API's own:
//! the type tags ([`Kind`]), which of the API's types C may hold ([`Held`]), the refusals
//! in C's words, the runtime count whose last release ends the table's epoch, and the
//! device handles.
//!
//! A handle's epoch is the table's: the last runtime reference's release ends it and sweeps
//! every object, so a handle of a runtime that was shut down answers
//! `OFFLOAD_ERROR_SHUT_DOWN` (rather than "released"). Device handles are made once per
//! device and epoch and belong to the runtime, as liboffload's do: listing devices again
//! gives the same handles.

use std::any::Any;
use std::sync::Arc;

use offload::{BackendKind, Buffer, Device, Event, Kernel, Module, Offload, Queue};
pub(crate) use offload_handles::epoch_of;
use offload_handles::{Object, Refused, SLOTS, Table, Why};

use crate::status::{Fail, Res};

/// The kinds of object a handle names; the discriminant is the handle's type tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Runtime = 0xA1,
    Device = 0xA2,
    Buffer = 0xA3,
    Program = 0xA4,
    Module = 0xA5,
    Kernel = 0xA6,
    Queue = 0xA7,
    Event = 0xA8,
    Endpoint = 0xA9,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Runtime,
        Kind::Device,
        Kind::Buffer,
        Kind::Program,
        Kind::Module,
        Kind::Kernel,
        Kind::Queue,
        Kind::Event,
        Kind::Endpoint,
    ];

    /// How messages name it.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Runtime => "runtime",
            Kind::Device => "device",
            Kind::Buffer => "buffer",
            Kind::Program => "program",
            Kind::Module => "module",
            Kind::Kernel => "kernel",
            Kind::Queue => "queue",
            Kind::Event => "event",
            Kind::Endpoint => "IPC endpoint",
        }
    }
}

/// A type C holds by handle, and the tag of its handles; implemented beside the type (the
/// offload handles here, the C API's own cells in their files).
pub(crate) trait Held: Any + Send + Sync + Sized {
    const KIND: Kind;
}

impl Held for Offload {
    const KIND: Kind = Kind::Runtime;
}
impl Held for Device {
    const KIND: Kind = Kind::Device;
}
impl Held for Buffer {
    const KIND: Kind = Kind::Buffer;
}
impl Held for Module {
    const KIND: Kind = Kind::Module;
}
impl Held for Kernel {
    const KIND: Kind = Kind::Kernel;
}
impl Held for Queue {
    const KIND: Kind = Kind::Queue;
}
impl Held for Event {
    const KIND: Kind = Kind::Event;
}

/// What the table keeps beside its slots, under its lock.
struct Books {
    /// Runtime references C holds in this epoch.
    runtimes: usize,
    /// The device handles of this epoch: (backend, index, handle).
    devices: Vec<(BackendKind, u32, u64)>,
    /// The last full device list of this epoch (`offload_devices`).
    listed: Vec<u64>,
}

// Const-initialised: a fresh table whenever the library is loaded again (L2).
static TABLE: Table<Books> = Table::new(Books {
    runtimes: 0,
    devices: Vec::new(),
    listed: Vec::new(),
});

fn same_epoch(a: u64, b: u64) -> bool {
    a % 64 == b % 64
}

/// Why `handle` names no live `want`, in words for `call`.
#[cold]
#[inline(never)]
fn refuse(call: &'static str, want: Kind, handle: u64) -> Fail {
    let noun = want.noun();
    match TABLE.why(want as u8, handle) {
        Why::Zero => Fail::Handle(format!("{call}: the {noun} handle is 0 (no {noun})")),
        Why::OtherTag(tag) => match Kind::ALL.iter().find(|k| **k as u8 == tag) {
            Some(kind) => Fail::Handle(format!(
                "{call}: {handle:#018x} is a {} handle, not a {noun} handle",
                kind.noun()
            )),
            None => Fail::Handle(format!(
                "{call}: {handle:#018x} is not an offload handle (garbage or uninitialised)"
            )),
        },
        Why::EndedEpoch => Fail::Offload(offload::Error::ShutDown {
            call,
            object: format!("{noun} handle {handle:#018x}"),
            caller: offload::Caller::C,
        }),
        Why::Released => Fail::Handle(format!(
            "{call}: {noun} handle {handle:#018x} names no live {noun}: it was released, or \
             never made"
        )),
    }
}

/// Why an insert kept nothing, in words for `call`.
fn refused(call: &'static str, why: Refused) -> Fail {
    match why {
        Refused::EndedEpoch => Fail::Offload(offload::Error::ShutDown {
            call,
            object: String::new(),
            caller: offload::Caller::C,
        }),
        Refused::Full { retired } => Fail::Offload(offload::Error::InvalidArgument {
            call: "offload handle table",
            reason: format!(
                "more than {SLOTS} live objects ({retired} slots retired for good after 2^32 \
                 objects each)"
            ),
        }),
    }
}

/// A live `T` held for the length of one call: an `Arc` of its object, so a release
/// meanwhile does not free it under the call.
pub(crate) type Pinned<T> = Arc<T>;

/// The object `handle` names, if it is a live `T`, held for the call.
#[inline]
pub(crate) fn get<T: Held>(call: &'static str, handle: u64) -> Res<Pinned<T>> {
    TABLE
        .get_as::<T>(T::KIND as u8, handle)
        .ok_or_else(|| refuse(call, T::KIND, handle))
}

/// Whether `handle` names a live `T` right now.
pub(crate) fn check<T: Held>(call: &'static str, handle: u64) -> Res {
    match TABLE.is_live(T::KIND as u8, handle) {
        true => Ok(()),
        false => Err(refuse(call, T::KIND, handle)),
    }
}

/// Keeps `x`, made from a parent of epoch `epoch`, and gives its handle. If the parent's
/// runtime was shut down meanwhile (the epoch moved on), `x` is dropped and the answer is
/// `ShutDown`. (An epoch compares modulo 64: a parent 64 shutdowns old would pass, and its
/// object — answering `ShutDown` to every call, as its runtime ended — would stay until the
/// next last shutdown sweeps it. Never a wrong object.)
pub(crate) fn insert<T: Held>(call: &'static str, epoch: u64, x: T) -> Res<u64> {
    TABLE
        .insert(T::KIND as u8, epoch, Arc::new(x))
        .map_err(|why| refused(call, why))
}

/// Keeps `x` in the current epoch (a handle lent to a callback for its duration).
pub(crate) fn insert_now<T: Held>(x: T) -> Res<u64> {
    insert("offload handle table", TABLE.epoch(), x)
}

/// Keeps a runtime reference (a new C reference, L1) and gives its handle.
pub(crate) fn insert_runtime(call: &'static str, rt: Offload) -> Res<u64> {
    let mut locked = TABLE.lock();
    let epoch = locked.epoch();
    let kept = locked.insert(Kind::Runtime as u8, epoch, Arc::new(rt));
    if kept.is_ok() {
        locked.extra().runtimes += 1;
    }
    drop(locked);
    // Outside the lock: this reference's drop may be a shutdown (L1, L6).
    kept.map_err(|(why, _back)| refused(call, why))
}

/// The handle of `device` (of a runtime of epoch `epoch`): the same one for the same device
/// all through the epoch, made on first use.
pub(crate) fn device_handle(call: &'static str, epoch: u64, device: Device) -> Res<u64> {
    let at = (device.backend(), device.index());
    let mut locked = TABLE.lock();
    if let Some(&(_, _, h)) = locked
        .extra()
        .devices
        .iter()
        .find(|(b, i, _)| (*b, *i) == at)
        && same_epoch(epoch_of(h), epoch)
    {
        return Ok(h);
    }
    let kept = locked.insert(Kind::Device as u8, epoch, Arc::new(device));
    if let Ok(h) = kept {
        locked.extra().devices.push((at.0, at.1, h));
    }
    drop(locked);
    kept.map_err(|(why, _back)| refused(call, why))
}

/// Remembers `handles`, the full device list of epoch `epoch`, for [`listed`].
pub(crate) fn remember_list(epoch: u64, handles: &[u64]) {
    let mut locked = TABLE.lock();
    if same_epoch(locked.epoch(), epoch) {
        locked.extra().listed = handles.to_vec();
    }
}

/// The full device list of the runtime `runtime` if one was made in its epoch: copies the
/// first `out.len()` handles into `out` and gives the number of devices.
pub(crate) fn listed(runtime: u64, out: &mut [std::mem::MaybeUninit<u64>]) -> Option<usize> {
    check::<Offload>("", runtime).ok()?;
    let mut locked = TABLE.lock();
    if !same_epoch(locked.epoch(), epoch_of(runtime)) || locked.extra().listed.is_empty() {
        return None;
    }
    let listed = &locked.extra().listed;
    for (o, h) in out.iter_mut().zip(listed) {
        o.write(*h);
    }
    Some(listed.len())
}

/// What [`remove`] gives: the object, or, while a call of another thread still uses it,
/// a hold on it (the object goes when the last such call returns).
pub(crate) use offload_handles::Taken as Removed;

/// Takes the `T` that `handle` names out of the table (its handle is dead from now on).
pub(crate) fn remove<T: Held>(call: &'static str, handle: u64) -> Res<Removed<T>> {
    TABLE
        .take_as::<T>(T::KIND as u8, handle)
        .ok_or_else(|| refuse(call, T::KIND, handle))
}

/// Takes the runtime reference `handle` names out of the table. When it was the last one
/// C held, every object of the table comes with it (the epoch ends, so all their handles
/// answer `ShutDown` from now on); the caller drops them after shutting the runtime down.
/// Objects a call of another thread still uses go when that call returns.
pub(crate) fn remove_runtime(
    call: &'static str,
    handle: u64,
) -> Res<(Removed<Offload>, Vec<Arc<Object>>)> {
    let mut locked = TABLE.lock();
    let Some(taken) = locked.take(Kind::Runtime as u8, handle) else {
        drop(locked);
        return Err(refuse(call, Kind::Runtime, handle));
    };
    let books = locked.extra();
    books.runtimes = books.runtimes.saturating_sub(1);
    let orphans = if books.runtimes == 0 {
        books.devices = Vec::new();
        books.listed = Vec::new();
        locked.end_epoch()
    } else {
        Vec::new()
    };
    drop(locked);
    // Only runtimes carry the runtime tag.
    let rt = match taken.downcast::<Offload>() {
        Ok(rt) => match Arc::try_unwrap(rt) {
            Ok(rt) => Removed::Owned(rt),
            Err(held) => Removed::InUse(held),
        },
        Err(_) => return Err(refuse(call, Kind::Runtime, handle)),
    };
    Ok((rt, orphans))
}

/// Live objects in the table (for tests and leak checks).
pub(crate) fn live() -> usize {
    TABLE.live()
}
