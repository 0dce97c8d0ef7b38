//! What a call answers: the status enum, the thread's last-error message, and the one
//! wrapper (`guard`) every exported function runs its body in, which turns errors and
//! panics into a status and keeps the message for `offload_last_error`.
//!
//! The message lives in a fixed, const-initialised thread-local byte array. A type without
//! a destructor registers no thread-local destructor, so the library still unmaps at
//! `dlclose` (L2: offload registers no TLS destructor on threads it does not own), and no
//! allocation is kept per thread. A message longer than the array is cut at a character
//! boundary and ends with `…`.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use offload::Error;

/// The status every function of the C API returns: `OFFLOAD_OK`, or what went wrong.
/// `offload_last_error()` then holds the message: the words of the Rust `offload::Error`,
/// naming the `offload_*` function that was called and giving its advice in C's terms.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum offload_status_t {
    /// Success.
    OFFLOAD_OK = 0,
    /// The runtime that made the handle has been shut down (`Error::ShutDown`, L3).
    OFFLOAD_ERROR_SHUT_DOWN = 1,
    /// A corrupt or foreign program image (`Error::InvalidBinary`).
    OFFLOAD_ERROR_INVALID_BINARY = 2,
    /// No kernel or global of that name (`Error::SymbolNotFound`).
    OFFLOAD_ERROR_SYMBOL_NOT_FOUND = 3,
    /// The device could not allocate (`Error::OutOfMemory`).
    OFFLOAD_ERROR_OUT_OF_MEMORY = 4,
    /// A bad argument: out of range, wrong launch arguments, a null pointer
    /// (`Error::InvalidArgument`).
    OFFLOAD_ERROR_INVALID_ARGUMENT = 5,
    /// An IPC handle for another device, forged or stale (`Error::InvalidIpcHandle`).
    OFFLOAD_ERROR_INVALID_IPC_HANDLE = 6,
    /// A setup, teardown or host-function callback failed (`Error::Callback`).
    OFFLOAD_ERROR_CALLBACK = 7,
    /// Several errors at once, from a shutdown (`Error::Multiple`).
    OFFLOAD_ERROR_MULTIPLE = 8,
    /// A backend's driver library is missing (`Error::DriverNotFound`).
    OFFLOAD_ERROR_DRIVER_NOT_FOUND = 9,
    /// The driver loaded and found no device (`Error::NoDevice`).
    OFFLOAD_ERROR_NO_DEVICE = 10,
    /// The backend cannot do this (`Error::Unsupported`).
    OFFLOAD_ERROR_UNSUPPORTED = 11,
    /// An IPC peer is gone, cut off or too slow (`Error::Ipc`).
    OFFLOAD_ERROR_IPC = 12,
    /// Freed IPC memory a live peer had not unmapped in time (`Error::Quarantined`).
    OFFLOAD_ERROR_QUARANTINED = 13,
    /// Source did not compile (`Error::Compile`).
    OFFLOAD_ERROR_COMPILE = 14,
    /// A driver error that maps to no other status (`Error::Driver`).
    OFFLOAD_ERROR_DRIVER = 15,
    /// A handle that names no live object of the expected type: zero, garbage, another
    /// type's, or released. (A handle of a runtime that was shut down answers
    /// `OFFLOAD_ERROR_SHUT_DOWN` instead.)
    OFFLOAD_ERROR_INVALID_HANDLE = 16,
    /// A panic inside the library, caught at the boundary; the message says where.
    OFFLOAD_ERROR_INTERNAL = 17,
    /// This process was forked from one running offload: no call can work in the child
    /// (its runtime's threads did not survive the fork), and every call answers this at
    /// once (`Error::Forked`, L9). Start offload in a fresh process, or `exec` after `fork`.
    OFFLOAD_ERROR_FORKED = 18,
    /// A bounds-checked kernel (WGSL on Vulkan) indexed past the end of an array in one of
    /// its buffers; the access was not made, nothing else changed, and the queue stays
    /// usable. Returned by the next sync of the queue that ran it (`Error::OutOfBounds`).
    OFFLOAD_ERROR_OUT_OF_BOUNDS = 19,
}

impl offload_status_t {
    /// The enumerator's name, NUL-terminated.
    const fn name(self) -> &'static str {
        match self {
            Self::OFFLOAD_OK => "OFFLOAD_OK\0",
            Self::OFFLOAD_ERROR_SHUT_DOWN => "OFFLOAD_ERROR_SHUT_DOWN\0",
            Self::OFFLOAD_ERROR_INVALID_BINARY => "OFFLOAD_ERROR_INVALID_BINARY\0",
            Self::OFFLOAD_ERROR_SYMBOL_NOT_FOUND => "OFFLOAD_ERROR_SYMBOL_NOT_FOUND\0",
            Self::OFFLOAD_ERROR_OUT_OF_MEMORY => "OFFLOAD_ERROR_OUT_OF_MEMORY\0",
            Self::OFFLOAD_ERROR_INVALID_ARGUMENT => "OFFLOAD_ERROR_INVALID_ARGUMENT\0",
            Self::OFFLOAD_ERROR_INVALID_IPC_HANDLE => "OFFLOAD_ERROR_INVALID_IPC_HANDLE\0",
            Self::OFFLOAD_ERROR_CALLBACK => "OFFLOAD_ERROR_CALLBACK\0",
            Self::OFFLOAD_ERROR_MULTIPLE => "OFFLOAD_ERROR_MULTIPLE\0",
            Self::OFFLOAD_ERROR_DRIVER_NOT_FOUND => "OFFLOAD_ERROR_DRIVER_NOT_FOUND\0",
            Self::OFFLOAD_ERROR_NO_DEVICE => "OFFLOAD_ERROR_NO_DEVICE\0",
            Self::OFFLOAD_ERROR_UNSUPPORTED => "OFFLOAD_ERROR_UNSUPPORTED\0",
            Self::OFFLOAD_ERROR_IPC => "OFFLOAD_ERROR_IPC\0",
            Self::OFFLOAD_ERROR_QUARANTINED => "OFFLOAD_ERROR_QUARANTINED\0",
            Self::OFFLOAD_ERROR_COMPILE => "OFFLOAD_ERROR_COMPILE\0",
            Self::OFFLOAD_ERROR_DRIVER => "OFFLOAD_ERROR_DRIVER\0",
            Self::OFFLOAD_ERROR_INVALID_HANDLE => "OFFLOAD_ERROR_INVALID_HANDLE\0",
            Self::OFFLOAD_ERROR_INTERNAL => "OFFLOAD_ERROR_INTERNAL\0",
            Self::OFFLOAD_ERROR_FORKED => "OFFLOAD_ERROR_FORKED\0",
            Self::OFFLOAD_ERROR_OUT_OF_BOUNDS => "OFFLOAD_ERROR_OUT_OF_BOUNDS\0",
        }
    }
}

/// Why a call failed, before it becomes a status and a message.
#[derive(Debug)]
pub(crate) enum Fail {
    /// An error of the Rust runtime, passed on in its own words.
    Offload(Error),
    /// A handle that names no live object of the expected type (the message says why).
    Handle(String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Offload(e)
    }
}

/// The result of a call's body.
pub(crate) type Res<T = ()> = Result<T, Fail>;

/// The status of an error of the Rust runtime.
fn status_of(e: &Error) -> offload_status_t {
    use offload_status_t::*;
    match e {
        Error::ShutDown { .. } => OFFLOAD_ERROR_SHUT_DOWN,
        Error::InvalidBinary { .. } => OFFLOAD_ERROR_INVALID_BINARY,
        Error::SymbolNotFound { .. } => OFFLOAD_ERROR_SYMBOL_NOT_FOUND,
        Error::OutOfMemory { .. } => OFFLOAD_ERROR_OUT_OF_MEMORY,
        Error::InvalidArgument { .. } => OFFLOAD_ERROR_INVALID_ARGUMENT,
        Error::InvalidIpcHandle { .. } => OFFLOAD_ERROR_INVALID_IPC_HANDLE,
        Error::Callback { .. } => OFFLOAD_ERROR_CALLBACK,
        Error::Multiple(_) => OFFLOAD_ERROR_MULTIPLE,
        Error::DriverNotFound { .. } => OFFLOAD_ERROR_DRIVER_NOT_FOUND,
        Error::NoDevice { .. } => OFFLOAD_ERROR_NO_DEVICE,
        Error::Unsupported { .. } => OFFLOAD_ERROR_UNSUPPORTED,
        Error::Ipc { .. } => OFFLOAD_ERROR_IPC,
        Error::Quarantined { .. } => OFFLOAD_ERROR_QUARANTINED,
        Error::Compile { .. } => OFFLOAD_ERROR_COMPILE,
        Error::Driver { .. } => OFFLOAD_ERROR_DRIVER,
        Error::Forked { .. } => OFFLOAD_ERROR_FORKED,
        Error::OutOfBounds { .. } => OFFLOAD_ERROR_OUT_OF_BOUNDS,
        // A variant added later: its words still reach the caller.
        _ => OFFLOAD_ERROR_DRIVER,
    }
}

/// Bytes kept of a message, its NUL included.
const MESSAGE_BYTES: usize = 4096;

/// The last error message of this thread: NUL-terminated bytes. `repr(C)`, so a pointer
/// to it is a pointer to its first byte (what `offload_last_error` hands out).
#[repr(C)]
struct LastError {
    bytes: [u8; MESSAGE_BYTES],
}

thread_local! {
    // Const-initialised and without a destructor: no TLS destructor is registered, so
    // `dlclose` unmaps the library (L2).
    static LAST_ERROR: RefCell<LastError> = const {
        RefCell::new(LastError { bytes: [0; MESSAGE_BYTES] })
    };
}

/// Keeps `message` as this thread's last error (cut to fit, NUL-terminated).
fn set_last_error(message: &str) {
    const ELLIPSIS: &str = "…";
    // During thread exit the slot is gone: the status code still says what failed.
    let _ = LAST_ERROR.try_with(|cell| {
        let Ok(mut last) = cell.try_borrow_mut() else {
            return;
        };
        let room = MESSAGE_BYTES - 1;
        let len = if message.len() <= room {
            message.len()
        } else {
            let mut cut = room - ELLIPSIS.len();
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            cut
        };
        last.bytes[..len].copy_from_slice(&message.as_bytes()[..len]);
        let mut end = len;
        if len < message.len() {
            last.bytes[len..len + ELLIPSIS.len()].copy_from_slice(ELLIPSIS.as_bytes());
            end += ELLIPSIS.len();
        }
        last.bytes[end] = 0;
    });
}

/// Runs the body of an exported function: its error becomes a status and this thread's
/// last-error message; a panic is caught here (no unwinding crosses into C) and becomes
/// `OFFLOAD_ERROR_INTERNAL` with the panic's message. On success the last error is left
/// as it was.
#[inline(always)]
pub(crate) fn guard(call: &'static str, body: impl FnOnce() -> Res) -> offload_status_t {
    // In a forked child, before any lock (a thread of the parent may have held it, L9).
    if offload_thread::fork::forked() {
        return failed(
            call,
            Fail::Offload(Error::Forked {
                call,
                pid: std::process::id(),
            }),
        );
    }
    // The status is made inside the catch, so that what crosses it is a number or a panic.
    let run = AssertUnwindSafe(|| match body() {
        Ok(()) => offload_status_t::OFFLOAD_OK,
        Err(fail) => failed(call, fail),
    });
    catch_unwind(run).unwrap_or_else(|panic| panicked(call, panic))
}

/// [`guard`]'s answer to a failed call (out of line: the calls that succeed should not
/// carry it). An error of the Rust runtime is re-named for the C caller first: it names
/// `call`, the C function that was called (not the Rust method it called, `Buffer::read`),
/// and gives its advice in C's words (`offload_init()`, not `Offload::init()`).
#[cold]
#[inline(never)]
fn failed(call: &'static str, fail: Fail) -> offload_status_t {
    match fail {
        Fail::Offload(e) => {
            let e = e.for_call(offload::Caller::C, call);
            set_last_error(&e.to_string());
            status_of(&e)
        }
        Fail::Handle(message) => {
            set_last_error(&message);
            offload_status_t::OFFLOAD_ERROR_INVALID_HANDLE
        }
    }
}

/// [`guard`]'s answer to a panic: `OFFLOAD_ERROR_INTERNAL`, with the panic's message.
#[cold]
#[inline(never)]
fn panicked(call: &'static str, panic: Box<dyn std::any::Any + Send>) -> offload_status_t {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    set_last_error(&format!("{call}: internal error: {what}"));
    offload_status_t::OFFLOAD_ERROR_INTERNAL
}

/// The message of the last failed call on this thread, NUL-terminated UTF-8 (an empty
/// string if no call has failed on this thread). It starts with the name of the function
/// that failed (`offload_buffer_read: invalid argument: …`) and gives its advice in C's
/// terms (`offload_init()`). The pointer stays valid for the thread's life; the text
/// changes with the thread's next failing call. Successful calls leave it alone.
#[unsafe(no_mangle)]
pub extern "C" fn offload_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|cell| cell.as_ptr().cast::<c_char>().cast_const())
        .unwrap_or(c"".as_ptr())
}

/// The name of a status (`"OFFLOAD_ERROR_SHUT_DOWN"`), NUL-terminated, static; `"?"` for
/// a number that is no status.
#[unsafe(no_mangle)]
pub extern "C" fn offload_status_name(status: i32) -> *const c_char {
    match ALL.iter().find(|s| **s as i32 == status) {
        Some(s) => s.name().as_ptr().cast(),
        None => c"?".as_ptr(),
    }
}

/// Every status, in the header's order.
const ALL: [offload_status_t; 20] = {
    use offload_status_t::*;
    [
        OFFLOAD_OK,
        OFFLOAD_ERROR_SHUT_DOWN,
        OFFLOAD_ERROR_INVALID_BINARY,
        OFFLOAD_ERROR_SYMBOL_NOT_FOUND,
        OFFLOAD_ERROR_OUT_OF_MEMORY,
        OFFLOAD_ERROR_INVALID_ARGUMENT,
        OFFLOAD_ERROR_INVALID_IPC_HANDLE,
        OFFLOAD_ERROR_CALLBACK,
        OFFLOAD_ERROR_MULTIPLE,
        OFFLOAD_ERROR_DRIVER_NOT_FOUND,
        OFFLOAD_ERROR_NO_DEVICE,
        OFFLOAD_ERROR_UNSUPPORTED,
        OFFLOAD_ERROR_IPC,
        OFFLOAD_ERROR_QUARANTINED,
        OFFLOAD_ERROR_COMPILE,
        OFFLOAD_ERROR_DRIVER,
        OFFLOAD_ERROR_INVALID_HANDLE,
        OFFLOAD_ERROR_INTERNAL,
        OFFLOAD_ERROR_FORKED,
        OFFLOAD_ERROR_OUT_OF_BOUNDS,
    ]
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: offload_last_error gives a NUL-terminated string of this thread.
        unsafe { CStr::from_ptr(offload_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_with_its_message() {
        let s = guard("offload_test_call", || panic!("a planted panic"));
        assert_eq!(s, offload_status_t::OFFLOAD_ERROR_INTERNAL);
        assert_eq!(last(), "offload_test_call: internal error: a planted panic");
    }

    #[test]
    fn errors_keep_the_runtime_words_and_success_keeps_the_last_error() {
        let s = guard("offload_x", || {
            Err(Fail::from(Error::invalid(
                "Buffer::read",
                "`out` is a null pointer",
            )))
        });
        assert_eq!(s, offload_status_t::OFFLOAD_ERROR_INVALID_ARGUMENT);
        assert_eq!(
            last(),
            "offload_x: invalid argument: `out` is a null pointer"
        );
        assert_eq!(guard("c", || Ok(())), offload_status_t::OFFLOAD_OK);
        assert_eq!(
            last(),
            "offload_x: invalid argument: `out` is a null pointer"
        );
    }

    #[test]
    fn an_error_names_the_c_call_and_gives_c_advice() {
        let gone = || Error::ShutDown {
            call: "Buffer::read",
            object: "buffer \"x\"".into(),
            caller: offload::Caller::Rust,
        };
        let s = guard("offload_buffer_read", || {
            Err(Fail::from(Error::Multiple(vec![
                gone(),
                Error::invalid("Device::alloc", "zero-size allocation"),
            ])))
        });
        assert_eq!(s, offload_status_t::OFFLOAD_ERROR_MULTIPLE);
        let text = last();
        assert!(
            text.contains("offload_buffer_read: buffer \"x\" belongs to")
                && text.contains("a new offload_init()")
                && text.contains("offload_buffer_read: invalid argument: zero-size")
                && !text.contains("::"),
            "{text}"
        );
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MESSAGE_BYTES);
        let _ = guard("c", || {
            Err(Fail::from(Error::invalid("offload_x", long.clone())))
        });
        let got = last();
        assert!(
            got.len() < MESSAGE_BYTES && got.ends_with('…'),
            "{}",
            got.len()
        );
    }

    /// One row of the C wording table: a status of the header, the C function a failure
    /// came through, what the Rust runtime answered (in its own words) and the exact text
    /// `offload_last_error()` must then hold.
    struct Row {
        status: offload_status_t,
        call: &'static str,
        fail: fn() -> Res,
        says: &'static str,
    }

    fn gone() -> Error {
        Error::ShutDown {
            call: "Buffer::read",
            object: r#"buffer "w" (16 bytes, host)"#.into(),
            caller: offload::Caller::Rust,
        }
    }

    const SHUT_DOWN_TEXT: &str = r#"offload_buffer_read: buffer "w" (16 bytes, host) belongs to an offload runtime that has been shut down; handles do not outlive their runtime: make new ones from a new offload_init()"#;

    /// Every status the header documents, with its message in C's words: the `offload_*`
    /// function the C caller called (never the Rust method it ran, `Buffer::read`), the
    /// callback by its C registration, and C's advice (`offload_init()`, `offload_config_t`).
    fn table() -> Vec<Row> {
        use offload::BackendKind::{Host, Vulkan};
        use offload_status_t::*;
        vec![
            Row {
                status: OFFLOAD_OK,
                call: "offload_buffer_read",
                fail: || Ok(()),
                says: "",
            },
            Row {
                status: OFFLOAD_ERROR_SHUT_DOWN,
                call: "offload_buffer_read",
                fail: || Err(gone().into()),
                says: SHUT_DOWN_TEXT,
            },
            Row {
                status: OFFLOAD_ERROR_INVALID_BINARY,
                call: "offload_program_load",
                fail: || {
                    Err(Error::InvalidBinary {
                        backend: Host,
                        call: "Program::load",
                        reason: "not an ELF shared object".into(),
                    }
                    .into())
                },
                says: "host: offload_program_load: invalid binary: not an ELF shared object",
            },
            Row {
                status: OFFLOAD_ERROR_SYMBOL_NOT_FOUND,
                call: "offload_module_kernel",
                fail: || {
                    Err(Error::SymbolNotFound {
                        backend: Host,
                        call: "Module::kernel",
                        symbol: "missing".into(),
                        hint: "the module has `noop`".into(),
                    }
                    .into())
                },
                says: "host: offload_module_kernel: symbol `missing` not found: the module has `noop`",
            },
            Row {
                status: OFFLOAD_ERROR_OUT_OF_MEMORY,
                call: "offload_buffer_alloc",
                fail: || {
                    Err(Error::OutOfMemory {
                        backend: Host,
                        call: "Device::alloc",
                        requested: 1 << 62,
                        reason: "more than the machine's memory".into(),
                    }
                    .into())
                },
                says: "host: offload_buffer_alloc: out of memory: 4611686018427387904 bytes \
                       requested (more than the machine's memory)",
            },
            Row {
                status: OFFLOAD_ERROR_INVALID_ARGUMENT,
                call: "offload_buffer_alloc",
                fail: || {
                    Err(
                        Error::invalid("Device::alloc", "zero-size allocation on host device 0")
                            .into(),
                    )
                },
                says: "offload_buffer_alloc: invalid argument: zero-size allocation on host device 0",
            },
            Row {
                status: OFFLOAD_ERROR_INVALID_IPC_HANDLE,
                call: "offload_ipc_import",
                fail: || {
                    Err(Error::InvalidIpcHandle {
                        backend: None,
                        call: "Device::import",
                        reason: "the bytes are no offload handle".into(),
                    }
                    .into())
                },
                says: "offload_ipc_import: invalid IPC handle: the bytes are no offload handle",
            },
            Row {
                status: OFFLOAD_ERROR_CALLBACK,
                call: "offload_program_load",
                fail: || {
                    Err(Error::Callback {
                        callback: "on_setup",
                        source: "the C callback returned 7".into(),
                    }
                    .into())
                },
                says: "offload_program_on_setup callback failed: the C callback returned 7",
            },
            Row {
                status: OFFLOAD_ERROR_MULTIPLE,
                call: "offload_shutdown",
                fail: || {
                    Err(Error::Multiple(vec![
                        Error::Callback {
                            callback: "on_teardown",
                            source: "the C callback returned 1".into(),
                        },
                        Error::Callback {
                            callback: offload::plugin::hal::HOST_FN_CALLBACK,
                            source: "queue (host): a panic".into(),
                        },
                    ])
                    .into())
                },
                says: "2 errors: offload_program_on_teardown callback failed: the C callback \
                       returned 1; offload_queue_host_fn callback failed: queue (host): a panic",
            },
            Row {
                status: OFFLOAD_ERROR_DRIVER_NOT_FOUND,
                call: "offload_init",
                fail: || {
                    Err(Error::DriverNotFound {
                        backend: Vulkan,
                        library: "libvulkan.so.1".into(),
                        reason: "cannot open shared object file".into(),
                        caller: offload::Caller::Rust,
                    }
                    .into())
                },
                says: "vulkan: driver not found: libvulkan.so.1 (cannot open shared object \
                       file); install the vulkan driver, or leave vulkan out of the backends \
                       asked for (OFFLOAD_BACKENDS, `offload_config_t`'s `backends`)",
            },
            Row {
                status: OFFLOAD_ERROR_NO_DEVICE,
                call: "offload_device_of",
                fail: || {
                    Err(Error::NoDevice {
                        backend: Vulkan,
                        library: "libvulkan.so.1".into(),
                        reason: "vkEnumeratePhysicalDevices found none".into(),
                    }
                    .into())
                },
                says: "vulkan: no device: libvulkan.so.1 loaded, but vkEnumeratePhysicalDevices \
                       found none (this machine has no vulkan device this process can use; \
                       `offload-info` lists the devices offload finds)",
            },
            Row {
                status: OFFLOAD_ERROR_UNSUPPORTED,
                call: "offload_ipc_export",
                fail: || {
                    Err(Error::Unsupported {
                        backend: Host,
                        call: "Buffer::export",
                        reason: "the buffer was not allocated exportable".into(),
                    }
                    .into())
                },
                says: "host: offload_ipc_export: unsupported: the buffer was not allocated \
                       exportable",
            },
            Row {
                status: OFFLOAD_ERROR_IPC,
                call: "offload_endpoint_send",
                fail: || {
                    Err(Error::Ipc {
                        call: "IpcEndpoint::send",
                        reason: "peer pid 1234 exited".into(),
                    }
                    .into())
                },
                says: "ipc: offload_endpoint_send: peer pid 1234 exited",
            },
            Row {
                status: OFFLOAD_ERROR_QUARANTINED,
                call: "offload_buffer_free",
                fail: || {
                    Err(Error::Quarantined {
                        backend: Host,
                        call: "Buffer::free",
                        object: "a 64-byte host device buffer".into(),
                        peers: "pid 1234".into(),
                        timeout_ms: 5000,
                    }
                    .into())
                },
                says: "host: offload_buffer_free: a 64-byte host device buffer is quarantined: \
                       pid 1234 had not unmapped it after 5000 ms; it is released when they \
                       answer or exit, or at shutdown",
            },
            Row {
                status: OFFLOAD_ERROR_COMPILE,
                call: "offload_program_load",
                fail: || {
                    Err(Error::Compile {
                        backend: Host,
                        call: "Program::load",
                        language: offload::Language::C,
                        log: "k.c:1: error: expected expression".into(),
                    }
                    .into())
                },
                says: "host: offload_program_load: C compile failed: k.c:1: error: expected \
                       expression",
            },
            Row {
                status: OFFLOAD_ERROR_DRIVER,
                call: "offload_queue_sync",
                fail: || {
                    Err(Error::Driver {
                        backend: Vulkan,
                        call: "Queue::sync",
                        code: -4,
                        message: "VK_ERROR_DEVICE_LOST".into(),
                    }
                    .into())
                },
                says: "vulkan: offload_queue_sync: driver error -4: VK_ERROR_DEVICE_LOST",
            },
            Row {
                status: OFFLOAD_ERROR_INVALID_HANDLE,
                call: "offload_buffer_read",
                fail: || {
                    Err(Fail::Handle(
                        "offload_buffer_read: the buffer handle is 0".into(),
                    ))
                },
                says: "offload_buffer_read: the buffer handle is 0",
            },
            Row {
                status: OFFLOAD_ERROR_INTERNAL,
                call: "offload_buffer_read",
                fail: || panic!("a planted panic"),
                says: "offload_buffer_read: internal error: a planted panic",
            },
            Row {
                status: OFFLOAD_ERROR_FORKED,
                call: "offload_init",
                fail: || {
                    Err(Error::Forked {
                        call: "Offload::init",
                        pid: 42,
                    }
                    .into())
                },
                says: "offload_init: this process (pid 42) was forked from one that was running \
                       offload; its runtime's threads did not survive the fork, so no offload \
                       call can work in it: start offload in a fresh process (fork before \
                       starting offload, or exec after the fork)",
            },
            Row {
                status: OFFLOAD_ERROR_OUT_OF_BOUNDS,
                call: "offload_queue_sync",
                fail: || {
                    Err(Error::OutOfBounds {
                        backend: Vulkan,
                        call: "Queue::sync",
                        kernel: "scale".into(),
                        argument: 1,
                        binding: 0,
                        index: 64,
                        length: 64,
                        access: "write",
                        more: 0,
                    }
                    .into())
                },
                says: "vulkan: offload_queue_sync: kernel `scale` wrote index 64 of an array of 64 \
                       elements in argument 1 (binding 0): out of bounds, so the write was \
                       dropped (no other data changed)",
            },
        ]
    }

    /// The C wording table: every status of the header (read from offload.h itself, so a
    /// status added there without a row fails here) answers with its exact C text and its
    /// name; nothing in the table reads as Rust.
    #[test]
    fn every_documented_status_speaks_c() {
        let header = include_str!("../include/offload.h");
        let documented: Vec<&str> = header
            .lines()
            .filter_map(|l| l.trim().split_once(" = "))
            .map(|(name, _)| name)
            .filter(|name| name.starts_with("OFFLOAD_OK") || name.starts_with("OFFLOAD_ERROR_"))
            .collect();
        let rows = table();
        let named: Vec<&str> = rows
            .iter()
            .map(|r| r.status.name().trim_end_matches('\0'))
            .collect();
        assert_eq!(
            named, documented,
            "the table's rows against offload.h's statuses"
        );
        set_last_error("");
        for row in rows {
            let status = guard(row.call, row.fail);
            assert_eq!(status, row.status, "{}", row.says);
            assert_eq!(last(), row.says, "{:?}", row.status);
            assert!(!row.says.contains("::") && !row.says.contains("Offload::init"));
            // SAFETY: static NUL-terminated names.
            let name = unsafe { CStr::from_ptr(offload_status_name(row.status as i32)) };
            assert_eq!(name.to_bytes_with_nul(), row.status.name().as_bytes());
        }
        for nothing in [-1, 20, i32::MAX] {
            // SAFETY: as above.
            let name = unsafe { CStr::from_ptr(offload_status_name(nothing)) };
            assert_eq!(name.to_str(), Ok("?"), "{nothing}");
        }
    }
}
