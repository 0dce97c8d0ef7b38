//! Builds and runs tests/user-crate, a crate outside the workspace that uses offload the
//! way a user's crate does (features `fixtures` and `vulkan`): the README's examples, and
//! SAXPY on the host and Vulkan devices with the typed API. Its output is printed; any
//! failure, build or run, fails this test.
//!
//! It builds in its own target directory (`user-crate` beside this build's `tmp`, so
//! `target/user-crate` by default), so it never waits for the lock of the build running
//! it, and with its lock file seeded from the workspace's, so it uses the versions (and
//! the downloaded sources) the workspace uses. Cold, that build takes a few minutes; it
//! runs where all features are on, as in CI (`cargo test --workspace --all-features`).
#![cfg(all(feature = "fixtures", feature = "vulkan", feature = "wgsl"))]

use std::path::Path;
use std::process::Command;

#[test]
fn user_crate_builds_and_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("tests/user-crate");
    // The crate's Cargo.lock is not tracked: it is the workspace's, pruned by cargo.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))
        .expect("copy Cargo.lock into tests/user-crate");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("user-crate");

    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(&dir)
        .args(["run", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target);
    // What cargo set for this test describes this package, not the user crate.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|p| key.starts_with(p))
        {
            cargo.env_remove(&*key);
        }
    }
    println!("running {cargo:?}");
    let out = cargo.output().expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- stdout ---\n{stdout}--- stderr ---\n{stderr}");
    assert!(
        out.status.success(),
        "the user crate failed: {}",
        out.status
    );
    assert!(
        stdout.contains("saxpy on host"),
        "no host SAXPY in its output"
    );
}
