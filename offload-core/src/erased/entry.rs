//! How the runtime opens a platform ([`PlatformEntry`]) and which ones a runtime type opens
//! by default ([`Platforms`]).

use crate::config::Config;
use crate::erased::objects::{DynPlatform, Erased};
use crate::error::Result;
use crate::hal::{BackendKind, Ipc, Platform};

/// How the runtime opens one platform: a backend's `open`, erased.
///
/// Built-in backends provide one (`offload_host::platform()`); tests and plugins add their
/// own with [`crate::Offload::builder`]`().platform(..)`.
///
/// ```
/// use offload_core::{BackendKind, PlatformEntry};
/// let entry = PlatformEntry::of::<offload_core::reference::Reference>();
/// assert_eq!(entry.kind(), BackendKind::Reference);
/// ```
#[derive(Clone, Copy)]
pub struct PlatformEntry {
    kind: BackendKind,
    open: fn(&Config) -> Result<Box<dyn DynPlatform>>,
    may_run: fn(&[u8]) -> bool,
}

fn open<P: Platform>(config: &Config) -> Result<Box<dyn DynPlatform>> {
    Ok(Box::new(Erased::new(P::open(config)?)))
}

fn open_with_ipc<P: Platform>(config: &Config) -> Result<Box<dyn DynPlatform>>
where
    P::Device: Ipc,
{
    Ok(Box::new(Erased::with_ipc(P::open(config)?)))
}

impl PlatformEntry {
    /// The entry for platform `P`. A platform whose devices cannot run code yet (its
    /// `Program`, `Queue` and `Event` are [`crate::hal::Never`]) answers
    /// `Error::Unsupported` for those calls, naming the backend.
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::of::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind().name(), "reference");
    /// ```
    pub fn of<P: Platform>() -> Self {
        PlatformEntry {
            kind: P::KIND,
            open: open::<P>,
            may_run: P::may_run,
        }
    }

    /// The entry for platform `P` whose devices share memory with other processes
    /// ([`crate::hal::Ipc`]): `Buffer::export`, `Device::import` and the IPC endpoint work on
    /// them. ([`PlatformEntry::of`] answers `Error::Unsupported` for those.)
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::with_ipc::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind().name(), "reference");
    /// ```
    pub fn with_ipc<P: Platform>() -> Self
    where
        P::Device: Ipc,
    {
        PlatformEntry {
            kind: P::KIND,
            open: open_with_ipc::<P>,
            may_run: P::may_run,
        }
    }

    /// The backend family this entry opens.
    ///
    /// ```
    /// let e = offload_core::PlatformEntry::of::<offload_core::reference::Reference>();
    /// assert_eq!(e.kind(), offload_core::BackendKind::Reference);
    /// ```
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    pub(crate) fn open(&self, config: &Config) -> Result<Box<dyn DynPlatform>> {
        (self.open)(config)
    }

    /// [`Platform::may_run`] of the entry's platform.
    pub(crate) fn may_run(&self, image: &[u8]) -> bool {
        (self.may_run)(image)
    }
}

impl std::fmt::Debug for PlatformEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlatformEntry")
            .field("kind", &self.kind)
            .finish()
    }
}

/// The platforms a runtime type opens by default: the facade implements this for the
/// backends compiled in; [`NoPlatforms`] opens none (add them with the builder).
///
/// ```
/// use offload_core::{Platforms, PlatformEntry, reference::Reference};
/// struct OnlyReference;
/// impl Platforms for OnlyReference {
///     fn platforms() -> Vec<PlatformEntry> {
///         vec![PlatformEntry::of::<Reference>()]
///     }
/// }
/// assert_eq!(OnlyReference::platforms().len(), 1);
/// ```
pub trait Platforms: 'static {
    /// The entries, in discovery order.
    fn platforms() -> Vec<PlatformEntry>;
}

/// No default platforms.
///
/// ```
/// use offload_core::{NoPlatforms, Platforms};
/// assert!(NoPlatforms::platforms().is_empty());
/// ```
#[derive(Debug)]
pub struct NoPlatforms;

impl Platforms for NoPlatforms {
    fn platforms() -> Vec<PlatformEntry> {
        Vec::new()
    }
}
