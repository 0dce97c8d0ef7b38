//! The fixture kernels (`add_one`, `fill`, `noop`): how they are launched, and the
//! model of what they do that the checks compare with.

use super::*;

/// The fixture kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KernelKind {
    AddOne,
    Fill,
    Noop,
}

impl KernelKind {
    pub(super) const ALL: [KernelKind; 3] =
        [KernelKind::AddOne, KernelKind::Fill, KernelKind::Noop];

    pub(super) fn name(self) -> &'static str {
        match self {
            KernelKind::AddOne => "add_one",
            KernelKind::Fill => "fill",
            KernelKind::Noop => "noop",
        }
    }

    pub(super) fn params(self) -> &'static [ParamKind] {
        match self {
            KernelKind::AddOne => &[ParamKind::Buffer, ParamKind::Typed(U32)],
            KernelKind::Fill => &[
                ParamKind::Buffer,
                ParamKind::Typed(U32),
                ParamKind::Typed(U32),
            ],
            KernelKind::Noop => &[],
        }
    }

    /// Whether a backend's declaration matches: the same kinds, each scalar a `u32` or
    /// 4 bytes declared by size only.
    pub(super) fn declared_by(self, params: &[ParamKind]) -> bool {
        params.len() == self.params().len()
            && params.iter().zip(self.params()).all(|(got, want)| {
                got == want || (*want == ParamKind::Typed(U32) && *got == ParamKind::Scalar(4))
            })
    }

    /// The right arguments (a buffer is needed for `add_one` and `fill`).
    pub(super) fn args(self, buffer: Option<&Buffer>, value: u32, n: u32) -> Vec<Arg<'_>> {
        match (self, buffer) {
            (KernelKind::AddOne, Some(b)) => vec![Arg::buffer(b), Arg::scalar(&n)],
            (KernelKind::Fill, Some(b)) => {
                vec![Arg::buffer(b), Arg::scalar(&value), Arg::scalar(&n)]
            }
            _ => Vec::new(),
        }
    }

    /// What the kernel does to `model` when launched with `threads` threads.
    pub(super) fn apply(self, model: &mut [u8], value: u32, n: u32, threads: u64) {
        let count = usize::try_from(u64::from(n).min(threads)).unwrap_or(usize::MAX);
        for word in model.chunks_exact_mut(4).take(count) {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(word);
            let new = match self {
                KernelKind::AddOne => u32::from_ne_bytes(bytes).wrapping_add(1),
                KernelKind::Fill => value,
                KernelKind::Noop => return,
            };
            word.copy_from_slice(&new.to_ne_bytes());
        }
    }
}

pub(super) fn dims(grid: u32, block: u32) -> Dims {
    Dims::grid([grid, 1, 1]).block([block, 1, 1])
}

/// Launches `kind` and, on success, applies it to `model`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_checked(
    what: &str,
    queue: &Queue,
    kernel: &Kernel,
    kind: KernelKind,
    buffer: &Buffer,
    model: &mut [u8],
    value: u32,
    n: u32,
    (grid, block): (u32, u32),
) -> Check {
    let args = kind.args(Some(buffer), value, n);
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    ok(what, unsafe {
        queue.launch(kernel, dims(grid, block), &args)
    })?;
    kind.apply(model, value, n, u64::from(grid) * u64::from(block));
    Ok(())
}

pub(super) fn read_all(what: &str, buffer: &Buffer) -> Check<Vec<u8>> {
    let mut out = vec![0u8; buffer.len()];
    ok(what, buffer.read(0, &mut out))?;
    Ok(out)
}

pub(super) fn same_bytes(what: &str, got: &[u8], want: &[u8]) -> Check {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0);
    Err(format!(
        "{what}: the bytes differ from the model, first at byte {at} (word {}): got {:?}, \
         expected {:?}",
        at / 4,
        got,
        want
    ))
}
