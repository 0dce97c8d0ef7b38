//! The one error type of offload.
//!
//! Every variant says what went wrong in the user's terms: which backend, which call and
//! which object. A driver's own status code is kept as data (`Error::Driver::code`), never
//! only in a message. Backends leave `call` empty (or name their driver's call): the handle
//! of the user's call fills it in (`Error::in_call`), so the call an error names is the
//! user's. This module owns no state and must not grow backend-specific types.

use crate::vocab::types::BackendKind;

/// Result alias used throughout offload.
///
/// ```
/// fn check(len: usize) -> offload::Result<usize> {
///     if len == 0 {
///         return Err(offload::Error::InvalidArgument {
///             call: "check",
///             reason: "length is zero".into(),
///         });
///     }
///     Ok(len)
/// }
/// assert!(check(0).is_err());
/// assert_eq!(check(3).unwrap(), 3);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in offload.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a `_` arm.
///
/// ```
/// use offload::{BackendKind, Error};
/// let e = Error::OutOfMemory {
///     backend: BackendKind::Host,
///     call: "Device::alloc",
///     requested: 1 << 62,
///     reason: "larger than the device's 24 GiB".into(),
/// };
/// assert!(e.to_string().contains("host"));
/// assert!(e.to_string().contains("Device::alloc"));
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime generation that made this handle has been shut down (L3). The handle
    /// stays safe to drop; a new `Offload::init()` gives new handles.
    #[error("{}", shut_down_text(call, object, *caller))]
    ShutDown {
        /// The offload call that was made (empty when the runtime could not tell).
        call: &'static str,
        /// The handle it was made on, in the user's words (its label, or its kind and
        /// size); empty when the runtime could not tell.
        object: String,
        /// Whose call it was: the advice (how to make new handles) is in its words.
        caller: Caller,
    },

    /// A program image that the backend cannot load: corrupt, truncated or for another
    /// machine. `reason` says which check failed.
    #[error("{backend}: {}invalid binary: {reason}", at(call))]
    InvalidBinary {
        /// Backend that rejected the image.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// Which check failed.
        reason: String,
    },

    /// A kernel or global that the module does not contain.
    #[error("{backend}: {}symbol `{symbol}` not found{}", at(call), hint_text(.hint))]
    SymbolNotFound {
        /// Backend of the module.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// The name that was looked up.
        symbol: String,
        /// What the module has instead, or how to declare the symbol; empty if nothing.
        hint: String,
    },

    /// The device cannot provide the memory asked for.
    #[error(
        "{backend}: {}out of memory: {requested} bytes requested ({reason})",
        at(call)
    )]
    OutOfMemory {
        /// Backend of the device.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// Bytes asked for.
        requested: u64,
        /// Why it cannot be satisfied.
        reason: String,
    },

    /// An argument the call cannot accept (a zero size, a range outside a buffer, a buffer
    /// of another device, …). `reason` names the object.
    #[error("{}invalid argument: {reason}", at(call))]
    InvalidArgument {
        /// The offload call that was made.
        call: &'static str,
        /// What is wrong, naming the object.
        reason: String,
    },

    /// An IPC handle that is malformed, forged, or for another backend or process.
    #[error("{}{}invalid IPC handle: {reason}", backend_prefix(.backend), at(call))]
    InvalidIpcHandle {
        /// Backend asked to import it, or that its bytes name; `None` for bytes that are no
        /// backend's handle.
        backend: Option<BackendKind>,
        /// The offload call that was made.
        call: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// A bounds-checked kernel (WGSL on Vulkan) indexed past the end of an array in one of
    /// its buffer arguments. The access was not made (a read gave zero, a write or atomic
    /// was dropped), so no data outside the index's array changed; the device and the queue
    /// stay usable. Recorded on the device by the first such access and returned by the
    /// next `sync` of the queue that launched it; `more` counts the out-of-range accesses
    /// after it up to that sync.
    #[error("{}", out_of_bounds_text(self))]
    OutOfBounds {
        /// Backend that ran the kernel.
        backend: BackendKind,
        /// The offload call that reported it (a sync).
        call: &'static str,
        /// The kernel (entry point) that made the access.
        kernel: String,
        /// The kernel argument the array is in, numbered from 1 (0: not known).
        argument: usize,
        /// The binding of that argument in the kernel's source (`@binding(n)`).
        binding: u32,
        /// The index used (a negative signed index reads as a large unsigned one).
        index: u64,
        /// The array's length in elements, when the access was made.
        length: u64,
        /// `"read"`, `"write"` or `"atomic"`.
        access: &'static str,
        /// Out-of-range accesses after the first, up to the sync that reported it.
        more: u64,
    },

    /// A user callback (`on_setup`, `on_teardown`, …) returned an error.
    #[error("{callback} callback failed: {source}")]
    Callback {
        /// Which callback.
        callback: &'static str,
        /// The error it returned.
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Several steps failed (shutdown runs every step and returns all errors, L4).
    #[error("{} errors: {}", .0.len(), join(.0))]
    Multiple(Vec<Error>),

    /// The backend's driver library could not be opened, lacks a required symbol, or has
    /// no driver behind it (a loader without an installed driver).
    #[error("{}", driver_not_found_text(*backend, library, reason, *caller))]
    DriverNotFound {
        /// Backend whose driver is missing.
        backend: BackendKind,
        /// The library that was looked for.
        library: String,
        /// What the dynamic loader said.
        reason: String,
        /// Whose call it was: the advice (how to leave the backend out) is in its words.
        caller: Caller,
    },

    /// The backend's driver loaded and initialised but found no device it can use (a
    /// machine without that vendor's GPU, or one this process may not open).
    #[error(
        "{backend}: no device: {library} loaded, but {reason} (this machine has no {backend} \
         device this process can use; `offload-info` lists the devices offload finds)"
    )]
    NoDevice {
        /// Backend asked.
        backend: BackendKind,
        /// The driver library that loaded.
        library: String,
        /// What the driver said (its call and code).
        reason: String,
    },

    /// The backend cannot do this (not built in, or not supported by the device).
    #[error("{backend}: {}unsupported: {reason}", at(call))]
    Unsupported {
        /// Backend asked.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// Why it is unsupported.
        reason: String,
    },

    /// An IPC endpoint could not reach a peer, or a peer broke the protocol: the socket's
    /// error, a peer that exited or was disconnected, a wait that ran out of time.
    #[error("ipc: {}{reason}", at(call))]
    Ipc {
        /// The offload call that was made.
        call: &'static str,
        /// What happened, naming the peer or the socket.
        reason: String,
    },

    /// Exported memory was freed while a live process that mapped it had not acknowledged
    /// unmapping it within the unmap timeout (I3). The handle is gone; the memory is kept
    /// (quarantined, counted in `ipc::stats()`) and released when those processes answer or
    /// are seen dead, or at shutdown. Nothing is lost and nothing is unsafe: this reports a
    /// peer that is slow, stopped or stuck.
    #[error(
        "{backend}: {}{object} is quarantined: {peers} had not unmapped it after \
         {timeout_ms} ms; it is released when they answer or exit, or at shutdown",
        at(call)
    )]
    Quarantined {
        /// Backend of the memory.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// The buffer, in the user's words.
        object: String,
        /// The processes that had not answered (`pid 1234, pid 1240`).
        peers: String,
        /// How long the free waited.
        timeout_ms: u64,
    },

    /// Source did not compile, or its compiler is missing. `log` is the compiler's
    /// diagnostics (or what was looked for and not found).
    #[error("{backend}: {}{language} compile failed: {log}", at(call))]
    Compile {
        /// Backend whose compiler ran.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// The source language.
        language: crate::vocab::source::Language,
        /// The compiler's diagnostics, as it printed them.
        log: String,
    },

    /// The driver returned an error code that maps to no other variant.
    #[error("{backend}: {}driver error {code}: {message}", at(call))]
    Driver {
        /// Backend whose driver failed.
        backend: BackendKind,
        /// The offload call that was made.
        call: &'static str,
        /// The driver's own status code.
        code: i64,
        /// The driver's description of it, or the name of the code.
        message: String,
    },

    /// This process is a child forked from one that was running offload: the runtime's
    /// threads did not survive the fork, so no call can be served here (L9). Start offload
    /// in a fresh process (or fork before starting it, or `exec` after the fork).
    #[error(
        "{}this process (pid {pid}) was forked from one that was running offload; its \
         runtime's threads did not survive the fork, so no offload call can work in it: start \
         offload in a fresh process (fork before starting offload, or exec after the fork)",
        at(call)
    )]
    Forked {
        /// The offload call that was made.
        call: &'static str,
        /// This (the child's) process id.
        pid: u32,
    },
}

/// The language of the call an error is about: the advice an error gives (how to make new
/// handles after a shutdown, how to leave a backend out) is written in that language's
/// words. Rust's, unless the error was re-named for a call of another language's API by
/// [`Error::for_call`].
///
/// ```
/// use offload::{Caller, Error};
/// let gone = Error::ShutDown { call: "Buffer::read", object: "buffer".into(), caller: Caller::Rust };
/// assert!(gone.to_string().ends_with("make new ones from a new Offload::init()"));
/// assert_eq!(Caller::default(), Caller::Rust);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Caller {
    /// The Rust API (`Offload::init()`, `Buffer::read`).
    #[default]
    Rust,
    /// The C API (`offload_init()`, `offload_buffer_read`).
    C,
    /// The Python package (`offload.Offload()`, `Buffer.read`).
    Python,
    /// liboffload 22's C API, as offload-liboffload's `libLLVMOffload.so.22.1` offers it
    /// (`olInit()`, `olMemcpy`).
    Liboffload,
}

impl Caller {
    /// The caller's call that starts (or shares) the runtime: `Offload::init()`,
    /// `offload_init()`, `offload.Offload()`.
    pub(crate) fn init_call(self) -> &'static str {
        match self {
            Caller::Rust => "Offload::init()",
            Caller::C => "offload_init()",
            Caller::Python => "offload.Offload()",
            Caller::Liboffload => "olInit()",
        }
    }

    /// Where the caller names the backends to open, at the first init.
    pub(crate) fn backends_setting(self) -> &'static str {
        match self {
            Caller::Rust => "`Offload::builder().backends(..)`",
            Caller::C => "`offload_config_t`'s `backends`",
            Caller::Python => "`offload.Offload(backends=[...])`",
            // liboffload's olInit takes no configuration: the environment is the only setting.
            Caller::Liboffload => "which liboffload's olInit reads",
        }
    }

    /// That setting, asking for the host backend alone.
    pub(crate) fn host_backend_only(self) -> &'static str {
        match self {
            Caller::Rust => "`Offload::builder().backends([BackendKind::Host])`",
            Caller::C => "`offload_config_t`'s `backends = 1u << OFFLOAD_BACKEND_HOST`",
            Caller::Python => "`offload.Offload(backends=[\"host\"])`",
            Caller::Liboffload => "`OFFLOAD_BACKENDS=host`, which liboffload's olInit reads",
        }
    }

    /// What the caller holds of a runtime (each a reference, L1), and how it gives one back.
    pub(crate) fn runtime_references(self) -> &'static str {
        match self {
            Caller::Rust => "every `Offload<Ready>` of it",
            Caller::C => "every `offload_runtime_t` of it, each by its `offload_shutdown`",
            Caller::Python => "every `offload.Offload` of it, and every object made from them",
            Caller::Liboffload => "every `olInit` of it, each by its `olShutDown`",
        }
    }

    /// How the caller sees the configuration in force, where it can.
    pub(crate) fn config_in_force(self) -> &'static str {
        match self {
            Caller::Rust => " (`Offload::config()` shows it)",
            Caller::C => " (`offload_runtime_config` shows it)",
            Caller::Python | Caller::Liboffload => "",
        }
    }

    /// The caller's name for the registration of a callback the Rust API calls `callback`
    /// (`on_setup` is C's `offload_program_on_setup`): what a failed callback's error names.
    fn callback_name(self, callback: &'static str) -> &'static str {
        match (self, callback) {
            (Caller::C, "on_setup") => "offload_program_on_setup",
            (Caller::C, "on_teardown") => "offload_program_on_teardown",
            (Caller::C, HOST_FN_CALLBACK) => "offload_queue_host_fn",
            _ => callback,
        }
    }
}

/// The callback a host function is, as `Error::Callback` names it when a backend reports its
/// failure: the user's call that enqueued it. (Backends name no user call anywhere else:
/// they leave an error's `call` empty, and the handle of the user's call fills it in.)
///
/// ```
/// use offload::Error;
/// use offload::plugin::hal::HOST_FN_CALLBACK;
/// // What a backend returns when a host function it ran panicked or failed.
/// let e = Error::Callback { callback: HOST_FN_CALLBACK, source: "panicked".into() };
/// assert!(e.to_string().starts_with("Queue::enqueue_host_fn callback failed"));
/// ```
pub const HOST_FN_CALLBACK: &str = "Queue::enqueue_host_fn";

fn shut_down_text(call: &str, object: &str, caller: Caller) -> String {
    let what = if object.is_empty() {
        "this handle".to_string()
    } else {
        object.to_string()
    };
    let call = if call.is_empty() {
        String::new()
    } else {
        format!("{call}: ")
    };
    let init = caller.init_call();
    format!(
        "{call}{what} belongs to an offload runtime that has been shut down; handles do not \
         outlive their runtime: make new ones from a new {init}"
    )
}

fn out_of_bounds_text(e: &Error) -> String {
    let Error::OutOfBounds {
        backend,
        call,
        kernel,
        argument,
        binding,
        index,
        length,
        access,
        more,
    } = e
    else {
        return String::new();
    };
    let (verb, outcome) = match *access {
        "read" => ("read", "the read gave zero"),
        "write" => ("wrote", "the write was dropped"),
        _ => ("updated", "the atomic was dropped"),
    };
    let argument = if *argument == 0 {
        format!("binding {binding}")
    } else {
        format!("argument {argument} (binding {binding})")
    };
    let more = match more {
        0 => String::new(),
        1 => "; 1 more out-of-range access followed before this report".to_string(),
        n => format!("; {n} more out-of-range accesses followed before this report"),
    };
    format!(
        "{backend}: {}kernel `{kernel}` {verb} index {index} of an array of {length} elements \
         in {argument}: out of bounds, so {outcome} (no other data changed){more}",
        at(call)
    )
}

/// `main` returning `Err` prints an error with `{:?}`: it says what `Display` says (the
/// call, the object and what to do), not the variant's fields.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// `cuda: driver not found: libcuda.so.1 (cannot open shared object file: …); install …`:
/// the library named once (the dynamic loader's message repeats it), and what to do.
fn driver_not_found_text(
    backend: BackendKind,
    library: &str,
    reason: &str,
    caller: Caller,
) -> String {
    let reason = reason
        .strip_prefix(library)
        .and_then(|r| r.strip_prefix(": "))
        .unwrap_or(reason);
    let setting = caller.backends_setting();
    format!(
        "{backend}: driver not found: {library} ({reason}); install the {backend} driver, or \
         leave {backend} out of the backends asked for (OFFLOAD_BACKENDS, {setting})"
    )
}

/// `Buffer::read: `, the call an error names, or nothing where it names none (a backend's
/// error before the handle of the user's call named it).
fn at(call: &str) -> String {
    if call.is_empty() {
        String::new()
    } else {
        format!("{call}: ")
    }
}

fn backend_prefix(backend: &Option<BackendKind>) -> String {
    backend.map_or_else(String::new, |b| format!("{b}: "))
}

fn hint_text(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!(": {hint}")
    }
}

fn join(errors: &[Error]) -> String {
    let parts: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    parts.join("; ")
}

impl Error {
    /// Joins the errors of a multi-step operation: `Ok` when there are none, the error
    /// itself when there is one, `Error::Multiple` otherwise (nested lists are flattened).
    ///
    /// ```
    /// use offload::Error;
    /// assert!(Error::join(vec![]).is_ok());
    /// let gone = || Error::ShutDown {
    ///     call: "Buffer::read",
    ///     object: "buffer \"x\"".into(),
    ///     caller: offload::Caller::Rust,
    /// };
    /// let one = Error::join(vec![gone()]).unwrap_err();
    /// assert!(matches!(one, Error::ShutDown { .. }));
    /// let two = Error::join(vec![gone(), gone()]).unwrap_err();
    /// assert!(matches!(two, Error::Multiple(ref v) if v.len() == 2));
    /// ```
    pub fn join(errors: Vec<Error>) -> crate::Result<()> {
        let mut flat = Vec::with_capacity(errors.len());
        for e in errors {
            match e {
                Error::Multiple(inner) => flat.extend(inner),
                other => flat.push(other),
            }
        }
        if flat.len() > 1 {
            return Err(Error::Multiple(flat));
        }
        match flat.pop() {
            None => Ok(()),
            Some(only) => Err(only),
        }
    }

    /// The errors inside, flattened: a `Multiple` gives its members, any other error itself.
    ///
    /// ```
    /// use offload::Error;
    /// let gone = || Error::ShutDown {
    ///     call: "Queue::sync",
    ///     object: "queue \"io\"".into(),
    ///     caller: offload::Caller::Rust,
    /// };
    /// let e = Error::Multiple(vec![gone(), gone()]);
    /// assert_eq!(e.iter().count(), 2);
    /// assert_eq!(gone().iter().count(), 1);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = &Error> {
        let slice: &[Error] = match self {
            Error::Multiple(v) => v,
            other => std::slice::from_ref(other),
        };
        slice.iter()
    }

    /// A `ShutDown` error that does not say yet which call and object it is about.
    pub(crate) fn shut_down() -> Self {
        Error::ShutDown {
            call: "",
            object: String::new(),
            caller: Caller::Rust,
        }
    }

    /// Names the call and the object in a `ShutDown` that did not say them yet; any
    /// other error gets the call where it did not name one ([`Error::in_call`]).
    pub(crate) fn on(self, call: &'static str, object: &dyn std::fmt::Display) -> Self {
        match self {
            Error::ShutDown {
                call: "", caller, ..
            } => Error::ShutDown {
                call,
                object: object.to_string(),
                caller,
            },
            other => other.in_call(call),
        }
    }

    /// The error as the user's call names it. Backends leave `call` empty (or name the
    /// driver's own call, `vkQueueSubmit`): the handle that made the user's call
    /// (`Buffer::read`, `Queue::run`) knows it and fills it in here, in every error that
    /// names none, those of an `Error::Multiple` included. A `ShutDown` is named with its
    /// object by [`Error::on`].
    pub(crate) fn in_call(mut self, call: &'static str) -> Self {
        self.fill_call(call);
        self
    }

    fn fill_call(&mut self, to: &'static str) {
        match self {
            Error::Multiple(errors) => errors.iter_mut().for_each(|e| e.fill_call(to)),
            // Named with its object by `Error::on`.
            Error::ShutDown { .. } => {}
            other => {
                if let Some(call) = other.call_mut().filter(|c| c.is_empty()) {
                    *call = to;
                }
            }
        }
    }

    /// The offload call a variant names, for those that carry one (every variant but
    /// `Multiple`, whose members carry their own, `Callback`, `DriverNotFound` and
    /// `NoDevice`): the one list `in_call` and `for_call` fill in.
    fn call_mut(&mut self) -> Option<&mut &'static str> {
        match self {
            Error::ShutDown { call, .. }
            | Error::InvalidBinary { call, .. }
            | Error::SymbolNotFound { call, .. }
            | Error::OutOfMemory { call, .. }
            | Error::InvalidArgument { call, .. }
            | Error::InvalidIpcHandle { call, .. }
            | Error::Unsupported { call, .. }
            | Error::Ipc { call, .. }
            | Error::Quarantined { call, .. }
            | Error::Compile { call, .. }
            | Error::OutOfBounds { call, .. }
            | Error::Driver { call, .. }
            | Error::Forked { call, .. } => Some(call),
            Error::Multiple(_)
            | Error::Callback { .. }
            | Error::DriverNotFound { .. }
            | Error::NoDevice { .. } => None,
        }
    }

    /// The error as a call of another language's API names it: every `call` it carries
    /// (those inside an `Error::Multiple` too) becomes `call`, the name of the function
    /// that was called (`offload_buffer_read`), and its advice is given in `caller`'s words
    /// (`offload_init()` for C, not `Offload::init()`); a failed callback is named by the
    /// caller's registration of it (`offload_program_on_setup`). A binding (the C API) applies it to
    /// every error it passes on, so its users read their own calls, never the Rust ones
    /// the binding made for them.
    ///
    /// ```
    /// use offload::{Caller, Error};
    /// let e = Error::invalid("Buffer::read", "bytes 8..12 are outside an 8-byte buffer");
    /// let c = e.for_call(Caller::C, "offload_buffer_read");
    /// assert_eq!(
    ///     c.to_string(),
    ///     "offload_buffer_read: invalid argument: bytes 8..12 are outside an 8-byte buffer"
    /// );
    /// let gone = Error::ShutDown { call: "Buffer::read", object: "buffer".into(), caller: Caller::Rust };
    /// let both = Error::Multiple(vec![gone, c]).for_call(Caller::C, "offload_shutdown");
    /// let text = both.to_string();
    /// assert!(text.contains("offload_shutdown: buffer belongs to"));
    /// assert!(text.contains("offload_init()") && !text.contains("::"));
    /// ```
    #[must_use]
    pub fn for_call(mut self, caller: Caller, call: &'static str) -> Self {
        self.rename_with(caller, &|_| call, &|callback| {
            caller.callback_name(callback)
        });
        self
    }

    /// The error in a binding's words where the binding's calls are named after the Rust
    /// ones: every `call` it carries (inside an `Error::Multiple` too) becomes
    /// `name(call)`, and its advice is given in `caller`'s words. The Python package
    /// applies it with `Buffer::read` → `Buffer.read`.
    ///
    /// ```
    /// use offload::{Caller, Error};
    /// let gone = Error::ShutDown { call: "Buffer::read", object: "buffer".into(), caller: Caller::Rust };
    /// let e = Error::Multiple(vec![gone, Error::invalid("Device::alloc", "zero bytes")])
    ///     .in_words_of(Caller::Python, |call| match call {
    ///         "Buffer::read" => "Buffer.read",
    ///         _ => "Device.alloc",
    ///     });
    /// let text = e.to_string();
    /// assert!(text.contains("Buffer.read: buffer belongs to"), "{text}");
    /// assert!(text.contains("a new offload.Offload()") && text.contains("Device.alloc: "));
    /// ```
    #[must_use]
    pub fn in_words_of(
        mut self,
        caller: Caller,
        name: impl Fn(&'static str) -> &'static str,
    ) -> Self {
        self.rename_with(caller, &name, &name);
        self
    }

    /// Re-names every call with `name` and every callback (the registration a failed
    /// callback was given by, `on_setup`) with `callback`, and sets the advice's language.
    fn rename_with(
        &mut self,
        to_caller: Caller,
        name: &dyn Fn(&'static str) -> &'static str,
        callback: &dyn Fn(&'static str) -> &'static str,
    ) {
        if let Error::Multiple(errors) = self {
            errors
                .iter_mut()
                .for_each(|e| e.rename_with(to_caller, name, callback));
            return;
        }
        if let Some(call) = self.call_mut() {
            *call = name(call);
        }
        if let Error::Callback { callback: c, .. } = self {
            *c = callback(c);
        }
        if let Error::ShutDown { caller, .. } | Error::DriverNotFound { caller, .. } = self {
            *caller = to_caller;
        }
    }

    /// `Error::InvalidArgument` for `call`: the one constructor backends, extensions and
    /// the handles share for "this argument cannot be used", with the reason in the user's
    /// words.
    ///
    /// ```
    /// use offload::Error;
    /// let e = Error::invalid("Buffer::read", "offset 64 is past the end of 32 bytes");
    /// assert!(matches!(e, Error::InvalidArgument { call: "Buffer::read", .. }));
    /// assert!(e.to_string().contains("offset 64 is past the end of 32 bytes"));
    /// ```
    pub fn invalid(call: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            call,
            reason: reason.into(),
        }
    }
}

/// The text of a panic's payload (a `&str` or `String` message), for an error that reports
/// it (backends that run user code on threads of their own use it too).
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
/// assert_eq!(offload_core::hal::panic_text(&*payload), "boom 1");
/// ```
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_names_its_library_once_and_says_what_to_do() {
        let e = Error::DriverNotFound {
            backend: BackendKind::Cuda,
            library: "libcuda.so.1".into(),
            reason: "libcuda.so.1: cannot open shared object file: No such file or directory"
                .into(),
            caller: Caller::Rust,
        };
        let text = e.to_string();
        assert_eq!(text.matches("libcuda.so.1").count(), 1, "{text}");
        assert!(
            text.starts_with(
                "cuda: driver not found: libcuda.so.1 (cannot open shared object file"
            ),
            "{text}"
        );
        assert!(text.contains("install the cuda driver"), "{text}");
        assert!(text.contains("OFFLOAD_BACKENDS"), "{text}");
        // A reason that does not repeat the library is kept whole.
        let e = Error::DriverNotFound {
            backend: BackendKind::Ze,
            library: "libze_loader.so.1".into(),
            reason: "missing symbol zeInit".into(),
            caller: Caller::Rust,
        };
        assert!(
            e.to_string()
                .contains("libze_loader.so.1 (missing symbol zeInit)")
        );
    }

    #[test]
    fn for_call_names_the_call_everywhere_and_gives_the_callers_advice() {
        let missing = || Error::DriverNotFound {
            backend: BackendKind::Vulkan,
            library: "libvulkan.so.1".into(),
            reason: "not found".into(),
            caller: Caller::Rust,
        };
        let rust = missing().to_string();
        assert!(rust.contains("`Offload::builder().backends(..)`"), "{rust}");
        let e = Error::Multiple(vec![
            missing(),
            Error::shut_down(),
            Error::invalid("Buffer::read", "bytes 8..12"),
            Error::Multiple(vec![Error::invalid("", "nested")]),
        ])
        .for_call(Caller::C, "offload_init");
        let c = e.to_string();
        assert!(!c.contains("::"), "{c}");
        assert!(c.contains("`offload_config_t`'s `backends`"), "{c}");
        assert!(c.contains("offload_init: this handle belongs to"), "{c}");
        assert!(c.contains("a new offload_init()"), "{c}");
        assert!(
            c.contains("offload_init: invalid argument: bytes 8..12"),
            "{c}"
        );
        assert!(c.contains("offload_init: invalid argument: nested"), "{c}");
        // Rust's words are the default, and stay Rust's.
        assert!(
            Error::shut_down()
                .to_string()
                .ends_with("a new Offload::init()")
        );
    }

    #[test]
    fn no_device_says_the_driver_loaded_and_what_it_answered() {
        let e = Error::NoDevice {
            backend: BackendKind::Hip,
            library: "libamdhip64.so.5".into(),
            reason: "hipGetDeviceCount: hipErrorNoDevice (100)".into(),
        };
        let text = e.to_string();
        assert!(
            text.starts_with(
                "hip: no device: libamdhip64.so.5 loaded, but hipGetDeviceCount: \
                 hipErrorNoDevice (100)"
            ),
            "{text}"
        );
        assert!(text.contains("offload-info"), "{text}");
    }
}
