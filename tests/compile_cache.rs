//! Programs from source are compiled once per (program, compiler, target) however
//! many threads and devices load them, different sources compile in parallel, and the disk
//! cache lets another process skip the compile — whole entries only, even when processes
//! race, corrupt entries recompiled, nothing written when it is off.
//!
//! The host backend's C compiler does the compiling (the system `cc`). Cross-process cases
//! run this test binary again as children (`OFFLOAD_TEST_CHILD`), each with its own cache
//! directory.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::{SystemTime, UNIX_EPOCH};

use offload::{Dims, Offload, Program, Source, compile_stats};

/// A C kernel that writes `VALUE` into the first `n` u32s; `tag` makes its text (and so its
/// cache key) unique.
fn kernel(tag: &str) -> Source {
    Source::c(format!(
        "#include \"offload_host.h\"\n/* {tag} */\n\
         OFFLOAD_KERNEL(put, \"bI\") {{\n\
             uint32_t *buf = OFFLOAD_BUFFER(uint32_t, 0);\n\
             uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);\n\
             for (uint32_t t = 0; t < launch->block[0]; t++) {{\n\
                 uint64_t i = OFFLOAD_INDEX_X(t);\n\
                 if (i < n) buf[i] = VALUE;\n\
             }}\n\
         }}\n"
    ))
    .option("-DVALUE=7")
}

fn unique(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what} {} {nanos}", std::process::id())
}

/// Loads `source` on the first host device and checks what `put` writes.
fn run(rt: &Offload, source: Source) {
    let dev = rt.device(offload::BackendKind::Host).unwrap();
    let put = Program::from_source(source)
        .load(&dev)
        .unwrap()
        .kernel("put")
        .unwrap();
    let buf = dev.alloc_zeros::<u32>(64).unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: `put` writes the first n u32s of its buffer, which holds 64.
    unsafe { queue.launch(&put, Dims::for_num_elems(64), &offload::args![&buf, 64u32]) }.unwrap();
    queue.sync().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![7u32; 64]);
}

#[test]
fn one_compile_and_one_load_per_device_for_64_threads_on_4_devices() {
    let _serial = common::serial();
    let rt = Offload::builder()
        .backends([offload::BackendKind::Host])
        .host_devices(4)
        .compile_cache(None)
        .start()
        .unwrap();
    let devices = rt.devices().unwrap();
    assert_eq!(devices.len(), 4);
    let program = Program::from_source(kernel(&unique("64x4")));
    let (compiles, loads) = (compile_stats().compiles, offload::host::stats().loads);
    let barrier = Barrier::new(64);
    // Every thread keeps its module until all are done (a module whose last handle goes
    // is unloaded, and a later load would load it again).
    let modules: Vec<offload::Module> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..64)
            .map(|t| {
                let (program, dev, barrier) = (&program, &devices[t % 4], &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let module = program.load(dev).unwrap();
                    module.kernel("put").unwrap();
                    module
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(compile_stats().compiles - compiles, 1, "one compile");
    assert_eq!(
        offload::host::stats().loads - loads,
        4,
        "one load per device"
    );
    drop((modules, devices));
    rt.shutdown().unwrap();
}

#[test]
fn different_sources_compile_in_parallel() {
    let _serial = common::serial();
    let rt = Offload::builder().compile_cache(None).start().unwrap();
    let dev = rt.device(offload::BackendKind::Host).unwrap();
    let before = compile_stats().compiles;
    let barrier = Barrier::new(8);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (dev, barrier) = (&dev, &barrier);
            s.spawn(move || {
                let program = Program::from_source(kernel(&unique(&format!("parallel {t}"))));
                barrier.wait();
                program.load(dev).unwrap();
            });
        }
    });
    let stats = compile_stats();
    assert_eq!(stats.compiles - before, 8);
    assert!(
        stats.most_in_flight >= 2,
        "8 different sources never compiled at the same time: {stats:?}"
    );
    drop(dev);
    rt.shutdown().unwrap();
}

/// A fresh cache directory for one test.
fn cache_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("offload-cache-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    found.sort();
    found
}

/// Runs the child with `dir` as its cache (or the cache off) compiling `tag`'s kernel;
/// returns its `compiles disk_hits disk_writes corrupt` counters.
fn child_run(dir: &Path, tag: &str, cache_on: bool) -> Command {
    let mut cmd = offload_testing::child::test_command("child");
    cmd.env("OFFLOAD_TEST_CHILD", tag)
        .env("OFFLOAD_CACHE_DIR", dir)
        .env_remove("OFFLOAD_BACKENDS")
        .env("OFFLOAD_CACHE", if cache_on { "1" } else { "0" });
    cmd
}

fn counters(cmd: Command) -> [u64; 4] {
    let out = offload_testing::child::run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("COUNTERS ").map(|(_, c)| c))
        .unwrap_or_else(|| panic!("no counters in:\n{stdout}"));
    let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    [v[0], v[1], v[2], v[3]]
}

/// The child side: compiles and runs the kernel of its tag, prints its counters.
#[test]
fn child() {
    let Ok(tag) = std::env::var("OFFLOAD_TEST_CHILD") else {
        return;
    };
    let rt = Offload::init().unwrap();
    run(&rt, kernel(&tag));
    rt.shutdown().unwrap();
    let s = compile_stats();
    println!(
        "COUNTERS {} {} {} {}",
        s.compiles, s.disk_hits, s.disk_writes, s.corrupt
    );
}

#[test]
fn a_warm_cache_compiles_nothing_in_the_next_process() {
    let dir = cache_dir("warm");
    let tag = unique("warm");
    assert_eq!(counters(child_run(&dir, &tag, true)), [1, 0, 1, 0]);
    assert_eq!(entries(&dir).len(), 1);
    assert_eq!(counters(child_run(&dir, &tag, true)), [0, 1, 0, 0]);
    // Another option or text is another key.
    assert_eq!(
        counters(child_run(&dir, &unique("other"), true)),
        [1, 0, 1, 0]
    );
    assert_eq!(entries(&dir).len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn processes_racing_on_a_cold_cache_leave_one_whole_entry() {
    let dir = cache_dir("race");
    let tag = unique("race");
    let children: Vec<_> = (0..8)
        .map(|_| child_run(&dir, &tag, true).spawn().unwrap())
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let found = entries(&dir);
    assert_eq!(
        found.len(),
        1,
        "exactly one entry per key, no temporary files: {found:?}"
    );
    assert!(found[0].extension().is_some_and(|e| e == "offc"));
    // And it is whole: the next process uses it.
    assert_eq!(counters(child_run(&dir, &tag, true)), [0, 1, 0, 0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn truncated_or_altered_entries_are_compiled_again_never_loaded() {
    let dir = cache_dir("corrupt");
    let tag = unique("corrupt");
    assert_eq!(counters(child_run(&dir, &tag, true)), [1, 0, 1, 0]);
    let entry = entries(&dir).remove(0);
    let whole = std::fs::read(&entry).unwrap();
    // Truncated.
    std::fs::write(&entry, &whole[..whole.len() / 2]).unwrap();
    assert_eq!(counters(child_run(&dir, &tag, true)), [1, 0, 1, 1]);
    assert_eq!(std::fs::read(&entry).unwrap(), whole, "rewritten whole");
    // One bit flipped in the payload (the image), then in the header.
    for at in [whole.len() - 100, 20] {
        let mut flipped = whole.clone();
        flipped[at] ^= 0x01;
        std::fs::write(&entry, &flipped).unwrap();
        assert_eq!(
            counters(child_run(&dir, &tag, true)),
            [1, 0, 1, 1],
            "flip at {at}"
        );
    }
    assert_eq!(counters(child_run(&dir, &tag, true)), [0, 1, 0, 0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_the_cache_off_nothing_is_written() {
    let dir = cache_dir("off");
    let tag = unique("off");
    assert_eq!(counters(child_run(&dir, &tag, false)), [1, 0, 0, 0]);
    assert_eq!(counters(child_run(&dir, &tag, false)), [1, 0, 0, 0]);
    assert!(
        !dir.exists() || entries(&dir).is_empty(),
        "{:?}",
        entries(&dir)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cache_directory_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = cache_dir("shared");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tag = unique("shared");
    assert_eq!(counters(child_run(&dir, &tag, true)), [1, 0, 0, 0]);
    assert!(entries(&dir).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
