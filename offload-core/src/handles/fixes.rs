//! The fixes a launch refusal suggests, in the language of the code that made the call:
//! Rust syntax for Rust (`Arg::pod(&[x, y])`), Python's for the Python package (a tuple,
//! dims `(grid, block)`), C's for the C API (`offload_dims_t`'s `block`). The launch checks
//! choose the fix and the queue knows its caller ([`crate::Queue::for_caller`]); this
//! module only words it, so no binding rewrites a message's text. It owns no state.

use crate::error::Caller;

/// What a launch refusal tells its caller to do instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fix {
    /// A composite (vector, matrix or struct) parameter was given as several arguments.
    OneComposite,
    /// A storage-buffer parameter was given a buffer passed as a uniform one.
    AsStorage,
    /// A uniform-buffer parameter was given a buffer passed as a storage one.
    AsUniform,
    /// The safe run was asked for a block other than the one the kernel declares (S1).
    DeclaredBlock([u32; 3]),
    /// The safe run was given a kernel offload cannot verify.
    UnsafeLaunch,
}

impl Fix {
    /// The fix as `caller` writes it.
    pub(crate) fn words(self, caller: Caller) -> String {
        use Caller::{C, Liboffload, Python, Rust};
        const COMPOSITE: &str = "a vector, matrix or struct parameter is one argument";
        match (self, caller) {
            (Fix::OneComposite, Rust) => {
                format!("{COMPOSITE}: `Arg::pod(&[x, y])`, `Arg::pod(&your_struct)`")
            }
            (Fix::OneComposite, Python) => {
                format!("{COMPOSITE}: a tuple `(x, y)`, or the value's bytes")
            }
            (Fix::OneComposite, C) => {
                format!("{COMPOSITE}: a pointer to its bytes, and their size")
            }
            (Fix::AsStorage, Rust) => {
                "pass it as a buffer (`Arg::buffer`, or `&buffer` in `args!`)".into()
            }
            (Fix::AsUniform, Rust) => "pass it as one with `Arg::uniform(&buffer)`".into(),
            (Fix::AsStorage | Fix::AsUniform, Python) => "pass the `Buffer` itself".into(),
            (Fix::AsStorage | Fix::AsUniform, C) => {
                "pass a pointer to its `offload_buffer_t`".into()
            }
            (Fix::DeclaredBlock([x, y, z]), Rust) => format!(
                "(write `Dims::grid([..]).block([{x}, {y}, {z}])`), or, if the kernel does not \
                 depend on it, with another size said on purpose: `queue.run_resized(..)`"
            ),
            (Fix::DeclaredBlock([x, y, z]), Python) => {
                format!("(pass dims `(grid, ({x}, {y}, {z}))`)")
            }
            (Fix::DeclaredBlock([x, y, z]), C) => {
                format!("(set `offload_dims_t`'s `block` to `{{{x}, {y}, {z}}}`)")
            }
            (Fix::UnsafeLaunch, Rust) => {
                "launch it with `unsafe { queue.launch(..) }` and its safety contract".into()
            }
            (Fix::UnsafeLaunch, Python) => {
                "`Queue.launch` runs it as native code, on your promise that it stays inside \
                 its buffers"
                    .into()
            }
            (Fix::UnsafeLaunch, C) => {
                "launch it with `offload_queue_launch` and its safety contract".into()
            }
            // liboffload's olLaunchKernel takes its arguments as one packed blob of the
            // parameters' bytes and the group size in `ol_kernel_launch_size_args_t`.
            (Fix::OneComposite, Liboffload) => {
                format!("{COMPOSITE}: its bytes, in place, in the argument blob")
            }
            (Fix::AsStorage | Fix::AsUniform, Liboffload) => {
                "pass the buffer's device pointer".into()
            }
            (Fix::DeclaredBlock([x, y, z]), Liboffload) => {
                format!("(set the launch's `GroupSize` to {{{x}, {y}, {z}}})")
            }
            (Fix::UnsafeLaunch, Liboffload) => {
                "olLaunchKernel runs it as native code, on your promise that it stays inside its \
                 buffers"
                    .into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Fix; 5] = [
        Fix::OneComposite,
        Fix::AsStorage,
        Fix::AsUniform,
        Fix::DeclaredBlock([8, 8, 1]),
        Fix::UnsafeLaunch,
    ];

    #[test]
    fn every_fix_reads_in_its_callers_syntax_only() {
        for fix in ALL {
            let rust = fix.words(Caller::Rust);
            assert!(
                rust.contains("::") || rust.contains("queue."),
                "{fix:?}: {rust}"
            );
            for caller in [Caller::C, Caller::Python, Caller::Liboffload] {
                let text = fix.words(caller);
                for rust_only in [
                    "::",
                    "Arg",
                    "Dims",
                    "args!",
                    "run_resized",
                    "unsafe {",
                    "(..",
                ] {
                    assert!(!text.contains(rust_only), "{fix:?} for {caller:?}: {text}");
                }
            }
            assert!(!fix.words(Caller::Python).contains("offload_"), "{fix:?}");
            assert!(!fix.words(Caller::C).contains("Buffer`"), "{fix:?}");
        }
        assert_eq!(
            Fix::DeclaredBlock([64, 1, 1]).words(Caller::Python),
            "(pass dims `(grid, (64, 1, 1))`)"
        );
        assert_eq!(
            Fix::DeclaredBlock([8, 8, 1]).words(Caller::C),
            "(set `offload_dims_t`'s `block` to `{8, 8, 1}`)"
        );
        assert!(
            Fix::DeclaredBlock([8, 8, 1])
                .words(Caller::Rust)
                .contains("`Dims::grid([..]).block([8, 8, 1])`")
        );
    }
}
