//! What the stream backends' buffer operations share: a copy within one buffer up to the
//! driver's own copy ([`copy_within`]: both ranges checked, overlapping ranges staged
//! through the host). (A fill's pattern check is the core's: `hal::check_fill`.)

use offload_core::{Result, hal};

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
