//! The IPC wire decoder against random and mutated packets (I4): it never panics, never
//! maps anything, and closes every descriptor that came with a packet it refused.
//!
//! 10,000 cases by default (CI); `OFFLOAD_IPC_FUZZ_CASES=1000000` is the soak.

use std::os::fd::OwnedFd;

use offload_core::ipc::{IpcHandle, wire};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn cases() -> u32 {
    std::env::var("OFFLOAD_IPC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A handle's bytes as a real export writes them (reference backend layout, no fd).
fn handle_bytes(size: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"OFIH");
    b.extend_from_slice(&1u16.to_le_bytes());
    b.push(6); // reference
    b.push(0); // no fd
    b.extend_from_slice(&[7u8; 16]);
    for v in [0x1234u64, 42, size, 0, size] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&8u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&42u64.to_le_bytes());
    b
}

/// Valid packets of every kind, to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let handle = || IpcHandle::from_parts(&handle_bytes(4096), None).unwrap();
    use wire::Message::*;
    let messages = vec![
        Hello { token: 3, pid: 4 },
        Map {
            entry: 1,
            generation: 2,
            tag: 3,
            offset: 16,
            len: 64,
            handle: handle(),
        },
        Use {
            entry: 1,
            generation: 2,
            mapping: 3,
            tag: 4,
            offset: 5,
            len: 6,
        },
        OneShot {
            sequence: 9,
            tag: 1,
            offset: 0,
            len: 4096,
            handle: handle(),
        },
        Mapped {
            entry: 1,
            generation: 2,
            mapping: 3,
        },
        Failed {
            entry: 1,
            generation: 2,
            code: wire::FailCode::Import,
        },
        Done {
            entry: 1,
            generation: 2,
        },
        Unmap {
            entry: 1,
            generation: 2,
            mapping: 3,
        },
        UnmapAck {
            entry: 1,
            generation: 2,
        },
    ];
    messages.into_iter().map(|m| m.encode().0).collect()
}

#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
    Set(usize, u8),
}

fn packet() -> impl Strategy<Value = (Vec<u8>, usize)> {
    let seeds = seeds();
    let mutated = (
        0..seeds.len(),
        proptest::collection::vec(
            prop_oneof![
                (any::<usize>(), any::<u8>()).prop_map(|(at, x)| Edit::Flip(at, x)),
                any::<usize>().prop_map(Edit::Truncate),
                proptest::collection::vec(any::<u8>(), 1..64).prop_map(Edit::Extend),
                (any::<usize>(), any::<u8>()).prop_map(|(at, x)| Edit::Set(at, x)),
            ],
            0..4,
        ),
    )
        .prop_map(move |(i, edits)| {
            let mut p = seeds[i].clone();
            for e in edits {
                match e {
                    Edit::Flip(at, x) if !p.is_empty() => {
                        let n = p.len();
                        p[at % n] ^= x | 1
                    }
                    Edit::Set(at, x) if !p.is_empty() => {
                        let n = p.len();
                        p[at % n] = x
                    }
                    Edit::Truncate(at) => p.truncate(at % (p.len() + 1)),
                    Edit::Extend(tail) => p.extend(tail),
                    _ => {}
                }
            }
            p
        });
    let random = proptest::collection::vec(any::<u8>(), 0..wire::MAX_MESSAGE + 16);
    (prop_oneof![3 => mutated, 1 => random], 0..3usize)
}

#[test]
fn the_decoder_survives_random_and_mutated_packets() {
    let before_fds = open_fds();
    let before = offload_core::ipc::stats();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let (accepted, refused) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
    runner
        .run(&packet(), |(bytes, fd_count)| {
            let fds: Vec<OwnedFd> = (0..fd_count)
                .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
                .collect();
            match wire::decode(&bytes, fds) {
                Ok(message) => {
                    accepted.set(accepted.get() + 1);
                    // What decodes re-encodes to a packet that decodes again.
                    let (again, fd) = message.encode();
                    prop_assert!(wire::decode(&again, fd.into_iter().collect()).is_ok());
                }
                Err(_) => refused.set(refused.get() + 1),
            }
            Ok(())
        })
        .unwrap();
    let after = offload_core::ipc::stats();
    let (accepted, refused) = (accepted.get(), refused.get());
    println!("{} packets: {accepted} decoded, {refused} refused", cases());
    assert!(
        refused > 0 && accepted > 0,
        "the mutations reached both outcomes"
    );
    assert_eq!(open_fds(), before_fds, "every descriptor was closed");
    assert_eq!(
        after.imports, before.imports,
        "decoding never maps anything"
    );
}
