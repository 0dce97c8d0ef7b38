//! The Python exception hierarchy mirroring `offload::Error`: one class per variant under
//! `OffloadError`, each raised with the Rust message (`str(e)` is `e.to_string()` of the
//! Rust error), plus `ForkedError` for a runtime inherited through `fork()`.
//!
//! It owns the mapping only; it calls nothing in the runtime.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyList;

create_exception!(
    offload,
    OffloadError,
    PyException,
    "Base of every offload error."
);
create_exception!(
    offload,
    ShutDownError,
    OffloadError,
    "The handle's runtime was shut down (L3)."
);
create_exception!(
    offload,
    InvalidBinaryError,
    OffloadError,
    "A corrupt or foreign image (P4)."
);
create_exception!(
    offload,
    SymbolNotFoundError,
    OffloadError,
    "A kernel or global the module lacks."
);
create_exception!(
    offload,
    OutOfMemoryError,
    OffloadError,
    "An allocation the device refused."
);
create_exception!(
    offload,
    InvalidArgumentError,
    OffloadError,
    "A wrong argument, named in the message."
);
create_exception!(
    offload,
    InvalidIpcHandleError,
    OffloadError,
    "A forged, stale or foreign IPC handle (I1)."
);
create_exception!(
    offload,
    CallbackError,
    OffloadError,
    "A setup, teardown or host function failed."
);
create_exception!(
    offload,
    MultipleError,
    OffloadError,
    "Several errors; `.errors` holds them."
);
create_exception!(
    offload,
    DriverNotFoundError,
    OffloadError,
    "The backend's driver library is missing."
);
create_exception!(
    offload,
    NoDeviceError,
    OffloadError,
    "The driver loaded and found no device."
);
create_exception!(
    offload,
    UnsupportedError,
    OffloadError,
    "The backend or this package cannot do it."
);
create_exception!(
    offload,
    IpcError,
    OffloadError,
    "A peer gone, cut off or too slow."
);
create_exception!(
    offload,
    QuarantinedError,
    OffloadError,
    "Freed IPC memory a live peer still maps (I3)."
);
create_exception!(
    offload,
    CompileError,
    OffloadError,
    "A compile failed; the message holds the log."
);
create_exception!(
    offload,
    DriverError,
    OffloadError,
    "A driver call failed; `.code` holds its status."
);
create_exception!(
    offload,
    ForkedError,
    OffloadError,
    "The runtime was inherited through fork(): it cannot be used in the child."
);

create_exception!(
    offload,
    OutOfBoundsError,
    OffloadError,
    "A bounds-checked kernel indexed past an array of one of its buffers (the access was \
     not made); `.kernel`, `.argument`, `.binding`, `.index`, `.length`, `.access` say where."
);

/// The name Python calls `call` by: the package's classes and methods are the Rust ones,
/// `Type::method` written `Type.method`; the runtime's start (`Offload::init`, the
/// builder's `Offload::start` and its check of `Offload::backends`) is the `Offload()`
/// constructor.
/// Each distinct name is made once and kept for the process (the set is the API's calls).
fn python_name(call: &'static str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashMap<&'static str, &'static str>>> = Mutex::new(None);
    if !call.contains("::") {
        return call;
    }
    if matches!(
        call,
        "Offload::init" | "Offload::start" | "Offload::backends"
    ) {
        return "Offload";
    }
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    names
        .get_or_insert_with(HashMap::new)
        .entry(call)
        .or_insert_with(|| Box::leak(call.replace("::", ".").into_boxed_str()))
}

/// The Python exception for `e`, with its message in Python's words (`Buffer.read`, "a new
/// offload.Offload()"); `Multiple` carries `.errors` and `Driver` carries `.code`.
pub(crate) fn to_py(e: offload::Error) -> PyErr {
    use offload::Error as E;
    let e = e.in_words_of(offload::Caller::Python, python_name);
    let msg = e.to_string();
    let err = match &e {
        E::ShutDown { .. } => ShutDownError::new_err(msg),
        E::InvalidBinary { .. } => InvalidBinaryError::new_err(msg),
        E::SymbolNotFound { .. } => SymbolNotFoundError::new_err(msg),
        E::OutOfMemory { .. } => OutOfMemoryError::new_err(msg),
        E::InvalidArgument { .. } => InvalidArgumentError::new_err(msg),
        E::InvalidIpcHandle { .. } => InvalidIpcHandleError::new_err(msg),
        E::Callback { .. } => CallbackError::new_err(msg),
        E::Multiple(_) => MultipleError::new_err(msg),
        E::DriverNotFound { .. } => DriverNotFoundError::new_err(msg),
        E::NoDevice { .. } => NoDeviceError::new_err(msg),
        E::Unsupported { .. } => UnsupportedError::new_err(msg),
        E::Ipc { .. } => IpcError::new_err(msg),
        E::Quarantined { .. } => QuarantinedError::new_err(msg),
        E::Compile { .. } => CompileError::new_err(msg),
        E::Driver { .. } => DriverError::new_err(msg),
        E::Forked { .. } => ForkedError::new_err(msg),
        E::OutOfBounds { .. } => OutOfBoundsError::new_err(msg),
        _ => OffloadError::new_err(msg),
    };
    Python::with_gil(|py| {
        let value = err.value(py);
        match e {
            E::Multiple(errors) => {
                let list: Vec<PyObject> = errors
                    .into_iter()
                    .map(|inner| to_py(inner).into_value(py).into_any())
                    .collect();
                if let Ok(list) = PyList::new(py, list) {
                    // An extra attribute: without it the exception still carries its message.
                    let _ = value.setattr("errors", list);
                }
            }
            E::Driver { code, .. } => {
                // An extra attribute: without it the exception still carries its message.
                let _ = value.setattr("code", code);
            }
            E::OutOfBounds {
                kernel,
                argument,
                binding,
                index,
                length,
                access,
                ..
            } => {
                // Extra attributes: without them the exception still carries its message.
                let _ = value.setattr("kernel", kernel);
                let _ = value.setattr("argument", argument);
                let _ = value.setattr("binding", binding);
                let _ = value.setattr("index", index);
                let _ = value.setattr("length", length);
                let _ = value.setattr("access", access);
            }
            _ => {}
        }
    });
    err
}

/// `Result<T, offload::Error>` → `PyResult<T>`.
pub(crate) trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for offload::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// An `InvalidArgumentError` for `call`, worded like the Rust ones.
pub(crate) fn invalid(call: &str, reason: impl std::fmt::Display) -> PyErr {
    InvalidArgumentError::new_err(format!("{call}: invalid argument: {reason}"))
}

/// Adds the classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("OffloadError", py.get_type::<OffloadError>())?;
    m.add("ShutDownError", py.get_type::<ShutDownError>())?;
    m.add("InvalidBinaryError", py.get_type::<InvalidBinaryError>())?;
    m.add("SymbolNotFoundError", py.get_type::<SymbolNotFoundError>())?;
    m.add("OutOfMemoryError", py.get_type::<OutOfMemoryError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add(
        "InvalidIpcHandleError",
        py.get_type::<InvalidIpcHandleError>(),
    )?;
    m.add("CallbackError", py.get_type::<CallbackError>())?;
    m.add("MultipleError", py.get_type::<MultipleError>())?;
    m.add("DriverNotFoundError", py.get_type::<DriverNotFoundError>())?;
    m.add("NoDeviceError", py.get_type::<NoDeviceError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("IpcError", py.get_type::<IpcError>())?;
    m.add("QuarantinedError", py.get_type::<QuarantinedError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("DriverError", py.get_type::<DriverError>())?;
    m.add("ForkedError", py.get_type::<ForkedError>())?;
    m.add("OutOfBoundsError", py.get_type::<OutOfBoundsError>())?;
    Ok(())
}
