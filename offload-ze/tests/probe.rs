//! Probing for Level Zero on the machine the tests run on. CI installs the real Level Zero
//! loader (Debian's `libze1`) without any driver: the loader loads and reports that it has
//! no driver (or no device), which is `Error::DriverNotFound` naming the call and its code
//! (not a dlopen failure): an absent platform, never a panic, directly and through the
//! runtime.
//!
//! Where the loader itself is not installed the tests print SKIP, except under `CI=true`,
//! where they fail: a green CI means the real loader ran. On a machine with a Level Zero
//! device the same tests check the devices instead.

use offload_core::hal::{Device as _, Platform as _};
use offload_core::{BackendKind, Config, Error, MemKind, NoPlatforms, Offload, Uninit};
use offload_ze::ZePlatform;

/// What probing this machine found.
enum Probe {
    /// The loader ran and reported no driver or device: the test passes.
    NoDevice,
    /// The loader is not installed: skip (fail under CI=true).
    Skip,
}

/// Checks a `DriverNotFound` from probing this machine.
fn check_not_found(e: &Error) -> Probe {
    let Error::DriverNotFound {
        backend,
        library,
        reason,
    } = e
    else {
        panic!("expected DriverNotFound, got {e:?}");
    };
    assert_eq!(*backend, BackendKind::Ze);
    assert_eq!(library, "libze_loader.so.1");
    if ["zeInit", "zeDriverGet", "zeDeviceGet"]
        .iter()
        .any(|call| reason.starts_with(call))
    {
        // The real loader ran and found no driver, or drivers without devices.
        assert!(
            reason.contains("ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)")
                || reason.contains(": 0 drivers")
                || reason.contains(": 0 devices"),
            "{reason}"
        );
        assert!(!reason.contains("cannot open shared object"), "{reason}");
        eprintln!("Level Zero loader found, no driver or device: {e}");
        return Probe::NoDevice;
    }
    // Anything else must be the loader's absence, which is a SKIP, not a pass.
    assert!(
        reason.contains("libze_loader.so.1"),
        "neither a missing loader nor a missing driver: {e}"
    );
    let why = format!("the Level Zero loader is not installed: {e}");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    println!("SKIP: {why}");
    Probe::Skip
}

#[test]
fn opening_without_a_driver_is_driver_not_found() {
    let before = offload_ze::stats();
    match ZePlatform::open(&Config::default()) {
        Err(e) => {
            if let Probe::NoDevice = check_not_found(&e) {
                assert_eq!(
                    offload_ze::stats().opened,
                    before.opened,
                    "a failed probe opened"
                );
            }
        }
        Ok(ze) => {
            // A machine with a Level Zero device: every device describes itself and
            // allocates.
            let devices = ze.devices();
            assert!(!devices.is_empty());
            for dev in &devices {
                let info = dev.info().unwrap();
                assert_eq!(info.backend, BackendKind::Ze);
                assert!(!info.name.is_empty() && info.memory > 0);
                let buffer = dev.alloc(64, MemKind::Device).unwrap();
                dev.free(buffer).unwrap();
            }
            drop(devices);
            ze.deinit().unwrap();
        }
    }
}

#[test]
fn the_runtime_fails_start_naming_ze() {
    let started = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_ze::platform())
        .start();
    match started {
        Err(e) => {
            assert!(
                e.to_string()
                    .starts_with("ze: driver not found: libze_loader.so.1: "),
                "{e}"
            );
            check_not_found(&e);
        }
        Ok(rt) => {
            let devices = rt.devices().unwrap();
            assert!(devices.iter().all(|d| d.backend() == BackendKind::Ze));
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
