//! The vendor calls of a [`StreamApi`](super::StreamApi) implementation, written once:
//! [`stream_api_calls!`](crate::stream_api_calls) expands, inside a vendor crate's `unsafe
//! impl StreamApi`, to the trait's methods that are one C call each (allocations, copies,
//! streams, events, modules, launches, IPC), given the vendor's symbol and name for each.
//! CUDA's driver API and HIP's runtime API differ in those names, in a few extra
//! arguments (flags, copy directions) and in how a device address is typed (`CUdeviceptr`,
//! `void *`: [`RawAddress`]), not in how a call is made and checked.

use std::ffi::c_void;

/// A device address as a vendor's C API types it: `CUdeviceptr` (a `u64`) or HIP's
/// `void *`; offload passes addresses as `u64`.
///
/// ```
/// use offload_driver::RawAddress;
/// let p: *mut std::ffi::c_void = RawAddress::from_address(0x1000);
/// assert_eq!(RawAddress::address(p), 0x1000);
/// assert_eq!(<u64 as RawAddress>::null(), 0);
/// ```
pub trait RawAddress: Copy {
    /// The null address (an out-parameter's initial value).
    fn null() -> Self;
    /// The address `address`.
    fn from_address(address: u64) -> Self;
    /// The address as offload passes it.
    fn address(self) -> u64;
}

impl RawAddress for u64 {
    fn null() -> Self {
        0
    }
    fn from_address(address: u64) -> Self {
        address
    }
    fn address(self) -> u64 {
        self
    }
}

impl RawAddress for *mut c_void {
    fn null() -> Self {
        std::ptr::null_mut()
    }
    fn from_address(address: u64) -> Self {
        std::ptr::with_exposed_provenance_mut(address as usize)
    }
    fn address(self) -> u64 {
        self.expose_provenance() as u64
    }
}

impl RawAddress for *const c_void {
    fn null() -> Self {
        std::ptr::null()
    }
    fn from_address(address: u64) -> Self {
        std::ptr::with_exposed_provenance(address as usize)
    }
    fn address(self) -> u64 {
        self.expose_provenance() as u64
    }
}

/// The declarations and one-call methods of an `unsafe impl StreamApi`, from a table of
/// the vendor's names, codes, handle types and symbols.
///
/// Used inside the impl block, where `self.functions` is the vendor's symbol table (a
/// [`functions!`](crate::functions) table: required symbols are `unsafe extern "C" fn`s,
/// the optional ones `alloc_managed` and `ipc_*` name are `Option`s)
/// and `self.check(name, code)` turns a status code into `Result<(), Failure>`; the
/// library is `self.functions.library()` (a [`Loaded`](crate::Loaded) table) and the
/// counters the crate's `COUNTERS` ([`stream_backend_types!`](crate::stream_backend_types)
/// declares them). The table
/// gives, in this order: `words:` the backend's `BackendKind` variant, name, title, type
/// prefix and what its library is ([`Words`](crate::Words); the managed-memory and IPC call names come from the
/// lines below); `leak:` what happens to objects alive at deinit; `codes:` the status of a
/// query that found work still running, then [`StreamApi::OUT_OF_MEMORY`],
/// [`StreamApi::NOT_FOUND`] and [`StreamApi::ALREADY_MAPPED`]; `ipc:` the payload magic
/// (a 4-byte string) and [`StreamApi::IPC_ID`]; `handles:` the stream, event, module and
/// function handle types (raw pointers). Then one line per one-call method of
/// [`StreamApi`](crate::StreamApi), in the trait's order: the symbol it calls, the extra
/// arguments the vendor's C function takes after offload's (flags, copy directions; for
/// the asynchronous copies, before the stream; for `ipc_get` and `ipc_open`, the name of
/// the handle type first), and the function's name for errors.
///
/// Every call the expansion makes is the C function the line names with the method's own
/// arguments, converted ([`RawAddress`]); its `unsafe` block rests on the method's
/// `# Safety` section in [`StreamApi`](crate::StreamApi) (or, for the safe methods, on
/// out-pointers that are valid locals), so an implementation that uses it keeps the
/// trait's contract as long as the symbols are the functions the lines name, with
/// `cuda.h`'s or `hip_runtime_api.h`'s signatures. offload-cuda's and offload-hip's
/// `stream_api.rs` are the two uses.
///
/// [`StreamApi::OUT_OF_MEMORY`]: crate::StreamApi::OUT_OF_MEMORY
/// [`StreamApi::NOT_FOUND`]: crate::StreamApi::NOT_FOUND
/// [`StreamApi::ALREADY_MAPPED`]: crate::StreamApi::ALREADY_MAPPED
/// [`StreamApi::IPC_ID`]: crate::StreamApi::IPC_ID
// `crate::COUNTERS` is the vendor crate's, on purpose (see the docs).
#[allow(clippy::crate_in_macro_def)]
#[macro_export]
macro_rules! stream_api_calls {
    (
        words: $kind:ident $w_name:literal $w_title:literal $w_prefix:literal $w_driver:literal;
        leak: $w_leak:literal;
        codes: $not_ready:expr, $oom:expr, $not_found:expr, $already_mapped:expr;
        ipc: $magic:literal $ipc_id:literal;
        handles: $stream:ty, $event:ty, $module:ty, $function:ty;
        $($method:ident : $sym:ident ( $($x:tt)* ) $name:literal ;)*
    ) => {
        const KIND: ::offload_core::BackendKind = ::offload_core::BackendKind::$kind;
        const WORDS: $crate::Words = $crate::Words {
            name: $w_name,
            title: $w_title,
            prefix: $w_prefix,
            driver: $w_driver,
            leak: $w_leak,
            managed: $crate::__stream_api_name!(alloc_managed $($method $name)*),
            ipc: concat!(
                $crate::__stream_api_name!(ipc_get $($method $name)*),
                "/",
                $crate::__stream_api_name!(ipc_open $($method $name)*)
            ),
        };
        const OUT_OF_MEMORY: i64 = $oom as i64;
        const NOT_FOUND: i64 = $not_found as i64;
        const ALREADY_MAPPED: ::core::option::Option<i64> = $already_mapped;
        const IPC_MAGIC: [u8; 4] = *$magic;
        const IPC_ID: bool = $ipc_id;

        type Stream = $stream;
        type Event = $event;
        type Module = $module;
        type Function = $function;

        fn counters() -> &'static $crate::Counters {
            &crate::COUNTERS
        }

        fn library(&self) -> &'static str {
            self.functions.library().name()
        }

        $( $crate::__stream_api_call!(@$method $sym ($($x)*) $name $not_ready); )*
    };
}

/// The C name a [`stream_api_calls!`](crate::stream_api_calls) line gives a method.
#[doc(hidden)]
#[macro_export]
macro_rules! __stream_api_name {
    ($want:ident $($method:ident $name:literal)*) => {
        $crate::__stream_api_name!(@find $want $($method $name)*)
    };
    (@find alloc_managed alloc_managed $name:literal $($rest:tt)*) => { $name };
    (@find ipc_get ipc_get $name:literal $($rest:tt)*) => { $name };
    (@find ipc_open ipc_open $name:literal $($rest:tt)*) => { $name };
    (@find $want:ident $other:ident $name:literal $($rest:tt)*) => {
        $crate::__stream_api_name!(@find $want $($rest)*)
    };
}

/// One method of [`stream_api_calls!`](crate::stream_api_calls).
#[doc(hidden)]
#[macro_export]
macro_rules! __stream_api_call {
    (@alloc_device $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        fn alloc_device(&self, bytes: usize) -> ::core::result::Result<u64, $crate::Failure> {
            let mut ptr = $crate::RawAddress::null();
            // SAFETY: `ptr` is a valid out-pointer; the current device owns the allocation.
            let code = unsafe { (self.functions.$sym)(&mut ptr, bytes $(, $x)*) };
            self.check($name, code).map(|()| $crate::RawAddress::address(ptr))
        }
    };
    (@alloc_managed $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        fn alloc_managed(
            &self,
            bytes: usize,
        ) -> ::core::option::Option<::core::result::Result<u64, $crate::Failure>> {
            let alloc = self.functions.$sym?;
            let mut ptr = $crate::RawAddress::null();
            // SAFETY: `ptr` is a valid out-pointer; the flags are documented values.
            let code = unsafe { alloc(&mut ptr, bytes $(, $x)*) };
            Some(self.check($name, code).map(|()| $crate::RawAddress::address(ptr)))
        }
    };
    (@alloc_host $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        fn alloc_host(
            &self,
            bytes: usize,
        ) -> ::core::result::Result<*mut ::core::ffi::c_void, $crate::Failure> {
            let mut ptr = ::core::ptr::null_mut();
            // SAFETY: `ptr` is a valid out-pointer; the flags are documented values.
            let code = unsafe { (self.functions.$sym)(&mut ptr, bytes $(, $x)*) };
            self.check($name, code).map(|()| ptr)
        }
    };
    (@free_device $sym:ident () $name:literal $nr:expr) => {
        unsafe fn free_device(&self, ptr: u64) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::free_device`).
            let code = unsafe { (self.functions.$sym)($crate::RawAddress::from_address(ptr)) };
            self.check($name, code)
        }
    };
    (@free_host $sym:ident () $name:literal $nr:expr) => {
        unsafe fn free_host(
            &self,
            ptr: *mut ::core::ffi::c_void,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::free_host`).
            let code = unsafe { (self.functions.$sym)(ptr) };
            self.check($name, code)
        }
    };
    (@memcpy_htod $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        unsafe fn memcpy_htod(
            &self,
            dst: u64,
            src: &[u8],
        ) -> ::core::result::Result<(), $crate::Failure> {
            let dst = $crate::RawAddress::from_address(dst);
            // SAFETY: the caller's promise for `dst`; `src` is readable for its length.
            let code =
                unsafe { (self.functions.$sym)(dst, src.as_ptr().cast(), src.len() $(, $x)*) };
            self.check($name, code)
        }
    };
    (@memcpy_dtoh $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        unsafe fn memcpy_dtoh(
            &self,
            dst: &mut [u8],
            src: u64,
        ) -> ::core::result::Result<(), $crate::Failure> {
            let src = $crate::RawAddress::from_address(src);
            // SAFETY: the caller's promise for `src`; `dst` is writable for its length and
            // cannot alias device memory offload owns (no reference to it is handed out).
            let code = unsafe {
                (self.functions.$sym)(dst.as_mut_ptr().cast(), src, dst.len() $(, $x)*)
            };
            self.check($name, code)
        }
    };
    (@memcpy_dtod $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        unsafe fn memcpy_dtod(
            &self,
            dst: u64,
            src: u64,
            len: usize,
        ) -> ::core::result::Result<(), $crate::Failure> {
            let (dst, src) = (
                $crate::RawAddress::from_address(dst),
                $crate::RawAddress::from_address(src),
            );
            // SAFETY: the caller's promise (`StreamApi::memcpy_dtod`).
            let code = unsafe { (self.functions.$sym)(dst, src, len $(, $x)*) };
            self.check($name, code)
        }
    };
    (@memset_d8 $sym:ident () $name:literal $nr:expr) => {
        unsafe fn memset_d8(
            &self,
            dst: u64,
            value: u8,
            len: usize,
        ) -> ::core::result::Result<(), $crate::Failure> {
            let dst = $crate::RawAddress::from_address(dst);
            // SAFETY: the caller's promise (`StreamApi::memset_d8`); the value is passed
            // as the C function's byte or int.
            let code = unsafe { (self.functions.$sym)(dst, value.into(), len) };
            self.check($name, code)
        }
    };
    (@memcpy_htod_async $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        unsafe fn memcpy_htod_async(
            &self,
            dst: u64,
            src: &[u8],
            stream: Self::Stream,
        ) -> ::core::result::Result<(), $crate::Failure> {
            let dst = $crate::RawAddress::from_address(dst);
            // SAFETY: the caller's promise (`StreamApi::memcpy_htod_async`).
            let code = unsafe {
                (self.functions.$sym)(dst, src.as_ptr().cast(), src.len(), $($x,)* stream)
            };
            self.check($name, code)
        }
    };
    (@memcpy_dtod_async $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        unsafe fn memcpy_dtod_async(
            &self,
            dst: u64,
            src: u64,
            len: usize,
            stream: Self::Stream,
        ) -> ::core::result::Result<(), $crate::Failure> {
            let (dst, src) = (
                $crate::RawAddress::from_address(dst),
                $crate::RawAddress::from_address(src),
            );
            // SAFETY: the caller's promise (`StreamApi::memcpy_dtod_async`).
            let code = unsafe { (self.functions.$sym)(dst, src, len, $($x,)* stream) };
            self.check($name, code)
        }
    };
    (@stream_create $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        fn stream_create(&self) -> ::core::result::Result<Self::Stream, $crate::Failure> {
            let mut stream = ::core::ptr::null_mut();
            // SAFETY: `stream` is a valid out-pointer; the flags are documented values.
            let code = unsafe { (self.functions.$sym)(&mut stream $(, $x)*) };
            self.check($name, code).map(|()| stream)
        }
    };
    (@stream_destroy $sym:ident () $name:literal $nr:expr) => {
        unsafe fn stream_destroy(
            &self,
            stream: Self::Stream,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::stream_destroy`).
            let code = unsafe { (self.functions.$sym)(stream) };
            self.check($name, code)
        }
    };
    (@stream_synchronize $sym:ident () $name:literal $nr:expr) => {
        unsafe fn stream_synchronize(
            &self,
            stream: ::core::option::Option<Self::Stream>,
        ) -> ::core::result::Result<(), $crate::Failure> {
            let stream = stream.unwrap_or(::core::ptr::null_mut());
            // SAFETY: the caller's promise (`StreamApi::stream_synchronize`); null is the
            // legacy default (null) stream.
            let code = unsafe { (self.functions.$sym)(stream) };
            self.check($name, code)
        }
    };
    (@stream_query $sym:ident () $name:literal $nr:expr) => {
        unsafe fn stream_query(
            &self,
            stream: Self::Stream,
        ) -> ::core::result::Result<bool, $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::stream_query`).
            let code = unsafe { (self.functions.$sym)(stream) };
            if code == $nr {
                return Ok(false);
            }
            self.check($name, code).map(|()| true)
        }
    };
    (@stream_wait_event $sym:ident () $name:literal $nr:expr) => {
        unsafe fn stream_wait_event(
            &self,
            stream: Self::Stream,
            event: Self::Event,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise; 0 is the only documented flag value.
            let code = unsafe { (self.functions.$sym)(stream, event, 0) };
            self.check($name, code)
        }
    };
    (@event_create $sym:ident ($($x:expr),*) $name:literal $nr:expr) => {
        fn event_create(&self) -> ::core::result::Result<Self::Event, $crate::Failure> {
            let mut event = ::core::ptr::null_mut();
            // SAFETY: `event` is a valid out-pointer; the flags are documented values.
            let code = unsafe { (self.functions.$sym)(&mut event $(, $x)*) };
            self.check($name, code).map(|()| event)
        }
    };
    (@event_record $sym:ident () $name:literal $nr:expr) => {
        unsafe fn event_record(
            &self,
            event: Self::Event,
            stream: Self::Stream,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::event_record`).
            let code = unsafe { (self.functions.$sym)(event, stream) };
            self.check($name, code)
        }
    };
    (@event_synchronize $sym:ident () $name:literal $nr:expr) => {
        unsafe fn event_synchronize(
            &self,
            event: Self::Event,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::event_synchronize`).
            let code = unsafe { (self.functions.$sym)(event) };
            self.check($name, code)
        }
    };
    (@event_query $sym:ident () $name:literal $nr:expr) => {
        unsafe fn event_query(
            &self,
            event: Self::Event,
        ) -> ::core::result::Result<bool, $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::event_query`).
            let code = unsafe { (self.functions.$sym)(event) };
            if code == $nr {
                return Ok(false);
            }
            self.check($name, code).map(|()| true)
        }
    };
    (@event_elapsed $sym:ident () $name:literal $nr:expr) => {
        unsafe fn event_elapsed(
            &self,
            start: Self::Event,
            end: Self::Event,
        ) -> ::core::result::Result<f32, $crate::Failure> {
            let mut ms: f32 = 0.0;
            // SAFETY: the caller's promise; `ms` is a valid out-pointer.
            let code = unsafe { (self.functions.$sym)(&mut ms, start, end) };
            self.check($name, code).map(|()| ms)
        }
    };
    (@event_destroy $sym:ident () $name:literal $nr:expr) => {
        unsafe fn event_destroy(
            &self,
            event: Self::Event,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::event_destroy`).
            let code = unsafe { (self.functions.$sym)(event) };
            self.check($name, code)
        }
    };
    (@module_unload $sym:ident () $name:literal $nr:expr) => {
        unsafe fn module_unload(
            &self,
            module: Self::Module,
        ) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the caller's promise (`StreamApi::module_unload`).
            let code = unsafe { (self.functions.$sym)(module) };
            self.check($name, code)
        }
    };
    (@module_function $sym:ident () $name:literal $nr:expr) => {
        unsafe fn module_function(
            &self,
            module: Self::Module,
            name: &::core::ffi::CStr,
        ) -> ::core::result::Result<Self::Function, $crate::Failure> {
            let mut function = ::core::ptr::null_mut();
            // SAFETY: the caller's promise; `name` is NUL-terminated; `function` is a valid
            // out-pointer.
            let code = unsafe { (self.functions.$sym)(&mut function, module, name.as_ptr()) };
            self.check($name, code).map(|()| function)
        }
    };
    (@module_global $sym:ident () $name:literal $nr:expr) => {
        unsafe fn module_global(
            &self,
            module: Self::Module,
            name: &::core::ffi::CStr,
        ) -> ::core::result::Result<(u64, usize), $crate::Failure> {
            let (mut ptr, mut size) = ($crate::RawAddress::null(), 0usize);
            // SAFETY: the caller's promise; both out-pointers are valid; `name` is
            // NUL-terminated.
            let code =
                unsafe { (self.functions.$sym)(&mut ptr, &mut size, module, name.as_ptr()) };
            self.check($name, code)
                .map(|()| ($crate::RawAddress::address(ptr), size))
        }
    };
    (@launch_kernel $sym:ident () $name:literal $nr:expr) => {
        unsafe fn launch_kernel(
            &self,
            function: Self::Function,
            grid: [u32; 3],
            block: [u32; 3],
            shared: u32,
            stream: Self::Stream,
            params: &mut [*mut ::core::ffi::c_void],
        ) -> ::core::result::Result<(), $crate::Failure> {
            let params_ptr = if params.is_empty() {
                ::core::ptr::null_mut()
            } else {
                params.as_mut_ptr()
            };
            // SAFETY: the caller's promise (`StreamApi::launch_kernel`); `extra` is null
            // (parameters come in `params`).
            let code = unsafe {
                (self.functions.$sym)(
                    function,
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    shared,
                    stream,
                    params_ptr,
                    ::core::ptr::null_mut(),
                )
            };
            self.check($name, code)
        }
    };
    (@ipc_get $sym:ident ($handle:ident) $name:literal $nr:expr) => {
        unsafe fn ipc_get(
            &self,
            ptr: u64,
        ) -> ::core::option::Option<::core::result::Result<[u8; 64], $crate::Failure>> {
            let get = self.functions.$sym?;
            let mut handle = $handle { reserved: [0; 64] };
            // SAFETY: the caller's promise (`StreamApi::ipc_get`); `handle` is a valid
            // out-pointer.
            let code = unsafe { get(&mut handle, $crate::RawAddress::from_address(ptr)) };
            Some(self.check($name, code).map(|()| handle.reserved))
        }
    };
    (@ipc_open $sym:ident ($handle:ident, $flags:expr) $name:literal $nr:expr) => {
        fn ipc_open(
            &self,
            handle: [u8; 64],
        ) -> ::core::option::Option<::core::result::Result<u64, $crate::Failure>> {
            let open = self.functions.$sym?;
            let mut ptr = $crate::RawAddress::null();
            // SAFETY: `ptr` is a valid out-pointer; the handle is passed by value (the
            // vendor checks it: a forged one is an error code); the flag is a documented
            // value; the current device receives the mapping.
            let code = unsafe { open(&mut ptr, $handle { reserved: handle }, $flags) };
            Some(self.check($name, code).map(|()| $crate::RawAddress::address(ptr)))
        }
    };
    (@ipc_close $sym:ident () $name:literal $nr:expr) => {
        unsafe fn ipc_close(
            &self,
            ptr: u64,
        ) -> ::core::option::Option<::core::result::Result<(), $crate::Failure>> {
            let close = self.functions.$sym?;
            // SAFETY: the caller's promise (`StreamApi::ipc_close`).
            let code = unsafe { close($crate::RawAddress::from_address(ptr)) };
            Some(self.check($name, code))
        }
    };
}

/// The device queries of a stream-based vendor API, as inherent methods of its opened
/// library (inside `impl Driver { … }`, with `self.functions` and `self.check` as for
/// [`stream_api_calls!`](crate::stream_api_calls)): `init` (flags 0), `device_count`,
/// `device` (the handle of an ordinal), `device_name`, `total_memory` (bytes),
/// `attribute` and `multiprocessor_count`, each from the vendor's symbol and name.
/// `device:` is the type the queries take a device as (`CUdevice`; HIP's attribute query
/// takes the ordinal, which has the same C type), `attribute:` the attribute enum's type,
/// `multiprocessors:` the multiprocessor-count attribute. offload-cuda's and offload-hip's
/// `ffi/mod.rs` are the two uses.
#[macro_export]
macro_rules! device_calls {
    (
        device: $device:ty, attribute: $attribute:ty, multiprocessors: $mp:expr;
        init: $init:ident $init_name:literal;
        device_count: $count:ident $count_name:literal;
        device: $get:ident $get_name:literal;
        device_name: $dname:ident $dname_name:literal;
        total_memory: $total:ident $total_name:literal;
        attribute: $attr:ident $attr_name:literal;
    ) => {
        #[doc = concat!("`", $init_name, "(0)`.")]
        pub(crate) fn init(&self) -> ::core::result::Result<(), $crate::Failure> {
            // SAFETY: the call takes its flags by value; 0 is the documented value.
            let code = unsafe { (self.functions.$init)(0) };
            self.check($init_name, code)
        }

        #[doc = concat!("`", $count_name, "`.")]
        pub(crate) fn device_count(
            &self,
        ) -> ::core::result::Result<::core::ffi::c_int, $crate::Failure> {
            let mut count: ::core::ffi::c_int = 0;
            // SAFETY: `count` is a valid, writable int for the duration of the call.
            let code = unsafe { (self.functions.$count)(&mut count) };
            self.check($count_name, code).map(|()| count)
        }

        #[doc = concat!("`", $get_name, "`: the handle of device `ordinal`.")]
        pub(crate) fn device(
            &self,
            ordinal: ::core::ffi::c_int,
        ) -> ::core::result::Result<$device, $crate::Failure> {
            let mut device: $device = 0;
            // SAFETY: `device` is a valid, writable handle; a bad ordinal is an error code.
            let code = unsafe { (self.functions.$get)(&mut device, ordinal) };
            self.check($get_name, code).map(|()| device)
        }

        #[doc = concat!("`", $dname_name, "`.")]
        pub(crate) fn device_name(
            &self,
            device: $device,
        ) -> ::core::result::Result<String, $crate::Failure> {
            let mut name: [::core::ffi::c_char; 256] = [0; 256];
            let len = ::core::ffi::c_int::try_from(name.len()).unwrap_or(::core::ffi::c_int::MAX);
            // SAFETY: the vendor writes at most `len` bytes, its NUL included, into `name`,
            // which has exactly that many.
            let code = unsafe { (self.functions.$dname)(name.as_mut_ptr(), len, device) };
            self.check($dname_name, code)
                .map(|()| $crate::text_of(&name))
        }

        #[doc = concat!("`", $total_name, "`, in bytes.")]
        pub(crate) fn total_memory(
            &self,
            device: $device,
        ) -> ::core::result::Result<u64, $crate::Failure> {
            let mut bytes: usize = 0;
            // SAFETY: `bytes` is a valid, writable size_t for the duration of the call.
            let code = unsafe { (self.functions.$total)(&mut bytes, device) };
            self.check($total_name, code).map(|()| bytes as u64)
        }

        #[doc = concat!("`", $attr_name, "(attribute)`.")]
        pub(crate) fn attribute(
            &self,
            device: $device,
            attribute: $attribute,
        ) -> ::core::result::Result<::core::ffi::c_int, $crate::Failure> {
            let mut value: ::core::ffi::c_int = 0;
            // SAFETY: `value` is a valid, writable int; an attribute or device the vendor
            // does not know is an error code, never a write elsewhere.
            let code = unsafe { (self.functions.$attr)(&mut value, attribute, device) };
            self.check($attr_name, code).map(|()| value)
        }

        /// The device's multiprocessors (compute units), an attribute.
        pub(crate) fn multiprocessor_count(
            &self,
            device: $device,
        ) -> ::core::result::Result<::core::ffi::c_int, $crate::Failure> {
            self.attribute(device, $mp)
        }
    };
}
