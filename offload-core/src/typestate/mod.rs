//! The runtime handle users hold: [`Offload`] in its typestates (`Uninit` → `Ready` →
//! `Shutdown`, L3), its builder and configuration (L5), and the queries of a live runtime
//! (platforms, devices, the IPC endpoint). The top of the crate: it starts and gives back
//! generations through the process-wide lifecycle (`runtime::lifecycle`, L1, L2) and hands
//! out the handles below it.

use crate::sync::{Arc, OnceLock};
use std::marker::PhantomData;

use crate::config::{Config, Overrides, list};
use crate::erased::{NoPlatforms, PlatformEntry, Platforms};
use crate::error::{Caller, Error, Result};
use crate::hal::BackendKind;
use crate::handles::Device;
use crate::runtime::generation::{Generation, Live, MakeExtension};
use crate::runtime::lifecycle::{acquire, release, retain};
use crate::runtime::platforms::PlatformSlot;
use crate::runtime::platforms::Unavailable;
use crate::runtime::unreported::report_later;

/// What every generation carries beside its platforms: the IPC state (`crate::ipc`) and
/// the pool that compiles programs in the background (`crate::handles::background`).
const EXTENSIONS: &[MakeExtension] = &[crate::ipc::extension, crate::handles::compile_pool];

/// A platform of a live runtime.
///
/// ```
/// # use offload::Offload;
/// let rt = Offload::init()?;
/// let p = &rt.platforms()?[0];
/// assert_eq!(p.backend, offload::BackendKind::Host);
/// assert_eq!(p.devices, 1);
/// # Ok::<(), offload::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlatformInfo {
    /// Its backend.
    pub backend: BackendKind,
    /// The platform's own name (driver or instance).
    pub name: String,
    /// How many devices it has.
    pub devices: usize,
}

/// Typestate: a runtime being configured. See [`Offload::builder`].
#[derive(Debug, Default)]
pub struct Uninit {
    set: Overrides,
    extra: Vec<PlatformEntry>,
    /// The language of the code that calls this runtime ([`Offload::caller`]).
    caller: Caller,
}

/// Typestate: a reference to the live runtime. Dropping it gives the reference back.
pub struct Ready {
    generation: Arc<Generation>,
    /// False once this reference was given back (by `shutdown`).
    holds: bool,
    /// The handles [`Offload::device_list`] lends, made at its first call on this
    /// reference. Here rather than in the generation, which they keep alive: no cycle.
    devices: OnceLock<Box<[Device]>>,
    /// The language of the code that holds this reference ([`Offload::caller`]); a clone
    /// keeps it.
    caller: Caller,
}

/// Typestate: a reference that was shut down. It has no device methods.
#[derive(Debug)]
pub struct Shutdown {
    generation: u64,
    last: bool,
}

/// The offload runtime, in typestate `S` (`Uninit`, `Ready`, `Shutdown`), opening the
/// default platforms `P` (the facade `offload` fixes `P` to the backends compiled in).
///
/// `Offload::init()` is reference counted and thread-safe (L1): the first call opens the
/// platforms, concurrent callers wait for it, and every call returns its own `Offload<Ready>`.
/// The last `shutdown()` (or drop) deinitialises everything, and `init()` works again with
/// fresh state (L2).
///
/// ```standalone_crate
/// use offload::{MemKind, Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let buf = dev.alloc(64, MemKind::Device)?;
/// buf.write(0, &[7; 64])?;
/// let down = rt.shutdown()?;
/// assert!(down.was_last());
/// assert!(matches!(buf.write(0, &[1]), Err(offload::Error::ShutDown { .. })));
/// # Ok::<(), offload::Error>(())
/// ```
pub struct Offload<S = Ready, P = NoPlatforms> {
    state: S,
    platforms: PhantomData<fn() -> P>,
}

impl<P: Platforms> Offload<Uninit, P> {
    /// Starts configuring a runtime. Settings made here override the environment. The
    /// `start` that initialises the runtime fixes its configuration (L5); a later `start`
    /// while it is live shares it if it asks for nothing else, and fails with
    /// `Error::InvalidArgument` if a setting made here differs from the one in force
    /// (see [`start`](Self::start)).
    ///
    /// ```standalone_crate
    /// use offload::Offload;
    /// let rt = Offload::builder().ipc_cache_size(4).start()?;
    /// assert_eq!(rt.config()?.ipc_cache_size, 4);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn builder() -> Self {
        Offload {
            state: Uninit::default(),
            platforms: PhantomData,
        }
    }

    /// Says which language's code calls this runtime (Rust's by default): the advice of
    /// its refusals — an empty backend list, a configuration that differs from the one in
    /// force (L5), a device of a backend not in force — names that language's settings and
    /// calls. A binding sets it (the C API to `Caller::C`, naming `offload_config_t`; the
    /// Python package to `Caller::Python`), so its users read what they can type; the
    /// reference `start` gives keeps it (and its clones) for its own refusals. It is no
    /// setting of the runtime: references of any language share one runtime.
    ///
    /// ```standalone_crate
    /// use offload::{Caller, Offload};
    /// let rust = Offload::builder().backends([]).start().unwrap_err().to_string();
    /// assert!(rust.contains("`Offload::builder().backends([BackendKind::Host])`"), "{rust}");
    /// let c = Offload::builder().caller(Caller::C).backends([]).start();
    /// let c = c.unwrap_err().to_string();
    /// assert!(c.contains("`offload_config_t`'s `backends = 1u << OFFLOAD_BACKEND_HOST`"), "{c}");
    /// assert!(!c.contains("Offload::builder") && !c.contains("platform(..)"), "{c}");
    /// ```
    pub fn caller(mut self, caller: Caller) -> Self {
        self.state.caller = caller;
        self
    }

    /// Opens only these backends (like `OFFLOAD_BACKENDS`; platforms open in discovery
    /// order). A backend named here whose driver is missing makes `start` fail instead of
    /// being skipped.
    ///
    /// An empty list opens no built-in platform: it is meant for a runtime of platforms
    /// added with [`platform`](Self::platform) only, and without one `start` fails with
    /// `Error::InvalidArgument` (a runtime with no platform at all has nothing to offer).
    ///
    /// ```standalone_crate
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::builder().backends([BackendKind::Host]).start()?;
    /// assert_eq!(rt.config()?.backends, Some(vec![BackendKind::Host]));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn backends(mut self, kinds: impl IntoIterator<Item = BackendKind>) -> Self {
        let mut list: Vec<BackendKind> = Vec::new();
        for k in kinds {
            if !list.contains(&k) {
                list.push(k);
            }
        }
        self.state.set.backends = Some(list);
        self
    }

    /// Sets the IPC cache capacity (like `OFFLOAD_IPC_CACHE_SIZE`; 0 disables the cache).
    ///
    /// ```standalone_crate
    /// let rt = offload::Offload::builder().ipc_cache_size(0).start()?;
    /// assert_eq!(rt.config()?.ipc_cache_size, 0);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn ipc_cache_size(mut self, entries: usize) -> Self {
        self.state.set.ipc_cache_size = Some(entries);
        self
    }

    /// Sets how long freeing exported memory waits for its peers to unmap it before the
    /// memory is quarantined (like `OFFLOAD_IPC_UNMAP_TIMEOUT_MS`; I3).
    ///
    /// ```standalone_crate
    /// let rt = offload::Offload::builder().ipc_unmap_timeout_ms(250).start()?;
    /// assert_eq!(rt.config()?.ipc_unmap_timeout_ms, 250);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn ipc_unmap_timeout_ms(mut self, ms: u64) -> Self {
        self.state.set.ipc_unmap_timeout_ms = Some(ms);
        self
    }

    /// Sets how many CPU devices the host backend exposes (like `OFFLOAD_HOST_DEVICES`).
    ///
    /// ```standalone_crate
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::builder().backends([BackendKind::Host]).host_devices(3).start()?;
    /// assert_eq!(rt.devices()?.len(), 3);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn host_devices(mut self, count: usize) -> Self {
        self.state.set.host_devices = Some(count);
        self
    }

    /// Sets where compiled programs are cached across processes (like
    /// `OFFLOAD_CACHE_DIR`); `None` disables the disk cache (like `OFFLOAD_CACHE=0`).
    ///
    /// ```
    /// let rt = offload::Offload::builder().compile_cache(None).start()?;
    /// assert_eq!(rt.config()?.compile_cache, None);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn compile_cache(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.state.set.compile_cache = Some(dir);
        self
    }

    /// Writes a Chrome time trace of the runtime's spans (init, platform opens, compiles,
    /// loads, launches, syncs, IPC sends, shutdown) to `path` at its deinitialising
    /// shutdown (like `OFFLOAD_TRACE`; `{pid}` in the path is the process id). See
    /// [`crate::trace`] for what it records and how it gets offload's spans without taking
    /// the application's `tracing` subscriber.
    ///
    /// ```
    /// let path = std::env::temp_dir().join("offload-builder-{pid}.json");
    /// let rt = offload::Offload::builder().trace(&path).start()?;
    /// assert_eq!(rt.config()?.trace, Some(path));
    /// rt.shutdown()?; // writes offload-builder-<pid>.json
    /// let written = std::env::temp_dir().join(format!("offload-builder-{}.json", std::process::id()));
    /// let json = std::fs::read_to_string(&written).expect("the trace");
    /// assert!(json.contains(r#""name":"init""#) && json.contains(r#""name":"shutdown""#));
    /// # std::fs::remove_file(&written).ok();
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn trace(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.state.set.trace = Some(path.into());
        self
    }

    /// Sets how many threads compile programs in the background (like
    /// `OFFLOAD_COMPILE_THREADS`; see `Program::compile_in_background`). 0 keeps no pool:
    /// programs then compile when they are first loaded. The pool's threads start as
    /// compiles need them and are joined by the shutdown (L2).
    ///
    /// ```standalone_crate
    /// let rt = offload::Offload::builder().compile_threads(2).start()?;
    /// assert_eq!(rt.config()?.compile_threads, 2);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn compile_threads(mut self, threads: usize) -> Self {
        self.state.set.compile_threads = Some(threads);
        self
    }

    /// Adds a platform to open besides the defaults (a test backend, a plugin). Its
    /// failure to open fails `start`.
    ///
    /// ```
    /// use offload::Offload;
    /// // No built-in backend; the host platform added as a plugin would be
    /// // (`offload::plugin::PlatformEntry`).
    /// let rt = Offload::builder().backends([]).platform(offload::host::platform()).start()?;
    /// assert_eq!(rt.devices()?.len(), 1);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn platform(mut self, entry: PlatformEntry) -> Self {
        self.state.extra.push(entry);
        self
    }

    /// Initialises the runtime with this configuration, or takes a reference to the one
    /// already live, whose configuration stays in force (L5).
    ///
    /// Joining a live runtime succeeds when every setting made on this builder
    /// ([`backends`](Self::backends), [`ipc_cache_size`](Self::ipc_cache_size),
    /// [`host_devices`](Self::host_devices), [`trace`](Self::trace),
    /// [`compile_threads`](Self::compile_threads),
    /// [`platform`](Self::platform)) matches what is
    /// in force; settings not made here are not compared. Otherwise `start` fails with
    /// `Error::InvalidArgument` naming each setting asked and in force: shut the other
    /// runtime down first, or ask for what [`Offload::config`] shows.
    ///
    /// ```standalone_crate
    /// use offload::{BackendKind, Error, Offload};
    /// let first = Offload::builder().host_devices(2).start()?;
    /// // Asking for nothing explicit, or for what is in force, shares the live runtime.
    /// let shared = Offload::builder().start()?;
    /// let same = Offload::builder().host_devices(2).start()?;
    /// assert_eq!(same.generation(), first.generation());
    /// // Asking for something else while it is live is an error, not a silent share.
    /// let e = Offload::builder().host_devices(3).start().unwrap_err();
    /// assert!(matches!(e, Error::InvalidArgument { .. }));
    /// assert!(e.to_string().contains("host_devices: asked 3, in force 2"), "{e}");
    /// // An empty backend list with no added platform would have no devices.
    /// assert!(Offload::builder().backends([]).start().is_err());
    /// # drop((shared, same));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn start(self) -> Result<Offload<Ready, P>> {
        if self.state.set.backends.as_ref().is_some_and(Vec::is_empty)
            && self.state.extra.is_empty()
        {
            let caller = self.state.caller;
            let added = match caller {
                Caller::Rust => " and no platform was added with `platform(..)`",
                _ => "",
            };
            return Err(Error::invalid(
                "Offload::backends",
                format!(
                    "the backend list is empty{added}, so the runtime would have no devices: \
                     name the backends to open, e.g. {}, or leave {} unset to open every \
                     compiled-in backend whose driver is found",
                    caller.host_backend_only(),
                    caller.backends_setting()
                ),
            ));
        }
        // Before the span, so that a trace records the init that asks for it.
        let trace = crate::config::trace_path(&self.state.set, |name| std::env::var(name).ok());
        let armed = crate::trace::arm(trace.as_deref());
        let _span = tracing::info_span!(target: "offload::init", "init").entered();
        let generation = acquire(
            self.state.caller,
            &self.state.set,
            P::platforms(),
            &self.state.extra,
            EXTENSIONS,
        )
        .inspect_err(|_| {
            if armed {
                // No runtime started, and none traced is live: nothing to record for.
                crate::trace::set_live(false);
            }
        })?;
        crate::trace::set_live(generation.config.trace.is_some());
        Ok(Offload {
            state: Ready {
                generation,
                holds: true,
                devices: OnceLock::new(),
                caller: self.state.caller,
            },
            platforms: PhantomData,
        })
    }
}

impl<P: Platforms> Offload<Ready, P> {
    /// Initialises the runtime with the defaults and environment, or takes another
    /// reference to the live one. Thread-safe; concurrent first callers wait for one
    /// initialisation.
    ///
    /// ```standalone_crate
    /// use offload::Offload;
    /// let a = Offload::init()?;
    /// let b = Offload::init()?;
    /// assert_eq!(a.generation(), b.generation());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn init() -> Result<Self> {
        Offload::<Uninit, P>::builder().start()
    }

    /// The first device of backend `kind`, in platform order.
    ///
    /// When there is none, the error (`Error::Unsupported`, naming the backend) says why:
    /// its platform is open but has no device; it is unavailable, with the reason (usually
    /// its driver was not found, as [`unavailable`](Self::unavailable) lists); it is not
    /// among the backends in force (`OFFLOAD_BACKENDS` or
    /// [`backends`](Offload::backends)); or it is not compiled into this build.
    ///
    /// ```
    /// use offload::{BackendKind, Error, Offload};
    /// let rt = Offload::builder().backends([BackendKind::Host]).start()?;
    /// let dev = rt.device(BackendKind::Host)?;
    /// assert_eq!(dev.backend(), BackendKind::Host);
    /// let e = rt.device(BackendKind::Cuda).unwrap_err();
    /// assert!(matches!(e, Error::Unsupported { backend: BackendKind::Cuda, .. }));
    /// // Why: here not among the backends in force, or not compiled into this build.
    /// assert!(e.to_string().contains("no cuda device: cuda is not"), "{e}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn device(&self, kind: BackendKind) -> Result<Device> {
        // Only the platforms of `kind` are opened (each once per generation).
        let caller = self.state.caller;
        let (opened, failed) = match self.live_call(|live, generation| {
            let mut failed = None;
            for (index, slot) in live.platforms.iter().enumerate() {
                if slot.kind() != kind {
                    continue;
                }
                if let Some((key, _)) = live.devices_of(index, &generation.config).next() {
                    return Ok(Device::new(generation.clone(), key, kind));
                }
                failed = failed.or_else(|| slot.failed_in_words_of(caller));
            }
            Err((live.opened_kinds(), failed))
        })? {
            Ok(device) => return Ok(device),
            Err(none) => none,
        };
        let generation = &self.state.generation;
        let why = if opened.contains(&kind) {
            format!("the {kind} platform is open but has no devices")
        } else if let Some(reason) = failed {
            format!("the {kind} platform is unavailable: {reason}")
        } else if P::platforms().iter().any(|e| e.kind() == kind) {
            let in_force = generation.config.backends.as_deref().unwrap_or(&[]);
            format!(
                "{kind} is not among the backends in force {} (set by OFFLOAD_BACKENDS or \
                 {} at the first init): add it there",
                list(in_force),
                self.state.caller.backends_setting()
            )
        } else {
            // What to rebuild is the caller's library: a C or Python user builds no crate.
            let advice = match self.state.caller {
                Caller::Rust => format!("enable the cargo feature `{kind}` of offload"),
                Caller::C => "liboffload_capi was built without it".to_string(),
                Caller::Python => "this build of the offload package is without it".to_string(),
                Caller::Liboffload => "this libLLVMOffload was built without it".to_string(),
            };
            format!("{kind} is not compiled into this build ({advice})")
        };
        Err(Error::Unsupported {
            backend: kind,
            call: "Offload::device",
            reason: format!("no {kind} device: {why}; platforms open: {}", list(&opened)),
        })
    }
}

impl<P> Offload<Ready, P> {
    /// The generation this runtime reference holds.
    pub(crate) fn held(&self) -> &Arc<Generation> {
        &self.state.generation
    }

    fn live_call<T>(&self, f: impl FnOnce(&Live, &Arc<Generation>) -> T) -> Result<T> {
        let generation = &self.state.generation;
        generation.with_live(|live| Ok(f(live, generation)))
    }

    /// The devices of every platform, in platform order. Opens every platform not opened
    /// yet (once per generation; [`device`](Offload::device) opens only the one asked for).
    ///
    /// ```
    /// let rt = offload::Offload::init()?;
    /// for dev in rt.devices()? {
    ///     println!("{}: {}", dev.backend(), dev.info()?.name);
    /// }
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn devices(&self) -> Result<Vec<Device>> {
        let generation = &self.state.generation;
        Ok(generation
            .listed()?
            .iter()
            .map(|&(key, backend)| Device::new(generation.clone(), key, backend))
            .collect())
    }

    /// The devices of every platform, in platform order, lent by this runtime reference:
    /// after its first call on a reference, a call allocates nothing and counts no
    /// reference (what [`devices`](Offload::devices) pays per device). Clone the one you
    /// keep. Opens every platform not opened yet, like `devices`; `Error::ShutDown` once
    /// shutdown has begun (L3).
    ///
    /// ```
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::init()?;
    /// let host = rt
    ///     .device_list()?
    ///     .iter()
    ///     .find(|d| d.backend() == BackendKind::Host)
    ///     .cloned()
    ///     .expect("the host backend is built in");
    /// assert_eq!(rt.device_list()?.len(), rt.devices()?.len());
    /// let buf = host.alloc(64, offload::MemKind::Host)?;
    /// # drop(buf);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn device_list(&self) -> Result<&[Device]> {
        let generation = &self.state.generation;
        match self.state.devices.get() {
            // The list is fixed once made, but no handle is lent once shutdown has begun.
            Some(list) if !generation.is_closing() => Ok(list),
            Some(_) => Err(Error::shut_down()),
            None => {
                // Never `get_or_init` (see `Generation::listed`): the loser of a race
                // drops its own, equal list.
                let _ = self.state.devices.set(self.devices()?.into_boxed_slice());
                self.state
                    .devices
                    .get()
                    .map(|l| &l[..])
                    .ok_or_else(Error::shut_down)
            }
        }
    }

    /// The platforms that opened, with their device counts. Opens every platform not
    /// tried yet, like [`devices`](Offload::devices).
    ///
    /// ```
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::builder().backends([BackendKind::Host]).start()?;
    /// let platforms = rt.platforms()?;
    /// assert_eq!((platforms.len(), platforms[0].backend), (1, BackendKind::Host));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn platforms(&self) -> Result<Vec<PlatformInfo>> {
        self.live_call(|live, generation| {
            generation.open_all(live);
            platform_infos(live)
        })
    }

    /// The platforms opened so far in this generation, with their device counts; opens
    /// none. Platforms open when first needed: [`device`](Offload::device) opens those of
    /// its backend, [`devices`](Offload::devices) and [`platforms`](Offload::platforms)
    /// all of them, and a backend named at `init` (`OFFLOAD_BACKENDS`,
    /// [`backends`](Offload::backends)) opens there.
    ///
    /// ```
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::init()?;
    /// assert!(rt.opened_platforms()?.is_empty());
    /// rt.device(BackendKind::Host)?;
    /// assert_eq!(rt.opened_platforms()?[0].backend, BackendKind::Host);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn opened_platforms(&self) -> Result<Vec<PlatformInfo>> {
        self.live_call(|live, _| platform_infos(live))
    }

    /// The backends that were looked for but did not open (driver not found), and why.
    /// Tries every platform not tried yet, like [`devices`](Offload::devices).
    ///
    /// ```
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::init()?;
    /// let (open, missing) = (rt.platforms()?, rt.unavailable()?);
    /// for u in &missing {
    ///     println!("{}: {}", u.backend, u.reason);
    ///     assert!(open.iter().all(|p| p.backend != u.backend));
    /// }
    /// // The host backend needs no driver.
    /// assert!(missing.iter().all(|u| u.backend != BackendKind::Host));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn unavailable(&self) -> Result<Vec<Unavailable>> {
        self.live_call(|live, generation| {
            generation.open_all(live);
            live.platforms
                .iter()
                .filter_map(|p| p.failed().cloned())
                .collect()
        })
    }

    /// The configuration in force: fixed by the `init` that started this generation (L5).
    /// A later `start` that asks for other settings fails; ask for these instead.
    ///
    /// ```standalone_crate
    /// let rt = offload::Offload::init()?;
    /// assert_eq!(rt.config()?.host_devices, 1);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn config(&self) -> Result<Config> {
        self.live_call(|_, g| g.config.clone())
    }

    /// A new IPC endpoint: a Unix-domain socket in a private directory that peers of this
    /// user connect to by its name, to exchange buffer ranges through the process's one
    /// sender-side cache (see [`crate::ipc`]). Closed by dropping it or at shutdown.
    ///
    /// ```
    /// use offload::Offload;
    /// let rt = Offload::init()?;
    /// let endpoint = rt.ipc_endpoint()?;
    /// println!("peers connect to {}", endpoint.name());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn ipc_endpoint(&self) -> Result<crate::ipc::IpcEndpoint> {
        crate::ipc::IpcEndpoint::bind(&self.state.generation)
    }

    /// A number that identifies this runtime generation; a new one after every full
    /// shutdown.
    ///
    /// ```standalone_crate
    /// use offload::Offload;
    /// let first = Offload::init()?;
    /// let n = first.generation();
    /// first.shutdown()?;
    /// assert_ne!(Offload::init()?.generation(), n);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.state.generation.id
    }

    /// Gives this reference back. The last reference deinitialises everything in the L4
    /// order, runs every step whatever fails, and returns all errors; handles made by the
    /// runtime then return `Error::ShutDown`.
    ///
    /// Either way the reference is gone: `Ok` and the [`ShutdownError`] of `Err` both hold
    /// the `Offload<Shutdown>`, whose [`was_last`](Offload::was_last) says whether this
    /// call deinitialised the runtime. `?` turns a `ShutdownError` into its [`Error`].
    ///
    /// ```standalone_crate
    /// use offload::Offload;
    /// let a = Offload::init()?;
    /// let b = a.clone();
    /// assert!(!a.shutdown()?.was_last());
    /// assert!(b.shutdown()?.was_last());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn shutdown(mut self) -> Result<Offload<Shutdown, P>, ShutdownError<P>> {
        self.state.holds = false;
        let generation = self.state.generation.clone();
        drop(self);
        let (last, error) = match release(&generation) {
            Ok(last) => (last, None),
            // Only the last reference tears down, so only it meets errors.
            Err(e) => (true, Some(e)),
        };
        let down = Offload {
            state: Shutdown {
                generation: generation.id,
                last,
            },
            platforms: PhantomData,
        };
        match error {
            None => Ok(down),
            Some(error) => Err(ShutdownError { down, error }),
        }
    }
}

impl<P> Clone for Offload<Ready, P> {
    /// Takes another reference to the same runtime (L1).
    fn clone(&self) -> Self {
        let generation = self.state.generation.clone();
        let holds = retain(&generation);
        Offload {
            state: Ready {
                generation,
                holds,
                devices: OnceLock::new(),
                caller: self.state.caller,
            },
            platforms: PhantomData,
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        // In a forked child the reference is forgotten (L9): no shutdown there.
        if crate::runtime::fork::forget_in_child(&self.generation) {
            return;
        }
        if self.holds {
            self.holds = false;
            report_later(release(&self.generation).map(|_| ()));
        }
    }
}

impl<P> Offload<Shutdown, P> {
    /// Whether this shutdown was the last reference and deinitialised the runtime.
    ///
    /// ```standalone_crate
    /// let rt = offload::Offload::init()?;
    /// assert!(rt.shutdown()?.was_last());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn was_last(&self) -> bool {
        self.state.last
    }

    /// The generation this reference belonged to.
    ///
    /// ```
    /// let rt = offload::Offload::init()?;
    /// let n = rt.generation();
    /// assert_eq!(rt.shutdown()?.generation(), n);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.state.generation
    }
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("generation", &self.generation.id)
            .finish()
    }
}

impl<S: std::fmt::Debug, P> std::fmt::Debug for Offload<S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offload")
            .field("state", &self.state)
            .finish()
    }
}

/// A shutdown that met errors. The reference was given back all the same: the error holds
/// the [`Offload<Shutdown>`](Offload) (so [`was_last`](Self::was_last) tells whether the
/// runtime was deinitialised; every step of L4 ran) and the errors of the steps that
/// failed ([`errors`](Self::errors), or [`into_parts`](Self::into_parts) for both).
///
/// `?` converts it into its [`Error`] (the only error, or `Error::Multiple`), so
/// `rt.shutdown()?` works in a function returning [`crate::Result`].
///
/// ```standalone_crate
/// use offload::{Error, Offload, Program};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let _module = Program::new(offload::host::fixtures::KERNELS)
///     .on_teardown(|_| Err("cannot flush the log".into()))
///     .load(&dev)?;
/// match rt.shutdown() {
///     Ok(down) => unreachable!("the teardown callback failed, got {down:?}"),
///     Err(e) => {
///         assert!(e.was_last(), "deinitialised all the same");
///         assert!(e.errors().all(|e| matches!(e, Error::Callback { .. })));
///         println!("{e}");
///         let (down, error) = e.into_parts();
///         assert!(down.was_last());
///         assert!(error.to_string().contains("cannot flush the log"));
///     }
/// }
/// # Ok::<(), offload::Error>(())
/// ```
pub struct ShutdownError<P = NoPlatforms> {
    down: Offload<Shutdown, P>,
    error: Error,
}

impl<P> ShutdownError<P> {
    /// Whether this shutdown was the last reference and deinitialised the runtime (every
    /// step ran, whatever failed).
    ///
    /// ```standalone_crate
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(offload::host::fixtures::KERNELS).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let e = rt.shutdown().unwrap_err();
    /// assert!(e.was_last());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn was_last(&self) -> bool {
        self.down.was_last()
    }

    /// The generation the reference belonged to.
    ///
    /// ```standalone_crate
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(offload::host::fixtures::KERNELS).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let n = rt.generation();
    /// assert_eq!(rt.shutdown().unwrap_err().generation(), n);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.down.generation()
    }

    /// The error as one value: the only one, or `Error::Multiple` of all of them.
    ///
    /// ```standalone_crate
    /// # use offload::{Error, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(offload::host::fixtures::KERNELS).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let e = rt.shutdown().unwrap_err();
    /// assert!(matches!(e.error(), Error::Callback { callback: "on_teardown", .. }));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// Every error, one per failed step (an `Error::Multiple` is flattened).
    ///
    /// ```standalone_crate
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(offload::host::fixtures::KERNELS).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let e = rt.shutdown().unwrap_err();
    /// for error in e.errors() {
    ///     eprintln!("shutdown step failed: {error}");
    /// }
    /// assert_eq!(e.errors().count(), 1);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn errors(&self) -> impl Iterator<Item = &Error> {
        self.error.iter()
    }

    /// The shut-down runtime and the error.
    ///
    /// ```standalone_crate
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let _m = Program::new(offload::host::fixtures::KERNELS).on_teardown(|_| Err("no".into())).load(&rt.devices()?[0])?;
    /// let (down, error) = rt.shutdown().unwrap_err().into_parts();
    /// assert!(down.was_last());
    /// assert!(error.to_string().contains("on_teardown"));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn into_parts(self) -> (Offload<Shutdown, P>, Error) {
        (self.down, self.error)
    }
}

/// Like [`Error`]'s, it says what `Display` says (`main` returning `Err` prints `{:?}`).
impl<P> std::fmt::Debug for ShutdownError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl<P> std::fmt::Display for ShutdownError<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.was_last() {
            "deinitialised the runtime"
        } else {
            "gave back its reference"
        };
        write!(
            f,
            "offload shutdown of generation {} {what}, with errors: {}",
            self.generation(),
            self.error
        )
    }
}

/// The errors are part of the message, so there is no separate source.
impl<P> std::error::Error for ShutdownError<P> {}

impl<P> From<ShutdownError<P>> for Error {
    /// Keeps the error, dropping the shut-down runtime.
    fn from(e: ShutdownError<P>) -> Error {
        e.error
    }
}

/// The opened platforms of `live`, with their device counts.
fn platform_infos(live: &Live) -> Vec<PlatformInfo> {
    live.platforms
        .iter()
        .filter_map(PlatformSlot::opened_with_kind)
        .map(|(backend, open)| PlatformInfo {
            backend,
            name: open.name.clone(),
            devices: open.devices.len(),
        })
        .collect()
}
