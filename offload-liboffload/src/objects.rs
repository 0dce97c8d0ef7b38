//! The objects C holds by handle besides devices and platforms — queues, events, programs
//! and symbols — kept in the handle table offload's C libraries share
//! ([`offload_handles::Table`]: slots with generations, so a destroyed object's handle is
//! refused for the life of the process however often its slot is reused, L9), with
//! liboffload's error code for a handle that names none.
//!
//! The table's epoch is the runtime generation's: the `olShutDown` that ends a generation
//! ends the epoch ([`end_generation`]), which takes every object out of the table, so a
//! handle of a finished generation is refused (`OL_ERRC_UNINITIALIZED` while no generation
//! runs, the handle type's own code while a later one does). Objects are put in the table
//! under the state's lock, after checking the generation they were made in still runs.
//!
//! A call looks its handle up without the state's lock and holds an `Arc` of the object
//! for its length: a destroy meanwhile does not free the object under the call (L6), and
//! a call that waits (a sync) never holds the lock another thread's call needs.

use std::sync::{Arc, Mutex, PoisonError};

use offload::{Event, GlobalInfo, Kernel, Module, Queue};
use offload_handles::{Object, Refused, Table, Taken, Why};

use crate::abi::*;
use crate::result::{Fail, Res, Static, stat};
use crate::state;

/// The library's table (const-initialised: a fresh one whenever the library is loaded
/// again, L2), and whether a generation runs (set under the state's lock by `olInit` and
/// the last `olShutDown`; read without it by a refusal).
static TABLE: Table<bool> = Table::new(false);

/// A type C holds by handle, its handle's tag and what a handle that names none answers.
pub(crate) trait Held: Send + Sync + 'static {
    /// The handle's type tag (never a canonical user address: C cannot follow a handle).
    const TAG: u8;
    /// The refusal of a NULL handle, a destroyed one, one of a finished generation, and
    /// one of another type (or garbage).
    const NULL: &'static Static;
    const DESTROYED: &'static Static;
    const ENDED: &'static Static;
    const FOREIGN: &'static Static;
}

/// A queue (`olCreateQueue`).
pub(crate) struct QueueObj {
    pub(crate) queue: Queue,
    /// Its device's index in the generation's device list.
    pub(crate) device: usize,
}

/// An event (`olCreateEvent`): the queue it was recorded on, and its handle.
pub(crate) struct EventObj {
    pub(crate) event: Event,
    pub(crate) queue: u64,
}

/// A program (`olCreateProgram`), loaded on one device, and the symbols handed out from it
/// (owned by it: `olDestroyProgram` destroys them).
pub(crate) struct ProgramObj {
    pub(crate) module: Module,
    pub(crate) device: usize,
    /// (name, kind, handle) of each symbol handed out; `None` once destroyed (no symbol
    /// is added after that).
    pub(crate) symbols: Mutex<Option<Vec<(String, ol_symbol_kind_t, u64)>>>,
}

/// A symbol (`olGetSymbol`): a kernel or a global variable of a program.
pub(crate) enum SymbolObj {
    Kernel { kernel: Kernel, device: usize },
    Global(GlobalInfo),
}

/// `Held` for a type: its tag, the code of a handle that names none, its noun, and how one
/// is destroyed (for the refusals' words).
macro_rules! held {
    ($ty:ty, $tag:literal, $code:ident, $noun:literal, $destroyed:literal) => {
        impl Held for $ty {
            const TAG: u8 = $tag;
            const NULL: &'static Static = stat!(
                OL_ERRC_INVALID_NULL_HANDLE,
                concat!("the ", $noun, " handle is NULL")
            );
            const DESTROYED: &'static Static = stat!(
                $code,
                concat!(
                    "the ",
                    $noun,
                    " handle names no live ",
                    $noun,
                    ": ",
                    $destroyed
                )
            );
            const ENDED: &'static Static = stat!(
                $code,
                concat!(
                    "the ",
                    $noun,
                    " handle belongs to a runtime generation that olShutDown ended"
                )
            );
            const FOREIGN: &'static Static = stat!(
                $code,
                concat!(
                    "not a ",
                    $noun,
                    " handle of this library (garbage, or another object's handle)"
                )
            );
        }
    };
}

held!(
    QueueObj,
    0xE1,
    OL_ERRC_INVALID_QUEUE,
    "queue",
    "olDestroyQueue destroyed it"
);
held!(
    EventObj,
    0xE2,
    OL_ERRC_INVALID_EVENT,
    "event",
    "olDestroyEvent destroyed it"
);
// liboffload 22 has no code for an invalid program or symbol: OL_ERRC_INVALID_ARGUMENT.
held!(
    ProgramObj,
    0xE3,
    OL_ERRC_INVALID_ARGUMENT,
    "program",
    "olDestroyProgram destroyed it"
);
held!(
    SymbolObj,
    0xE4,
    OL_ERRC_INVALID_ARGUMENT,
    "symbol",
    "olDestroyProgram destroyed its program"
);

/// Why `handle` names no live `T`: `OL_ERRC_UNINITIALIZED` while no generation runs, else
/// the type's refusal.
#[cold]
fn refuse<T: Held>(handle: u64) -> Fail {
    if handle == 0 {
        return T::NULL.into();
    }
    if !*TABLE.lock().extra() {
        return state::uninit();
    }
    match TABLE.why(T::TAG, handle) {
        Why::Zero => T::NULL,
        Why::OtherTag(_) => T::FOREIGN,
        Why::EndedEpoch => T::ENDED,
        Why::Released => T::DESTROYED,
    }
    .into()
}

/// The live `T` a handle names, held for the call.
pub(crate) fn get<T: Held>(handle: *mut impl Sized) -> Res<Arc<T>> {
    let handle = handle.addr() as u64;
    TABLE
        .get_as::<T>(T::TAG, handle)
        .ok_or_else(|| refuse::<T>(handle))
}

/// The table's epoch now (read under the state's lock, it is the live generation's).
pub(crate) fn epoch() -> u64 {
    TABLE.epoch()
}

/// The queue a copy, fill or launch is enqueued on: `None` for a NULL handle (the call is
/// synchronous), else the live queue it names.
pub(crate) fn optional_queue(queue: ol_queue_handle_t) -> Res<Option<Arc<QueueObj>>> {
    match queue.is_null() {
        true => Ok(None),
        false => get::<QueueObj>(queue).map(Some),
    }
}

/// Keeps `x`, made in the generation whose table epoch was `epoch` ([`epoch`]), and gives
/// its handle; if that generation ended meanwhile, `x` is dropped and the answer is
/// `T`'s refusal of a finished generation's handle.
pub(crate) fn insert_at<T: Held>(epoch: u64, x: T) -> Res<u64> {
    keep(epoch, x)
}

/// Keeps `x`, made from the object `parent` names (a queue's event, a program's symbol),
/// and gives its handle; if the parent's generation ended meanwhile, `x` is dropped and
/// the answer is the refusal of the parent's handle.
pub(crate) fn insert_from<P: Held, T: Held>(parent: u64, x: T) -> Res<u64> {
    keep(offload_handles::epoch_of(parent), x).map_err(|_| refuse::<P>(parent))
}

fn keep<T: Held>(epoch: u64, x: T) -> Res<u64> {
    TABLE.insert(T::TAG, epoch, Arc::new(x)).map_err(|why| match why {
        Refused::EndedEpoch => T::ENDED.into(),
        Refused::Full { .. } => stat!(
            OL_ERRC_OUT_OF_RESOURCES,
            "offload's libLLVMOffload holds 262,144 objects (queues, events, programs and symbols) already"
        )
        .into(),
    })
}

/// Takes the `T` a handle names out of the table: its handle is dead from now on. The
/// object itself, or a hold on it while another thread's call still uses it.
pub(crate) fn take<T: Held>(handle: *mut impl Sized) -> Res<Taken<T>> {
    let handle = handle.addr() as u64;
    TABLE
        .take_as::<T>(T::TAG, handle)
        .ok_or_else(|| refuse::<T>(handle))
}

/// Takes a symbol out of the table (its program was destroyed).
pub(crate) fn take_symbol(handle: u64) {
    drop(TABLE.take(SymbolObj::TAG, handle));
}

/// Ends the generation's epoch (under the state's lock, by the last `olShutDown`): every
/// object comes out of the table, for the caller to drop before offload shuts down.
pub(crate) fn end_generation() -> Vec<Arc<Object>> {
    let mut locked = TABLE.lock();
    *locked.extra() = false;
    locked.end_epoch()
}

/// A generation started (under the state's lock, by the first `olInit`).
pub(crate) fn begin_generation() {
    *TABLE.lock().extra() = true;
}

/// A program's symbol cache, also after a panic under its lock (every change is
/// completed before anything can panic).
pub(crate) fn symbols(
    program: &ProgramObj,
) -> std::sync::MutexGuard<'_, Option<Vec<(String, ol_symbol_kind_t, u64)>>> {
    program
        .symbols
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// A handle as the pointer type C holds.
pub(crate) fn as_handle<P>(handle: u64) -> *mut P {
    std::ptr::without_provenance_mut(handle as usize)
}
