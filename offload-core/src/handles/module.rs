//! Modules: a program loaded on one device ([`Module`]), its entry in the generation
//! (kernels, phase, setup and teardown callbacks run as user code, L6), and its release —
//! unload after the teardown callback, exactly once (P3). Also the state a program's
//! handles share ([`ProgramInner`]: image, callbacks, load locks), here because a module
//! names its program and the callbacks take a module; `Program` itself is in `program`,
//! and `Module::program` and `Module::kernel` beside the types they return.

use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, PoisonError, RwLock, Weak,
    lock, read, statics, write,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use super::background::Tasks;
use crate::compile::Compiled;

use crate::erased::{DynKernel, DynProgram};
use crate::error::{Error, Result};
use crate::hal::{BackendKind, GlobalInfo, ParamKind, Source};
use crate::handles::Device;
use crate::runtime::generation::{DeviceKey, Generation, Kind, Resource, ResourceKey};

/// The error a callback returns.
pub type CallbackError = Box<dyn std::error::Error + Send + Sync>;

pub(super) type Callback =
    Arc<dyn Fn(&Module) -> std::result::Result<(), CallbackError> + Send + Sync>;

statics! {
    /// Process-wide source of program and module ids (const-initialised, so it starts over
    /// with the library; ids only need to be unique among live objects).
    pub(super) static NEXT_ID: AtomicU64 = AtomicU64::new(1);
}

pub(super) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A program as its handles share it ([`Program`](crate::Program) is a handle of it) and its
/// modules name it: here, with `Module`, because its callbacks take one.
pub(super) struct ProgramInner {
    pub(super) id: u64,
    pub(super) image: Arc<[u8]>,
    pub(super) setup: Vec<Callback>,
    pub(super) teardown: Vec<Callback>,
    /// The user's name for it ([`Program::label`](crate::Program::label)), for messages.
    pub(super) label: Option<Arc<str>>,
    /// For a program from source: the source, and what it compiled to per target.
    pub(super) source: Option<(Source, Arc<Compiled>)>,
    /// The lock of each (generation, device) this program is loaded on, naming its module
    /// once loaded (P2). Entries go when their module is released.
    pub(super) slots: Mutex<HashMap<(u64, DeviceKey), Arc<LoadSlot>>>,
    /// Its compiles in the background, by (generation, device) (`background`).
    pub(super) background: Tasks,
}

/// The load lock of one (program, device): its module once loaded.
pub(super) type LoadSlot = RwLock<Weak<ModuleEntry>>;

/// One kernel the backend resolved in a module.
pub(crate) struct KernelSlot {
    pub(super) name: String,
    pub(super) params: Arc<[ParamKind]>,
    /// The workgroup size it declares (S1), if its language declares one.
    pub(super) workgroup: Option<[u32; 3]>,
    pub(crate) raw: Box<dyn DynKernel>,
}

/// A loaded module's backend objects.
pub(crate) struct LoadedModule {
    pub(super) raw: Box<dyn DynProgram>,
    pub(crate) kernels: RwLock<Vec<KernelSlot>>,
}

/// A module, shared by its handles and listed in its generation.
pub(crate) struct ModuleEntry {
    pub(super) id: u64,
    pub(super) key: ResourceKey,
    /// Its generation's id, part of its load lock's key.
    pub(super) generation: u64,
    pub(crate) device: DeviceKey,
    pub(super) backend: BackendKind,
    pub(super) program: Arc<ProgramInner>,
    /// Order of setup completion, for LIFO teardown at shutdown.
    pub(crate) setup_order: AtomicU64,
    /// Counted `Module` handles; the one that brings it to zero unloads.
    pub(super) handles: AtomicUsize,
    /// Set by an explicit `unload()`.
    pub(super) unloaded: AtomicBool,
    /// Where the module is in its setup/teardown life (P3), with a condition variable for
    /// whoever must wait for a callback another thread is running.
    pub(super) phase: Mutex<Phase>,
    pub(super) phase_changed: Condvar,
    pub(crate) state: RwLock<Option<LoadedModule>>,
}

/// The callback life of a module: teardown runs exactly once, only after setup completed,
/// and the module is unloaded only after teardown finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Setup callbacks are running.
    SettingUp,
    /// Setup completed; teardown has not started.
    Ready,
    /// Teardown callbacks are running.
    TearingDown,
    /// Teardown ran, or setup failed (then there is nothing to tear down).
    Done,
}

crate::sync::thread_local! {
    /// The module whose callbacks this thread is running (its address), so a callback that
    /// unloads or drops its own module does not wait for itself. A const-initialised `Cell`
    /// with no destructor: it registers nothing that would pin a `dlclose`d library (L2).
    pub(super) static IN_CALLBACK: Cell<usize> = const { Cell::new(0) };
    /// The (program id, generation id, device) whose setup or teardown callbacks this
    /// thread runs, so that a callback loading its own program there is refused instead of
    /// waiting for itself on the load lock (setup) or loading and tearing down without end
    /// (teardown). Const-initialised, no destructor (L2).
    pub(super) static CALLBACKS_OF: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// Runs `f` marked as a callback of `entry` on this thread.
pub(super) fn as_callback_of<T>(entry: &Arc<ModuleEntry>, f: impl FnOnce() -> T) -> T {
    let me = Arc::as_ptr(entry) as usize;
    let outer = IN_CALLBACK.with(|c| c.replace(me));
    // User code offload runs (L6): a last reference given back here tears down later.
    let user = crate::runtime::reentry::enter(None);
    let result = f();
    drop(user);
    IN_CALLBACK.with(|c| c.set(outer));
    result
}

/// Calls one callback; its panic is its error (L6: no user panic unwinds through offload).
pub(super) fn call_back(
    callback: &Callback,
    module: &Module,
) -> std::result::Result<(), CallbackError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(module))).unwrap_or_else(
        |payload| Err(format!("panicked: {}", crate::error::panic_text(&*payload)).into()),
    )
}

pub(super) fn in_callback_of(entry: &Arc<ModuleEntry>) -> bool {
    IN_CALLBACK.with(|c| c.get()) == Arc::as_ptr(entry) as usize
}

/// How a teardown's errors travel: back to the caller, or (from a drop) into the
/// generation's deferred errors, recorded before the teardown is marked done so that a
/// shutdown waiting for it returns them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    Return,
    Defer,
}

impl ModuleEntry {
    pub(super) fn set_phase(&self, phase: Phase) {
        *lock(&self.phase) = phase;
        self.phase_changed.notify_all();
    }

    /// Runs the teardown callbacks if setup completed and they have not run yet; waits for
    /// setup or teardown running on another thread to finish first.
    pub(crate) fn run_teardown(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        report: Report,
    ) -> Result<()> {
        if in_callback_of(self) {
            return Ok(()); // called from this module's own callback: the outer call tears down
        }
        {
            let mut phase = lock(&self.phase);
            loop {
                match *phase {
                    Phase::SettingUp | Phase::TearingDown => {
                        phase = self
                            .phase_changed
                            .wait(phase)
                            .unwrap_or_else(PoisonError::into_inner)
                    }
                    Phase::Done => return Ok(()),
                    Phase::Ready => break,
                }
            }
            *phase = Phase::TearingDown;
        }
        let view = Module {
            generation: generation.clone(),
            entry: self.clone(),
            counted: false,
        };
        let mine = (self.program.id, self.generation, self.device.bits());
        let outer = CALLBACKS_OF.with(|c| c.replace(mine));
        let errors: Vec<Error> = as_callback_of(self, || {
            self.program
                .teardown
                .iter()
                .filter_map(|cb| call_back(cb, &view).err())
                .map(|source| Error::Callback {
                    callback: "on_teardown",
                    source,
                })
                .collect()
        });
        CALLBACKS_OF.with(|c| c.set(outer));
        let mut result = Error::join(errors);
        if report == Report::Defer {
            generation.defer(result);
            result = Ok(());
        }
        self.set_phase(Phase::Done);
        result
    }

    /// Forgets this module's load lock in its program unless a loader holds it or it
    /// names a newer module, so a program loaded on many devices or generations keeps no
    /// lock per load.
    pub(super) fn forget_slot(self: &Arc<Self>) {
        let mut slots = lock(&self.program.slots);
        let key = (self.generation, self.device);
        // A loader holding the lock holds a clone of it: then it is not read (the loader
        // may be this thread, failing its setup).
        let stale = slots.get(&key).is_some_and(|slot| {
            Arc::strong_count(slot) == 1
                && read(slot)
                    .upgrade()
                    .is_none_or(|current| Arc::ptr_eq(&current, self))
        });
        if stale {
            slots.remove(&key);
        }
    }

    /// Unloads the backend module (waits for launches in flight). Idempotent.
    pub(crate) fn unload_now(&self) -> Result<()> {
        match write(&self.state).take() {
            Some(loaded) => {
                drop(loaded.kernels);
                loaded.raw.unload().map_err(|e| e.in_call("Module::unload"))
            }
            None => Ok(()),
        }
    }
}

impl Resource for ModuleEntry {
    fn prepare(self: Arc<Self>, generation: &Arc<Generation>) -> Result<()> {
        self.run_teardown(generation, Report::Return)
    }

    fn order(&self) -> u64 {
        self.setup_order.load(Ordering::SeqCst)
    }

    fn release(self: Arc<Self>) -> Result<()> {
        let unloaded = self.unload_now();
        self.forget_slot();
        unloaded
    }
}

/// The module of one program on one device. Cloning gives another handle to the same
/// module; the module is unloaded by [`Module::unload`], or when the last handle (including
/// `Kernel`s and the one its [`Program`](crate::Program) keeps) is dropped, or at shutdown.
///
/// ```
/// use offload::{Offload, Program};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let module = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
/// let g = module.global("g")?;
/// assert_eq!(g.size, 4);
/// # Ok::<(), offload::Error>(())
/// ```
pub struct Module {
    pub(super) generation: Arc<Generation>,
    pub(crate) entry: Arc<ModuleEntry>,
    /// False for the views that callbacks get during teardown.
    pub(super) counted: bool,
}

impl Module {
    /// A number that identifies this module; equal for every handle to it.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert_eq!(m.id(), m.clone().id());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.entry.id
    }

    /// The device it is loaded on.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert_eq!(m.device(), dev);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn device(&self) -> Device {
        Device::new(
            self.generation.clone(),
            self.entry.device,
            self.entry.backend,
        )
    }

    pub(crate) fn generation(&self) -> &Arc<Generation> {
        &self.generation
    }

    /// Runs `f` on the loaded module; a typed error if it was unloaded or shut down.
    pub(crate) fn with_loaded<T>(
        &self,
        call: &'static str,
        f: impl FnOnce(&LoadedModule) -> Result<T>,
    ) -> Result<T> {
        let guard = read(&self.entry.state);
        match guard.as_ref() {
            Some(loaded) => f(loaded),
            // A module of an ended generation is shut down, unloaded before or not (L3).
            None if self.entry.unloaded.load(Ordering::SeqCst) && self.generation.is_live() => {
                Err(Error::invalid(call, format!("{self} was unloaded")))
            }
            None => Err(Error::ShutDown {
                call,
                object: self.to_string(),
                caller: crate::Caller::Rust,
            }),
        }
        .map_err(|e| e.on(call, self))
    }

    /// The names of the module's kernels (liboffload's `olIterateSymbols`, kernels).
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert!(m.kernels()?.iter().any(|k| k == "add_one"));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn kernels(&self) -> Result<Vec<String>> {
        self.with_loaded("Module::kernels", |l| Ok(l.raw.kernels()))
    }

    /// The names of the module's globals the host can read or write.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert_eq!(m.globals()?, ["g", "read_only_constant"]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn globals(&self) -> Result<Vec<String>> {
        self.with_loaded("Module::globals", |l| Ok(l.raw.globals()))
    }

    /// Device address and size of a global variable.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert!(m.global("missing").is_err());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn global(&self, name: &str) -> Result<GlobalInfo> {
        self.with_loaded("Module::global", |l| l.raw.global(name))
    }

    pub(super) fn check_global(
        &self,
        call: &'static str,
        l: &LoadedModule,
        name: &str,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        let info = l.raw.global(name)?;
        match offset.checked_add(len) {
            Some(end) if end <= info.size => Ok(()),
            _ => Err(Error::invalid(
                call,
                format!(
                    "range {offset}..+{len} is outside global `{name}` ({} bytes) of {self}",
                    info.size
                ),
            )),
        }
    }

    /// Copies bytes out of a global variable.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// let mut g = [1u8; 4];
    /// m.read_global("g", 0, &mut g)?;
    /// assert_eq!(g, [0; 4]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        const CALL: &str = "Module::read_global";
        self.with_loaded(CALL, |l| {
            self.check_global(CALL, l, name, offset, dst.len())?;
            l.raw.read_global(name, offset, dst)
        })
    }

    /// Copies bytes into a global variable.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// m.write_global("g", 0, &[1, 2, 3, 4])?;
    /// assert!(m.write_global("g", 2, &[1, 2, 3]).is_err()); // past its 4 bytes
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Module::write_global";
        self.with_loaded(CALL, |l| {
            self.check_global(CALL, l, name, offset, src.len())?;
            l.raw.write_global(name, offset, src)
        })
    }

    /// Unloads the module now, whoever else holds it: teardown callbacks run (once), then
    /// the backend unloads it, and every other handle's calls return `InvalidArgument`.
    /// Returns the teardown and unload errors.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// let k = m.kernel("noop")?;
    /// m.unload()?;
    /// assert!(k.module().kernel("noop").is_err());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn unload(self) -> Result<()> {
        const CALL: &str = "Module::unload";
        // After the last shutdown its teardown unloaded it: `ShutDown`, as every handle of
        // an ended generation answers (L3), not `Ok`.
        if !self.generation.is_live() {
            return Err(Error::shut_down().on(CALL, &self));
        }
        self.entry.unloaded.store(true, Ordering::SeqCst);
        release(&self.generation, &self.entry, Report::Return).map_err(|e| e.on(CALL, &self))
    }
}

/// Teardown callbacks, then unload, then forget the module in its generation.
pub(super) fn release(
    generation: &Arc<Generation>,
    entry: &Arc<ModuleEntry>,
    report: Report,
) -> Result<()> {
    let mut errors = Vec::new();
    if let Err(e) = entry.run_teardown(generation, report) {
        errors.push(e);
    }
    // Hold the generation so a concurrent shutdown cannot deinitialise the platform
    // between our check and the unload (after shutdown, its teardown unloaded it).
    let unloaded = generation.with_live(|live| {
        live.forget(Kind::Module, entry.key);
        Ok(entry.unload_now())
    });
    // A shutdown that overtook the release (one its own teardown callback began, say)
    // unloaded the module itself: nothing is left to report here.
    if let Ok(Err(e)) = unloaded {
        errors.push(e);
    }
    entry.forget_slot();
    Error::join(errors)
}

impl Clone for Module {
    /// Another handle to the same module. A clone of the view a teardown callback gets is
    /// a view too: it does not keep the module alive, and dropping it unloads nothing.
    fn clone(&self) -> Self {
        if self.counted {
            self.entry.handles.fetch_add(1, Ordering::SeqCst);
        }
        Module {
            generation: self.generation.clone(),
            entry: self.entry.clone(),
            counted: self.counted,
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // In a forked child the handle is forgotten, its module with it (L9).
        if crate::runtime::fork::forget_in_child(&self.generation) {
            crate::runtime::fork::forget_in_child(&self.entry);
            return;
        }
        if self.counted && self.entry.handles.fetch_sub(1, Ordering::SeqCst) == 1 {
            match release(&self.generation, &self.entry, Report::Defer) {
                Ok(()) | Err(Error::ShutDown { .. }) => {}
                Err(e) => self.generation.defer(Err(e)),
            }
        }
    }
}

impl fmt::Display for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let program = &self.entry.program;
        match &program.label {
            Some(label) => write!(
                f,
                "the {} module of program \"{label}\"",
                self.entry.backend
            ),
            None => write!(
                f,
                "the {} module of a {}-byte program",
                self.entry.backend,
                program.image.len()
            ),
        }
    }
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl PartialEq for Module {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.entry, &other.entry)
    }
}

impl Eq for Module {}
