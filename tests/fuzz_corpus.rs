//! The fuzz soak on stable Rust: the checks of the `cargo fuzz` targets (fuzz/src/lib.rs,
//! the `offload-fuzz` package, here without libFuzzer, so both harnesses run the same
//! code) over the same corpus (fuzz/corpus/<target>/). For each parser every corpus file
//! is replayed, then random mutations of the corpus files (bit flips, byte and integer
//! overwrites, truncations, cuts, insertions, splices of two files, repeats) and random
//! bytes are fed to it; descriptors given to the IPC decoder must all be closed after.
//!
//! `OFFLOAD_FUZZ_CASES=N` sets the mutated inputs per parser; the default is 5,000 (CI),
//! or 1,000,000 when `OFFLOAD_SOAK` is set (scripts/soak.sh). `OFFLOAD_FUZZ_TARGET=name`
//! runs one parser. A failing input is shrunk by proptest and written to
//! `$CARGO_TARGET_TMPDIR/fuzz-failure-<target>`, ready to be added to the corpus.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};

fn cases() -> u32 {
    let default = if std::env::var_os("OFFLOAD_SOAK").is_some() {
        1_000_000
    } else {
        5_000
    };
    std::env::var("OFFLOAD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

/// The corpus files of `target`, by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("read the corpus directory");
            let bytes = std::fs::read(entry.path()).expect("read a corpus file");
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// Integers that parsers get wrong: zeros, ones, signs, all ones, sizes near the limits.
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    4,
    8,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    i64::MIN as u64,
    u64::MAX - 7,
    u64::MAX,
];

/// One edit of a corpus file; positions are taken modulo the length.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Set(usize, u8),
    /// An interesting integer, little-endian, 1, 2, 4 or 8 bytes wide.
    Integer(usize, u64, u8),
    Truncate(usize),
    Cut(usize, usize),
    Insert(usize, Vec<u8>),
    /// Bytes of another corpus file (file, from, length) written over `at`.
    Splice(usize, usize, usize, usize),
    /// A run of the input copied to another place.
    Repeat(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), 0..8u8).prop_map(|(at, bit)| Edit::Flip(at, 1 << bit)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Set(at, b)),
        3 => (any::<usize>(), proptest::sample::select(INTERESTING), 0..4u8)
            .prop_map(|(at, v, w)| Edit::Integer(at, v, 1 << w)),
        1 => any::<usize>().prop_map(Edit::Truncate),
        1 => (any::<usize>(), 1..64usize).prop_map(|(at, n)| Edit::Cut(at, n)),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, b)| Edit::Insert(at, b)),
        1 => (any::<usize>(), any::<usize>(), 1..256usize, any::<usize>())
            .prop_map(|(f, from, n, at)| Edit::Splice(f, from, n, at)),
        1 => (any::<usize>(), 1..64usize, any::<usize>())
            .prop_map(|(from, n, at)| Edit::Repeat(from, n, at)),
    ]
}

fn apply(seeds: &[Vec<u8>], mut input: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = input.len();
        match *e {
            Edit::Truncate(at) => input.truncate(at % (n + 1)),
            Edit::Insert(at, ref bytes) => {
                let at = at % (n + 1);
                input.splice(at..at, bytes.iter().copied());
            }
            _ if n == 0 => {}
            Edit::Flip(at, mask) => input[at % n] ^= mask,
            Edit::Set(at, b) => input[at % n] = b,
            Edit::Integer(at, v, width) => {
                let at = at % n;
                let bytes = v.to_le_bytes();
                let end = (at + usize::from(width)).min(n);
                input[at..end].copy_from_slice(&bytes[..end - at]);
            }
            Edit::Cut(at, len) => {
                let at = at % n;
                input.drain(at..(at + len).min(n));
            }
            Edit::Splice(file, from, len, at) => {
                let other = &seeds[file % seeds.len()];
                if !other.is_empty() {
                    let from = from % other.len();
                    let part = &other[from..(from + len).min(other.len())];
                    let at = at % n;
                    let end = (at + part.len()).min(n);
                    input[at..end].copy_from_slice(&part[..end - at]);
                }
            }
            Edit::Repeat(from, len, at) => {
                let from = from % n;
                let part = input[from..(from + len).min(n)].to_vec();
                let at = at % (n + 1);
                input.splice(at..at, part);
            }
        }
    }
    input
}

/// Inputs for one parser: 7 in 8 are 1 to 8 edits of a corpus file, the rest random bytes.
/// Half the edited files are among the first `named` seeds (the fixtures, hand-made inputs
/// and regressions, which go deepest), half among all of them (with what libFuzzer found,
/// named by their SHA-1).
fn inputs(seeds: Arc<Vec<Vec<u8>>>, named: usize) -> impl Strategy<Value = Vec<u8>> {
    let seed = prop_oneof![0..named.max(1), 0..seeds.len()];
    let mutated = (seed, proptest::collection::vec(edit(), 1..8))
        .prop_map(move |(i, edits)| apply(&seeds, seeds[i].clone(), &edits));
    let random = proptest::collection::vec(any::<u8>(), 0..1024);
    prop_oneof![7 => mutated, 1 => random]
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .count()
}

/// Replays `target`'s corpus, then feeds it `cases()` mutated inputs.
fn soak(target: &str, check: fn(&[u8]) -> bool) {
    let files = corpus(target);
    assert!(!files.is_empty(), "{target}: the corpus is empty");
    let started = Instant::now();
    for (name, bytes) in &files {
        if let Err(panic) = std::panic::catch_unwind(|| check(bytes)) {
            eprintln!("{target}: corpus file {name} fails its check");
            std::panic::resume_unwind(panic);
        }
    }
    let found = |name: &str| name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit());
    let (named, found): (Vec<_>, Vec<_>) = files.into_iter().partition(|(n, _)| !found(n));
    let named_count = named.len();
    let seeds = Arc::new(
        named
            .into_iter()
            .chain(found)
            .map(|(_, b)| b)
            .collect::<Vec<_>>(),
    );
    let (accepted, refused) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0u64));
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&inputs(seeds, named_count), |input| {
        if check(&input) {
            accepted.set(accepted.get() + 1);
        } else {
            refused.set(refused.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-failure-{target}"));
        if let TestError::Fail(_, input) = &e {
            std::fs::write(&path, input).expect("write the failing input");
        }
        panic!("{target}: {e}\n(the shrunk input is in {})", path.display());
    }
    println!(
        "{target}: {} corpus files and {} mutated inputs in {:.1?}: {} accepted, {} refused",
        corpus(target).len(),
        cases(),
        started.elapsed(),
        accepted.get(),
        refused.get()
    );
}

/// One test, so that the descriptor count is not disturbed by another test's files.
#[test]
fn every_parser_survives_its_corpus_and_mutations() {
    let only = std::env::var("OFFLOAD_FUZZ_TARGET").ok();
    for &(target, _) in offload_fuzz::TARGETS {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/fuzz_targets")
            .join(format!("{target}.rs"));
        assert!(file.is_file(), "{target} has no libFuzzer target");
    }
    let fds = open_fds();
    for &(target, check) in offload_fuzz::TARGETS {
        if only.as_deref().is_none_or(|o| o == target) {
            soak(target, check);
        }
    }
    assert_eq!(
        open_fds(),
        fds,
        "every descriptor given to a parser was closed"
    );
}

/// Found by this soak: a section header offset near `u64::MAX` made the AMD code object
/// reader add past `usize::MAX` (a panic with overflow checks, a read at a wrapped offset
/// without). Fixed in offload-hip/src/image.rs, which now has `object` read the section
/// headers (`FileHeader::section_headers`).
#[test]
fn regression_amd_section_headers_at_the_end_of_the_address_space() {
    let input = include_bytes!("../fuzz/corpus/amd_code_object/regression-shoff-overflow");
    assert!(
        !offload_fuzz::amd_code_object(input),
        "refused, not a panic"
    );
}
