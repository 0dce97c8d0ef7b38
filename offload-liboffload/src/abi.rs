//! liboffload 22's C ABI, generated at build time by bindgen from the system's
//! `OffloadAPI.h` (build.rs): handle types, enums (as newtypes, so a value C passes that
//! names no enumerator is no undefined behaviour), structs, and the declarations of the 70
//! functions, which `lib.rs` checks its definitions against.

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]

include!(concat!(env!("OUT_DIR"), "/abi.rs"));
