//! `include/offload.h` is what cbindgen generates from this crate: a test fails when the
//! checked-in header and the crate disagree. `OFFLOAD_BLESS=1` rewrites the header.

use std::path::Path;

#[test]
fn checked_in_header_is_the_generated_one() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates offload.h")
        .write(&mut generated);
    let path = crate_dir.join("include/offload.h");
    if std::env::var_os("OFFLOAD_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/offload.h");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/offload.h differs from what cbindgen generates from the crate; run \
         `OFFLOAD_BLESS=1 cargo test -p offload-capi --test header` and commit the header"
    );
}
