//! L4: shutdown runs every step whatever failed before, and returns all errors together.
//! Also: a platform that fails to open makes `init` fail without leaking what was
//! already opened.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use offload::plugin::hal::{self, Never};
use offload::plugin::{PlatformEntry, no_compute};
use offload::{BackendKind, Config, DeviceInfo, Error, MemKind, Offload, Result};

/// Per-backend counters, indexed by the backend's `ID`.
static OPENED: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];
static DEINITS: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];
static FREES: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

/// A test backend: one device; `FAIL_*` make that step fail with a driver error.
struct Test<const ID: usize, const FAIL_OPEN: bool, const FAIL_FREE: bool, const FAIL_DEINIT: bool>;

/// Its device: memory only, whose `free` fails if `FAIL_FREE`.
struct TestDevice<const ID: usize, const FAIL_FREE: bool>;

fn driver_error(call: &'static str, id: usize) -> Error {
    Error::Driver {
        backend: BackendKind::Reference,
        call,
        code: -(id as i64) - 1,
        message: format!("test backend {id} failed on purpose"),
    }
}

impl<const ID: usize, const FO: bool, const FF: bool, const FD: bool> hal::Platform
    for Test<ID, FO, FF, FD>
{
    type Device = TestDevice<ID, FF>;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(_: &Config) -> Result<Self> {
        if FO {
            return Err(driver_error("open", ID));
        }
        OPENED[ID].fetch_add(1, Ordering::SeqCst);
        Ok(Test)
    }
    fn name(&self) -> String {
        format!("test{ID}")
    }
    fn devices(&self) -> Vec<TestDevice<ID, FF>> {
        vec![TestDevice]
    }
    fn deinit(&self) -> Result<()> {
        DEINITS[ID].fetch_add(1, Ordering::SeqCst);
        if FD {
            Err(driver_error("deinit", ID))
        } else {
            Ok(())
        }
    }
}

impl<const ID: usize, const FF: bool> hal::Device for TestDevice<ID, FF> {
    type Buffer = Vec<u8>;
    type Program = Never;
    type Queue = Never;
    type Event = Never;

    fn info(&self) -> Result<DeviceInfo> {
        Ok(DeviceInfo::new(
            format!("test{ID}"),
            "test",
            BackendKind::Reference,
            1 << 20,
            1,
        ))
    }
    fn alloc(&self, size: usize, _: MemKind) -> Result<Self::Buffer> {
        Ok(vec![0; size])
    }
    fn free(&self, _: Self::Buffer) -> Result<()> {
        FREES[ID].fetch_add(1, Ordering::SeqCst);
        if FF {
            Err(driver_error("free", ID))
        } else {
            Ok(())
        }
    }
    fn read(&self, b: &Self::Buffer, o: usize, dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(&b[o..o + dst.len()]);
        Ok(())
    }
    fn write(&self, b: &mut Self::Buffer, o: usize, src: &[u8]) -> Result<()> {
        b[o..o + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn fill(&self, b: &mut Self::Buffer, o: usize, len: usize, v: u8) -> Result<()> {
        b[o..o + len].fill(v);
        Ok(())
    }
    fn copy(
        &self,
        _: &Self::Buffer,
        _: usize,
        _: &mut Self::Buffer,
        _: usize,
        _: usize,
    ) -> Result<()> {
        Err(driver_error("copy", ID))
    }
    fn copy_within(&self, _: &mut Self::Buffer, _: usize, _: usize, _: usize) -> Result<()> {
        Err(driver_error("copy_within", ID))
    }
    fn with_mapped(&self, _: &mut Self::Buffer, _: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        Err(driver_error("with_mapped", ID))
    }
    no_compute!(BackendKind::Reference, load);
}

fn count(counter: &[AtomicUsize; 4], id: usize) -> usize {
    counter[id].load(Ordering::SeqCst)
}

#[test]
fn shutdown_runs_every_step_and_returns_every_error() {
    let _serial = common::serial();
    let (d0, d1, d2, f0) = (
        count(&DEINITS, 0),
        count(&DEINITS, 1),
        count(&DEINITS, 2),
        count(&FREES, 0),
    );
    let rt = Offload::builder()
        .backends([]) // no built-in platform: only the three below
        .platform(PlatformEntry::of::<Test<0, false, true, true>>()) // free and deinit fail
        .platform(PlatformEntry::of::<Test<1, false, false, false>>()) // healthy
        .platform(PlatformEntry::of::<Test<2, false, false, true>>()) // deinit fails
        .start()
        .unwrap();
    let devices = rt.devices().unwrap();
    assert_eq!(devices.len(), 3);
    let leaked_on_purpose = devices[0].alloc(16, MemKind::Device).unwrap();
    let healthy = devices[1].alloc(16, MemKind::Device).unwrap();

    let errors = match rt.shutdown().map_err(Error::from) {
        Err(Error::Multiple(errors)) => errors,
        other => panic!("expected Error::Multiple, got {other:?}"),
    };
    let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 3, "{text:#?}");
    assert!(
        text.iter()
            .any(|t| t.contains("free") && t.contains("backend 0")),
        "{text:#?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("deinit") && t.contains("backend 0")),
        "{text:#?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("deinit") && t.contains("backend 2")),
        "{text:#?}"
    );
    // Every step ran: both buffers were freed and all three platforms deinitialised.
    assert_eq!(count(&FREES, 0), f0 + 1);
    assert_eq!(count(&DEINITS, 0), d0 + 1);
    assert_eq!(count(&DEINITS, 1), d1 + 1);
    assert_eq!(count(&DEINITS, 2), d2 + 1);
    assert!(matches!(
        healthy.read(0, &mut [0; 4]),
        Err(Error::ShutDown { .. })
    ));
    drop((leaked_on_purpose, healthy));

    // The next generation starts clean.
    let rt = Offload::init().unwrap();
    assert!(rt.shutdown().unwrap().was_last());
}

#[test]
fn drop_errors_are_returned_by_the_next_shutdown() {
    let _serial = common::serial();
    let rt = Offload::builder()
        .backends([])
        .platform(PlatformEntry::of::<Test<3, false, true, false>>())
        .start()
        .unwrap();
    let buf = rt.devices().unwrap()[0].alloc(4, MemKind::Device).unwrap();
    drop(buf); // its free fails: nobody to tell yet
    match rt.shutdown().map_err(Error::from) {
        Err(e @ Error::Driver { .. }) => assert!(e.to_string().contains("free"), "{e}"),
        other => panic!("expected the deferred free error, got {other:?}"),
    }
}

#[test]
fn a_platform_that_fails_to_open_fails_init_and_leaks_nothing() {
    let _serial = common::serial();
    let opened = count(&OPENED, 1);
    let deinits = count(&DEINITS, 1);
    let result = Offload::builder()
        .backends([])
        .platform(PlatformEntry::of::<Test<1, false, false, false>>())
        .platform(PlatformEntry::of::<Test<2, true, false, false>>())
        .start();
    match result {
        Err(e @ Error::Driver { .. }) => assert!(e.to_string().contains("open"), "{e}"),
        other => panic!("expected the open error, got {other:?}"),
    }
    assert_eq!(count(&OPENED, 1), opened + 1);
    assert_eq!(
        count(&DEINITS, 1),
        deinits + 1,
        "the platform opened first was deinitialised"
    );
    // Nothing is left half-initialised.
    let rt = Offload::init().unwrap();
    assert!(rt.shutdown().unwrap().was_last());
}
