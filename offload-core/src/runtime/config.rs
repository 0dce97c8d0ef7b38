//! Runtime configuration: defaults, environment overrides and what is in force (L5).
//!
//! Precedence, lowest first: built-in defaults, then environment variables, then what the
//! program set on the builder. The first `init` of a process (or after a full shutdown)
//! fixes the configuration; later `init`s share it. This module reads the environment and
//! nothing else: it never caches what it read in a static.

use crate::error::{Error, Result};
use crate::hal::BackendKind;

/// Default capacity of the sender-side IPC cache (I2).
pub const DEFAULT_IPC_CACHE_SIZE: usize = 16;

/// Default bound, in milliseconds, on how long freeing exported memory waits for the peers
/// that mapped it to unmap it (I3).
pub const DEFAULT_IPC_UNMAP_TIMEOUT_MS: u64 = 2000;

/// The configuration a runtime runs with. See [`crate::Offload::config`].
///
/// ```
/// let c = offload_core::Config::default();
/// assert_eq!(c.backends, None);
/// assert_eq!(c.ipc_cache_size, 16);
/// assert_eq!(c.ipc_unmap_timeout_ms, 2000);
/// assert_eq!(c.host_devices, 1);
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
    /// How long freeing exported memory (or shutting down) waits for every peer that
    /// mapped it to unmap it, in milliseconds; a peer that has not answered by then is
    /// disconnected. Environment: `OFFLOAD_IPC_UNMAP_TIMEOUT_MS=2000`.
    pub ipc_unmap_timeout_ms: u64,
    /// Number of CPU devices the host backend exposes. Environment: `OFFLOAD_HOST_DEVICES=1`.
    pub host_devices: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backends: None,
            ipc_cache_size: DEFAULT_IPC_CACHE_SIZE,
            ipc_unmap_timeout_ms: DEFAULT_IPC_UNMAP_TIMEOUT_MS,
            host_devices: 1,
        }
    }
}

/// What a builder set explicitly; `None` keeps the environment's or the default value.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    pub backends: Option<Vec<BackendKind>>,
    pub ipc_cache_size: Option<usize>,
    pub host_devices: Option<usize>,
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
        }
        if let Some(b) = &set.backends {
            config.backends = Some(b.clone());
        }
        if let Some(n) = set.ipc_cache_size {
            config.ipc_cache_size = n;
        }
        if let Some(n) = set.host_devices {
            config.host_devices = n;
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
    Ok(out)
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

        let vars = [("OFFLOAD_IPC_CACHE_SIZE", "-1")];
        let e = Config::resolve_with(&Overrides::default(), env(&vars)).unwrap_err();
        assert!(e.to_string().contains("OFFLOAD_IPC_CACHE_SIZE"), "{e}");
    }
}
