//! # offload-handles
//!
//! The handle table of offload's C libraries (the C API, `liboffload_capi`, and the
//! liboffload-compatible `libLLVMOffload`): every object a C caller holds lives in a slot
//! of a [`Table`], and C sees only an opaque 64-bit handle naming the slot — never a
//! pointer, so no handle can dangle (L9). Each library has its own static table, with its
//! own type tags and words; the slots, generations, epochs and locks live here, once.
//!
//! A handle's bits, high to low:
//!
//! | bits | field | why |
//! |---|---|---|
//! | 63–56 | type tag (never 0) | a handle of another type, or garbage, is refused by type |
//! | 55–50 | epoch, modulo 64 | a handle of an epoch that ended can be told from a released one, for the refusal's words |
//! | 49–32 | slot index (18 bits: [`SLOTS`]) | where the object is |
//! | 31–0 | slot generation (never 0) | a released slot's old handles are refused once it is reused |
//!
//! Zero is never a handle. With a tag of 0x80 or more the handle is not a canonical
//! user-space address either, so a C caller that takes it for a pointer faults at once.
//!
//! # No handle aliases (L9)
//!
//! A slot's generation goes up by one with every object put in it, and a slot whose
//! generation reached [`LAST_GENERATION`] is retired when that object goes: it never goes
//! back on the free list. So two objects never share a (slot, generation), and a released
//! or stale handle is refused for the life of the process however often slots are reused
//! (2^32 − 1 objects per slot, 2^18 slots). Which object a handle names never depends on
//! its epoch bits: they only choose the words of a refusal ([`Why`]).
//!
//! # Standard locks only
//!
//! Each slot is a `std::sync::Mutex` in one array (a `static` table is const-initialised:
//! it costs address space, and memory only for the pages that held objects; `dlclose`
//! unmaps it with the library, L2). A lookup takes that slot's lock and clones an `Arc` of
//! the object, so a release never frees an object under a call that uses it: the object
//! goes with the last `Arc`, when that call returns (L6). No lock is held while the caller
//! runs offload. The free list, the high-water mark, the epoch and the library's own
//! bookkeeping (`X`) live under one more mutex, taken by inserts and removes, always
//! before a slot's (never the other way round). [`Locked::end_epoch`] moves the epoch on
//! and sweeps every slot under that lock: an insert either came before (and is swept) or
//! sees the new epoch and is refused.
//!
//! ```
//! use std::sync::Arc;
//! use offload_handles::{Table, Why};
//!
//! static TABLE: Table<()> = Table::new(());
//! const QUEUE: u8 = 0xC1;
//!
//! let epoch = TABLE.epoch();
//! let h = TABLE.insert(QUEUE, epoch, Arc::new(String::from("a queue"))).unwrap();
//! assert_eq!(*TABLE.get_as::<String>(QUEUE, h).unwrap(), "a queue");
//! assert!(TABLE.take(QUEUE, h).is_some());
//! // Released: refused for good, with the reason.
//! assert!(TABLE.get(QUEUE, h).is_none());
//! assert_eq!(TABLE.why(QUEUE, h), Why::Released);
//! assert_eq!(TABLE.why(0xC2, h), Why::OtherTag(QUEUE));
//! ```

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// An object held for C, erased: each library downcasts to its own types.
pub type Object = dyn Any + Send + Sync;

/// How many objects a table holds at once (over every type).
pub const SLOTS: usize = 1 << INDEX_BITS;

const INDEX_BITS: u32 = 18;
const EPOCH_BITS: u32 = 6;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const EPOCH_MASK: u64 = (1 << EPOCH_BITS) - 1;

/// The last generation a slot's object can have: the slot retires when that object goes.
pub const LAST_GENERATION: u32 = u32::MAX;

/// One slot: its object, if any, and the generation of the last object put in it.
struct Slot {
    /// 0 before the first object; never goes down.
    generation: u32,
    object: Option<Arc<Object>>,
    /// The next free slot's index + 1 (0: none), while this one is on the free list.
    next_free: u32,
}

/// What inserts and removes share (taken before any slot's lock).
struct State<X> {
    /// The first free slot's index + 1 (0: none).
    free: u32,
    /// Slots below this were taken at some time.
    high: usize,
    /// The current epoch (its low [`EPOCH_BITS`] go into handles).
    epoch: u64,
    /// Slots retired for good (their generation ran out).
    retired: usize,
    /// The library's own bookkeeping, changed atomically with inserts and removes.
    extra: X,
}

/// A handle table: [`SLOTS`] slots, each a standard mutex, and the state inserts and
/// removes share, with the library's own bookkeeping `X` under the same lock.
///
/// Made as a `static` (`Table::new` is `const`): zero-initialised, it lives in `.bss`.
pub struct Table<X> {
    slots: [Mutex<Slot>; SLOTS],
    state: Mutex<State<X>>,
    /// The current epoch, for a refusal's words without the state's lock (written under
    /// it).
    epoch: AtomicU64,
}

/// Why a handle names no live object of the asked-for tag ([`Table::why`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The handle is 0.
    Zero,
    /// The handle carries another tag (that of another type of the library's, or garbage:
    /// the library knows which tags are its own).
    OtherTag(u8),
    /// It was made in an epoch that has ended (modulo 64).
    EndedEpoch,
    /// Released (or never made).
    Released,
}

/// Why an insert kept nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The epoch the object was made in has ended.
    EndedEpoch,
    /// Every slot is taken (or retired); the count of retired slots.
    Full {
        /// Slots retired for good after 2^32 − 1 objects each.
        retired: usize,
    },
}

/// What [`Table::take_as`] gives: the object, or, while a call of another thread still
/// uses it, a hold on it (the object goes when the last such call returns).
pub enum Taken<T> {
    /// No one else holds it.
    Owned(T),
    /// A call of another thread still holds it.
    InUse(Arc<T>),
}

fn tag_of(handle: u64) -> u8 {
    (handle >> 56) as u8
}

/// The epoch a handle was made in (modulo 64): pass it to [`Table::insert`] for objects
/// made from the handle's object, so that they are refused if its epoch ended meanwhile.
///
/// ```
/// use std::sync::Arc;
/// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
/// let h = TABLE.insert(0xC1, TABLE.epoch(), Arc::new(1u8)).unwrap();
/// assert_eq!(offload_handles::epoch_of(h), TABLE.epoch() % 64);
/// ```
pub fn epoch_of(handle: u64) -> u64 {
    (handle >> 50) & EPOCH_MASK
}

fn index_of(handle: u64) -> usize {
    ((handle >> 32) & INDEX_MASK) as usize
}

fn generation_of(handle: u64) -> u32 {
    handle as u32
}

fn join(tag: u8, epoch: u64, index: usize, generation: u32) -> u64 {
    u64::from(tag) << 56 | (epoch & EPOCH_MASK) << 50 | (index as u64) << 32 | u64::from(generation)
}

fn same_epoch(a: u64, b: u64) -> bool {
    a & EPOCH_MASK == b & EPOCH_MASK
}

impl<X> Table<X> {
    /// An empty table in epoch 1, with the library's bookkeeping `extra`.
    ///
    /// ```
    /// static TABLE: offload_handles::Table<Vec<u64>> = offload_handles::Table::new(Vec::new());
    /// assert_eq!(TABLE.live(), 0);
    /// ```
    pub const fn new(extra: X) -> Table<X> {
        Table {
            slots: [const {
                Mutex::new(Slot {
                    generation: 0,
                    object: None,
                    next_free: 0,
                })
            }; SLOTS],
            state: Mutex::new(State {
                free: 0,
                high: 0,
                epoch: 1,
                retired: 0,
                extra,
            }),
            epoch: AtomicU64::new(1),
        }
    }

    fn slot(&self, index: usize) -> MutexGuard<'_, Slot> {
        // Nothing panics under a slot's lock; stay usable if something ever did.
        self.slots[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The table's state, for inserts and removes that change the library's bookkeeping
    /// with them, atomically.
    ///
    /// ```
    /// use std::sync::Arc;
    /// static TABLE: offload_handles::Table<usize> = offload_handles::Table::new(0);
    /// let mut locked = TABLE.lock();
    /// let epoch = locked.epoch();
    /// let h = locked.insert(0xC1, epoch, Arc::new(())).unwrap();
    /// *locked.extra() += 1;
    /// assert!(locked.take(0xC1, h).is_some());
    /// ```
    pub fn lock(&self) -> Locked<'_, X> {
        Locked {
            table: self,
            state: self.state.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// The current epoch.
    ///
    /// ```
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// assert_eq!(TABLE.epoch(), 1);
    /// ```
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// The object `handle` names, if it carries `tag` and is live.
    ///
    /// ```
    /// use std::sync::Arc;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// let h = TABLE.insert(0xC1, TABLE.epoch(), Arc::new(7u32)).unwrap();
    /// assert!(TABLE.get(0xC1, h).is_some());
    /// assert!(TABLE.get(0xC2, h).is_none());
    /// ```
    #[inline]
    pub fn get(&self, tag: u8, handle: u64) -> Option<Arc<Object>> {
        if tag_of(handle) != tag || tag == 0 {
            return None;
        }
        let slot = self.slot(index_of(handle));
        if slot.generation != generation_of(handle) {
            return None;
        }
        slot.object.clone()
    }

    /// The `T` `handle` names, if it carries `tag` and is a live `T`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// let h = TABLE.insert(0xC1, TABLE.epoch(), Arc::new(7u32)).unwrap();
    /// assert_eq!(*TABLE.get_as::<u32>(0xC1, h).unwrap(), 7);
    /// assert!(TABLE.get_as::<u64>(0xC1, h).is_none());
    /// ```
    #[inline]
    pub fn get_as<T: Any + Send + Sync>(&self, tag: u8, handle: u64) -> Option<Arc<T>> {
        self.get(tag, handle)?.downcast::<T>().ok()
    }

    /// Whether `handle` names a live object with `tag` right now (no `Arc` taken).
    ///
    /// ```
    /// use std::sync::Arc;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// let h = TABLE.insert(0xC1, TABLE.epoch(), Arc::new(())).unwrap();
    /// assert!(TABLE.is_live(0xC1, h));
    /// TABLE.take(0xC1, h);
    /// assert!(!TABLE.is_live(0xC1, h));
    /// ```
    pub fn is_live(&self, tag: u8, handle: u64) -> bool {
        if tag_of(handle) != tag || tag == 0 {
            return false;
        }
        let slot = self.slot(index_of(handle));
        slot.generation == generation_of(handle) && slot.object.is_some()
    }

    /// Why `handle` names no live object with `tag` (after a failed [`get`](Table::get)).
    ///
    /// ```
    /// use offload_handles::Why;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// assert_eq!(TABLE.why(0xC1, 0), Why::Zero);
    /// assert_eq!(TABLE.why(0xC1, 0x1234), Why::OtherTag(0));
    /// ```
    #[cold]
    pub fn why(&self, tag: u8, handle: u64) -> Why {
        if handle == 0 {
            Why::Zero
        } else if tag_of(handle) != tag {
            Why::OtherTag(tag_of(handle))
        } else if !same_epoch(epoch_of(handle), self.epoch()) {
            Why::EndedEpoch
        } else {
            Why::Released
        }
    }

    /// Keeps `object`, made in epoch `epoch` (that of the handle it was made from, or
    /// [`epoch`](Table::epoch)), and gives its handle, with tag `tag` (not 0). If `epoch`
    /// has ended meanwhile, nothing is kept: the object is dropped after the lock is let
    /// go (a drop may run user code, L6).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use offload_handles::Refused;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// let old = TABLE.epoch();
    /// TABLE.lock().end_epoch();
    /// assert_eq!(TABLE.insert(0xC1, old, Arc::new(())), Err(Refused::EndedEpoch));
    /// ```
    pub fn insert(&self, tag: u8, epoch: u64, object: Arc<Object>) -> Result<u64, Refused> {
        let mut locked = self.lock();
        let kept = locked.insert(tag, epoch, object);
        drop(locked);
        kept.map_err(|(why, _dropped_here)| why)
    }

    /// Takes the object `handle` names out of the table, if it carries `tag` and is live:
    /// the handle is dead from then on.
    ///
    /// ```
    /// use std::sync::Arc;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// let h = TABLE.insert(0xC1, TABLE.epoch(), Arc::new(())).unwrap();
    /// assert!(TABLE.take(0xC1, h).is_some());
    /// assert!(TABLE.take(0xC1, h).is_none());
    /// ```
    pub fn take(&self, tag: u8, handle: u64) -> Option<Arc<Object>> {
        self.lock().take(tag, handle)
    }

    /// [`take`](Table::take) of a `T`: the object itself when no call of another thread
    /// still holds it. A handle with the tag that names no `T` takes nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use offload_handles::Taken;
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// let h = TABLE.insert(0xC1, TABLE.epoch(), Arc::new(5u8)).unwrap();
    /// assert!(TABLE.take_as::<u16>(0xC1, h).is_none());
    /// assert!(matches!(TABLE.take_as::<u8>(0xC1, h), Some(Taken::Owned(5))));
    /// ```
    pub fn take_as<T: Any + Send + Sync>(&self, tag: u8, handle: u64) -> Option<Taken<T>> {
        let mut locked = self.lock();
        let object = locked.table.get(tag, handle)?;
        let typed = object.downcast::<T>().ok()?;
        locked.take(tag, handle)?;
        drop(locked);
        Some(match Arc::try_unwrap(typed) {
            Ok(value) => Taken::Owned(value),
            Err(held) => Taken::InUse(held),
        })
    }

    /// Live objects in the table (for tests and leak checks).
    ///
    /// ```
    /// static TABLE: offload_handles::Table<()> = offload_handles::Table::new(());
    /// assert_eq!(TABLE.live(), 0);
    /// ```
    pub fn live(&self) -> usize {
        let high = self.lock().state.high;
        (0..high).filter(|&i| self.slot(i).object.is_some()).count()
    }
}

/// The table's state, locked: inserts, removes and the library's bookkeeping, atomically
/// ([`Table::lock`]). Slot locks are taken under it, never the other way round.
pub struct Locked<'a, X> {
    table: &'a Table<X>,
    state: MutexGuard<'a, State<X>>,
}

impl<X> Locked<'_, X> {
    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.state.epoch
    }

    /// The library's bookkeeping.
    pub fn extra(&mut self) -> &mut X {
        &mut self.state.extra
    }

    /// Slots retired for good (their generation ran out).
    pub fn retired(&self) -> usize {
        self.state.retired
    }

    /// [`Table::insert`] under this lock; gives the object back if it kept nothing (drop
    /// it after letting the lock go).
    #[allow(clippy::result_large_err)]
    pub fn insert(
        &mut self,
        tag: u8,
        epoch: u64,
        object: Arc<Object>,
    ) -> Result<u64, (Refused, Arc<Object>)> {
        debug_assert_ne!(tag, 0, "a handle's tag is never 0");
        if !same_epoch(self.state.epoch, epoch) {
            return Err((Refused::EndedEpoch, object));
        }
        let index = if self.state.free != 0 {
            let index = (self.state.free - 1) as usize;
            self.state.free = self.table.slot(index).next_free;
            index
        } else if self.state.high < SLOTS {
            self.state.high += 1;
            self.state.high - 1
        } else {
            let retired = self.state.retired;
            return Err((Refused::Full { retired }, object));
        };
        let mut slot = self.table.slot(index);
        // Never `LAST_GENERATION` + 1: a slot whose generation ran out is never on the list.
        slot.generation += 1;
        slot.object = Some(object);
        slot.next_free = 0;
        Ok(join(tag, self.state.epoch, index, slot.generation))
    }

    /// [`Table::take`] under this lock.
    pub fn take(&mut self, tag: u8, handle: u64) -> Option<Arc<Object>> {
        if tag_of(handle) != tag || tag == 0 {
            return None;
        }
        let index = index_of(handle);
        let mut slot = self.table.slot(index);
        if slot.generation != generation_of(handle) {
            return None;
        }
        let object = slot.object.take()?;
        give_slot(&mut self.state, index, &mut slot);
        Some(object)
    }

    /// Ends the epoch: every handle made so far answers [`Why::EndedEpoch`] from now on,
    /// and every object comes out of the table, to be dropped by the caller after letting
    /// the lock go (objects a call of another thread still holds go when it returns).
    pub fn end_epoch(&mut self) -> Vec<Arc<Object>> {
        self.state.epoch += 1;
        self.table.epoch.store(self.state.epoch, Ordering::Relaxed);
        let mut orphans = Vec::new();
        for index in 0..self.state.high {
            let mut slot = self.table.slot(index);
            if let Some(object) = slot.object.take() {
                give_slot(&mut self.state, index, &mut slot);
                orphans.push(object);
            }
        }
        orphans
    }
}

/// Puts the emptied `slot` (at `index`) on the free list, or retires it for good.
fn give_slot<X>(state: &mut State<X>, index: usize, slot: &mut Slot) {
    if slot.generation == LAST_GENERATION {
        state.retired += 1;
        return;
    }
    slot.next_free = state.free;
    state.free = index as u32 + 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: u8 = 0xC1;

    fn one(table: &Table<()>) -> u64 {
        table.insert(TAG, table.epoch(), Arc::new(())).unwrap()
    }

    #[test]
    fn a_slot_whose_generation_runs_out_retires_and_its_handles_stay_dead() {
        static TABLE: Table<()> = Table::new(());
        let h = one(&TABLE);
        let index = index_of(h);
        assert!(TABLE.take(TAG, h).is_some());
        // The slot's next object gets the last generation there is.
        TABLE.slot(index).generation = LAST_GENERATION - 1;
        let mut handles = vec![h];
        let last = loop {
            let h = one(&TABLE);
            handles.push(h);
            if index_of(h) == index {
                break h;
            }
        };
        assert_eq!(generation_of(last), LAST_GENERATION);
        for &h in &handles {
            TABLE.take(TAG, h);
        }
        assert_eq!(TABLE.lock().retired(), 1);
        // The slot is never handed out again; every handle made on it stays refused.
        let fresh: Vec<u64> = (0..64).map(|_| one(&TABLE)).collect();
        assert!(fresh.iter().all(|&h| index_of(h) != index));
        for &h in &handles {
            assert!(TABLE.get(TAG, h).is_none());
            assert_eq!(TABLE.why(TAG, h), Why::Released);
            assert!(fresh.iter().all(|&f| f != h));
        }
    }

    #[test]
    fn a_reused_slot_refuses_its_old_handles() {
        static TABLE: Table<()> = Table::new(());
        let old = one(&TABLE);
        TABLE.take(TAG, old);
        for _ in 0..10_000 {
            let h = one(&TABLE);
            assert_eq!(index_of(h), index_of(old), "the slot is reused");
            assert_ne!(h, old);
            assert!(TABLE.get(TAG, old).is_none());
            assert!(TABLE.get(TAG, h).is_some());
            TABLE.take(TAG, h);
        }
    }

    #[test]
    fn an_ended_epoch_sweeps_every_object_and_refuses_its_inserts() {
        static TABLE: Table<()> = Table::new(());
        let handles: Vec<u64> = (0..10).map(|_| one(&TABLE)).collect();
        let epoch = TABLE.epoch();
        let orphans = TABLE.lock().end_epoch();
        assert_eq!(orphans.len(), 10);
        assert_eq!(TABLE.live(), 0);
        for &h in &handles {
            assert!(TABLE.get(TAG, h).is_none());
            assert_eq!(TABLE.why(TAG, h), Why::EndedEpoch);
        }
        assert_eq!(
            TABLE.insert(TAG, epoch, Arc::new(())),
            Err(Refused::EndedEpoch)
        );
        let h = one(&TABLE);
        assert!(!handles.contains(&h));
    }

    #[test]
    fn a_handle_in_use_outlives_its_release_until_the_call_returns() {
        static TABLE: Table<()> = Table::new(());
        let h = TABLE.insert(TAG, TABLE.epoch(), Arc::new(9u32)).unwrap();
        let held = TABLE.get_as::<u32>(TAG, h).unwrap();
        let Some(Taken::InUse(also)) = TABLE.take_as::<u32>(TAG, h) else {
            panic!("a call holds it")
        };
        assert_eq!((*held, *also), (9, 9));
        assert!(TABLE.get(TAG, h).is_none());
    }

    #[test]
    fn threads_inserting_and_releasing_never_share_a_handle() {
        static TABLE: Table<()> = Table::new(());
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..5_000 {
                        let h = one(&TABLE);
                        assert!(seen.lock().unwrap().insert(h), "handle {h:#x} given twice");
                        assert!(TABLE.take(TAG, h).is_some());
                    }
                });
            }
        });
        assert_eq!(TABLE.live(), 0);
    }
}
