//! `Queue` and `Event` for Python: launches with arguments converted by the kernel's declared
//! parameters (and then checked by offload itself, so a mismatch reads as it does in Rust),
//! and Python host functions (Q1).
//!
//! A host function runs on a thread of offload's (L6) and takes the GIL there; every call
//! that waits for the queue releases the GIL first, so the two never wait for each other. An
//! exception raised by a host function is kept and raised by the queue's next `sync()` as
//! `CallbackError` (with the exception as its cause), like a Rust host function's panic.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use offload::{Arg, Buffer, Dims, Event, ParamKind, Queue, ScalarType};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyTuple};

use crate::buffer::{BorrowedBytes, PyBuffer};
use crate::calls::{Held, PythonCall, RtCell, blocking, check, lock};
use crate::errors::{IntoPy, invalid};
use crate::program::{PyKernel, scalar_type};

/// A queue of in-order, asynchronous work on one device.
#[pyclass(name = "Queue", module = "offload", frozen)]
pub(crate) struct PyQueue {
    inner: Held<Queue>,
    /// Exceptions raised by this queue's host functions: the `__cause__` of the
    /// `CallbackError` the next `sync` raises. The error itself travels in the runtime, so
    /// that a queue nobody syncs still delivers it (L8: to the next shutdown, or printed at
    /// exit).
    errors: Arc<Mutex<Vec<PyErr>>>,
    /// The runtime reference this queue holds (see `RtCell`).
    cell: Arc<RtCell>,
}

impl PyQueue {
    pub(crate) fn new(q: Queue, cell: Arc<RtCell>) -> Self {
        PyQueue {
            inner: Held::new(q),
            errors: Arc::new(Mutex::new(Vec::new())),
            cell,
        }
    }

    /// The runtime's answer to a sync, with the first exception a host function raised as
    /// the `__cause__` of its `CallbackError` (the others are in its message).
    fn synced(&self, py: Python<'_>, out: offload::Result<()>) -> PyResult<()> {
        let callback = matches!(out, Err(offload::Error::Callback { .. }));
        let err = match out {
            Ok(()) => return Ok(()),
            Err(e) => crate::errors::to_py(e),
        };
        if callback {
            let first = std::mem::take(&mut *lock(&self.errors)).into_iter().next();
            if let Some(cause) = first {
                err.set_cause(py, Some(cause));
            }
        }
        Err(err)
    }
}

/// One launch argument, converted but not yet borrowed.
enum Value {
    Buffer(usize),
    /// A buffer bound as a uniform buffer (a `var<uniform>` parameter).
    Uniform(usize),
    /// The bytes of a vector, matrix, array or struct value (`Arg::Pod`): `what` names the
    /// Python value in messages; `elem` is its element type where it has one.
    Pod {
        bytes: Vec<u8>,
        what: &'static str,
        elem: Option<ScalarType>,
    },
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Value {
    fn arg<'a>(&'a self, buffers: &'a [&'a Buffer]) -> Option<Arg<'a>> {
        Some(match *self {
            Value::Buffer(i) => Arg::buffer(buffers.get(i)?),
            Value::Uniform(i) => Arg::uniform(*buffers.get(i)?),
            Value::Pod {
                ref bytes,
                what,
                elem,
            } => Arg::Pod {
                bytes,
                type_name: what,
                elem,
            },
            Value::U8(v) => Arg::value(v),
            Value::I8(v) => Arg::value(v),
            Value::U16(v) => Arg::value(v),
            Value::I16(v) => Arg::value(v),
            Value::U32(v) => Arg::value(v),
            Value::I32(v) => Arg::value(v),
            Value::U64(v) => Arg::value(v),
            Value::I64(v) => Arg::value(v),
            Value::F32(v) => Arg::value(v),
            Value::F64(v) => Arg::value(v),
        })
    }
}

/// `obj` as a scalar of type `t`; `None` when its value does not fit.
fn scalar_as(obj: &Bound<'_, PyAny>, t: ScalarType) -> Option<Value> {
    Some(match t {
        ScalarType::U8 => Value::U8(obj.extract().ok()?),
        ScalarType::I8 => Value::I8(obj.extract().ok()?),
        ScalarType::U16 => Value::U16(obj.extract().ok()?),
        ScalarType::I16 => Value::I16(obj.extract().ok()?),
        ScalarType::U32 => Value::U32(obj.extract().ok()?),
        ScalarType::I32 => Value::I32(obj.extract().ok()?),
        ScalarType::U64 => Value::U64(obj.extract().ok()?),
        ScalarType::I64 => Value::I64(obj.extract().ok()?),
        ScalarType::F32 => Value::F32(obj.extract::<f64>().ok()? as f32),
        ScalarType::F64 => Value::F64(obj.extract().ok()?),
        _ => return None,
    })
}

/// The native bytes of a scalar value.
fn scalar_bytes(v: &Value) -> Vec<u8> {
    match *v {
        Value::U8(x) => x.to_ne_bytes().to_vec(),
        Value::I8(x) => x.to_ne_bytes().to_vec(),
        Value::U16(x) => x.to_ne_bytes().to_vec(),
        Value::I16(x) => x.to_ne_bytes().to_vec(),
        Value::U32(x) => x.to_ne_bytes().to_vec(),
        Value::I32(x) => x.to_ne_bytes().to_vec(),
        Value::U64(x) => x.to_ne_bytes().to_vec(),
        Value::I64(x) => x.to_ne_bytes().to_vec(),
        Value::F32(x) => x.to_ne_bytes().to_vec(),
        Value::F64(x) => x.to_ne_bytes().to_vec(),
        Value::Buffer(_) | Value::Uniform(_) | Value::Pod { .. } => Vec::new(),
    }
}

/// Whether `obj` (which has a dtype) is a NumPy array with dimensions, not a NumPy scalar.
fn is_array(obj: &Bound<'_, PyAny>) -> bool {
    obj.getattr("ndim")
        .and_then(|d| d.extract::<usize>())
        .is_ok_and(|d| d > 0)
}

/// The value of a vector, matrix, array or struct parameter (`ParamKind::Pod`) from Python:
/// a tuple or list of numbers (each of the parameter's element type), `bytes`-like
/// contents, or a NumPy array or (structured) scalar, whose bytes are taken. The size and
/// element type are checked by offload, which names the parameter's type.
fn pod_value(
    call: &str,
    at: &str,
    obj: &Bound<'_, PyAny>,
    name: &str,
    elem: Option<ScalarType>,
) -> PyResult<Value> {
    if obj.is_instance_of::<pyo3::types::PyTuple>() || obj.is_instance_of::<pyo3::types::PyList>() {
        let Some(t) = elem else {
            return Err(invalid(
                call,
                format!(
                    "{at} is a {name} whose members have different types: pass its bytes \
                     (`bytes`, or a NumPy scalar of a structured dtype)"
                ),
            ));
        };
        let mut bytes = Vec::new();
        for item in obj.try_iter()? {
            let item = item?;
            let v = scalar_as(&item, t).ok_or_else(|| {
                invalid(
                    call,
                    format!("{at} is a {name}: its element {item} is not a {}", t.name()),
                )
            })?;
            bytes.extend(scalar_bytes(&v));
        }
        return Ok(Value::Pod {
            bytes,
            what: "a tuple",
            elem: Some(t),
        });
    }
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Ok(Value::Pod {
            bytes: b.as_bytes().to_vec(),
            what: "bytes",
            elem: None,
        });
    }
    if obj.is_instance_of::<pyo3::types::PyByteArray>()
        || obj.is_instance_of::<pyo3::types::PyMemoryView>()
    {
        // bytes(obj): the contents, copied.
        let bytes: Vec<u8> = obj.py().get_type::<PyBytes>().call1((obj,))?.extract()?;
        return Ok(Value::Pod {
            bytes,
            what: "bytes",
            elem: None,
        });
    }
    if let Ok(dtype) = obj.getattr("dtype") {
        let bytes: Vec<u8> = obj.call_method0("tobytes")?.extract()?;
        // A plain numeric dtype names the element type; a structured one does not.
        let plain = dtype.getattr("fields").is_ok_and(|f| f.is_none());
        let elem = if plain {
            let kind: String = dtype.getattr("kind")?.extract()?;
            let size: usize = dtype.getattr("itemsize")?.extract()?;
            scalar_type(kind.chars().next().unwrap_or('?'), size)
        } else {
            None
        };
        return Ok(Value::Pod {
            bytes,
            what: "a NumPy value",
            elem,
        });
    }
    Err(invalid(
        call,
        format!(
            "{at} is a {name}: pass a tuple of its elements, its bytes, or a NumPy value; got {}",
            obj.get_type()
                .name()
                .map(|s| s.to_string())
                .unwrap_or_default()
        ),
    ))
}

fn is_int(t: ScalarType) -> bool {
    !matches!(t, ScalarType::F32 | ScalarType::F64)
}

/// Converts the Python arguments: a `Buffer` is a buffer; a NumPy scalar keeps its own type;
/// a Python int or float takes the declared type where it fits it, else its natural type
/// (i64, f64), which offload's check then refuses in its own words.
fn convert<'py>(
    call: &str,
    kernel: &PyKernel,
    args: &Bound<'py, PyTuple>,
    buffers: &mut Vec<Bound<'py, PyBuffer>>,
) -> PyResult<Vec<Value>> {
    let name = kernel.inner.name();
    let mut out = Vec::with_capacity(args.len());
    for (i, obj) in args.iter().enumerate() {
        let declared = kernel.params.get(i);
        let n = i + 1;
        if let Ok(b) = obj.downcast::<PyBuffer>() {
            out.push(if matches!(declared, Some(ParamKind::Uniform)) {
                Value::Uniform(buffers.len())
            } else {
                Value::Buffer(buffers.len())
            });
            buffers.push(b.clone());
            continue;
        }
        if let Some(ParamKind::Pod {
            name: type_name,
            elem,
            ..
        }) = declared
        {
            let at = format!("argument {n} of `{name}`");
            out.push(pod_value(call, &at, &obj, type_name, *elem)?);
            continue;
        }
        let does_not_fit = |t: &str| {
            invalid(
                call,
                format!(
                    "argument {n} of `{name}` is a {t}; got the Python number {obj}, which does not fit it"
                ),
            )
        };
        if obj.is_exact_instance_of::<PyInt>() || obj.is_exact_instance_of::<PyBool>() {
            let target = match declared {
                Some(ParamKind::Typed(t)) if is_int(*t) => Some(*t),
                Some(ParamKind::Scalar(size)) => {
                    let negative = obj.lt(0).unwrap_or(false);
                    scalar_type(if negative { 'i' } else { 'u' }, *size)
                }
                _ => None,
            };
            match target {
                Some(t) => out.push(scalar_as(&obj, t).ok_or_else(|| does_not_fit(t.name()))?),
                None => out.push(match obj.extract::<i64>() {
                    Ok(v) => Value::I64(v),
                    Err(_) => {
                        Value::U64(obj.extract().map_err(|_| does_not_fit("64-bit integer"))?)
                    }
                }),
            }
            continue;
        }
        if obj.is_exact_instance_of::<PyFloat>() {
            let v: f64 = obj.extract()?;
            out.push(match declared {
                Some(ParamKind::Typed(ScalarType::F32)) | Some(ParamKind::Scalar(4)) => {
                    Value::F32(v as f32)
                }
                _ => Value::F64(v),
            });
            continue;
        }
        // A NumPy scalar (or anything with a dtype): its own type, as `Arg::value::<T>`.
        if let Ok(dtype) = obj.getattr("dtype") {
            if is_array(&obj) {
                let at = format!("argument {n} of `{name}`");
                let wanted =
                    declared.map_or_else(|| "parameter".to_string(), crate::program::param_name);
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    if matches!(declared, Some(ParamKind::Buffer | ParamKind::Uniform)) {
                        format!(
                            "{call}: {at} is a {wanted}; got a NumPy array: upload it first \
                         (`buf = dev.upload(array)`) and pass the buffer"
                        )
                    } else {
                        format!("{call}: {at} is a {wanted}; got a NumPy array, not one value")
                    },
                ));
            }
            let kind: String = dtype.getattr("kind")?.extract()?;
            let size: usize = dtype.getattr("itemsize")?.extract()?;
            let kind = match kind.as_str() {
                "b" => 'u',
                k => k.chars().next().unwrap_or('?'),
            };
            let t = scalar_type(kind, size).ok_or_else(|| {
                invalid(
                    call,
                    format!(
                        "argument {n} of `{name}`: NumPy type {dtype} has no kernel scalar type"
                    ),
                )
            })?;
            let item = obj.call_method0("item")?;
            out.push(scalar_as(&item, t).ok_or_else(|| does_not_fit(t.name()))?);
            continue;
        }
        return Err(invalid(
            call,
            format!(
                "argument {n} of `{name}`: expected an offload.Buffer, a Python number or a \
                 NumPy scalar; got {}",
                obj.get_type()
                    .name()
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(out)
}

/// Three sizes from an int or a tuple of up to three ints.
fn dim3(call: &str, obj: &Bound<'_, PyAny>) -> PyResult<[u32; 3]> {
    if obj.is_instance_of::<PyInt>() {
        let n = obj
            .extract::<u32>()
            .map_err(|_| invalid(call, format!("dimension {obj}: a u32")))?;
        return Ok([n, 1, 1]);
    }
    let v: Vec<u32> = obj.extract().map_err(|_| {
        invalid(
            call,
            format!("dimensions {obj}: an int or a tuple of up to 3 ints"),
        )
    })?;
    if v.is_empty() || v.len() > 3 {
        return Err(invalid(call, format!("dimensions {obj}: 1 to 3 sizes")));
    }
    let mut out = [1u32; 3];
    out[..v.len()].copy_from_slice(&v);
    Ok(out)
}

/// `n` (elements: in blocks of the size `kernel` declares, if it declares one — what a
/// WGSL kernel runs with — else offload's default block size) or `(grid, block)`.
fn dims(
    call: &str,
    kernel: &offload::Kernel,
    obj: &Bound<'_, PyAny>,
    shared_memory: u32,
) -> PyResult<Dims> {
    // Type tests first: a failed extraction builds an exception, which costs microseconds.
    let d = if obj.is_instance_of::<PyInt>() {
        kernel.dims_for(
            obj.extract()
                .map_err(|_| invalid(call, format!("dims {obj}: a u32")))?,
        )
    } else if let Some((grid, block)) = obj
        .downcast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .and_then(|t| Some((t.get_item(0).ok()?, t.get_item(1).ok()?)))
    {
        Dims::grid(dim3(call, &grid)?).block(dim3(call, &block)?)
    } else {
        return Err(invalid(
            call,
            format!("dims {obj}: an element count, or (grid, block)"),
        ));
    };
    Ok(if shared_memory > 0 {
        d.shared_memory(shared_memory)
    } else {
        d
    })
}

/// Enqueues a launch. The buffers' locks are taken with the GIL released too: a launch may
/// wait (for room in the queue), and whoever it waits for may need the GIL.
fn launch_on(
    py: Python<'_>,
    q: &Queue,
    kernel: &PyKernel,
    dims: Dims,
    values: &[Value],
    buffers: &[Bound<'_, PyBuffer>],
) -> PyResult<()> {
    let buffers: Vec<&PyBuffer> = buffers.iter().map(|b| b.get()).collect();
    let k = &*kernel.inner;
    blocking(py, || {
        let guards: Vec<_> = buffers.iter().map(|b| b.guard()).collect();
        let mut bufs: Vec<&Buffer> = Vec::with_capacity(guards.len());
        for (g, buffer) in guards.iter().zip(&buffers) {
            match g.as_ref() {
                Some(b) => bufs.push(b),
                None => return Err(buffer.gone("Queue.launch")),
            }
        }
        let args: Vec<Arg<'_>> = values.iter().filter_map(|v| v.arg(&bufs)).collect();
        if k.is_verified() {
            // Python's `Queue.launch` is the call, whichever Rust call runs it.
            q.run(k, dims, &args)
                .map_err(|e| e.for_call(offload::Caller::Python, "Queue.launch"))
                .py_err()
        } else {
            // SAFETY: a kernel offload could not verify (host C, CUDA, SPIR-V images) is
            // native code: launching it from Python is the caller's promise that it stays
            // inside its buffers, exactly as `Queue::launch` is in Rust (docs/python.md says
            // so). Everything offload can check — the count, kind and type of each argument
            // — it still checks before anything runs (P4).
            unsafe { q.launch(k, dims, &args) }.py_err()
        }
    })
}

#[pymethods]
impl PyQueue {
    /// Enqueues `kernel` over `dims` (an element count, or `(grid, block)`) with `args`:
    /// buffers, Python numbers, NumPy scalars. Returns once enqueued (Q1).
    #[pyo3(signature = (kernel, dims, *args, shared_memory=0))]
    fn launch(
        &self,
        py: Python<'_>,
        kernel: &PyKernel,
        dims: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        shared_memory: u32,
    ) -> PyResult<()> {
        check("Queue.launch")?;
        let d = self::dims("Queue.launch", &kernel.inner, dims, shared_memory)?;
        let mut buffers = Vec::new();
        let values = convert("Queue.launch", kernel, args, &mut buffers)?;
        launch_on(py, &self.inner, kernel, d, &values, &buffers)
    }

    /// Waits for the queue's work, GIL released; raises the first exception a host function
    /// raised since the last sync, as `CallbackError`.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        check("Queue.sync")?;
        let out = blocking(py, || self.inner.sync());
        self.synced(py, out)
    }

    /// Whether the queue's work is done (never waits).
    fn is_idle(&self, py: Python<'_>) -> PyResult<bool> {
        check("Queue.is_idle")?;
        blocking(py, || self.inner.is_idle()).py_err()
    }

    /// Enqueues a Python callable, run in order with the queue's other work on a thread of
    /// offload's, holding the GIL. It may call offload (L6): syncing its own queue raises
    /// `InvalidArgumentError` there, anything else works.
    fn enqueue_host_fn(&self, py: Python<'_>, f: Py<PyAny>) -> PyResult<()> {
        check("Queue.enqueue_host_fn")?;
        let errors = self.errors.clone();
        let q = &*self.inner;
        blocking(py, move || {
            q.enqueue_host_fn(move || {
                let Some(_call) = PythonCall::enter() else {
                    // The interpreter is exiting (or this is a forked child): the callable
                    // cannot run, and its reference is released by pyo3 when it can be.
                    drop(f);
                    return;
                };
                let raised = Python::with_gil(|py| {
                    let raised = f.call0(py).err().map(|e| {
                        let text = format!("a host function raised {e}");
                        lock(&errors).push(e);
                        text
                    });
                    drop(f);
                    raised
                });
                if let Some(text) = raised {
                    // The runtime keeps it for the queue's next sync, or its drop and the
                    // next shutdown (L8); no panic message is printed.
                    std::panic::resume_unwind(Box::new(text));
                }
            })
        })
        .py_err()
    }

    /// An event at this point of the queue.
    fn record(&self, py: Python<'_>) -> PyResult<PyEvent> {
        check("Queue.record")?;
        let e = blocking(py, || self.inner.record()).py_err()?;
        Ok(PyEvent {
            inner: Held::new(e),
            _cell: self.cell.clone(),
        })
    }

    /// Orders the queue's later work after `event`.
    fn wait(&self, py: Python<'_>, event: &PyEvent) -> PyResult<()> {
        check("Queue.wait")?;
        let e = &*event.inner;
        blocking(py, || self.inner.wait(e)).py_err()
    }

    /// Enqueues a copy of `data` (any C-contiguous buffer-protocol object) into `buffer`.
    #[pyo3(signature = (buffer, data, offset=0))]
    fn write(
        &self,
        py: Python<'_>,
        buffer: &PyBuffer,
        data: &Bound<'_, PyAny>,
        offset: usize,
    ) -> PyResult<()> {
        check("Queue.write")?;
        let src = BorrowedBytes::new(data, "Queue.write")?;
        let (addr, len) = (src.addr(), src.len());
        let q = &*self.inner;
        buffer.with(py, "Queue.write", move |b| {
            // SAFETY: `src` holds the exporter's view until after this returns; the queue
            // copies the bytes before `write` returns.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            q.write(b, offset, bytes)
        })?;
        drop(src);
        Ok(())
    }

    /// Reads `nbytes` at `offset` of `buffer` after the queue's earlier work.
    fn read<'py>(
        &self,
        py: Python<'py>,
        buffer: &PyBuffer,
        offset: usize,
        nbytes: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        check("Queue.read")?;
        if nbytes > buffer.size_of() {
            return Err(invalid(
                "Queue.read",
                format!("{nbytes} bytes asked of a {}-byte buffer", buffer.size_of()),
            ));
        }
        let mut out = vec![0u8; nbytes];
        let q = &*self.inner;
        buffer.with(py, "Queue.read", |b| q.read(b, offset, &mut out))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Enqueues a fill of `nbytes` at `offset` with the repeated `pattern` (1, 2, 4 or 8 bytes).
    fn fill(
        &self,
        py: Python<'_>,
        buffer: &PyBuffer,
        offset: usize,
        nbytes: usize,
        pattern: Vec<u8>,
    ) -> PyResult<()> {
        check("Queue.fill")?;
        let q = &*self.inner;
        buffer.with(py, "Queue.fill", |b| q.fill(b, offset, nbytes, &pattern))
    }

    /// Enqueues a copy of `nbytes` from `src` at `src_offset` to `dst` at `dst_offset`.
    fn copy(
        &self,
        py: Python<'_>,
        src: &PyBuffer,
        src_offset: usize,
        dst: &PyBuffer,
        dst_offset: usize,
        nbytes: usize,
    ) -> PyResult<()> {
        check("Queue.copy")?;
        let q = &*self.inner;
        blocking(py, || {
            let (gs, gd) = (src.guard(), dst.guard());
            let (Some(s), Some(d)) = (gs.as_ref(), gd.as_ref()) else {
                let missing = if gs.is_none() { src } else { dst };
                return Err(missing.gone("Queue.copy"));
            };
            q.copy(s, src_offset, d, dst_offset, nbytes).py_err()
        })
    }

    /// Benchmark support: `iterations` launches of `kernel` over `dims` with no arguments,
    /// each followed by `sync`, timed in Rust (the same work the Python loop does, without
    /// Python); nanoseconds per launch + sync.
    fn _bench_launch_sync(
        &self,
        py: Python<'_>,
        kernel: &PyKernel,
        dims: &Bound<'_, PyAny>,
        iterations: u32,
    ) -> PyResult<f64> {
        check("Queue._bench_launch_sync")?;
        let d = self::dims("Queue._bench_launch_sync", &kernel.inner, dims, 0)?;
        let (q, k) = (&*self.inner, &*kernel.inner);
        blocking(py, || {
            let start = Instant::now();
            for _ in 0..iterations {
                // SAFETY: a benchmark kernel with no parameters touches no memory of ours
                // (the caller passes a kernel declared with none, which offload checks).
                unsafe { q.launch(k, d, &[])? };
                q.sync()?;
            }
            Ok(start.elapsed().as_nanos() as f64 / f64::from(iterations.max(1)))
        })
        .py_err()
    }

    fn __repr__(&self) -> String {
        format!("<offload.Queue {}>", *self.inner)
    }
}

/// A point in a queue's work.
#[pyclass(name = "Event", module = "offload", frozen)]
pub(crate) struct PyEvent {
    inner: Held<Event>,
    /// The runtime reference this event holds (see `RtCell`).
    _cell: Arc<RtCell>,
}

#[pymethods]
impl PyEvent {
    /// Waits for the work before the event, GIL released.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        check("Event.sync")?;
        blocking(py, || self.inner.sync()).py_err()
    }

    /// Whether the work before it is done (never waits).
    fn is_complete(&self, py: Python<'_>) -> PyResult<bool> {
        check("Event.is_complete")?;
        blocking(py, || self.inner.is_complete()).py_err()
    }

    /// Seconds between `start` and this event.
    fn elapsed_since(&self, py: Python<'_>, start: &PyEvent) -> PyResult<f64> {
        check("Event.elapsed_since")?;
        let s = &*start.inner;
        blocking(py, || self.inner.elapsed_since(s))
            .py_err()
            .map(|d| d.as_secs_f64())
    }
}
