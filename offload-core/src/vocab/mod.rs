//! The crate's vocabulary, at the bottom of its layers: the plain values every other module
//! and the backends share — which backend, which memory, what a device says about itself,
//! launch geometry, kernel parameters ([`types`]), programs from source ([`source`]) and
//! what an image is by its first bytes ([`format`]). Nothing here imports another module of
//! the crate; users reach these through `hal` and the crate root.

pub(crate) mod format;
pub(crate) mod source;
pub(crate) mod types;
