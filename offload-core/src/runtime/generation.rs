//! One runtime generation: what it owns from a 0→1 transition to the matching 1→0, and how
//! it ends (L4).
//!
//! A generation owns its platforms (opened on first use, [`crate::runtime::platforms`]) and
//! their devices, and lists every object its handles made
//! (queues, modules, events, buffers) as a [`Resource`], behind one
//! `RwLock<Option<Live>>`: operations hold it for reading, teardown takes it for writing
//! (which drains the operations in flight) and leaves `None`, so a handle of a finished
//! generation gets `Error::ShutDown` from then on. This module knows the handles only
//! through [`Resource`]; it never calls a backend except through the erased family.

use crate::sync::Arc;
use std::cell::Cell;

use slotmap::SlotMap;

use crate::config::Config;
use crate::erased::{DynDevice, PlatformEntry};
use crate::error::{Error, Result};
use crate::hal::BackendKind;
use crate::runtime::platforms::PlatformSlot;
use crate::sync::{
    AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, RwLock, backoff, lock, read, write,
};

slotmap::new_key_type! {
    /// Key of an object a handle made, in its generation's registry of that kind.
    pub(crate) struct ResourceKey;
}

/// Where a device sits in its generation: its platform slot and its place there. A key
/// exists only once its platform opened, and stays valid until the generation ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DeviceKey {
    platform: u32,
    index: u32,
}

impl DeviceKey {
    /// The key as one number, for thread-local records of what a thread is doing.
    pub(crate) fn bits(self) -> u64 {
        (u64::from(self.platform) << 32) | u64::from(self.index)
    }

    /// The device's place among its platform's devices.
    pub(crate) fn index(self) -> u32 {
        self.index
    }
}

/// An object a handle made, as its generation lists it so that shutdown releases it (L4).
pub(crate) trait Resource: Send + Sync {
    /// Runs before the generation is locked, so it may call back into the runtime: a
    /// queue drains, a module runs its teardown callbacks.
    fn prepare(self: Arc<Self>, _generation: &Arc<Generation>) -> Result<()> {
        Ok(())
    }

    /// Order of `prepare` among resources of one kind: higher first (modules: the newest
    /// setup is torn down first).
    fn order(&self) -> u64 {
        0
    }

    /// Releases the backend object, waiting for calls in flight on it. Idempotent.
    fn release(self: Arc<Self>) -> Result<()>;
}

/// The kinds of resources, in the order shutdown releases them (L4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Module = 0,
    Event = 1,
    Queue = 2,
    /// IPC endpoints: peers unmap what was sent to them, mappings of theirs are closed.
    Ipc = 3,
    Buffer = 4,
}

const RELEASE_ORDER: [Kind; 5] = [
    Kind::Module,
    Kind::Event,
    Kind::Queue,
    Kind::Ipc,
    Kind::Buffer,
];

type Registry = Mutex<SlotMap<ResourceKey, Arc<dyn Resource>>>;

/// What a generation owns while it is alive.
pub(crate) struct Live {
    /// The platform entries in force, in discovery order; each opens on first use.
    pub(crate) platforms: Vec<PlatformSlot>,
    registries: [Registry; 5],
}

impl Live {
    /// The device behind `key`.
    pub(crate) fn device(&self, key: DeviceKey) -> Result<&Arc<dyn DynDevice>> {
        self.platforms
            .get(key.platform as usize)
            .and_then(PlatformSlot::opened)
            .and_then(|open| open.devices.get(key.index as usize))
            .ok_or_else(Error::shut_down)
    }

    /// The devices of the platform in slot `index` (opening it unless it was tried), with
    /// their keys; none if it is unavailable.
    pub(crate) fn devices_of(
        &self,
        index: usize,
        config: &Config,
    ) -> impl Iterator<Item = (DeviceKey, &Arc<dyn DynDevice>)> {
        // A platform that fails to open is listed in `unavailable()` with its error.
        let open = self.platforms[index].open(config).ok();
        open.into_iter().flat_map(move |open| {
            open.devices.iter().enumerate().map(move |(i, raw)| {
                let key = DeviceKey {
                    platform: index as u32,
                    index: i as u32,
                };
                (key, raw)
            })
        })
    }

    /// The backends of the platforms opened so far, in platform order (opens none).
    pub(crate) fn opened_kinds(&self) -> Vec<BackendKind> {
        self.platforms
            .iter()
            .filter(|p| p.opened().is_some())
            .map(PlatformSlot::kind)
            .collect()
    }

    /// The backend of the device behind `key`.
    pub(crate) fn backend(&self, key: DeviceKey) -> BackendKind {
        self.platforms[key.platform as usize].kind()
    }

    /// Lists a resource made by `make`, which learns its key.
    pub(crate) fn register<T: Resource + 'static>(
        &self,
        kind: Kind,
        make: impl FnOnce(ResourceKey) -> Arc<T>,
    ) -> Result<(ResourceKey, Arc<T>)> {
        let mut registry = lock(&self.registries[kind as usize]);
        let mut made = None;
        let key = registry.insert_with_key(|key| {
            let resource = make(key);
            made = Some(resource.clone());
            resource as Arc<dyn Resource>
        });
        // `insert_with_key` calls its closure exactly once.
        made.map(|resource| (key, resource))
            .ok_or_else(Error::shut_down)
    }

    /// Forgets a resource (its handle released it).
    pub(crate) fn forget(&self, kind: Kind, key: ResourceKey) {
        lock(&self.registries[kind as usize]).remove(key);
    }

    fn snapshot(&self, kind: Kind) -> Vec<Arc<dyn Resource>> {
        lock(&self.registries[kind as usize])
            .values()
            .cloned()
            .collect()
    }
}

crate::sync::thread_local! {
    /// The loads in flight on this thread: (generation id, how many), so that a teardown
    /// started inside one of them (a setup callback gave back the last reference) does not
    /// wait for itself. A const-initialised `Cell` with no destructor: it registers nothing
    /// that would pin a `dlclose`d library (L2). Generation ids start at 1.
    static LOADING: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
}

/// Whether this thread is inside a load (its setup callbacks included).
pub(crate) fn loading_here() -> bool {
    LOADING.with(|l| l.get().1 > 0)
}

/// State a module above the runtime keeps for one generation (the IPC endpoints and their
/// cache, `crate::ipc`), so the runtime need not name it: made when the generation starts,
/// found again by its type ([`Generation::extension`]), and told by the teardown (L4) when
/// background work must stop and when every object was released.
pub(crate) trait Extension: Send + Sync + 'static {
    /// The teardown begins releasing objects: join the threads that may wait for the
    /// generation's state.
    fn stop(&self);
    /// Every object of the generation was released.
    fn released(&self);
    /// Itself, to be found by type.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Makes an extension's state for a generation of this configuration.
pub(crate) type MakeExtension = fn(&Config) -> Box<dyn Extension>;

/// One runtime generation: from a 0→1 transition to the matching 1→0 (or the exit hook).
pub(crate) struct Generation {
    pub(crate) id: u64,
    pub(crate) config: Config,
    /// `Offload<Ready>` references; changed only under the lifecycle lock.
    pub(crate) refs: AtomicUsize,
    live: RwLock<Option<Live>>,
    /// Errors met while dropping handles; returned by the shutdown.
    deferred: Mutex<Deferred>,
    /// Set when shutdown begins: no new modules or queues from then on.
    closing: AtomicBool,
    /// Loads in flight (setup included); shutdown waits for them before teardown.
    loads: AtomicUsize,
    /// Host accesses waiting, with no lock held, for queued work on their buffer
    /// (`Buffer::settled`, L7): each holds the backend's queue state meanwhile, so the
    /// teardown lets them finish before it releases the queues (they end: phase 1 drained
    /// the queues they wait for).
    host_waits: AtomicUsize,
    /// Counts completed module setups (teardown runs newest first).
    setup_order: AtomicU64,
    /// The state modules above the runtime keep for this generation ([`Extension`]): the
    /// IPC endpoints and their cache.
    extensions: Box<[Box<dyn Extension>]>,
    /// Every device with its backend, in platform order, once every platform was tried:
    /// `Offload::devices` then lists them without taking the state's lock.
    listed: crate::sync::OnceLock<Box<[(DeviceKey, BackendKind)]>>,
}

impl Generation {
    /// Lists the platform entries and opens the named ones (`required`: one that fails
    /// fails the start, after deinitialising those already open); the others open on
    /// first use ([`crate::runtime::platforms`]).
    pub(crate) fn start(
        id: u64,
        config: Config,
        entries: &[(PlatformEntry, bool)],
        extensions: &[MakeExtension],
    ) -> Result<Generation> {
        let platforms: Vec<PlatformSlot> = entries
            .iter()
            .map(|&(entry, _)| PlatformSlot::new(entry))
            .collect();
        for (slot, &(entry, required)) in platforms.iter().zip(entries) {
            if !required {
                continue;
            }
            if let Err(first) = slot.open(&config) {
                tracing::warn!(
                    target: "offload::init",
                    backend = %entry.kind(),
                    "platform unavailable, and named explicitly: init fails"
                );
                // Nothing leaks: deinit what was opened, newest first.
                let mut errors: Vec<Error> = first.into_iter().collect();
                errors.extend(
                    platforms
                        .into_iter()
                        .rev()
                        .filter_map(PlatformSlot::into_open)
                        .filter_map(|p| p.raw.deinit().err())
                        .map(|e| e.in_call("Offload::shutdown")),
                );
                return Err(Error::join(errors).err().unwrap_or_else(Error::shut_down));
            }
        }
        tracing::debug!(
            target: "offload::generation",
            generation = id,
            platforms = platforms.len(),
            opened = platforms.iter().filter(|p| p.opened().is_some()).count(),
            "generation started"
        );
        let extensions = extensions.iter().map(|make| make(&config)).collect();
        Ok(Generation {
            id,
            config,
            refs: AtomicUsize::new(1),
            live: RwLock::new(Some(Live {
                platforms,
                registries: Default::default(),
            })),
            deferred: Mutex::new(Deferred::default()),
            closing: AtomicBool::new(false),
            loads: AtomicUsize::new(0),
            host_waits: AtomicUsize::new(0),
            setup_order: AtomicU64::new(0),
            extensions,
            listed: crate::sync::OnceLock::new(),
        })
    }

    /// The extension state of type `T`, when the generation was started with it.
    pub(crate) fn extension<T: Extension>(&self) -> Option<&T> {
        self.extensions
            .iter()
            .find_map(|e| e.as_any().downcast_ref::<T>())
    }

    /// Every device with its backend, in platform order (opening every platform not tried
    /// yet); `Error::ShutDown` once shutdown has begun. After the first call, a lookup
    /// with no lock: the list is fixed once every platform was tried.
    pub(crate) fn listed(&self) -> Result<&[(DeviceKey, BackendKind)]> {
        if let Some(list) = self.listed.get() {
            // No new device handle once shutdown has begun (L3).
            return match self.is_closing() {
                false => Ok(list),
                true => Err(Error::shut_down()),
            };
        }
        let list: Box<[(DeviceKey, BackendKind)]> = self.with_live(|live| {
            Ok((0..live.platforms.len())
                .flat_map(|index| live.devices_of(index, &self.config))
                .map(|(key, _)| (key, live.backend(key)))
                .collect())
        })?;
        // Never `get_or_init`, which would block a racing caller where the model check
        // cannot see it: the loser of a race drops its own, equal list.
        let _ = self.listed.set(list);
        self.listed
            .get()
            .map(|l| &l[..])
            .ok_or_else(Error::shut_down)
    }

    /// Opens every platform not tried yet (for the queries that list them all).
    pub(crate) fn open_all(&self, live: &Live) {
        for slot in &live.platforms {
            // Each failure is kept in its slot and listed by `unavailable()`.
            let _ = slot.open(&self.config);
        }
    }

    /// Runs `f` on the live state, shared with other operations; `Error::ShutDown` once
    /// the generation ended. Teardown waits for `f` to return. Refused inside
    /// `Buffer::with_mapped`'s closure (a teardown waiting for the state may hold off this
    /// read while it waits for that buffer, L7).
    pub(crate) fn with_live<T>(&self, f: impl FnOnce(&Live) -> Result<T>) -> Result<T> {
        crate::runtime::fork::refuse("")?;
        crate::runtime::reentry::refuse_in_mapped("")?;
        let guard = read(&self.live);
        f(guard.as_ref().ok_or_else(Error::shut_down)?)
    }

    /// Whether the generation still runs (no teardown has taken its state).
    pub(crate) fn is_live(&self) -> bool {
        read(&self.live).is_some()
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Registers a load in flight; `None` once shutdown has begun. Lock-free, so 64
    /// threads loading at once do not queue on it: the count goes up before `closing` is
    /// read, and teardown sets `closing` before it reads the count (both sequentially
    /// consistent), so either the load sees `closing` or teardown sees the load.
    pub(crate) fn begin_load(&self) -> Option<LoadGuard<'_>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let outer = LOADING.with(|l| {
            let (id, n) = l.get();
            l.replace(if id == self.id {
                (id, n + 1)
            } else {
                (self.id, 1)
            })
        });
        let guard = LoadGuard {
            generation: self,
            outer,
        };
        (!self.is_closing()).then_some(guard)
    }

    /// Counts a host access waiting for queued work outside its buffer's lock until the
    /// guard is dropped (see `host_waits`); `ShutDown` once a shutdown has begun (the
    /// count goes up before `closing` is read, and the teardown sets `closing` before it
    /// reads the count, both sequentially consistent: either the access sees the shutdown,
    /// or the teardown waits for the access).
    pub(crate) fn host_wait(&self) -> Result<HostWait<'_>> {
        self.host_waits.fetch_add(1, Ordering::SeqCst);
        let wait = HostWait(self);
        if self.is_closing() {
            return Err(Error::shut_down());
        }
        Ok(wait)
    }

    pub(crate) fn next_setup_order(&self) -> u64 {
        self.setup_order.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Keeps an error met where nobody can be told (a drop) for the shutdown to return;
    /// once the teardown has collected its errors, for `take_unreported_errors` (L8: a
    /// drop that finishes on another thread after the shutdown returned is not lost).
    pub(crate) fn defer(&self, result: Result<()>) {
        if let Err(e) = result {
            let mut deferred = lock(&self.deferred);
            if deferred.collected {
                drop(deferred);
                crate::runtime::unreported::report_later(Err(e));
            } else {
                deferred.errors.push(e);
            }
        }
    }

    /// L4: drain queues → teardown callbacks → unload modules → destroy events and queues
    /// → close IPC endpoints (peers unmap what was sent to them, bounded wait; mappings of
    /// theirs close) → free buffers → drop devices → deinitialise platforms.
    /// Every step runs whatever failed before; all errors come back together. Idempotent:
    /// a second call finds nothing to do. `releasing` is called once the steps that run
    /// user code (draining, teardown callbacks) are done and only backend objects remain
    /// to be released (the lifecycle lets `init` wait from then on, L6).
    pub(crate) fn teardown(self: &Arc<Self>, releasing: &dyn Fn()) -> Result<()> {
        // Every load either saw `closing` or is counted (see `begin_load`); wait for the
        // counted ones, setups included (P3), except those of this very thread: a setup
        // callback that gave back the last reference tears down from inside its load,
        // which cannot end before this does (waiting for it hung; found by the model
        // check, `src/model/`). Rare and short, so a sleep loop will do.
        self.closing.store(true, Ordering::SeqCst);
        // The wait a user feels in a shutdown: loads in flight and every queue's work (L4's
        // drain step). Its own span, so a trace shows how much of the shutdown it was.
        let drain = tracing::debug_span!(
            target: "offload::shutdown",
            "shutdown_drain",
            generation = self.id,
            queues = tracing::field::Empty,
        )
        .entered();
        let own = LOADING.with(|l| match l.get() {
            (id, n) if id == self.id => n,
            _ => 0,
        });
        while self.loads.load(Ordering::SeqCst) > own {
            backoff();
        }
        let mut errors = Vec::new();
        // The first two steps may run user code that calls into the runtime, so they run
        // before the generation is locked, on a snapshot of its queues and modules.
        let snapshot = read(&self.live)
            .as_ref()
            .map(|live| (live.snapshot(Kind::Queue), live.snapshot(Kind::Module)));
        let Some((queues, mut modules)) = snapshot else {
            return Ok(());
        };
        tracing::debug!(
            target: "offload::generation",
            generation = self.id,
            queues = queues.len(),
            modules = modules.len(),
            "generation teardown begins"
        );
        drain.record("queues", queues.len());
        for queue in queues {
            errors.extend(queue.prepare(self).err());
        }
        drop(drain);
        modules.sort_by_key(|m| std::cmp::Reverse(m.order()));
        for module in modules {
            errors.extend(module.prepare(self).err());
        }

        releasing();
        // Extensions' threads (IPC progress) are joined before the state is taken: a round
        // of theirs may be waiting for the read lock (L2: no offload thread outlives the
        // shutdown).
        self.extensions.iter().for_each(|e| e.stop());
        // Before the state's lock is asked for: what those waits wait for may take it.
        while self.host_waits.load(Ordering::SeqCst) > 0 {
            backoff();
        }
        // Taking the write lock waits for every operation in flight on a device.
        let Some(live) = write(&self.live).take() else {
            return Error::join(errors);
        };
        errors.append(&mut lock(&self.deferred).errors);
        for kind in RELEASE_ORDER {
            let registry = std::mem::take(&mut *lock(&live.registries[kind as usize]));
            for (_, resource) in registry {
                errors.extend(resource.release().err());
            }
        }
        // Quarantined memory was freed with the other buffers (I3).
        self.extensions.iter().for_each(|e| e.released());
        // Only the platforms that opened are deinitialised; devices go before their
        // platforms.
        let mut opened: Vec<_> = live
            .platforms
            .into_iter()
            .filter_map(PlatformSlot::into_open)
            .collect();
        for platform in &mut opened {
            platform.devices.clear();
        }
        for platform in opened.iter().rev() {
            errors.extend(
                platform
                    .raw
                    .deinit()
                    .err()
                    .map(|e| e.in_call("Offload::shutdown")),
            );
        }
        drop(opened);
        {
            let mut deferred = lock(&self.deferred);
            deferred.collected = true;
            errors.append(&mut deferred.errors);
        }
        tracing::debug!(
            target: "offload::generation",
            generation = self.id,
            errors = errors.len(),
            "generation teardown finished"
        );
        Error::join(errors)
    }
}

/// Errors kept for the shutdown ([`Generation::defer`]).
#[derive(Default)]
struct Deferred {
    errors: Vec<Error>,
    /// The teardown took its last errors: later ones are reported elsewhere.
    collected: bool,
}

/// A host access waiting outside its buffer's lock ([`Generation::host_wait`]).
pub(crate) struct HostWait<'a>(&'a Generation);

impl Drop for HostWait<'_> {
    fn drop(&mut self) {
        self.0.host_waits.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A load in flight; dropping it lets a waiting shutdown go on.
pub(crate) struct LoadGuard<'a> {
    generation: &'a Generation,
    /// This thread's `LOADING` before this load began.
    outer: (u64, usize),
}

impl Drop for LoadGuard<'_> {
    fn drop(&mut self) {
        LOADING.with(|l| l.set(self.outer));
        self.generation.loads.fetch_sub(1, Ordering::SeqCst);
    }
}
