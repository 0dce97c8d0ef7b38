//! Probing for a vendor's real driver on the machine the tests run on, the same way for
//! every vendor backend: opening the platform directly and starting a runtime with it.
//! Without the driver library, or with one that finds no device (CI installs Debian's HIP
//! runtime and Level Zero loader on a machine without a GPU), the first is
//! `Error::DriverNotFound` (the library named once, the dynamic loader's message, what to
//! do) and the second `Error::NoDevice` (the driver's own call and code) or, where no driver
//! stands behind a loader, `DriverNotFound` with those calls — each naming the backend, an
//! absent platform, never a panic, and a failed probe counts no open. On a machine with a device the same tests
//! check the devices instead: each describes itself and allocates.

use offload_core::hal::{Device, Platform};
use offload_core::{Config, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Uninit};

/// What a backend's probe expects of this machine.
///
/// ```
/// use offload_testing::fake::probe::Probe;
/// const PROBE: Probe = Probe {
///     what: "the HIP runtime",
///     libraries: &["libamdhip64.so"],
///     calls: &["hipInit", "hipGetDeviceCount"],
///     no_device: &["hipErrorNoDevice (100)"],
///     may_be_absent: false,
/// };
/// assert_eq!(PROBE.libraries.len(), 1);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    /// The driver in words, for SKIP messages ("the HIP runtime").
    pub what: &'static str,
    /// The library names the backend tries.
    pub libraries: &'static [&'static str],
    /// The driver calls whose failure means "installed, but no device" (a reason that
    /// starts with one of them).
    pub calls: &'static [&'static str],
    /// With those calls, the reason names one of these codes (empty: any).
    pub no_device: &'static [&'static str],
    /// Whether the library's absence is this machine's normal case (no package installs
    /// it): a pass, where otherwise it is a SKIP (and a failure under `CI=true`).
    pub may_be_absent: bool,
}

impl Probe {
    /// Checks a `DriverNotFound` from probing this machine; `true` when the driver ran and
    /// found no device, `false` when the library is absent (after printing SKIP where that
    /// is not expected).
    fn check_not_found<B: Platform>(&self, e: &Error) -> bool {
        let (Error::DriverNotFound {
            backend,
            library,
            reason,
            ..
        }
        | Error::NoDevice {
            backend,
            library,
            reason,
        }) = e
        else {
            panic!("expected DriverNotFound or NoDevice, got {e:?}");
        };
        assert_eq!(*backend, B::KIND);
        assert!(self.libraries.contains(&library.as_str()), "{library}");
        let text = e.to_string();
        assert!(text.contains(library.as_str()), "{e}");
        // The library is named once: the loader's message, which repeats it, is trimmed.
        assert_eq!(text.matches(library.as_str()).count(), 1, "{e}");
        if matches!(e, Error::NoDevice { .. }) {
            // The driver loaded and said there is no device: the error says so, with the
            // call and code, and says what it means.
            assert!(
                self.calls.iter().any(|call| reason.contains(call)),
                "NoDevice names the driver call that found no device: {e}"
            );
            assert!(text.contains("no device"), "{e}");
            assert!(text.contains("loaded, but"), "{e}");
            eprintln!("{} found, no device: {e}", self.what);
            return true;
        }
        // What to do about a missing driver is part of the text.
        assert!(text.contains("install the"), "{e}");
        if self.calls.iter().any(|call| reason.starts_with(call)) {
            assert!(
                self.no_device.is_empty() || self.no_device.iter().any(|c| reason.contains(c)),
                "{reason}"
            );
            assert!(!reason.contains("cannot open shared object"), "{reason}");
            eprintln!("{} found, no device: {e}", self.what);
            return true;
        }
        // Anything else must be the library's absence: the loader's message (naming each
        // library tried where there were several; one is named by the error already).
        assert!(
            reason.contains("cannot open shared object")
                || self.libraries.iter().any(|l| reason.contains(l)),
            "neither a missing library nor a missing device: {e}"
        );
        if self.may_be_absent {
            eprintln!("{} is not installed: {e}", self.what);
        } else {
            let why = format!("{} is not installed: {e}", self.what);
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            println!("SKIP: {why}");
        }
        false
    }

    /// Opens platform `B` directly: `DriverNotFound` as described, with no open counted
    /// (`opened` reads the backend's count), or, on a machine with a device, devices that
    /// describe themselves and allocate.
    ///
    /// ```no_run
    /// # let probe: offload_testing::fake::probe::Probe = unimplemented!();
    /// # type HipPlatform = offload_core::reference::Reference;
    /// probe.open_directly::<HipPlatform>(|| 0);
    /// ```
    pub fn open_directly<B: Platform>(&self, opened: fn() -> usize) {
        let before = opened();
        match B::open(&Config::default()) {
            Err(e) => {
                self.check_not_found::<B>(&e);
                assert_eq!(opened(), before, "a failed probe opened");
            }
            Ok(platform) => {
                let devices = platform.devices();
                assert!(!devices.is_empty());
                for dev in &devices {
                    let info = dev.info().unwrap();
                    assert_eq!(info.backend, B::KIND);
                    assert!(!info.name.is_empty() && info.memory > 0);
                    let buffer = dev.alloc(64, MemKind::Device).unwrap();
                    dev.free(buffer).unwrap();
                }
                drop(devices);
                platform.deinit().unwrap();
            }
        }
    }

    /// Starts a runtime with only `entry` (platform `B`): it fails naming the backend and
    /// the driver, or, on a machine with a device, allocates and shuts down.
    ///
    /// ```no_run
    /// # let probe: offload_testing::fake::probe::Probe = unimplemented!();
    /// # type HipPlatform = offload_core::reference::Reference;
    /// # fn platform() -> offload_core::PlatformEntry { unimplemented!() }
    /// probe.through_runtime::<HipPlatform>(platform);
    /// ```
    pub fn through_runtime<B: Platform>(&self, entry: fn() -> PlatformEntry) {
        let started = Offload::<Uninit, NoPlatforms>::builder()
            .backends([])
            .platform(entry())
            .start();
        match started {
            Err(e) => {
                let kind = B::KIND.name();
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!("{kind}: driver not found: "))
                        || text.starts_with(&format!("{kind}: no device: ")),
                    "{e}"
                );
                self.check_not_found::<B>(&e);
            }
            Ok(rt) => {
                let devices = rt.devices().unwrap();
                assert!(devices.iter().all(|d| d.backend() == B::KIND));
                devices[0]
                    .alloc(64, MemKind::Device)
                    .unwrap()
                    .free()
                    .unwrap();
                drop(devices);
                rt.shutdown().unwrap();
            }
        }
    }
}
