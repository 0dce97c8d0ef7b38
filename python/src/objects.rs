//! The runtime's and its devices' Python classes, `Offload` and `Device`: what each holds
//! (its runtime's reference, [`RtCell`], and the device). Every object made from them names
//! them, so they sit below buffers, queues and programs; their methods are runtime.rs's.

use std::sync::Arc;

use offload::Device;
use pyo3::prelude::*;

use crate::calls::{Held, RtCell};

/// The offload runtime: `with offload.Offload() as rt: ...` or `rt.shutdown()`.
#[pyclass(name = "Offload", module = "offload", frozen)]
pub(crate) struct PyOffload {
    pub(crate) cell: Arc<RtCell>,
}

/// A device of the runtime.
#[pyclass(name = "Device", module = "offload", frozen)]
pub(crate) struct PyDevice {
    pub(crate) inner: Held<Device>,
    pub(crate) cell: Arc<RtCell>,
}
