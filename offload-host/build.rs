//! Tells dependents' build scripts where `offload_host.h` is (`links = "offload_host"`:
//! they read `DEP_OFFLOAD_HOST_INCLUDE`). With feature `fixtures`: compiles
//! fixtures/kernels.c into two shared objects (STEP=1 and STEP=2) that tests embed with
//! `include_bytes!`, with the C compiler the `cc` crate finds.

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let include = std::path::Path::new(&manifest).join("include");
    println!("cargo:include={}", include.display());
    println!("cargo:rerun-if-changed=fixtures/kernels.c");
    println!("cargo:rerun-if-changed=include/offload_host.h");
    #[cfg(feature = "fixtures")]
    fixtures();
}

#[cfg(feature = "fixtures")]
fn fixtures() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let compiler = cc::Build::new().opt_level(2).get_compiler();
    for (name, step) in [("kernels.so", "1"), ("kernels_step2.so", "2")] {
        let status = compiler
            .to_command()
            .args(["-shared", "-fPIC", "-Wall", "-Werror", "-Iinclude"])
            .arg(format!("-DSTEP={step}"))
            .arg("-o")
            .arg(out.join(name))
            .arg("fixtures/kernels.c")
            .status()
            .expect("run the C compiler");
        assert!(
            status.success(),
            "compiling fixtures/kernels.c ({name}) failed"
        );
    }
}
