//! The runtime: configuration ([`config`]), one generation's state and its ordered
//! shutdown ([`generation`], L4), its platforms opened on first use ([`platforms`]), and the reference-counted lifecycle with the typestate
//! runtime users hold ([`lifecycle`], L1–L3, L5), and where user code runs inside offload
//! ([`reentry`], L6). Handles sit above the generation; the
//! lifecycle sits above the handles (it hands out devices).

pub(crate) mod config;
mod exit_hook;
pub(crate) mod generation;
pub(crate) mod lifecycle;
pub(crate) mod platforms;
pub(crate) mod reentry;
pub(crate) mod sync;
