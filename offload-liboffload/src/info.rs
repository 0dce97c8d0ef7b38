//! The answers of the `olGet*Info` queries, as the bytes the header says each one has.

use crate::abi::*;
use crate::result::{Fail, Res, stat};
use crate::state::{DevKind, Live, platform_handle};
use offload::BackendKind;

/// One property's value.
pub(crate) enum Value {
    Str(String),
    U32(u32),
    U64(u64),
    /// A pointer-sized value (a handle, an address, a `size_t`).
    Word(usize),
    Dims([u32; 3]),
    /// A C `bool` (one byte).
    Bool(bool),
}

impl Value {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        match self {
            Value::Str(s) => {
                let mut b = s.replace('\0', " ").into_bytes();
                b.push(0);
                b
            }
            Value::U32(v) => v.to_ne_bytes().to_vec(),
            Value::U64(v) => v.to_ne_bytes().to_vec(),
            Value::Word(v) => v.to_ne_bytes().to_vec(),
            Value::Dims(d) => d.iter().flat_map(|v| v.to_ne_bytes()).collect(),
            Value::Bool(b) => vec![u8::from(*b)],
        }
    }
}

/// Every floating-point capability (the host CPU's: IEEE 754 with FMA).
const FP_ALL: u32 = 127;

pub(crate) fn device(live: &Live, index: usize, prop: ol_device_info_t) -> Res<Value> {
    use ol_device_info_t as P;
    let dev = &live.devices[index];
    let (device, info) = match &dev.kind {
        DevKind::Endpoint => return endpoint(live, dev.platform, prop),
        DevKind::Offload(d) => (&d.0, &d.1),
    };
    let host = device.backend() == BackendKind::Host;
    let block = info.max_block.unwrap_or([1, 1, 1]);
    let grid = info.max_grid.unwrap_or([u32::MAX; 3]);
    let work = [0, 1, 2].map(|i| block[i].saturating_mul(grid[i]));
    Ok(match prop {
        P::OL_DEVICE_INFO_TYPE => Value::U32(if host {
            ol_device_type_t::OL_DEVICE_TYPE_CPU.0
        } else {
            ol_device_type_t::OL_DEVICE_TYPE_GPU.0
        }),
        P::OL_DEVICE_INFO_PLATFORM => Value::Word(platform_handle(live.epoch, dev.platform).addr()),
        P::OL_DEVICE_INFO_NAME | P::OL_DEVICE_INFO_PRODUCT_NAME => Value::Str(info.name.clone()),
        P::OL_DEVICE_INFO_UID => Value::Str(format!(
            "offload-{}-{}",
            format!("{:?}", device.backend()).to_lowercase(),
            dev.index
        )),
        P::OL_DEVICE_INFO_VENDOR => Value::Str(info.vendor.clone()),
        P::OL_DEVICE_INFO_DRIVER_VERSION => Value::Str(
            info.driver_version
                .clone()
                .unwrap_or_else(|| format!("offload {}", env!("CARGO_PKG_VERSION"))),
        ),
        P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE => Value::U32(info.max_block_threads.unwrap_or(1)),
        P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION => Value::Dims(block),
        P::OL_DEVICE_INFO_MAX_WORK_SIZE => {
            Value::U32(work.iter().fold(1u32, |a, &b| a.saturating_mul(b)))
        }
        P::OL_DEVICE_INFO_MAX_WORK_SIZE_PER_DIMENSION => Value::Dims(work),
        P::OL_DEVICE_INFO_VENDOR_ID => Value::U32(info.vendor_id.unwrap_or(0)),
        P::OL_DEVICE_INFO_NUM_COMPUTE_UNITS => Value::U32(info.compute_units),
        P::OL_DEVICE_INFO_MAX_CLOCK_FREQUENCY => Value::U32(info.clock_mhz.unwrap_or(0)),
        // offload does not report a memory clock.
        P::OL_DEVICE_INFO_MEMORY_CLOCK_RATE => Value::U32(0),
        P::OL_DEVICE_INFO_ADDRESS_BITS => Value::U32(info.address_bits.unwrap_or(64)),
        P::OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE => Value::U64(info.max_alloc.unwrap_or(info.memory)),
        P::OL_DEVICE_INFO_GLOBAL_MEM_SIZE => Value::U64(info.memory),
        P::OL_DEVICE_INFO_WORK_GROUP_LOCAL_MEM_SIZE => Value::U64(info.shared_memory.unwrap_or(0)),
        // offload reports floating-point capabilities for no backend: the host's are the
        // CPU's; for the others 0 says "not reported".
        P::OL_DEVICE_INFO_SINGLE_FP_CONFIG | P::OL_DEVICE_INFO_DOUBLE_FP_CONFIG => {
            Value::U32(if host { FP_ALL } else { 0 })
        }
        P::OL_DEVICE_INFO_HALF_FP_CONFIG => Value::U32(0),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_HALF => Value::U32(0),
        p if (P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_CHAR.0
            ..=P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_DOUBLE.0)
            .contains(&p.0) =>
        {
            Value::U32(1)
        }
        _ => return Err(bad_enum()),
    })
}

/// liboffload's own HOST device, the memcpy endpoint for host pointers.
fn endpoint(live: &Live, platform: usize, prop: ol_device_info_t) -> Res<Value> {
    use ol_device_info_t as P;
    Ok(match prop {
        P::OL_DEVICE_INFO_TYPE => Value::U32(ol_device_type_t::OL_DEVICE_TYPE_HOST.0),
        P::OL_DEVICE_INFO_PLATFORM => Value::Word(platform_handle(live.epoch, platform).addr()),
        P::OL_DEVICE_INFO_NAME | P::OL_DEVICE_INFO_PRODUCT_NAME => {
            Value::Str("Virtual Host Device".into())
        }
        P::OL_DEVICE_INFO_UID => Value::Str("HOST".into()),
        P::OL_DEVICE_INFO_VENDOR => Value::Str("offload".into()),
        P::OL_DEVICE_INFO_DRIVER_VERSION => {
            Value::Str(format!("offload {}", env!("CARGO_PKG_VERSION")))
        }
        P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE => Value::U32(1),
        P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION => Value::Dims([1, 1, 1]),
        P::OL_DEVICE_INFO_MAX_WORK_SIZE => Value::U32(1),
        P::OL_DEVICE_INFO_MAX_WORK_SIZE_PER_DIMENSION => Value::Dims([1, 1, 1]),
        P::OL_DEVICE_INFO_NUM_COMPUTE_UNITS => Value::U32(1),
        P::OL_DEVICE_INFO_ADDRESS_BITS => Value::U32(usize::BITS),
        P::OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE
        | P::OL_DEVICE_INFO_GLOBAL_MEM_SIZE
        | P::OL_DEVICE_INFO_WORK_GROUP_LOCAL_MEM_SIZE => Value::U64(0),
        P::OL_DEVICE_INFO_SINGLE_FP_CONFIG | P::OL_DEVICE_INFO_DOUBLE_FP_CONFIG => {
            Value::U32(FP_ALL)
        }
        p if p.0 < P::OL_DEVICE_INFO_LAST.0 => Value::U32(0),
        _ => return Err(bad_enum()),
    })
}

pub(crate) fn platform(live: &Live, index: usize, prop: ol_platform_info_t) -> Res<Value> {
    use ol_platform_info_t as P;
    let plat = &live.platforms[index];
    Ok(match prop {
        P::OL_PLATFORM_INFO_NAME => Value::Str(plat.name.into()),
        P::OL_PLATFORM_INFO_VENDOR_NAME => Value::Str("offload".into()),
        P::OL_PLATFORM_INFO_VERSION => Value::Str(format!("offload {}", env!("CARGO_PKG_VERSION"))),
        P::OL_PLATFORM_INFO_BACKEND => Value::U32(plat.backend.0),
        _ => return Err(bad_enum()),
    })
}

pub(crate) fn bad_enum() -> Fail {
    Fail::Static(stat!(
        OL_ERRC_INVALID_ENUMERATION,
        "PropName names no property of liboffload 22"
    ))
}

/// Writes `value` to `PropValue` as the `olGet*Info` functions do.
///
/// # Safety
/// A non-null `out` must point to `size` writable bytes.
pub(crate) unsafe fn write(value: &Value, size: usize, out: *mut std::ffi::c_void) -> Res {
    let bytes = value.bytes();
    if out.is_null() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_NULL_POINTER,
            "PropValue is NULL"
        )));
    }
    if size == 0 || size < bytes.len() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_SIZE,
            "PropSize is less than the property's size (ask olGet*InfoSize)"
        )));
    }
    // SAFETY: `out` is non-null and the caller promises `size >= bytes.len()` writable
    // bytes there, which cannot overlap `bytes` (this library's own allocation).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len()) };
    Ok(())
}

/// Writes the size of `value` to `PropSizeRet`.
///
/// # Safety
/// A non-null `out` must point to a writable `size_t`.
pub(crate) unsafe fn write_size(value: &Value, out: *mut usize) -> Res {
    if out.is_null() {
        return Err(Fail::Static(stat!(
            OL_ERRC_INVALID_NULL_POINTER,
            "PropSizeRet is NULL"
        )));
    }
    // SAFETY: non-null; the caller promises a writable size_t.
    unsafe { out.write(value.bytes().len()) };
    Ok(())
}
