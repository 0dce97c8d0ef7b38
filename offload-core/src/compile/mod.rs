//! Programs from source: one compile per (program, compiler, target) however many threads
//! and devices ask (the per-key discipline of P2), kept in memory for the program's life
//! and on disk across processes ([`disk`]), with process-wide counters
//! ([`compile_stats`]).
//!
//! The key of a compile is a SHA-256 over everything that changes the compiler's output:
//! the language, the compiler's identity and version, its target, the options and the
//! text (see [`key`]). The backend compiles ([`crate::hal::Device::compile`]); this module
//! decides whether it has to.

pub(crate) mod disk;
mod shared;

pub use shared::{CompileKey, SharedCache, set_shared_cache};

use crate::sync::{Arc, AtomicU64, Mutex, Ordering, lock, statics};
use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::erased::DynDevice;
use crate::error::Result;
use crate::hal::{CompilerId, Source};

/// A compile's cache key.
pub(crate) type Key = [u8; 32];

/// One key's image, once compiled; its lock is held by the one compiling it.
type Slot = Arc<Mutex<Option<Arc<[u8]>>>>;

/// The compiled images of one program, by key: each behind its own lock, so one compile
/// runs per key while different keys compile in parallel.
#[derive(Default)]
pub(crate) struct Compiled {
    slots: Mutex<HashMap<Key, Slot>>,
}

statics! {
    static COMPILES: AtomicU64 = AtomicU64::new(0);
    static FAILED: AtomicU64 = AtomicU64::new(0);
    static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static DISK_HITS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static DISK_WRITES: AtomicU64 = AtomicU64::new(0);
    pub(crate) static CORRUPT: AtomicU64 = AtomicU64::new(0);
    pub(crate) static EVICTED: AtomicU64 = AtomicU64::new(0);
    static SHARED_HITS: AtomicU64 = AtomicU64::new(0);
    static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
    static MOST_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
}

/// What the compile cache did in this process since it started.
///
/// ```
/// let stats = offload::compile_stats();
/// assert!(stats.compiles <= stats.compiles + stats.memory_hits);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompileStats {
    /// Sources compiled by a backend's compiler.
    pub compiles: u64,
    /// Sources a backend's compiler ran on and rejected (`Error::Compile` with its log).
    pub failed: u64,
    /// Loads that found their image compiled already by this program.
    pub memory_hits: u64,
    /// Compiles avoided by an entry on disk.
    pub disk_hits: u64,
    /// Compiles avoided by the shared cache ([`set_shared_cache`]): another process
    /// compiled the image.
    pub shared_hits: u64,
    /// Entries written to disk.
    pub disk_writes: u64,
    /// Entries found truncated or altered (checksum), deleted and compiled again.
    pub corrupt: u64,
    /// Entries removed to keep the cache within its size bound.
    pub evicted: u64,
    /// The most compiles that ran at the same time (different keys compile in parallel).
    pub most_in_flight: u64,
}

/// The compile cache's counters (process-wide).
///
/// ```
/// let before = offload::compile_stats();
/// assert!(offload::compile_stats().compiles >= before.compiles);
/// ```
pub fn compile_stats() -> CompileStats {
    CompileStats {
        compiles: COMPILES.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        shared_hits: SHARED_HITS.load(Ordering::Relaxed),
        disk_writes: DISK_WRITES.load(Ordering::Relaxed),
        corrupt: CORRUPT.load(Ordering::Relaxed),
        evicted: EVICTED.load(Ordering::Relaxed),
        most_in_flight: MOST_IN_FLIGHT.load(Ordering::Relaxed),
    }
}

/// The key of compiling `source` with `compiler`: a SHA-256 of every input, each
/// length-prefixed so no two different inputs encode alike.
pub(crate) fn key(source: &Source, compiler: &CompilerId) -> Key {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"offload compile cache v1");
    field(source.language().name().as_bytes());
    field(compiler.identity.as_bytes());
    field(compiler.target.as_bytes());
    field(&(source.options().len() as u64).to_le_bytes());
    for option in source.options() {
        field(option.as_bytes());
    }
    field(source.text().as_bytes());
    h.finalize().into()
}

/// Lower-case hex of a key (file names, logs).
pub(crate) fn hex(key: &Key) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

impl Compiled {
    /// The image of `source` for `device`: from this program's memory, from disk, or
    /// compiled now (once per key; concurrent callers of one key wait for it).
    pub(crate) fn image(
        &self,
        source: &Source,
        device: &Arc<dyn DynDevice>,
        config: &Config,
    ) -> Result<Arc<[u8]>> {
        let compiler = device.compiler(source.language())?;
        let key = key(source, &compiler);
        let slot = lock(&self.slots).entry(key).or_default().clone();
        let mut image = lock(&slot);
        if let Some(done) = image.as_ref() {
            MEMORY_HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(done.clone());
        }
        let cache = config
            .compile_cache
            .as_deref()
            .map(|dir| disk::Cache::new(dir, config.compile_cache_max_bytes));
        if let Some(done) = cache.as_ref().and_then(|c| c.get(&key)) {
            tracing::debug!(target: "offload::compile", key = %hex(&key), bytes = done.len(), "compile cache hit on disk");
            *image = Some(done.clone());
            return Ok(done);
        }
        let mut compiled_here = false;
        let mut compile = || {
            compiled_here = true;
            compile_here(source, device, &compiler, &key)
        };
        let bytes = match shared::installed() {
            Some(shared) => shared.get_or_compile(&CompileKey(key), &mut compile)?,
            None => compile()?,
        };
        if !compiled_here {
            SHARED_HITS.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(target: "offload::compile", key = %hex(&key), bytes = bytes.len(), "compile cache hit in the shared cache");
        }
        if let Some(cache) = &cache {
            cache.put(&key, &bytes);
        }
        let done: Arc<[u8]> = Arc::from(bytes);
        *image = Some(done.clone());
        Ok(done)
    }
}

/// Compiles `source` for `device` in this process, counted.
fn compile_here(
    source: &Source,
    device: &Arc<dyn DynDevice>,
    compiler: &CompilerId,
    key: &Key,
) -> Result<Vec<u8>> {
    let _span = tracing::debug_span!(
        target: "offload::compile",
        "compile",
        language = %source.language(),
        compiler = %compiler.identity,
        target = %compiler.target,
        key = %hex(key),
    )
    .entered();
    let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_IN_FLIGHT.fetch_max(now, Ordering::SeqCst);
    let compiled = device.compile(source);
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    let bytes = compiled.inspect_err(|_| {
        FAILED.fetch_add(1, Ordering::Relaxed);
    })?;
    COMPILES.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(target: "offload::compile", bytes = bytes.len(), "compiled");
    Ok(bytes)
}
