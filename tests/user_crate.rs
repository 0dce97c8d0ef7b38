//! Builds and runs tests/user-crate, a crate outside the workspace that uses offload the
//! way a user's crate does (features `fixtures`, `vulkan` and `wgsl`): the examples of the
//! README and of its chapters (docs/*.md), and SAXPY on the host and Vulkan devices with
//! the typed API. Its output is printed; any failure, build or run, fails this test, and
//! so does an example of those documents that it did not run. A second test checks that
//! every chapter is also a doctest of the library (src/lib.rs includes it).
//!
//! It builds in the workspace's target directory (cargo releases that directory's lock
//! before it runs the tests), with its lock file seeded from the workspace's and the
//! workspace's debug profile, so it uses the versions (and the downloaded sources) the
//! workspace uses and finds the third-party crates the workspace's build already compiled:
//! only offload's own crates, with the user crate's features, are built again. It runs
//! where all features are on, as in CI (`cargo test --workspace --all-features`).
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
        .expect("the target directory");

    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(&dir)
        .args(["run", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target);
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
    let examples = examples(root);
    assert!(
        !examples.is_empty(),
        "no examples found in README.md and docs/"
    );
    for (doc, line) in examples {
        let ran = format!("{doc} example at line {line}: ok");
        assert!(
            stdout.contains(&ran),
            "the user crate did not run {doc}'s example at line {line}"
        );
    }
}

// `documents(root)`: README.md and docs/*.md, as the user crate's build script lists them.
include!("user-crate/documents.rs");

/// (document, line) of every ```rust block the user crate builds and runs: those rustdoc
/// runs too (not `ignore`, `compile_fail`, `no_run` or `text`).
fn examples(root: &Path) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for doc in documents(root) {
        let text = std::fs::read_to_string(root.join(&doc)).expect("read a document");
        let mut in_block = false;
        for (at, line) in text.lines().enumerate() {
            if in_block {
                in_block = !line.starts_with("```");
                continue;
            }
            if !line.starts_with("```") {
                continue;
            }
            in_block = true;
            if let Some(info) = line.strip_prefix("```rust") {
                let attrs: Vec<&str> = info.split(',').map(str::trim).collect();
                if !["ignore", "compile_fail", "no_run", "text"]
                    .iter()
                    .any(|a| attrs.contains(a))
                {
                    found.push((doc.clone(), at + 1));
                }
            }
        }
    }
    found
}

/// Every chapter is a doctest too: src/lib.rs includes each docs/*.md.
#[test]
fn every_chapter_is_a_doctest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("read src/lib.rs");
    for doc in documents(root) {
        let include = format!("include_str!(\"../{doc}\")");
        assert!(
            lib.contains(&include),
            "src/lib.rs has no `#[doc = {include}]`: {doc}'s examples are not doctests"
        );
    }
}
