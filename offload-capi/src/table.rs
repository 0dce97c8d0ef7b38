//! The handle table: every object a C caller holds lives here, and C sees only an opaque
//! 64-bit handle naming its slot — never a pointer, so no handle can dangle.
//!
//! A handle's bits, high to low:
//!
//! | bits | field | why |
//! |---|---|---|
//! | 63–56 | type tag (`0xA1`…) | a handle of another type, or garbage, is refused by type |
//! | 55–36 | table epoch (20 bits) | every handle of a runtime that was shut down answers `OFFLOAD_ERROR_SHUT_DOWN` |
//! | 35–16 | slot index (20 bits) | where the object is |
//! | 15–0 | slot generation (16 bits, never 0) | a released slot's old handles are refused once it is reused |
//!
//! Zero is never a handle (the tag is never 0). The epoch advances whenever the last C
//! runtime reference is shut down: that shutdown takes every object out of the table (so
//! nothing is leaked, not even at `dlclose`, L2) and drops them after the runtime's own
//! shutdown released their backend objects in order (L4). A handle that happens to match a
//! live slot by chance (garbage hitting tag, epoch, index and generation) names a live
//! object of the right type: a wrong answer, never undefined behaviour.
//!
//! Objects are looked up and cloned (an `Arc`) under the table's lock, which is released
//! before any runtime call: user code the runtime calls back (setup, teardown, host
//! functions) may use the C API itself (L6), and nothing is ever dropped under the lock.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::ipc::Endpoint;
use offload::{Buffer, Device, Event, Kernel, Module, Offload, Program, Queue};

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

/// An object held for C.
#[derive(Clone)]
pub(crate) enum Object {
    Runtime(Arc<Offload>),
    Device(Arc<Device>),
    Buffer(Arc<Buffer>),
    Program(Arc<Program>),
    Module(Arc<Module>),
    Kernel(Arc<Kernel>),
    Queue(Arc<Queue>),
    Event(Arc<Event>),
    Endpoint(Arc<Endpoint>),
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
    fn wrap(this: Arc<Self>) -> Object;
    fn unwrap(object: Object) -> Option<Arc<Self>>;
}

macro_rules! held {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl Held for $ty {
            const KIND: Kind = Kind::$variant;
            fn wrap(this: Arc<Self>) -> Object {
                Object::$variant(this)
            }
            fn unwrap(object: Object) -> Option<Arc<Self>> {
                match object {
                    Object::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    )*};
}

held!(
    Offload => Runtime,
    Device => Device,
    Buffer => Buffer,
    Program => Program,
    Module => Module,
    Kernel => Kernel,
    Queue => Queue,
    Event => Event,
    Endpoint => Endpoint,
);

const EPOCH_BITS: u32 = 20;
const INDEX_BITS: u32 = 20;
const EPOCH_MASK: u64 = (1 << EPOCH_BITS) - 1;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

struct Slot {
    generation: u16,
    object: Option<Object>,
}

struct Table {
    /// The current epoch (1 ..= EPOCH_MASK); handles of earlier epochs are shut down.
    epoch: u64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Runtime references C holds in this epoch.
    runtimes: usize,
}

// Const-initialised: a fresh table whenever the library is loaded again (L2).
static TABLE: Mutex<Table> = Mutex::new(Table {
    epoch: 1,
    slots: Vec::new(),
    free: Vec::new(),
    runtimes: 0,
});

fn table() -> MutexGuard<'static, Table> {
    // Nothing panics under the lock; stay usable if something ever did.
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

struct Parts {
    tag: u8,
    epoch: u64,
    index: usize,
    generation: u16,
}

fn split(handle: u64) -> Parts {
    Parts {
        tag: (handle >> 56) as u8,
        epoch: (handle >> 36) & EPOCH_MASK,
        index: ((handle >> 16) & INDEX_MASK) as usize,
        generation: handle as u16,
    }
}

fn join(kind: Kind, epoch: u64, index: usize, generation: u16) -> u64 {
    (kind as u64) << 56 | epoch << 36 | (index as u64) << 16 | u64::from(generation)
}

/// Why `handle` names no live `want`, in words for `call`.
fn refuse(table: &Table, call: &'static str, want: Kind, handle: u64) -> Fail {
    let noun = want.noun();
    if handle == 0 {
        return Fail::Handle(format!("{call}: the {noun} handle is 0 (no {noun})"));
    }
    let p = split(handle);
    let Some(kind) = Kind::ALL.iter().find(|k| **k as u8 == p.tag) else {
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
    if p.epoch != table.epoch && p.epoch != 0 && p.epoch < table.epoch {
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

/// The object `handle` names, if it is a live `T`.
pub(crate) fn get<T: Held>(call: &'static str, handle: u64) -> Res<Arc<T>> {
    let t = table();
    let p = split(handle);
    if p.tag == T::KIND as u8 && p.epoch == t.epoch {
        if let Some(Slot {
            generation,
            object: Some(object),
        }) = t.slots.get(p.index)
        {
            if *generation == p.generation {
                if let Some(x) = T::unwrap(object.clone()) {
                    return Ok(x);
                }
            }
        }
    }
    Err(refuse(&t, call, T::KIND, handle))
}

/// The current epoch, to pass to [`insert`] for objects made from a parent looked up now.
pub(crate) fn epoch_of(handle: u64) -> u64 {
    split(handle).epoch
}

fn insert_locked(t: &mut Table, object: Object) -> Res<u64> {
    let kind = object.kind();
    let epoch = t.epoch;
    let index = match t.free.pop() {
        Some(i) => i as usize,
        None => {
            if t.slots.len() as u64 > INDEX_MASK {
                return Err(Fail::Offload(offload::Error::InvalidArgument {
                    call: "offload handle table",
                    reason: format!("more than {INDEX_MASK} live objects"),
                }));
            }
            t.slots.push(Slot {
                generation: 0,
                object: None,
            });
            t.slots.len() - 1
        }
    };
    let slot = &mut t.slots[index];
    slot.generation = slot.generation.wrapping_add(1).max(1);
    slot.object = Some(object);
    Ok(join(kind, epoch, index, slot.generation))
}

/// Keeps `x`, made from a parent of epoch `epoch`, and gives its handle. If the parent's
/// runtime was shut down meanwhile (the epoch moved on), `x` is dropped (outside the lock)
/// and the answer is `ShutDown`.
pub(crate) fn insert<T: Held>(call: &'static str, epoch: u64, x: T) -> Res<u64> {
    let object = T::wrap(Arc::new(x));
    let mut t = table();
    if t.epoch != epoch {
        drop(t);
        drop(object);
        return Err(Fail::Offload(offload::Error::ShutDown {
            call,
            object: String::new(),
        }));
    }
    insert_locked(&mut t, object)
}

/// Keeps `x` in the current epoch (a handle lent to a callback for its duration).
pub(crate) fn insert_now<T: Held>(x: T) -> Res<u64> {
    let mut t = table();
    insert_locked(&mut t, T::wrap(Arc::new(x)))
}

/// Keeps a runtime reference (a new C reference, L1) and gives its handle.
pub(crate) fn insert_runtime(rt: Offload) -> Res<u64> {
    let mut t = table();
    let h = insert_locked(&mut t, Object::Runtime(Arc::new(rt)))?;
    t.runtimes += 1;
    Ok(h)
}

/// Takes the `T` that `handle` names out of the table (its handle is dead from now on).
pub(crate) fn remove<T: Held>(call: &'static str, handle: u64) -> Res<Arc<T>> {
    let mut t = table();
    let p = split(handle);
    if p.tag == T::KIND as u8 && p.epoch == t.epoch {
        if let Some(slot) = t.slots.get_mut(p.index) {
            if slot.generation == p.generation
                && slot.object.as_ref().is_some_and(|o| o.kind() == T::KIND)
            {
                let object = slot.object.take();
                t.free.push(p.index as u32);
                if let Some(x) = object.and_then(T::unwrap) {
                    return Ok(x);
                }
            }
        }
    }
    Err(refuse(&t, call, T::KIND, handle))
}

/// Replaces the object `handle` names (same type), if it is still live.
pub(crate) fn replace<T: Held>(call: &'static str, handle: u64, x: T) -> Res {
    let new = T::wrap(Arc::new(x));
    let mut t = table();
    let p = split(handle);
    if p.tag == T::KIND as u8 && p.epoch == t.epoch {
        if let Some(slot) = t.slots.get_mut(p.index) {
            if slot.generation == p.generation && slot.object.is_some() {
                let old = slot.object.replace(new);
                drop(t);
                drop(old);
                return Ok(());
            }
        }
    }
    let e = refuse(&t, call, T::KIND, handle);
    drop(t);
    drop(new);
    Err(e)
}

/// Takes the runtime reference `handle` names out of the table. When it was the last one
/// C held, every object of the table comes with it (the epoch advances, so all their
/// handles answer `ShutDown` from now on); the caller drops them after shutting the runtime
/// down.
pub(crate) fn remove_runtime(call: &'static str, handle: u64) -> Res<(Arc<Offload>, Vec<Object>)> {
    let rt = remove::<Offload>(call, handle)?;
    let mut t = table();
    t.runtimes = t.runtimes.saturating_sub(1);
    let mut orphans = Vec::new();
    if t.runtimes == 0 {
        orphans = std::mem::take(&mut t.slots)
            .into_iter()
            .filter_map(|s| s.object)
            .collect();
        t.free = Vec::new();
        t.epoch = if t.epoch >= EPOCH_MASK {
            1
        } else {
            t.epoch + 1
        };
    }
    drop(t);
    Ok((rt, orphans))
}

/// Live objects in the table (for tests and leak checks).
pub(crate) fn live() -> usize {
    table().slots.iter().filter(|s| s.object.is_some()).count()
}
