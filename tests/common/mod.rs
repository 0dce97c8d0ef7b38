//! Helpers shared by the facade's integration tests.
//!
//! The runtime is process-wide, and the tests of one file run on threads of one process:
//! a test that counts transitions or needs a fresh generation takes `serial()` first.
#![allow(dead_code)]

pub mod ipc;

/// Holds off the other tests of this binary that also take it.
// Not every test binary that includes this module takes it.
#[allow(unused_imports)]
pub use offload_testing::serial;

/// The watchdog a test that could hang holds (offload-testing's, shared with the backends'
/// tests). Not every test binary holds one.
#[allow(unused_imports)]
pub use offload_testing::{Watchdog, watchdog};

/// Whether this runs under CI (`CI=true`), where a skip for a package CI installs fails.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// A small deterministic xorshift generator, so failures replay.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs the `child` test of this test binary (the environment cases' other side) with
/// `OFFLOAD_TEST_CHILD=case`, the offload configuration variables cleared and `vars` set;
/// returns its stdout, after checking it succeeded.
pub fn run_child(case: &str, vars: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("OFFLOAD_TEST_CHILD", case);
    for var in [
        "OFFLOAD_BACKENDS",
        "OFFLOAD_IPC_CACHE_SIZE",
        "OFFLOAD_HOST_DEVICES",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {case} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The text after `RESULT ` in a child's stdout.
pub fn result(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
}

/// A C program whose kernel `put(buf, n)` writes `value` into the first `n` u32s; `tag`
/// makes its text (so its compile key) its own.
pub fn put_kernel(tag: &str, value: u32) -> offload::Source {
    offload::Source::c(format!(
        "#include \"offload_host.h\"\n/* {tag} */\n\
         OFFLOAD_KERNEL(put, \"bI\") {{\n\
             uint32_t *buf = OFFLOAD_BUFFER(uint32_t, 0);\n\
             uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);\n\
             for (uint32_t t = 0; t < launch->block[0]; t++) {{\n\
                 uint64_t i = OFFLOAD_INDEX_X(t);\n\
                 if (i < n) buf[i] = {value}u;\n\
             }}\n\
         }}\n"
    ))
}

/// Queues the host fixture's `add_one` (offload-host/fixtures/kernels.c, loaded on the
/// queue's device) over the first `words` u32s of `buf`: one block of 256 threads per 256
/// words, each adding 1 to its word.
///
/// # Safety
/// `buf` holds at least `words` u32s.
#[cfg(feature = "fixtures")]
pub unsafe fn add_one(
    queue: &offload::Queue,
    buf: &offload::Buffer,
    words: u32,
) -> offload::Result<()> {
    let kernel = offload::Program::new(offload::host::fixtures::KERNELS)
        .load(&queue.device())?
        .kernel("add_one")?;
    // SAFETY: add_one touches the first `words` u32s of its buffer, which the caller
    // promises `buf` holds.
    unsafe {
        queue.launch(
            &kernel,
            offload::Dims::grid([words.div_ceil(256), 1, 1]).block([256, 1, 1]),
            &[offload::Arg::buffer(buf), offload::Arg::scalar(&words)],
        )
    }
}

/// The names of this process's threads (from /proc).
pub fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|n| n.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}
