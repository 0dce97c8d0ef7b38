//! The platforms of a generation, each opened when something first needs it.
//!
//! `init` lists the platform entries in force as [`PlatformSlot`]s and opens only those
//! that were named (`OFFLOAD_BACKENDS`, `Offload::builder().backends(..)`, an added
//! `platform(..)`): a named platform that cannot open fails the `init`, as the user asked
//! for it. Every other slot opens on first use — `rt.device(kind)` opens the slots of that
//! backend, `rt.devices()` and the platform queries open all, an imported IPC handle opens
//! the slots of its backend, `rt.devices_for(..)` those whose format can match — so a
//! program that uses only the host device never pays for a Vulkan or CUDA driver it does
//! not touch (opening one costs milliseconds, every generation). Teardown deinitialises only
//! the slots that opened (L4).
//!
//! A slot opens once per generation: the first caller opens it holding the slot's mutex,
//! concurrent callers wait on that mutex and find it open (or failed: a failure is kept, so
//! a missing driver is looked for once per generation, and reported by `rt.unavailable()`).
//! The outcome is published in a `OnceLock`, so the operations' hot path
//! ([`PlatformSlot::opened`], one per device call) reads it without a lock. Opening runs
//! with the generation's state held for reading, so teardown (which takes it for writing)
//! waits for an open in flight and never deinitialises a platform half opened. The mutex
//! comes from `crate::sync`, so the model check schedules concurrent opens.

use crate::sync::{Arc, AtomicU64, Mutex, OnceLock, Ordering, lock, statics};

use crate::config::Config;
use crate::erased::{DynDevice, DynPlatform, PlatformEntry};
use crate::error::{Caller, Result};
use crate::hal::BackendKind;

statics! {
    /// How many times this process tried to open a platform of each backend, indexed by
    /// `BackendKind as usize` (a diagnostic: see [`platform_open_attempts`]).
    static ATTEMPTS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
}

/// How many times this process (this copy of offload) has tried to open a platform of
/// backend `kind`, successfully or not: at most once per runtime generation, and only when
/// something needed it (a device of it, the device list, a program it may run). A program
/// that uses only the host device leaves every other backend at 0.
///
/// ```
/// use offload::{BackendKind, Offload, platform_open_attempts};
/// let before = platform_open_attempts(BackendKind::Host);
/// let rt = Offload::init()?;
/// assert_eq!(platform_open_attempts(BackendKind::Host), before);
/// rt.device(BackendKind::Host)?;
/// rt.device(BackendKind::Host)?;
/// assert_eq!(platform_open_attempts(BackendKind::Host), before + 1);
/// # Ok::<(), offload::Error>(())
/// ```
pub fn platform_open_attempts(kind: BackendKind) -> u64 {
    ATTEMPTS
        .get(kind as usize)
        .map_or(0, |n| n.load(Ordering::Relaxed))
}

/// An opened platform and its devices, fixed from its opening to the generation's end.
pub(crate) struct OpenPlatform {
    pub(crate) raw: Box<dyn DynPlatform>,
    pub(crate) name: String,
    pub(crate) devices: Vec<Arc<dyn DynDevice>>,
}

/// How a slot's opening ended.
enum Outcome {
    Open(OpenPlatform),
    /// Why it is unavailable, in Rust's words; and, for a missing driver, the library and
    /// the loader's message, so that the error can be told again in a caller's words.
    Failed(Unavailable, Option<(String, String)>),
}

/// One platform entry of a generation, opened on first use.
pub(crate) struct PlatformSlot {
    entry: PlatformEntry,
    /// Held by the one caller that opens the slot.
    opening: Mutex<()>,
    outcome: OnceLock<Outcome>,
}

impl PlatformSlot {
    pub(crate) fn new(entry: PlatformEntry) -> PlatformSlot {
        PlatformSlot {
            entry,
            opening: Mutex::new(()),
            outcome: OnceLock::new(),
        }
    }

    pub(crate) fn kind(&self) -> BackendKind {
        self.entry.kind()
    }

    /// The platform, if it has opened; never opens it.
    pub(crate) fn opened(&self) -> Option<&OpenPlatform> {
        match self.outcome.get() {
            Some(Outcome::Open(open)) => Some(open),
            _ => None,
        }
    }

    /// Whether the platform's devices may run `image`, by its container alone (opens
    /// nothing; [`crate::hal::Platform::may_run`]).
    pub(crate) fn may_run(&self, image: &[u8]) -> bool {
        self.entry.may_run(image)
    }

    /// The platform with its backend, if it has opened.
    pub(crate) fn opened_with_kind(&self) -> Option<(BackendKind, &OpenPlatform)> {
        self.opened().map(|open| (self.kind(), open))
    }

    /// Why the platform did not open, if it was tried and failed.
    pub(crate) fn failed(&self) -> Option<&Unavailable> {
        match self.outcome.get() {
            Some(Outcome::Failed(why, _)) => Some(why),
            _ => None,
        }
    }

    /// Why the platform is unavailable, in `caller`'s words (a missing driver's advice
    /// names the caller's setting); `None` if it did not fail.
    pub(crate) fn failed_in_words_of(&self, caller: Caller) -> Option<String> {
        match self.outcome.get() {
            Some(Outcome::Failed(_, Some((library, reason)))) => Some(
                crate::Error::DriverNotFound {
                    backend: self.kind(),
                    library: library.clone(),
                    reason: reason.clone(),
                    caller,
                }
                .to_string(),
            ),
            Some(Outcome::Failed(why, None)) => Some(why.reason.clone()),
            _ => None,
        }
    }

    /// Opens the platform unless it was tried already: `Ok` with the platform, or why it
    /// is unavailable. A first failure is returned as the backend's own error in `Err(Some)`;
    /// a failure found by an earlier caller as `Err(None)` (see [`failed`](Self::failed)).
    pub(crate) fn open(
        &self,
        config: &Config,
    ) -> std::result::Result<&OpenPlatform, Option<crate::Error>> {
        if let Some(outcome) = self.outcome.get() {
            return match outcome {
                Outcome::Open(open) => Ok(open),
                Outcome::Failed(..) => Err(None),
            };
        }
        let _opening = lock(&self.opening);
        let mut first_error = None;
        let outcome = self.outcome.get_or_init(|| match self.try_open(config) {
            Ok(open) => Outcome::Open(open),
            Err(e) => {
                let why = Unavailable {
                    backend: self.kind(),
                    reason: e.to_string(),
                };
                let missing = match &e {
                    crate::Error::DriverNotFound {
                        library, reason, ..
                    } => Some((library.clone(), reason.clone())),
                    _ => None,
                };
                first_error = Some(e);
                Outcome::Failed(why, missing)
            }
        });
        match outcome {
            Outcome::Open(open) => Ok(open),
            Outcome::Failed(..) => Err(first_error),
        }
    }

    fn try_open(&self, config: &Config) -> Result<OpenPlatform> {
        let kind = self.kind();
        let _span = tracing::info_span!(target: "offload::init", "platform_open", backend = %kind)
            .entered();
        if let Some(n) = ATTEMPTS.get(kind as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let opened = self.entry.open(config);
        let raw = opened
            .map_err(|e| e.in_call("Offload::init"))
            .inspect_err(|e| {
                tracing::info!(
                    target: "offload::init",
                    backend = %kind,
                    reason = %e,
                    "platform unavailable"
                );
            })?;
        let devices = raw.devices();
        let name = raw.name();
        tracing::info!(
            target: "offload::init",
            backend = %kind,
            name = %name,
            devices = devices.len(),
            "platform opened"
        );
        // A driver opened after the exit hook was registered may register exit handlers
        // of its own, which would run before ours (newest first): register ours again.
        crate::runtime::exit_hook::after_open(kind);
        Ok(OpenPlatform { raw, name, devices })
    }

    /// The opened platform, taken for teardown.
    pub(crate) fn into_open(self) -> Option<OpenPlatform> {
        match self.outcome.into_inner() {
            Some(Outcome::Open(open)) => Some(open),
            _ => None,
        }
    }
}

/// A platform that was tried (at `init` or on first use) but did not open, and why.
///
/// ```
/// let u = offload::Unavailable {
///     backend: offload::BackendKind::Cuda,
///     reason: "libcuda.so.1 not found".into(),
/// };
/// assert_eq!(u.backend.name(), "cuda");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    /// The backend.
    pub backend: BackendKind,
    /// Why it is absent (usually its driver was not found).
    pub reason: String,
}
