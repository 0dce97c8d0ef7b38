//! What the driver backends (CUDA, HIP) share about launching a kernel: its arguments
//! checked against the parameters the image declares and packed into 8-byte values
//! ([`pack_args`]), and its geometry checked against the device ([`LaunchLimits`]).

use offload_core::{Dims, Error, KernelArg, ParamKind, Result};

/// The arguments of a launch as the driver takes them: one 8-byte value per parameter (a
/// buffer's device address, or a scalar's bytes), and the buffers they use.
pub type Packed<'a, B> = (Vec<[u8; 8]>, Vec<&'a B>);

/// Checks `args` against `params` and packs them; `kernel` names the kernel in errors
/// (`cuda kernel `add_one``), `address` gives a buffer's device address and `len` its size.
///
/// ```
/// use offload_core::{KernelArg, ParamKind};
/// let buffer = 4096usize; // stands in for a buffer: its length
/// let (values, buffers) = offload_driver::pack_args(
///     "test kernel `k`",
///     &[ParamKind::Buffer, ParamKind::Scalar(4)],
///     &[
///         KernelArg::Range { buffer: &buffer, offset: 8, len: 16 },
///         KernelArg::Scalar(&[1, 0, 0, 0]),
///     ],
///     |_| 0x1000,
///     |b| *b,
/// )?;
/// assert_eq!(values[0], 0x1008u64.to_ne_bytes());
/// assert_eq!(values[1][..4], [1, 0, 0, 0]);
/// assert_eq!(buffers.len(), 1);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub fn pack_args<'a, B>(
    kernel: &str,
    params: &[ParamKind],
    args: &[KernelArg<'a, B>],
    address: impl Fn(&B) -> u64,
    len: impl Fn(&B) -> usize,
) -> Result<Packed<'a, B>> {
    if args.len() != params.len() {
        return Err(Error::invalid(
            "",
            format!(
                "{kernel} takes {} arguments ({params:?}), {} given",
                params.len(),
                args.len()
            ),
        ));
    }
    let mut values: Vec<[u8; 8]> = Vec::with_capacity(args.len());
    let mut buffers: Vec<&'a B> = Vec::new();
    for (i, (arg, param)) in args.iter().zip(params).enumerate() {
        let mut value = [0u8; 8];
        match (*arg, param) {
            (KernelArg::Buffer(b), ParamKind::Buffer) => {
                value = address(b).to_ne_bytes();
                buffers.push(b);
            }
            (
                KernelArg::Range {
                    buffer,
                    offset,
                    len: bytes,
                },
                ParamKind::Buffer,
            ) => {
                let inside = offset
                    .checked_add(bytes)
                    .is_some_and(|end| end <= len(buffer));
                if !inside {
                    return Err(Error::invalid(
                        "",
                        format!(
                            "argument {i} of {kernel}: bytes {offset}..{} are outside the \
                         {}-byte buffer",
                            offset as u128 + bytes as u128,
                            len(buffer)
                        ),
                    ));
                }
                value = (address(buffer) + offset as u64).to_ne_bytes();
                buffers.push(buffer);
            }
            (KernelArg::Scalar(bytes), p)
                if p.scalar_size() == Some(bytes.len()) && bytes.len() <= 8 =>
            {
                value[..bytes.len()].copy_from_slice(bytes);
            }
            _ => {
                return Err(Error::invalid(
                    "",
                    format!("argument {i} of {kernel} should be {param:?}"),
                ));
            }
        }
        values.push(value);
    }
    Ok((values, buffers))
}

/// A device's limits on a launch's geometry.
///
/// ```
/// use offload_core::Dims;
/// use offload_driver::LaunchLimits;
/// let limits = LaunchLimits {
///     max_block_threads: 1024,
///     max_block: [1024, 1024, 64],
///     max_grid: [65535; 3],
///     max_shared_memory: 48 << 10,
///     attributes: ("MAX_BLOCK_DIM_*", "MAX_GRID_DIM_*"),
/// };
/// assert!(limits.check(&Dims::grid([4, 1, 1]).block([64, 1, 1]), "kernel `k`").is_ok());
/// assert!(limits.check(&Dims::grid([4, 1, 1]).block([64, 1, 128]), "kernel `k`").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    /// Threads in one block.
    pub max_block_threads: u32,
    /// Block size in each dimension.
    pub max_block: [u32; 3],
    /// Grid size in each dimension.
    pub max_grid: [u32; 3],
    /// Bytes of dynamic shared memory per block.
    pub max_shared_memory: u32,
    /// The driver's names of the block and grid limits, for the errors.
    pub attributes: (&'static str, &'static str),
}

impl LaunchLimits {
    /// Checks `dims`; `kernel` names the kernel in errors.
    pub fn check(&self, dims: &Dims, kernel: &str) -> Result<()> {
        let fail = |why: String| Err(Error::invalid("", format!("{kernel}: {why}")));
        if dims.block.contains(&0) {
            return fail(format!("block {:?} has a zero dimension", dims.block));
        }
        if (0..3).any(|k| dims.block[k] > self.max_block[k]) {
            return fail(format!(
                "block {:?} exceeds the device's {:?} ({})",
                dims.block, self.max_block, self.attributes.0
            ));
        }
        if dims.threads_per_block() > u64::from(self.max_block_threads) {
            return fail(format!(
                "block {:?} has {} threads, the device allows {}",
                dims.block,
                dims.threads_per_block(),
                self.max_block_threads
            ));
        }
        if (0..3).any(|k| dims.grid[k] > self.max_grid[k]) {
            return fail(format!(
                "grid {:?} exceeds the device's {:?} ({})",
                dims.grid, self.max_grid, self.attributes.1
            ));
        }
        if dims.shared_memory > self.max_shared_memory {
            return fail(format!(
                "{} bytes of dynamic shared memory; the device allows {} per block",
                dims.shared_memory, self.max_shared_memory
            ));
        }
        Ok(())
    }
}
