//! offload beside its peer, LLVM's liboffload, on the operations both can do on this
//! machine, in one run (`offload_bench::paired`: the two sides alternate sample by sample,
//! so both see the same load).
//!
//! liboffload (`/usr/lib/llvm-22/lib/libLLVMOffload.so`, Debian's `liboffload-22-dev`) is
//! opened at run time with `libloading`, never linked; where the library or one of the
//! entry points used here is absent, the bench prints `peer benchmark skipped: <why>` and
//! exits 0 having measured nothing. The few declarations it needs are written out by hand
//! from `/usr/lib/llvm-22/include/offload/OffloadAPI.h` (LLVM 22.1.8).
//!
//! Why only these operations (measured on this project's machines): liboffload's only
//! device here is a "Virtual Host Device" whose `olMemAlloc`, `olCreateQueue` and
//! `olCreateProgram` crash (null plugin device), so this bench never calls them; device
//! listing, device info and a host→host `olMemcpy` work. offload runs with its default
//! features (the host backend).
//!
//! * `init_shutdown`: offload `Offload::init()` + `shutdown()` with no other runtime alive,
//!   a real 0→1→0 transition every iteration, against `olInit()` + `olShutDown()` (its
//!   reference count also goes 0→1→0: nothing else holds it). Measured first, before
//!   either side holds a runtime for the rest.
//! * `device_list`: `rt.device_list()` (the runtime reference lends its handles: no
//!   allocation, no reference count) against `olIterateDevices` with a callback that
//!   pushes each handle into a fresh `Vec` (liboffload's handles are likewise lent: valid
//!   until `olShutDown`); both runtimes are initialised once, outside the loop.
//! * `devices_vec`: `rt.devices()` (a fresh `Vec` of owned `Device`s, each counting a
//!   reference to its generation) against the same `olIterateDevices` loop.
//! * `device_info`: offload `dev.info()` (the whole `DeviceInfo`, name and vendor strings
//!   included) against what a user of liboffload does for the device name:
//!   `olGetDeviceInfoSize(OL_DEVICE_INFO_NAME)`, a buffer of that size, then
//!   `olGetDeviceInfo(OL_DEVICE_INFO_NAME)` into it.
//! * `copy64`: 64 bytes between two buffers of offload's host device with the synchronous
//!   `Buffer::copy_from`, against `olMemcpy(NULL queue, dst, host, src, host, 64)` (a
//!   synchronous copy) between two ordinary Rust heap arrays, `host` being the device of
//!   liboffload's `OL_PLATFORM_BACKEND_HOST` platform, as the header prescribes for host
//!   pointers.
//!
//! * `write64`: the same `olMemcpy` against offload's copy of 64 bytes from ordinary host
//!   memory into a buffer of its host device (`Buffer::write`): what a program that copies
//!   host data for a device does with each API (liboffload names host memory by a pointer,
//!   offload by a slice; both copies are synchronous).
//!
//! A summary table (medians of both sides and the paired ratio offload / liboffload with
//! its IQR) closes the run.
//!
//! Run with `cargo bench --bench peer_liboffload`.

use std::ffi::{CStr, c_char, c_void};
use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use offload::{BackendKind, Device, MemKind, Offload};
use offload_bench::{Paired, paired};

/// Where Debian's `liboffload-22-dev` puts the library.
const LIBRARY: &str = "/usr/lib/llvm-22/lib/libLLVMOffload.so";
const SAMPLES: usize = 30;
const COPY: usize = 64;

// ---- Declarations from /usr/lib/llvm-22/include/offload/OffloadAPI.h (LLVM 22.1.8) ----

/// `typedef struct ol_device_impl_t *ol_device_handle_t;`
#[repr(C)]
struct OlDeviceImpl {
    _opaque: [u8; 0],
}
type OlDevice = *mut OlDeviceImpl;

/// `typedef struct ol_platform_impl_t *ol_platform_handle_t;`
#[repr(C)]
struct OlPlatformImpl {
    _opaque: [u8; 0],
}
type OlPlatform = *mut OlPlatformImpl;

/// `typedef struct ol_queue_impl_t *ol_queue_handle_t;` (only ever passed as NULL here).
#[repr(C)]
struct OlQueueImpl {
    _opaque: [u8; 0],
}
type OlQueue = *mut OlQueueImpl;

/// `typedef struct ol_error_struct_t { ol_errc_t Code; const char *Details; }
/// ol_error_struct_t;` — `ol_errc_t` is a C enum whose largest value is `0x7fffffff`
/// (`OL_ERRC_FORCE_UINT32`), so it is 4 bytes wide; read as a `u32`.
#[repr(C)]
struct OlErrorStruct {
    code: u32,
    details: *const c_char,
}

/// `typedef const struct ol_error_struct_t *ol_result_t;` — NULL is `OL_SUCCESS`.
type OlResult = *const OlErrorStruct;

/// `ol_device_info_t` (a 4-byte C enum, see `OL_DEVICE_INFO_FORCE_UINT32`).
type OlDeviceInfo = u32;
/// `OL_DEVICE_INFO_PLATFORM = 1`: `[ol_platform_handle_t]`.
const OL_DEVICE_INFO_PLATFORM: OlDeviceInfo = 1;
/// `OL_DEVICE_INFO_NAME = 2`: `[char[]]`.
const OL_DEVICE_INFO_NAME: OlDeviceInfo = 2;

/// `ol_platform_info_t` (a 4-byte C enum, see `OL_PLATFORM_INFO_FORCE_UINT32`).
type OlPlatformInfo = u32;
/// `OL_PLATFORM_INFO_BACKEND = 3`: `[ol_platform_backend_t]`.
const OL_PLATFORM_INFO_BACKEND: OlPlatformInfo = 3;

/// `ol_platform_backend_t` (a 4-byte C enum, see `OL_PLATFORM_BACKEND_FORCE_UINT32`).
type OlPlatformBackend = u32;
/// `OL_PLATFORM_BACKEND_HOST = 4`.
const OL_PLATFORM_BACKEND_HOST: OlPlatformBackend = 4;

/// `typedef bool (*ol_device_iterate_cb_t)(ol_device_handle_t Device, void *UserData);`
type OlDeviceIterateCb = extern "C" fn(device: OlDevice, user_data: *mut c_void) -> bool;

/// `ol_result_t olInit();`
type OlInit = unsafe extern "C" fn() -> OlResult;
/// `ol_result_t olShutDown();`
type OlShutDown = unsafe extern "C" fn() -> OlResult;
/// `ol_result_t olIterateDevices(ol_device_iterate_cb_t Callback, void *UserData);`
type OlIterateDevices =
    unsafe extern "C" fn(callback: OlDeviceIterateCb, user_data: *mut c_void) -> OlResult;
/// `ol_result_t olGetDeviceInfoSize(ol_device_handle_t Device, ol_device_info_t PropName,
/// size_t *PropSizeRet);`
type OlGetDeviceInfoSize =
    unsafe extern "C" fn(device: OlDevice, prop: OlDeviceInfo, size_ret: *mut usize) -> OlResult;
/// `ol_result_t olGetDeviceInfo(ol_device_handle_t Device, ol_device_info_t PropName,
/// size_t PropSize, void *PropValue);`
type OlGetDeviceInfo = unsafe extern "C" fn(
    device: OlDevice,
    prop: OlDeviceInfo,
    size: usize,
    value: *mut c_void,
) -> OlResult;
/// `ol_result_t olGetPlatformInfo(ol_platform_handle_t Platform, ol_platform_info_t
/// PropName, size_t PropSize, void *PropValue);`
type OlGetPlatformInfo = unsafe extern "C" fn(
    platform: OlPlatform,
    prop: OlPlatformInfo,
    size: usize,
    value: *mut c_void,
) -> OlResult;
/// `ol_result_t olMemcpy(ol_queue_handle_t Queue, void *DstPtr, ol_device_handle_t
/// DstDevice, const void *SrcPtr, ol_device_handle_t SrcDevice, size_t Size);`
type OlMemcpy = unsafe extern "C" fn(
    queue: OlQueue,
    dst: *mut c_void,
    dst_device: OlDevice,
    src: *const c_void,
    src_device: OlDevice,
    size: usize,
) -> OlResult;

/// The entry points this bench uses, taken from the library, which it keeps open.
struct LibOffload {
    init: OlInit,
    shut_down: OlShutDown,
    iterate_devices: OlIterateDevices,
    get_device_info_size: OlGetDeviceInfoSize,
    get_device_info: OlGetDeviceInfo,
    get_platform_info: OlGetPlatformInfo,
    memcpy: OlMemcpy,
    /// Keeps the function pointers above valid (the library is also linked NODELETE).
    _library: libloading::Library,
}

impl LibOffload {
    /// Opens the library and takes every entry point, or says why not.
    fn open(path: &str) -> Result<LibOffload, String> {
        // SAFETY: libLLVMOffload's initialisers only set up its own state (the plugins are
        // opened by `olInit`, not at load time); nothing else in this process loads it.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load {path}: {e}"))?;
        fn get<T: Copy>(
            library: &libloading::Library,
            path: &str,
            name: &str,
        ) -> Result<T, String> {
            // SAFETY: every `T` this is called with is the function-pointer type written
            // above from the header's prototype of `name`; the pointer is used only while
            // `library` is kept open (it lives in the same `LibOffload`).
            unsafe { library.get::<T>(name.as_bytes()) }
                .map(|symbol| *symbol)
                .map_err(|e| format!("{path} lacks {name}: {e}"))
        }
        Ok(LibOffload {
            init: get(&library, path, "olInit")?,
            shut_down: get(&library, path, "olShutDown")?,
            iterate_devices: get(&library, path, "olIterateDevices")?,
            get_device_info_size: get(&library, path, "olGetDeviceInfoSize")?,
            get_device_info: get(&library, path, "olGetDeviceInfo")?,
            get_platform_info: get(&library, path, "olGetPlatformInfo")?,
            memcpy: get(&library, path, "olMemcpy")?,
            _library: library,
        })
    }

    /// Every handle liboffload reports, into `out` (cleared first).
    fn devices_into(&self, out: &mut Vec<OlDevice>) {
        out.clear();
        // SAFETY: `collect_device` matches `ol_device_iterate_cb_t` and casts `UserData`
        // back to the `Vec<OlDevice>` passed here, which is exclusively borrowed for the
        // call; liboffload calls the callback only during `olIterateDevices`.
        check("olIterateDevices", unsafe {
            (self.iterate_devices)(collect_device, (out as *mut Vec<OlDevice>).cast())
        });
    }

    /// The device of liboffload's host platform (`OL_PLATFORM_BACKEND_HOST`), the one the
    /// header says to name for host pointers in `olMemcpy`.
    fn host_device(&self) -> OlDevice {
        let mut devices = Vec::new();
        self.devices_into(&mut devices);
        devices
            .into_iter()
            .find(|&device| {
                let mut platform: OlPlatform = std::ptr::null_mut();
                // SAFETY: `device` was just reported by `olIterateDevices` in this
                // generation; OL_DEVICE_INFO_PLATFORM is an `ol_platform_handle_t`, and
                // `platform` is exactly that many bytes.
                check("olGetDeviceInfo(OL_DEVICE_INFO_PLATFORM)", unsafe {
                    (self.get_device_info)(
                        device,
                        OL_DEVICE_INFO_PLATFORM,
                        size_of::<OlPlatform>(),
                        (&raw mut platform).cast(),
                    )
                });
                let mut backend: OlPlatformBackend = 0;
                // SAFETY: `platform` came from the device just above; the backend is an
                // `ol_platform_backend_t`, 4 bytes, the size of `backend`.
                check("olGetPlatformInfo(OL_PLATFORM_INFO_BACKEND)", unsafe {
                    (self.get_platform_info)(
                        platform,
                        OL_PLATFORM_INFO_BACKEND,
                        size_of::<OlPlatformBackend>(),
                        (&raw mut backend).cast(),
                    )
                });
                backend == OL_PLATFORM_BACKEND_HOST
            })
            .expect("liboffload reports no device of its host platform")
    }

    /// The device's name as a user gets it: size query, buffer, value query.
    fn device_name(&self, device: OlDevice) -> Vec<u8> {
        let mut size = 0usize;
        // SAFETY: `device` is a live handle of this generation; `size` is a `size_t`.
        check("olGetDeviceInfoSize(OL_DEVICE_INFO_NAME)", unsafe {
            (self.get_device_info_size)(device, OL_DEVICE_INFO_NAME, &raw mut size)
        });
        let mut name = vec![0u8; size];
        // SAFETY: `name` holds exactly the `size` bytes the library asked for.
        check("olGetDeviceInfo(OL_DEVICE_INFO_NAME)", unsafe {
            (self.get_device_info)(device, OL_DEVICE_INFO_NAME, size, name.as_mut_ptr().cast())
        });
        name
    }
}

/// The `olIterateDevices` callback: pushes the handle into the `Vec<OlDevice>` behind
/// `user_data` and goes on. It cannot panic (a panic may not unwind into C): `push` only
/// aborts on allocation failure.
extern "C" fn collect_device(device: OlDevice, user_data: *mut c_void) -> bool {
    // SAFETY: `devices_into`, the only caller of `olIterateDevices` here, passes a pointer
    // to a `Vec<OlDevice>` it borrows exclusively for the duration of the iteration.
    let devices = unsafe { &mut *user_data.cast::<Vec<OlDevice>>() };
    devices.push(device);
    true
}

/// Panics with liboffload's error code and details unless `result` is `OL_SUCCESS`.
#[track_caller]
fn check(call: &str, result: OlResult) {
    if result.is_null() {
        return;
    }
    // SAFETY: a non-NULL `ol_result_t` points to an `ol_error_struct_t` the library
    // allocated and keeps in its global error set for the life of the process.
    let error = unsafe { &*result };
    let details = if error.details.is_null() {
        "(no details)".into()
    } else {
        // SAFETY: a non-NULL `Details` is a NUL-terminated string the library keeps as
        // long as the error itself.
        unsafe { CStr::from_ptr(error.details) }.to_string_lossy()
    };
    let code = error.code;
    panic!("liboffload {call} failed: ol_errc_t {code}: {details}");
}

fn host_device(rt: &Offload) -> Device {
    rt.devices()
        .expect("devices")
        .into_iter()
        .find(|d| d.backend() == BackendKind::Host)
        .expect("a host device")
}

fn init_shutdown(c: &mut Criterion, ol: &LibOffload) -> Paired {
    // Nothing else may hold a runtime: each iteration must be a real 0→1→0.
    let down = Offload::init().expect("init").shutdown().expect("shutdown");
    assert!(
        down.was_last(),
        "another runtime is alive: the cycle would not be a 0→1→0 transition"
    );
    paired(
        c,
        "init_shutdown",
        ("offload", "liboffload"),
        SAMPLES,
        || {
            let rt = Offload::init().expect("init");
            black_box(rt.shutdown().expect("shutdown"));
        },
        || {
            // SAFETY: olInit takes no arguments; this closure balances it with olShutDown
            // at once, and no handle of this generation is kept.
            check("olInit", unsafe { (ol.init)() });
            // SAFETY: balances the olInit just above, the only one outstanding.
            check("olShutDown", unsafe { (ol.shut_down)() });
        },
    )
}

fn with_runtimes(c: &mut Criterion, ol: &LibOffload) -> Vec<Paired> {
    let rt = Offload::init().expect("init");
    let dev = host_device(&rt);
    // SAFETY: olInit takes no arguments; it is balanced by the olShutDown at the end of
    // this function, and every handle used in between is taken after it.
    check("olInit", unsafe { (ol.init)() });
    let ol_host = ol.host_device();
    let name = ol.device_name(ol_host);
    println!(
        "liboffload host device: {:?}; offload host device: {:?}",
        CStr::from_bytes_until_nul(&name).expect("a NUL-terminated name"),
        dev.info().expect("info").name
    );

    let mut ol_list = || {
        let mut devices = Vec::new();
        ol.devices_into(black_box(&mut devices));
        black_box(devices);
    };
    let mut reports = Vec::new();
    reports.push(paired(
        c,
        "device_list",
        ("offload", "liboffload"),
        SAMPLES,
        || {
            black_box(black_box(&rt).device_list().expect("device_list"));
        },
        &mut ol_list,
    ));
    reports.push(paired(
        c,
        "devices_vec",
        ("offload", "liboffload"),
        SAMPLES,
        || {
            black_box(black_box(&rt).devices().expect("devices"));
        },
        &mut ol_list,
    ));

    reports.push(paired(
        c,
        "device_info",
        ("offload", "liboffload"),
        SAMPLES,
        || {
            black_box(black_box(&dev).info().expect("info"));
        },
        || {
            black_box(ol.device_name(black_box(ol_host)));
        },
    ));

    let src = dev.alloc(COPY, MemKind::Host).expect("alloc src");
    let dst = dev.alloc(COPY, MemKind::Host).expect("alloc dst");
    let data: Vec<u8> = (0..COPY as u8).collect();
    src.write(0, &data).expect("write src");
    let ol_src: Box<[u8; COPY]> = Box::new(data.clone().try_into().expect("64 bytes"));
    let mut ol_dst: Box<[u8; COPY]> = Box::new([0; COPY]);
    // liboffload's side of `copy64` and `write64`: one synchronous `olMemcpy`.
    let mut ol_copy = || {
        // SAFETY: NULL queue = a synchronous copy (header: "If a queue is not specified,
        // the memcpy happens synchronously"); both pointers are host memory of COPY bytes,
        // named with the host platform's device as the header asks, and the two arrays do
        // not overlap.
        check("olMemcpy", unsafe {
            (ol.memcpy)(
                std::ptr::null_mut(),
                black_box(ol_dst.as_mut_ptr()).cast(),
                ol_host,
                black_box(ol_src.as_ptr()).cast(),
                ol_host,
                black_box(COPY),
            )
        });
    };
    reports.push(paired(
        c,
        "copy64",
        ("offload", "liboffload"),
        SAMPLES,
        || {
            black_box(&dst)
                .copy_from(0, black_box(&src), 0, black_box(COPY))
                .expect("copy_from")
        },
        &mut ol_copy,
    ));
    reports.push(paired(
        c,
        "write64",
        ("offload", "liboffload"),
        SAMPLES,
        || {
            black_box(&dst)
                .write(0, black_box(&data[..]))
                .expect("write")
        },
        &mut ol_copy,
    ));
    // A filtered run (`--bench device_list`) measured no copy: nothing to check then.
    if reports
        .iter()
        .any(|r| r.id.ends_with("64") && r.samples > 0)
    {
        let mut out = [0u8; COPY];
        dst.read(0, &mut out).expect("read dst");
        assert_eq!(&out[..], &data[..], "offload copied the 64 bytes");
        assert_eq!(&ol_dst[..], &data[..], "olMemcpy copied the 64 bytes");
    }

    // SAFETY: balances the olInit at the top of this function; no liboffload handle is
    // used after it.
    check("olShutDown", unsafe { (ol.shut_down)() });
    src.free().expect("free src");
    dst.free().expect("free dst");
    drop(dev);
    assert!(rt.shutdown().expect("shutdown").was_last());
    reports
}

fn time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(SAMPLES)
        .configure_from_args()
}

fn main() {
    let ol = match LibOffload::open(LIBRARY) {
        Ok(ol) => ol,
        Err(why) => {
            println!("peer benchmark skipped: {why}");
            return;
        }
    };
    let mut c = config();
    let mut reports = vec![init_shutdown(&mut c, &ol)];
    reports.extend(with_runtimes(&mut c, &ol));
    c.final_summary();

    println!("\nsummary (offload vs liboffload, paired; ratio = offload / liboffload):");
    println!(
        "  {:<14} {:>14} {:>14} {:>8}  {:<19} {:>5}",
        "operation", "offload", "liboffload", "ratio", "ratio IQR", "pairs"
    );
    for r in reports.iter().filter(|r| r.samples > 0) {
        println!(
            "  {:<14} {:>14} {:>14} {:>8.3}  {:<19} {:>5}",
            r.id,
            time(r.ours_ns.median),
            time(r.theirs_ns.median),
            r.ratio.median,
            format!("{:.3}–{:.3}", r.ratio.q1, r.ratio.q3),
            r.samples
        );
    }
}
