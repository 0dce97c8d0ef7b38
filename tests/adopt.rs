//! Memory another library allocated, adopted as a buffer (`Device::adopt`), and a buffer's
//! address handed the other way (`Buffer::address`): no copy either way, the owner dropped
//! exactly once when the buffer is released (its last handle, or its runtime's shutdown),
//! and a typed error where a backend cannot.
#![cfg(feature = "fixtures")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload::{BackendKind, Error, MemKind, Offload};

/// What keeps adopted memory alive in these tests: the memory itself (a boxed slice), and a
/// count of its drops.
struct Owner {
    _memory: Box<[u32]>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// `n` words 0, 1, 2, … owned by an [`Owner`]; their address, and the count of its drops.
fn foreign(n: usize) -> (Owner, u64, Arc<AtomicUsize>) {
    let mut memory: Box<[u32]> = (0..n as u32).collect();
    let address = memory.as_mut_ptr() as u64;
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Owner {
        _memory: memory,
        drops: drops.clone(),
    };
    (owner, address, drops)
}

/// Reads word `i` at `address` the way the other library would (through its pointer).
fn word_at(address: u64, i: usize) -> u32 {
    // SAFETY: the tests call it only while the owner of `address` is alive, with `i` inside
    // its words, and with no queued work on the buffer over them (synced before).
    unsafe { std::ptr::read_volatile((address as *const u32).add(i)) }
}

#[test]
fn a_kernel_and_the_other_library_share_adopted_memory() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let (owner, address, drops) = foreign(256);
    // SAFETY: 1 KiB of this process's memory, kept by `owner` until the buffer drops it,
    // and touched meanwhile only through `word_at` after the queue synchronised.
    let buf = unsafe { dev.adopt(address, 1024, MemKind::Host, owner) }.unwrap();
    assert_eq!(buf.len(), 1024);
    assert_eq!(buf.address().unwrap(), address, "no copy: the same memory");
    let queue = dev.queue().unwrap();
    // SAFETY: the buffer holds 256 u32s.
    unsafe { common::add_one(&queue, &buf, 256) }.unwrap();
    queue.sync().unwrap();
    assert_eq!(
        word_at(address, 0),
        1,
        "the kernel wrote the other library's memory"
    );
    assert_eq!(word_at(address, 255), 256);
    buf.fill(0, 4, 0xFF).unwrap();
    assert_eq!(word_at(address, 0), u32::MAX);
    assert_eq!(drops.load(Ordering::SeqCst), 0, "alive while the buffer is");
    // Dropped with a launch still queued on it: released once that work is done (Q1).
    // SAFETY: as above.
    unsafe { common::add_one(&queue, &buf, 256) }.unwrap();
    drop(buf);
    queue.sync().unwrap();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "released after its work, once"
    );
    rt.shutdown().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn the_shutdown_releases_adopted_memory_once_and_later_uses_are_shut_down() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let (owner, address, drops) = foreign(16);
    // SAFETY: as above, 64 bytes.
    let buf = unsafe { dev.adopt(address, 64, MemKind::Host, owner) }.unwrap();
    let other = Offload::init().unwrap();
    other.shutdown().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0, "not the last reference");
    assert!(rt.shutdown().unwrap().was_last());
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the shutdown let it go");
    assert!(matches!(buf.address(), Err(Error::ShutDown { .. })));
    assert!(matches!(buf.write(0, &[1]), Err(Error::ShutDown { .. })));
    drop(buf);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "once");
}

#[test]
fn nothing_to_adopt_is_an_invalid_argument_and_the_owner_goes_at_once() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    for (address, len) in [(0u64, 64usize), (0x1000, 0)] {
        let (owner, _, drops) = foreign(1);
        // SAFETY: refused before anything touches the (non-)memory.
        let err = unsafe { dev.adopt(address, len, MemKind::Host, owner) }.unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    call: "Device::adopt",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("nothing to adopt"), "{err}");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the owner is not kept");
    }
}

#[test]
fn a_backend_that_cannot_adopt_says_so_and_has_no_address() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let Ok(gpu) = rt.device(BackendKind::Vulkan) else {
        let why = rt.unavailable().unwrap();
        assert!(
            !common::in_ci() || !cfg!(feature = "vulkan"),
            "CI=true: no Vulkan device ({why:?})"
        );
        eprintln!("SKIPPED vulkan: no Vulkan device ({why:?})");
        return;
    };
    let (owner, address, drops) = foreign(16);
    // SAFETY: refused by the backend before anything touches the memory.
    let err = unsafe { gpu.adopt(address, 64, MemKind::Device, owner) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                backend: BackendKind::Vulkan,
                call: "Device::adopt",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the owner is not kept");
    let buf = gpu.alloc(64, MemKind::Device).unwrap();
    let err = buf.address().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                backend: BackendKind::Vulkan,
                call: "Buffer::address",
                ..
            }
        ),
        "{err}"
    );
}

/// An owner may hold the last reference of the very runtime whose buffer it keeps (a DLPack
/// capsule of another offload buffer pins its runtime): dropping the buffer gives that
/// reference back inside the buffer's release. That drop runs as user code (L6): the
/// teardown moves to a helper thread instead of waiting, under the release, for itself.
#[test]
fn an_owner_holding_the_last_runtime_reference_does_not_hang_its_release() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let (memory, address, drops) = foreign(16);
    struct Holds(#[allow(dead_code)] Owner, #[allow(dead_code)] Offload);
    // SAFETY: as above, 64 bytes; the owner also holds the runtime's only reference.
    let buf = unsafe { dev.adopt(address, 64, MemKind::Host, Holds(memory, rt)) }.unwrap();
    drop(dev);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(buf);
        let _ = done.send(());
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("dropping the adopted buffer hung (its owner gave back the last reference)");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // The generation ended on a helper thread; a fresh one starts.
    let fresh = Offload::init().unwrap();
    assert!(fresh.shutdown().unwrap().was_last());
}
