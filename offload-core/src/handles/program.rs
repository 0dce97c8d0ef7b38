//! Programs and their loading (P1–P4); the modules they load are in `module` (with the
//! state a program's handles share, `ProgramInner`, which its modules name), their kernels in
//! `kernel`, their compiles in the background in `background` (the `Program` calls that
//! start and ask about those are here).
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

use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, RwLock, Weak, lock, read,
    write,
};
use std::cell::Cell;
use std::fmt;

use super::background;
use super::module::*;
use crate::error::{Error, Result};
use crate::hal::Source;
use crate::handles::Device;
use crate::runtime::generation::{Generation, Kind};

/// The program's own handles, one per module it loaded (P2): dropped with the last clone of
/// the [`Program`], which lets their modules go.
#[derive(Default)]
pub(super) struct Kept(Mutex<Vec<Module>>);

impl Kept {
    /// Keeps `module`; gives back the handles it no longer needs (modules unloaded, of
    /// ended generations, or replaced on the same device), for the caller to drop after
    /// letting go of its locks.
    pub(super) fn keep(&self, module: &Module) -> Vec<Module> {
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
/// use offload::{Offload, Program};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let bytes = offload::host::fixtures::KERNELS;
/// let program = Program::new(&bytes); // copies: `bytes` need not outlive it
/// let module = program.load(&dev)?;
/// assert!(module.kernel("add_one").is_ok());
/// # Ok::<(), offload::Error>(())
/// ```
#[derive(Clone)]
pub struct Program {
    pub(super) inner: Arc<ProgramInner>,
    pub(super) kept: Arc<Kept>,
}

impl Program {
    /// Copies `image` into a new program.
    ///
    /// ```
    /// let p = offload::Program::new(b"any bytes");
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
                background: background::Tasks::default(),
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
    /// use offload::{BackendKind, Error, Offload, Program, Source};
    /// let rt = Offload::init()?;
    /// let cpu = rt.device(BackendKind::Host)?;
    /// let p = Program::from_source(Source::c(r#"
    ///     #include "offload_host.h"
    ///     OFFLOAD_KERNEL(first_to_zero, "b") { (void)launch; OFFLOAD_BUFFER(uint32_t, 0)[0] = 0; }
    /// "#));
    /// assert_eq!(p.load(&cpu)?.kernels()?, ["first_to_zero"]);
    /// // A compile error holds the compiler's log; a language with no compiler here is refused.
    /// let bad = Program::from_source(Source::c("not C")).load(&cpu);
    /// assert!(matches!(bad, Err(Error::Compile { .. })), "{bad:?}");
    /// let wgsl = Program::from_source(Source::wgsl("@compute @workgroup_size(1) fn main() {}"));
    /// assert!(matches!(wgsl.load(&cpu), Err(Error::Unsupported { .. })));
    /// # Ok::<(), offload::Error>(())
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
                background: background::Tasks::default(),
            }),
            kept: Arc::default(),
        }
    }

    /// The source of a program made by [`Program::from_source`].
    ///
    /// ```
    /// let p = offload::Program::from_source(offload::Source::wgsl("// wgsl"));
    /// assert_eq!(p.source().map(|s| s.text()), Some("// wgsl"));
    /// assert!(offload::Program::new(b"x").source().is_none());
    /// ```
    pub fn source(&self) -> Option<&Source> {
        self.inner.source.as_ref().map(|(s, _)| s)
    }

    /// Names the program, as wgpu's `label:` does: errors and logs about its modules and
    /// kernels call it by this name. Set it before loading, like the callbacks (on a
    /// program already shared by clones it makes a new program).
    ///
    /// ```
    /// use offload::{Offload, Program};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(offload::host::fixtures::KERNELS).label("kernels").load(&dev)?;
    /// assert!(module.to_string().contains(r#"program "kernels""#), "{module}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn label(self, label: impl Into<String>) -> Program {
        let label: Arc<str> = Arc::from(label.into());
        self.with(|p| p.label = Some(label))
    }

    /// A number that identifies this program.
    ///
    /// ```
    /// let a = offload::Program::new(b"x");
    /// assert_eq!(a.id(), a.clone().id());
    /// assert_ne!(a.id(), offload::Program::new(b"x").id());
    /// ```
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The image bytes.
    ///
    /// ```
    /// assert_eq!(offload::Program::new([1u8, 2]).image(), &[1, 2]);
    /// ```
    pub fn image(&self) -> &[u8] {
        &self.inner.image
    }

    pub(super) fn with(mut self, f: impl FnOnce(&mut ProgramInner)) -> Program {
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
            background: background::Tasks::default(),
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
    /// use offload::{Offload, Program};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(offload::host::fixtures::KERNELS)
    ///     .on_setup(|m| Ok(m.write_global("g", 0, &7u32.to_ne_bytes())?))
    ///     .load(&dev)?;
    /// let mut g = [0u8; 4];
    /// module.read_global("g", 0, &mut g)?;
    /// assert_eq!(u32::from_ne_bytes(g), 7);
    /// # Ok::<(), offload::Error>(())
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
    /// use offload::{Offload, Program};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(offload::host::fixtures::KERNELS)
    ///     .on_teardown(|_| Err("flush failed".into()))
    ///     .load(&dev)?;
    /// assert!(matches!(module.unload(), Err(offload::Error::Callback { .. })));
    /// # Ok::<(), offload::Error>(())
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
    /// use offload::{Offload, Program};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let p = Program::new(offload::host::fixtures::KERNELS);
    /// let first = p.load(&dev)?.id(); // every handle dropped at once: the program keeps it
    /// assert_eq!(first, p.load(&dev)?.id());
    /// assert!(matches!(
    ///     Program::new(b"garbage").load(&dev),
    ///     Err(offload::Error::InvalidBinary { .. })
    /// ));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn load(&self, device: &Device) -> Result<Module> {
        load(self, device).map_err(|e| e.on("Program::load", device))
    }
}

// Compiling in the background: the calls of `Program` that start the compiles the pool of
// `background` runs, and ask whether they ended.
impl Program {
    /// Starts compiling this program for `device` on the runtime's compile pool and
    /// returns at once, so the application keeps running while it compiles (Proteus's
    /// asynchronous compilation). The first [`load`](Program::load) there waits for the
    /// compile and uses its result (it never compiles again); a compile error comes back
    /// from that `load`, as `Error::Compile` with the compiler's log. Many programs compile
    /// in parallel, up to `Config::compile_threads` at once (`OFFLOAD_COMPILE_THREADS`,
    /// `Offload::builder().compile_threads(n)`); the rest wait in a queue, and a `load` of
    /// one still queued compiles it at once on its own thread.
    ///
    /// Nothing to do (`Ok`) for a program made from an image, one already scheduled,
    /// compiled or loaded there, or with no pool (`compile_threads` 0: it compiles at its
    /// first load). `Error::ShutDown` once the device's runtime is shutting down: the
    /// shutdown abandons compiles still queued and waits for the running ones (L2).
    ///
    /// ```
    /// use offload::{BackendKind, Offload, Program, Source};
    /// let rt = Offload::builder().compile_threads(2).start()?;
    /// let cpu = rt.device(BackendKind::Host)?;
    /// let p = Program::from_source(Source::c(
    ///     "#include \"offload_host.h\"\nOFFLOAD_KERNEL(nothing, \"\") { (void)launch; }\n",
    /// ));
    /// p.compile_in_background(&cpu)?; // returns at once
    /// // ... the application goes on; then the load waits for the compile and reports it.
    /// assert_eq!(p.load(&cpu)?.kernels()?, ["nothing"]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn compile_in_background(&self, device: &Device) -> Result<()> {
        // L3: a device of a finished generation answers `ShutDown`, not a compile queued
        // for nothing.
        device
            .generation()
            .with_live(|_| Ok(()))
            .and_then(|()| background::schedule(&self.inner.source, &self.inner.background, device))
            .map_err(|e| e.on("Program::compile_in_background", device))
    }

    /// Whether this program's compile for `device` has ended, so that
    /// [`load`](Program::load) there will not wait for a compiler: `true` for a program
    /// made from an image, and once a compile started by
    /// [`compile_in_background`](Program::compile_in_background) or by a `load` ended,
    /// successfully or not (`load` then reports its error). `false` while it is queued or
    /// running, and for a program from source not compiled there yet.
    ///
    /// ```
    /// use offload::{BackendKind, Offload, Program, Source};
    /// let rt = Offload::init()?;
    /// let cpu = rt.device(BackendKind::Host)?;
    /// assert!(Program::new(offload::host::fixtures::KERNELS).compile_finished(&cpu));
    /// let p = Program::from_source(Source::c("not C"));
    /// assert!(!p.compile_finished(&cpu), "never compiled there");
    /// p.compile_in_background(&cpu)?;
    /// while !p.compile_finished(&cpu) {
    ///     std::thread::yield_now(); // or do something useful
    /// }
    /// assert!(p.load(&cpu).is_err(), "the compile failed: load reports it, with the log");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn compile_finished(&self, device: &Device) -> bool {
        if self.inner.source.is_none() {
            return true;
        }
        background::finished(&self.inner.background, device)
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

// The call of a `Module` that names its program: here, so that `module` names no `Program`.
impl Module {
    /// The program this module was loaded from, without a share in keeping its modules: a
    /// callback can load its own program again through it without keeping the module it
    /// runs for alive.
    ///
    /// ```
    /// use offload::{Offload, Program};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let module = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// let again = module.program().load(&dev)?; // the same program: the same module
    /// assert_eq!(again.id(), module.id());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn program(&self) -> Program {
        Program {
            inner: self.entry.program.clone(),
            kept: Arc::default(),
        }
    }
}

/// Another handle to the slot's module, if it is loaded and not on its way out.
pub(super) fn revive(generation: &Arc<Generation>, slot: &Weak<ModuleEntry>) -> Option<Module> {
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

pub(super) fn load(program: &Program, device: &Device) -> Result<Module> {
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
            background::image_for_load(&program.inner.background, device, || {
                compiled.image(source, &raw, &generation.config)
            })?
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
