//! Runtime configuration: defaults, environment overrides and what is in force (L5).
//!
//! Precedence, lowest first: built-in defaults, then environment variables, then what the
//! program set on the builder. The first `init` of a process (or after a full shutdown)
//! fixes the configuration; later `init`s share it. This module reads the environment at every
//! first `init` and never caches it; the one thing it keeps in a static is the number of
//! CPUs, read once per load of the library (the read walks the process's cgroup files:
//! ~25 µs, ten times the rest of an init → shutdown cycle).

use crate::error::{Error, Result};
use crate::sync::{AtomicUsize, Ordering, statics};
use crate::vocab::types::BackendKind;

/// Default capacity of the sender-side IPC cache (I2).
pub const DEFAULT_IPC_CACHE_SIZE: usize = 16;

/// Default bound, in milliseconds, on how long freeing exported memory waits for the peers
/// that mapped it to unmap it (I3).
pub const DEFAULT_IPC_UNMAP_TIMEOUT_MS: u64 = 2000;

/// The most threads the default compile pool has (`Config::compile_threads`): the number
/// of CPUs, capped at this. A configuration may ask for more.
///
/// ```
/// assert!(offload_core::Config::default().compile_threads <= offload_core::MAX_DEFAULT_COMPILE_THREADS);
/// ```
pub const MAX_DEFAULT_COMPILE_THREADS: usize = 8;

/// The default size of the compile pool: the number of CPUs, at most
/// [`MAX_DEFAULT_COMPILE_THREADS`] (1 where the number is unknown).
///
/// ```
/// let n = offload_core::default_compile_threads();
/// assert!((1..=offload_core::MAX_DEFAULT_COMPILE_THREADS).contains(&n));
/// ```
pub fn default_compile_threads() -> usize {
    let mut cpus = CPUS.load(Ordering::Relaxed);
    if cpus == 0 {
        cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        // Racing first readers store the same number.
        CPUS.store(cpus, Ordering::Relaxed);
    }
    cpus.min(MAX_DEFAULT_COMPILE_THREADS)
}

statics! {
    /// The number of CPUs, once read (0: not yet).
    static CPUS: AtomicUsize = AtomicUsize::new(0);
}

/// The configuration a runtime runs with. See [`crate::Offload::config`].
///
/// ```
/// let c = offload::Config::default();
/// assert_eq!(c.backends, None);
/// assert_eq!(c.ipc_cache_size, 16);
/// assert_eq!(c.ipc_unmap_timeout_ms, 2000);
/// assert_eq!(c.host_devices, 1);
/// assert_eq!(c.compile_threads, offload_core::default_compile_threads());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Backends to open, in order; `None` opens every built-in backend whose driver is
    /// found. A backend named here whose driver is missing makes `init` fail.
    /// Environment: `OFFLOAD_BACKENDS=host,vulkan`.
    pub backends: Option<Vec<BackendKind>>,
    /// Entries in the sender-side IPC cache; 0 disables it.
    /// Environment: `OFFLOAD_IPC_CACHE_SIZE=16`.
    pub ipc_cache_size: usize,
    /// How long freeing exported memory (or closing an endpoint) waits for every peer that
    /// mapped it to unmap it, in milliseconds. Freed memory a live peer has not unmapped by
    /// then is quarantined (`Error::Quarantined`); an endpoint that closes disconnects such
    /// a peer. Environment: `OFFLOAD_IPC_UNMAP_TIMEOUT_MS=2000`.
    pub ipc_unmap_timeout_ms: u64,
    /// Number of CPU devices the host backend exposes. Environment: `OFFLOAD_HOST_DEVICES=1`.
    pub host_devices: usize,
    /// Where compiled programs are kept across processes (`Program::from_source`); `None`
    /// keeps them in memory only. Environment: `OFFLOAD_CACHE_DIR=path`, default
    /// `$XDG_CACHE_HOME/offload` (else `$HOME/.cache/offload`); `OFFLOAD_CACHE=0` disables.
    pub compile_cache: Option<std::path::PathBuf>,
    /// The most bytes the compile cache keeps; the least recently used entries go first.
    /// Environment: `OFFLOAD_CACHE_MAX_MB=256`.
    pub compile_cache_max_bytes: u64,
    /// Where a Chrome time trace of the runtime's spans is written at its deinitialising
    /// shutdown (`{pid}` is replaced by the process id); `None` traces nothing. See
    /// [`crate::trace`]. Environment: `OFFLOAD_TRACE=offload-{pid}.json`.
    pub trace: Option<std::path::PathBuf>,
    /// Threads of the pool that compiles programs in the background
    /// (`Program::compile_in_background`), started as compiles need them and joined by
    /// the shutdown (L2); 0: no pool, programs compile when they are first loaded.
    /// Environment: `OFFLOAD_COMPILE_THREADS`, default the number of CPUs, at most 8.
    pub compile_threads: usize,
}

/// The compile cache's default size bound, in bytes.
pub const DEFAULT_COMPILE_CACHE_MAX_BYTES: u64 = 256 << 20;

/// The compile cache's default directory: `$XDG_CACHE_HOME/offload`, else
/// `$HOME/.cache/offload`, else none.
fn default_cache_dir(env: &impl Fn(&str) -> Option<String>) -> Option<std::path::PathBuf> {
    let absolute = |v: String| Some(std::path::PathBuf::from(v)).filter(|p| p.is_absolute());
    env("XDG_CACHE_HOME")
        .and_then(absolute)
        .map(|p| p.join("offload"))
        .or_else(|| {
            env("HOME")
                .and_then(absolute)
                .map(|p| p.join(".cache").join("offload"))
        })
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backends: None,
            ipc_cache_size: DEFAULT_IPC_CACHE_SIZE,
            ipc_unmap_timeout_ms: DEFAULT_IPC_UNMAP_TIMEOUT_MS,
            host_devices: 1,
            compile_cache: None,
            compile_cache_max_bytes: DEFAULT_COMPILE_CACHE_MAX_BYTES,
            trace: None,
            compile_threads: default_compile_threads(),
        }
    }
}

/// What a builder set explicitly; `None` keeps the environment's or the default value.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    pub backends: Option<Vec<BackendKind>>,
    pub ipc_cache_size: Option<usize>,
    pub ipc_unmap_timeout_ms: Option<u64>,
    pub host_devices: Option<usize>,
    /// `Some(None)`: the builder disabled the compile cache.
    pub compile_cache: Option<Option<std::path::PathBuf>>,
    pub trace: Option<std::path::PathBuf>,
    pub compile_threads: Option<usize>,
}

/// The trace file asked for: the builder's, else `OFFLOAD_TRACE` (an empty value counts as
/// unset).
pub(crate) fn trace_path(
    set: &Overrides,
    env: impl Fn(&str) -> Option<String>,
) -> Option<std::path::PathBuf> {
    set.trace.clone().or_else(|| {
        env("OFFLOAD_TRACE")
            .filter(|v| !v.trim().is_empty())
            .map(std::path::PathBuf::from)
    })
}

impl Config {
    /// Defaults, overridden by the environment, overridden by `set`.
    pub(crate) fn resolve(set: &Overrides) -> Result<Config> {
        Config::resolve_with(set, |name| std::env::var(name).ok())
    }

    pub(crate) fn resolve_with(
        set: &Overrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config> {
        let mut config = Config::default();
        // An empty value counts as unset (`OFFLOAD_BACKENDS= prog`); a list without a
        // name (`OFFLOAD_BACKENDS=,`) is an error.
        if let Some(v) = env("OFFLOAD_BACKENDS").filter(|v| !v.trim().is_empty()) {
            config.backends = Some(parse_backends(&v)?);
        }
        if let Some(v) = env("OFFLOAD_IPC_CACHE_SIZE") {
            config.ipc_cache_size = parse_count("OFFLOAD_IPC_CACHE_SIZE", &v)?;
        }
        if let Some(v) = env("OFFLOAD_IPC_UNMAP_TIMEOUT_MS") {
            config.ipc_unmap_timeout_ms = parse_count("OFFLOAD_IPC_UNMAP_TIMEOUT_MS", &v)? as u64;
        }
        if let Some(v) = env("OFFLOAD_HOST_DEVICES") {
            config.host_devices = parse_count("OFFLOAD_HOST_DEVICES", &v)?;
            if config.host_devices == 0 {
                return Err(no_host_devices(&format!("OFFLOAD_HOST_DEVICES={v}")));
            }
        }
        config.compile_cache = match env("OFFLOAD_CACHE").as_deref().map(str::trim) {
            Some("0") => None,
            None | Some("" | "1") => match env("OFFLOAD_CACHE_DIR").filter(|v| !v.is_empty()) {
                Some(dir) => Some(std::path::PathBuf::from(dir)),
                None => default_cache_dir(&env),
            },
            Some(other) => {
                return Err(Error::invalid(
                    "Offload::init",
                    format!(
                        "OFFLOAD_CACHE={other:?}: write 0 to disable the compile cache, 1 (or nothing) to keep it"
                    ),
                ));
            }
        };
        if let Some(v) = env("OFFLOAD_CACHE_MAX_MB") {
            config.compile_cache_max_bytes =
                (parse_count("OFFLOAD_CACHE_MAX_MB", &v)? as u64).saturating_mul(1 << 20);
        }
        if let Some(v) = env("OFFLOAD_COMPILE_THREADS").filter(|v| !v.trim().is_empty()) {
            config.compile_threads = parse_count("OFFLOAD_COMPILE_THREADS", &v)?;
        }
        if let Some(b) = &set.backends {
            config.backends = Some(b.clone());
        }
        if let Some(n) = set.ipc_cache_size {
            config.ipc_cache_size = n;
        }
        if let Some(ms) = set.ipc_unmap_timeout_ms {
            config.ipc_unmap_timeout_ms = ms;
        }
        if let Some(n) = set.host_devices {
            if n == 0 {
                return Err(no_host_devices("host_devices(0)"));
            }
            config.host_devices = n;
        }
        if let Some(dir) = &set.compile_cache {
            config.compile_cache = dir.clone();
        }
        config.trace = trace_path(set, &env);
        if let Some(n) = set.compile_threads {
            config.compile_threads = n;
        }
        Ok(config)
    }

    /// Whether `kind` is to be opened, and whether the user named it (so a missing driver
    /// is an error rather than an absent platform).
    pub(crate) fn selects(&self, kind: BackendKind) -> (bool, bool) {
        match &self.backends {
            None => (true, false),
            Some(list) => {
                let named = list.contains(&kind);
                (named, named)
            }
        }
    }
}

/// Names a list of backends for messages: `[host, vulkan]`.
pub(crate) fn list(kinds: &[BackendKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    format!("[{}]", names.join(", "))
}

/// Whether two backend lists name the same backends (platforms open in discovery order
/// whatever the order of the list, so the order does not matter).
fn same_backends(a: &[BackendKind], b: &[BackendKind]) -> bool {
    a.iter().all(|k| b.contains(k)) && b.iter().all(|k| a.contains(k))
}

impl Overrides {
    /// What of this request a live runtime whose configuration is `in_force` cannot honour,
    /// one line per setting the builder set explicitly that differs; empty if it can share.
    /// `open` lists the backends of the live runtime's platforms (what "every backend whose
    /// driver is found" came to), `extra` the backends of the platforms the builder added.
    pub(crate) fn mismatches(
        &self,
        in_force: &Config,
        open: &[BackendKind],
        extra: &[BackendKind],
    ) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(asked) = &self.backends {
            let (effective, how) = match &in_force.backends {
                Some(list) => (list.as_slice(), ""),
                None => (
                    open,
                    " (every compiled-in backend whose driver was found, as no backend list \
                     was given)",
                ),
            };
            if !same_backends(asked, effective) {
                out.push(format!(
                    "backends: asked {}, in force {}{how}",
                    list(asked),
                    list(effective)
                ));
            }
        }
        if let Some(asked) = self.ipc_cache_size {
            if asked != in_force.ipc_cache_size {
                out.push(format!(
                    "ipc_cache_size: asked {asked}, in force {}",
                    in_force.ipc_cache_size
                ));
            }
        }
        if let Some(asked) = self.ipc_unmap_timeout_ms {
            if asked != in_force.ipc_unmap_timeout_ms {
                out.push(format!(
                    "ipc_unmap_timeout_ms: asked {asked}, in force {}",
                    in_force.ipc_unmap_timeout_ms
                ));
            }
        }
        if let Some(asked) = self.host_devices {
            if asked != in_force.host_devices {
                out.push(format!(
                    "host_devices: asked {asked}, in force {}",
                    in_force.host_devices
                ));
            }
        }
        if let Some(asked) = &self.trace {
            if in_force.trace.as_ref() != Some(asked) {
                out.push(format!(
                    "trace: asked {}, in force {}",
                    asked.display(),
                    in_force
                        .trace
                        .as_ref()
                        .map_or("none".into(), |p| p.display().to_string())
                ));
            }
        }
        if let Some(asked) = self.compile_threads {
            if asked != in_force.compile_threads {
                out.push(format!(
                    "compile_threads: asked {asked}, in force {}",
                    in_force.compile_threads
                ));
            }
        }
        for kind in extra {
            if !open.contains(kind) {
                out.push(format!(
                    "platform: a {kind} platform was added, but the runtime in force has none \
                     (its platforms: {})",
                    list(open)
                ));
            }
        }
        out
    }
}

fn parse_backends(value: &str) -> Result<Vec<BackendKind>> {
    let mut out = Vec::new();
    for part in value.split(',').filter(|p| !p.trim().is_empty()) {
        let kind = part.parse::<BackendKind>().map_err(|reason| {
            Error::invalid(
                "Offload::init",
                format!("OFFLOAD_BACKENDS={value}: {reason}"),
            )
        })?;
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    if out.is_empty() {
        // `OFFLOAD_BACKENDS=","`: a list with no names would start a runtime with no
        // platforms, which nobody means.
        return Err(Error::invalid(
            "Offload::init",
            format!(
                "OFFLOAD_BACKENDS={value:?} names no backend, so the runtime would have no \
                 devices: write a comma-separated list of backends to open, such as \
                 OFFLOAD_BACKENDS=host or OFFLOAD_BACKENDS=host,vulkan (names: host, vulkan, \
                 cuda, hip, ze), or unset it to open every compiled-in backend whose driver \
                 is found"
            ),
        ));
    }
    Ok(out)
}

/// A host backend asked for zero devices: refused, with what to do instead.
fn no_host_devices(setting: &str) -> Error {
    Error::invalid(
        "Offload::init",
        format!(
            "{setting}: the host backend exposes at least one device; to run without it, leave \
             host out of OFFLOAD_BACKENDS (or the builder's backends)"
        ),
    )
}

fn parse_count(name: &str, value: &str) -> Result<usize> {
    value.trim().parse::<usize>().map_err(|e| {
        Error::invalid(
            "Offload::init",
            format!("{name}={value}: not a non-negative integer ({e})"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn environment_overrides_defaults_and_builder_overrides_environment() {
        let vars = [
            ("OFFLOAD_BACKENDS", "vulkan, host,vulkan"),
            ("OFFLOAD_IPC_CACHE_SIZE", "4"),
        ];
        let c = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap();
        assert_eq!(
            c.backends,
            Some(vec![BackendKind::Vulkan, BackendKind::Host])
        );
        assert_eq!(c.ipc_cache_size, 4);
        assert_eq!(c.host_devices, 1);

        let set = Overrides {
            ipc_cache_size: Some(0),
            ..Overrides::default()
        };
        let c = Config::resolve_with(&set, env(&vars)).unwrap();
        assert_eq!(c.ipc_cache_size, 0);
    }

    #[test]
    fn bad_environment_is_a_typed_error_naming_the_variable() {
        let vars = [("OFFLOAD_BACKENDS", "host,metal")];
        let e = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }));
        assert!(e.to_string().contains("OFFLOAD_BACKENDS"), "{e}");
        assert!(e.to_string().contains("metal"), "{e}");

        for value in [",", " , ,"] {
            let vars = [("OFFLOAD_BACKENDS", value)];
            let e = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
            assert!(e.to_string().contains("OFFLOAD_BACKENDS"), "{e}");
            assert!(e.to_string().contains("names no backend"), "{e}");
        }
        // An empty value is unset.
        let vars = [("OFFLOAD_BACKENDS", "")];
        let c = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap();
        assert_eq!(c.backends, None);

        let vars = [("OFFLOAD_IPC_CACHE_SIZE", "-1")];
        let e = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap_err();
        assert!(e.to_string().contains("OFFLOAD_IPC_CACHE_SIZE"), "{e}");

        // Zero host devices is refused, from the environment or the builder.
        let vars = [("OFFLOAD_HOST_DEVICES", "0")];
        let e = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("OFFLOAD_HOST_DEVICES=0"), "{e}");
        assert!(
            e.to_string().contains("leave host out of OFFLOAD_BACKENDS"),
            "{e}"
        );
        let set = Overrides {
            host_devices: Some(0),
            ..Overrides::default()
        };
        let e = Config::resolve_with(&set, env(&[])).unwrap_err();
        assert!(e.to_string().contains("host_devices(0)"), "{e}");

        let vars = [("OFFLOAD_COMPILE_THREADS", "many")];
        let e = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap_err();
        assert!(
            e.to_string().contains("OFFLOAD_COMPILE_THREADS=many"),
            "{e}"
        );
    }

    #[test]
    fn compile_threads_default_environment_and_builder() {
        let c = Config::resolve_with(&Overrides::default(), env(&[])).unwrap();
        assert_eq!(c.compile_threads, default_compile_threads());
        assert!((1..=MAX_DEFAULT_COMPILE_THREADS).contains(&c.compile_threads));
        let vars = [("OFFLOAD_COMPILE_THREADS", "0")];
        let c = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap();
        assert_eq!(c.compile_threads, 0, "0: no pool");
        let vars = [("OFFLOAD_COMPILE_THREADS", "12")];
        let set = Overrides {
            compile_threads: Some(3),
            ..Overrides::default()
        };
        assert_eq!(
            Config::resolve_with(&Overrides::default(), env(&vars))
                .unwrap()
                .compile_threads,
            12,
            "the environment may ask for more than the default's cap"
        );
        assert_eq!(
            Config::resolve_with(&set, env(&vars))
                .unwrap()
                .compile_threads,
            3
        );
        let in_force = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap();
        let m = set.mismatches(&in_force, &[], &[]);
        assert_eq!(m, ["compile_threads: asked 3, in force 12"]);
    }

    #[test]
    fn mismatches_name_each_explicit_setting_that_differs() {
        let in_force = Config {
            backends: Some(vec![BackendKind::Host]),
            ..Config::default()
        };
        let open = [BackendKind::Host];
        // Nothing explicit, or exactly what is in force: shares.
        assert!(
            Overrides::default()
                .mismatches(&in_force, &open, &[])
                .is_empty()
        );
        let same = Overrides {
            backends: Some(vec![BackendKind::Host]),
            ipc_cache_size: Some(DEFAULT_IPC_CACHE_SIZE),
            host_devices: Some(1),
            ..Overrides::default()
        };
        assert!(same.mismatches(&in_force, &open, &[]).is_empty());

        let other = Overrides {
            backends: Some(vec![BackendKind::Vulkan]),
            ipc_cache_size: Some(4),
            host_devices: Some(3),
            ..Overrides::default()
        };
        let m = other.mismatches(&in_force, &open, &[BackendKind::Reference]);
        assert_eq!(m.len(), 4, "{m:#?}");
        assert_eq!(m[0], "backends: asked [vulkan], in force [host]");
        assert!(m[1].contains("asked 4, in force 16"), "{m:#?}");
        assert!(m[2].contains("asked 3, in force 1"), "{m:#?}");
        assert!(m[3].contains("reference platform"), "{m:#?}");

        // No list in force: what opened is what is in force, in any order.
        let all = Config::default();
        let open = [BackendKind::Host, BackendKind::Vulkan];
        let asked = Overrides {
            backends: Some(vec![BackendKind::Vulkan, BackendKind::Host]),
            ..Overrides::default()
        };
        assert!(asked.mismatches(&all, &open, &[]).is_empty());
        let asked = Overrides {
            backends: Some(vec![BackendKind::Vulkan]),
            ..Overrides::default()
        };
        let m = asked.mismatches(&all, &open, &[]);
        assert!(m[0].contains("every compiled-in backend"), "{m:#?}");

        // A trace file asked for that is not the one in force.
        let asked = Overrides {
            trace: Some("t.json".into()),
            ..Overrides::default()
        };
        assert_eq!(
            asked.mismatches(&all, &open, &[]),
            ["trace: asked t.json, in force none"]
        );
    }

    #[test]
    fn the_trace_file_comes_from_the_builder_else_the_environment() {
        let vars = [("OFFLOAD_TRACE", "env-{pid}.json")];
        let c = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap();
        assert_eq!(c.trace, Some("env-{pid}.json".into()));
        let set = Overrides {
            trace: Some("builder.json".into()),
            ..Overrides::default()
        };
        let c = Config::resolve_with(&set, env(&vars)).unwrap();
        assert_eq!(c.trace, Some("builder.json".into()));
        let c = Config::resolve_with(&Overrides::default(), env(&[("OFFLOAD_TRACE", "")])).unwrap();
        assert_eq!(c.trace, None);
    }
}
