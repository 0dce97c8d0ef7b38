//! Checked access to what a C caller passes: output pointers, byte ranges, strings. Each
//! check runs before the call does anything, so a null pointer is refused before an object
//! is made that would then have nowhere to go (nothing leaks on an error path).

use std::ffi::{CStr, c_char};

use crate::status::{Fail, Res};
use offload::Error;

/// An output pointer checked for null.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Stores `value` where the caller asked.
    pub(crate) fn set(self, value: T) {
        // SAFETY: non-null (checked in `out`), and the caller promises a writable, aligned
        // `T` there (each function's `# Safety`).
        unsafe { self.0.write(value) }
    }
}

/// `ptr`, checked for null: `InvalidArgument` naming the parameter if it is.
pub(crate) fn out<T>(call: &'static str, name: &str, ptr: *mut T) -> Res<Out<T>> {
    if ptr.is_null() {
        return Err(Fail::from(Error::invalid(
            call,
            format!("`{name}` is a null pointer"),
        )));
    }
    Ok(Out(ptr))
}

/// `len` bytes at `ptr` (null is allowed when `len` is 0).
///
/// # Safety
/// A non-null `ptr` must point to `len` readable bytes that stay unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(
    call: &'static str,
    name: &str,
    ptr: *const u8,
    len: usize,
) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Fail::from(Error::invalid(
            call,
            format!("`{name}` is a null pointer with a length of {len} bytes"),
        )));
    }
    // SAFETY: non-null; the caller promises `len` readable bytes for 'a.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// `len` writable bytes at `ptr` (null is allowed when `len` is 0).
///
/// # Safety
/// A non-null `ptr` must point to `len` writable bytes nothing else touches for `'a`.
pub(crate) unsafe fn bytes_mut<'a>(
    call: &'static str,
    name: &str,
    ptr: *mut u8,
    len: usize,
) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Fail::from(Error::invalid(
            call,
            format!("`{name}` is a null pointer with a length of {len} bytes"),
        )));
    }
    // SAFETY: non-null; the caller promises `len` writable bytes, not aliased, for 'a.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The UTF-8 string at `ptr`.
///
/// # Safety
/// A non-null `ptr` must point to a NUL-terminated string that stays unchanged for `'a`.
pub(crate) unsafe fn text<'a>(call: &'static str, name: &str, ptr: *const c_char) -> Res<&'a str> {
    if ptr.is_null() {
        return Err(Fail::from(Error::invalid(
            call,
            format!("`{name}` is a null pointer"),
        )));
    }
    // SAFETY: non-null; the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map_err(|_| Fail::from(Error::invalid(call, format!("`{name}` is not UTF-8"))))
}

/// Copies `s` and a NUL into `buf` (`cap` bytes); stores the bytes needed (NUL included) in
/// `needed` when it is not null. A null `buf` with `cap` 0 asks only for the size; a `cap`
/// too small is `InvalidArgument` (and `needed` still says how much).
///
/// # Safety
/// A non-null `buf` must point to `cap` writable bytes; a non-null `needed` to a writable
/// `size_t`.
pub(crate) unsafe fn copy_text(
    call: &'static str,
    s: &str,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> Res {
    let want = s.len() + 1;
    if !needed.is_null() {
        // SAFETY: non-null; the caller promises a writable size_t.
        unsafe { needed.write(want) };
    }
    if buf.is_null() && cap == 0 {
        return Ok(());
    }
    if buf.is_null() {
        return Err(Fail::from(Error::invalid(call, "`buf` is a null pointer")));
    }
    if cap < want {
        return Err(Fail::from(Error::invalid(
            call,
            format!("`buf` holds {cap} bytes; {want} are needed"),
        )));
    }
    // SAFETY: the caller promises `cap >= want` writable bytes at `buf`, which cannot
    // overlap `s` (this library's own memory).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

/// Copies `s` into a fixed array, cut to fit (at a character boundary), NUL-terminated.
pub(crate) fn fixed<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    let mut len = s.len().min(N - 1);
    while !s.is_char_boundary(len) {
        len -= 1;
    }
    for (o, b) in out.iter_mut().zip(&s.as_bytes()[..len]) {
        *o = *b as c_char;
    }
    out
}
