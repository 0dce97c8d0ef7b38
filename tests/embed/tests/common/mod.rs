//! What the embed tests share: where cargo put the library, and where it is mapped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The file name of the library under test.
pub const LIB_NAME: &str = "liboffload_embed.so";

/// The cdylib cargo built next to this test executable (target/<profile>/deps/ or its
/// parent), canonicalised.
pub fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe
        .parent()
        .expect("test executable has a parent directory");
    let candidates = [deps.join(LIB_NAME), deps.join("..").join(LIB_NAME)];
    for candidate in &candidates {
        if let Ok(path) = candidate.canonicalize() {
            return path;
        }
    }
    panic!(
        "{LIB_NAME} not found (looked at {} and {}); build it with `cargo test -p offload-embed`",
        candidates[0].display(),
        candidates[1].display()
    );
}

/// The lines of /proc/self/maps whose mapped file `maps` accepts.
pub fn mappings_where(maps: impl Fn(&Path) -> bool) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    text.lines()
        .filter(|line| {
            // address perms offset dev inode [path]
            line.splitn(6, ' ')
                .nth(5)
                .map(|m| m.trim().trim_end_matches(" (deleted)"))
                .is_some_and(|m| maps(Path::new(m)))
        })
        .map(str::to_owned)
        .collect()
}

/// Runs test `name` of this binary as a child process with `var=value`, checks that it
/// passed (and really ran), and returns its stderr.
pub fn run_child(name: &str, var: &str, value: &str) -> String {
    let out = offload_testing::child::run_test(name, &[(var, value)]);
    String::from_utf8_lossy(&out.stderr).into_owned()
}
