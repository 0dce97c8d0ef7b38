//! L3: every handle used after its runtime shut down returns `Error::ShutDown` — never
//! undefined behaviour, never a panic — and dropping it afterwards is a no-op. (That
//! `Offload<Shutdown>` has no device methods is a compile-fail doctest in src/lib.rs.)

mod common;

use offload::{BackendKind, Error, MemKind, Offload};

fn shut_down<T: std::fmt::Debug>(what: &str, result: offload::Result<T>) {
    match result {
        Err(Error::ShutDown { .. }) => {}
        other => panic!("{what} after shutdown gave {other:?}, not Error::ShutDown"),
    }
}

#[test]
fn every_handle_call_after_shutdown_is_shut_down() {
    let _serial = common::serial();
    let before = offload::host::stats();
    let rt = Offload::builder().host_devices(2).start().unwrap();
    let devices = rt.devices().unwrap();
    let dev = devices[0].clone();
    let a = dev.alloc(32, MemKind::Device).unwrap();
    let b = dev.alloc(32, MemKind::Host).unwrap();
    let other = devices[1].alloc(32, MemKind::Shared).unwrap();
    assert!(rt.shutdown().unwrap().was_last());

    let mut out = [0u8; 4];
    shut_down("Device::info", dev.info());
    shut_down("Device::alloc", dev.alloc(8, MemKind::Device));
    shut_down("Buffer::read", a.read(0, &mut out));
    shut_down("Buffer::write", a.write(0, &out));
    shut_down("Buffer::fill", a.fill(0, 4, 1));
    shut_down("Buffer::copy_from", b.copy_from(0, &a, 0, 4));
    shut_down("Buffer::copy_from (same buffer)", a.copy_from(0, &a, 4, 4));
    shut_down(
        "Buffer::copy_from (other device)",
        other.copy_from(0, &a, 0, 4),
    );
    shut_down("Buffer::device().info", a.device().info());
    // A device's calls name the call and the device, in the user's words.
    for (call, e) in [
        ("Device::info", dev.info().map(drop)),
        ("Device::alloc", dev.alloc(8, MemKind::Device).map(drop)),
        (
            "Device::alloc_exportable",
            dev.alloc_exportable(8, MemKind::Device).map(drop),
        ),
        ("Device::validate", dev.validate(b"junk")),
        ("Device::queue", dev.queue().map(drop)),
    ] {
        let text = e.unwrap_err().to_string();
        assert!(
            text.starts_with(&format!("{call}: host device 0 ")),
            "{text}"
        );
    }
    // Identity stays readable: it is not state of the runtime.
    assert_eq!(a.len(), 32);
    assert_eq!(b.kind(), MemKind::Host);
    assert_eq!(dev.backend(), BackendKind::Host);
    assert_eq!(a.device(), dev);
    shut_down("Buffer::free", b.free());

    // Handles of a dead generation stay dead while a new one is live.
    let rt2 = Offload::init().unwrap();
    shut_down("Buffer::read in the next generation", a.read(0, &mut out));
    shut_down(
        "Device::alloc in the next generation",
        dev.alloc(8, MemKind::Device),
    );
    let fresh = rt2.devices().unwrap()[0].alloc(8, MemKind::Device).unwrap();
    shut_down(
        "copy from a dead buffer into a live one",
        fresh.copy_from(0, &a, 0, 4),
    );
    drop(fresh);
    rt2.shutdown().unwrap();

    drop(a);
    drop(other);
    drop(dev);
    assert_eq!(
        offload::host::stats().live_allocations,
        before.live_allocations
    );
    assert!(offload::take_unreported_errors().is_empty());
}

#[test]
fn handles_stay_shut_down_from_other_threads() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let buf = rt.devices().unwrap()[0]
        .alloc(1024, MemKind::Device)
        .unwrap();
    let buf = std::sync::Arc::new(buf);
    let users: Vec<_> = (0..4)
        .map(|t| {
            let buf = buf.clone();
            std::thread::spawn(move || {
                // Keep copying until the runtime goes away under us; each call either
                // works completely or reports ShutDown.
                let data = [t as u8; 1024];
                let mut out = [0u8; 1024];
                loop {
                    match buf.write(0, &data).and_then(|()| buf.read(0, &mut out)) {
                        Ok(()) => assert!(out.iter().all(|&x| x < 4)),
                        Err(Error::ShutDown { .. }) => return,
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(rt.shutdown().unwrap().was_last());
    for u in users {
        u.join().unwrap();
    }
}

#[test]
fn lent_devices_are_the_devices_and_their_clones_outlive_the_lender() {
    let _serial = common::serial();
    let rt = Offload::builder().host_devices(3).start().unwrap();
    let lender = rt.clone();
    // First calls race on several threads: each gets the same list.
    let lists: Vec<Vec<offload::Device>> = std::thread::scope(|s| {
        let lender = &lender;
        let calls: Vec<_> = (0..4)
            .map(|_| s.spawn(move || lender.device_list().unwrap().to_vec()))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let owned = rt.devices().unwrap();
    for list in &lists {
        assert_eq!(list, &owned);
    }
    // Later calls lend the one list the reference made.
    assert!(std::ptr::eq(
        lender.device_list().unwrap(),
        lender.device_list().unwrap()
    ));
    let kept = lender.device_list().unwrap()[2].clone();
    // Dropping the lender drops its list, not the runtime, nor the clone.
    drop(lender);
    drop(lists);
    let buf = kept.alloc(16, MemKind::Device).unwrap();
    buf.write(0, &[7; 16]).unwrap();
    drop(buf);
    assert!(rt.shutdown().unwrap().was_last());
    shut_down("a lent device's clone", kept.info());
}

/// A module after the last shutdown: `unload`, `kernel` and `kernels` answer `ShutDown`
/// (its teardown unloaded it; `unload` used to answer `Ok` and leave later calls saying
/// "was unloaded").
#[test]
fn a_module_after_shutdown_is_shut_down() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let module = offload::Program::from_source(common::put_kernel("after-shutdown", 1))
        .load(&dev)
        .unwrap();
    let again = module.clone();
    rt.shutdown().unwrap();
    shut_down("Module::kernel", module.kernel("put"));
    shut_down("Module::kernels", module.kernels());
    shut_down("Module::unload", module.unload());
    shut_down("Module::kernel after unload", again.kernel("put"));
    shut_down("Module::unload again", again.unload());
}

/// The conformance suite's L3 table (`offload_testing::conformance::after_shutdown`, run on
/// every backend) lists every public method of every handle type: this reads offload-core's
/// source for the `pub fn`s of each type's inherent impls and fails on one the table lacks
/// (or a row naming a method that no longer exists), so a new method cannot skip L3.
#[test]
fn the_l3_table_lists_every_public_method_of_every_handle() {
    use offload_testing::conformance::after_shutdown::METHODS;
    use std::collections::BTreeSet;
    const TYPES: [&str; 11] = [
        "Device",
        "Buffer",
        "TypedBuffer",
        "BufferView",
        "Queue",
        "Event",
        "Program",
        "Module",
        "Kernel",
        "IpcEndpoint",
        "Received",
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("offload-core/src");
    let mut files = vec![root];
    let mut declared = BTreeSet::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs")
            || path.components().any(|c| c.as_os_str() == "model")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut current: Option<&str> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("impl") {
                // `impl Buffer {`, `impl<T: Pod> TypedBuffer<T> {`, not `impl X for Y`.
                current = None;
                if line.trim_end().ends_with('{') && !line.contains(" for ") {
                    let rest = rest.trim_start();
                    let rest = if rest.starts_with('<') {
                        let mut depth = 0;
                        let end = rest
                            .char_indices()
                            .find(|&(_, c)| {
                                depth += match c {
                                    '<' => 1,
                                    '>' => -1,
                                    _ => 0,
                                };
                                depth == 0
                            })
                            .map_or(0, |(i, _)| i + 1);
                        rest[end..].trim_start()
                    } else {
                        rest
                    };
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    current = TYPES.iter().copied().find(|t| *t == name);
                }
            } else if line.starts_with('}') {
                current = None;
            } else if let Some(ty) = current {
                let item = line
                    .strip_prefix("    pub ")
                    .map(|r| r.trim_start_matches("unsafe ").trim_start_matches("const "));
                if let Some(name) = item.and_then(|r| r.strip_prefix("fn ")) {
                    let name: String = name
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    declared.insert((ty.to_string(), name));
                }
            }
        }
    }
    let listed: BTreeSet<(String, String)> = METHODS
        .iter()
        .map(|&(t, m, _)| (t.to_string(), m.to_string()))
        .collect();
    assert!(declared.len() > 90, "the scan found only {declared:?}");
    let missing: Vec<_> = declared.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&declared).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "public methods missing from the L3 table: {missing:?}; rows for no method: {stale:?}"
    );
}
