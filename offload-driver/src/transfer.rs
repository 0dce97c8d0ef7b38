//! What the backends' buffer operations share: a fill's pattern checked ([`check_fill`])
//! and a copy within one buffer up to the driver's own copy ([`copy_within`]: both ranges
//! checked, overlapping ranges staged through the host).

use offload_core::{Error, Result, hal};

/// Checks a fill's pattern (`hal::Queue::enqueue_fill`): not empty, and repeating into `len`
/// bytes exactly.
///
/// ```
/// assert!(offload_driver::check_fill(8, &[1, 2]).is_ok());
/// assert!(offload_driver::check_fill(8, &[1, 2, 3]).is_err());
/// assert!(offload_driver::check_fill(8, &[]).is_err());
/// ```
pub fn check_fill(len: usize, pattern: &[u8]) -> Result<()> {
    if pattern.is_empty() || len % pattern.len() != 0 {
        return Err(Error::invalid(
            "",
            format!(
                "a {}-byte pattern cannot fill {len} bytes exactly",
                pattern.len()
            ),
        ));
    }
    Ok(())
}

/// `hal::Device::copy_within` up to the driver's copy: checks both ranges (`at` gives a
/// range's device address, or the buffer's out-of-range error), does nothing for an empty
/// copy or one onto itself, and stages overlapping ranges through the host (`device.read`,
/// then `device.write`). `Some((from, to))`: the addresses of the copy left to the driver,
/// whose ranges do not overlap.
///
/// ```
/// use offload_core::hal::Device;
/// fn copy<D: Device>(device: &D, buffer: &mut D::Buffer) -> offload_core::Result<()> {
///     let at = |_: &D::Buffer, offset: usize, _len: usize| Ok(offset as u64);
///     if let Some((from, to)) = offload_driver::copy_within(device, buffer, 0, 64, 16, at)? {
///         assert_eq!((from, to), (0, 64)); // the driver copies
///     }
///     Ok(())
/// }
/// ```
pub fn copy_within<D: hal::Device, P: PartialEq>(
    device: &D,
    buffer: &mut D::Buffer,
    src_offset: usize,
    dst_offset: usize,
    len: usize,
    at: impl Fn(&D::Buffer, usize, usize) -> Result<P>,
) -> Result<Option<(P, P)>> {
    let from = at(buffer, src_offset, len)?;
    let to = at(buffer, dst_offset, len)?;
    if len == 0 || from == to {
        return Ok(None);
    }
    if src_offset.abs_diff(dst_offset) < len {
        let mut staged = vec![0u8; len];
        device.read(buffer, src_offset, &mut staged)?;
        device.write(buffer, dst_offset, &staged)?;
        return Ok(None);
    }
    Ok(Some((from, to)))
}
