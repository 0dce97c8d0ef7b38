//! The runtime below the handles: one generation's state and its ordered shutdown
//! ([`generation`], L4), its platforms opened on first use ([`platforms`]), the
//! process-wide, reference-counted lifecycle of generations ([`lifecycle`], L1, L2) with
//! its exit hook, where user code runs inside offload ([`reentry`], L6), and what a forked
//! child does ([`fork`], L9). The handles sit above it, and the typestate users hold
//! (`crate::typestate`) on top.

mod exit_hook;
pub(crate) mod fork;
pub(crate) mod generation;
pub(crate) mod lifecycle;
pub(crate) mod platforms;
pub(crate) mod reentry;
pub(crate) mod unreported;
