//! A compile cache shared beyond this process, consulted after this program's memory and
//! the disk cache miss and before compiling here: the hook through which a job-wide cache
//! (offload-mpi's `JobCache`) lets one process of a job compile a key for all of them.
//!
//! One per process, installed by [`set_shared_cache`]: the cache of compiled code is
//! process-wide already (the disk cache, [`super::compile_stats`]), and the job it spans is
//! too. Whatever it answers is only a faster way to the image the local compile would
//! make: the key names every input of the compile, so an answer for the key is the image.

use crate::sync::{Arc, RwLock, read, statics, write};
use std::fmt;

use crate::error::Result;

use super::{Key, hex};

/// The cache key of a compile: a SHA-256 over the language, the compiler's identity and
/// version, its target, the options and the source text. Two compiles with one key make
/// the same image.
///
/// ```
/// let key = offload::CompileKey::from_bytes([7; 32]);
/// assert_eq!(key.as_bytes(), &[7; 32]);
/// assert_eq!(key.to_string(), "07".repeat(32));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompileKey(pub(crate) Key);

impl CompileKey {
    /// The key of these 32 bytes (a key received from another process).
    ///
    /// ```
    /// let key = offload::CompileKey::from_bytes([0; 32]);
    /// assert_eq!(offload::CompileKey::from_bytes(*key.as_bytes()), key);
    /// ```
    pub fn from_bytes(bytes: [u8; 32]) -> CompileKey {
        CompileKey(bytes)
    }

    /// The key's 32 bytes (to send it to another process).
    ///
    /// ```
    /// assert_eq!(offload::CompileKey::from_bytes([1; 32]).as_bytes().len(), 32);
    /// ```
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for CompileKey {
    /// Lower-case hex, as the disk cache names its files.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for CompileKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompileKey({self})")
    }
}

/// A cache of compiled images shared with other processes (a job's ranks).
///
/// offload calls it on a miss in memory and on disk, with the key and a function that
/// compiles here. It returns the image: fetched from elsewhere, or made by calling
/// `compile` (at most once) and, as it sees fit, shared. What it returns is written to the
/// disk cache. It must not fail where compiling here would succeed: when the others cannot
/// answer (a process died, the job is finishing), it compiles here. A compile error is
/// `compile`'s, returned as it is (its log whole).
///
/// ```
/// use std::sync::Arc;
/// use offload::{CompileKey, Result, SharedCache};
///
/// /// Compiles every key here, like no shared cache at all.
/// struct Local;
/// impl SharedCache for Local {
///     fn get_or_compile(
///         &self,
///         _key: &CompileKey,
///         compile: &mut dyn FnMut() -> Result<Vec<u8>>,
///     ) -> Result<Vec<u8>> {
///         compile()
///     }
/// }
/// let before = offload::set_shared_cache(Some(Arc::new(Local)));
/// offload::set_shared_cache(before);
/// ```
pub trait SharedCache: Send + Sync {
    /// The image of `key`, from the shared cache or `compile()`.
    fn get_or_compile(
        &self,
        key: &CompileKey,
        compile: &mut dyn FnMut() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>>;
}

statics! {
    static SHARED: RwLock<Option<Arc<dyn SharedCache>>> = RwLock::new(None);
}

/// Installs the process's shared compile cache (`None` removes it) and returns the one it
/// replaces. Compiles already asking the old one finish with it.
///
/// ```
/// assert!(offload::set_shared_cache(None).is_none());
/// ```
pub fn set_shared_cache(cache: Option<Arc<dyn SharedCache>>) -> Option<Arc<dyn SharedCache>> {
    std::mem::replace(&mut *write(&SHARED), cache)
}

/// The installed shared cache, if any.
pub(super) fn installed() -> Option<Arc<dyn SharedCache>> {
    read(&SHARED).clone()
}
