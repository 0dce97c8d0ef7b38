//! The platform trait: one driver instance.

use crate::config::Config;
use crate::error::Result;

use super::{BackendKind, Device};

/// One platform: an initialised driver with its devices.
///
/// The runtime calls [`Platform::open`] at a 0→1 transition and [`Platform::deinit`] at the
/// matching 1→0 transition, after every object it made through the devices was given back
/// and the devices were dropped. Between the two, any method of the family may be called
/// from any thread at once.
///
/// ```
/// use offload_core::hal::{Device, Platform};
/// use offload_core::{Config, MemKind, reference::Reference};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let mut buf = dev.alloc(4, MemKind::Device)?;
/// dev.write(&mut buf, 0, &[1, 2, 3, 4])?;
/// dev.free(buf)?;
/// drop(dev);
/// assert_eq!(platform.live_allocations(), 0);
/// platform.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Platform: Send + Sync + Sized + 'static {
    /// A device of this platform.
    type Device: Device;

    /// The family this backend belongs to.
    const KIND: BackendKind;

    /// Opens the driver and discovers devices. A missing driver is
    /// `Error::DriverNotFound`; the runtime then treats the platform as absent unless the
    /// user asked for it by name.
    fn open(config: &Config) -> Result<Self>;

    /// A name for this platform (driver or instance), e.g. `"host"` or `"vulkan (llvmpipe)"`.
    fn name(&self) -> String;

    /// The devices found by `open`, in a stable order. Called once per generation.
    fn devices(&self) -> Vec<Self::Device>;

    /// Deinitialises the driver. Called exactly once, last, whatever failed before.
    fn deinit(&self) -> Result<()>;

    /// Whether this platform's devices may run `image`, judged by its container alone
    /// ([`ImageFormat`](super::ImageFormat)) and without opening the driver: `Offload::devices_for` opens only
    /// the platforms that may, then asks their devices' [`Device::validate`]. The default,
    /// `true`, means "open me and let `validate` decide"; a backend that knows its formats
    /// says so, so that a program for another backend never pays for opening this one.
    ///
    /// ```
    /// use offload_core::hal::Platform;
    /// use offload_core::reference::{MAGIC, Reference};
    /// assert!(Reference::may_run(MAGIC.as_bytes()));
    /// assert!(!Reference::may_run(&0x0723_0203u32.to_ne_bytes()));
    /// ```
    fn may_run(image: &[u8]) -> bool {
        let _ = image;
        true
    }
}
