//! Programs, modules and kernels (P1–P4).
//!
//! A [`Program`] is a device-independent copy of an image plus its setup and teardown
//! callbacks. `program.load(&device)` gives the one [`Module`] for that (program, device):
//! the program keeps a lock per device it was loaded on (never one global lock), so the
//! backend loads once and runs setup once, while different programs load in parallel
//! (P2, P3).
//!
//! A module lives while its `Program` (any clone of it) or any `Module` handle (or `Kernel`,
//! which holds one) lives, until an explicit `unload()`, or until runtime shutdown: the
//! program keeps a handle of its own per loaded module (numba-cuda's lesson: one module per
//! context, reused by every later caller), so a later `load` on that device finds it without
//! loading or running setup again, even after every other handle was dropped (P2).
//! Teardown callbacks run exactly once before the backend unloads it. Its backend objects
//! live in the generation, so a handle that outlives them gets a typed error, never a
//! dangling driver object.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, Weak};

use crate::compile::Compiled;
use crate::erased::{DynKernel, DynProgram};
use crate::error::{Error, Result};
use crate::hal::{BackendKind, GlobalInfo, ParamKind, Source};
use crate::handles::Device;
use crate::runtime::generation::{DeviceKey, Generation, Kind, Resource, ResourceKey};
use crate::sync::{lock, read, write};

/// The error a callback returns.
pub type CallbackError = Box<dyn std::error::Error + Send + Sync>;

type Callback = Arc<dyn Fn(&Module) -> std::result::Result<(), CallbackError> + Send + Sync>;

/// Process-wide source of program and module ids (const-initialised, so it starts over
/// with the library; ids only need to be unique among live objects).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

struct ProgramInner {
    id: u64,
    image: Arc<[u8]>,
    setup: Vec<Callback>,
    teardown: Vec<Callback>,
    /// The user's name for it ([`Program::label`]), for messages.
    label: Option<Arc<str>>,
    /// For a program from source: the source, and what it compiled to per target.
    source: Option<(Source, Arc<Compiled>)>,
    /// The lock of each (generation, device) this program is loaded on, naming its module
    /// once loaded (P2). Entries go when their module is released.
    slots: Mutex<HashMap<(u64, DeviceKey), Arc<LoadSlot>>>,
}

/// The load lock of one (program, device): its module once loaded.
type LoadSlot = RwLock<Weak<ModuleEntry>>;

/// The program's own handles, one per module it loaded (P2): dropped with the last clone of
/// the [`Program`], which lets their modules go.
#[derive(Default)]
struct Kept(Mutex<Vec<Module>>);

impl Kept {
    /// Keeps `module`; gives back the handles it no longer needs (modules unloaded, of
    /// ended generations, or replaced on the same device), for the caller to drop after
    /// letting go of its locks.
    fn keep(&self, module: &Module) -> Vec<Module> {
        let mut kept = lock(&self.0);
        let (stale, live): (Vec<Module>, Vec<Module>) =
            std::mem::take(&mut *kept).into_iter().partition(|m| {
                !m.generation.is_live()
                    || m.entry.unloaded.load(Ordering::SeqCst)
                    || (Arc::ptr_eq(&m.generation, &module.generation)
                        && m.entry.device == module.entry.device)
            });
        *kept = live;
        kept.push(module.clone());
        stale
    }
}

/// A program image, independent of any device (P1). Cheap to clone; clones are the same
/// program, and keep its modules loaded (P2).
///
/// ```
/// use offload_core::{Program, reference::{self, Offload}};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let bytes = reference::fixture_image();
/// let program = Program::new(&bytes); // copies: `bytes` need not outlive it
/// let module = program.load(&dev)?;
/// assert!(module.kernel("add_one").is_ok());
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Program {
    inner: Arc<ProgramInner>,
    kept: Arc<Kept>,
}

impl Program {
    /// Copies `image` into a new program.
    ///
    /// ```
    /// let p = offload_core::Program::new(b"any bytes");
    /// assert_eq!(p.image(), b"any bytes");
    /// ```
    pub fn new(image: impl AsRef<[u8]>) -> Program {
        Program {
            inner: Arc::new(ProgramInner {
                id: next_id(),
                image: Arc::from(image.as_ref()),
                setup: Vec::new(),
                teardown: Vec::new(),
                label: None,
                source: None,
                slots: Mutex::default(),
            }),
            kept: Arc::default(),
        }
    }

    /// A program from source, compiled for each device's target when it is first loaded
    /// there: WGSL for Vulkan (naga), C for the host (the system C compiler), CUDA C++ for
    /// CUDA (nvrtc). One compile per (program, compiler, target), however many threads
    /// and devices load it; the result is also kept in the compile cache on disk
    /// (`OFFLOAD_CACHE_DIR`), so another process skips the compile. A compile error is
    /// `Error::Compile` with the compiler's log; a backend that compiles no such language
    /// answers `Error::Unsupported`.
    ///
    /// ```
    /// use offload_core::{Error, Program, Source, reference::Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let p = Program::from_source(Source::c("void f(void) {}"));
    /// // The reference backend compiles nothing:
    /// assert!(matches!(p.load(&dev), Err(Error::Unsupported { .. })));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn from_source(source: Source) -> Program {
        Program {
            inner: Arc::new(ProgramInner {
                id: next_id(),
                image: Arc::from(source.text().as_bytes()),
                setup: Vec::new(),
                teardown: Vec::new(),
                label: None,
                source: Some((source, Arc::default())),
                slots: Mutex::default(),
            }),
            kept: Arc::default(),
        }
    }

    /// The source of a program made by [`Program::from_source`].
    ///
    /// ```
    /// let p = offload_core::Program::from_source(offload_core::Source::wgsl("// wgsl"));
    /// assert_eq!(p.source().map(|s| s.text()), Some("// wgsl"));
    /// assert!(offload_core::Program::new(b"x").source().is_none());
    /// ```
    pub fn source(&self) -> Option<&Source> {
        self.inner.source.as_ref().map(|(s, _)| s)
    }

    /// Names the program, as wgpu's `label:` does: errors and logs about its modules and
    /// kernels call it by this name. Set it before loading, like the callbacks (on a
    /// program already shared by clones it makes a new program).
    ///
    /// ```
    /// use offload_core::{Program, reference::{self, Offload}};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(reference::fixture_image()).label("kernels").load(&dev)?;
    /// assert!(module.to_string().contains(r#"program "kernels""#), "{module}");
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn label(self, label: impl Into<String>) -> Program {
        let label: Arc<str> = Arc::from(label.into());
        self.with(|p| p.label = Some(label))
    }

    /// A number that identifies this program.
    ///
    /// ```
    /// let a = offload_core::Program::new(b"x");
    /// assert_eq!(a.id(), a.clone().id());
    /// assert_ne!(a.id(), offload_core::Program::new(b"x").id());
    /// ```
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The image bytes.
    ///
    /// ```
    /// assert_eq!(offload_core::Program::new([1u8, 2]).image(), &[1, 2]);
    /// ```
    pub fn image(&self) -> &[u8] {
        &self.inner.image
    }

    fn with(mut self, f: impl FnOnce(&mut ProgramInner)) -> Program {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            f(inner);
            return self;
        }
        // Shared: callbacks make a different program (a new id, so a new module).
        let mut inner = ProgramInner {
            id: next_id(),
            image: self.inner.image.clone(),
            setup: self.inner.setup.clone(),
            teardown: self.inner.teardown.clone(),
            label: self.inner.label.clone(),
            source: self.inner.source.clone(),
            slots: Mutex::default(),
        };
        f(&mut inner);
        Program {
            inner: Arc::new(inner),
            kept: Arc::default(),
        }
    }

    /// Adds a callback that runs once per module, after the backend loaded it and before any
    /// of its kernels can launch (P3). If it fails, the module is unloaded and `load`
    /// returns `Error::Callback`.
    ///
    /// ```
    /// use offload_core::{Program, reference::{self, Offload}};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(reference::fixture_image())
    ///     .on_setup(|m| Ok(m.write_global("g", 0, &7u32.to_ne_bytes())?))
    ///     .load(&dev)?;
    /// let mut g = [0u8; 4];
    /// module.read_global("g", 0, &mut g)?;
    /// assert_eq!(u32::from_ne_bytes(g), 7);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn on_setup(
        self,
        f: impl Fn(&Module) -> std::result::Result<(), CallbackError> + Send + Sync + 'static,
    ) -> Program {
        self.with(|p| p.setup.push(Arc::new(f)))
    }

    /// Adds a callback that runs exactly once before the module is unloaded: by
    /// `unload()`, by the last drop, or by runtime shutdown (newest module first). Its
    /// error is returned by whichever of those unloaded the module.
    ///
    /// ```
    /// use offload_core::{Program, reference::{self, Offload}};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(reference::fixture_image())
    ///     .on_teardown(|_| Err("flush failed".into()))
    ///     .load(&dev)?;
    /// assert!(matches!(module.unload(), Err(offload_core::Error::Callback { .. })));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn on_teardown(
        self,
        f: impl Fn(&Module) -> std::result::Result<(), CallbackError> + Send + Sync + 'static,
    ) -> Program {
        self.with(|p| p.teardown.push(Arc::new(f)))
    }

    /// The module of this program on `device`: loaded by the first caller, shared by every
    /// other, and kept loaded while the program lives, so a later `load` returns the same
    /// module without loading it or running setup again (P2). Corrupt or foreign images are
    /// `Error::InvalidBinary`.
    ///
    /// ```
    /// use offload_core::{Program, reference::{self, Offload}};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let p = Program::new(reference::fixture_image());
    /// let first = p.load(&dev)?.id(); // every handle dropped at once: the program keeps it
    /// assert_eq!(first, p.load(&dev)?.id());
    /// assert!(matches!(
    ///     Program::new(b"garbage").load(&dev),
    ///     Err(offload_core::Error::InvalidBinary { .. })
    /// ));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn load(&self, device: &Device) -> Result<Module> {
        load(self, device).map_err(|e| e.on("Program::load", device))
    }
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("id", &self.inner.id)
            .field("label", &self.inner.label)
            .field("bytes", &self.inner.image.len())
            .field("setup_callbacks", &self.inner.setup.len())
            .field("teardown_callbacks", &self.inner.teardown.len())
            .finish()
    }
}

/// One kernel the backend resolved in a module.
pub(crate) struct KernelSlot {
    name: String,
    params: Arc<[ParamKind]>,
    pub(crate) raw: Box<dyn DynKernel>,
}

/// A loaded module's backend objects.
pub(crate) struct LoadedModule {
    raw: Box<dyn DynProgram>,
    pub(crate) kernels: RwLock<Vec<KernelSlot>>,
}

/// A module, shared by its handles and listed in its generation.
pub(crate) struct ModuleEntry {
    id: u64,
    key: ResourceKey,
    /// Its generation's id, part of its load lock's key.
    generation: u64,
    pub(crate) device: DeviceKey,
    backend: BackendKind,
    program: Arc<ProgramInner>,
    /// Order of setup completion, for LIFO teardown at shutdown.
    pub(crate) setup_order: AtomicU64,
    /// Counted `Module` handles; the one that brings it to zero unloads.
    handles: AtomicUsize,
    /// Set by an explicit `unload()`.
    unloaded: AtomicBool,
    /// Where the module is in its setup/teardown life (P3), with a condition variable for
    /// whoever must wait for a callback another thread is running.
    phase: Mutex<Phase>,
    phase_changed: Condvar,
    pub(crate) state: RwLock<Option<LoadedModule>>,
}

/// The callback life of a module: teardown runs exactly once, only after setup completed,
/// and the module is unloaded only after teardown finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Setup callbacks are running.
    SettingUp,
    /// Setup completed; teardown has not started.
    Ready,
    /// Teardown callbacks are running.
    TearingDown,
    /// Teardown ran, or setup failed (then there is nothing to tear down).
    Done,
}

thread_local! {
    /// The module whose callbacks this thread is running (its address), so a callback that
    /// unloads or drops its own module does not wait for itself. A const-initialised `Cell`
    /// with no destructor: it registers nothing that would pin a `dlclose`d library (L2).
    static IN_CALLBACK: Cell<usize> = const { Cell::new(0) };
    /// The (program id, generation id, device) whose setup or teardown callbacks this
    /// thread runs, so that a callback loading its own program there is refused instead of
    /// waiting for itself on the load lock (setup) or loading and tearing down without end
    /// (teardown). Const-initialised, no destructor (L2).
    static CALLBACKS_OF: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// Runs `f` marked as a callback of `entry` on this thread.
fn as_callback_of<T>(entry: &Arc<ModuleEntry>, f: impl FnOnce() -> T) -> T {
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
fn call_back(callback: &Callback, module: &Module) -> std::result::Result<(), CallbackError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(module))).unwrap_or_else(
        |payload| Err(format!("panicked: {}", crate::error::panic_text(&*payload)).into()),
    )
}

fn in_callback_of(entry: &Arc<ModuleEntry>) -> bool {
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
    fn set_phase(&self, phase: Phase) {
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
    fn forget_slot(self: &Arc<Self>) {
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
                loaded.raw.unload()
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
/// `Kernel`s and the one its [`Program`] keeps) is dropped, or at shutdown.
///
/// ```
/// use offload_core::{Program, reference::{self, Offload}};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let module = Program::new(reference::fixture_image()).load(&dev)?;
/// let g = module.global("g")?;
/// assert_eq!(g.size, 4);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Module {
    generation: Arc<Generation>,
    pub(crate) entry: Arc<ModuleEntry>,
    /// False for the views that callbacks get during teardown.
    counted: bool,
}

impl Module {
    /// A number that identifies this module; equal for every handle to it.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert_eq!(m.id(), m.clone().id());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.entry.id
    }

    /// The device it is loaded on.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert_eq!(m.device(), dev);
    /// # Ok::<(), offload_core::Error>(())
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

    /// Its program, without a share in keeping its modules (the conformance suite's
    /// callbacks load their own program through it without holding it).
    #[cfg(feature = "conformance")]
    pub(crate) fn program(&self) -> Program {
        Program {
            inner: self.entry.program.clone(),
            kept: Arc::default(),
        }
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
            None if self.entry.unloaded.load(Ordering::SeqCst) => {
                Err(Error::invalid(call, format!("{self} was unloaded")))
            }
            None => Err(Error::ShutDown {
                call,
                object: self.to_string(),
            }),
        }
        .map_err(|e| e.on(call, self))
    }

    /// Looks up a kernel. A name the module lacks is `Error::SymbolNotFound`.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert!(m.kernel("noop").is_ok());
    /// let err = m.kernel("nope").unwrap_err();
    /// assert!(matches!(err, offload_core::Error::SymbolNotFound { .. }));
    /// // The error lists what the module has.
    /// assert!(err.to_string().contains("add_one"), "{err}");
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let find = |kernels: &[KernelSlot]| {
            let index = kernels.iter().position(|k| k.name == name)?;
            Some((index, kernels[index].params.clone()))
        };
        self.with_loaded("Module::kernel", |loaded| {
            if let Some(found) = find(&read(&loaded.kernels)) {
                return Ok(found);
            }
            let raw = loaded.raw.kernel(name).map_err(|e| match e {
                Error::SymbolNotFound {
                    backend,
                    call,
                    symbol,
                    hint,
                } if hint.is_empty() => {
                    let kernels = loaded.raw.kernels();
                    let hint = if kernels.is_empty() {
                        "the module has no kernels".to_string()
                    } else {
                        format!("the module's kernels are `{}`", kernels.join("`, `"))
                    };
                    Error::SymbolNotFound {
                        backend,
                        call,
                        symbol,
                        hint,
                    }
                }
                other => other,
            })?;
            let params: Arc<[ParamKind]> = Arc::from(raw.params());
            let mut kernels = write(&loaded.kernels);
            // Another thread may have resolved it meanwhile: keep one slot per name.
            if let Some(found) = find(&kernels) {
                return Ok(found);
            }
            kernels.push(KernelSlot {
                name: name.to_string(),
                params: params.clone(),
                raw,
            });
            Ok((kernels.len() - 1, params))
        })
        .and_then(|(index, params)| {
            let verified = self.with_loaded("Module::kernel", |l| Ok(l.raw.verified()))?;
            Ok(Kernel {
                module: self.clone(),
                index,
                name: Arc::from(name),
                params,
                verified,
            })
        })
    }

    /// The names of the module's kernels (liboffload's `olIterateSymbols`, kernels).
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert!(m.kernels()?.iter().any(|k| k == "add_one"));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn kernels(&self) -> Result<Vec<String>> {
        self.with_loaded("Module::kernels", |l| Ok(l.raw.kernels()))
    }

    /// The names of the module's globals the host can read or write.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert_eq!(m.globals()?, ["g"]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn globals(&self) -> Result<Vec<String>> {
        self.with_loaded("Module::globals", |l| Ok(l.raw.globals()))
    }

    /// Device address and size of a global variable.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert!(m.global("missing").is_err());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn global(&self, name: &str) -> Result<GlobalInfo> {
        self.with_loaded("Module::global", |l| l.raw.global(name))
    }

    fn check_global(
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
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// let mut g = [1u8; 4];
    /// m.read_global("g", 0, &mut g)?;
    /// assert_eq!(g, [0; 4]);
    /// # Ok::<(), offload_core::Error>(())
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
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// m.write_global("g", 0, &[1, 2, 3, 4])?;
    /// assert!(m.write_global("g", 2, &[1, 2, 3]).is_err()); // past its 4 bytes
    /// # Ok::<(), offload_core::Error>(())
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
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// let k = m.kernel("noop")?;
    /// m.unload()?;
    /// assert!(k.module().kernel("noop").is_err());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn unload(self) -> Result<()> {
        self.entry.unloaded.store(true, Ordering::SeqCst);
        release(&self.generation, &self.entry, Report::Return)
    }
}

/// Teardown callbacks, then unload, then forget the module in its generation.
fn release(generation: &Arc<Generation>, entry: &Arc<ModuleEntry>, report: Report) -> Result<()> {
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

/// An entry point of a module. Holds its module alive.
///
/// ```
/// # use offload_core::{Program, reference::{self, Offload}};
/// # let rt = Offload::init()?;
/// # let dev = rt.devices()?.remove(0);
/// let k = Program::new(reference::fixture_image()).load(&dev)?.kernel("add_one")?;
/// assert_eq!(k.name(), "add_one");
/// assert_eq!(k.params().len(), 2);
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Kernel {
    module: Module,
    pub(crate) index: usize,
    name: Arc<str>,
    params: Arc<[ParamKind]>,
    /// Whether its program is proven memory-safe to launch (`hal::Program::verified`).
    verified: bool,
}

impl Kernel {
    /// Whether offload proved this kernel memory-safe to launch, so that
    /// [`Queue::run`](crate::Queue::run) launches it without `unsafe`: today, kernels of
    /// WGSL programs offload compiled (`Program::from_source(Source::wgsl(..))`), whose
    /// every access is clamped into its buffer. Native and prebuilt device code is not.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(reference::fixture_image()).load(&dev)?.kernel("noop")?;
    /// assert!(!k.is_verified());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    /// Its name in the module.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(reference::fixture_image()).load(&dev)?.kernel("noop")?;
    /// assert_eq!(k.name(), "noop");
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parameters the kernel declares.
    ///
    /// ```
    /// # use offload_core::{Program, ParamKind, ScalarType::U32, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(reference::fixture_image()).load(&dev)?.kernel("fill")?;
    /// assert_eq!(k.params(), &[ParamKind::Buffer, ParamKind::Typed(U32), ParamKind::Typed(U32)]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn params(&self) -> &[ParamKind] {
        &self.params
    }

    /// The module it belongs to.
    ///
    /// ```
    /// # use offload_core::{Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(reference::fixture_image()).load(&dev)?;
    /// assert_eq!(m.kernel("noop")?.module(), &m);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn module(&self) -> &Module {
        &self.module
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}` of {}", self.name, self.module)
    }
}

/// `kernel `saxpy` of the vulkan module of program "blas"`.
impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Another handle to the slot's module, if it is loaded and not on its way out.
fn revive(generation: &Arc<Generation>, slot: &Weak<ModuleEntry>) -> Option<Module> {
    let entry = slot.upgrade()?;
    entry
        .handles
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
            (h > 0).then_some(h + 1)
        })
        .ok()?;
    let module = Module {
        generation: generation.clone(),
        entry,
        counted: true,
    };
    // Unloaded explicitly: dropping `module` gives the handle back.
    let loaded = read(&module.entry.state).is_some();
    loaded.then_some(module)
}

fn load(program: &Program, device: &Device) -> Result<Module> {
    let generation = device.generation();
    // Shutdown waits for loads in flight (setup included) before it tears modules down,
    // and loads that start after it began get ShutDown.
    let _in_flight = generation.begin_load().ok_or_else(Error::shut_down)?;
    if !generation.is_live() {
        return Err(Error::shut_down());
    }
    if CALLBACKS_OF.with(Cell::get) == (program.inner.id, generation.id, device.key_bits()) {
        return Err(Error::invalid(
            "Program::load",
            format!(
                "a setup or teardown callback loads its own program again on {device}: its \
                 module is not ready before setup returns, and is going away during teardown \
                 (L6); use the module the callback is given"
            ),
        ));
    }
    let slot = {
        let mut slots = lock(&program.inner.slots);
        let key = (generation.id, device.key());
        if !slots.contains_key(&key) {
            // Drop the locks no loader holds and no module names (loads that failed, in
            // this or an ended generation), so a program kept across many generations or
            // failing loads keeps none. A lock a loader holds has a clone out: it is never
            // read here (that loader may be waiting for `slots`).
            slots.retain(|_, slot| Arc::strong_count(slot) > 1 || read(slot).strong_count() > 0);
        }
        slots.entry(key).or_default().clone()
    };
    // Once the module is loaded, callers only read the slot, all at once.
    if let Some(module) = revive(generation, &read(&slot)) {
        return Ok(module);
    }
    // The lock of this (program, device): the first caller loads and runs setup while the
    // others wait here (other keys load in parallel); they then find the module.
    let mut current = write(&slot);
    if let Some(module) = revive(generation, &current) {
        return Ok(module);
    }
    let _span = tracing::debug_span!(
        target: "offload::load",
        "load",
        program = program.inner.label.as_deref().unwrap_or(""),
        bytes = program.inner.image.len(),
        device = %device,
    )
    .entered();
    // A program from source: its image for this device's target (compiled once per
    // target, outside the generation's lock: a compile can take seconds).
    let image = match &program.inner.source {
        None => program.inner.image.clone(),
        Some((source, compiled)) => {
            let raw = generation.with_live(|live| Ok(live.device(device.key())?.clone()))?;
            compiled.image(source, &raw, &generation.config)?
        }
    };
    let entry = generation.with_live(|live| {
        let raw = live
            .device(device.key())?
            .clone()
            .load(&image)
            .inspect_err(|e| tracing::debug!(target: "offload::load", error = %e, "load failed"))?;
        tracing::debug!(target: "offload::load", "loaded");
        let (_, entry) = live.register(Kind::Module, |key| {
            Arc::new(ModuleEntry {
                id: next_id(),
                key,
                generation: generation.id,
                device: device.key(),
                backend: device.backend(),
                program: program.inner.clone(),
                setup_order: AtomicU64::new(0),
                handles: AtomicUsize::new(1),
                unloaded: AtomicBool::new(false),
                phase: Mutex::new(Phase::SettingUp),
                phase_changed: Condvar::new(),
                state: RwLock::new(Some(LoadedModule {
                    raw,
                    kernels: RwLock::new(Vec::new()),
                })),
            })
        })?;
        Ok(entry)
    })?;
    let module = Module {
        generation: generation.clone(),
        entry,
        counted: true,
    };
    // P3: setup runs before anyone else can have the module (they wait on `slot`).
    let setting_up = (program.inner.id, generation.id, device.key_bits());
    let outer = CALLBACKS_OF.with(|c| c.replace(setting_up));
    let failed = as_callback_of(&module.entry, || {
        program
            .inner
            .setup
            .iter()
            .find_map(|setup| call_back(setup, &module).err())
    });
    CALLBACKS_OF.with(|c| c.set(outer));
    if let Some(source) = failed {
        // A failed setup unloads without teardown (setup never completed).
        module.entry.set_phase(Phase::Done);
        module.entry.unloaded.store(true, Ordering::SeqCst);
        let mut errors = vec![Error::Callback {
            callback: "on_setup",
            source,
        }];
        errors.extend(release(generation, &module.entry, Report::Return).err());
        return Err(Error::join(errors).err().unwrap_or_else(Error::shut_down));
    }
    module.entry.set_phase(Phase::Ready);
    if read(&module.entry.state).is_none() {
        // A setup callback unloaded its own module.
        return Err(Error::invalid(
            "Program::load",
            format!("{module} was unloaded by its own setup callback"),
        ));
    }
    module
        .entry
        .setup_order
        .store(generation.next_setup_order(), Ordering::SeqCst);
    *current = Arc::downgrade(&module.entry);
    let stale = program.kept.keep(&module);
    drop(current);
    drop(stale);
    Ok(module)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{self, Offload};

    /// A program keeps no load lock per load: not for modules released, nor for loads that
    /// failed, across generations.
    #[test]
    fn load_locks_do_not_accumulate() {
        let good = Program::new(reference::fixture_image());
        let bad = Program::new(b"not a reference image");
        for _ in 0..50 {
            let rt = Offload::init().unwrap();
            let dev = rt.devices().unwrap().remove(0);
            let module = good.load(&dev).unwrap();
            assert_eq!(lock(&good.inner.slots).len(), 1);
            drop(module);
            assert!(bad.load(&dev).is_err());
            rt.shutdown().unwrap();
        }
        assert_eq!(lock(&good.inner.slots).len(), 0);
        assert!(lock(&bad.inner.slots).len() <= 1);
    }
}
