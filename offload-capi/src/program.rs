//! Programs, modules and kernels: programs from images (P1) and from source, setup and
//! teardown callbacks (P3, C function + user data), loading (P2), kernel lookup and
//! parameter introspection, and launches checked against the declared parameters (P4).

use std::ffi::{c_char, c_void};

use offload::{
    Arg, Buffer, CallbackError, Device, Dims, Error, Kernel, Language, Module, ParamKind, Program,
    ScalarType, Source,
};

use crate::ffi::{bytes, copy_text, out, text};
use crate::memory::offload_buffer_t;
use crate::queue::{UserData, offload_queue_t};
use crate::runtime::offload_device_t;
use crate::status::{Fail, Res, guard, offload_status_t};
use crate::table;

/// A program as the handle table holds it: callbacks are added in place, so its handle
/// stays the same while loads use the program as it was when they began.
pub(crate) struct ProgramCell(std::sync::Mutex<Program>);

impl table::Held for ProgramCell {
    const KIND: table::Kind = table::Kind::Program;
}

impl ProgramCell {
    pub(crate) fn new(program: Program) -> Self {
        ProgramCell(std::sync::Mutex::new(program))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Program> {
        // Nothing panics under the lock; stay usable if something ever did.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The program as it is now (a cheap clone), to use without the lock.
    fn current(&self) -> Program {
        self.lock().clone()
    }
}

/// A device-independent program: an image or source, and its callbacks.
#[allow(non_camel_case_types)]
pub type offload_program_t = u64;
/// A program loaded on one device.
#[allow(non_camel_case_types)]
pub type offload_module_t = u64;
/// A kernel of a module.
#[allow(non_camel_case_types)]
pub type offload_kernel_t = u64;

/// A setup or teardown callback: gets the module (a handle valid during the call only)
/// and its `user_data`; returns 0 for success, anything else for failure
/// (`OFFLOAD_ERROR_CALLBACK` from the load, unload or shutdown that ran it, P3).
#[allow(non_camel_case_types)]
pub type offload_module_callback_t =
    Option<unsafe extern "C" fn(module: offload_module_t, user_data: *mut c_void) -> i32>;

/// The language of a program's source.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum offload_language_t {
    /// C for the host backend, compiled by the system C compiler (`$CC` or `cc`).
    OFFLOAD_LANGUAGE_C = 0,
    /// WGSL for Vulkan, compiled in process by naga.
    OFFLOAD_LANGUAGE_WGSL = 1,
    /// CUDA C++, compiled by NVRTC.
    OFFLOAD_LANGUAGE_CUDA = 2,
}

/// Makes a program from an image (ELF for the host, SPIR-V, PTX, …); the bytes are copied
/// (P1). Nothing is checked until it is loaded (`OFFLOAD_ERROR_INVALID_BINARY`, P4).
///
/// # Safety
/// `image` must point to `len` readable bytes; `program` to a writable handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_program_from_image(
    image: *const u8,
    len: usize,
    program: *mut offload_program_t,
) -> offload_status_t {
    const CALL: &str = "offload_program_from_image";
    guard(CALL, || {
        let o = out(CALL, "program", program)?;
        // SAFETY: the caller promises `len` readable bytes; `Program::new` copies them.
        let image = unsafe { bytes(CALL, "image", image, len) }?;
        if image.is_empty() {
            return Err(Fail::from(Error::invalid(CALL, "the image is empty")));
        }
        o.set(table::insert_now(ProgramCell::new(Program::new(image)))?);
        Ok(())
    })
}

/// Makes a program from source text (NUL-terminated) in `language` (an
/// `offload_language_t`); it is compiled when first loaded, and cached on disk.
///
/// # Safety
/// `source` must point to a NUL-terminated string; `program` to a writable handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_program_from_source(
    language: u32,
    source: *const c_char,
    program: *mut offload_program_t,
) -> offload_status_t {
    const CALL: &str = "offload_program_from_source";
    guard(CALL, || {
        let o = out(CALL, "program", program)?;
        // SAFETY: the caller promises a NUL-terminated string.
        let text = unsafe { text(CALL, "source", source) }?;
        let language = match language {
            0 => Language::C,
            1 => Language::Wgsl,
            2 => Language::Cuda,
            n => {
                return Err(Fail::from(Error::invalid(
                    CALL,
                    format!("{n} is no offload_language_t"),
                )));
            }
        };
        o.set(table::insert_now(ProgramCell::new(Program::from_source(
            Source::new(language, text),
        )))?);
        Ok(())
    })
}

/// Runs a C callback for `module`, lending it a module handle for the call.
fn call_back(
    f: unsafe extern "C" fn(offload_module_t, *mut c_void) -> i32,
    user: UserData,
    module: &Module,
) -> Result<(), CallbackError> {
    let handle = table::insert_now(module.clone()).map_err(|_| "no room for a module handle")?;
    // SAFETY: the caller of `offload_program_on_setup`/`_on_teardown` promised `f` may be
    // called with `user_data` from any thread while the program lives.
    let code = unsafe { f(handle, user.0) };
    // The callback may have released the handle itself; either way it is gone now.
    let _ = table::remove::<Module>("callback", handle);
    if code == 0 {
        Ok(())
    } else {
        Err(format!("the C callback returned {code}").into())
    }
}

fn add_callback(
    call: &'static str,
    program: offload_program_t,
    f: offload_module_callback_t,
    user_data: *mut c_void,
    setup: bool,
) -> offload_status_t {
    guard(call, || {
        let Some(f) = f else {
            return Err(Fail::from(Error::invalid(call, "`f` is a null pointer")));
        };
        let user = UserData(user_data);
        let cell = table::get::<ProgramCell>(call, program)?;
        let with = move |m: &Module| call_back(f, user, m);
        let mut p = cell.lock();
        let now = if setup {
            p.clone().on_setup(with)
        } else {
            p.clone().on_teardown(with)
        };
        let before = std::mem::replace(&mut *p, now);
        drop(p);
        // Dropped outside the lock: a drop may unload modules and run user code (L6).
        drop(before);
        Ok(())
    })
}

/// Adds a callback that runs exactly once per module, after the load and before any of its
/// kernels can launch (P3); a failure unloads the module and fails the load with
/// `OFFLOAD_ERROR_CALLBACK`. Add callbacks before the first load.
///
/// # Safety
/// `f` must be safe to call with `user_data` from any thread while the program lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_program_on_setup(
    program: offload_program_t,
    f: offload_module_callback_t,
    user_data: *mut c_void,
) -> offload_status_t {
    add_callback("offload_program_on_setup", program, f, user_data, true)
}

/// Adds a callback that runs exactly once before each module is unloaded: by
/// `offload_module_unload`, by `offload_program_destroy` or by the last shutdown (P3).
///
/// # Safety
/// `f` must be safe to call with `user_data` from any thread while the program lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_program_on_teardown(
    program: offload_program_t,
    f: offload_module_callback_t,
    user_data: *mut c_void,
) -> offload_status_t {
    add_callback("offload_program_on_teardown", program, f, user_data, false)
}

/// Loads the program on `device` (liboffload's `olCreateProgram`): once per (program,
/// device), every caller getting the same module (P2); compiles source the first time.
/// Corrupt or foreign images are `OFFLOAD_ERROR_INVALID_BINARY`, source that does not
/// compile `OFFLOAD_ERROR_COMPILE` (P4).
///
/// # Safety
/// `module` must point to a writable handle (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_program_load(
    program: offload_program_t,
    device: offload_device_t,
    module: *mut offload_module_t,
) -> offload_status_t {
    const CALL: &str = "offload_program_load";
    guard(CALL, || {
        let o = out(CALL, "module", module)?;
        let p = table::get::<ProgramCell>(CALL, program)?.current();
        let d = table::get::<Device>(CALL, device)?;
        let m = p.load(&d)?;
        o.set(table::insert(CALL, table::epoch_of(device), m)?);
        Ok(())
    })
}

/// Gives back a program handle (liboffload's `olDestroyProgram`); its modules are
/// unloaded (teardown run) once no module handle of theirs is left either (P2).
#[unsafe(no_mangle)]
pub extern "C" fn offload_program_destroy(program: offload_program_t) -> offload_status_t {
    const CALL: &str = "offload_program_destroy";
    guard(CALL, || {
        drop(table::remove::<ProgramCell>(CALL, program)?);
        Ok(())
    })
}

/// Unloads the module now, running its teardown (P2, P3), and gives back its handle.
/// `OFFLOAD_ERROR_CALLBACK` when the teardown failed (the module is unloaded anyway).
#[unsafe(no_mangle)]
pub extern "C" fn offload_module_unload(module: offload_module_t) -> offload_status_t {
    const CALL: &str = "offload_module_unload";
    guard(CALL, || {
        let m = table::remove::<Module>(CALL, module)?;
        match m {
            table::Removed::Owned(m) => m.unload()?,
            table::Removed::InUse(shared) => (*shared).clone().unload()?,
        }
        Ok(())
    })
}

/// Gives back a module handle; the module stays loaded while its program lives (P2).
#[unsafe(no_mangle)]
pub extern "C" fn offload_module_release(module: offload_module_t) -> offload_status_t {
    const CALL: &str = "offload_module_release";
    guard(CALL, || {
        drop(table::remove::<Module>(CALL, module)?);
        Ok(())
    })
}

/// How many kernels the module has.
///
/// # Safety
/// `count` must point to a writable `size_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_module_kernel_count(
    module: offload_module_t,
    count: *mut usize,
) -> offload_status_t {
    const CALL: &str = "offload_module_kernel_count";
    guard(CALL, || {
        let o = out(CALL, "count", count)?;
        o.set(table::get::<Module>(CALL, module)?.kernels()?.len());
        Ok(())
    })
}

/// The name of kernel `index` of the module, copied into `buf` (`cap` bytes, NUL
/// included); `needed` (may be null) gets the bytes needed. `buf` null with `cap` 0 asks
/// for the size only.
///
/// # Safety
/// `buf` must point to `cap` writable bytes (or be null with `cap` 0); `needed` null or a
/// writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_module_kernel_name(
    module: offload_module_t,
    index: usize,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> offload_status_t {
    const CALL: &str = "offload_module_kernel_name";
    guard(CALL, || {
        let all = table::get::<Module>(CALL, module)?.kernels()?;
        let Some(name) = all.get(index) else {
            return Err(Fail::from(Error::invalid(
                CALL,
                format!("kernel {index} of {}: there is none", all.len()),
            )));
        };
        // SAFETY: as this function's caller promises.
        unsafe { copy_text(CALL, name, buf, cap, needed) }
    })
}

/// The kernel `name` of the module (liboffload's `olGetSymbol`);
/// `OFFLOAD_ERROR_SYMBOL_NOT_FOUND` lists the kernels it has (P4).
///
/// # Safety
/// `name` must point to a NUL-terminated string; `kernel` to a writable handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_module_kernel(
    module: offload_module_t,
    name: *const c_char,
    kernel: *mut offload_kernel_t,
) -> offload_status_t {
    const CALL: &str = "offload_module_kernel";
    guard(CALL, || {
        let o = out(CALL, "kernel", kernel)?;
        // SAFETY: the caller promises a NUL-terminated string.
        let name = unsafe { text(CALL, "name", name) }?;
        let k = table::get::<Module>(CALL, module)?.kernel(name)?;
        o.set(table::insert(CALL, table::epoch_of(module), k)?);
        Ok(())
    })
}

/// Gives back a kernel handle.
#[unsafe(no_mangle)]
pub extern "C" fn offload_kernel_release(kernel: offload_kernel_t) -> offload_status_t {
    const CALL: &str = "offload_kernel_release";
    guard(CALL, || {
        drop(table::remove::<Kernel>(CALL, kernel)?);
        Ok(())
    })
}

/// What a kernel parameter takes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum offload_param_kind_t {
    /// A buffer: pass a pointer to its `offload_buffer_t`, size `sizeof(offload_buffer_t)`.
    OFFLOAD_PARAM_BUFFER = 0,
    /// A scalar known by its size only.
    OFFLOAD_PARAM_SCALAR = 1,
    /// A scalar of a declared type (`scalar` says which).
    OFFLOAD_PARAM_TYPED = 2,
    /// A composite passed by its bytes (vector, matrix, array, struct).
    OFFLOAD_PARAM_POD = 3,
    /// A uniform buffer: pass a pointer to its `offload_buffer_t`.
    OFFLOAD_PARAM_UNIFORM = 4,
}

/// A scalar type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum offload_scalar_t {
    /// No (single) scalar type.
    OFFLOAD_SCALAR_NONE = 0,
    /// `uint8_t`
    OFFLOAD_SCALAR_U8 = 1,
    /// `int8_t`
    OFFLOAD_SCALAR_I8 = 2,
    /// `uint16_t`
    OFFLOAD_SCALAR_U16 = 3,
    /// `int16_t`
    OFFLOAD_SCALAR_I16 = 4,
    /// `uint32_t`
    OFFLOAD_SCALAR_U32 = 5,
    /// `int32_t`
    OFFLOAD_SCALAR_I32 = 6,
    /// `float`
    OFFLOAD_SCALAR_F32 = 7,
    /// `uint64_t`
    OFFLOAD_SCALAR_U64 = 8,
    /// `int64_t`
    OFFLOAD_SCALAR_I64 = 9,
    /// `double`
    OFFLOAD_SCALAR_F64 = 10,
}

fn scalar_of(t: Option<ScalarType>) -> offload_scalar_t {
    use offload_scalar_t::*;
    match t {
        Some(ScalarType::U8) => OFFLOAD_SCALAR_U8,
        Some(ScalarType::I8) => OFFLOAD_SCALAR_I8,
        Some(ScalarType::U16) => OFFLOAD_SCALAR_U16,
        Some(ScalarType::I16) => OFFLOAD_SCALAR_I16,
        Some(ScalarType::U32) => OFFLOAD_SCALAR_U32,
        Some(ScalarType::I32) => OFFLOAD_SCALAR_I32,
        Some(ScalarType::F32) => OFFLOAD_SCALAR_F32,
        Some(ScalarType::U64) => OFFLOAD_SCALAR_U64,
        Some(ScalarType::I64) => OFFLOAD_SCALAR_I64,
        Some(ScalarType::F64) => OFFLOAD_SCALAR_F64,
        _ => OFFLOAD_SCALAR_NONE,
    }
}

/// One declared parameter of a kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct offload_param_t {
    /// What it takes.
    pub kind: offload_param_kind_t,
    /// Its scalar type (a typed scalar), or its elements' (a composite), where declared.
    pub scalar: offload_scalar_t,
    /// The bytes an argument for it must have: the value's size, or
    /// `sizeof(offload_buffer_t)` for a buffer.
    pub size: usize,
}

/// The kernel's parameter count, for `offload_kernel_param`.
///
/// # Safety
/// `count` must point to a writable `size_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_kernel_param_count(
    kernel: offload_kernel_t,
    count: *mut usize,
) -> offload_status_t {
    const CALL: &str = "offload_kernel_param_count";
    guard(CALL, || {
        let o = out(CALL, "count", count)?;
        o.set(table::get::<Kernel>(CALL, kernel)?.params().len());
        Ok(())
    })
}

/// What parameter `index` (from 0) of the kernel takes.
///
/// # Safety
/// `param` must point to a writable `offload_param_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_kernel_param(
    kernel: offload_kernel_t,
    index: usize,
    param: *mut offload_param_t,
) -> offload_status_t {
    const CALL: &str = "offload_kernel_param";
    guard(CALL, || {
        let o = out(CALL, "param", param)?;
        let k = table::get::<Kernel>(CALL, kernel)?;
        let Some(p) = k.params().get(index) else {
            return Err(Fail::from(Error::invalid(
                CALL,
                format!(
                    "`{}` has {} parameters; there is no parameter {index}",
                    k.name(),
                    k.params().len()
                ),
            )));
        };
        let handle = size_of::<offload_buffer_t>();
        o.set(match *p {
            ParamKind::Buffer => param_t(offload_param_kind_t::OFFLOAD_PARAM_BUFFER, None, handle),
            ParamKind::Uniform => {
                param_t(offload_param_kind_t::OFFLOAD_PARAM_UNIFORM, None, handle)
            }
            ParamKind::Scalar(n) => param_t(offload_param_kind_t::OFFLOAD_PARAM_SCALAR, None, n),
            ParamKind::Typed(t) => {
                param_t(offload_param_kind_t::OFFLOAD_PARAM_TYPED, Some(t), t.size())
            }
            ParamKind::Pod { size, elem, .. } => {
                param_t(offload_param_kind_t::OFFLOAD_PARAM_POD, elem, size)
            }
        });
        Ok(())
    })
}

fn param_t(kind: offload_param_kind_t, scalar: Option<ScalarType>, size: usize) -> offload_param_t {
    offload_param_t {
        kind,
        scalar: scalar_of(scalar),
        size,
    }
}

/// The launch geometry: `grid` blocks of `block` threads, `shared_memory` bytes of dynamic
/// shared memory per block.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct offload_dims_t {
    /// Blocks in each dimension.
    pub grid: [u32; 3],
    /// Threads per block in each dimension.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory: u32,
}

/// The runtime's `Arg` for C argument `i` (`data`, `size` bytes) of a parameter `param`.
fn arg_for<'a>(
    call: &'static str,
    kernel: &Kernel,
    nth: usize,
    param: &ParamKind,
    data: &'a [u8],
    buffers: &'a [table::Pinned<Buffer>],
    next_buffer: &mut usize,
) -> Res<Arg<'a>> {
    match *param {
        ParamKind::Buffer | ParamKind::Uniform => {
            let b = &buffers[*next_buffer];
            *next_buffer += 1;
            Ok(if matches!(param, ParamKind::Uniform) {
                Arg::Uniform {
                    buffer: b,
                    range: None,
                }
            } else {
                Arg::Buffer(b)
            })
        }
        ParamKind::Typed(ty) if data.len() == ty.size() => {
            let mut bytes = [0u8; 8];
            bytes[..data.len()].copy_from_slice(data);
            Ok(Arg::Scalar { bytes, ty })
        }
        _ => {
            let want = param.scalar_size().unwrap_or(0);
            if data.len() != want {
                return Err(Fail::from(Error::invalid(
                    call,
                    format!(
                        "argument {nth} of `{}` is {param} ({want} bytes); got {} bytes",
                        kernel.name(),
                        data.len()
                    ),
                )));
            }
            Ok(Arg::Pod {
                bytes: data,
                type_name: "a C value",
                elem: None,
            })
        }
    }
}

/// Launches `kernel` on `queue` over `dims` (liboffload's `olLaunchKernel`); returns once
/// enqueued (Q1). Argument `i` is the `sizes[i]` bytes at `args[i]`: a buffer parameter
/// takes a pointer to its `offload_buffer_t` (`sizes[i] == sizeof(offload_buffer_t)`), a
/// by-value one the value's bytes. Count, kinds and sizes are checked against what the
/// kernel declares before it runs (`OFFLOAD_ERROR_INVALID_ARGUMENT` naming the argument,
/// P4); C has no types, so a typed scalar is checked by its size.
///
/// # Safety
/// `args` and `sizes` must point to `count` entries each (or be null with `count` 0), and
/// `args[i]` to `sizes[i]` readable bytes. Running the kernel with these arguments must be
/// sound: it touches only memory its buffers hold (as Rust's `unsafe fn launch`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_launch(
    queue: offload_queue_t,
    kernel: offload_kernel_t,
    dims: *const offload_dims_t,
    args: *const *const c_void,
    sizes: *const usize,
    count: usize,
) -> offload_status_t {
    const CALL: &str = "offload_queue_launch";
    guard(CALL, || {
        // SAFETY: null or a readable offload_dims_t, as the caller promises.
        let Some(dims) = (unsafe { dims.as_ref() }) else {
            return Err(Fail::from(Error::invalid(CALL, "`dims` is a null pointer")));
        };
        if count != 0 && (args.is_null() || sizes.is_null()) {
            return Err(Fail::from(Error::invalid(
                CALL,
                format!("`args` or `sizes` is a null pointer with {count} arguments"),
            )));
        }
        let q = table::get::<offload::Queue>(CALL, queue)?;
        let k = table::get::<Kernel>(CALL, kernel)?;
        // Before the arguments are read by the parameters; its fix is in C's words.
        k.check_arg_count(offload::Caller::C, CALL, count)?;
        let params = k.params();
        let mut data: Vec<&[u8]> = Vec::with_capacity(count);
        let mut buffers = Vec::new();
        for (i, param) in params.iter().enumerate() {
            // SAFETY: the caller promises `count` entries at `args` and `sizes`, i < count,
            // and `sizes[i]` readable bytes at `args[i]`.
            let (ptr, size) = unsafe { (*args.add(i), *sizes.add(i)) };
            // SAFETY: as above.
            let bytes = unsafe { bytes(CALL, "args[i]", ptr.cast(), size) }?;
            if matches!(param, ParamKind::Buffer | ParamKind::Uniform) {
                if size != size_of::<offload_buffer_t>() {
                    return Err(Fail::from(Error::invalid(
                        CALL,
                        format!(
                            "argument {} of `{}` is {param}: pass a pointer to its \
                             offload_buffer_t ({} bytes); got {size} bytes",
                            i + 1,
                            k.name(),
                            size_of::<offload_buffer_t>()
                        ),
                    )));
                }
                let mut h = [0u8; 8];
                h.copy_from_slice(bytes);
                buffers.push(table::get::<Buffer>(CALL, u64::from_ne_bytes(h))?);
            }
            data.push(bytes);
        }
        let mut next = 0;
        let launch_args = params
            .iter()
            .zip(&data)
            .enumerate()
            .map(|(i, (p, d))| arg_for(CALL, &k, i + 1, p, d, &buffers, &mut next))
            .collect::<Res<Vec<Arg<'_>>>>()?;
        let d = Dims::grid(dims.grid)
            .block(dims.block)
            .shared_memory(dims.shared_memory);
        // SAFETY: the caller promises running the kernel with these arguments is sound;
        // the runtime checks them against the declared parameters first (P4).
        unsafe { q.launch(&k, d, &launch_args) }?;
        Ok(())
    })
}

/// Whether `device` can load `image`, without loading it (liboffload's `olIsValidBinary`):
/// `OFFLOAD_OK`, or `OFFLOAD_ERROR_INVALID_BINARY` saying which check failed (P4).
///
/// # Safety
/// `image` must point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_device_validate(
    device: offload_device_t,
    image: *const u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_device_validate";
    guard(CALL, || {
        // SAFETY: the caller promises `len` readable bytes.
        let image = unsafe { bytes(CALL, "image", image, len) }?;
        table::get::<Device>(CALL, device)?.validate(image)?;
        Ok(())
    })
}

/// Copies `len` bytes of the module's global variable `name` at `offset` into `dst`
/// (liboffload's `olGetSymbol` of a global, then `olMemcpy`).
///
/// # Safety
/// `name` must point to a NUL-terminated string; `dst` to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_module_read_global(
    module: offload_module_t,
    name: *const c_char,
    offset: usize,
    dst: *mut u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_module_read_global";
    guard(CALL, || {
        // SAFETY: the caller promises a NUL-terminated string.
        let name = unsafe { text(CALL, "name", name) }?;
        // SAFETY: the caller promises `len` writable bytes at `dst`.
        let dst = unsafe { crate::ffi::bytes_mut(CALL, "dst", dst, len) }?;
        table::get::<Module>(CALL, module)?.read_global(name, offset, dst)?;
        Ok(())
    })
}

/// Copies `len` bytes from `src` into the module's global variable `name` at `offset`.
///
/// # Safety
/// `name` must point to a NUL-terminated string; `src` to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_module_write_global(
    module: offload_module_t,
    name: *const c_char,
    offset: usize,
    src: *const u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_module_write_global";
    guard(CALL, || {
        // SAFETY: the caller promises a NUL-terminated string.
        let name = unsafe { text(CALL, "name", name) }?;
        // SAFETY: the caller promises `len` readable bytes at `src`.
        let src = unsafe { bytes(CALL, "src", src, len) }?;
        table::get::<Module>(CALL, module)?.write_global(name, offset, src)?;
        Ok(())
    })
}
