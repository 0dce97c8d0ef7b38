//! Programs, symbols and launches: `olCreateProgram`, `olDestroyProgram`,
//! `olIsValidBinary`, `olGetSymbol`, `olGetSymbolInfo`, `olLaunchKernel` and
//! `olCalculateOptimalOccupancy`, over offload's `Program`, `Module` and `Kernel`.
//!
//! # The packed arguments of a launch
//!
//! liboffload passes a kernel's arguments as one blob, laid out as a C struct of its
//! parameters would be: each at the next multiple of its alignment. offload knows each
//! kernel's parameters ([`ParamKind`]), so the blob is checked against them before the
//! kernel runs — where liboffload would run it with whatever the bytes say:
//!
//! | parameter | in the blob |
//! |---|---|
//! | a buffer (pointer) or uniform buffer | 8 bytes, aligned to 8: an address inside an `olMemAlloc` allocation of the launch's device (any offset in it) |
//! | a scalar of `n` bytes | `n` bytes, aligned to `n` |
//! | a vector, matrix, array or struct | its size, aligned to its element's size (4 where the elements differ) |
//!
//! `ArgumentsSize` must be the end of the last parameter, or that rounded up to the
//! largest alignment (C's `sizeof` of the struct). Anything else — a size that does not
//! fit, a pointer that is no allocation's, an allocation of another device — is
//! `OL_ERRC_INVALID_ARGUMENT` with details naming the kernel and the parameter.

use std::ffi::{CStr, c_char, c_void};
use std::sync::Arc;

use offload::{Arg, Device, Dims, ParamKind, Program};
use offload_handles::Taken;

use crate::abi::*;
use crate::info;
use crate::objects::{self, ProgramObj, SymbolObj};
use crate::result::{Fail, Res, stat};
use crate::state::{self, Alloc, DevKind, Live, device_index, fail, listed, state};

entry! {
    /// Whether a device could load a program image, without loading it (offload's
    /// `Device::validate`). liboffload's HOST endpoint loads nothing: always false.
    olIsValidBinary / olIsValidBinaryWithCodeLoc (Device: ol_device_handle_t, ProgData: *const c_void, ProgDataSize: usize, Valid: *mut bool) {
        state::with_state(|st| {
            let live = listed(st)?;
            let index = device_index(live, Device)?;
            if ProgData.is_null() || Valid.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olIsValidBinary: ProgData or Valid is NULL").into());
            }
            let valid = match &live.devices[index].kind {
                DevKind::Endpoint => false,
                DevKind::Offload(dev) => {
                    // SAFETY: the caller promises ProgDataSize readable bytes at ProgData.
                    let image = unsafe { std::slice::from_raw_parts(ProgData.cast::<u8>(), ProgDataSize) };
                    match dev.0.validate(image) {
                        Ok(()) => true,
                        Err(offload::Error::InvalidBinary { .. } | offload::Error::Unsupported { .. }) => false,
                        Err(e) => return Err(fail("olIsValidBinary", e)),
                    }
                }
            };
            // SAFETY: non-null (checked above); the caller promises a writable bool.
            unsafe { Valid.write(valid) };
            Ok(())
        })
    }
}

/// The offload device a handle names, with the generation's table epoch (under the
/// state's lock, let go on return).
fn offload_device(call: &'static str, device: ol_device_handle_t) -> Res<(Device, usize, u64)> {
    let mut st = state();
    let live = listed(&mut st)?;
    let index = device_index(live, device)?;
    match &live.devices[index].kind {
        DevKind::Offload(d) => Ok((d.0.clone(), index, objects::epoch())),
        DevKind::Endpoint => Err(Fail::Message(
            ol_errc_t::OL_ERRC_INVALID_DEVICE,
            format!(
                "{call}: the HOST platform's device is only a memcpy endpoint for host pointers (as in liboffload); use one of offload's devices"
            ),
        )),
    }
}

entry! {
    /// Loads a program image on a device (the image is copied: it need not outlive the
    /// call).
    olCreateProgram / olCreateProgramWithCodeLoc (Device: ol_device_handle_t, ProgData: *const c_void, ProgDataSize: usize, Program: *mut ol_program_handle_t) {
        let made = (|| {
            let (device, index, epoch) = offload_device("olCreateProgram", Device)?;
            if ProgData.is_null() || Program.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olCreateProgram: ProgData or Program is NULL").into());
            }
            // SAFETY: the caller promises ProgDataSize readable bytes at ProgData.
            let image = unsafe { std::slice::from_raw_parts(ProgData.cast::<u8>(), ProgDataSize) };
            // Loaded without the state's lock (a compile can take a while).
            let module = Program::new(image)
                .load(&device)
                .map_err(|e| fail("olCreateProgram", e))?;
            let program = ProgramObj { module, device: index, symbols: Default::default() };
            *objects::symbols(&program) = Some(Vec::new());
            let handle = objects::insert_at(epoch, program)?;
            // SAFETY: non-null (checked above); the caller promises a writable handle.
            unsafe { Program.write(objects::as_handle(handle)) };
            Ok(())
        })();
        state::finish(made)
    }
}

entry! {
    /// Destroys a program and its symbols.
    olDestroyProgram / olDestroyProgramWithCodeLoc (Program: ol_program_handle_t) {
        let done = objects::take::<ProgramObj>(Program).and_then(|taken| {
            let module = match taken {
                Taken::Owned(p) => {
                    drop_symbols(&p);
                    p.module
                }
                // Unloaded now; the call of another thread that still holds the program
                // finds it unloaded.
                Taken::InUse(p) => {
                    drop_symbols(&p);
                    p.module.clone()
                }
            };
            module.unload().map_err(|e| fail("olDestroyProgram", e))
        });
        state::finish(done)
    }
}

/// Takes a destroyed program's symbols out of the table (no symbol is added after this).
fn drop_symbols(program: &ProgramObj) {
    let symbols = objects::symbols(program).take();
    for (_, _, handle) in symbols.into_iter().flatten() {
        objects::take_symbol(handle);
    }
}

entry! {
    /// A kernel or global variable of a program, by name; the same handle for the same
    /// symbol (symbols belong to their program).
    olGetSymbol / olGetSymbolWithCodeLoc (Program: ol_program_handle_t, Name: *const c_char, Kind: ol_symbol_kind_t, Symbol: *mut ol_symbol_handle_t) {
        let found = objects::get::<ProgramObj>(Program).and_then(|p| {
            if Name.is_null() || Symbol.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olGetSymbol: Name or Symbol is NULL").into());
            }
            // SAFETY: non-null; the caller promises a NUL-terminated string.
            let name = unsafe { CStr::from_ptr(Name) }.to_string_lossy();
            let mut symbols = objects::symbols(&p);
            let Some(symbols) = symbols.as_mut() else {
                return Err(<ProgramObj as objects::Held>::DESTROYED.into());
            };
            if let Some((_, _, handle)) = symbols.iter().find(|(n, k, _)| *n == name && *k == Kind) {
                // SAFETY: non-null (checked above); the caller promises a writable handle.
                unsafe { Symbol.write(objects::as_handle(*handle)) };
                return Ok(());
            }
            let symbol = match Kind {
                ol_symbol_kind_t::OL_SYMBOL_KIND_KERNEL => SymbolObj::Kernel {
                    kernel: p.module.kernel(&name).map_err(|e| fail("olGetSymbol", e))?,
                    device: p.device,
                },
                ol_symbol_kind_t::OL_SYMBOL_KIND_GLOBAL_VARIABLE => {
                    SymbolObj::Global(p.module.global(&name).map_err(|e| fail("olGetSymbol", e))?)
                }
                _ => return Err(stat!(OL_ERRC_INVALID_ENUMERATION, "olGetSymbol: Kind names no ol_symbol_kind_t").into()),
            };
            let handle = objects::insert_from::<ProgramObj, _>(Program.addr() as u64, symbol)?;
            symbols.push((name.into_owned(), Kind, handle));
            // SAFETY: non-null (checked above); the caller promises a writable handle.
            unsafe { Symbol.write(objects::as_handle(handle)) };
            Ok(())
        });
        state::finish(found)
    }
}

fn symbol_value(symbol: ol_symbol_handle_t, prop: ol_symbol_info_t) -> Res<info::Value> {
    let s = objects::get::<SymbolObj>(symbol)?;
    let not_global = || -> Fail {
        stat!(
            OL_ERRC_SYMBOL_KIND,
            "the symbol is a kernel: only a global variable has an address and a size"
        )
        .into()
    };
    Ok(match (prop, &*s) {
        (ol_symbol_info_t::OL_SYMBOL_INFO_KIND, SymbolObj::Kernel { .. }) => {
            info::Value::U32(ol_symbol_kind_t::OL_SYMBOL_KIND_KERNEL.0)
        }
        (ol_symbol_info_t::OL_SYMBOL_INFO_KIND, SymbolObj::Global(_)) => {
            info::Value::U32(ol_symbol_kind_t::OL_SYMBOL_KIND_GLOBAL_VARIABLE.0)
        }
        (ol_symbol_info_t::OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, SymbolObj::Global(g)) => {
            info::Value::Word(g.address as usize)
        }
        (ol_symbol_info_t::OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, SymbolObj::Global(g)) => {
            info::Value::Word(g.size)
        }
        (
            ol_symbol_info_t::OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS
            | ol_symbol_info_t::OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE,
            SymbolObj::Kernel { .. },
        ) => return Err(not_global()),
        _ => return Err(info::bad_enum()),
    })
}

info_query!("symbol", olGetSymbolInfo / olGetSymbolInfoWithCodeLoc, olGetSymbolInfoSize / olGetSymbolInfoSizeWithCodeLoc, Symbol: ol_symbol_handle_t, ol_symbol_info_t, symbol_value);

/// A parameter's size and alignment in the packed blob (the module's table).
fn packed(param: &ParamKind) -> (usize, usize) {
    match *param {
        ParamKind::Buffer | ParamKind::Uniform => (8, 8),
        ParamKind::Scalar(n) => (n, n.clamp(1, 8).next_power_of_two().min(8)),
        ParamKind::Typed(t) => (t.size(), t.size()),
        ParamKind::Pod { size, elem, .. } => (size, elem.map_or(4, |e| e.size())),
    }
}

/// Where each parameter starts in the blob, its end, and the struct's padded size.
fn layout(params: &[ParamKind]) -> (Vec<usize>, usize, usize) {
    let (mut at, mut end, mut widest) = (Vec::with_capacity(params.len()), 0usize, 1usize);
    for p in params {
        let (size, align) = packed(p);
        let start = end.next_multiple_of(align);
        at.push(start);
        end = start + size;
        widest = widest.max(align);
    }
    (at, end, end.next_multiple_of(widest))
}

/// What one parameter's bytes say, before the launch borrows from it.
enum Packed<'a> {
    Memory {
        alloc: Arc<Alloc>,
        offset: usize,
        uniform: bool,
    },
    Scalar([u8; 8], offload::ScalarType),
    Bytes(&'a [u8]),
}

/// Reads the blob against the kernel's parameters, under the state's lock (for the
/// allocations).
fn unpack<'a>(
    live: &Live,
    kernel: &offload::Kernel,
    device: usize,
    blob: &'a [u8],
) -> Res<Vec<Packed<'a>>> {
    let params = kernel.params();
    let (at, end, padded) = layout(params);
    let name = kernel.name();
    if blob.len() != end && blob.len() != padded {
        let kinds: Vec<String> = params
            .iter()
            .zip(&at)
            .map(|(p, a)| format!("{p} at byte {a}"))
            .collect();
        return Err(Fail::Message(
            ol_errc_t::OL_ERRC_INVALID_ARGUMENT,
            format!(
                "olLaunchKernel: `{name}` takes {} parameter(s) ({}), {end} bytes packed ({padded} with C's padding); ArgumentsSize is {}",
                params.len(),
                if kinds.is_empty() {
                    "none".to_string()
                } else {
                    kinds.join(", ")
                },
                blob.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(params.len());
    for (nth, (p, &start)) in params.iter().zip(&at).enumerate() {
        let (size, _) = packed(p);
        let bytes = &blob[start..start + size];
        out.push(match *p {
            ParamKind::Buffer | ParamKind::Uniform => {
                let mut word = [0u8; 8];
                word.copy_from_slice(bytes);
                let addr = u64::from_ne_bytes(word) as usize;
                let Some((offset, alloc)) = live.alloc_at(addr) else {
                    return Err(Fail::Message(
                        ol_errc_t::OL_ERRC_INVALID_ARGUMENT,
                        format!("olLaunchKernel: argument {nth} of `{name}` is a buffer; {addr:#x} is not inside an allocation olMemAlloc made in this generation"),
                    ));
                };
                if alloc.device != device {
                    return Err(Fail::Message(
                        ol_errc_t::OL_ERRC_INVALID_ARGUMENT,
                        format!("olLaunchKernel: argument {nth} of `{name}` ({addr:#x}) is memory of another device than the launch's"),
                    ));
                }
                Packed::Memory { alloc: alloc.clone(), offset, uniform: matches!(p, ParamKind::Uniform) }
            }
            ParamKind::Typed(ty) => {
                let mut word = [0u8; 8];
                word[..size].copy_from_slice(bytes);
                Packed::Scalar(word, ty)
            }
            _ => Packed::Bytes(bytes),
        });
    }
    Ok(out)
}

/// The launch's `Arg`s, borrowing the held allocations.
fn args<'a>(packed: &'a [Packed<'a>]) -> Vec<Arg<'a>> {
    packed
        .iter()
        .map(|p| match p {
            Packed::Memory {
                alloc,
                offset,
                uniform: false,
            } => Arg::range(&alloc.buffer, *offset, alloc.size - offset),
            Packed::Memory {
                alloc,
                offset,
                uniform: true,
            } => Arg::Uniform {
                buffer: &alloc.buffer,
                range: Some((*offset, alloc.size - offset)),
            },
            Packed::Scalar(bytes, ty) => Arg::Scalar {
                bytes: *bytes,
                ty: *ty,
            },
            Packed::Bytes(bytes) => Arg::Pod {
                bytes,
                type_name: "a C value",
                elem: None,
            },
        })
        .collect()
}

/// liboffload's launch size as offload's `Dims`.
fn dims(size: &ol_kernel_launch_size_args_t) -> Res<Dims> {
    if !(1..=3).contains(&size.Dimensions) {
        return Err(Fail::Message(
            ol_errc_t::OL_ERRC_INVALID_ARGUMENT,
            format!(
                "olLaunchKernel: LaunchSizeArgs->Dimensions is {}; it must be 1, 2 or 3",
                size.Dimensions
            ),
        ));
    }
    let used = |v: [u32; 3]| [0, 1, 2].map(|i| if i < size.Dimensions { v[i] } else { 1 });
    let shared_memory = u32::try_from(size.DynSharedMemory).map_err(|_| {
        Fail::from(stat!(
            OL_ERRC_INVALID_SIZE,
            "olLaunchKernel: DynSharedMemory does not fit in 32 bits"
        ))
    })?;
    Ok(
        Dims::grid(used([size.NumGroups.x, size.NumGroups.y, size.NumGroups.z]))
            .block(used([size.GroupSize.x, size.GroupSize.y, size.GroupSize.z]))
            .shared_memory(shared_memory),
    )
}

entry! {
    /// Launches a kernel: enqueued on `Queue`, or run to completion without one. The
    /// packed arguments are checked against the kernel's parameters first (see the
    /// module's table).
    olLaunchKernel / olLaunchKernelWithCodeLoc (Queue: ol_queue_handle_t, Device: ol_device_handle_t, Kernel: ol_symbol_handle_t, ArgumentsData: *const c_void, ArgumentsSize: usize, LaunchSizeArgs: *const ol_kernel_launch_size_args_t) {
        state::finish(launch(Queue, Device, Kernel, ArgumentsData, ArgumentsSize, LaunchSizeArgs))
    }
}

fn launch(
    queue: ol_queue_handle_t,
    device: ol_device_handle_t,
    kernel: ol_symbol_handle_t,
    data: *const c_void,
    size: usize,
    launch_size: *const ol_kernel_launch_size_args_t,
) -> Res {
    if device.is_null() {
        return Err(stat!(
            OL_ERRC_INVALID_NULL_HANDLE,
            "olLaunchKernel: Device is NULL"
        )
        .into());
    }
    let symbol = objects::get::<SymbolObj>(kernel)?;
    let SymbolObj::Kernel {
        kernel,
        device: kernel_device,
    } = &*symbol
    else {
        return Err(stat!(
            OL_ERRC_SYMBOL_KIND,
            "olLaunchKernel: the symbol is a global variable, not a kernel"
        )
        .into());
    };
    if launch_size.is_null() {
        return Err(stat!(
            OL_ERRC_INVALID_NULL_POINTER,
            "olLaunchKernel: LaunchSizeArgs is NULL"
        )
        .into());
    }
    if size > 0 && data.is_null() {
        return Err(stat!(
            OL_ERRC_INVALID_ARGUMENT,
            "olLaunchKernel: ArgumentsSize > 0 and ArgumentsData is NULL"
        )
        .into());
    }
    // SAFETY: non-null (checked above); the caller promises a valid struct.
    let dims = dims(unsafe { &*launch_size })?;
    let queue = objects::optional_queue(queue)?;
    let blob: &[u8] = match size {
        0 => &[],
        // SAFETY: the caller promises ArgumentsSize readable bytes at ArgumentsData.
        _ => unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) },
    };
    let (packed, temporary) = {
        let mut st = state();
        let live = listed(&mut st)?;
        let index = device_index(live, device)?;
        if index != *kernel_device {
            return Err(stat!(
                OL_ERRC_INVALID_DEVICE,
                "olLaunchKernel: the kernel's program was created for another device than Device"
            )
            .into());
        }
        if queue.as_ref().is_some_and(|q| q.device != index) {
            return Err(stat!(
                OL_ERRC_INVALID_DEVICE,
                "olLaunchKernel: Queue does not belong to Device"
            )
            .into());
        }
        let temporary = match (&queue, &live.devices[index].kind) {
            (None, DevKind::Offload(d)) => Some(d.0.clone()),
            _ => None,
        };
        (unpack(live, kernel, index, blob)?, temporary)
    };
    let args = args(&packed);
    let run = |q: &offload::Queue| {
        // SAFETY: liboffload's contract: the caller of olLaunchKernel vouches for the kernel
        // it launches (liboffload 22 runs any image it loaded). offload's own checks of the
        // arguments against the kernel's parameters, and of every buffer range, run first.
        unsafe { q.launch(kernel, dims, &args) }
    };
    let done = match (&queue, temporary) {
        (Some(q), _) => run(&q.queue),
        // No queue: run to completion, on a queue of its own.
        (None, Some(device)) => device.queue().and_then(|q| {
            let q = q.for_caller(offload::Caller::Liboffload);
            run(&q)?;
            q.sync()
        }),
        (None, None) => {
            return Err(stat!(
                OL_ERRC_INVALID_DEVICE,
                "olLaunchKernel: the HOST platform's device runs no kernels"
            )
            .into());
        }
    };
    done.map_err(|e| fail("olLaunchKernel", e))
}

entry! {
    /// The largest work-group size of the kernel on the device: the one it declares, else
    /// the device's largest block.
    olCalculateOptimalOccupancy / olCalculateOptimalOccupancyWithCodeLoc (Device: ol_device_handle_t, Kernel: ol_symbol_handle_t, SharedMemory: usize, GroupSize: *mut usize) {
        let _ = SharedMemory;
        let found = (|| {
            if Device.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_HANDLE, "olCalculateOptimalOccupancy: Device is NULL").into());
            }
            let symbol = objects::get::<SymbolObj>(Kernel)?;
            let SymbolObj::Kernel { kernel, device } = &*symbol else {
                return Err(stat!(OL_ERRC_SYMBOL_KIND, "olCalculateOptimalOccupancy: the symbol is a global variable, not a kernel").into());
            };
            if GroupSize.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olCalculateOptimalOccupancy: GroupSize is NULL").into());
            }
            let largest = {
                let mut st = state();
                let live = listed(&mut st)?;
                if device_index(live, Device)? != *device {
                    return Err(stat!(OL_ERRC_INVALID_DEVICE, "olCalculateOptimalOccupancy: the kernel's program was created for another device than Device").into());
                }
                match &live.devices[*device].kind {
                    DevKind::Offload(d) => d.1.max_block_threads,
                    DevKind::Endpoint => None,
                }
            };
            let size = match kernel.workgroup_size() {
                Some([x, y, z]) => x as usize * y as usize * z as usize,
                None => largest.map_or(1, |n| n as usize),
            };
            // SAFETY: non-null (checked above); the caller promises a writable size_t.
            unsafe { GroupSize.write(size) };
            Ok(())
        })();
        state::finish(found)
    }
}
