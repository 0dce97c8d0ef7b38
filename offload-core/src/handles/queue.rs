//! Queues, launches and events.
//!
//! A [`Queue`] is an in-order stream of work on one device. `launch` checks everything the
//! backend must not see wrong — the kernel's module is loaded, on the queue's device, in
//! this generation; the arguments match the kernel's declared parameters; every buffer is
//! live and on the same device — and only then calls the backend. During the call it holds
//! the queue, the module (so an `unload` waits for it) and every buffer argument
//! (exclusively, in address order, each once).
//!
//! Host functions are user code that offload runs (L6): each is wrapped ([`HostFn`]) so
//! that running it and dropping what it captured are marked as such on whatever thread the
//! backend uses, and its panic is caught there and returned by the queue's next `sync` on
//! every backend. A host function that waits for its own queue, or for an unfinished event
//! of it, gets `InvalidArgument` at once (it would wait for itself); a queue dropped inside
//! its own host function is released on a helper thread once the function returned.

use smallvec::SmallVec;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockWriteGuard};
use std::time::Duration;

use crate::erased::{DynBuffer, DynEvent, DynQueue};
use crate::error::{Error, Result};
use crate::hal::{BackendKind, Dims, KernelArg, ParamKind, ScalarType};
use crate::handles::buffer::Allocation;
use crate::handles::{Buffer, Device, Kernel};
use crate::runtime::generation::{DeviceKey, Generation, Kind, Resource, ResourceKey};
use crate::runtime::reentry;
use crate::sync::{lock, read};

/// A queue or event as its generation lists it: the backend object, until released.
pub(crate) struct Entry<T: ?Sized> {
    device: DeviceKey,
    backend: BackendKind,
    /// `"queue"` or `"event"`, for messages.
    what: &'static str,
    /// The user's name for it ([`Queue::label`]).
    label: RwLock<Option<Arc<str>>>,
    state: RwLock<Option<Box<T>>>,
}

impl<T: ?Sized> Entry<T> {
    fn new(device: DeviceKey, backend: BackendKind, what: &'static str, raw: Box<T>) -> Arc<Self> {
        Arc::new(Entry {
            device,
            backend,
            what,
            label: RwLock::new(None),
            state: RwLock::new(Some(raw)),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&T) -> Result<R>) -> Result<R> {
        let guard = read(&self.state);
        let raw = guard.as_ref().ok_or_else(|| Error::ShutDown {
            call: "",
            object: self.to_string(),
        })?;
        f(raw)
    }
}

/// `queue "uploads" (vulkan)` when labelled, else `a vulkan queue`.
impl<T: ?Sized> fmt::Display for Entry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match read(&self.label).as_deref() {
            Some(label) => write!(f, "{} \"{label}\" ({})", self.what, self.backend),
            None => write!(f, "a {} {}", self.backend, self.what),
        }
    }
}

impl<T: ?Sized> Entry<T> {
    /// The backend object, taken once (waits for calls in flight on it).
    fn take(&self) -> Option<Box<T>> {
        crate::sync::write(&self.state).take()
    }
}

impl Resource for Entry<dyn DynQueue> {
    /// L4's first step: drain.
    fn prepare(self: Arc<Self>, _generation: &Arc<Generation>) -> Result<()> {
        match read(&self.state).as_ref() {
            Some(queue) => queue.sync(),
            None => Ok(()),
        }
    }

    fn release(self: Arc<Self>) -> Result<()> {
        self.take().map_or(Ok(()), |queue| queue.destroy())
    }
}

impl Resource for Entry<dyn DynEvent> {
    fn release(self: Arc<Self>) -> Result<()> {
        self.take().map_or(Ok(()), |event| event.destroy())
    }
}

/// Forgets a queue or event in its generation, then releases it (holding the generation so
/// teardown cannot deinitialise the platform meanwhile; after teardown, it released it).
fn forget<T: ?Sized>(generation: &Generation, kind: Kind, key: ResourceKey, entry: Arc<Entry<T>>)
where
    Entry<T>: Resource,
{
    let released = generation.with_live(|live| {
        live.forget(kind, key);
        Ok(entry.release())
    });
    if let Ok(result) = released {
        generation.defer(result);
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Plain numbers that can be passed by value to a kernel, each with its [`ScalarType`]
/// (checked against the parameter's declared type where the image declares one).
///
/// ```
/// use offload_core::{Arg, ScalarType};
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
/// use offload_core::{Arg, MemKind, reference::Offload};
/// let rt = Offload::init()?;
/// let buf = rt.devices()?[0].alloc(16, MemKind::Device)?;
/// let args = [Arg::buffer(&buf), Arg::value(4u32)];
/// assert_eq!(args.len(), 2);
/// let same = offload_core::args![&buf, 4u32];
/// assert_eq!(format!("{:?}", same[1]), format!("{:?}", args[1]));
/// # Ok::<(), offload_core::Error>(())
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
    fn byte_range(&self) -> Option<(usize, usize)> {
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
/// use offload_core::{MemKind, reference::Offload};
/// let rt = Offload::init()?;
/// let buf = rt.devices()?[0].alloc(16, MemKind::Device)?;
/// let args = offload_core::args![&buf, 4u32, 1.5f32];
/// assert_eq!(args.len(), 3);
/// # Ok::<(), offload_core::Error>(())
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
    /// # use offload_core::{Arg, MemKind, reference::Offload};
    /// # let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc(4, MemKind::Device)?;
    /// assert!(matches!(Arg::buffer(&buf), Arg::Buffer(_)));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn buffer(buffer: &'a Buffer) -> Arg<'a> {
        Arg::Buffer(buffer)
    }

    /// A scalar argument, from a reference to it (see [`Arg::value`]).
    ///
    /// ```
    /// use offload_core::{Arg, ScalarType};
    /// assert!(matches!(Arg::scalar(&1u64), Arg::Scalar { ty: ScalarType::U64, .. }));
    /// ```
    pub fn scalar<T: Scalar>(value: &T) -> Arg<'a> {
        Arg::value(*value)
    }

    /// A scalar argument, by value: its Rust type is its [`ScalarType`].
    ///
    /// ```
    /// use offload_core::{Arg, ScalarType};
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
    /// # use offload_core::{Arg, MemKind, reference::Offload};
    /// # let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc(64, MemKind::Device)?;
    /// let second_half = Arg::range(&buf, 32, 32);
    /// assert!(matches!(second_half, Arg::Range { offset: 32, .. }));
    /// # Ok::<(), offload_core::Error>(())
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
    /// use offload_core::{Arg, ScalarType};
    /// let v = [1.0f32, 2.0];
    /// let a = Arg::pod(&v);
    /// assert!(matches!(a, Arg::Pod { bytes, elem: Some(ScalarType::F32), .. } if bytes.len() == 8));
    ///
    /// #[derive(Clone, Copy, offload_core::bytemuck::Pod, offload_core::bytemuck::Zeroable)]
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
    /// use offload_core::{Arg, Dims, Program, reference::{self, Offload}};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// let add_one = Program::new(reference::fixture_image()).load(&dev)?.kernel("add_one")?;
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
    /// # Ok::<(), offload_core::Error>(())
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
    /// use offload_core::{Arg, MemKind, reference::Offload};
    /// let rt = Offload::init()?;
    /// let params = rt.devices()?[0].upload(&[1.5f32, 2.5, 0.0, 0.0])?;
    /// assert!(matches!(Arg::uniform(&params), Arg::Uniform { range: None, .. }));
    /// assert!(matches!(Arg::uniform(params.slice(2..)), Arg::Uniform { range: Some((8, 8)), .. }));
    ///
    /// // A backend without uniform buffers (here the reference one; the host, CUDA, HIP
    /// // and Level Zero ones alike) has none among its parameters: refused, named.
    /// use offload_core::{Dims, Program, reference};
    /// let dev = rt.devices()?.remove(0);
    /// let add_one = Program::new(reference::fixture_image()).load(&dev)?.kernel("add_one")?;
    /// let q = dev.queue()?;
    /// // SAFETY: refused before anything runs.
    /// let e = unsafe { q.launch(&add_one, Dims::grid([1, 1, 1]), &[Arg::uniform(&params), Arg::value(4u32)]) };
    /// let text = e.unwrap_err().to_string();
    /// assert!(text.contains("argument 1 of `add_one` is a (storage) buffer; got"), "{text}");
    /// # Ok::<(), offload_core::Error>(())
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

/// An in-order stream of work on one device. Dropping it waits for its work and destroys
/// it (errors go to the runtime's next `shutdown`).
///
/// ```
/// use offload_core::{Arg, Dims, MemKind, Program, reference::{self, Offload}};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let add_one = Program::new(reference::fixture_image()).load(&dev)?.kernel("add_one")?;
/// let buf = dev.alloc(4 * 64, MemKind::Device)?;
/// let queue = dev.queue()?;
/// // SAFETY: add_one adds 1 to the first 64 u32s of its 256-byte buffer.
/// unsafe { queue.launch(&add_one, Dims::grid([1, 1, 1]).block([64, 1, 1]), &[Arg::buffer(&buf), Arg::value(64u32)])? };
/// queue.sync()?;
/// let mut out = [0u8; 4];
/// buf.read(0, &mut out)?;
/// assert_eq!(u32::from_ne_bytes(out), 1);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Queue {
    generation: Arc<Generation>,
    key: ResourceKey,
    entry: Arc<Entry<dyn DynQueue>>,
    /// What the queue's host functions panicked with, for its next `sync`.
    panics: Arc<std::sync::Mutex<Vec<String>>>,
}

/// A host function as offload hands it to a backend (L6): running it, and dropping it if it
/// never ran (the queue was destroyed first), is user code of its queue on whatever thread
/// the backend uses; a panic in either is caught there and kept for the queue's next
/// `sync`, so no backend sees one.
struct HostFn {
    f: Option<Box<dyn FnOnce() + Send>>,
    /// (generation id, queue id).
    queue: (u64, u64),
    panics: Arc<std::sync::Mutex<Vec<String>>>,
}

impl HostFn {
    fn run(mut self) {
        if let Some(f) = self.f.take() {
            self.as_user_code(f);
        }
    }

    fn as_user_code(&self, f: impl FnOnce()) {
        let _user = reentry::enter(Some(self.queue));
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            lock(&self.panics).push(crate::error::panic_text(&*payload));
        }
    }
}

impl Drop for HostFn {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            self.as_user_code(move || drop(f));
        }
    }
}

impl Queue {
    /// Creates a queue on `device` and lists it in its generation.
    pub(crate) fn create(device: &Device) -> Result<Queue> {
        let generation = device.generation();
        generation.with_live(|live| {
            if generation.is_closing() {
                return Err(Error::shut_down());
            }
            let raw = live.device(device.key())?.clone().queue()?;
            let entry = Entry::new(device.key(), device.backend(), "queue", raw);
            let (key, entry) = live.register(Kind::Queue, |_| entry)?;
            Ok(Queue {
                generation: generation.clone(),
                key,
                entry,
                panics: Arc::default(),
            })
        })
    }
}

fn mismatch(call: &'static str, reason: String) -> Error {
    Error::invalid(call, reason)
}

impl Queue {
    /// Names the queue, as wgpu's `label:` does: errors and logs call it by this name.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let uploads = rt.devices()?[0].queue()?.label("uploads");
    /// assert_eq!(uploads.to_string(), r#"queue "uploads" (reference)"#);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn label(self, label: impl Into<String>) -> Self {
        *crate::sync::write(&self.entry.label) = Some(Arc::from(label.into()));
        self
    }

    /// The device this queue runs on.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.queue()?.device(), dev);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn device(&self) -> Device {
        Device::new(
            self.generation.clone(),
            self.entry.device,
            self.entry.backend,
        )
    }

    /// Enqueues `kernel` over `dims` with `args`; returns once enqueued (Q1).
    ///
    /// Offload checks what it can before the backend sees anything: the argument count,
    /// each argument's kind and, where the image declares it, its scalar type; that every
    /// buffer (or range of one) is live, inside its buffer and on the queue's device; that
    /// the kernel's module is loaded on this device. Those failures are
    /// `Error::InvalidArgument`; anything of a finished runtime is `Error::ShutDown`.
    ///
    /// # Safety
    ///
    /// Launching hands control to code offload cannot verify: native machine code in this
    /// process on the host backend, device code on a GPU, with raw addresses of your
    /// buffers. The caller promises that running `kernel` with these arguments is sound:
    ///
    /// - it reads and writes only inside the buffers and ranges it is given (so every
    ///   count or index argument agrees with their lengths), its module's globals, and the
    ///   shared memory `dims` asks for;
    /// - on the host backend it returns, does not unwind across its C ABI, and touches no
    ///   process state it does not own (it runs on offload's threads, concurrently with
    ///   other queues' work);
    /// - when the same buffer is passed twice, or to kernels on different queues, the
    ///   kernels tolerate the aliasing (offload orders work within one queue only).
    ///
    /// ```
    /// # use offload_core::{Arg, Dims, Error, MemKind, Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let fill = Program::new(reference::fixture_image()).load(&dev)?.kernel("fill")?;
    /// let buf = dev.alloc(16, MemKind::Device)?;
    /// let q = dev.queue()?;
    /// // SAFETY: `fill` writes `n` u32s of its buffer; missing arguments are refused first.
    /// let wrong = unsafe { q.launch(&fill, Dims::grid([1, 1, 1]), &[Arg::buffer(&buf)]) };
    /// assert!(matches!(wrong, Err(Error::InvalidArgument { .. })));
    /// // SAFETY: 4 u32s fit in the 16-byte buffer.
    /// unsafe { q.launch(&fill, Dims::for_num_elems(4), &offload_core::args![&buf, 9u32, 4u32])? };
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    ///
    /// Launching is `unsafe`; code that forgets it does not compile:
    ///
    /// ```compile_fail,E0133
    /// # use offload_core::{Dims, MemKind, Program, reference::{self, Offload}};
    /// # let rt = Offload::init().unwrap();
    /// # let dev = rt.devices().unwrap().remove(0);
    /// let noop = Program::new(reference::fixture_image()).load(&dev).unwrap().kernel("noop").unwrap();
    /// dev.queue().unwrap().launch(&noop, Dims::grid([1, 1, 1]), &[]).unwrap();
    /// ```
    // The one `unsafe` of the core: a contract the caller takes on. The body does nothing
    // unsafe itself; the backend's launch is where the unverified code runs.
    #[allow(unsafe_code)]
    pub unsafe fn launch(&self, kernel: &Kernel, dims: Dims, args: &[Arg<'_>]) -> Result<()> {
        // SAFETY: the caller took on this function's contract.
        unsafe { self.enqueue_launch("Queue::launch", kernel, dims, args) }
    }

    /// Enqueues a kernel offload proved memory-safe ([`Kernel::is_verified`]: WGSL that
    /// offload compiled, every access clamped into its buffers) without `unsafe`; the same
    /// checks as [`Queue::launch`] run first. Any other kernel is `Error::InvalidArgument`,
    /// pointing at `launch`.
    ///
    /// ```
    /// # use offload_core::{Dims, Error, Program, reference::{self, Offload}};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let noop = Program::new(reference::fixture_image()).load(&dev)?.kernel("noop")?;
    /// let refused = dev.queue()?.run(&noop, Dims::grid([1, 1, 1]), &[]);
    /// assert!(matches!(refused, Err(Error::InvalidArgument { .. })));
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn run(&self, kernel: &Kernel, dims: Dims, args: &[Arg<'_>]) -> Result<()> {
        const CALL: &str = "Queue::run";
        if !kernel.is_verified() {
            return Err(mismatch(
                CALL,
                format!(
                    "{kernel} is code offload cannot verify (only WGSL programs offload \
                     compiled are): launch it with `unsafe {{ queue.launch(..) }}` and its \
                     safety contract"
                ),
            ));
        }
        // SAFETY: the kernel is verified: its every access is clamped into its buffer
        // arguments, and the backend refuses buffers too small for its bindings.
        #[allow(unsafe_code)]
        unsafe {
            self.enqueue_launch(CALL, kernel, dims, args)
        }
    }

    /// The checks and enqueue of `launch` and `run`.
    ///
    /// # Safety
    /// The contract of [`Queue::launch`], or a verified kernel.
    #[allow(unsafe_code)]
    unsafe fn enqueue_launch(
        &self,
        call: &'static str,
        kernel: &Kernel,
        dims: Dims,
        args: &[Arg<'_>],
    ) -> Result<()> {
        let module = kernel.module();
        self.entry
            .with(|queue| {
                module.with_loaded(call, |loaded| {
                    if !Arc::ptr_eq(module.generation(), &self.generation) {
                        return Err(Error::shut_down());
                    }
                    if module.entry.device != self.entry.device {
                        return Err(mismatch(
                            call,
                            format!("{kernel:?} is on another device than {self}"),
                        ));
                    }
                    check_args(kernel, args, &self.entry.device, &self.generation)?;
                    // Lock every distinct buffer once, exclusively, in address order.
                    // On the stack for up to 8 arguments (no allocation per launch).
                    let mut buffers: SmallVec<[&Buffer; 8]> =
                        args.iter().filter_map(Arg::buffer_of).collect();
                    buffers.sort_unstable_by_key(|b| b.entry_ptr());
                    buffers.dedup_by_key(|b| b.entry_ptr());
                    let guards: SmallVec<[RwLockWriteGuard<'_, Option<Allocation>>; 8]> =
                        buffers.iter().map(|b| b.lock_exclusive()).collect();
                    let mut raw_args: SmallVec<[KernelArg<'_, dyn DynBuffer>; 8]> =
                        SmallVec::with_capacity(args.len());
                    for arg in args {
                        raw_args.push(match arg.buffer_of() {
                            Some(b) => {
                                let at = buffers
                                    .iter()
                                    .position(|x| x.entry_ptr() == b.entry_ptr())
                                    .unwrap_or(0);
                                let allocation = guards[at].as_ref().ok_or_else(|| b.gone(call))?;
                                let (offset, len) = arg.byte_range().unwrap_or((0, b.len()));
                                let offset = b.offset_in_allocation() + offset;
                                if offset == 0 && len == b.entry().size() {
                                    KernelArg::Buffer(allocation.raw())
                                } else {
                                    KernelArg::Range {
                                        buffer: allocation.raw(),
                                        offset,
                                        len,
                                    }
                                }
                            }
                            None => match arg {
                                Arg::Scalar { bytes, ty } => KernelArg::Scalar(&bytes[..ty.size()]),
                                Arg::Pod { bytes, .. } => KernelArg::Scalar(bytes),
                                _ => KernelArg::Scalar(&[]),
                            },
                        });
                    }
                    let kernels = read(&loaded.kernels);
                    let raw_kernel = kernels.get(kernel.index).ok_or_else(Error::shut_down)?;
                    tracing::debug!(
                        target: "offload::launch",
                        kernel = kernel.name(),
                        queue = %self.entry,
                        grid = ?dims.grid,
                        block = ?dims.block,
                        shared_memory = dims.shared_memory,
                        args = args.len(),
                        "launch"
                    );
                    // SAFETY: our caller took on the contract of `Queue::launch`, which is the
                    // backend's; the arguments were checked above.
                    unsafe { queue.launch(&*raw_kernel.raw, &dims, &raw_args) }
                })
            })
            .map_err(|e| e.on(call, kernel).named_as("Queue::launch", call))
    }

    /// Waits until all work enqueued so far has finished.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// rt.devices()?[0].queue()?.sync()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        if self.is_running_here() {
            return Err(Error::invalid(
                "Queue::sync",
                format!(
                    "a host function of {self} waits for its own queue, which cannot finish \
                     before the function returns (L6); sync it after the function, or from \
                     another thread"
                ),
            ));
        }
        self.entry.with(|q| q.sync())?;
        let panics = std::mem::take(&mut *lock(&self.panics));
        if panics.is_empty() {
            return Ok(());
        }
        Err(Error::Callback {
            callback: "Queue::enqueue_host_fn",
            source: format!("{self}: {}", panics.join("; ")).into(),
        })
    }

    /// Whether this thread is running a host function of this queue.
    fn is_running_here(&self) -> bool {
        reentry::host_fn_of() == Some((self.generation.id, self.id()))
    }

    /// Enqueues a copy of `src` into `buffer` at `offset`, after the work enqueued so far;
    /// returns once enqueued (Q1). `src` is copied first, so it need not outlive the call.
    ///
    /// ```
    /// # use offload_core::{MemKind, reference::Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, MemKind::Device)?;
    /// let q = dev.queue()?;
    /// q.write(&buf, 0, &[1, 2, 3, 4])?;
    /// let mut out = [0u8; 4];
    /// q.read(&buf, 0, &mut out)?;
    /// assert_eq!(out, [1, 2, 3, 4]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn write(&self, buffer: &Buffer, offset: usize, src: &[u8]) -> Result<()> {
        const CALL: &str = "Queue::write";
        self.with_buffers(CALL, &[(buffer, offset, src.len())], |q, raws, at| {
            q.enqueue_write(raws[0], at[0], src.to_vec())
        })
    }

    /// Copies from `buffer` at `offset` into `dst` once the work enqueued so far has
    /// finished: it waits (a queued read into a slice the caller gets back at once could
    /// not be sound).
    ///
    /// ```
    /// # use offload_core::{MemKind, reference::Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(4, MemKind::Device)?;
    /// let mut out = [9u8; 4];
    /// dev.queue()?.read(&buf, 0, &mut out)?;
    /// assert_eq!(out, [0; 4]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn read(&self, buffer: &Buffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_buffer("Queue::read", buffer)?;
        self.sync()?;
        buffer.read(offset, dst)
    }

    /// Enqueues filling `len` bytes of `buffer` at `offset` with `pattern` repeated: any
    /// non-empty pattern (1, 2, 4, 8, 16 bytes or another size) whose length divides `len`
    /// (liboffload's `olMemFill`); `InvalidArgument` otherwise.
    ///
    /// ```
    /// # use offload_core::{MemKind, reference::Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc(8, MemKind::Device)?;
    /// let q = dev.queue()?;
    /// q.fill(&buf, 0, 8, &0xA1B2u16.to_le_bytes())?;
    /// let mut out = [0u8; 8];
    /// q.read(&buf, 0, &mut out)?;
    /// assert_eq!(out, [0xB2, 0xA1, 0xB2, 0xA1, 0xB2, 0xA1, 0xB2, 0xA1]);
    /// assert!(q.fill(&buf, 0, 7, &[1, 2]).is_err()); // 2 does not divide 7
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn fill(&self, buffer: &Buffer, offset: usize, len: usize, pattern: &[u8]) -> Result<()> {
        const CALL: &str = "Queue::fill";
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(mismatch(
                CALL,
                format!(
                    "a {}-byte pattern cannot fill {len} bytes exactly",
                    pattern.len()
                ),
            ));
        }
        self.with_buffers(CALL, &[(buffer, offset, len)], |q, raws, at| {
            q.enqueue_fill(raws[0], at[0], len, pattern)
        })
    }

    /// Enqueues a copy of `len` bytes from `src` at `src_offset` into `dst` at `dst_offset`
    /// (two ranges of one buffer must not overlap).
    ///
    /// Both on this queue's device: queued on the device. One of them on another device
    /// (of this platform or another) is staged through host memory: from another device,
    /// `src` is read now (after the work queued on it) and the write into `dst` is queued
    /// here; to another device, this queue is synced and `dst` written now. Neither on this
    /// queue's device, or a buffer of another runtime, is `InvalidArgument`.
    ///
    /// ```
    /// # use offload_core::{MemKind, reference::Offload};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (dev.alloc(4, MemKind::Device)?, dev.alloc(4, MemKind::Device)?);
    /// let q = dev.queue()?;
    /// q.write(&a, 0, &[5; 4])?;
    /// q.copy(&a, 0, &b, 0, 4)?;
    /// let mut out = [0u8; 4];
    /// q.read(&b, 0, &mut out)?;
    /// assert_eq!(out, [5; 4]);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn copy(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Queue::copy";
        let here =
            |b: &Buffer| b.same_generation(&self.generation) && b.device_key() == self.entry.device;
        let of_runtime = |b: &Buffer| b.same_generation(&self.generation);
        if of_runtime(src) && of_runtime(dst) && here(src) != here(dst) {
            src.check_range(CALL, src_offset, len)?;
            dst.check_range(CALL, dst_offset, len)?;
            if here(dst) {
                let mut staged = vec![0u8; len];
                src.read(src_offset, &mut staged)?;
                return self.with_buffers(CALL, &[(dst, dst_offset, len)], |q, raws, at| {
                    q.enqueue_write(raws[0], at[0], staged)
                });
            }
            self.sync()?;
            return dst.copy_staged(dst_offset, src, src_offset, len);
        }
        let ranges = [(src, src_offset, len), (dst, dst_offset, len)];
        self.with_buffers(CALL, &ranges, |q, raws, at| {
            if std::ptr::addr_eq(raws[0], raws[1]) && at[0].abs_diff(at[1]) < len {
                return Err(mismatch(
                    CALL,
                    format!("the ranges at {} and {} of {dst} overlap", at[0], at[1]),
                ));
            }
            q.enqueue_copy(raws[0], at[0], raws[1], at[1], len)
        })
    }

    /// Enqueues `f`: it runs once the work enqueued before it has finished, and work
    /// enqueued after it waits for it (liboffload's `olLaunchHostFunction`). It runs on a
    /// thread of offload's choosing; it must not block on this queue.
    ///
    /// ```
    /// # use offload_core::reference::Offload;
    /// # let rt = Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// q.enqueue_host_fn(move || tx.send(42).unwrap())?;
    /// q.sync()?;
    /// assert_eq!(rx.recv().unwrap(), 42);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn enqueue_host_fn(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let wrapped = HostFn {
            f: Some(Box::new(f)),
            queue: (self.generation.id, self.id()),
            panics: self.panics.clone(),
        };
        self.entry
            .with(|q| q.enqueue_host_fn(Box::new(move || wrapped.run())))
    }

    /// Whether all work enqueued so far has finished, without waiting.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// q.sync()?;
    /// assert!(q.is_idle()?);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_idle(&self) -> Result<bool> {
        self.entry.with(|q| q.is_idle())
    }

    /// A number that identifies this queue among the live queues of its runtime; an
    /// event's [`Event::queue_id`] names the queue it was recorded on.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// assert_eq!(q.record()?.queue_id(), q.id());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        slotmap::Key::data(&self.key).as_ffi()
    }

    /// Runs `f` on the backend queue and the buffers of `ranges` (each checked: of this
    /// queue's device, the range inside it), locked exclusively in address order, each
    /// once, with each range's offset in its allocation.
    fn with_buffers<T>(
        &self,
        call: &'static str,
        ranges: &[(&Buffer, usize, usize)],
        f: impl FnOnce(&dyn DynQueue, &[&dyn DynBuffer], &[usize]) -> Result<T>,
    ) -> Result<T> {
        for (buffer, _, _) in ranges {
            self.check_buffer(call, buffer)?;
        }
        let mut at = Vec::with_capacity(ranges.len());
        for (buffer, offset, len) in ranges {
            at.push(buffer.check_range(call, *offset, *len)?);
        }
        self.entry.with(|q| {
            let mut order: Vec<&Buffer> = ranges.iter().map(|r| r.0).collect();
            order.sort_by_key(|b| b.entry_ptr());
            order.dedup_by_key(|b| b.entry_ptr());
            let guards: Vec<RwLockWriteGuard<'_, Option<Allocation>>> =
                order.iter().map(|b| b.lock_exclusive()).collect();
            let mut raws: Vec<&dyn DynBuffer> = Vec::with_capacity(ranges.len());
            for (buffer, _, _) in ranges {
                let i = order
                    .iter()
                    .position(|b| b.entry_ptr() == buffer.entry_ptr())
                    .unwrap_or(0);
                let allocation = guards[i].as_ref().ok_or_else(|| buffer.gone(call))?;
                raws.push(allocation.raw());
            }
            f(q, &raws, &at)
        })
    }

    fn check_buffer(&self, call: &'static str, buffer: &Buffer) -> Result<()> {
        if !buffer.same_generation(&self.generation) || buffer.device_key() != self.entry.device {
            // A dead buffer says ShutDown first.
            buffer.read(0, &mut [])?;
            self.sync()?;
            return Err(mismatch(
                call,
                format!("{buffer} is not on the device of {self}"),
            ));
        }
        Ok(())
    }

    /// Records an event after the work enqueued so far.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let start = q.record()?;
    /// let end = q.record()?;
    /// end.sync()?;
    /// assert!(end.elapsed_since(&start)? >= std::time::Duration::ZERO);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn record(&self) -> Result<Event> {
        // The generation is held across (locks in the order generation, then object, as
        // everywhere): teardown cannot release its events before this one is listed.
        self.generation.with_live(|live| {
            let raw = self.entry.with(|q| q.record())?;
            let entry = Entry::new(self.entry.device, self.entry.backend, "event", raw);
            let (key, entry) = live.register(Kind::Event, |_| entry)?;
            Ok(Event {
                generation: self.generation.clone(),
                key,
                entry,
                queue: self.id(),
                in_own_host_fn: self.is_running_here(),
            })
        })
    }

    /// Makes later work on this queue wait until `event` has completed.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let (a, b) = (dev.queue()?, dev.queue()?);
    /// let e = a.record()?;
    /// b.wait(&e)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.entry.with(|q| {
            event.entry.with(|e| {
                if event.entry.device != self.entry.device {
                    return Err(mismatch(
                        "Queue::wait",
                        format!("{event:?} is of another device than {self}"),
                    ));
                }
                q.wait(e)
            })
        })
    }
}

fn check_args(
    kernel: &Kernel,
    args: &[Arg<'_>],
    device: &DeviceKey,
    generation: &Arc<Generation>,
) -> Result<()> {
    const CALL: &str = "Queue::launch";
    let params = kernel.params();
    let name = kernel.name();
    if params.len() != args.len() {
        let list: Vec<String> = params.iter().map(ToString::to_string).collect();
        // Two f32s for a `vec2<f32>`: the composite is one argument.
        let hint = if args.len() > params.len()
            && params.iter().any(|p| matches!(p, ParamKind::Pod { .. }))
        {
            " (a vector, matrix or struct parameter is one argument: `Arg::pod(&[x, y])`, \
             `Arg::pod(&your_struct)`)"
        } else {
            ""
        };
        return Err(mismatch(
            CALL,
            format!(
                "`{name}` takes {} argument{} ({}); {} given{hint}",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                list.join(", "),
                args.len()
            ),
        ));
    }
    for (i, (param, arg)) in params.iter().zip(args).enumerate() {
        let nth = i + 1;
        let uniform_arg = matches!(arg, Arg::Uniform { .. });
        match (param, arg.buffer_of()) {
            (ParamKind::Buffer, Some(_)) if uniform_arg => {
                return Err(mismatch(
                    CALL,
                    format!(
                        "argument {nth} of `{name}` is a (storage) buffer; got {arg:?}: pass \
                         it as a buffer (`Arg::buffer`, or `&buffer` in `args!`)"
                    ),
                ));
            }
            (ParamKind::Uniform, Some(_)) if !uniform_arg => {
                return Err(mismatch(
                    CALL,
                    format!(
                        "argument {nth} of `{name}` is a uniform buffer; got {arg:?}: pass it \
                         as one with `Arg::uniform(&buffer)`"
                    ),
                ));
            }
            (ParamKind::Buffer | ParamKind::Uniform, Some(b)) => {
                if !b.same_generation(generation) {
                    b.read(0, &mut [])?; // a dead buffer says ShutDown
                }
                if b.device_key() != *device {
                    return Err(mismatch(
                        CALL,
                        format!("argument {nth} of `{name}`: {b} is on another device"),
                    ));
                }
                if let Some((offset, len)) = arg.byte_range() {
                    b.check_range(CALL, offset, len).map_err(|e| match e {
                        Error::InvalidArgument { call, reason } => Error::InvalidArgument {
                            call,
                            reason: format!("argument {nth} of `{name}`: {reason}"),
                        },
                        other => other,
                    })?;
                    if len == 0 {
                        return Err(mismatch(
                            CALL,
                            format!("argument {nth} of `{name}`: an empty range of {b}"),
                        ));
                    }
                }
            }
            (ParamKind::Buffer | ParamKind::Uniform, None) => {
                return Err(mismatch(
                    CALL,
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
                    return Err(mismatch(
                        CALL,
                        format!("argument {nth} of `{name}` is {value}; got {got}"),
                    ));
                }
            }
            (value, Some(_)) => {
                return Err(mismatch(
                    CALL,
                    format!("argument {nth} of `{name}` is {value}; got {arg:?}"),
                ));
            }
        }
    }
    Ok(())
}

impl Drop for Queue {
    fn drop(&mut self) {
        if self.is_running_here() {
            // Dropped by its own host function (L6): releasing it waits for the function
            // to return (and, on some backends, joins the thread running it), so a helper
            // thread releases it once it has. Without one, the generation's teardown does.
            let (generation, key, entry) = (self.generation.clone(), self.key, self.entry.clone());
            let _ = crate::runtime::lifecycle::run_later("offload-queue-release", move || {
                forget(&generation, Kind::Queue, key, entry);
            });
            return;
        }
        forget(&self.generation, Kind::Queue, self.key, self.entry.clone());
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.entry, f)
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A point in a queue's work. Completed when the work before it has finished.
///
/// ```
/// # let rt = offload_core::reference::Offload::init()?;
/// let q = rt.devices()?[0].queue()?;
/// let e = q.record()?;
/// e.sync()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Event {
    generation: Arc<Generation>,
    key: ResourceKey,
    entry: Arc<Entry<dyn DynEvent>>,
    /// The queue it was recorded on ([`Queue::id`]).
    queue: u64,
    /// Recorded by a host function of its own queue: that function may never wait for it
    /// (on some backends it would complete early, on others never; L6 wants one answer).
    in_own_host_fn: bool,
}

impl Event {
    /// Blocks until the event has completed.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// rt.devices()?[0].queue()?.record()?.sync()?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        if reentry::host_fn_of() == Some((self.generation.id, self.queue))
            && (self.in_own_host_fn || !self.is_complete()?)
        {
            return Err(Error::invalid(
                "Event::sync",
                format!(
                    "a host function of the queue that recorded {self:?} waits for it, and \
                     it cannot complete before the function returns (L6)"
                ),
            ));
        }
        self.entry.with(|e| e.sync())
    }

    /// Whether the work before the event has finished, without waiting.
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let e = q.record()?;
    /// e.sync()?;
    /// assert!(e.is_complete()?);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_complete(&self) -> Result<bool> {
        self.entry.with(|e| e.is_complete())
    }

    /// The id of the queue the event was recorded on ([`Queue::id`]).
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// assert_eq!(q.record()?.queue_id(), q.id());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn queue_id(&self) -> u64 {
        self.queue
    }

    /// Device time from `start` to this event (both completed).
    ///
    /// ```
    /// # let rt = offload_core::reference::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let (a, b) = (q.record()?, q.record()?);
    /// b.sync()?;
    /// let _took = b.elapsed_since(&a)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        start.entry.with(|s| {
            self.entry.with(|e| {
                if start.entry.device != self.entry.device
                    || !Arc::ptr_eq(&start.generation, &self.generation)
                {
                    return Err(mismatch(
                        "Event::elapsed_since",
                        "the events are of different devices".into(),
                    ));
                }
                e.elapsed_since(s)
            })
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        forget(&self.generation, Kind::Event, self.key, self.entry.clone());
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.entry, f)
    }
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
