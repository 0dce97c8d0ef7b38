//! Typed buffers: [`TypedBuffer<T>`] is a [`Buffer`] of `len` elements of a plain-old-data
//! type, with copies in elements instead of bytes, and [`BufferView`]s of element ranges
//! that can be passed to kernels. The byte API stays underneath
//! ([`TypedBuffer::as_bytes`]). A typed call checks its range in elements first (one
//! comparison, so that its error names the typed call and the elements, not the bytes
//! underneath), then makes the byte call: the typed calls cost what the byte calls cost
//! (see the `typed` benchmark).
//!
//! Element types are [`bytemuck::Pod`]: every bit pattern is a value and there is no
//! padding, so bytes a kernel wrote can be read as `T` without `unsafe`. Derive it for
//! your own `#[repr(C)]` structs through the re-export, with no bytemuck dependency of
//! your own: `#[derive(Pod, Zeroable, Clone, Copy)]` (from `offload::bytemuck`) and
//! `#[bytemuck(crate = "offload::bytemuck")]`, which tells the derive where the crate is
//! (docs/launches.md, "Your own element types").

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::hal::MemKind;
use crate::handles::args::Arg;
use crate::handles::{Buffer, Device};

/// A buffer of `len()` elements of `T`.
///
/// ```
/// use offload::Offload;
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// let x = dev.upload(&[1.0f32, 2.0, 3.0, 4.0])?;      // host → device
/// assert_eq!(x.len(), 4);
/// assert_eq!(x.to_vec()?, [1.0, 2.0, 3.0, 4.0]);     // device → host
/// x.slice(1..3).write(&[20.0, 30.0])?;               // a view of elements 1 and 2
/// assert_eq!(x.to_vec()?, [1.0, 20.0, 30.0, 4.0]);
/// let zeros = dev.alloc_zeros::<u32>(1024)?;
/// assert!(zeros.to_vec()?.iter().all(|&v| v == 0));
/// # Ok::<(), offload::Error>(())
/// ```
pub struct TypedBuffer<T: Pod> {
    buffer: Buffer,
    _element: PhantomData<fn() -> T>,
}

/// Elements `start..start + len` of a [`TypedBuffer`], borrowed: copies in and out, and a
/// kernel argument (the kernel sees the address of element `start`).
///
/// ```
/// # use offload::Offload;
/// # let rt = Offload::init()?;
/// # let dev = rt.devices()?.remove(0);
/// let buf = dev.upload(&[0u32; 8])?;
/// let tail = buf.slice(4..);
/// assert_eq!(tail.len(), 4);
/// tail.write(&[1, 2, 3, 4])?;
/// assert_eq!(buf.to_vec()?, [0, 0, 0, 0, 1, 2, 3, 4]);
/// # Ok::<(), offload::Error>(())
/// ```
pub struct BufferView<'a, T: Pod> {
    buffer: &'a Buffer,
    start: usize,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

fn size_of<T>() -> usize {
    std::mem::size_of::<T>()
}

/// Bytes of `n` elements of `T`, or an error naming the call.
fn bytes_of<T>(call: &'static str, n: usize) -> Result<usize> {
    n.checked_mul(size_of::<T>()).ok_or_else(|| {
        Error::invalid(
            call,
            format!("{n} elements of {} bytes overflow usize", size_of::<T>()),
        )
    })
}

/// The bytes `(offset, len)` of elements `start..start + n` of `buffer` (elements of `T`),
/// once they are checked to lie in it; the error names `call` and the elements. The one
/// range check of the typed calls and views.
fn element_bytes<T>(
    call: &'static str,
    buffer: &Buffer,
    start: usize,
    n: usize,
) -> Result<(usize, usize)> {
    let offset = bytes_of::<T>(call, start)?;
    let len = bytes_of::<T>(call, n)?;
    let elements = buffer.len() / size_of::<T>();
    if start.checked_add(n).is_none_or(|end| end > elements) {
        return Err(Error::invalid(
            call,
            format!(
                "elements {start}..{} are outside {elements} × {} in {buffer}",
                start as u128 + n as u128,
                std::any::type_name::<T>(),
            ),
        ));
    }
    Ok((offset, len))
}

impl Device {
    /// Allocates `len` elements of `T` in device memory, set to zero.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let counts = dev.alloc_zeros::<u64>(16)?;
    /// assert_eq!(counts.to_vec()?, vec![0u64; 16]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn alloc_zeros<T: Pod>(&self, len: usize) -> Result<TypedBuffer<T>> {
        self.alloc_zeros_in(len, MemKind::Device)
    }

    /// Allocates `len` elements of `T` in memory of `kind`, set to zero.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let staging = dev.alloc_zeros_in::<f32>(256, offload::MemKind::Host)?;
    /// assert_eq!(staging.as_bytes().kind(), offload::MemKind::Host);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn alloc_zeros_in<T: Pod>(&self, len: usize, kind: MemKind) -> Result<TypedBuffer<T>> {
        const CALL: &str = "Device::alloc_zeros";
        if size_of::<T>() == 0 {
            return Err(Error::invalid(CALL, "a zero-sized element type"));
        }
        let bytes = bytes_of::<T>(CALL, len)?;
        let buffer = self.alloc(bytes, kind)?;
        buffer.fill(0, bytes, 0)?;
        Ok(TypedBuffer {
            buffer,
            _element: PhantomData,
        })
    }

    /// Allocates device memory for `data` and copies it there (cudarc's `memcpy_stod`).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let weights = dev.upload(&[0.5f64, 0.25])?.label("weights");
    /// assert_eq!(weights.to_vec()?, [0.5, 0.25]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn upload<T: Pod>(&self, data: &[T]) -> Result<TypedBuffer<T>> {
        const CALL: &str = "Device::upload";
        if size_of::<T>() == 0 {
            return Err(Error::invalid(CALL, "a zero-sized element type"));
        }
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buffer = self.alloc(bytes.len(), MemKind::Device)?;
        buffer.write(0, bytes)?;
        Ok(TypedBuffer {
            buffer,
            _element: PhantomData,
        })
    }
}

impl<T: Pod> TypedBuffer<T> {
    /// Views a byte buffer as elements of `T`; its size must be a whole number of them.
    ///
    /// ```
    /// # use offload::{MemKind, TypedBuffer};
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let typed = TypedBuffer::<u32>::from_bytes(dev.alloc(16, MemKind::Device)?)?;
    /// assert_eq!(typed.len(), 4);
    /// assert!(TypedBuffer::<u32>::from_bytes(dev.alloc(6, MemKind::Device)?).is_err());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn from_bytes(buffer: Buffer) -> Result<TypedBuffer<T>> {
        let size = size_of::<T>();
        if size == 0 || buffer.len() % size != 0 {
            return Err(Error::invalid(
                "TypedBuffer::from_bytes",
                format!("{buffer} is not a whole number of {}-byte elements", size),
            ));
        }
        Ok(TypedBuffer {
            buffer,
            _element: PhantomData,
        })
    }

    /// Gives the label errors name this buffer by (see [`Buffer::label`]).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let x = dev.alloc_zeros::<f32>(4)?.label("x");
    /// assert_eq!(x.as_bytes().label_text().as_deref(), Some("x"));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn label(self, label: impl Into<String>) -> Self {
        TypedBuffer {
            buffer: self.buffer.label(label),
            _element: PhantomData,
        }
    }

    /// The number of elements.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.alloc_zeros::<u16>(10)?.len(), 10);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.buffer.len() / size_of::<T>()
    }

    /// Always false: offload never makes an empty buffer.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert!(!dev.alloc_zeros::<u8>(1)?.is_empty());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The byte buffer underneath.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.alloc_zeros::<u32>(4)?.as_bytes().len(), 16);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn as_bytes(&self) -> &Buffer {
        &self.buffer
    }

    /// The byte buffer underneath, by value.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let bytes = dev.upload(&[7u8, 8])?.into_bytes();
    /// assert_eq!(bytes.len(), 2);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn into_bytes(self) -> Buffer {
        self.buffer
    }

    /// All elements, copied to the host (cudarc's `memcpy_dtov`).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.upload(&[1i32, -1])?.to_vec()?, [1, -1]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.whole().to_vec_as("TypedBuffer::to_vec")
    }

    /// Copies elements starting at `start` into `dst`.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.upload(&[1u32, 2, 3])?;
    /// let mut two = [0u32; 2];
    /// buf.read(1, &mut two)?;
    /// assert_eq!(two, [2, 3]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn read(&self, start: usize, dst: &mut [T]) -> Result<()> {
        const CALL: &str = "TypedBuffer::read";
        let (at, _) = element_bytes::<T>(CALL, &self.buffer, start, dst.len())?;
        self.buffer.read_as(CALL, at, bytemuck::cast_slice_mut(dst))
    }

    /// Copies `src` into the buffer starting at element `start`.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc_zeros::<f32>(3)?;
    /// buf.write(1, &[5.0, 6.0])?;
    /// assert_eq!(buf.to_vec()?, [0.0, 5.0, 6.0]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn write(&self, start: usize, src: &[T]) -> Result<()> {
        const CALL: &str = "TypedBuffer::write";
        let (at, _) = element_bytes::<T>(CALL, &self.buffer, start, src.len())?;
        self.buffer.write_as(CALL, at, bytemuck::cast_slice(src))
    }

    /// A view of the elements in `range` (checked here: a range outside the buffer is
    /// `Error::InvalidArgument` at the first use of the view).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.upload(&[1u8, 2, 3, 4])?;
    /// assert_eq!(buf.slice(..2).to_vec()?, [1, 2]);
    /// assert!(buf.slice(3..9).to_vec().is_err());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn slice(&self, range: impl RangeBounds<usize>) -> BufferView<'_, T> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len(),
        };
        BufferView {
            buffer: &self.buffer,
            start,
            len: end.saturating_sub(start),
            _element: PhantomData,
        }
    }

    fn whole(&self) -> BufferView<'_, T> {
        self.slice(..)
    }

    /// Frees the memory now and reports errors (dropping frees it too).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// dev.alloc_zeros::<u32>(4)?.free()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn free(self) -> Result<()> {
        self.buffer.free()
    }
}

impl<T: Pod> BufferView<'_, T> {
    /// The number of elements.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.alloc_zeros::<u32>(8)?.slice(2..5).len(), 3);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no elements (a kernel refuses an empty one).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert!(dev.alloc_zeros::<u32>(8)?.slice(2..2).is_empty());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The view's bytes: (offset, len) in its buffer.
    fn byte_range(&self, call: &'static str) -> Result<(usize, usize)> {
        element_bytes::<T>(call, self.buffer, self.start, self.len)
    }

    /// The view's elements, copied to the host.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.upload(&[1u16, 2, 3])?.slice(1..).to_vec()?, [2, 3]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.to_vec_as("BufferView::to_vec")
    }

    /// [`BufferView::to_vec`] for the user's `call` (a typed buffer's `to_vec`).
    pub(crate) fn to_vec_as(&self, call: &'static str) -> Result<Vec<T>> {
        let (offset, _) = self.byte_range(call)?;
        let mut out = vec![T::zeroed(); self.len];
        self.buffer
            .read_as(call, offset, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Copies `src`, which must have the view's length, into the view.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc_zeros::<i64>(4)?;
    /// buf.slice(2..).write(&[-1, -2])?;
    /// assert!(buf.slice(2..).write(&[1]).is_err()); // wrong length
    /// assert_eq!(buf.to_vec()?, [0, 0, -1, -2]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn write(&self, src: &[T]) -> Result<()> {
        const CALL: &str = "BufferView::write";
        let (offset, _) = self.byte_range(CALL)?;
        if src.len() != self.len {
            return Err(Error::invalid(
                CALL,
                format!(
                    "{} elements given for a view of {} elements of {}",
                    src.len(),
                    self.len,
                    self.buffer
                ),
            ));
        }
        self.buffer
            .write_as(CALL, offset, bytemuck::cast_slice(src))
    }

    /// The view as a kernel argument (also `Arg::from(&view)`, or `&view` in `args!`).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let buf = dev.alloc_zeros::<u32>(8)?;
    /// assert!(matches!(buf.slice(4..).arg(), offload::Arg::Range { offset: 16, len: 16, .. }));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn arg(&self) -> Arg<'_> {
        Arg::from(self)
    }
}

impl<'a, T: Pod> From<&'a TypedBuffer<T>> for Arg<'a> {
    fn from(buffer: &'a TypedBuffer<T>) -> Self {
        Arg::Buffer(&buffer.buffer)
    }
}

impl<'a, T: Pod> From<&BufferView<'a, T>> for Arg<'a> {
    fn from(view: &BufferView<'a, T>) -> Self {
        // An out-of-range view becomes a range the launch refuses with the buffer's name.
        let size = size_of::<T>();
        Arg::Range {
            buffer: view.buffer,
            offset: view.start.saturating_mul(size),
            len: view.len.saturating_mul(size),
        }
    }
}

impl<'a, T: Pod> From<BufferView<'a, T>> for Arg<'a> {
    fn from(view: BufferView<'a, T>) -> Self {
        Arg::from(&view)
    }
}

impl<T: Pod> fmt::Debug for TypedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} × {} in {}",
            self.len(),
            std::any::type_name::<T>(),
            self.buffer
        )
    }
}

impl<T: Pod> fmt::Debug for BufferView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "elements {}..{} of {}",
            self.start,
            self.start as u128 + self.len as u128,
            self.buffer
        )
    }
}
