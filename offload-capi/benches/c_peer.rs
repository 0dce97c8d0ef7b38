//! Runs benches/c/peer.c: offload's C API beside LLVM's liboffload 22, from C, paired in
//! one run (the program's top comment says what and why). The C program is compiled with
//! `-O2` against the shared library this bench build made, and prints a table.
//!
//! Run with `cargo bench -p offload-capi --bench c_peer`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe
        .parent()
        .expect("bench executable has a directory")
        .to_path_buf();
    let lib_dir = [deps.clone(), deps.join("..")]
        .into_iter()
        .find(|d| d.join("liboffload_capi.so").exists())
        .expect("liboffload_capi.so beside the bench executable");
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = deps.join("offload-capi-peer");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args([
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_GNU_SOURCE",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("benches/c/peer.c"))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-loffload_capi")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-Wl,--disable-new-dtags", "-ldl"])
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed on benches/c/peer.c");
    let status = Command::new(&out)
        .env_remove("LD_LIBRARY_PATH")
        .status()
        .expect("run the C peer bench");
    assert!(status.success(), "the C peer bench failed");
}
