//! What a call answers: `ol_result_t`, a pointer to `{code, details}` (null is success),
//! and the one wrapper every exported function runs its body in ([`guard`]), which turns
//! a failure or a caught panic into that pointer. No panic crosses into C.
//!
//! How long a result's text lives (docs/liboffload.md):
//! - refusals that need no words of their own (no runtime, a stale or foreign handle, a
//!   null argument, a call from inside a host function, a caught panic) point to static data:
//!   valid for as long as the library is loaded;
//! - a failure with offload's own message, made while a runtime generation is alive, is
//!   kept (once per distinct code and text) until the `olShutDown` that ends that
//!   generation;
//! - a failed `olInit`'s or `olShutDown`'s message lives in a fixed buffer of the library,
//!   valid until the next `olInit` or `olShutDown`.

use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::{ol_errc_t, ol_error_struct_t, ol_result_t};

/// A result in static memory: the pointer C gets is valid while the library is loaded.
#[repr(transparent)]
pub(crate) struct Static(pub(crate) ol_error_struct_t);

// SAFETY: the struct is never written after its const initialisation, and `Details`
// points to a static NUL-terminated string: sharing it between threads reads immutable data.
unsafe impl Sync for Static {}

/// A static result: `stat!(CODE, "text")`.
macro_rules! stat {
    ($code:ident, $text:expr) => {{
        static S: $crate::result::Static = $crate::result::Static($crate::abi::ol_error_struct_t {
            Code: $crate::abi::ol_errc_t::$code,
            Details: concat!($text, "\0").as_ptr().cast::<std::ffi::c_char>(),
        });
        &S
    }};
}
pub(crate) use stat;

/// Why a call failed.
pub(crate) enum Fail {
    /// A fixed refusal (static text).
    Static(&'static Static),
    /// offload's message, kept in the live generation's store.
    Message(ol_errc_t, String),
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

impl From<&'static Static> for Fail {
    fn from(s: &'static Static) -> Self {
        Fail::Static(s)
    }
}

/// A kept result with its text: the pointer C gets is the box's, stable until it is dropped.
pub(crate) struct Kept {
    err: ol_error_struct_t,
    _text: CString,
}

// SAFETY: `err.Details` points into `_text`, owned by the same value and never changed:
// moving the value to another thread moves the only owner.
unsafe impl Send for Kept {}

impl Kept {
    pub(crate) fn new(code: ol_errc_t, text: &str) -> Box<Kept> {
        let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
        Box::new(Kept {
            err: ol_error_struct_t {
                Code: code,
                Details: text.as_ptr(),
            },
            _text: text,
        })
    }

    pub(crate) fn as_result(&self) -> ol_result_t {
        &self.err
    }
}

/// A fixed buffer holding the message of the last failed `olInit` or `olShutDown`.
pub(crate) struct Fixed {
    err: ol_error_struct_t,
    text: [u8; 512],
}

// SAFETY: `err.Details` points to `text` in the same value, which lives in a static (it is
// never moved); the value is only written under the state lock.
unsafe impl Send for Fixed {}

impl Fixed {
    pub(crate) const fn new() -> Fixed {
        Fixed {
            err: ol_error_struct_t {
                Code: ol_errc_t::OL_ERRC_SUCCESS,
                Details: std::ptr::null(),
            },
            text: [0; 512],
        }
    }

    /// Writes `text` (cut to fit at a character boundary) and returns the result pointer,
    /// valid while this (static) buffer is not written again.
    pub(crate) fn set(&mut self, code: ol_errc_t, text: &str) -> ol_result_t {
        let mut len = text.len().min(self.text.len() - 1);
        while !text.is_char_boundary(len) {
            len -= 1;
        }
        self.text[..len].copy_from_slice(&text.as_bytes()[..len]);
        self.text[len] = 0;
        self.err = ol_error_struct_t {
            Code: code,
            Details: self.text.as_ptr().cast::<c_char>(),
        };
        &self.err
    }
}

/// Runs an exported function's body: success is null, a failure its result, a panic
/// `OL_ERRC_UNKNOWN` (static text) — no panic crosses into C.
#[inline]
pub(crate) fn guard(body: impl FnOnce() -> Result<(), ol_result_t>) -> ol_result_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => std::ptr::null(),
        Ok(Err(result)) => result,
        Err(_) => &stat!(
            OL_ERRC_UNKNOWN,
            "a panic inside offload's libLLVMOffload was caught at the C boundary (a bug: please report it)"
        )
        .0,
    }
}
