//! DLPack's C structures (dlpack.h: the 0.8 `dltensor` and the 1.x `dltensor_versioned`
//! capsules), its device types for offload's backends, and its data types for the
//! struct-module format characters buffers describe themselves with: what the producer
//! (`buffer`) and the consumer (`adopt`) share.

use std::ffi::c_void;

use offload::BackendKind;

/// DLPack's C structures (dlpack.h, version 0.8 layout, the `dltensor` capsule).
#[repr(C)]
pub(crate) struct DlDevice {
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
}

#[repr(C)]
pub(crate) struct DlDataType {
    pub(crate) code: u8,
    pub(crate) bits: u8,
    pub(crate) lanes: u16,
}

#[repr(C)]
pub(crate) struct DlTensor {
    pub(crate) data: *mut c_void,
    pub(crate) device: DlDevice,
    pub(crate) ndim: i32,
    pub(crate) dtype: DlDataType,
    pub(crate) shape: *mut i64,
    pub(crate) strides: *mut i64,
    pub(crate) byte_offset: u64,
}

#[repr(C)]
pub(crate) struct DlManagedTensor {
    pub(crate) dl_tensor: DlTensor,
    pub(crate) manager_ctx: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// DLPack 1.x's managed tensor (the `dltensor_versioned` capsule), which carries flags:
/// NumPy makes a writable array only from this one.
#[repr(C)]
pub(crate) struct DlManagedTensorVersioned {
    pub(crate) version: [u32; 2],
    pub(crate) manager_ctx: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    pub(crate) flags: u64,
    pub(crate) dl_tensor: DlTensor,
}

/// `DLManagedTensorVersioned::flags`: the memory must not be written.
pub(crate) const DL_FLAG_READ_ONLY: u64 = 1;
pub(crate) const DL_CPU: i32 = 1;
pub(crate) const DL_CUDA: i32 = 2;
pub(crate) const DL_ROCM: i32 = 10;
pub(crate) const DL_ONEAPI: i32 = 14;
pub(crate) const CAPSULE: &std::ffi::CStr = c"dltensor";
pub(crate) const CAPSULE_VERSIONED: &std::ffi::CStr = c"dltensor_versioned";

/// DLPack's type code and bits for a struct-module format character.
pub(crate) fn dl_type(format: &str, itemsize: usize) -> Option<DlDataType> {
    let code = match format.trim_start_matches(['@', '=', '<']) {
        "b" | "h" | "i" | "l" | "q" | "n" => 0,
        "B" | "H" | "I" | "L" | "Q" | "N" => 1,
        "e" | "f" | "d" => 2,
        "?" => 6,
        _ => return None,
    };
    Some(DlDataType {
        code,
        bits: (itemsize * 8) as u8,
        lanes: 1,
    })
}

/// DLPack's device type for memory of `backend`, where DLPack has one and offload can hand
/// the memory over (an address): CPU, CUDA, ROCm, oneAPI.
pub(crate) fn device_type(backend: BackendKind) -> Option<i32> {
    match backend {
        BackendKind::Host => Some(DL_CPU),
        BackendKind::Cuda => Some(DL_CUDA),
        BackendKind::Hip => Some(DL_ROCM),
        BackendKind::Ze => Some(DL_ONEAPI),
        _ => None,
    }
}

/// The struct-module format character and item size of a DLPack data type (one lane).
pub(crate) fn format_of(dtype: &DlDataType) -> Option<(char, usize)> {
    if dtype.lanes != 1 {
        return None;
    }
    let format = match (dtype.code, dtype.bits) {
        (0, 8) => 'b',
        (0, 16) => 'h',
        (0, 32) => 'i',
        (0, 64) => 'q',
        (1, 8) => 'B',
        (1, 16) => 'H',
        (1, 32) => 'I',
        (1, 64) => 'Q',
        (2, 16) => 'e',
        (2, 32) => 'f',
        (2, 64) => 'd',
        (6, 8) => '?',
        _ => return None,
    };
    Some((format, usize::from(dtype.bits) / 8))
}
