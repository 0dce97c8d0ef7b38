//! Generates liboffload 22's ABI from the system's `OffloadAPI.h` (bindgen), the version
//! script that gives every `ol*` function the version `VERS1.0`, and the link arguments of
//! `libLLVMOffload.so`: its SONAME and that version script.
//!
//! rustc links a cdylib with a version script of its own, an anonymous one, and GNU ld
//! refuses to combine an anonymous version with a named one (rust-lld silently keeps the
//! anonymous one, so the symbols come out unversioned). So the library is linked with
//! GNU ld (`-fuse-ld=bfd`) through a two-line wrapper, found first by `-B`, that leaves out
//! rustc's version script: ours lists exactly the functions of the header, each `VERS1.0`,
//! and makes everything else local, as rustc's would.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

const DEFAULT_HEADER: &str = "/usr/lib/llvm-22/include/offload/OffloadAPI.h";

fn main() {
    println!("cargo:rerun-if-env-changed=OFFLOAD_LIBOFFLOAD_HEADER");
    println!("cargo:rerun-if-changed=build.rs");
    let header = env::var("OFFLOAD_LIBOFFLOAD_HEADER").unwrap_or_else(|_| DEFAULT_HEADER.into());
    if !std::path::Path::new(&header).exists() {
        panic!(
            "offload-liboffload: no {header}: install Debian's liboffload-22-dev (scripts/packages.txt), \
             or set OFFLOAD_LIBOFFLOAD_HEADER to LLVM 22's offload/OffloadAPI.h"
        );
    }
    println!("cargo:rerun-if-changed={header}");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));

    let bindings = bindgen::Builder::default()
        .header(&header)
        // The header uses C's `bool` without including <stdbool.h> (it is C++-first).
        .clang_args(["-include", "stdbool.h"])
        .allowlist_item("ol.*|OL_.*")
        // C enums as newtypes: a value C passes that names no enumerator is not UB.
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .rust_edition(bindgen::RustEdition::Edition2024)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen could not read OffloadAPI.h");
    let text = bindings.to_string();
    fs::write(out.join("abi.rs"), &text).expect("write abi.rs");

    // Every function the header declares (the 35 entry points and their WithCodeLoc twins).
    let mut names: Vec<&str> = text
        .split("pub fn ")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
        })
        .filter(|name| name.starts_with("ol"))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(
        names.len() >= 70,
        "OffloadAPI.h declares {} functions; liboffload 22 has 70",
        names.len()
    );
    let mut script = String::from("VERS1.0 {\n  global:\n");
    for name in &names {
        let _ = writeln!(script, "    {name};");
    }
    script.push_str("  local:\n    *;\n};\n");
    let map = out.join("vers.map");
    fs::write(&map, script).expect("write vers.map");
    fs::write(out.join("names.txt"), names.join("\n") + "\n").expect("write names.txt");

    // The wrapper gcc runs as `ld.bfd` (it searches the -B directory first).
    let wrap_dir = out.join("ld");
    fs::create_dir_all(&wrap_dir).expect("create the linker wrapper's directory");
    let wrapper = wrap_dir.join("ld.bfd");
    let map_arg = format!("--version-script={}", map.display());
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n# rustc's anonymous version script left out; {map_arg} kept.\n\
             for a do\n  shift\n  case $a in\n    {map_arg}) set -- \"$@\" \"$a\" ;;\n    \
             --version-script=*) ;;\n    *) set -- \"$@\" \"$a\" ;;\n  esac\ndone\n\
             exec ld.bfd \"$@\"\n"
        ),
    )
    .expect("write the linker wrapper");
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).expect("chmod");
    println!("cargo:rustc-cdylib-link-arg=-fuse-ld=bfd");
    println!("cargo:rustc-cdylib-link-arg=-B{}", wrap_dir.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,{map_arg}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libLLVMOffload.so.22.1");
}
