//! A device-only platform over any [`Driver`]: [`Platform`] implements
//! `offload_core::hal::Platform` and its [`Device`] `hal::Device`, finding and describing
//! devices through the driver and counting opens and deinitialisations ([`Counters`]).
//! Memory, programs and queues answer `Error::Unsupported`: their types are
//! `offload_core::hal::Never`. It never calls a driver itself.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_core::hal::{self, Never};
use offload_core::{BackendKind, Config, DeviceInfo, MemKind, Result, no_compute};

use crate::failure::memory_unsupported;

/// A vendor's driver, as a device-only platform needs it: open it (library, init, the
/// devices), and describe a device. [`Platform<D>`] does the rest.
///
/// ```
/// use offload_core::hal::{Device, Platform as _};
/// use offload_core::{BackendKind, Config, DeviceInfo, Result};
/// use offload_driver::{Counters, Driver, Opened, Platform};
///
/// /// A driver with one device and no library.
/// struct Fake;
/// static COUNTERS: Counters = Counters::new();
/// impl Driver for Fake {
///     const KIND: BackendKind = BackendKind::Cuda;
///     type Handle = u8;
///     fn open() -> Result<Opened<Fake>> {
///         Ok(Opened { driver: Fake, devices: vec![7], name: "Fake 1.0".into() })
///     }
///     fn library(&self) -> &str {
///         "libfake.so"
///     }
///     fn device_info(&self, handle: u8) -> Result<DeviceInfo> {
///         Ok(DeviceInfo::new(format!("Fake {handle}"), "Fake", Self::KIND, 1 << 30, 1))
///     }
///     fn counters() -> &'static Counters {
///         &COUNTERS
///     }
/// }
///
/// let fake = Platform::<Fake>::open(&Config::default())?;
/// assert_eq!(fake.name(), "Fake 1.0");
/// assert_eq!(fake.devices()[0].info()?.name, "Fake 7");
/// fake.deinit()?;
/// assert_eq!((COUNTERS.stats().opened, COUNTERS.stats().deinitialised), (1, 1));
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Driver: Send + Sync + Sized + 'static {
    /// The backend family.
    const KIND: BackendKind;
    /// What the driver calls a device (a handle, an ordinal, or both).
    type Handle: Copy + Send + Sync + 'static;

    /// Loads the driver, initialises it and lists its devices: at least one, else
    /// `Error::DriverNotFound` (an absent platform, never a panic).
    fn open() -> Result<Opened<Self>>;

    /// The name the driver library was found under.
    fn library(&self) -> &str;

    /// What the driver says about a device it listed.
    fn device_info(&self, handle: Self::Handle) -> Result<DeviceInfo>;

    /// The backend's process-wide counters.
    fn counters() -> &'static Counters;
}

/// A driver [`Driver::open`] opened: the driver, its devices in its order, and the
/// platform's name (`CUDA 12.4`).
///
/// ```
/// use offload_driver::Opened;
/// # struct Fake;
/// # static C: offload_driver::Counters = offload_driver::Counters::new();
/// # impl offload_driver::Driver for Fake {
/// #     const KIND: offload_core::BackendKind = offload_core::BackendKind::Cuda;
/// #     type Handle = u8;
/// #     fn open() -> offload_core::Result<Opened<Fake>> { unimplemented!() }
/// #     fn library(&self) -> &str { "" }
/// #     fn device_info(&self, _: u8) -> offload_core::Result<offload_core::DeviceInfo> { unimplemented!() }
/// #     fn counters() -> &'static offload_driver::Counters { &C }
/// # }
/// let opened = Opened { driver: Fake, devices: vec![0u8, 1], name: "Fake".to_string() };
/// assert_eq!(opened.devices.len(), 2);
/// ```
pub struct Opened<D: Driver> {
    /// The driver, initialised.
    pub driver: D,
    /// Every device, in the driver's order.
    pub devices: Vec<D::Handle>,
    /// The platform's name, with the driver's version where it gives one.
    pub name: String,
}

/// Process-wide counts of what a backend did, kept in a `static` of the backend.
///
/// ```
/// static COUNTERS: offload_driver::Counters = offload_driver::Counters::new();
/// assert_eq!(COUNTERS.stats().opened, 0);
/// ```
#[derive(Debug, Default)]
pub struct Counters {
    opened: AtomicUsize,
    deinitialised: AtomicUsize,
}

impl Counters {
    /// Both counts at zero.
    ///
    /// ```
    /// let c = offload_driver::Counters::new();
    /// assert_eq!(c.stats().deinitialised, 0);
    /// ```
    pub const fn new() -> Self {
        Counters {
            opened: AtomicUsize::new(0),
            deinitialised: AtomicUsize::new(0),
        }
    }

    /// Counts a platform opened (for backends with a platform of their own).
    ///
    /// ```
    /// let c = offload_driver::Counters::new();
    /// c.opened();
    /// assert_eq!(c.stats().opened, 1);
    /// ```
    pub fn opened(&self) {
        self.opened.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts a platform deinitialised.
    ///
    /// ```
    /// let c = offload_driver::Counters::new();
    /// c.deinitialised();
    /// assert_eq!(c.stats().deinitialised, 1);
    /// ```
    pub fn deinitialised(&self) {
        self.deinitialised.fetch_add(1, Ordering::SeqCst);
    }

    /// Reads the counts.
    ///
    /// ```
    /// let s = offload_driver::Counters::new().stats();
    /// assert!(s.opened >= s.deinitialised);
    /// ```
    pub fn stats(&self) -> Stats {
        Stats {
            opened: self.opened.load(Ordering::SeqCst),
            deinitialised: self.deinitialised.load(Ordering::SeqCst),
        }
    }
}

/// Process-wide counts of what a backend did.
///
/// ```
/// let s = offload_driver::Counters::new().stats();
/// assert_eq!((s.opened, s.deinitialised), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Platforms opened (drivers found with at least one device).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
}

/// The platform over driver `D`: the driver, initialised, with at least one device. Memory,
/// programs and queues are not implemented: `alloc`, `load` and `queue` answer
/// `Error::Unsupported`, and their objects cannot exist. `deinit` only counts (these
/// drivers have no global deinitialisation); the library guard goes with the platform and
/// its devices.
///
/// ```
/// use offload_core::hal::{Device, Platform};
/// use offload_core::{Config, Error, MemKind};
/// // Any backend's platform, e.g. `offload_cuda::CudaPlatform`, is a `Platform`.
/// fn first_alloc<D: offload_driver::Driver>() -> Option<Error> {
///     let platform = offload_driver::Platform::<D>::open(&Config::default()).ok()?;
///     let dev = platform.devices().remove(0);
///     dev.alloc(64, MemKind::Device).err()
/// }
/// # struct Absent;
/// # static C: offload_driver::Counters = offload_driver::Counters::new();
/// # impl offload_driver::Driver for Absent {
/// #     const KIND: offload_core::BackendKind = offload_core::BackendKind::Cuda;
/// #     type Handle = u8;
/// #     fn open() -> offload_core::Result<offload_driver::Opened<Absent>> {
/// #         Err(offload_driver::driver_not_found(Self::KIND, "libabsent.so", "absent"))
/// #     }
/// #     fn library(&self) -> &str { "" }
/// #     fn device_info(&self, _: u8) -> offload_core::Result<offload_core::DeviceInfo> { unimplemented!() }
/// #     fn counters() -> &'static offload_driver::Counters { &C }
/// # }
/// assert!(first_alloc::<Absent>().is_none());
/// ```
pub struct Platform<D: Driver> {
    driver: Arc<D>,
    devices: Vec<D::Handle>,
    name: String,
}

impl<D: Driver> fmt::Debug for Platform<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Platform")
            .field("kind", &D::KIND)
            .field("name", &self.name)
            .field("library", &self.driver.library())
            .field("devices", &self.devices.len())
            .finish()
    }
}

/// A device of a [`Platform`]. It holds the driver library open for as long as it lives.
///
/// ```
/// use offload_core::{Config, hal::Platform as _};
/// // The first device of any such platform is ordinal 0.
/// fn first<D: offload_driver::Driver>(p: &offload_driver::Platform<D>) -> u32 {
///     p.devices()[0].ordinal()
/// }
/// # let _ = first::<offload_driver_doc::Never>;
/// # mod offload_driver_doc {
/// #     pub struct Never;
/// #     static C: offload_driver::Counters = offload_driver::Counters::new();
/// #     impl offload_driver::Driver for Never {
/// #         const KIND: offload_core::BackendKind = offload_core::BackendKind::Hip;
/// #         type Handle = u8;
/// #         fn open() -> offload_core::Result<offload_driver::Opened<Never>> { unimplemented!() }
/// #         fn library(&self) -> &str { "" }
/// #         fn device_info(&self, _: u8) -> offload_core::Result<offload_core::DeviceInfo> { unimplemented!() }
/// #         fn counters() -> &'static offload_driver::Counters { &C }
/// #     }
/// # }
/// ```
pub struct Device<D: Driver> {
    ordinal: u32,
    handle: D::Handle,
    driver: Arc<D>,
}

impl<D: Driver> Device<D> {
    /// The device's position in the driver's order (for CUDA and HIP, `cuDeviceGet`'s and
    /// `hipDeviceGet`'s argument; for Level Zero, the drivers in the loader's order, each
    /// driver's devices in its order).
    ///
    /// ```
    /// fn ordinals<D: offload_driver::Driver>(devices: &[offload_driver::Device<D>]) -> Vec<u32> {
    ///     devices.iter().map(|d| d.ordinal()).collect()
    /// }
    /// # let _ = ordinals::<offload_driver_doc::Never>;
    /// # mod offload_driver_doc {
    /// #     pub struct Never;
    /// #     static C: offload_driver::Counters = offload_driver::Counters::new();
    /// #     impl offload_driver::Driver for Never {
    /// #         const KIND: offload_core::BackendKind = offload_core::BackendKind::Hip;
    /// #         type Handle = u8;
    /// #         fn open() -> offload_core::Result<offload_driver::Opened<Never>> { unimplemented!() }
    /// #         fn library(&self) -> &str { "" }
    /// #         fn device_info(&self, _: u8) -> offload_core::Result<offload_core::DeviceInfo> { unimplemented!() }
    /// #         fn counters() -> &'static offload_driver::Counters { &C }
    /// #     }
    /// # }
    /// ```
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }
}

impl<D: Driver> fmt::Debug for Device<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("kind", &D::KIND)
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

impl<D: Driver> hal::Platform for Platform<D> {
    type Device = Device<D>;
    const KIND: BackendKind = D::KIND;

    /// Opens the driver ([`Driver::open`]) and counts the open.
    fn open(_config: &Config) -> Result<Self> {
        let Opened {
            driver,
            devices,
            name,
        } = D::open()?;
        D::counters().opened.fetch_add(1, Ordering::SeqCst);
        Ok(Platform {
            driver: Arc::new(driver),
            devices,
            name,
        })
    }

    /// The name [`Driver::open`] gave, e.g. `CUDA 12.4`.
    fn name(&self) -> String {
        self.name.clone()
    }

    fn devices(&self) -> Vec<Device<D>> {
        self.devices
            .iter()
            .zip(0..)
            .map(|(&handle, ordinal)| Device {
                ordinal,
                handle,
                driver: self.driver.clone(),
            })
            .collect()
    }

    /// Counts the deinitialisation; these drivers have no global deinit. The library guard
    /// goes with the platform and its devices.
    fn deinit(&self) -> Result<()> {
        D::counters().deinitialised.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Nothing: a device-only platform loads no programs.
    fn may_run(_image: &[u8]) -> bool {
        false
    }
}

/// Describes itself; memory answers `Error::Unsupported`, and so do programs and queues.
impl<D: Driver> hal::Device for Device<D> {
    type Buffer = Never;
    type Program = Never;
    type Queue = Never;
    type Event = Never;

    fn info(&self) -> Result<DeviceInfo> {
        self.driver.device_info(self.handle)
    }

    fn alloc(&self, _size: usize, _kind: MemKind) -> Result<Never> {
        Err(memory_unsupported(D::KIND))
    }

    fn free(&self, buffer: Never) -> Result<()> {
        buffer.absurd()
    }

    fn read(&self, buffer: &Never, _offset: usize, _dst: &mut [u8]) -> Result<()> {
        buffer.absurd()
    }

    fn write(&self, buffer: &mut Never, _offset: usize, _src: &[u8]) -> Result<()> {
        buffer.absurd()
    }

    fn fill(&self, buffer: &mut Never, _offset: usize, _len: usize, _value: u8) -> Result<()> {
        buffer.absurd()
    }

    fn copy(&self, src: &Never, _: usize, _: &mut Never, _: usize, _: usize) -> Result<()> {
        src.absurd()
    }

    fn copy_within(&self, buffer: &mut Never, _: usize, _: usize, _: usize) -> Result<()> {
        buffer.absurd()
    }

    fn with_mapped(&self, buffer: &mut Never, _: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        buffer.absurd()
    }

    no_compute!(D::KIND, load);
}
