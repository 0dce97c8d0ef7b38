//! The handle table: every object a C caller holds lives here, and C sees only an opaque
//! 64-bit handle naming its slot — never a pointer, so no handle can dangle.
//!
//! A handle's bits, high to low:
//!
//! | bits | field | why |
//! |---|---|---|
//! | 63–56 | type tag (`0xA1`…) | a handle of another type, or garbage, is refused by type |
//! | 55–36 | table epoch (20 bits) | every handle of a runtime that was shut down answers `OFFLOAD_ERROR_SHUT_DOWN` |
//! | 35–16 | slot index (20 bits; [`SLOTS`] are used) | where the object is |
//! | 15–0 | slot generation (16 bits, never 0) | a released slot's old handles are refused once it is reused |
//!
//! Zero is never a handle (the tag is never 0). The epoch advances whenever the last C
//! runtime reference is shut down: that shutdown takes every object out of the table (so
//! nothing is leaked, not even at `dlclose`, L2) and drops them after the runtime's own
//! shutdown released their backend objects in order (L4). A handle that happens to match a
//! live slot by chance (garbage hitting tag, epoch, index and generation) names a live
//! object of the right type: a wrong answer, never undefined behaviour.
//!
//! # No lock on the way
//!
//! The slots are one static array (zero-initialised: it costs address space, and memory
//! only for the pages that held objects; `dlclose` unmaps it with the library), and the
//! objects live in them (no allocation per handle). Each slot has one atomic state word:
//! the tag, epoch and generation of the handle that names it, a *live* bit, and a count of
//! *pins*. A call pins each handle it uses — one compare-and-swap that succeeds only while
//! the word still names that live handle — and unpins it when it returns, so a lookup costs
//! two atomic operations and neither a lock nor a reference-count pair (none at all on the
//! slot's owner thread, below). Releasing a handle clears the live bit (no new pin can
//! start) and the object goes with the last pin: whoever sees the count reach zero with the
//! live bit clear moves the object out, puts the slot back on the free list and drops the
//! object, holding no lock (a drop may run user code, L6). So a thread that releases a
//! handle another thread is using never frees it under that thread, and a callback that
//! releases the handle of the call it runs in defers the drop to that call's return instead
//! of deadlocking.
//!
//! A slot is also *biased* to the thread that first put an object in it (its owner, for
//! good), where the kernel allows the `membarrier` registration (elsewhere no slot has an
//! owner, and every pin is a read-modify-write): the owner pins with plain stores into the
//! slot's `fast` count, a compiler fence and a look at the state word, no read-modify-write
//! (`offload-thread`'s biased-lock primitives). A release publishes that the handle is dead
//! and, if the slot has an owner other than the releasing thread (or the owner is inside a
//! call on it), also a pin kept for the owner (`OWNER`); it then runs `revoke_fence` (a
//! process-wide `membarrier`), so either it sees the owner's pins or the owner's next look
//! sees the release. If the owner holds none the releaser gives that pin back; otherwise
//! the owner's last unpin does (both may try: clearing `OWNER` decides who). The owner
//! never changes, so a thread that pins a slot with a stale handle can only write its own
//! count, never another owner's.
//!
//! Free slots form a lock-free stack (its head counts its changes, so a slot taken and
//! given back between a reader's look and its swap cannot fool the swap), linked through
//! the free slots' state words. Only `init`, `shutdown` and a device's first handle take a
//! lock (the runtime count, the epoch and the device handles). The last shutdown moves the
//! epoch on and then sweeps the table; an insert publishes its slot and then reads the
//! epoch again (`publish_fence` between: a compiler fence where the shutdown runs a
//! `membarrier` between its two steps, a full fence where it cannot), so an object made
//! from a runtime while its last reference goes is either swept or taken back by its maker
//! — never left behind.
//!
//! Device handles are made once per device and epoch and belong to the runtime, as
//! liboffload's do: listing devices again gives the same handles, from a lock-free copy
//! (a sequence word) once a full list was made.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

use offload_thread::biased::{owner_fence, prepare, publish_fence, revoke_fence, thread_token};
use std::sync::{Mutex, MutexGuard};

use crate::ipc::Endpoint;
use crate::program::ProgramCell;
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

/// An object held for C, by value (no allocation per handle); the kernel, the one large
/// object, boxed so that a slot stays small.
pub(crate) enum Object {
    Runtime(Offload),
    Device(Device),
    Buffer(Buffer),
    Program(ProgramCell),
    Module(Module),
    Kernel(Box<Kernel>),
    Queue(Queue),
    Event(Event),
    Endpoint(Endpoint),
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::Runtime(_) => Kind::Runtime,
            Object::Device(_) => Kind::Device,
            Object::Buffer(_) => Kind::Buffer,
            Object::Program(_) => Kind::Program,
            Object::Module(_) => Kind::Module,
            Object::Kernel(_) => Kind::Kernel,
            Object::Queue(_) => Kind::Queue,
            Object::Event(_) => Kind::Event,
            Object::Endpoint(_) => Kind::Endpoint,
        }
    }
}

/// Typed access to one [`Object`] variant.
pub(crate) trait Held: Sized {
    const KIND: Kind;
    fn wrap(this: Self) -> Object;
    fn peek(object: &Object) -> Option<&Self>;
    fn unwrap(object: Object) -> Option<Self>;
}

macro_rules! held {
    ($($ty:ty => $variant:ident $(($boxed:tt))?),* $(,)?) => {$(
        impl Held for $ty {
            const KIND: Kind = Kind::$variant;
            fn wrap(this: Self) -> Object {
                Object::$variant(held!(@wrap this $($boxed)?))
            }
            fn peek(object: &Object) -> Option<&Self> {
                match object {
                    Object::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn unwrap(object: Object) -> Option<Self> {
                match object {
                    Object::$variant(x) => Some(held!(@unwrap x $($boxed)?)),
                    _ => None,
                }
            }
        }
    )*};
    (@wrap $x:ident) => { $x };
    (@wrap $x:ident boxed) => { Box::new($x) };
    (@unwrap $x:ident) => { $x };
    (@unwrap $x:ident boxed) => { *$x };
}

held!(
    Offload => Runtime,
    Device => Device,
    Buffer => Buffer,
    ProgramCell => Program,
    Module => Module,
    Kernel => Kernel(boxed),
    Queue => Queue,
    Event => Event,
    Endpoint => Endpoint,
);

/// How many objects C can hold at once (over every type).
pub(crate) const SLOTS: usize = 1 << 18;

const EPOCH_BITS: u32 = 20;
const INDEX_BITS: u32 = 20;
const EPOCH_MASK: u64 = (1 << EPOCH_BITS) - 1;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

// A slot's state word: the handle's tag and epoch (bits 63–36), its generation (35–20),
// the live bit (19), the owner's bit (18: one of the pins is the owner's, see `retract`)
// and the pins (17–0). A free slot's word keeps only its last generation and, in bits
// 18–0, the next free slot's index + 1 (0: none).
const GEN_SHIFT: u32 = 20;
const LIVE: u64 = 1 << 19;
const OWNER: u64 = 1 << 18;
const PINS: u64 = OWNER - 1;
const LINK: u64 = LIVE - 1;
const TAG_EPOCH: u64 = !0 << 36;
const GENERATION: u64 = 0xffff << GEN_SHIFT;
const IDENT: u64 = !(LIVE | LINK);

/// Whether state word `s` holds a live object whose identity is `want` (one mask, one
/// compare: `want` has no bit below the generation's).
#[inline(always)]
fn names_live(s: u64, want: u64) -> bool {
    s & (IDENT | LIVE) == want | LIVE
}

struct Slot {
    state: AtomicU64,
    /// The thread the slot is biased to (`offload-thread`'s token; 0: none yet): set by the
    /// first insert into the slot and never changed, so a stale owner never writes `fast`
    /// under another.
    owner: AtomicU64,
    /// The owner's pins, taken and given back with plain stores (only the owner writes it).
    fast: AtomicU32,
    /// Initialised exactly while the state word has a tag (from insert until the last pin
    /// of a released slot moves it out).
    object: UnsafeCell<MaybeUninit<Object>>,
}

// SAFETY: `object` is written only by the thread that took a free slot off the free list,
// before the state word publishes it (SeqCst store), and read only by holders of a pin
// (taken by a compare-and-swap on that word, or the owner's `fast` pin, which a release
// sees through `revoke_fence` and keeps a pin for) or by the one thread that took the last
// pin of a released slot, which moves it out before the slot goes back on the free list;
// the objects are `Send + Sync`.
unsafe impl Sync for Slot {}

// Zero-initialised, so it lives in .bss: no file space, and memory only where touched.
static TABLE: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicU64::new(0),
        owner: AtomicU64::new(0),
        fast: AtomicU32::new(0),
        object: UnsafeCell::new(MaybeUninit::uninit()),
    }
}; SLOTS];

/// The free list's head: a count of its changes (high half, so a slot freed and taken
/// again between a reader's look and its swap cannot fool the swap) and the first free
/// slot's index + 1 (low half; 0: none).
static FREE: AtomicU64 = AtomicU64::new(0);
/// Slots below this were taken at some time.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// The current epoch.
static EPOCH: AtomicU64 = AtomicU64::new(1);

/// The runtime references C holds and the devices' handles, for this epoch: only `init`,
/// `shutdown` and a device's first handle take this lock.
struct Runtimes {
    count: usize,
    devices: Vec<(BackendKind, u32, u64)>,
}

// Const-initialised: a fresh table whenever the library is loaded again (L2).
static RUNTIMES: Mutex<Runtimes> = Mutex::new(Runtimes {
    count: 0,
    devices: Vec::new(),
});

/// The device handles of the last full list (`offload_devices`), copied out without a
/// lock; `LISTED_AT` says for which epoch and how many (a sequence word, written last).
const LISTED_MAX: usize = 64;
static LISTED: [AtomicU64; LISTED_MAX] = [const { AtomicU64::new(0) }; LISTED_MAX];
static LISTED_AT: AtomicU64 = AtomicU64::new(0);

fn runtimes() -> MutexGuard<'static, Runtimes> {
    // Nothing panics under the lock; stay usable if something ever did.
    RUNTIMES.lock().unwrap_or_else(|p| p.into_inner())
}

fn tag_of(handle: u64) -> u8 {
    (handle >> 56) as u8
}

/// The epoch `handle` was made in, to pass to [`insert`] for objects made from it.
pub(crate) fn epoch_of(handle: u64) -> u64 {
    (handle >> 36) & EPOCH_MASK
}

fn join(kind: Kind, epoch: u64, index: usize, generation: u16) -> u64 {
    (kind as u64) << 56 | epoch << 36 | (index as u64) << 16 | u64::from(generation)
}

/// The identity a slot's state word has while `handle` is live.
fn ident(handle: u64) -> u64 {
    (handle & TAG_EPOCH) | (handle & 0xffff) << GEN_SHIFT
}

/// The slot `handle` names, if `handle` is of type `want`, and the identity its state word
/// has while that handle is live.
fn locate(handle: u64, want: Kind) -> Option<(&'static Slot, u64)> {
    if tag_of(handle) != want as u8 {
        return None;
    }
    let slot = TABLE.get(((handle >> 16) & INDEX_MASK) as usize)?;
    Some((slot, ident(handle)))
}

fn index_of(slot: &'static Slot) -> usize {
    (slot as *const Slot as usize - TABLE.as_ptr() as usize) / size_of::<Slot>()
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
    let epoch = epoch_of(handle);
    if epoch != 0 && epoch < EPOCH.load(Ordering::SeqCst) {
        return Fail::Offload(offload::Error::ShutDown {
            call,
            object: format!("{noun} handle {handle:#018x}"),
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
    })
}

/// A live `T` held for the length of one call: its slot cannot be freed meanwhile.
pub(crate) struct Pinned<T: Held> {
    slot: &'static Slot,
    object: *const T,
    /// The owner's pin (`fast`), not one in the state word.
    fast: bool,
}

impl<T: Held> Deref for Pinned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the pin keeps the slot's object in place (nobody moves it out while a
        // pin is held), and `object` points into it.
        unsafe { &*self.object }
    }
}

impl<T: Held> Drop for Pinned<T> {
    #[inline(always)]
    fn drop(&mut self) {
        give_back(self.slot, self.fast);
    }
}

/// Gives back a pin: the owner's (`fast`) or one in the state word.
#[inline(always)]
fn give_back(slot: &'static Slot, fast: bool) {
    match fast {
        true => unpin_fast(slot),
        false => unpin(slot),
    }
}

/// The object of a pinned slot (pinned by its owner if `fast`), as a `T`.
#[inline(always)]
fn pinned<T: Held>(slot: &'static Slot, fast: bool) -> Option<Pinned<T>> {
    // SAFETY: pinned: the object is initialised and stays while the pin is held.
    let object = unsafe { (*slot.object.get()).assume_init_ref() };
    match T::peek(object) {
        Some(x) => Some(Pinned {
            slot,
            object: x as *const T,
            fast,
        }),
        None => {
            // (The tag names the variant: this cannot happen.)
            give_back(slot, fast);
            None
        }
    }
}

/// The owner's pin on the live handle whose identity is `want`: plain stores, no
/// read-modify-write. A release publishes that the handle is no longer live and then runs
/// `revoke_fence`, so either it sees this pin or this check sees the handle released.
#[inline(always)]
fn pin_fast(slot: &'static Slot, want: u64) -> bool {
    let n = slot.fast.load(Ordering::Relaxed);
    slot.fast.store(n + 1, Ordering::Relaxed);
    owner_fence();
    let s = slot.state.load(Ordering::Acquire);
    if names_live(s, want) {
        return true;
    }
    unpin_fast(slot);
    false
}

/// Gives an owner's pin back; the last one hands over the pin a release left for the owner
/// (`OWNER`), if there is one.
#[inline(always)]
fn unpin_fast(slot: &'static Slot) {
    let n = slot.fast.load(Ordering::Relaxed).saturating_sub(1);
    // Release: whoever takes the object out after seeing no owner's pin sees our reads done.
    slot.fast.store(n, Ordering::Release);
    if n == 0 {
        owner_fence();
        if slot.state.load(Ordering::Acquire) & OWNER != 0 {
            drop(retract(slot));
        }
    }
}

/// Gives back the pin a release left for the slot's owner (if it is still there: the owner
/// and the releaser may both try, and one wins); the last pin of a released slot frees it
/// and gives its object.
#[cold]
#[inline(never)]
fn retract(slot: &'static Slot) -> Option<Object> {
    let mut s = slot.state.load(Ordering::Acquire);
    while s & OWNER != 0 {
        match slot.state.compare_exchange_weak(
            s,
            (s & !OWNER) - 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) if s & LIVE == 0 && s & PINS == 1 => {
                return Some(take_out(slot, (s & !OWNER) - 1));
            }
            Ok(_) => return None,
            Err(now) => s = now,
        }
    }
    None
}

/// After a release of a slot that has an owner (`OWNER` set, with a pin for it): if the
/// owner holds no pin, gives that pin back at once; otherwise the owner's last unpin does.
/// `fenced`: `revoke_fence` already ran after the release.
fn settle_owner(slot: &'static Slot, fenced: bool) {
    if slot.owner.load(Ordering::Relaxed) != thread_token() && !fenced {
        revoke_fence();
    }
    // The releaser still holds its own pin, so this is never the last one.
    if slot.fast.load(Ordering::Acquire) == 0 {
        drop(retract(slot));
    }
}

/// Takes a pin on the live handle whose identity is `want`.
#[inline(never)]
fn pin(slot: &'static Slot, want: u64) -> bool {
    let mut s = slot.state.load(Ordering::Acquire);
    loop {
        if s & IDENT != want || s & LIVE == 0 || s & PINS == PINS {
            return false;
        }
        match slot
            .state
            .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(now) => s = now,
        }
    }
}

/// Gives a pin back; the last pin of a released slot frees it and drops its object.
#[inline(never)]
fn unpin(slot: &'static Slot) {
    let before = slot.state.fetch_sub(1, Ordering::AcqRel);
    if before & LIVE == 0 && before & PINS == 1 {
        drop(take_out(slot, before - 1));
    }
}

/// Releases the live slot whose identity is `want` and pins it, in one step: nobody else
/// can pin it from then on. A slot with an owner gets a second pin, the owner's (`OWNER`),
/// which [`settle_owner`] resolves. Whether it got one.
fn release(slot: &'static Slot, want: u64) -> Option<bool> {
    let mut s = slot.state.load(Ordering::Acquire);
    // Read after the state word: a word naming `want` was published after its owner was
    // set (the acquire load sees both), and the owner never changes. The owner releasing
    // while it holds no pin of its own needs none kept for it: only it could take one, and
    // it is here.
    let owner = slot.owner.load(Ordering::Relaxed);
    let owned = owner != 0 && !(owner == thread_token() && slot.fast.load(Ordering::Relaxed) == 0);
    let extra = if owned { OWNER + 2 } else { 1 };
    while names_live(s, want) && s & PINS < PINS - 1 {
        // SeqCst: ordered before `revoke_fence` and the owner's pin count read after it.
        match slot.state.compare_exchange_weak(
            s,
            (s & !LIVE) + extra,
            Ordering::SeqCst,
            Ordering::Acquire,
        ) {
            Ok(_) => return Some(owned),
            Err(now) => s = now,
        }
    }
    None
}

/// Gives back the pin of a release; the last pin of the slot frees it and gives its object.
fn unpin_released(slot: &'static Slot) -> Option<Object> {
    let before = slot.state.fetch_sub(1, Ordering::AcqRel);
    (before & PINS == 1).then(|| take_out(slot, before - 1))
}

/// Releases the live slot whose identity is `want` and gives its object, where no call
/// holds it; where one does, the object goes when that call returns (`None` then, and
/// where the slot no longer names `want`).
fn evict(slot: &'static Slot, want: u64) -> Option<Object> {
    if release(slot, want)? {
        settle_owner(slot, false);
    }
    unpin_released(slot)
}

/// Moves the object out of a released slot whose last pin this thread holds (`state`, its
/// word, without that pin) and puts the slot on the free list. The caller drops it.
fn take_out(slot: &'static Slot, state: u64) -> Object {
    // SAFETY: the word still has a tag, so the object is initialised; it is released (no
    // new pin) and this thread took its last pin, so nobody else reads it any more.
    let object = unsafe { (*slot.object.get()).assume_init_read() };
    push_free(slot, state & GENERATION);
    object
}

/// Puts `slot` (free, its word's generation `generation`) on the free list.
fn push_free(slot: &'static Slot, generation: u64) {
    let index = index_of(slot) as u64;
    let mut head = FREE.load(Ordering::Relaxed);
    loop {
        // No handle matches a word without a tag; the pins' bits link the list.
        slot.state
            .store(generation | (head & 0xffff_ffff), Ordering::Relaxed);
        let next = ((head >> 32) + 1) << 32 | (index + 1);
        match FREE.compare_exchange_weak(head, next, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => head = now,
        }
    }
}

/// A free slot: off the free list, or one never used.
fn take_free() -> Option<&'static Slot> {
    let mut head = FREE.load(Ordering::Acquire);
    while head & 0xffff_ffff != 0 {
        let slot = &TABLE[((head & 0xffff_ffff) - 1) as usize % SLOTS];
        // If another thread took this slot meanwhile, its word is no link, but the count
        // in the head changed too and the swap fails.
        let link = slot.state.load(Ordering::Relaxed) & LINK;
        let next = ((head >> 32) + 1) << 32 | link;
        match FREE.compare_exchange_weak(head, next, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => return Some(slot),
            Err(now) => head = now,
        }
    }
    let index = HIGH
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
            (h < SLOTS).then_some(h + 1)
        })
        .ok()?;
    Some(&TABLE[index])
}

/// The object `handle` names, if it is a live `T`, pinned for the call.
#[inline(always)]
pub(crate) fn get<T: Held>(call: &'static str, handle: u64) -> Res<Pinned<T>> {
    if let Some((slot, want)) = locate(handle, T::KIND) {
        let fast = slot.owner.load(Ordering::Relaxed) == thread_token();
        let pinned_now = match fast {
            true => pin_fast(slot, want),
            false => pin(slot, want),
        };
        if pinned_now {
            if let Some(p) = pinned(slot, fast) {
                return Ok(p);
            }
        }
    }
    Err(refuse(call, T::KIND, handle))
}

/// Whether `handle` names a live `T` right now (without pinning it).
pub(crate) fn check<T: Held>(call: &'static str, handle: u64) -> Res {
    match is_live(handle, T::KIND) {
        true => Ok(()),
        false => Err(refuse(call, T::KIND, handle)),
    }
}

/// Whether `handle` names a live object of kind `want` right now.
fn is_live(handle: u64, want: Kind) -> bool {
    locate(handle, want).is_some_and(|(slot, ident)| {
        let s = slot.state.load(Ordering::Acquire);
        names_live(s, ident)
    })
}

/// Keeps `x`, made from a parent of epoch `epoch`, and gives its handle. If the parent's
/// runtime was shut down meanwhile (the epoch moved on), `x` is dropped and the answer is
/// `ShutDown`.
pub(crate) fn insert<T: Held>(call: &'static str, epoch: u64, x: T) -> Res<u64> {
    try_insert(call, epoch, x).map_err(|(fail, _dropped_here)| fail)
}

/// [`insert`], giving back what it did not keep, for a caller that must drop it outside a
/// lock (a drop may run user code, L6). (The large error is the cold path's.)
#[allow(clippy::result_large_err)]
fn try_insert<T: Held>(
    call: &'static str,
    epoch: u64,
    x: T,
) -> Result<u64, (Fail, Option<Object>)> {
    if EPOCH.load(Ordering::SeqCst) != epoch {
        return Err((shut_down(call), Some(T::wrap(x))));
    }
    let object = T::wrap(x);
    let kind = object.kind();
    let Some(slot) = take_free() else {
        let fail = Fail::Offload(offload::Error::InvalidArgument {
            call: "offload handle table",
            reason: format!("more than {SLOTS} live objects"),
        });
        return Err((fail, Some(object)));
    };
    let old = slot.state.load(Ordering::Relaxed);
    let generation = ((old >> GEN_SHIFT) as u16).wrapping_add(1).max(1);
    // SAFETY: the slot is free (off the free list, or never used): no handle matches it,
    // nobody pins or reads it, and its old object was moved out.
    unsafe { (*slot.object.get()).write(object) };
    let handle = join(kind, epoch, index_of(slot), generation);
    if slot.owner.load(Ordering::Relaxed) == 0 && prepare() {
        // The slot's first object: the slot is biased to this thread for good (no other
        // thread has ever owned it, so none can be inside `pin_fast` on it).
        slot.owner.store(thread_token(), Ordering::Relaxed);
    }
    slot.state.store(ident(handle) | LIVE, Ordering::Release);
    // The last shutdown moves the epoch on, runs `revoke_fence`, then sweeps the table: if
    // it moved on before the store above, its sweep may have missed this slot, so take it
    // back; whoever releases it first has the object. (The fence pair orders this store
    // before the load below as a full fence would, without one here.)
    publish_fence();
    if EPOCH.load(Ordering::Relaxed) != epoch {
        return Err((shut_down(call), evict(slot, ident(handle))));
    }
    Ok(handle)
}

/// Keeps `x` in the current epoch (a handle lent to a callback for its duration).
pub(crate) fn insert_now<T: Held>(x: T) -> Res<u64> {
    insert("offload handle table", EPOCH.load(Ordering::SeqCst), x)
}

/// Keeps a runtime reference (a new C reference, L1) and gives its handle.
pub(crate) fn insert_runtime(call: &'static str, rt: Offload) -> Res<u64> {
    let mut r = runtimes();
    match try_insert(call, EPOCH.load(Ordering::SeqCst), rt) {
        Ok(h) => {
            r.count += 1;
            Ok(h)
        }
        Err((fail, back)) => {
            drop(r);
            // Outside the lock: this reference's drop may be a shutdown (L1, L6).
            drop(back);
            Err(fail)
        }
    }
}

/// The handle of `device` (of a runtime of epoch `epoch`): the same one for the same device
/// all through the epoch, made on first use.
pub(crate) fn device_handle(call: &'static str, epoch: u64, device: Device) -> Res<u64> {
    let at = (device.backend(), device.index());
    let mut r = runtimes();
    if let Some(&(_, _, h)) = r.devices.iter().find(|(b, i, _)| (*b, *i) == at) {
        if epoch_of(h) == epoch {
            return Ok(h);
        }
    }
    match try_insert(call, epoch, device) {
        Ok(h) => {
            r.devices.push((at.0, at.1, h));
            Ok(h)
        }
        Err((fail, back)) => {
            drop(r);
            drop(back);
            Err(fail)
        }
    }
}

/// Remembers `handles`, the full device list of epoch `epoch`, for [`listed`].
pub(crate) fn remember_list(epoch: u64, handles: &[u64]) {
    if handles.len() > LISTED_MAX {
        return;
    }
    let _r = runtimes();
    if EPOCH.load(Ordering::SeqCst) != epoch {
        return;
    }
    // A sequence lock: readers that saw the word before this store see it change.
    LISTED_AT.store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    for (slot, h) in LISTED.iter().zip(handles) {
        slot.store(*h, Ordering::Relaxed);
    }
    LISTED_AT.store(epoch << 32 | handles.len() as u64, Ordering::Release);
}

/// The full device list of the runtime `runtime` if one was made in its epoch: copies the
/// first `out.len()` handles into `out` and gives the number of devices. No lock, no pin:
/// `runtime` is checked live, and the caller's slow path runs if a new list was written
/// meanwhile.
pub(crate) fn listed(runtime: u64, out: &mut [MaybeUninit<u64>]) -> Option<usize> {
    if !is_live(runtime, Kind::Runtime) {
        return None;
    }
    let at = LISTED_AT.load(Ordering::Acquire);
    if at >> 32 != epoch_of(runtime) || at == 0 {
        return None;
    }
    let n = (at & 0xffff_ffff) as usize;
    for (o, slot) in out.iter_mut().zip(LISTED.iter().take(n)) {
        o.write(slot.load(Ordering::Relaxed));
    }
    fence(Ordering::Acquire);
    (LISTED_AT.load(Ordering::Relaxed) == at).then_some(n)
}

/// What [`remove`] gives: the object, or, while a call of another thread still uses it,
/// a pin on it (the object goes when the last such call returns).
pub(crate) enum Removed<T: Held> {
    Owned(T),
    InUse(Pinned<T>),
}

/// Takes the `T` that `handle` names out of the table (its handle is dead from now on).
pub(crate) fn remove<T: Held>(call: &'static str, handle: u64) -> Res<Removed<T>> {
    if let Some((slot, want)) = locate(handle, T::KIND) {
        if let Some(owned) = release(slot, want) {
            if owned {
                settle_owner(slot, false);
            }
            // Released: no pin can start, so a word with our pin alone stays as it is.
            let s = slot.state.load(Ordering::Acquire);
            if s & PINS == 1 {
                // The only pin: the object is ours.
                if let Some(x) = T::unwrap(take_out(slot, s - 1)) {
                    return Ok(Removed::Owned(x));
                }
            } else if let Some(p) = pinned(slot, false) {
                return Ok(Removed::InUse(p));
            }
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
) -> Res<(Removed<Offload>, Vec<Object>)> {
    let mut r = runtimes();
    let rt = remove::<Offload>(call, handle)?;
    r.count = r.count.saturating_sub(1);
    if r.count != 0 {
        return Ok((rt, Vec::new()));
    }
    let old = EPOCH.load(Ordering::SeqCst);
    EPOCH.store(
        if old >= EPOCH_MASK { 1 } else { old + 1 },
        Ordering::SeqCst,
    );
    r.devices = Vec::new();
    drop(r);
    // Pairs with the `publish_fence` between an insert's publication and its epoch check.
    revoke_fence();
    // Release every slot of the old epoch, then one fence for all of them, then settle each
    // owner's pin and give back ours; one in use by a call of another thread goes when
    // that call returns.
    let mut released = Vec::new();
    for slot in &TABLE[..HIGH.load(Ordering::SeqCst)] {
        let s = slot.state.load(Ordering::SeqCst);
        if s & LIVE == 0 || (s >> 36) & EPOCH_MASK != old {
            continue;
        }
        if let Some(owned) = release(slot, s & IDENT) {
            released.push((slot, owned));
        }
    }
    if released.iter().any(|&(_, owned)| owned) {
        revoke_fence();
    }
    let mut orphans = Vec::new();
    for (slot, owned) in released {
        if owned {
            settle_owner(slot, true);
        }
        orphans.extend(unpin_released(slot));
    }
    Ok((rt, orphans))
}

/// Live objects in the table (for tests and leak checks).
pub(crate) fn live() -> usize {
    TABLE[..HIGH.load(Ordering::SeqCst)]
        .iter()
        .filter(|s| s.state.load(Ordering::Acquire) & LIVE != 0)
        .count()
}
