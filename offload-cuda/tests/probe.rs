//! Probing for CUDA on the machine the tests run on. Without a CUDA driver (libcuda.so.1
//! absent, as on CI), opening the platform is `Error::DriverNotFound` carrying the dynamic
//! loader's message: an absent platform, never a panic, directly and through the runtime.
//! On a machine with CUDA the same tests check the devices instead.

use offload_core::hal::{Device as _, Platform as _};
use offload_core::{BackendKind, Config, Error, MemKind, NoPlatforms, Offload, Uninit};
use offload_cuda::CudaPlatform;

/// Checks a `DriverNotFound` from probing this machine, and says which case it was.
fn check_not_found(e: &Error) {
    let Error::DriverNotFound {
        backend,
        library,
        reason,
    } = e
    else {
        panic!("expected DriverNotFound, got {e:?}");
    };
    assert_eq!(*backend, BackendKind::Cuda);
    assert_eq!(library, "libcuda.so.1");
    assert!(e.to_string().contains("libcuda.so.1"), "{e}");
    if reason.starts_with("cu") {
        // The driver is installed but cannot initialise or has no device.
        assert!(reason.contains('(') && reason.contains(')'), "{reason}");
        eprintln!("libcuda.so.1 is installed but unusable: {reason}");
    } else {
        // The usual case here: the dynamic loader's own message about the library.
        assert!(reason.starts_with("libcuda.so.1:"), "{reason}");
        eprintln!("no CUDA driver: {e}");
    }
}

#[test]
fn opening_without_a_driver_is_driver_not_found() {
    let before = offload_cuda::stats();
    match CudaPlatform::open(&Config::default()) {
        Err(e) => {
            check_not_found(&e);
            assert_eq!(
                offload_cuda::stats().opened,
                before.opened,
                "a failed probe opened"
            );
        }
        Ok(cuda) => {
            // A machine with CUDA: every device describes itself, and memory is not there yet.
            let devices = cuda.devices();
            assert!(!devices.is_empty());
            for dev in &devices {
                let info = dev.info().unwrap();
                assert_eq!(info.backend, BackendKind::Cuda);
                assert!(!info.name.is_empty() && info.memory > 0 && info.compute_units > 0);
                let e = dev.alloc(64, MemKind::Device).unwrap_err();
                assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
            }
            drop(devices);
            cuda.deinit().unwrap();
        }
    }
}

#[test]
fn the_runtime_fails_start_naming_cuda() {
    let started = Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_cuda::platform())
        .start();
    match started {
        Err(e) => {
            assert!(
                e.to_string()
                    .starts_with("cuda: driver not found: libcuda.so.1"),
                "{e}"
            );
            check_not_found(&e);
        }
        Ok(rt) => {
            let devices = rt.devices().unwrap();
            assert!(devices.iter().all(|d| d.backend() == BackendKind::Cuda));
            assert!(matches!(
                devices[0].alloc(64, MemKind::Device),
                Err(Error::Unsupported { .. })
            ));
            rt.shutdown().unwrap();
        }
    }
}
