//! The handle table at its limits, through the exported functions: every slot taken (the
//! next object is refused in words, nothing half-made), a released slot reused under a new
//! generation (the old handle stays refused), and nothing left once all are given back.
//! One test in its own binary, so no other test holds objects meanwhile.

use std::ffi::CStr;

use offload_capi::program::{offload_program_destroy, offload_program_from_image};
use offload_capi::runtime::offload_live_handles;
use offload_capi::status::offload_last_error;
use offload_capi::status::offload_status_t::{
    OFFLOAD_ERROR_INVALID_ARGUMENT, OFFLOAD_ERROR_INVALID_HANDLE, OFFLOAD_OK,
};

/// The slots the table has (`table::SLOTS`, as docs/c-api.md states it).
const SLOTS: usize = 1 << 18;

fn last_error() -> String {
    // SAFETY: offload_last_error returns a NUL-terminated string that lives until this
    // thread's next call into the library.
    unsafe { CStr::from_ptr(offload_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn program() -> Result<u64, String> {
    let image = [0x7fu8];
    let mut p = 0;
    // SAFETY: one readable byte at `image`; `p` is a live local.
    match unsafe { offload_program_from_image(image.as_ptr(), image.len(), &mut p) } {
        OFFLOAD_OK => Ok(p),
        status => {
            assert_eq!(status, OFFLOAD_ERROR_INVALID_ARGUMENT, "{}", last_error());
            assert_eq!(p, 0, "a refused object must leave no handle");
            Err(last_error())
        }
    }
}

#[test]
fn a_full_table_refuses_in_words_and_reused_slots_refuse_their_old_handles() {
    let mut made = Vec::with_capacity(SLOTS);
    let refusal = loop {
        match program() {
            Ok(p) => made.push(p),
            Err(why) => break why,
        }
        assert!(made.len() <= SLOTS, "more objects than slots");
    };
    assert_eq!(made.len(), SLOTS);
    assert!(
        refusal.contains(&format!("more than {SLOTS} live objects")),
        "{refusal}"
    );
    assert_eq!(offload_live_handles(), SLOTS);

    // A slot given back is taken by the next object, under a new generation.
    let old = made.pop().unwrap_or_default();
    assert_eq!(offload_program_destroy(old), OFFLOAD_OK);
    let new = program().expect("a slot was given back");
    assert_eq!(new >> 32 & 0x3ffff, old >> 32 & 0x3ffff, "the same slot");
    assert_ne!(new, old);
    assert_eq!(offload_program_destroy(old), OFFLOAD_ERROR_INVALID_HANDLE);
    assert!(
        last_error().contains("names no live program"),
        "{}",
        last_error()
    );
    made.push(new);

    for p in made {
        assert_eq!(offload_program_destroy(p), OFFLOAD_OK);
    }
    assert_eq!(offload_live_handles(), 0);
}
