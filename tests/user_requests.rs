//! What a user asks for is given or refused with a typed
//! error that says why, never silently replaced.
//!
//! - An empty backend list (`OFFLOAD_BACKENDS=","`, `builder().backends([])` with no added
//!   platform) is an error, not a runtime with no platforms.
//! - A builder that asks explicitly for settings the live runtime lacks gets an error
//!   naming what it asked and what is in force; asking for what is in force shares it.
//! - `rt.device(kind)` gives the first device of a backend, or says why there is none.
//! - `shutdown()`'s error carries the `Offload<Shutdown>`: the caller knows the runtime
//!   was deinitialised.
//!
//! Environment cases run in child processes (this binary re-run with
//! `OFFLOAD_TEST_CHILD` set), because the environment is process-wide.

mod common;

use offload::plugin::PlatformEntry;
use offload::plugin::hal;
use offload::{BackendKind, Config, Error, MemKind, Offload, Result, ShutdownError};
use offload_core::reference::{RefDevice, Reference};

/// Runs the `child` test of this binary with `vars` set; returns its `RESULT` line.
fn run_child(case: &str, vars: &[(&str, &str)]) -> String {
    common::result(&common::run_child(case, vars)).to_owned()
}

/// The child side: prints what `Offload::init` gave as `RESULT <text>`.
#[test]
fn child() {
    let Ok(case) = std::env::var("OFFLOAD_TEST_CHILD") else {
        return; // not a child: nothing to do
    };
    let line = match case.as_str() {
        "init" => match Offload::init() {
            Ok(rt) => format!("ok platforms={}", rt.platforms().unwrap().len()),
            Err(e @ Error::InvalidArgument { .. }) => format!("error InvalidArgument {e}"),
            Err(e) => format!("error other {e}"),
        },
        other => panic!("unknown child case {other}"),
    };
    println!("RESULT {line}");
}

#[test]
fn an_empty_offload_backends_list_is_an_error() {
    for value in [",", " , ,", ",,"] {
        let r = run_child("init", &[("OFFLOAD_BACKENDS", value)]);
        assert!(r.starts_with("error InvalidArgument"), "{value:?}: {r}");
        assert!(r.contains("OFFLOAD_BACKENDS"), "{r}");
        assert!(r.contains("names no backend"), "{r}");
        // It says what to write instead.
        assert!(r.contains("OFFLOAD_BACKENDS=host"), "{r}");
    }
    // An empty value counts as unset: every compiled-in backend whose driver is found.
    let r = run_child("init", &[("OFFLOAD_BACKENDS", "")]);
    assert!(r.starts_with("ok platforms="), "{r}");
    assert_ne!(r, "ok platforms=0");
}

#[test]
fn an_empty_backend_list_from_the_builder_is_an_error() {
    let _serial = common::serial();
    let e = Offload::builder().backends([]).start().unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { call, .. } if call.contains("backends")),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("no devices"), "{text}");
    assert!(text.contains("backends([BackendKind::Host])"), "{text}");
    // It is refused whether or not a runtime is live.
    let live = Offload::init().unwrap();
    assert!(matches!(
        Offload::builder().backends([]).start(),
        Err(Error::InvalidArgument { .. })
    ));
    live.shutdown().unwrap();
    // An empty list with a platform of one's own is the way to open only that platform.
    let rt = Offload::builder()
        .backends([])
        .platform(PlatformEntry::of::<Reference>())
        .start()
        .unwrap();
    let platforms = rt.platforms().unwrap();
    assert_eq!(platforms.len(), 1);
    assert_eq!(platforms[0].backend, BackendKind::Reference);
    assert!(rt.shutdown().unwrap().was_last());
}

#[test]
fn a_second_builder_asking_for_other_settings_gets_a_typed_error_naming_both() {
    let _serial = common::serial();
    let first = Offload::builder()
        .backends([BackendKind::Host])
        .start()
        .unwrap();
    let e = Offload::builder()
        .backends([BackendKind::Vulkan])
        .start()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                call: "Offload::start",
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("backends: asked [vulkan], in force [host]"),
        "{text}"
    );
    // It says what to do.
    assert!(text.contains("Shut the other runtime down first"), "{text}");
    assert!(text.contains("Offload::config()"), "{text}");

    // Each explicit setting that differs is named; one that matches is not.
    let e = Offload::builder()
        .backends([BackendKind::Host])
        .host_devices(4)
        .ipc_cache_size(1)
        .start()
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("host_devices: asked 4, in force 1"), "{text}");
    assert!(
        text.contains("ipc_cache_size: asked 1, in force 16"),
        "{text}"
    );
    assert!(!text.contains("backends: asked"), "{text}");

    // The refusals took no reference: the first shutdown is the last.
    assert!(first.shutdown().unwrap().was_last());
    // With nothing live, the same request starts its own runtime.
    let rt = Offload::builder().host_devices(4).start().unwrap();
    let host = rt.devices().unwrap();
    assert_eq!(
        host.iter()
            .filter(|d| d.backend() == BackendKind::Host)
            .count(),
        4
    );
    assert!(rt.shutdown().unwrap().was_last());
}

#[test]
fn asking_for_what_is_in_force_shares_the_live_runtime() {
    let _serial = common::serial();
    // A list in force: the same list, in any order, with the same settings, shares.
    let first = Offload::builder()
        .backends([BackendKind::Host])
        .host_devices(2)
        .start()
        .unwrap();
    let in_force = first.config().unwrap();
    let second = Offload::builder()
        .backends(in_force.backends.clone().unwrap())
        .host_devices(in_force.host_devices)
        .ipc_cache_size(in_force.ipc_cache_size)
        .start()
        .unwrap();
    let third = Offload::init().unwrap(); // nothing explicit: shares
    assert_eq!(second.generation(), first.generation());
    assert_eq!(third.generation(), first.generation());
    assert_eq!(second.config().unwrap(), in_force);
    for rt in [third, second] {
        assert!(!rt.shutdown().unwrap().was_last());
    }
    assert!(first.shutdown().unwrap().was_last());

    // No list in force: what opened is in force, and asking for it shares.
    let first = Offload::init().unwrap();
    assert_eq!(first.config().unwrap().backends, None);
    let open: Vec<BackendKind> = first
        .platforms()
        .unwrap()
        .iter()
        .map(|p| p.backend)
        .rev()
        .collect();
    let second = Offload::builder().backends(open).start().unwrap();
    assert_eq!(second.generation(), first.generation());
    drop(second);
    assert!(first.shutdown().unwrap().was_last());
}

#[test]
fn device_by_backend_gives_the_first_device_or_says_why_not() {
    let _serial = common::serial();
    let rt = Offload::builder().host_devices(2).start().unwrap();
    let host = rt.device(BackendKind::Host).unwrap();
    assert_eq!(host.backend(), BackendKind::Host);
    assert_eq!(host, rt.devices().unwrap()[0], "the first host device");
    host.alloc(16, MemKind::Device).unwrap();

    let e = rt.device(BackendKind::Cuda).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                backend: BackendKind::Cuda,
                call: "Offload::device",
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("no cuda device"), "{text}");
    if cfg!(feature = "cuda") {
        // Compiled in, no driver on this machine: the reason `unavailable()` gives.
        let unavailable = rt.unavailable().unwrap();
        let reason = &unavailable
            .iter()
            .find(|u| u.backend == BackendKind::Cuda)
            .expect("cuda is unavailable here")
            .reason;
        assert!(text.contains("unavailable"), "{text}");
        assert!(text.contains(reason.as_str()), "{text} lacks {reason}");
    } else {
        assert!(text.contains("not compiled into this build"), "{text}");
    }
    assert!(rt.shutdown().unwrap().was_last());

    // A backend left out of the list in force is named as such.
    let rt = Offload::builder()
        .backends([BackendKind::Host])
        .start()
        .unwrap();
    let text = rt.device(BackendKind::Vulkan).unwrap_err().to_string();
    if cfg!(feature = "vulkan") {
        assert!(
            text.contains("not among the backends in force [host]"),
            "{text}"
        );
    } else {
        assert!(text.contains("not compiled into this build"), "{text}");
    }
    assert!(rt.shutdown().unwrap().was_last());
}

/// The reference platform, except that its `deinit` fails after deinitialising.
#[derive(Debug)]
struct FailsToDeinit(Reference);

impl hal::Platform for FailsToDeinit {
    type Device = RefDevice;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(config: &Config) -> Result<Self> {
        Reference::open(config).map(FailsToDeinit)
    }
    fn name(&self) -> String {
        "fails-to-deinit".into()
    }
    fn devices(&self) -> Vec<RefDevice> {
        self.0.devices()
    }
    fn deinit(&self) -> Result<()> {
        self.0.deinit()?;
        Err(Error::Driver {
            backend: BackendKind::Reference,
            call: "deinit",
            code: -7,
            message: "deinit fails on purpose".into(),
        })
    }
}

fn start_failing() -> Offload {
    Offload::builder()
        .backends([])
        .platform(PlatformEntry::of::<FailsToDeinit>())
        .start()
        .unwrap()
}

#[test]
fn shutdown_errors_carry_the_shut_down_runtime() {
    let _serial = common::serial();
    let rt = start_failing();
    let other = rt.clone();
    let generation = rt.generation();
    // Not the last reference: nothing torn down, no error.
    assert!(!other.shutdown().unwrap().was_last());

    let e: ShutdownError = rt.shutdown().unwrap_err();
    assert!(e.was_last(), "the runtime was deinitialised all the same");
    assert_eq!(e.generation(), generation);
    assert_eq!(e.errors().count(), 1);
    assert!(matches!(e.error(), Error::Driver { code: -7, .. }));
    let text = e.to_string();
    assert!(text.contains("deinitialised the runtime"), "{text}");
    assert!(text.contains("deinit fails on purpose"), "{text}");
    // It is a std error, so it boxes.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    let e = *boxed.downcast::<ShutdownError>().unwrap();
    let (down, error) = e.into_parts();
    assert!(down.was_last());
    assert_eq!(down.generation(), generation);
    assert!(matches!(error, Error::Driver { code: -7, .. }));

    // The runtime really is down: the next init starts a fresh generation.
    let fresh = Offload::init().unwrap();
    assert_ne!(fresh.generation(), generation);
    assert!(fresh.shutdown().unwrap().was_last());

    // `?` still works in a function returning offload::Result, giving the Error.
    fn close(rt: Offload) -> Result<bool> {
        Ok(rt.shutdown()?.was_last())
    }
    assert!(matches!(
        close(start_failing()),
        Err(Error::Driver { code: -7, .. })
    ));
    assert!(offload::take_unreported_errors().is_empty());
}
