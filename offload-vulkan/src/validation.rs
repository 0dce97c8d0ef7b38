//! What the Khronos validation layer said, counted process-wide.
//!
//! When the layer runs (see [`crate::VulkanOptions::validation`]), a debug-utils messenger
//! calls [`error`] and [`warning`] from the driver's threads. The counts only grow; tests
//! compare them before and after their work, and CI fails on any error. The first messages
//! are kept (bounded) so a failing test can show them. Only const-initialised statics (L2).

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

static ERRORS: AtomicUsize = AtomicUsize::new(0);
static WARNINGS: AtomicUsize = AtomicUsize::new(0);
static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Messages kept for [`validation_report`]; later ones are only counted.
const KEPT: usize = 64;

fn keep(message: String) {
    let mut kept = MESSAGES.lock().unwrap_or_else(PoisonError::into_inner);
    if kept.len() < KEPT {
        kept.push(message);
    }
}

pub(crate) fn error(text: String) {
    ERRORS.fetch_add(1, Ordering::SeqCst);
    let _ = writeln!(
        std::io::stderr(),
        "offload-vulkan: validation error: {text}"
    );
    keep(format!("error: {text}"));
}

pub(crate) fn warning(text: String) {
    WARNINGS.fetch_add(1, Ordering::SeqCst);
    keep(format!("warning: {text}"));
}

/// What the validation layer reported in this process so far.
///
/// ```
/// let report = offload_vulkan::validation_report();
/// assert!(report.messages.len() <= report.errors + report.warnings);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ValidationReport {
    /// Errors reported (each also printed to stderr).
    pub errors: usize,
    /// Warnings reported (performance and best-practice notes included).
    pub warnings: usize,
    /// The first messages, each prefixed with `error: ` or `warning: `.
    pub messages: Vec<String>,
}

/// Reads what the Khronos validation layer has reported in this process, over every
/// platform opened while it ran.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::{Config};
/// use offload_vulkan::{VulkanOptions, VulkanPlatform, validation_report};
/// let before = validation_report().errors;
/// let options = VulkanOptions::default().validation(true);
/// let Ok(vk) = VulkanPlatform::open_with(&Config::default(), options) else { return Ok(()) };
/// vk.deinit()?;
/// assert_eq!(validation_report().errors, before);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub fn validation_report() -> ValidationReport {
    ValidationReport {
        errors: ERRORS.load(Ordering::SeqCst),
        warnings: WARNINGS.load(Ordering::SeqCst),
        messages: MESSAGES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
    }
}
