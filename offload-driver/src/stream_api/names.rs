//! The public names a vendor crate gives the generic stream backend: one macro,
//! [`stream_backend_types!`](crate::stream_backend_types), declares the seven type aliases
//! (`CudaPlatform = StreamPlatform<CudaApi>`, …), the backend's `BACKEND`, counters,
//! `stats()` and facade entry `platform()`, with their docs and examples, so the vendor
//! crates do not each write them.

/// Declares a stream backend's public items: `$krate::$api` is the vendor crate and its
/// [`StreamApi`](crate::StreamApi) implementation, `$title` the vendor's name in the docs,
/// `$stats` the name of its [`Stats`](crate::Stats) alias, then the names of the platform,
/// device, buffer, queue, event, module and kernel types. Besides those it declares
/// `BACKEND`, `stats()`, `platform()` (the facade's entry, with IPC) and the crate's
/// `COUNTERS` (the one [`StreamApi::counters`](crate::StreamApi::counters) returns). The
/// crate depends on `offload_core`.
/// The examples open the platform and skip themselves where no device is present; the
/// module's loads the crate's `fixtures::KERNELS`.
///
/// ```ignore
/// offload_driver::stream_backend_types! {
///     offload_cuda::CudaApi "CUDA": CudaStats
///     CudaPlatform CudaDevice CudaBuffer CudaQueue CudaEvent CudaModule CudaKernel
/// }
/// ```
#[macro_export]
macro_rules! stream_backend_types {
    (
        $krate:ident :: $api:ident $title:literal : $stats:ident
        $platform:ident $device:ident $buffer:ident $queue:ident $event:ident
        $module:ident $kernel:ident
    ) => {
        /// The backend family this crate implements.
        ///
        /// ```
        #[doc = concat!("assert_eq!(", stringify!($krate), "::BACKEND, ", stringify!($krate),
                    "::platform().kind());")]
        /// ```
        pub const BACKEND: ::offload_core::BackendKind = <$api as $crate::StreamApi>::KIND;

        pub(crate) static COUNTERS: $crate::Counters = $crate::Counters::new();

        #[doc = concat!("Process-wide counts of what the ", $title, " backend did.")]
        ///
        /// ```
        #[doc = concat!("let s = ", stringify!($krate), "::stats();")]
        /// assert!(s.opened >= s.deinitialised);
        /// ```
        pub type $stats = $crate::Stats;

        /// Reads the process-wide counters.
        ///
        /// ```
        /// use offload_core::hal::Platform as _;
        #[doc = concat!("let before = ", stringify!($krate), "::stats();")]
        #[doc = concat!("if ", stringify!($krate), "::", stringify!($platform),
                    "::open(&offload_core::Config::default()).is_err() {")]
        ///     // A probe that finds no device opens nothing.
        #[doc = concat!("    assert!(", stringify!($krate), "::stats().opened >= before.opened);")]
        /// }
        /// ```
        pub fn stats() -> $stats {
            COUNTERS.stats()
        }

        /// The entry the facade registers for this backend's cargo feature (with IPC).
        ///
        /// ```
        #[doc = concat!("assert_eq!(", stringify!($krate), "::platform().kind(), ",
                    stringify!($krate), "::BACKEND);")]
        /// ```
        pub fn platform() -> ::offload_core::PlatformEntry {
            ::offload_core::PlatformEntry::with_ipc::<$platform>()
        }

        #[doc = concat!("The ", $title, " platform: the library, initialised, with a record \
            per device.")]
        ///
        /// ```
        /// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
        /// use offload_core::{Config, Error};
        #[doc = concat!("match ", stringify!($krate), "::", stringify!($platform),
                                            "::open(&Config::default()) {")]
        ///     Ok(platform) => {
        ///         println!("{}: {} device(s)", platform.name(), platform.devices().len());
        ///         platform.deinit()?;
        ///     }
        ///     Err(
        ///         Error::DriverNotFound { library, reason, .. }
        ///         | Error::NoDevice { library, reason, .. },
        ///     ) => {
        #[doc = concat!("        println!(\"no ", $title, " ({library}): {reason}\")")]
        ///     }
        ///     Err(e) => return Err(e),
        /// }
        /// # Ok::<(), Error>(())
        /// ```
        pub type $platform = $crate::StreamPlatform<$api>;

        #[doc = concat!("A ", $title, " device. It holds the library open for as long as it \
            lives; `ordinal()` is its position in the vendor's order.")]
        ///
        /// ```
        /// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
        /// use offload_core::Config;
        #[doc = concat!("let Ok(platform) = ", stringify!($krate), "::", stringify!($platform),
                                            "::open(&Config::default()) else {")]
        ///     return; // no such device on this machine
        /// };
        /// for dev in platform.devices() {
        ///     println!("device {}", dev.ordinal());
        /// }
        /// ```
        pub type $device = $crate::StreamDevice<$api>;

        #[doc = concat!("An allocation of the ", $title, " backend: device, page-locked host, \
            managed or imported IPC memory.")]
        ///
        /// ```
        /// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
        /// use offload_core::{Config, MemKind};
        #[doc = concat!("let Ok(platform) = ", stringify!($krate), "::", stringify!($platform),
                                            "::open(&Config::default()) else { return Ok(()) };")]
        /// let dev = platform.devices().remove(0);
        /// let buf = dev.alloc(10, MemKind::Device)?;
        /// assert_eq!(buf.len(), 10);
        /// dev.free(buf)?;
        /// # Ok::<(), offload_core::Error>(())
        /// ```
        pub type $buffer = $crate::StreamBuffer<$api>;

        #[doc = concat!("A ", $title, " queue: a non-blocking stream.")]
        ///
        /// ```
        /// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
        /// use offload_core::Config;
        #[doc = concat!("let Ok(platform) = ", stringify!($krate), "::", stringify!($platform),
                                            "::open(&Config::default()) else { return Ok(()) };")]
        /// let dev = platform.devices().remove(0);
        /// let queue = dev.queue()?;
        /// queue.sync()?;
        /// queue.destroy()?;
        /// # Ok::<(), offload_core::Error>(())
        /// ```
        pub type $queue = $crate::StreamQueue<$api>;

        #[doc = concat!("A ", $title, " event, recorded on a queue.")]
        ///
        /// ```
        /// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
        /// use offload_core::Config;
        #[doc = concat!("let Ok(platform) = ", stringify!($krate), "::", stringify!($platform),
                                            "::open(&Config::default()) else { return Ok(()) };")]
        /// let dev = platform.devices().remove(0);
        /// let queue = dev.queue()?;
        /// let (a, b) = (queue.record()?, queue.record()?);
        /// println!("{:?}", b.elapsed_since(&a)?);
        /// # Ok::<(), offload_core::Error>(())
        /// ```
        pub type $event = $crate::StreamEvent<$api>;

        #[doc = concat!("A program loaded on a ", $title, " device.")]
        ///
        /// ```
        /// use offload_core::hal::{Device as _, Event as _, Platform as _, Program as _, Queue as _};
        /// use offload_core::Config;
        #[doc = concat!("let Ok(platform) = ", stringify!($krate), "::", stringify!($platform),
                                            "::open(&Config::default()) else { return Ok(()) };")]
        /// let dev = platform.devices().remove(0);
        #[doc = concat!("let module = dev.load(", stringify!($krate), "::fixtures::KERNELS)?;")]
        /// assert!(module.kernels().contains(&"add_one".to_string()));
        /// module.unload()?;
        /// # Ok::<(), offload_core::Error>(())
        /// ```
        pub type $module = $crate::StreamModule<$api>;

        #[doc = concat!("A kernel of a ", $title, " module.")]
        ///
        /// ```
        #[doc = concat!("fn name(k: &", stringify!($krate), "::", stringify!($kernel),
                                            ") -> String { format!(\"{k:?}\") }")]
        /// ```
        pub type $kernel = $crate::StreamKernel<$api>;
    };
}
