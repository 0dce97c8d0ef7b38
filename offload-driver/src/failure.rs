//! How a driver's failures read as offload errors: one mapping each for a driver that
//! cannot be used ([`LoadError`], [`driver_not_found`]) and a failed call ([`Failure`]).
//! This module owns no state.

use std::fmt;

use offload_core::{BackendKind, Error};

/// Why a driver library cannot be used: no name loaded, or the one that did lacks a
/// required symbol.
///
/// ```
/// use offload_core::BackendKind;
/// use offload_driver::LoadError;
/// let e = LoadError { library: "libcuda.so.1".into(), reason: "missing symbol cuInit".into() };
/// assert!(
///     e.into_error(BackendKind::Cuda)
///         .to_string()
///         .starts_with("cuda: driver not found: libcuda.so.1 (missing symbol cuInit); install")
/// );
/// ```
#[derive(Debug)]
pub struct LoadError {
    /// The library (or the names, `a, b`) that were looked for.
    pub library: String,
    /// What the dynamic loader said (for each name, `…; …`), or `missing symbol X`.
    pub reason: String,
}

impl LoadError {
    /// `Error::DriverNotFound` for backend `kind`.
    ///
    /// ```
    /// use offload_core::{BackendKind, Error};
    /// let e = offload_driver::LoadError { library: "l".into(), reason: "r".into() };
    /// assert!(matches!(e.into_error(BackendKind::Hip), Error::DriverNotFound { .. }));
    /// ```
    pub fn into_error(self, kind: BackendKind) -> Error {
        driver_not_found(kind, self.library, self.reason)
    }
}

/// No usable driver for `kind`: `reason` says which step found that (the dynamic loader's
/// message, a missing symbol, or the driver call and its code).
///
/// ```
/// use offload_core::BackendKind;
/// let e = offload_driver::driver_not_found(BackendKind::Ze, "libze_loader.so.1", "zeDriverGet: 0 drivers");
/// assert!(e.to_string().starts_with("ze: driver not found: libze_loader.so.1 (zeDriverGet: 0 drivers)"));
/// ```
pub fn driver_not_found(
    kind: BackendKind,
    library: impl Into<String>,
    reason: impl Into<String>,
) -> Error {
    Error::DriverNotFound {
        backend: kind,
        library: library.into(),
        reason: reason.into(),
        caller: offload_core::Caller::Rust,
    }
}

/// The driver of `kind` loaded and initialised, but found no device: `reason` names the
/// call and code that said so.
///
/// ```
/// use offload_core::{BackendKind, Error};
/// let e = offload_driver::no_device(BackendKind::Hip, "libamdhip64.so.5", "hipGetDeviceCount: hipErrorNoDevice (100)");
/// assert!(matches!(e, Error::NoDevice { .. }));
/// assert!(e.to_string().starts_with("hip: no device: libamdhip64.so.5 loaded, but hipGetDeviceCount"));
/// ```
pub fn no_device(
    kind: BackendKind,
    library: impl Into<String>,
    reason: impl Into<String>,
) -> Error {
    Error::NoDevice {
        backend: kind,
        library: library.into(),
        reason: reason.into(),
    }
}

/// A driver call that failed: the entry point, its code, the code's name, and the
/// driver's description of it where it gives one.
///
/// ```
/// let f = offload_driver::Failure::new("cuInit", 100, "CUDA_ERROR_NO_DEVICE");
/// assert_eq!(f.to_string(), "cuInit: CUDA_ERROR_NO_DEVICE (100)");
/// let f = offload_driver::Failure::new("zeInit", 0x7800_0001, "ZE_RESULT_ERROR_UNINITIALIZED").hex();
/// assert_eq!(f.to_string(), "zeInit: ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)");
/// ```
#[derive(Clone, Debug)]
pub struct Failure {
    /// The entry point (`cuInit`, …).
    pub function: &'static str,
    /// The status code it returned.
    pub code: i64,
    /// The code's name (`CUDA_ERROR_NO_DEVICE`), or `unknown <type>`.
    pub name: String,
    /// The driver's description of the code, where it gives one.
    pub description: Option<String>,
    /// Whether the code reads in hexadecimal (Level Zero's codes are bit patterns).
    hex: bool,
}

impl Failure {
    /// `function` returned `code`, which is called `name`.
    ///
    /// ```
    /// let f = offload_driver::Failure::new("hipInit", 101, "hipErrorInvalidDevice");
    /// assert_eq!((f.function, f.code, f.description), ("hipInit", 101, None));
    /// ```
    pub fn new(function: &'static str, code: impl Into<i64>, name: impl Into<String>) -> Self {
        Failure {
            function,
            code: code.into(),
            name: name.into(),
            description: None,
            hex: false,
        }
    }

    /// The same failure with the driver's description of the code, where it has one.
    ///
    /// ```
    /// let f = offload_driver::Failure::new("cuInit", 999, "CUDA_ERROR_UNKNOWN")
    ///     .with_description(Some("unknown error".into()));
    /// assert_eq!(f.message(), "cuInit: CUDA_ERROR_UNKNOWN (999): unknown error");
    /// ```
    pub fn with_description(mut self, description: Option<String>) -> Self {
        self.description = description;
        self
    }

    /// The same failure, its code shown in hexadecimal.
    ///
    /// ```
    /// let f = offload_driver::Failure::new("zeInit", 0x7fff_fffe_u32, "ZE_RESULT_ERROR_UNKNOWN").hex();
    /// assert!(f.to_string().ends_with("(0x7ffffffe)"));
    /// ```
    pub fn hex(mut self) -> Self {
        self.hex = true;
        self
    }

    /// The failure with the driver's description: `cuInit: CUDA_ERROR_NO_DEVICE (100): no
    /// CUDA-capable device is detected`.
    ///
    /// ```
    /// let f = offload_driver::Failure::new("cuInit", 100, "CUDA_ERROR_NO_DEVICE");
    /// assert_eq!(f.message(), f.to_string());
    /// ```
    pub fn message(&self) -> String {
        match &self.description {
            Some(description) => format!("{self}: {description}"),
            None => self.to_string(),
        }
    }

    /// The one mapping from a failed driver call to an offload error, for `call` (empty in a
    /// backend: the handle of the user's call names it): an `Error::Driver` with the code
    /// kept as data.
    ///
    /// ```
    /// use offload_core::{BackendKind, Error};
    /// let f = offload_driver::Failure::new("cuDeviceGetName", 101, "CUDA_ERROR_INVALID_DEVICE");
    /// let e = f.into_error(BackendKind::Cuda, "");
    /// assert!(matches!(e, Error::Driver { code: 101, call: "", .. }));
    /// ```
    pub fn into_error(self, kind: BackendKind, call: &'static str) -> Error {
        Error::Driver {
            backend: kind,
            call,
            code: self.code,
            message: self.message(),
        }
    }
}

impl fmt::Display for Failure {
    /// `cuInit: CUDA_ERROR_NO_DEVICE (100)`, or `zeInit: … (0x78000001)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hex {
            write!(f, "{}: {} ({:#x})", self.function, self.name, self.code)
        } else {
            write!(f, "{}: {} ({})", self.function, self.name, self.code)
        }
    }
}
