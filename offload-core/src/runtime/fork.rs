//! A child forked from a process running offload (L9): every call answers `Error::Forked`
//! at once, before it touches a lock (a thread of the parent may have held it at the fork,
//! and that thread does not exist here), and every handle dropped there is forgotten — its
//! objects belong to the parent's runtime, whose threads and driver state the child lacks.
//! The exit hook does nothing in such a child. `offload-thread`'s `fork` watches forks.

use crate::error::{Error, Result};

/// Marks offload as started in this process (the first `init` of a generation).
pub(crate) fn started() {
    offload_thread::fork::started();
}

/// Whether this process is a child forked after offload started.
#[inline]
pub(crate) fn forked() -> bool {
    offload_thread::fork::forked()
}

/// `Error::Forked` for `call` in a forked child; `Ok` elsewhere.
#[inline]
pub(crate) fn refuse(call: &'static str) -> Result<()> {
    if forked() {
        return Err(in_forked_child(call));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn in_forked_child(call: &'static str) -> Error {
    Error::Forked {
        call,
        pid: std::process::id(),
    }
}

/// In a forked child, keeps `object` (an `Arc` a dropped handle held) from ever being
/// dropped there — its drop would call the parent's drivers or take its locks — and says
/// so; elsewhere `false`.
pub(crate) fn forget_in_child<T: Clone>(object: &T) -> bool {
    if !forked() {
        return false;
    }
    std::mem::forget(object.clone());
    true
}
