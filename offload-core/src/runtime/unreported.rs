//! The errors no call could return: those of implicit shutdowns (the last runtime reference
//! dropped without `shutdown`, the exit hook) and of work that failed after its caller was
//! gone, kept (at most 64) for [`take_unreported_errors`] (L8: every error is delivered
//! exactly once). The bottom of the runtime: the generations and the lifecycle both put
//! errors here.

use crate::error::{Error, Result};
use crate::sync::{Mutex, lock, statics};

statics! {
    /// Errors of shutdowns nobody could be told about (a runtime dropped without
    /// `shutdown`, or shut down at exit). Bounded; see [`take_unreported_errors`].
    static UNREPORTED: Mutex<Vec<Error>> = Mutex::new(Vec::new());
}
const UNREPORTED_MAX: usize = 64;

/// Keeps the error of `result`, if any, for [`take_unreported_errors`].
pub(crate) fn report_later(result: Result<()>) {
    if let Err(e) = result {
        let mut list = lock(&UNREPORTED);
        if list.len() < UNREPORTED_MAX {
            list.push(e);
        }
    }
}

/// Takes the errors of implicit shutdowns: the last `Offload<Ready>` dropped without
/// calling `shutdown`, or the exit hook. At most 64 are kept.
///
/// ```
/// assert!(offload::take_unreported_errors().is_empty());
/// ```
pub fn take_unreported_errors() -> Vec<Error> {
    std::mem::take(&mut *lock(&UNREPORTED))
}
