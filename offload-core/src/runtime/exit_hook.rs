//! Shuts down a runtime that is still alive when the process exits (or when the shared
//! library that embeds offload is `dlclose`d), so device work is drained and drivers are
//! deinitialised before their own library destructors run.
//!
//! The hook is registered with the C library's `atexit`. In glibc, `atexit` is a small
//! function linked statically into each shared object (from `libc_nonshared.a`) that calls
//! `__cxa_atexit(f, NULL, __dso_handle)` with *that object's* handle, so when a library
//! embedding offload is `dlclose`d, glibc's `__cxa_finalize` runs the hook then and drops
//! it: the hook never points into unmapped code (measured; see tests/dlopen.rs). This is
//! the only `unsafe` in the core.
#![allow(unsafe_code)]

use crate::sync::{AtomicU32, OnceLock, Ordering, statics};

use crate::hal::BackendKind;

#[cfg(not(offload_model))]
unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// What the hook runs: the lifecycle's shutdown at exit, handed to [`register`] (the
/// lifecycle sits above this module and registers the hook when a generation starts).
static AT_EXIT: OnceLock<fn()> = OnceLock::new();

#[cfg(not(offload_model))]
extern "C" fn on_exit() {
    // A forked child owns nothing of the parent's runtime (L9): nothing to shut down.
    if crate::runtime::fork::forked() {
        return;
    }
    // Registered by a platform's first opening before the first generation handed its
    // shutdown over: nothing was started, nothing to shut down.
    let Some(&at_exit) = AT_EXIT.get() else {
        return;
    };
    // A panic must not cross the C boundary; the runtime's locks are poison-tolerant.
    // Nothing to report to: the shutdown keeps its errors for take_unreported_errors.
    let _ = std::panic::catch_unwind(at_exit);
}

#[cfg(not(offload_model))]
fn register_hook() -> bool {
    // SAFETY: `atexit` takes a plain `extern "C" fn()` with no captured state; `on_exit`
    // lives in this object, and glibc unregisters it when this object is unloaded (see the
    // module comment), so it is never called after our code is unmapped.
    unsafe { atexit(on_exit) == 0 }
}

/// Registers the hook to run `at_exit` (the lifecycle's shutdown at exit; the same function
/// every time); false if the C library refused (out of memory).
#[cfg(not(offload_model))]
pub(crate) fn register(at_exit: fn()) -> bool {
    let _ = AT_EXIT.set(at_exit); // set by the first call; later ones hand the same function
    register_hook()
}

/// The model check registers nothing: its scenarios run the hook's body,
/// `lifecycle::shutdown_at_exit`, themselves.
#[cfg(offload_model)]
pub(crate) fn register(at_exit: fn()) -> bool {
    let _ = AT_EXIT.set(at_exit); // kept for symmetry; the model never exits the process
    true
}

#[cfg(offload_model)]
fn register_hook() -> bool {
    true
}

statics! {
    /// The backends after whose first opening (since this library was loaded) the hook was
    /// registered again: one bit per [`BackendKind`].
    static AFTER_OPEN: AtomicU32 = AtomicU32::new(0);
}

/// Registers the hook again after a platform of `kind` opened for the first time since this
/// library was loaded: platforms open lazily, after the hook of the generation's start, and a
/// driver may register exit handlers of its own when it opens, which would run before ours
/// (exit handlers run newest first) and leave our shutdown calling a finalised driver. The
/// hook is idempotent, so running it once per backend more is harmless; at most one
/// registration per backend kind.
pub(crate) fn after_open(kind: BackendKind) {
    let bit = 1u32 << (kind as u32);
    if AFTER_OPEN.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
        register_hook();
    }
}
