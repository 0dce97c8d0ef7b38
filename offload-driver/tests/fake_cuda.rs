//! The protocol-checking fake libcuda (`fake/fake_cuda.c`) on its own, driven through raw
//! driver calls (no backend): a correct session leaves no violation, a skipped free is
//! reported as exactly that, failure injection fails the call it names, the kernels and
//! images behave as the conformance suite expects, and device memory is shared between
//! two processes through IPC handles.
//!
//! The fake is built with the system C compiler as `libcuda.so.1`; each case runs in a child
//! process (this test binary again) that finds it through `LD_LIBRARY_PATH`. Without a C
//! compiler the tests print SKIP, except under `CI=true`.
#![allow(unsafe_code, non_snake_case, clippy::unwrap_used, clippy::panic)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::path::Path;
use std::ptr;

use libloading::Library;
use offload_testing::fake::cases::{hex, unhex};
use offload_testing::fake::{FakeDriver, FakeHooks};

const FAKE: FakeDriver = FakeDriver {
    case_var: "OFFLOAD_DRIVER_FAKE_CUDA_CASE",
    source: concat!(env!("CARGO_MANIFEST_DIR"), "/fake/fake_cuda.c"),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: "fake-cuda",
    real_var: "",
};

const KERNELS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../offload-cuda/fixtures/kernels.ptx"
);
const KERNELS_STEP2: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../offload-cuda/fixtures/kernels_step2.ptx"
);

type CuResult = c_int;
type DevPtr = u64;
type Handle = *mut c_void;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value to `cuIpcOpenMemHandle_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IpcMemHandle {
    reserved: [u8; 64],
}

macro_rules! driver_api {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// The driver entry points the cases call, from the fake.
        struct Cu {
            $($name: unsafe extern "C" fn($($arg),*) -> CuResult,)*
            _library: Library,
        }

        impl Cu {
            fn load() -> Cu {
                // SAFETY: LD_LIBRARY_PATH names the fake's directory, so this is the fake.
                let library = unsafe { Library::new("libcuda.so.1") }.unwrap();
                Cu {
                    // SAFETY: each entry point has the C signature of cuda.h, as declared.
                    $($name: *unsafe {
                        library.get(concat!(stringify!($name), "\0").as_bytes())
                    }.unwrap(),)*
                    _library: library,
                }
            }
        }
    };
}

driver_api! {
    cuInit: fn(c_uint);
    cuDevicePrimaryCtxRetain: fn(*mut Handle, c_int);
    cuDevicePrimaryCtxRelease_v2: fn(c_int);
    cuCtxSetCurrent: fn(Handle);
    cuMemAlloc_v2: fn(*mut DevPtr, usize);
    cuMemFree_v2: fn(DevPtr);
    cuMemcpyHtoD_v2: fn(DevPtr, *const c_void, usize);
    cuMemcpyDtoH_v2: fn(*mut c_void, DevPtr, usize);
    cuModuleLoadDataEx: fn(*mut Handle, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
    cuModuleUnload: fn(Handle);
    cuModuleGetFunction: fn(*mut Handle, Handle, *const c_char);
    cuModuleGetGlobal_v2: fn(*mut DevPtr, *mut usize, Handle, *const c_char);
    cuFuncGetParamInfo: fn(Handle, usize, *mut usize, *mut usize);
    cuLaunchKernel: fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle,
        *mut *mut c_void, *mut *mut c_void);
    cuStreamCreate: fn(*mut Handle, c_uint);
    cuStreamDestroy_v2: fn(Handle);
    cuStreamQuery: fn(Handle);
    cuStreamSynchronize: fn(Handle);
    cuIpcGetMemHandle: fn(*mut IpcMemHandle, DevPtr);
    cuIpcOpenMemHandle_v2: fn(*mut DevPtr, IpcMemHandle, c_uint);
    cuIpcCloseMemHandle: fn(DevPtr);
    cuPointerGetAttribute: fn(*mut c_void, c_int, DevPtr);
}

/// Calls a driver entry point: `call!(cu.cuInit(0))` is its CUresult.
macro_rules! call {
    ($cu:ident . $name:ident ( $($arg:expr),* )) => {
        // SAFETY: the arguments are what the entry point's C signature asks for.
        unsafe { ($cu.$name)($($arg),*) }
    };
}

/// Calls a driver entry point that must succeed.
macro_rules! check {
    ($cu:ident . $name:ident ( $($arg:expr),* )) => {{
        let code = call!($cu.$name($($arg),*));
        assert_eq!(code, 0, "{} failed with {code}", stringify!($name));
    }};
}

fn hooks() -> FakeHooks {
    // SAFETY: in a child, libcuda.so.1 is the fake this test built.
    unsafe { FakeHooks::open("libcuda.so.1", "fake_cuda") }
}

/// A NUL-terminated PTX image read from a fixture.
fn ptx(path: &str) -> CString {
    CString::new(std::fs::read(path).unwrap()).unwrap()
}

fn name(text: &str) -> CString {
    CString::new(text).unwrap()
}

/// cuInit, then device 0's primary context retained and made current.
fn open(cu: &Cu) -> Handle {
    let mut ctx = ptr::null_mut();
    check!(cu.cuInit(0));
    check!(cu.cuDevicePrimaryCtxRetain(&mut ctx, 10));
    check!(cu.cuCtxSetCurrent(ctx));
    ctx
}

fn load(cu: &Cu, image: &CString) -> Handle {
    let mut module = ptr::null_mut();
    check!(cu.cuModuleLoadDataEx(
        &mut module,
        image.as_ptr().cast(),
        0,
        ptr::null_mut(),
        ptr::null_mut()
    ));
    module
}

fn function(cu: &Cu, module: Handle, kernel: &str) -> Handle {
    let mut f = ptr::null_mut();
    check!(cu.cuModuleGetFunction(&mut f, module, name(kernel).as_ptr()));
    f
}

fn write(cu: &Cu, dst: DevPtr, values: &[u32]) {
    check!(cu.cuMemcpyHtoD_v2(dst, values.as_ptr().cast(), 4 * values.len()));
}

fn read(cu: &Cu, src: DevPtr, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    check!(cu.cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, 4 * n));
    out
}

/// Launches `f` on the legacy stream over `grid` x `block` threads (x only).
fn launch(
    cu: &Cu,
    f: Handle,
    grid: u32,
    block: u32,
    shared: u32,
    args: &mut [*mut c_void],
) -> CuResult {
    let params = if args.is_empty() {
        ptr::null_mut()
    } else {
        args.as_mut_ptr()
    };
    call!(cu.cuLaunchKernel(
        f,
        grid,
        1,
        1,
        block,
        1,
        1,
        shared,
        ptr::null_mut(),
        params,
        ptr::null_mut()
    ))
}

fn arg<T>(value: &mut T) -> *mut c_void {
    ptr::from_mut(value).cast()
}

/// Allocates 64 u32s, runs add_one over the first 60 and reads them back; frees the buffer
/// unless `leak`. Returns the first and last values read.
fn add_one_session(cu: &Cu, leak: bool) -> String {
    open(cu);
    let mut buf: DevPtr = 0;
    check!(cu.cuMemAlloc_v2(&mut buf, 256));
    write(cu, buf, &(0..64).collect::<Vec<u32>>());
    let image = ptx(KERNELS);
    let module = load(cu, &image);
    let add_one = function(cu, module, "add_one");
    let mut n: u32 = 60;
    check!(cu.cuLaunchKernel(
        add_one,
        1,
        1,
        1,
        64,
        1,
        1,
        0,
        ptr::null_mut(),
        [arg(&mut buf), arg(&mut n)].as_mut_ptr(),
        ptr::null_mut()
    ));
    let out = read(cu, buf, 64);
    if !leak {
        check!(cu.cuMemFree_v2(buf));
    }
    check!(cu.cuModuleUnload(module));
    check!(cu.cuDevicePrimaryCtxRelease_v2(10));
    format!("out[0]={} out[59]={} out[60]={}", out[0], out[59], out[60])
}

/// The child side: runs the case named in the environment and prints `RESULT <text>`.
#[test]
fn child() {
    let Ok(case) = std::env::var(FAKE.case_var) else {
        return;
    };
    let cu = Cu::load();
    let fake = hooks();
    let result = match case.as_str() {
        "clean" => {
            let seen = add_one_session(&cu, false);
            format!(
                "{seen} live={},{},{},{} launches={} violations={:?}",
                fake.live("alloc"),
                fake.live("module"),
                fake.live("function"),
                fake.live("context"),
                fake.calls("cuLaunchKernel"),
                fake.violations()
            )
        }
        "leak" => {
            let seen = add_one_session(&cu, true);
            let violations = fake.violations();
            fake.clear();
            format!(
                "{seen} live={} violations={violations:?} after_clear={:?}",
                fake.live("alloc"),
                fake.violations()
            )
        }
        "inject" => {
            open(&cu);
            let mut bufs = [0u64; 3];
            let codes: Vec<CuResult> = bufs
                .iter_mut()
                .map(|b| call!(cu.cuMemAlloc_v2(b, 64)))
                .collect();
            fake.fail("cuMemcpyHtoD_v2", 2, 999);
            let copies: Vec<CuResult> = (0..3)
                .map(|_| call!(cu.cuMemcpyHtoD_v2(bufs[0], [7u32].as_ptr().cast(), 4)))
                .collect();
            for b in bufs.into_iter().filter(|&b| b != 0) {
                check!(cu.cuMemFree_v2(b));
            }
            check!(cu.cuDevicePrimaryCtxRelease_v2(10));
            format!(
                "allocs={codes:?} copies={copies:?} alloc_calls={} violations={:?}",
                fake.calls("cuMemAlloc_v2"),
                fake.violations()
            )
        }
        "rules" => rules(&cu, &fake),
        "kernels" => kernels(&cu, &fake),
        "ipc-export" => ipc_export(&cu, &fake),
        "ipc-import" => ipc_import(&cu, &fake),
        other => format!("unknown case {other}"),
    };
    println!("RESULT {result}");
}

/// Protocol errors the fake must catch, each once.
fn rules(cu: &Cu, fake: &FakeHooks) -> String {
    let mut seen = Vec::new();
    let mut buf: DevPtr = 0;
    seen.push(call!(cu.cuMemAlloc_v2(&mut buf, 64))); // before cuInit
    check!(cu.cuInit(0));
    seen.push(call!(cu.cuMemAlloc_v2(&mut buf, 64))); // no current context
    let mut ctx = ptr::null_mut();
    check!(cu.cuDevicePrimaryCtxRetain(&mut ctx, 10));
    check!(cu.cuCtxSetCurrent(ctx));
    check!(cu.cuMemAlloc_v2(&mut buf, 64));
    check!(cu.cuMemFree_v2(buf));
    seen.push(call!(cu.cuMemFree_v2(buf))); // double free
    let mut stream = ptr::null_mut();
    check!(cu.cuStreamCreate(&mut stream, 1));
    check!(cu.cuStreamDestroy_v2(stream));
    seen.push(call!(cu.cuStreamQuery(stream))); // use after destroy
    seen.push(call!(
        cu.cuStreamSynchronize(ptr::without_provenance_mut(0x1234))
    )); // unknown
    let image = ptx(KERNELS);
    let module = load(cu, &image);
    let add_one = function(cu, module, "add_one");
    seen.push(launch(cu, add_one, 1, 32, 0, &mut [])); // kernelParams NULL
    let mut small: DevPtr = 0;
    check!(cu.cuMemAlloc_v2(&mut small, 16));
    let mut n: u32 = 32;
    seen.push(launch(
        cu,
        add_one,
        1,
        32,
        0,
        &mut [arg(&mut small), arg(&mut n)],
    )); // 128 > 16
    check!(cu.cuMemFree_v2(small));
    check!(cu.cuDevicePrimaryCtxRelease_v2(10)); // the module leaks
    seen.push(call!(cu.cuMemAlloc_v2(&mut buf, 64))); // the current context is released
    check!(cu.cuDevicePrimaryCtxRetain(&mut ctx, 10));
    seen.push(call!(cu.cuModuleUnload(module))); // its context is gone
    check!(cu.cuDevicePrimaryCtxRelease_v2(10));
    check!(cu.cuCtxSetCurrent(ptr::null_mut()));
    seen.push(call!(cu.cuDevicePrimaryCtxRelease_v2(10))); // more releases than retains
    let rules: Vec<String> = fake
        .violations()
        .iter()
        .map(|m| m.split(':').next().unwrap().to_string())
        .collect();
    format!("codes={seen:?} rules={rules:?}")
}

/// The conformance kernels, both images, a bad image and parameter layouts.
fn kernels(cu: &Cu, fake: &FakeHooks) -> String {
    open(cu);
    let mut out = Vec::new();
    let mut buf: DevPtr = 0;
    check!(cu.cuMemAlloc_v2(&mut buf, 4 * 64));
    let (one, two) = (ptx(KERNELS), ptx(KERNELS_STEP2));
    let (m1, m2) = (load(cu, &one), load(cu, &two));
    // A stream made after both modules: unloading them reorders the fake's registry.
    let mut stream = ptr::null_mut();
    check!(cu.cuStreamCreate(&mut stream, 1));
    let mut n: u32 = 64;
    for m in [m1, m2] {
        write(cu, buf, &[10; 64]);
        assert_eq!(
            launch(
                cu,
                function(cu, m, "add_one"),
                2,
                32,
                0,
                &mut [arg(&mut buf), arg(&mut n)]
            ),
            0
        );
        out.push(format!("add_one={}", read(cu, buf, 64)[63]));
    }
    let mut value: u32 = 5;
    let mut short: u32 = 3;
    let fill = function(cu, m1, "fill");
    assert_eq!(
        launch(
            cu,
            fill,
            1,
            64,
            0,
            &mut [arg(&mut buf), arg(&mut value), arg(&mut short)]
        ),
        0
    );
    out.push(format!("fill={:?}", &read(cu, buf, 4)));
    let (mut offset, mut size) = (0usize, 0usize);
    let params: Vec<String> = (0..4)
        .map(
            |i| match call!(cu.cuFuncGetParamInfo(fill, i, &mut offset, &mut size)) {
                0 => format!("{offset}+{size}"),
                code => format!("error {code}"),
            },
        )
        .collect();
    out.push(format!("fill_params={params:?}"));
    let mut g: DevPtr = 0;
    let mut g_size = 0usize;
    check!(cu.cuModuleGetGlobal_v2(&mut g, &mut g_size, m2, name("g").as_ptr()));
    write(cu, g, &[1234]);
    assert_eq!(
        launch(
            cu,
            function(cu, m2, "read_global"),
            1,
            1,
            0,
            &mut [arg(&mut buf)]
        ),
        0
    );
    out.push(format!(
        "g={}+{g_size} read_global={}",
        read(cu, g, 1)[0],
        read(cu, buf, 1)[0]
    ));
    let mut c: DevPtr = 0;
    check!(cu.cuModuleGetGlobal_v2(
        &mut c,
        ptr::null_mut(),
        m1,
        name("read_only_constant").as_ptr()
    ));
    out.push(format!("constant={}", read(cu, c, 1)[0]));
    let reverse = function(cu, m1, "shared_reverse");
    write(cu, buf, &(0..64).collect::<Vec<u32>>());
    assert_eq!(launch(cu, reverse, 2, 32, 64, &mut [arg(&mut buf)]), 0); // too little: nothing
    assert_eq!(launch(cu, reverse, 2, 32, 128, &mut [arg(&mut buf)]), 0);
    let r = read(cu, buf, 64);
    out.push(format!("reversed={},{},{},{}", r[0], r[31], r[32], r[63]));
    let mut missing = ptr::null_mut();
    out.push(format!(
        "missing={}",
        call!(cu.cuModuleGetFunction(&mut missing, m1, name("nothing").as_ptr()))
    ));
    // A bad image: CUDA_ERROR_INVALID_IMAGE and a message in the error log.
    let mut log = [0u8; 256];
    let mut options = [5 as c_int, 6];
    let mut values = [
        log.as_mut_ptr().cast::<c_void>(),
        ptr::without_provenance_mut(log.len()),
    ];
    let mut bad = ptr::null_mut();
    let code = call!(cu.cuModuleLoadDataEx(
        &mut bad,
        c"not ptx".as_ptr().cast(),
        2,
        options.as_mut_ptr(),
        values.as_mut_ptr()
    ));
    let text = CStr::from_bytes_until_nul(&log).unwrap().to_str().unwrap();
    out.push(format!(
        "bad={code} log={text:?} log_len={}",
        values[1].addr()
    ));
    // The buffer's identity: CU_POINTER_ATTRIBUTE_BUFFER_ID (7) of its middle.
    let mut id = 0u64;
    check!(cu.cuPointerGetAttribute(arg(&mut id), 7, buf + 100));
    out.push(format!("buffer_id_nonzero={}", id != 0));
    check!(cu.cuModuleUnload(m1));
    check!(cu.cuModuleUnload(m2));
    out.push(format!(
        "modules={} functions={} globals={}",
        fake.live("module"),
        fake.live("function"),
        fake.live("global")
    ));
    check!(cu.cuStreamSynchronize(stream));
    check!(cu.cuStreamDestroy_v2(stream));
    check!(cu.cuMemFree_v2(buf));
    check!(cu.cuDevicePrimaryCtxRelease_v2(10));
    format!("{} violations={:?}", out.join(" "), fake.violations())
}

/// The exporting side: allocates and writes, exports, has a child import and read it, frees.
fn ipc_export(cu: &Cu, fake: &FakeHooks) -> String {
    open(cu);
    let mut buf: DevPtr = 0;
    check!(cu.cuMemAlloc_v2(&mut buf, 4 * 8));
    write(cu, buf, &[11, 22, 33, 44, 55, 66, 77, 88]);
    let mut handle = IpcMemHandle { reserved: [0; 64] };
    check!(cu.cuIpcGetMemHandle(&mut handle, buf));
    // A process cannot open its own handle (real drivers refuse it too).
    let mut own: DevPtr = 0;
    let own_code = call!(cu.cuIpcOpenMemHandle_v2(&mut own, handle, 1));
    let dir = std::env::var("LD_LIBRARY_PATH").unwrap();
    let child = FAKE.run(
        Path::new(&dir),
        "ipc-import",
        &[("FAKE_IPC_HANDLE", &hex(&handle.reserved))],
    );
    let after = read(cu, buf, 8);
    check!(cu.cuMemFree_v2(buf));
    check!(cu.cuDevicePrimaryCtxRelease_v2(10));
    format!(
        "own={own_code} child=[{child}] after={after:?} violations={:?}",
        fake.violations()
    )
}

/// The importing side: opens the handle, reads, writes one value back, closes.
fn ipc_import(cu: &Cu, fake: &FakeHooks) -> String {
    open(cu);
    let mut handle = IpcMemHandle { reserved: [0; 64] };
    handle
        .reserved
        .copy_from_slice(&unhex(&std::env::var("FAKE_IPC_HANDLE").unwrap()));
    let mut mapped: DevPtr = 0;
    check!(cu.cuIpcOpenMemHandle_v2(&mut mapped, handle, 1));
    let mut again: DevPtr = 0;
    let twice = call!(cu.cuIpcOpenMemHandle_v2(&mut again, handle, 1));
    let mut forged = handle;
    forged.reserved[0] ^= 0xff;
    let forged_code = call!(cu.cuIpcOpenMemHandle_v2(&mut again, forged, 1));
    let seen = read(cu, mapped, 8);
    write(cu, mapped + 4, &[2000]);
    let open_mappings = fake.live("ipc");
    check!(cu.cuIpcCloseMemHandle(mapped));
    check!(cu.cuDevicePrimaryCtxRelease_v2(10));
    format!(
        "read={seen:?} twice={twice} forged={forged_code} open={open_mappings} violations={:?}",
        fake.violations()
    )
}

fn build() -> Option<std::path::PathBuf> {
    FAKE.build("full", "libcuda.so.1", &[])
}

#[test]
fn a_correct_session_has_no_violations() {
    let Some(dir) = build() else { return };
    assert_eq!(
        FAKE.run(&dir, "clean", &[]),
        "out[0]=1 out[59]=60 out[60]=60 live=0,0,0,0 launches=1 violations=[]"
    );
}

#[test]
fn a_skipped_free_is_reported_as_exactly_that() {
    let Some(dir) = build() else { return };
    let result = FAKE.run(&dir, "leak", &[]);
    let (seen, violations) = result.split_once(" live=").unwrap();
    assert_eq!(seen, "out[0]=1 out[59]=60 out[60]=60");
    assert!(
        violations.starts_with("0 violations=[\"leak at context release: alloc 0x"),
        "{result}"
    );
    assert!(
        violations.ends_with(
            "(id 1, 256 bytes) still alive when device 0's primary context was released\"] \
             after_clear=[]"
        ),
        "{result}"
    );
    assert_eq!(
        violations.matches("leak at context release").count(),
        1,
        "{result}"
    );
}

#[test]
fn injected_failures_fail_the_named_call() {
    let Some(dir) = build() else { return };
    assert_eq!(
        FAKE.run(&dir, "inject", &[("FAKE_FAIL", "cuMemAlloc_v2:2:2")]),
        "allocs=[0, 2, 0] copies=[0, 999, 0] alloc_calls=3 violations=[]"
    );
}

#[test]
fn protocol_errors_are_violations() {
    let Some(dir) = build() else { return };
    assert_eq!(
        FAKE.run(&dir, "rules", &[]),
        "codes=[3, 201, 1, 400, 400, 1, 700, 709, 400, 201] \
         rules=[\"call before cuInit\", \"no current context\", \"double free\", \
         \"use after free\", \"unknown handle\", \"launch arguments\", \
         \"launch out of bounds\", \"leak at context release\", \
         \"released context is current\", \"context gone\", \
         \"retain/release imbalance\"]"
    );
}

#[test]
fn the_conformance_kernels_run_and_images_are_told_apart() {
    let Some(dir) = build() else { return };
    let expected = "add_one=11 add_one=12 fill=[5, 5, 5, 12] \
         fill_params=[\"0+8\", \"8+4\", \"12+4\", \"error 1\"] g=1234+4 read_global=1234 \
         constant=42 reversed=31,0,63,32 missing=500 \
         bad=200 log=\"fake ptx: line 1: not PTX: expected .version, found 'not'\" log_len=57 \
         buffer_id_nonzero=true modules=0 functions=0 globals=0 violations=[]";
    assert_eq!(FAKE.run(&dir, "kernels", &[]), expected);
    // Deferred queues change nothing a synchronising caller sees.
    assert_eq!(
        FAKE.run(&dir, "kernels", &[("FAKE_CU_DEFER", "1")]),
        expected
    );
}

#[test]
fn device_memory_is_shared_between_processes() {
    let Some(dir) = build() else { return };
    assert_eq!(
        FAKE.run(&dir, "ipc-export", &[]),
        "own=201 child=[read=[11, 22, 33, 44, 55, 66, 77, 88] twice=208 forged=400 open=1 \
         violations=[]] after=[11, 2000, 33, 44, 55, 66, 77, 88] violations=[]"
    );
}
