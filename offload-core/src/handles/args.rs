//! Kernel arguments: [`Arg`] (a buffer, a view, or a [`Scalar`] by value) and the check of
//! a launch's arguments against the kernel's declared parameters — count, kinds, sizes,
//! element types, and that every buffer is live and on the launch's device.

use crate::sync::Arc;
use std::fmt;

use crate::error::{Caller, Error, Result};
use crate::hal::{ParamKind, ScalarType};
use crate::handles::fixes::Fix;
use crate::handles::{Buffer, Kernel};
use crate::runtime::generation::{DeviceKey, Generation};

mod sealed {
    pub trait Sealed {}
}

/// Plain numbers that can be passed by value to a kernel, each with its [`ScalarType`]
/// (checked against the parameter's declared type where the image declares one).
///
/// ```
/// use offload::{Arg, ScalarType};
/// let a = Arg::scalar(&3.5f32);
/// assert!(matches!(a, Arg::Scalar { ty: ScalarType::F32, .. }));
/// ```
pub trait Scalar: Copy + sealed::Sealed {
    /// The type's name in kernel signatures.
    const TYPE: ScalarType;
    /// The value's bytes, in native order, padded to 8.
    fn to_bytes(self) -> [u8; 8];
}

macro_rules! scalars {
    ($($t:ty => $k:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {
            const TYPE: ScalarType = ScalarType::$k;
            fn to_bytes(self) -> [u8; 8] {
                let b = self.to_ne_bytes();
                let mut out = [0u8; 8];
                out[..b.len()].copy_from_slice(&b);
                out
            }
        }
        impl From<$t> for Arg<'_> {
            fn from(value: $t) -> Self {
                Arg::value(value)
            }
        }
    )*};
}
scalars!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32,
         i64 => I64, f32 => F32, f64 => F64);

/// One launch argument: a buffer (whole or a range of it), a uniform buffer, a scalar by
/// value, or the bytes of any `bytemuck::Pod` value (a vector, matrix or struct parameter).
///
/// Anything that converts into an `Arg` can go in [`args!`](crate::args): buffers and
/// typed buffers by reference, their slices, numbers by value, and the `Arg`s that
/// [`Arg::pod`] and [`Arg::uniform`] make.
///
/// ```
/// use offload::{Arg, MemKind, Offload};
/// let rt = Offload::init()?;
/// let buf = rt.devices()?[0].alloc(16, MemKind::Device)?;
/// let args = [Arg::buffer(&buf), Arg::value(4u32)];
/// assert_eq!(args.len(), 2);
/// let same = offload::args![&buf, 4u32];
/// assert_eq!(format!("{:?}", same[1]), format!("{:?}", args[1]));
/// # Ok::<(), offload::Error>(())
/// ```
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    /// A whole buffer, passed as its device address.
    Buffer(&'a Buffer),
    /// `len` bytes at `offset` of a buffer, passed as the address of its first byte.
    Range {
        /// The buffer.
        buffer: &'a Buffer,
        /// Where the range starts, in bytes.
        offset: usize,
        /// Its length, in bytes.
        len: usize,
    },
    /// A scalar of type `ty`: the first `ty.size()` bytes of `bytes`.
    Scalar {
        /// The value in native byte order.
        bytes: [u8; 8],
        /// Its type.
        ty: ScalarType,
    },
    /// The bytes of a `bytemuck::Pod` value ([`Arg::pod`]), for a parameter of its size:
    /// a [`ParamKind::Pod`] (vector, matrix, array or struct), or a scalar one.
    Pod {
        /// The value's bytes, in native byte order.
        bytes: &'a [u8],
        /// Its Rust type's name, for messages.
        type_name: &'static str,
        /// Its element type, where it is a scalar or a (nested) array of one (`[f32; 2]`,
        /// `[[f32; 4]; 4]`); `None` for other types, which are checked by size only.
        elem: Option<ScalarType>,
    },
    /// A buffer bound as a uniform buffer ([`Arg::uniform`]), for a
    /// [`ParamKind::Uniform`] parameter: the whole buffer, or `len` bytes at `offset`.
    Uniform {
        /// The buffer.
        buffer: &'a Buffer,
        /// `(offset, len)` of the bytes bound, in bytes; `None`: all of them.
        range: Option<(usize, usize)>,
    },
}

impl fmt::Debug for Arg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Buffer(b) => write!(f, "{b}"),
            Arg::Range {
                buffer,
                offset,
                len,
            } => write!(f, "bytes {offset}..{} of {buffer}", offset + len),
            Arg::Scalar { bytes, ty } => f.write_str(&scalar_text(bytes, *ty)),
            Arg::Pod {
                bytes, type_name, ..
            } => write!(f, "`{type_name}` ({} bytes)", bytes.len()),
            Arg::Uniform {
                buffer,
                range: None,
            } => write!(f, "{buffer} as a uniform buffer"),
            Arg::Uniform {
                buffer,
                range: Some((offset, len)),
            } => write!(
                f,
                "bytes {offset}..{} of {buffer} as a uniform buffer",
                offset + len
            ),
        }
    }
}

/// The element type of a Pod type from its name: a scalar type, or an array (of arrays) of
/// one. Anything else (a struct, a vector type of a maths crate) is `None`: checked by
/// size only. (`type_name` is for diagnostics; should its wording ever change, this gives
/// `None` and the check falls back to the size.)
fn elem_of(type_name: &str) -> Option<ScalarType> {
    // `[[f32; 4]; 4]`: the name after the opening brackets, up to the first `;`.
    let inner = type_name.trim_start_matches('[');
    let inner = match inner.split_once(';') {
        Some((elem, _)) if inner.len() < type_name.len() => elem,
        None if inner.len() == type_name.len() => inner,
        _ => return None,
    };
    Some(match inner {
        "u8" => ScalarType::U8,
        "i8" => ScalarType::I8,
        "u16" => ScalarType::U16,
        "i16" => ScalarType::I16,
        "u32" => ScalarType::U32,
        "i32" => ScalarType::I32,
        "f32" => ScalarType::F32,
        "u64" => ScalarType::U64,
        "i64" => ScalarType::I64,
        "f64" => ScalarType::F64,
        _ => return None,
    })
}

/// A scalar as its user wrote it: `2u32`, `1.5f32`.
fn scalar_text(bytes: &[u8; 8], ty: ScalarType) -> String {
    let b = |n: usize| {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&bytes[..n]);
        a
    };
    let value = match ty {
        ScalarType::U8 => bytes[0].to_string(),
        ScalarType::I8 => (bytes[0] as i8).to_string(),
        ScalarType::U16 => u16::from_ne_bytes([bytes[0], bytes[1]]).to_string(),
        ScalarType::I16 => i16::from_ne_bytes([bytes[0], bytes[1]]).to_string(),
        ScalarType::U32 => u32::from_ne_bytes(four(bytes)).to_string(),
        ScalarType::I32 => i32::from_ne_bytes(four(bytes)).to_string(),
        ScalarType::F32 => format!("{:?}", f32::from_ne_bytes(four(bytes))),
        ScalarType::U64 => u64::from_ne_bytes(b(8)).to_string(),
        ScalarType::I64 => i64::from_ne_bytes(b(8)).to_string(),
        ScalarType::F64 => format!("{:?}", f64::from_ne_bytes(b(8))),
    };
    format!("{value}{ty}")
}

fn four(bytes: &[u8; 8]) -> [u8; 4] {
    [bytes[0], bytes[1], bytes[2], bytes[3]]
}

impl<'a> Arg<'a> {
    /// The buffer of a buffer, range or uniform argument.
    pub(crate) fn buffer_of(&self) -> Option<&'a Buffer> {
        match *self {
            Arg::Buffer(b) | Arg::Range { buffer: b, .. } | Arg::Uniform { buffer: b, .. } => {
                Some(b)
            }
            Arg::Scalar { .. } | Arg::Pod { .. } => None,
        }
    }

    /// The (offset, len) of a range argument (or of a uniform buffer's range).
    pub(super) fn byte_range(&self) -> Option<(usize, usize)> {
        match *self {
            Arg::Range { offset, len, .. } => Some((offset, len)),
            Arg::Uniform { range, .. } => range,
            _ => None,
        }
    }

    /// The size and, where known, the element type of a by-value argument.
    fn value_layout(&self) -> Option<(usize, Option<ScalarType>)> {
        match *self {
            Arg::Scalar { ty, .. } => Some((ty.size(), Some(ty))),
            Arg::Pod { bytes, elem, .. } => Some((bytes.len(), elem)),
            _ => None,
        }
    }
}

/// Whether by-value parameter `param` takes a value of `size` bytes and element type `elem`.
fn takes_value(param: &ParamKind, size: usize, elem: Option<ScalarType>) -> bool {
    match *param {
        // A declared scalar type takes only that type (a Pod value of it too: `[u32; 1]`).
        ParamKind::Typed(want) => elem == Some(want) && size == want.size(),
        ParamKind::Scalar(n) => size == n,
        ParamKind::Pod {
            size: want,
            elem: declared,
            ..
        } => size == want && (declared.is_none() || elem.is_none() || declared == elem),
        ParamKind::Buffer | ParamKind::Uniform => false,
    }
}

impl<'a> From<&'a Buffer> for Arg<'a> {
    fn from(buffer: &'a Buffer) -> Self {
        Arg::Buffer(buffer)
    }
}

/// Launch arguments from anything that converts into an [`Arg`]: buffers and typed
/// buffers by reference, their slices, numbers by value (the number's Rust type is its
/// [`ScalarType`], so write `2.0f32`, not `2.0`, where the kernel takes an `f32`).
///
/// ```
/// use offload::{MemKind, Offload};
/// let rt = Offload::init()?;
/// let buf = rt.devices()?[0].alloc(16, MemKind::Device)?;
/// let args = offload::args![&buf, 4u32, 1.5f32];
/// assert_eq!(args.len(), 3);
/// # Ok::<(), offload::Error>(())
/// ```
#[macro_export]
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        [$($crate::Arg::from($arg)),*]
    };
}

impl<'a> Arg<'a> {
    /// A buffer argument.
    ///
    /// ```
    /// # use offload::{Arg, MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc(4, MemKind::Device)?;
    /// assert!(matches!(Arg::buffer(&buf), Arg::Buffer(_)));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn buffer(buffer: &'a Buffer) -> Arg<'a> {
        Arg::Buffer(buffer)
    }

    /// A scalar argument, from a reference to it (see [`Arg::value`]).
    ///
    /// ```
    /// use offload::{Arg, ScalarType};
    /// assert!(matches!(Arg::scalar(&1u64), Arg::Scalar { ty: ScalarType::U64, .. }));
    /// ```
    pub fn scalar<T: Scalar>(value: &T) -> Arg<'a> {
        Arg::value(*value)
    }

    /// A scalar argument, by value: its Rust type is its [`ScalarType`].
    ///
    /// ```
    /// use offload::{Arg, ScalarType};
    /// assert!(matches!(Arg::value(2.5f32), Arg::Scalar { ty: ScalarType::F32, .. }));
    /// ```
    pub fn value<T: Scalar>(value: T) -> Arg<'a> {
        Arg::Scalar {
            bytes: value.to_bytes(),
            ty: T::TYPE,
        }
    }

    /// `len` bytes of `buffer` at `offset`, as a buffer argument: the kernel sees the
    /// address of byte `offset`. Checked at launch to lie inside the buffer.
    ///
    /// ```
    /// # use offload::{Arg, MemKind, Offload};
    /// # let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc(64, MemKind::Device)?;
    /// let second_half = Arg::range(&buf, 32, 32);
    /// assert!(matches!(second_half, Arg::Range { offset: 32, .. }));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn range(buffer: &'a Buffer, offset: usize, len: usize) -> Arg<'a> {
        Arg::Range {
            buffer,
            offset,
            len,
        }
    }

    /// The bytes of any `bytemuck::Pod` value, for a parameter of its size: a vector,
    /// matrix, array or struct push constant ([`ParamKind::Pod`]) — `[f32; 2]` for a
    /// `vec2<f32>`, your `#[repr(C)]` struct for a struct member — or a scalar one.
    ///
    /// Checked at launch: the size must be the parameter's, padding included (a `vec3`
    /// member followed by an `f32` packs into 16 bytes; a `vec3` in an array takes 16).
    /// Where both the parameter's element type and the value's are known — the value's is
    /// for scalars and (nested) arrays of them, `[f32; 2]`, `[[f32; 4]; 4]` — they must be
    /// the same: `[u32; 2]` is refused for a `vec2<f32>`. Other types (your structs, a
    /// maths crate's vectors) are checked by size.
    ///
    /// ```
    /// use offload::{Arg, ScalarType};
    /// let v = [1.0f32, 2.0];
    /// let a = Arg::pod(&v);
    /// assert!(matches!(a, Arg::Pod { bytes, elem: Some(ScalarType::F32), .. } if bytes.len() == 8));
    ///
    /// // Through offload's re-export, the derive is told where bytemuck is: a crate
    /// // without its own bytemuck dependency has no `::bytemuck` (docs/launches.md).
    /// #[derive(Clone, Copy, offload::bytemuck::Pod, offload::bytemuck::Zeroable)]
    /// #[bytemuck(crate = "offload::bytemuck")]
    /// #[repr(C)]
    /// struct Light { color: [f32; 3], intensity: f32 }
    /// let light = Light { color: [1.0, 0.5, 0.0], intensity: 2.0 };
    /// assert!(matches!(Arg::pod(&light), Arg::Pod { elem: None, .. }));
    /// assert!(format!("{:?}", Arg::pod(&light)).ends_with("Light` (16 bytes)"));
    /// ```
    ///
    /// On any backend, a Pod value of a typed scalar parameter's type passes; another
    /// element type is refused, naming the argument:
    ///
    /// ```
    /// use offload::{Arg, Dims, Offload, Program};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let add_one = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("add_one")?;
    /// let buf = dev.alloc_zeros::<u32>(4)?;
    /// let q = dev.queue()?;
    /// let dims = Dims::grid([1, 1, 1]).block([4, 1, 1]);
    /// // SAFETY: add_one adds 1 to the first n = 4 u32s of its 4-u32 buffer.
    /// unsafe { q.launch(&add_one, dims, &[Arg::from(&buf), Arg::pod(&4u32)])? };
    /// assert_eq!(buf.to_vec()?, [1, 1, 1, 1]);
    /// // SAFETY: refused before anything runs.
    /// let e = unsafe { q.launch(&add_one, dims, &[Arg::from(&buf), Arg::pod(&[1u16, 2])]) };
    /// let text = e.unwrap_err().to_string();
    /// assert!(text.contains("argument 2 of `add_one` is a u32; got `[u16; 2]` (4 bytes)"), "{text}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn pod<T: bytemuck::Pod>(value: &'a T) -> Arg<'a> {
        let type_name = std::any::type_name::<T>();
        Arg::Pod {
            bytes: bytemuck::bytes_of(value),
            type_name,
            elem: elem_of(type_name),
        }
    }

    /// `buffer` bound as a uniform buffer, for a [`ParamKind::Uniform`] parameter (WGSL
    /// `var<uniform>`): a [`Buffer`], a [`TypedBuffer`](crate::TypedBuffer) or a view of
    /// one (a range of it). Checked at launch like a buffer argument (device, range,
    /// liveness), and by the backend against its limits (Vulkan:
    /// `maxUniformBufferRange`, `minUniformBufferOffsetAlignment`). A uniform argument
    /// for a storage-buffer parameter, or a plain buffer for a uniform one, is
    /// `Error::InvalidArgument` naming the argument. (Given a number, it stays a number,
    /// and the launch refuses it as such.)
    ///
    /// ```
    /// use offload::{Arg, MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let params = rt.devices()?[0].upload(&[1.5f32, 2.5, 0.0, 0.0])?;
    /// assert!(matches!(Arg::uniform(&params), Arg::Uniform { range: None, .. }));
    /// assert!(matches!(Arg::uniform(params.slice(2..)), Arg::Uniform { range: Some((8, 8)), .. }));
    ///
    /// // A backend without uniform buffers (here the host one; CUDA, HIP and Level Zero
    /// // alike) has none among its parameters: refused, named.
    /// use offload::{Dims, Program};
    /// let dev = rt.devices()?.remove(0);
    /// let add_one = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("add_one")?;
    /// let q = dev.queue()?;
    /// // SAFETY: refused before anything runs.
    /// let e = unsafe { q.launch(&add_one, Dims::grid([1, 1, 1]), &[Arg::uniform(&params), Arg::value(4u32)]) };
    /// let text = e.unwrap_err().to_string();
    /// assert!(text.contains("argument 1 of `add_one` is a (storage) buffer; got"), "{text}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn uniform(buffer: impl Into<Arg<'a>>) -> Arg<'a> {
        match buffer.into() {
            Arg::Buffer(buffer) => Arg::Uniform {
                buffer,
                range: None,
            },
            Arg::Range {
                buffer,
                offset,
                len,
            } => Arg::Uniform {
                buffer,
                range: Some((offset, len)),
            },
            other => other,
        }
    }
}

/// Checks `args` against what `kernel` declares (P4); a refusal names the argument and
/// suggests its fix in `caller`'s words.
pub(super) fn check_args(
    call: &'static str,
    caller: Caller,
    kernel: &Kernel,
    args: &[Arg<'_>],
    device: &DeviceKey,
    generation: &Arc<Generation>,
) -> Result<()> {
    kernel.check_arg_count(caller, call, args.len())?;
    let params = kernel.params();
    let name = kernel.name();
    for (i, (param, arg)) in params.iter().zip(args).enumerate() {
        let nth = i + 1;
        let uniform_arg = matches!(arg, Arg::Uniform { .. });
        match (param, arg.buffer_of()) {
            (ParamKind::Buffer, Some(_)) if uniform_arg => {
                return Err(Error::invalid(
                    call,
                    format!(
                        "argument {nth} of `{name}` is a (storage) buffer; got {arg:?}: {}",
                        Fix::AsStorage.words(caller)
                    ),
                ));
            }
            (ParamKind::Uniform, Some(_)) if !uniform_arg => {
                return Err(Error::invalid(
                    call,
                    format!(
                        "argument {nth} of `{name}` is a uniform buffer; got {arg:?}: {}",
                        Fix::AsUniform.words(caller)
                    ),
                ));
            }
            (ParamKind::Buffer | ParamKind::Uniform, Some(b)) => {
                if !b.same_generation(generation) {
                    b.read(0, &mut [])?; // a dead buffer says ShutDown
                }
                if b.device_key() != *device {
                    return Err(Error::invalid(
                        call,
                        format!("argument {nth} of `{name}`: {b} is on another device"),
                    ));
                }
                if let Some((offset, len)) = arg.byte_range() {
                    b.check_range(call, offset, len).map_err(|e| match e {
                        Error::InvalidArgument { call, reason } => Error::InvalidArgument {
                            call,
                            reason: format!("argument {nth} of `{name}`: {reason}"),
                        },
                        other => other,
                    })?;
                    if len == 0 {
                        return Err(Error::invalid(
                            call,
                            format!("argument {nth} of `{name}`: an empty range of {b}"),
                        ));
                    }
                }
            }
            (ParamKind::Buffer | ParamKind::Uniform, None) => {
                return Err(Error::invalid(
                    call,
                    format!("argument {nth} of `{name}` is {param}; got {arg:?}"),
                ));
            }
            (value, None) => {
                let Some((size, elem)) = arg.value_layout() else {
                    continue;
                };
                if !takes_value(value, size, elem) {
                    let got = match arg {
                        Arg::Scalar { ty, .. } => format!("{} ({arg:?})", ParamKind::Typed(*ty)),
                        _ => format!("{arg:?}"),
                    };
                    return Err(Error::invalid(
                        call,
                        format!("argument {nth} of `{name}` is {value}; got {got}"),
                    ));
                }
            }
            (value, Some(_)) => {
                return Err(Error::invalid(
                    call,
                    format!("argument {nth} of `{name}` is {value}; got {arg:?}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::elem_of;
    use crate::ScalarType;

    #[test]
    fn the_element_type_of_scalars_and_their_arrays_is_known() {
        assert_eq!(elem_of(std::any::type_name::<f32>()), Some(ScalarType::F32));
        assert_eq!(
            elem_of(std::any::type_name::<[u8; 3]>()),
            Some(ScalarType::U8)
        );
        assert_eq!(
            elem_of(std::any::type_name::<[[f64; 4]; 4]>()),
            Some(ScalarType::F64)
        );
        assert_eq!(elem_of(std::any::type_name::<(u32, u32)>()), None);
        assert_eq!(elem_of("glam::f32::Vec2"), None);
        assert_eq!(elem_of("my::f32"), None);
        assert_eq!(elem_of("[my::Pair; 2]"), None);
    }
}
