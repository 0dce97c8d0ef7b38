//! docs/c-api.md's install recipe, as written, for a prefix that is not a system one:
//! `offload-capi/install.sh PREFIX` installs the header, the libraries and `offload.pc`,
//! and `cc -std=c99 saxpy.c $(pkg-config --cflags --libs offload)` with only
//! `PKG_CONFIG_PATH` set builds the example (examples/saxpy.c), which then starts and runs
//! without `LD_LIBRARY_PATH`: the `.pc` file's `Libs` carry an rpath.
//!
//! install.sh's own step `cargo build --release` is replaced by a `cargo` that does
//! nothing, first on `PATH`, and `CARGO_TARGET_DIR/release` is the library this test
//! binary was built with: the test checks what the script installs, not a second build.
//! Without `pkg-config` the test is skipped with the reason, except under `CI=true`, where
//! that is a failure.

mod common;

use common::{crate_dir, has, in_ci, lib_dir, run_ok, work_dir};
use std::process::Command;
use std::time::Duration;

#[test]
fn the_pkg_config_recipe_works_for_a_non_system_prefix() {
    if !has("pkg-config") {
        assert!(
            !in_ci(),
            "pkg-config is missing under CI=true (scripts/test.sh installs it)"
        );
        println!("skipped: pkg-config is not installed (apt-get install pkg-config)");
        return;
    }
    let work = work_dir("pkg-config");
    let prefix = work.join("prefix");
    let _ = std::fs::remove_dir_all(&prefix); // a leftover of an earlier run, or nothing
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin/");
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\nexit 0\n").expect("write the stand-in cargo");
    let mut perms = std::fs::metadata(&cargo).expect("stat cargo").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&cargo, perms).expect("make the stand-in cargo executable");
    let target = work.join("target");
    std::fs::create_dir_all(&target).expect("create target/");
    let release = target.join("release");
    let _ = std::fs::remove_file(&release); // a link of an earlier run, or nothing
    std::os::unix::fs::symlink(lib_dir(), &release).expect("link target/release");

    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut install = Command::new("bash");
    install
        .arg(crate_dir().join("install.sh"))
        .arg(&prefix)
        .env("PATH", &path)
        .env("CARGO_TARGET_DIR", &target);
    run_ok(install, Duration::from_secs(60));

    let pc =
        std::fs::read_to_string(prefix.join("lib/pkgconfig/offload.pc")).expect("read offload.pc");
    assert!(pc.contains("offload-capi/install.sh"), "{pc}");
    for line in pc.lines().filter(|l| l.starts_with('#')) {
        assert!(
            !line.contains(&*prefix.to_string_lossy()),
            "a comment of offload.pc shows the prefix: {line}"
        );
    }

    // docs/c-api.md's line, run where the example is, with PKG_CONFIG_PATH only.
    let exe = work.join("saxpy");
    let mut cc = Command::new("sh");
    cc.arg("-c")
        .arg(format!(
            "${{CC:-cc}} -std=c99 saxpy.c $(pkg-config --cflags --libs offload) -o '{}'",
            exe.display()
        ))
        .current_dir(crate_dir().join("examples"))
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LIBRARY_PATH");
    run_ok(cc, Duration::from_secs(60));
    // run_ok removes LD_LIBRARY_PATH: the library is found through the rpath alone.
    let out = run_ok(Command::new(&exe), Duration::from_secs(120));
    assert!(out.contains("y[3] = 6 (expected 6)"), "{out}");
}
