//! L5: the environment overrides the defaults, the builder overrides the environment, the
//! first init fixes the configuration and later ones share it. Environment cases run in
//! child processes (this test binary re-run with `OFFLOAD_TEST_CHILD` set), because the
//! environment is process-wide.

mod common;

use common::{result, run_child};

use offload::{BackendKind, Error, Offload};

/// The variant's name (`Debug` of `Error` prints its message, not the variant).
fn variant(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { .. } => "InvalidArgument",
        Error::DriverNotFound { .. } => "DriverNotFound",
        Error::Unsupported { .. } => "Unsupported",
        Error::Driver { .. } => "Driver",
        _ => "other",
    }
}

/// The child side: prints what it saw as `RESULT <text>`.
#[test]
fn child() {
    let Ok(case) = std::env::var("OFFLOAD_TEST_CHILD") else {
        return; // not a child: nothing to do
    };
    let line = match case.as_str() {
        "config" => match Offload::init() {
            Ok(rt) => {
                let c = rt.config().unwrap();
                format!(
                    "backends={:?} ipc={} host_devices={} host devices found={}",
                    c.backends,
                    c.ipc_cache_size,
                    c.host_devices,
                    rt.devices()
                        .unwrap()
                        .iter()
                        .filter(|d| d.backend() == BackendKind::Host)
                        .count()
                )
            }
            Err(e) => format!("error {} {e}", variant(&e)),
        },
        "builder-wins" => {
            let rt = Offload::builder().ipc_cache_size(2).start().unwrap();
            format!("ipc={}", rt.config().unwrap().ipc_cache_size)
        }
        other => panic!("unknown child case {other}"),
    };
    println!("RESULT {line}");
}

#[test]
fn defaults_without_environment() {
    assert_eq!(
        result(&run_child("config", &[])),
        "backends=None ipc=16 host_devices=1 host devices found=1"
    );
}

#[test]
fn environment_overrides_defaults() {
    let out = run_child(
        "config",
        &[
            ("OFFLOAD_BACKENDS", "host"),
            ("OFFLOAD_IPC_CACHE_SIZE", "5"),
            ("OFFLOAD_HOST_DEVICES", "3"),
        ],
    );
    assert_eq!(
        result(&out),
        "backends=Some([Host]) ipc=5 host_devices=3 host devices found=3"
    );
}

#[test]
fn builder_overrides_environment() {
    let out = run_child("builder-wins", &[("OFFLOAD_IPC_CACHE_SIZE", "9")]);
    assert_eq!(result(&out), "ipc=2");
}

#[test]
fn bad_or_missing_backends_are_typed_errors() {
    let out = run_child("config", &[("OFFLOAD_BACKENDS", "host,metal")]);
    let r = result(&out);
    assert!(
        r.starts_with("error InvalidArgument") && r.contains("metal"),
        "{r}"
    );
    let out = run_child("config", &[("OFFLOAD_IPC_CACHE_SIZE", "many")]);
    assert!(result(&out).contains("OFFLOAD_IPC_CACHE_SIZE"), "{out}");
    // Asking for a backend whose driver is missing (or that this build lacks) fails init
    // with a typed error naming the backend.
    let out = run_child("config", &[("OFFLOAD_BACKENDS", "host,cuda")]);
    let r = result(&out);
    // With the cuda feature the platform exists and finds no driver on this machine;
    // without it there is no cuda platform in the build.
    let expected = if cfg!(feature = "cuda") {
        "error DriverNotFound"
    } else {
        "error Unsupported"
    };
    assert!(r.starts_with(expected) && r.contains("cuda"), "{r}");
}

#[test]
fn first_init_fixes_the_configuration() {
    let _serial = common::serial();
    let first = Offload::builder()
        .ipc_cache_size(3)
        .host_devices(2)
        .start()
        .unwrap();
    // Asking for nothing explicit shares the configuration in force.
    let second = Offload::init().unwrap();
    let c = second.config().unwrap();
    assert_eq!((c.ipc_cache_size, c.host_devices, c.backends), (3, 2, None));
    assert_eq!(first.generation(), second.generation());
    // Asking explicitly for other settings is an error that names them,
    // not a silent share; asking for what is in force shares.
    let e = Offload::builder()
        .ipc_cache_size(7)
        .host_devices(2)
        .start()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("ipc_cache_size: asked 7, in force 3"),
        "{e}"
    );
    assert!(!e.to_string().contains("host_devices"), "{e}");
    let third = Offload::builder()
        .ipc_cache_size(3)
        .host_devices(2)
        .start()
        .unwrap();
    assert_eq!(third.generation(), first.generation());
    third.shutdown().unwrap();
    second.shutdown().unwrap();
    first.shutdown().unwrap();
    // After the last shutdown, the next init configures afresh.
    let third = Offload::builder().ipc_cache_size(7).start().unwrap();
    assert_eq!(third.config().unwrap().ipc_cache_size, 7);
    assert!(matches!(third.shutdown(), Ok(ref s) if s.was_last()));
}
