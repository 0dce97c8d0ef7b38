//! `Program`, `Module` and `Kernel` for Python, with Python `on_setup` / `on_teardown`
//! callables. Loads run without the GIL; the callbacks take it on whatever thread offload
//! runs them (L6), so 32 threads loading one program at once see one compile, one load and
//! one setup (P2, P3). A callable that raises makes the callback fail with the Python
//! exception's text (`CallbackError`).

use std::sync::Arc;

use offload::{Kernel, Module, ParamKind, Program, ScalarType, Source};
use pyo3::prelude::*;

use crate::calls::{Held, PythonCall, RtCell, blocking, check};
use crate::errors::{IntoPy, invalid};
use crate::objects::PyDevice;

/// Calls a Python callback from offload (any thread), with the module when it takes one.
fn call_back(
    f: &Py<PyAny>,
    module: &Module,
    cell: &Option<Arc<RtCell>>,
) -> Result<(), offload::CallbackError> {
    let Some(_call) = PythonCall::enter() else {
        return Err("the Python interpreter is exiting (or this is a forked child)".into());
    };
    Python::with_gil(|py| {
        let m = PyModule {
            inner: Held::new(module.clone()),
            cell: cell.clone(),
        };
        let out = match Py::new(py, m) {
            Ok(m) => f.call1(py, (m,)),
            Err(e) => Err(e),
        };
        out.map(|_| ())
            .map_err(|e| -> offload::CallbackError { e.to_string().into() })
    })
}

/// A device-independent program (P1): an image, or source compiled at its first load.
#[pyclass(name = "Program", module = "offload", frozen)]
pub(crate) struct PyProgram {
    inner: Held<Program>,
}

fn build(
    program: Program,
    label: Option<String>,
    on_setup: Option<Py<PyAny>>,
    on_teardown: Option<Py<PyAny>>,
) -> Program {
    let mut p = program;
    if let Some(l) = label {
        p = p.label(l);
    }
    if let Some(f) = on_setup {
        p = p.on_setup(move |m| call_back(&f, m, &None));
    }
    if let Some(f) = on_teardown {
        p = p.on_teardown(move |m| call_back(&f, m, &None));
    }
    p
}

#[pymethods]
impl PyProgram {
    /// A program from an image (ELF for the host, SPIR-V, PTX, …); the bytes are copied.
    #[new]
    #[pyo3(signature = (image, *, label=None, on_setup=None, on_teardown=None))]
    fn new(
        image: &Bound<'_, PyAny>,
        label: Option<String>,
        on_setup: Option<Py<PyAny>>,
        on_teardown: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        check("Program")?;
        let bytes = crate::buffer::BorrowedBytes::new(image, "Program")?;
        // SAFETY: `bytes` keeps the exporter's view (and so these bytes) until it is dropped
        // below; Program::new copies them (P1).
        let image = unsafe { std::slice::from_raw_parts(bytes.addr() as *const u8, bytes.len()) };
        let p = Program::new(image);
        drop(bytes);
        Ok(PyProgram {
            inner: Held::new(build(p, label, on_setup, on_teardown)),
        })
    }

    /// A program from source: language "c" (host), "wgsl" (Vulkan) or "cuda" (CUDA C++).
    #[staticmethod]
    #[pyo3(signature = (text, language, *, label=None, on_setup=None, on_teardown=None))]
    fn from_source(
        text: String,
        language: &str,
        label: Option<String>,
        on_setup: Option<Py<PyAny>>,
        on_teardown: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        check("Program.from_source")?;
        let source = match language.to_ascii_lowercase().as_str() {
            "c" => Source::c(text),
            "wgsl" => Source::wgsl(text),
            "cuda" | "cuda c++" | "cu" => Source::cuda(text),
            other => {
                return Err(invalid(
                    "Program.from_source",
                    format!("language {other:?}; one of c, wgsl, cuda"),
                ));
            }
        };
        let p = Program::from_source(source);
        Ok(PyProgram {
            inner: Held::new(build(p, label, on_setup, on_teardown)),
        })
    }

    /// The module of the program on `device`: loaded once however many threads ask (P2),
    /// with the GIL released.
    fn load(&self, py: Python<'_>, device: &PyDevice) -> PyResult<PyModule> {
        check("Program.load")?;
        let dev = &*device.inner;
        let m = blocking(py, || self.inner.load(dev)).py_err()?;
        Ok(PyModule {
            inner: Held::new(m),
            cell: Some(device.cell.clone()),
        })
    }

    /// The program's id (one per program, shared by its clones).
    #[getter]
    fn id(&self) -> u64 {
        self.inner.id()
    }
}

/// A program loaded on one device.
#[pyclass(name = "Module", module = "offload", frozen)]
pub(crate) struct PyModule {
    inner: Held<Module>,
    /// The runtime reference this module holds (see `RtCell`); none for the module a
    /// setup or teardown callback is handed, which lives inside the runtime's own call.
    cell: Option<Arc<RtCell>>,
}

#[pymethods]
impl PyModule {
    /// The kernel `name` (`SymbolNotFoundError` lists the module's kernels).
    fn kernel(&self, py: Python<'_>, name: &str) -> PyResult<PyKernel> {
        check("Module.kernel")?;
        let k = blocking(py, || self.inner.kernel(name)).py_err()?;
        Ok(PyKernel::new(k, self.cell.clone()))
    }

    /// The module's kernel names.
    fn kernels(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        check("Module.kernels")?;
        blocking(py, || self.inner.kernels()).py_err()
    }

    /// Unloads the module now (its teardown runs once, P2/P3); every handle of it then
    /// raises. The program loads it again on its next `load`.
    fn unload(&self, py: Python<'_>) -> PyResult<()> {
        check("Module.unload")?;
        let m = (*self.inner).clone();
        blocking(py, move || m.unload()).py_err()
    }

    #[getter]
    fn id(&self) -> u64 {
        self.inner.id()
    }

    fn __eq__(&self, other: &Self) -> bool {
        *self.inner == *other.inner
    }

    fn __hash__(&self) -> u64 {
        self.inner.id()
    }

    fn __repr__(&self) -> String {
        format!("<offload.Module {}>", *self.inner)
    }
}

/// A kernel of a module, with the parameters it declares.
#[pyclass(name = "Kernel", module = "offload", frozen)]
pub(crate) struct PyKernel {
    pub(crate) inner: Held<Kernel>,
    pub(crate) params: Vec<ParamKind>,
    /// The runtime reference this kernel holds (see `RtCell`).
    _cell: Option<Arc<RtCell>>,
}

impl PyKernel {
    fn new(k: Kernel, cell: Option<Arc<RtCell>>) -> Self {
        let params = k.params().to_vec();
        PyKernel {
            inner: Held::new(k),
            params,
            _cell: cell,
        }
    }
}

/// A parameter's name in messages and `Kernel.params`.
pub(crate) fn param_name(p: &ParamKind) -> String {
    match p {
        ParamKind::Buffer => "buffer".into(),
        ParamKind::Typed(t) => t.name().into(),
        ParamKind::Scalar(n) => format!("scalar of {n} bytes"),
        ParamKind::Pod { name, size, .. } => format!("{name} ({size} bytes)"),
        ParamKind::Uniform => "uniform buffer".into(),
    }
}

#[pymethods]
impl PyKernel {
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// The declared parameters: "buffer", "u32", "f32", … .
    #[getter]
    fn params(&self) -> Vec<String> {
        self.params.iter().map(param_name).collect()
    }

    /// Whether offload checked the kernel's memory accesses (WGSL): such a kernel cannot
    /// reach outside its buffers.
    #[getter]
    fn is_verified(&self) -> bool {
        self.inner.is_verified()
    }

    fn __repr__(&self) -> String {
        format!(
            "<offload.Kernel {}({})>",
            self.inner.name(),
            self.params().join(", ")
        )
    }
}

/// The scalar types by struct format kind and size.
pub(crate) fn scalar_type(kind: char, size: usize) -> Option<ScalarType> {
    Some(match (kind, size) {
        ('u', 1) => ScalarType::U8,
        ('i', 1) => ScalarType::I8,
        ('u', 2) => ScalarType::U16,
        ('i', 2) => ScalarType::I16,
        ('u', 4) => ScalarType::U32,
        ('i', 4) => ScalarType::I32,
        ('u', 8) => ScalarType::U64,
        ('i', 8) => ScalarType::I64,
        ('f', 4) => ScalarType::F32,
        ('f', 8) => ScalarType::F64,
        _ => return None,
    })
}
