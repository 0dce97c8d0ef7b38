//! Probing for HIP on the machine the tests run on. CI installs the real HIP runtime
//! (Debian's `libamdhip64-5`) on a machine without an AMD GPU: the runtime loads, and
//! `hipInit`/`hipGetDeviceCount` report that there is no device, which is
//! `Error::DriverNotFound` naming those calls and `hipErrorNoDevice (100)` (not a dlopen
//! failure): an absent platform, never a panic, directly and through the runtime.
//!
//! Where the runtime itself is not installed the tests print SKIP, except under `CI=true`,
//! where they fail: a green CI means the real runtime ran. On a machine with an AMD GPU the
//! same tests check the devices instead.

use offload_core::hal::{Device as _, Platform as _};
use offload_core::{BackendKind, Config, Error, MemKind, NoPlatforms, Offload, Uninit};
use offload_hip::HipPlatform;

/// What probing this machine found.
enum Probe {
    /// The runtime loaded and reported no device: the test passes.
    NoDevice,
    /// The runtime is not installed: skip (fail under CI=true).
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
    assert_eq!(*backend, BackendKind::Hip);
    if reason.starts_with("hipInit") || reason.starts_with("hipGetDeviceCount") {
        // The real runtime ran and found no device.
        assert!(
            offload_hip::LIBRARIES.contains(&library.as_str()),
            "{library}"
        );
        assert!(reason.contains("hipErrorNoDevice (100)"), "{reason}");
        assert!(!reason.contains("cannot open shared object"), "{reason}");
        eprintln!("HIP runtime found, no device: {e}");
        return Probe::NoDevice;
    }
    // Anything else must be the runtime's absence, which is a SKIP, not a pass.
    assert!(
        reason.contains("libamdhip64.so"),
        "neither a missing runtime nor a missing device: {e}"
    );
    let why = format!("the HIP runtime is not installed: {e}");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    println!("SKIP: {why}");
    Probe::Skip
}

#[test]
fn opening_without_a_device_is_driver_not_found() {
    let before = offload_hip::stats();
    match HipPlatform::open(&Config::default()) {
        Err(e) => {
            if let Probe::NoDevice = check_not_found(&e) {
                assert_eq!(
                    offload_hip::stats().opened,
                    before.opened,
                    "a failed probe opened"
                );
            }
        }
        Ok(hip) => {
            // A machine with an AMD GPU: every device describes itself and allocates.
            let devices = hip.devices();
            assert!(!devices.is_empty());
            for dev in &devices {
                let info = dev.info().unwrap();
                assert_eq!(info.backend, BackendKind::Hip);
                assert!(!info.name.is_empty() && info.memory > 0 && info.compute_units > 0);
                let buffer = dev.alloc(64, MemKind::Device).unwrap();
                dev.free(buffer).unwrap();
            }
            drop(devices);
            hip.deinit().unwrap();
        }
    }
}

#[test]
fn the_runtime_fails_start_naming_hip() {
    let started = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_hip::platform())
        .start();
    match started {
        Err(e) => {
            assert!(e.to_string().starts_with("hip: driver not found: "), "{e}");
            check_not_found(&e);
        }
        Ok(rt) => {
            let devices = rt.devices().unwrap();
            assert!(devices.iter().all(|d| d.backend() == BackendKind::Hip));
            devices[0]
                .alloc(64, MemKind::Device)
                .unwrap()
                .free()
                .unwrap();
            rt.shutdown().unwrap();
        }
    }
}
