//! The handle table: every object a C caller holds lives here, and C sees only an opaque
//! 64-bit handle naming its slot — never a pointer, so no handle can dangle (L9).
//!
//! A handle's bits, high to low:
//!
//! | bits | field | why |
//! |---|---|---|
//! | 63–56 | type tag (`0xA1`…) | a handle of another type, or garbage, is refused by type |
//! | 55–50 | table epoch, modulo 64 | a handle of a runtime that was shut down answers `OFFLOAD_ERROR_SHUT_DOWN` (rather than "released") |
//! | 49–32 | slot index (18 bits: [`SLOTS`]) | where the object is |
//! | 31–0 | slot generation (32 bits, never 0) | a released slot's old handles are refused once it is reused |
//!
//! Zero is never a handle (the tag is never 0).
//!
//! # No handle aliases (L9)
//!
//! A slot's generation goes up by one with every object put in it, and a slot whose
//! generation reached [`LAST_GENERATION`] is retired when that object goes: it never goes
//! back on the free list. So two objects never share a (slot, generation), and a released
//! or stale handle is refused for the life of the process however often slots are reused
//! (2^32 − 1 objects per slot, 2^18 slots). Which object a handle names never depends on
//! the epoch bits: they only choose the words of the refusal (a handle 64 or more
//! shutdowns old reads "released" instead of "shut down").
//!
//! # Standard locks only
//!
//! Each slot is a `std::sync::Mutex` in one static array (const-initialised: it costs
//! address space, and memory only for the pages that held objects; `dlclose` unmaps it
//! with the library, L2). A call looks its handle up under that slot's lock and takes an
//! `Arc` of the object, so a release never frees an object under a call that uses it: the
//! object goes with the last `Arc`, when that call returns — also when a callback releases
//! the handle of the call it runs in (L6). No lock is held while offload runs. The free
//! list, the high-water mark, the epoch, the runtime count and the device handles live
//! under one more mutex ([`STATE`]), taken by inserts and removes, always before a slot's
//! (never the other way round). The last runtime reference's shutdown moves the epoch on
//! and sweeps every slot under that lock: an insert either came before (and is swept) or
//! sees the new epoch and refuses — no fence argument needed.
//!
//! Device handles are made once per device and epoch and belong to the runtime, as
//! liboffload's do: listing devices again gives the same handles.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use offload::{BackendKind, Buffer, Device, Event, Kernel, Module, Offload, Queue};

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

/// An object held for C: any of the types that implement [`Held`], erased, so that the
/// table names none of the API's own types (each API file says which of its types C may
/// hold, with the tag its handles carry) and is shared without a copy per call. One
/// allocation per object, as a handle's `Arc` needs anyway.
pub(crate) type Object = dyn Any + Send + Sync;

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

/// How many objects C can hold at once (over every type).
pub(crate) const SLOTS: usize = 1 << INDEX_BITS;

const INDEX_BITS: u32 = 18;
const EPOCH_BITS: u32 = 6;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const EPOCH_MASK: u64 = (1 << EPOCH_BITS) - 1;

/// The last generation a slot's object can have: the slot retires when that object goes.
pub(crate) const LAST_GENERATION: u32 = u32::MAX;

/// One slot: its object, if any, and the generation of the last object put in it.
struct Slot {
    /// 0 before the first object; never goes down.
    generation: u32,
    object: Option<Arc<Object>>,
    /// The next free slot's index + 1 (0: none), while this one is on the free list.
    next_free: u32,
}

// Zero-initialised, so it lives in .bss: no file space, and memory only where touched.
static TABLE: [Mutex<Slot>; SLOTS] = [const {
    Mutex::new(Slot {
        generation: 0,
        object: None,
        next_free: 0,
    })
}; SLOTS];

/// What inserts and removes share (taken before any slot's lock).
struct State {
    /// The first free slot's index + 1 (0: none).
    free: u32,
    /// Slots below this were taken at some time.
    high: usize,
    /// The current epoch (its low [`EPOCH_BITS`] go into handles).
    epoch: u64,
    /// Runtime references C holds in this epoch.
    runtimes: usize,
    /// The device handles of this epoch: (backend, index, handle).
    devices: Vec<(BackendKind, u32, u64)>,
    /// The last full device list of this epoch (`offload_devices`).
    listed: Vec<u64>,
    /// Slots retired for good (their generation ran out).
    retired: usize,
}

// Const-initialised: a fresh table whenever the library is loaded again (L2).
static STATE: Mutex<State> = Mutex::new(State {
    free: 0,
    high: 0,
    epoch: 1,
    runtimes: 0,
    devices: Vec::new(),
    listed: Vec::new(),
    retired: 0,
});

/// The current epoch, for the refusal's words without a lock (written under [`STATE`]).
static EPOCH: AtomicU64 = AtomicU64::new(1);

fn state() -> MutexGuard<'static, State> {
    // Nothing panics under the lock; stay usable if something ever did.
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn slot(index: usize) -> MutexGuard<'static, Slot> {
    TABLE[index].lock().unwrap_or_else(PoisonError::into_inner)
}

fn tag_of(handle: u64) -> u8 {
    (handle >> 56) as u8
}

/// The epoch `handle` was made in (modulo 64), to pass to [`insert`] for objects made from
/// it.
pub(crate) fn epoch_of(handle: u64) -> u64 {
    (handle >> 50) & EPOCH_MASK
}

fn index_of(handle: u64) -> usize {
    ((handle >> 32) & INDEX_MASK) as usize
}

fn generation_of(handle: u64) -> u32 {
    handle as u32
}

fn join(kind: Kind, epoch: u64, index: usize, generation: u32) -> u64 {
    (kind as u64) << 56 | (epoch & EPOCH_MASK) << 50 | (index as u64) << 32 | u64::from(generation)
}

/// Why `handle` names no live `want`, in words for `call`.
#[cold]
#[inline(never)]
fn refuse(call: &'static str, want: Kind, handle: u64) -> Fail {
    let noun = want.noun();
    if handle == 0 {
        return Fail::Handle(format!("{call}: the {noun} handle is 0 (no {noun})"));
    }
    let Some(kind) = Kind::ALL.iter().find(|k| **k as u8 == tag_of(handle)) else {
        return Fail::Handle(format!(
            "{call}: {handle:#018x} is not an offload handle (garbage or uninitialised)"
        ));
    };
    if *kind != want {
        return Fail::Handle(format!(
            "{call}: {handle:#018x} is a {} handle, not a {noun} handle",
            kind.noun()
        ));
    }
    if epoch_of(handle) != EPOCH.load(Ordering::Relaxed) & EPOCH_MASK {
        return Fail::Offload(offload::Error::ShutDown {
            call,
            object: format!("{noun} handle {handle:#018x}"),
            caller: offload::Caller::C,
        });
    }
    Fail::Handle(format!(
        "{call}: {noun} handle {handle:#018x} names no live {noun}: it was released, or never \
         made"
    ))
}

fn shut_down(call: &'static str) -> Fail {
    Fail::Offload(offload::Error::ShutDown {
        call,
        object: String::new(),
        caller: offload::Caller::C,
    })
}

/// A live `T` held for the length of one call: an `Arc` of its object, so a release
/// meanwhile does not free it under the call.
pub(crate) struct Pinned<T: Held> {
    object: Arc<T>,
}

impl<T: Held> std::ops::Deref for Pinned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.object
    }
}

impl<T: Held> Pinned<T> {
    /// `object` as a `T`, if it is one.
    fn of(object: Arc<Object>) -> Option<Self> {
        object.downcast::<T>().ok().map(|object| Pinned { object })
    }
}

/// The object in slot `index` if its generation is `generation`.
fn lookup(index: usize, generation: u32) -> Option<Arc<Object>> {
    let slot = slot(index);
    if slot.generation != generation {
        return None;
    }
    slot.object.clone()
}

/// The object `handle` names, if it is a live `T`, held for the call.
#[inline]
pub(crate) fn get<T: Held>(call: &'static str, handle: u64) -> Res<Pinned<T>> {
    if tag_of(handle) == T::KIND as u8
        && let Some(object) = lookup(index_of(handle), generation_of(handle))
        && let Some(pinned) = Pinned::of(object)
    {
        return Ok(pinned);
    }
    Err(refuse(call, T::KIND, handle))
}

/// Whether slot `index` holds an object of generation `generation` (no `Arc` taken).
fn is_live(index: usize, generation: u32) -> bool {
    let slot = slot(index);
    slot.generation == generation && slot.object.is_some()
}

/// Whether `handle` names a live `T` right now.
pub(crate) fn check<T: Held>(call: &'static str, handle: u64) -> Res {
    match tag_of(handle) == T::KIND as u8 && is_live(index_of(handle), generation_of(handle)) {
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
    let object: Arc<Object> = Arc::new(x);
    let mut state = state();
    let kept = insert_locked(&mut state, call, epoch, T::KIND, object);
    drop(state);
    // What was not kept is dropped outside the lock (a drop may run user code, L6).
    kept.map_err(|(fail, _dropped_here)| fail)
}

/// [`insert`] under the state's lock; gives back what it did not keep.
#[allow(clippy::result_large_err)]
fn insert_locked(
    state: &mut State,
    call: &'static str,
    epoch: u64,
    kind: Kind,
    object: Arc<Object>,
) -> Result<u64, (Fail, Arc<Object>)> {
    if state.epoch & EPOCH_MASK != epoch & EPOCH_MASK {
        return Err((shut_down(call), object));
    }
    let index = if state.free != 0 {
        let index = (state.free - 1) as usize;
        state.free = slot(index).next_free;
        index
    } else if state.high < SLOTS {
        state.high += 1;
        state.high - 1
    } else {
        let fail = Fail::Offload(offload::Error::InvalidArgument {
            call: "offload handle table",
            reason: format!(
                "more than {SLOTS} live objects ({} slots retired for good after 2^32 objects \
                 each)",
                state.retired
            ),
        });
        return Err((fail, object));
    };
    let mut slot = slot(index);
    // Never `LAST_GENERATION` + 1: a slot whose generation ran out is never on the list.
    slot.generation += 1;
    slot.object = Some(object);
    slot.next_free = 0;
    Ok(join(kind, state.epoch, index, slot.generation))
}

/// Takes the object out of slot `index` if it holds generation `generation`, and puts the
/// slot back on the free list — or retires it, if its generation ran out.
fn take_locked(state: &mut State, index: usize, generation: u32) -> Option<Arc<Object>> {
    let mut slot = slot(index);
    if slot.generation != generation {
        return None;
    }
    let object = slot.object.take()?;
    give_slot(state, index, &mut slot);
    Some(object)
}

/// Puts the emptied `slot` (at `index`) on the free list, or retires it for good.
fn give_slot(state: &mut State, index: usize, slot: &mut Slot) {
    if slot.generation == LAST_GENERATION {
        state.retired += 1;
        return;
    }
    slot.next_free = state.free;
    state.free = index as u32 + 1;
}

/// Keeps `x` in the current epoch (a handle lent to a callback for its duration).
pub(crate) fn insert_now<T: Held>(x: T) -> Res<u64> {
    let epoch = state().epoch;
    insert("offload handle table", epoch, x)
}

/// Keeps a runtime reference (a new C reference, L1) and gives its handle.
pub(crate) fn insert_runtime(call: &'static str, rt: Offload) -> Res<u64> {
    let object: Arc<Object> = Arc::new(rt);
    let mut state = state();
    let epoch = state.epoch;
    let kept = insert_locked(&mut state, call, epoch, Kind::Runtime, object);
    if kept.is_ok() {
        state.runtimes += 1;
    }
    drop(state);
    // Outside the lock: this reference's drop may be a shutdown (L1, L6).
    kept.map_err(|(fail, _back)| fail)
}

/// The handle of `device` (of a runtime of epoch `epoch`): the same one for the same device
/// all through the epoch, made on first use.
pub(crate) fn device_handle(call: &'static str, epoch: u64, device: Device) -> Res<u64> {
    let at = (device.backend(), device.index());
    let mut state = state();
    if let Some(&(_, _, h)) = state.devices.iter().find(|(b, i, _)| (*b, *i) == at)
        && epoch_of(h) == epoch & EPOCH_MASK
    {
        return Ok(h);
    }
    let object: Arc<Object> = Arc::new(device);
    let kept = insert_locked(&mut state, call, epoch, Kind::Device, object);
    if let Ok(h) = kept {
        state.devices.push((at.0, at.1, h));
    }
    drop(state);
    kept.map_err(|(fail, _back)| fail)
}

/// Remembers `handles`, the full device list of epoch `epoch`, for [`listed`].
pub(crate) fn remember_list(epoch: u64, handles: &[u64]) {
    let mut state = state();
    if state.epoch & EPOCH_MASK == epoch & EPOCH_MASK {
        state.listed = handles.to_vec();
    }
}

/// The full device list of the runtime `runtime` if one was made in its epoch: copies the
/// first `out.len()` handles into `out` and gives the number of devices.
pub(crate) fn listed(runtime: u64, out: &mut [std::mem::MaybeUninit<u64>]) -> Option<usize> {
    check::<Offload>("", runtime).ok()?;
    let state = state();
    if state.epoch & EPOCH_MASK != epoch_of(runtime) || state.listed.is_empty() {
        return None;
    }
    for (o, h) in out.iter_mut().zip(&state.listed) {
        o.write(*h);
    }
    Some(state.listed.len())
}

/// What [`remove`] gives: the object, or, while a call of another thread still uses it,
/// a hold on it (the object goes when the last such call returns).
pub(crate) enum Removed<T: Held> {
    Owned(T),
    InUse(Pinned<T>),
}

impl<T: Held> Removed<T> {
    fn of(object: Arc<Object>) -> Option<Self> {
        let object = object.downcast::<T>().ok()?;
        Some(match Arc::try_unwrap(object) {
            Ok(value) => Removed::Owned(value),
            Err(object) => Removed::InUse(Pinned { object }),
        })
    }
}

/// Takes the `T` that `handle` names out of the table (its handle is dead from now on).
pub(crate) fn remove<T: Held>(call: &'static str, handle: u64) -> Res<Removed<T>> {
    if tag_of(handle) == T::KIND as u8 {
        let taken = take_locked(&mut state(), index_of(handle), generation_of(handle));
        if let Some(removed) = taken.and_then(Removed::of) {
            return Ok(removed);
        }
    }
    Err(refuse(call, T::KIND, handle))
}

/// Takes the runtime reference `handle` names out of the table. When it was the last one
/// C held, every object of the table comes with it (the epoch advances, so all their
/// handles answer `ShutDown` from now on); the caller drops them after shutting the runtime
/// down. Objects a call of another thread still uses go when that call returns.
pub(crate) fn remove_runtime(
    call: &'static str,
    handle: u64,
) -> Res<(Removed<Offload>, Vec<Arc<Object>>)> {
    let mut state = state();
    let taken = if tag_of(handle) == Kind::Runtime as u8 {
        take_locked(&mut state, index_of(handle), generation_of(handle))
    } else {
        None
    };
    let Some(rt) = taken.and_then(Removed::of) else {
        drop(state);
        return Err(refuse(call, Kind::Runtime, handle));
    };
    state.runtimes = state.runtimes.saturating_sub(1);
    if state.runtimes != 0 {
        return Ok((rt, Vec::new()));
    }
    state.epoch += 1;
    EPOCH.store(state.epoch, Ordering::Relaxed);
    state.devices = Vec::new();
    state.listed = Vec::new();
    let mut orphans = Vec::new();
    for index in 0..state.high {
        let mut slot = slot(index);
        if let Some(object) = slot.object.take() {
            give_slot(&mut state, index, &mut slot);
            orphans.push(object);
        }
    }
    Ok((rt, orphans))
}

/// Live objects in the table (for tests and leak checks).
pub(crate) fn live() -> usize {
    let high = state().high;
    (0..high).filter(|&i| slot(i).object.is_some()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` with the table to itself (the tests of this crate share the process).
    fn alone<R>(f: impl FnOnce() -> R) -> R {
        let _alone = offload_testing::serial();
        f()
    }

    /// An object of the table's own tests, held with program handles' tag.
    struct Probe;

    impl Held for Probe {
        const KIND: Kind = Kind::Program;
    }

    fn a_program() -> Probe {
        Probe
    }

    #[test]
    fn a_slot_whose_generation_runs_out_retires_and_its_handles_stay_dead() {
        alone(|| {
            let epoch = state().epoch;
            let h = insert("test", epoch, a_program()).unwrap();
            let index = index_of(h);
            // The slot's next object gets the last generation there is.
            let Removed::Owned(_) = remove::<Probe>("test", h).unwrap() else {
                panic!("in use")
            };
            slot(index).generation = LAST_GENERATION - 1;
            let mut handles = vec![h];
            let last = loop {
                let h = insert("test", epoch, a_program()).unwrap();
                handles.push(h);
                if index_of(h) == index {
                    break h;
                }
            };
            assert_eq!(generation_of(last), LAST_GENERATION);
            for &h in &handles {
                drop(remove::<Probe>("test", h));
            }
            let retired = state().retired;
            assert!(retired >= 1);
            // The slot is never handed out again; every handle made on it stays refused.
            let fresh: Vec<u64> = (0..64)
                .map(|_| insert("test", epoch, a_program()).unwrap())
                .collect();
            assert!(fresh.iter().all(|&h| index_of(h) != index));
            for &h in &handles {
                assert!(get::<Probe>("test", h).is_err());
                assert!(fresh.iter().all(|&f| f != h));
            }
            for h in fresh {
                drop(remove::<Probe>("test", h));
            }
        });
    }

    #[test]
    fn a_reused_slot_refuses_its_old_handles() {
        alone(|| {
            let epoch = state().epoch;
            let old = insert("test", epoch, a_program()).unwrap();
            drop(remove::<Probe>("test", old));
            for _ in 0..10_000 {
                let h = insert("test", epoch, a_program()).unwrap();
                assert_ne!(h, old);
                assert!(get::<Probe>("test", old).is_err());
                assert!(get::<Probe>("test", h).is_ok());
                drop(remove::<Probe>("test", h));
            }
        });
    }
}
