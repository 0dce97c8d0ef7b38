//! What a backend or plugin author needs, kept out of an application's way: the `hal` trait
//! family a backend implements, how a platform is registered with a runtime
//! ([`PlatformEntry`], [`Platforms`], the [`Builtin`] platforms of this build), the
//! backend-side form of kernel arguments ([`KernelArg`]) and the [`no_compute!`] helper for
//! platforms whose devices cannot run code yet. An application never needs this module.
//!
//! ```
//! use offload::plugin::{PlatformEntry, hal::Platform};
//! use offload::{BackendKind, Offload};
//! // The host platform, added by hand to a runtime that opens no built-in backend.
//! let rt = Offload::builder().backends([]).platform(offload::host::platform()).start()?;
//! assert_eq!(rt.device(BackendKind::Host)?.backend(), BackendKind::Host);
//! # let _: Option<PlatformEntry> = None;
//! # fn _is_platform<P: Platform>() {}
//! # Ok::<(), offload::Error>(())
//! ```

pub use offload_core::{KernelArg, PlatformEntry, Platforms, hal, no_compute};

/// The platforms compiled into this build, in discovery order.
///
/// ```
/// use offload::plugin::{Builtin, Platforms};
/// let kinds: Vec<_> = Builtin::platforms().iter().map(|p| p.kind()).collect();
/// assert!(kinds.contains(&offload::BackendKind::Host));
/// ```
#[derive(Debug)]
pub struct Builtin;

impl Platforms for Builtin {
    fn platforms() -> Vec<PlatformEntry> {
        let entries: [Option<PlatformEntry>; 5] = [
            #[cfg(feature = "host")]
            Some(offload_host::platform()),
            #[cfg(not(feature = "host"))]
            None,
            #[cfg(feature = "vulkan")]
            Some(offload_vulkan::platform()),
            #[cfg(not(feature = "vulkan"))]
            None,
            #[cfg(feature = "cuda")]
            Some(offload_cuda::platform()),
            #[cfg(not(feature = "cuda"))]
            None,
            #[cfg(feature = "hip")]
            Some(offload_hip::platform()),
            #[cfg(not(feature = "hip"))]
            None,
            #[cfg(feature = "ze")]
            Some(offload_ze::platform()),
            #[cfg(not(feature = "ze"))]
            None,
        ];
        entries.into_iter().flatten().collect()
    }
}
