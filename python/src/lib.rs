//! The `offload` Python package's extension module (`offload._offload`): PyO3 bindings over
//! the `offload` crate, built as an abi3 wheel by maturin (python/pyproject.toml). The Python
//! side (python/offload/__init__.py) adds the NumPy helpers and the `atexit` drain.
//!
//! What crosses the boundary, and how (docs/python.md tells users):
//! - errors: `errors` maps `offload::Error` onto a class hierarchy, with the Rust message;
//! - the GIL and finalizers: `runtime` (released around every blocking call and every
//!   release of a handle; forked children never touch the inherited runtime);
//! - memory: `buffer` (buffer protocol and DLPack views pin what they view), `adopt`
//!   (another library's memory as a buffer);
//! - programs and callbacks: `program`; queues, launches and host functions: `queue`;
//!   endpoints: `ipc`; picklable handles for `multiprocessing`: `handle`.
//!
//! No Rust panic reaches Python as an abort: pyo3 turns a panic in a method into
//! `PanicException`, and the C callbacks (DLPack) catch unwinding themselves.

mod adopt;
mod buffer;
mod calls;
mod dlpack;
mod errors;
mod handle;
mod handle_service;
mod ipc;
mod objects;
mod program;
mod queue;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _offload(m: &Bound<'_, PyModule>) -> PyResult<()> {
    calls::watch_forks();
    errors::register(m)?;
    m.add_class::<objects::PyOffload>()?;
    m.add_class::<objects::PyDevice>()?;
    m.add_class::<runtime::PyDeviceInfo>()?;
    m.add_class::<buffer::PyBuffer>()?;
    m.add_class::<program::PyProgram>()?;
    m.add_class::<program::PyModule>()?;
    m.add_class::<program::PyKernel>()?;
    m.add_class::<queue::PyQueue>()?;
    m.add_class::<queue::PyEvent>()?;
    m.add_class::<ipc::PyEndpoint>()?;
    m.add_class::<handle_service::PyIpcHandle>()?;
    m.add_function(wrap_pyfunction!(runtime::_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_after_fork_child, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::compile_stats, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::take_unreported_errors, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::host_stats, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::ipc_stats, m)?)?;
    Ok(())
}
