//! I1: `Buffer::export` → bytes and fd → `Device::import`, in this process and in a child
//! process, on every backend with IPC that the machine has (host always; Vulkan on
//! lavapipe with `--features vulkan`): the child writes through its mapping with a host copy
//! and with a kernel launch, and the parent reads the change. Bad handles are typed errors
//! and leak no descriptor.

mod common;

use common::in_ci;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use offload::ipc::IpcHandle;
use offload::{Arg, BackendKind, Device, Dims, Error, MemKind, Offload, Program};
use offload_testing::fake::cases::{hex, unhex};

const WORDS: usize = 1024;
const CHILD: &str = "OFFLOAD_TEST_IPC_CHILD";
const CHILD_FD: &str = "OFFLOAD_TEST_IPC_FD";
const CHILD_HANDLE: &str = "OFFLOAD_TEST_IPC_HANDLE";

/// The devices to test: the host's, and the first Vulkan device where there is one.
fn devices(rt: &Offload) -> Vec<Device> {
    let all = rt.devices().unwrap();
    let mut picked: Vec<Device> = Vec::new();
    for kind in [BackendKind::Host, BackendKind::Vulkan] {
        match all.iter().find(|d| d.backend() == kind) {
            Some(d) => picked.push(d.clone()),
            None if kind == BackendKind::Vulkan && cfg!(feature = "vulkan") => {
                let reason = rt.unavailable().unwrap();
                assert!(!in_ci(), "CI=true: no Vulkan device ({reason:?})");
                eprintln!("SKIPPED vulkan: no Vulkan device ({reason:?})");
            }
            None => {}
        }
    }
    picked
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn pattern() -> Vec<u8> {
    (0..WORDS as u32)
        .flat_map(|w| (w * 3).to_ne_bytes())
        .collect()
}

/// `add_one(buf, n)` of the backend's fixture kernels.
fn add_one_image(kind: BackendKind) -> &'static [u8] {
    match kind {
        BackendKind::Host => offload::host::fixtures::KERNELS,
        #[cfg(feature = "vulkan")]
        BackendKind::Vulkan => offload::vulkan::fixtures::KERNELS,
        other => panic!("no fixture for {other}"),
    }
}

#[test]
fn export_then_import_maps_the_same_memory() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    for dev in devices(&rt) {
        let kind = dev.backend();
        let fds = open_fds();
        let before = offload::ipc::stats();
        let buf = dev.alloc_exportable(WORDS * 4, MemKind::Device).unwrap();
        buf.write(0, &pattern()).unwrap();
        let handle = buf.export().unwrap();
        assert_eq!(handle.backend(), kind);
        assert_eq!(handle.size(), (WORDS * 4) as u64);
        // Through bytes and back, as another process would get it.
        let (bytes, fd) = handle.into_parts();
        let handle = IpcHandle::from_parts(&bytes, fd).unwrap();
        let mapped = dev.import(handle).unwrap();
        let mut out = vec![0u8; WORDS * 4];
        mapped.read(0, &mut out).unwrap();
        assert_eq!(
            out,
            pattern(),
            "{kind}: the import sees the exporter's bytes"
        );
        mapped.write(8, &[0xEE; 4]).unwrap();
        buf.read(8, &mut out[..4]).unwrap();
        assert_eq!(
            out[..4],
            [0xEE; 4],
            "{kind}: the exporter sees the importer's write"
        );

        // A range of it.
        let part = dev
            .import(buf.export().unwrap().range(16, 8).unwrap())
            .unwrap();
        assert_eq!(part.len(), 8);
        part.fill(0, 8, 0xAB).unwrap();
        buf.read(16, &mut out[..8]).unwrap();
        assert_eq!(out[..8], [0xAB; 8]);
        assert!(
            part.read(1, &mut [0u8; 8]).is_err(),
            "a range stays inside itself"
        );

        drop((mapped, part));
        let after = offload::ipc::stats();
        assert_eq!(after.imports - before.imports, 2);
        assert_eq!(
            after.live_imports, before.live_imports,
            "every open was closed"
        );
        buf.free().unwrap();
        assert_eq!(open_fds(), fds, "{kind}: no descriptor left open");
    }
    rt.shutdown().unwrap();
}

#[test]
fn bad_handles_are_typed_errors_and_leak_nothing() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    for dev in devices(&rt) {
        let kind = dev.backend();
        let fds = open_fds();
        // Not exportable.
        let plain = dev.alloc(64, MemKind::Device).unwrap();
        assert!(matches!(plain.export(), Err(Error::InvalidArgument { .. })));
        let buf = dev.alloc_exportable(64, MemKind::Device).unwrap();
        let (bytes, fd) = buf.export().unwrap().into_parts();
        let fd = fd.unwrap();

        // Every truncation and a flipped byte in each header field.
        for len in 0..bytes.len() {
            let r = IpcHandle::from_parts(&bytes[..len], Some(fd.try_clone().unwrap()));
            assert!(
                matches!(r, Err(Error::InvalidIpcHandle { .. })),
                "{kind} {len}"
            );
        }
        for at in [0, 4, 6, 7, 64, 66] {
            let mut forged = bytes.clone();
            forged[at] ^= 0x40;
            let r = IpcHandle::from_parts(&forged, Some(fd.try_clone().unwrap()));
            assert!(
                matches!(r, Err(Error::InvalidIpcHandle { .. })),
                "{kind} byte {at}"
            );
        }
        // Bytes that are nobody's handle name no backend (not an internal one).
        let e = IpcHandle::from_parts(b"garbage", None).unwrap_err();
        assert!(
            matches!(e, Error::InvalidIpcHandle { backend: None, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("IpcHandle::from_parts: invalid IPC handle"),
            "{e}"
        );
        // A descriptor missing, or one too many.
        assert!(IpcHandle::from_parts(&bytes, None).is_err());
        // Another device: the UUID changed.
        let mut other = bytes.clone();
        other[8] ^= 1;
        let handle = IpcHandle::from_parts(&other, Some(fd.try_clone().unwrap())).unwrap();
        let e = dev.import(handle).unwrap_err();
        assert!(matches!(e, Error::InvalidIpcHandle { .. }), "{kind}: {e}");
        // A size that does not match the memory.
        let mut wrong_size = bytes.clone();
        wrong_size[40..48].copy_from_slice(&4096u64.to_le_bytes());
        wrong_size[56..64].copy_from_slice(&4096u64.to_le_bytes());
        let handle = IpcHandle::from_parts(&wrong_size, Some(fd.try_clone().unwrap())).unwrap();
        let e = dev.import(handle).unwrap_err();
        assert!(matches!(e, Error::InvalidIpcHandle { .. }), "{kind}: {e}");
        // Vulkan: a payload whose allocation claims more than the memory file holds is
        // refused before the driver sees it (which would say out of memory): its check word
        // no longer matches.
        if kind == BackendKind::Vulkan {
            let at = bytes
                .windows(4)
                .position(|w| w == b"OFVK")
                .expect("the Vulkan payload");
            let mut claims = bytes.clone();
            claims[at + 8..at + 16].copy_from_slice(&(1u64 << 30).to_le_bytes());
            let handle = IpcHandle::from_parts(&claims, Some(fd.try_clone().unwrap())).unwrap();
            let e = dev.import(handle).unwrap_err();
            assert!(matches!(e, Error::InvalidIpcHandle { .. }), "{kind}: {e}");
            assert!(e.to_string().contains("check does not match"), "{e}");
        }
        // A descriptor that is not shared memory at all.
        let file = OwnedFd::from(std::fs::File::open("/proc/self/status").unwrap());
        let handle = IpcHandle::from_parts(&bytes, Some(file)).unwrap();
        let e = dev.import(handle).unwrap_err();
        assert!(matches!(e, Error::InvalidIpcHandle { .. }), "{kind}: {e}");

        drop(fd);
        drop((plain, buf));
        assert_eq!(open_fds(), fds, "{kind}: every descriptor was closed");
    }
    rt.shutdown().unwrap();
}

#[test]
fn a_child_process_writes_and_launches_on_the_parents_memory() {
    if let Ok(kind) = std::env::var(CHILD) {
        return child(&kind);
    }
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    for dev in devices(&rt) {
        let kind = dev.backend();
        let buf = dev.alloc_exportable(WORDS * 4, MemKind::Device).unwrap();
        buf.write(0, &pattern()).unwrap();
        let (bytes, fd) = buf.export().unwrap().into_parts();
        let fd = fd.expect("host and Vulkan share memory through an fd");
        // The child inherits a copy of the descriptor without close-on-exec.
        let inherited = rustix::io::fcntl_dupfd_cloexec(&fd, 100).unwrap();
        rustix::io::fcntl_setfd(&inherited, rustix::io::FdFlags::empty()).unwrap();
        let mut child = offload_testing::child::test_command(
            "a_child_process_writes_and_launches_on_the_parents_memory",
        );
        child
            .env(CHILD, kind.name())
            .env(CHILD_FD, inherited.as_raw_fd().to_string())
            .env(CHILD_HANDLE, hex(&bytes));
        let out = offload_testing::child::run(child);
        drop((inherited, fd));
        assert!(
            out.status.success(),
            "{kind}: child failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut out = vec![0u8; WORDS * 4];
        buf.read(0, &mut out).unwrap();
        let got = words(&out);
        // The child wrote 41 to every word, then its kernel added 1.
        assert!(got.iter().all(|&w| w == 42), "{kind}: {:?}", &got[..8]);
    }
    rt.shutdown().unwrap();
}

/// The child: import the parent's memory, check it, write through it and launch on it.
fn child(kind: &str) {
    let kind: BackendKind = kind.parse().unwrap();
    let raw: i32 = std::env::var(CHILD_FD).unwrap().parse().unwrap();
    // SAFETY: the parent passed this descriptor number, open and ours, in the environment;
    // nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    assert!(fd.as_fd().as_raw_fd() >= 0);
    let bytes = unhex(&std::env::var(CHILD_HANDLE).unwrap());
    let handle = IpcHandle::from_parts(&bytes, Some(fd)).unwrap();
    let rt = Offload::init().unwrap();
    let dev = rt
        .devices()
        .unwrap()
        .into_iter()
        .find(|d| d.backend() == kind)
        .unwrap();
    let view = dev.import(handle).unwrap();
    let mut out = vec![0u8; WORDS * 4];
    view.read(0, &mut out).unwrap();
    assert_eq!(out, pattern(), "the child sees the parent's bytes");
    let fill: Vec<u8> = (0..WORDS).flat_map(|_| 41u32.to_ne_bytes()).collect();
    view.write(0, &fill).unwrap();
    let add_one = Program::new(add_one_image(kind))
        .load(&dev)
        .unwrap()
        .kernel("add_one")
        .unwrap();
    let queue = dev.queue().unwrap();
    let n = WORDS as u32;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    unsafe {
        queue.launch(
            &add_one,
            Dims::grid([n / 64, 1, 1]).block([64, 1, 1]),
            &[Arg::buffer(&view), Arg::scalar(&n)],
        )
    }
    .unwrap();
    queue.sync().unwrap();
    drop((add_one, queue, view));
    assert_eq!(offload::ipc::stats().live_imports, 0);
    rt.shutdown().unwrap();
}

/// Every single-byte corruption of an exported handle (two flips per byte) is refused as
/// `InvalidIpcHandle` — before any driver sees it — or accepted because the byte does not
/// change what is mapped: the exporting process's token and the allocation's id (bytes
/// 24..40, names for the sender's cache, checked by endpoints, not by a plain import: the
/// descriptor grants the memory), and the range's offset and length (48..64) while the
/// range stays inside the allocation the descriptor holds. Before, two corruptions of the
/// Vulkan payload's allocation size reached the driver and came back `OutOfMemory`.
#[test]
fn every_single_byte_corruption_is_refused_or_harmless() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    for dev in devices(&rt) {
        let kind = dev.backend();
        let buf = dev.alloc_exportable(64, MemKind::Device).unwrap();
        let (bytes, fd) = buf.export().unwrap().into_parts();
        let fd = fd.unwrap();
        let mut refused = 0;
        let mut accepted = Vec::new();
        for at in 0..bytes.len() {
            for mask in [0x01u8, 0x80] {
                let mut forged = bytes.clone();
                forged[at] ^= mask;
                let outcome = IpcHandle::from_parts(&forged, Some(fd.try_clone().unwrap()))
                    .and_then(|h| dev.import(h));
                match outcome {
                    Err(Error::InvalidIpcHandle { .. }) => refused += 1,
                    Err(e) => panic!("{kind}: byte {at} ^ {mask:#x} gave {e:?}"),
                    Ok(view) => {
                        assert!(
                            (24..40).contains(&at) || (48..64).contains(&at),
                            "{kind}: byte {at} ^ {mask:#x} was accepted"
                        );
                        accepted.push(at);
                        drop(view);
                    }
                }
            }
        }
        eprintln!(
            "{kind}: {} corruptions of a {}-byte handle: {refused} refused, {} accepted \
             (bytes {accepted:?})",
            2 * bytes.len(),
            bytes.len(),
            accepted.len()
        );
        buf.free().unwrap();
    }
    rt.shutdown().unwrap();
}
