//! L2 and the exit hook, seen from outside: `liboffload_embed.so` (a C-ABI library that
//! embeds offload) is `dlopen`ed and `dlclose`d again and again in this process, and in child
//! processes it is left loaded at exit, or closed without shutting the runtime down.
//!
//! This file does not link `offload_embed` or `offload`: every call goes through `dlsym`,
//! so the only copy of the runtime in the process is the one inside the shared library.
//! (It takes only the bytes of test programs from the backends' `fixtures` modules.)

mod common;

use common::{LIB_NAME, lib_path};
use std::path::Path;

use libloading::Library;

const DEINIT_LINE: &str = "offload-embed: deinit";
const CHILD_ENV: &str = "OFFLOAD_EMBED_CHILD";
const CYCLES: usize = 200;

// Tests in this process that load the library take turns (`serial()`): two loads at once
// would share one handle, and the library would not unload at the first `dlclose`.
use offload_testing::serial;

/// The lines of /proc/self/maps that map the library (by full path or by file name).
fn mappings(path: &Path) -> Vec<String> {
    common::mappings_where(|mapped| {
        mapped == path || mapped.file_name().and_then(|n| n.to_str()) == Some(LIB_NAME)
    })
}

/// The library's exports, copied out of a loaded [`Library`]. Valid only while it is loaded.
struct Api {
    init: extern "C" fn() -> i32,
    init_traced: extern "C" fn() -> i32,
    work: extern "C" fn() -> i32,
    shutdown: extern "C" fn() -> i32,
    generation: extern "C" fn() -> u64,
    counter: extern "C" fn() -> u64,
    launch: unsafe extern "C" fn(*const u8, usize) -> i32,
    launch_on: unsafe extern "C" fn(u32, *const u8, usize) -> i32,
    panicking_host_fn: extern "C" fn() -> i32,
}

/// Loads the library and looks up its exports.
fn load(path: &Path) -> (Library, Api) {
    // SAFETY: the library is our own fixture; its initialisers are Rust statics (const) and
    // std's, which are sound to run on dlopen.
    let lib = unsafe { Library::new(path) }.expect("dlopen liboffload_embed.so");
    // SAFETY: the symbols are the fixture's `extern "C"` exports with exactly these
    // signatures (see tests/embed/src/lib.rs). The function pointers are copied out and used
    // only while `lib` is loaded.
    let api = unsafe {
        Api {
            init: *lib
                .get(b"offload_embed_init\0")
                .expect("offload_embed_init"),
            init_traced: *lib
                .get(b"offload_embed_init_traced\0")
                .expect("offload_embed_init_traced"),
            work: *lib
                .get(b"offload_embed_work\0")
                .expect("offload_embed_work"),
            shutdown: *lib
                .get(b"offload_embed_shutdown\0")
                .expect("offload_embed_shutdown"),
            generation: *lib
                .get(b"offload_embed_generation\0")
                .expect("offload_embed_generation"),
            counter: *lib
                .get(b"offload_embed_counter\0")
                .expect("offload_embed_counter"),
            launch: *lib
                .get(b"offload_embed_launch\0")
                .expect("offload_embed_launch"),
            launch_on: *lib
                .get(b"offload_embed_launch_on\0")
                .expect("offload_embed_launch_on"),
            panicking_host_fn: *lib
                .get(b"offload_embed_panicking_host_fn\0")
                .expect("offload_embed_panicking_host_fn"),
        }
    };
    (lib, api)
}

/// `dlclose`s the library; takes its exports too, so none can be called afterwards.
fn close(lib: Library, _api: Api) {
    lib.close().expect("dlclose");
}

fn cycles(shutdown_before_close: bool) {
    let _serial = serial();
    let path = lib_path();
    assert!(
        mappings(&path).is_empty(),
        "{LIB_NAME} is mapped before the first dlopen"
    );
    for cycle in 0..CYCLES {
        let (lib, api) = load(&path);
        assert!(
            !mappings(&path).is_empty(),
            "cycle {cycle}: not mapped after dlopen"
        );
        assert_eq!(
            (api.counter)(),
            1,
            "cycle {cycle}: statics did not start over"
        );
        assert_eq!((api.counter)(), 2, "cycle {cycle}: counter");
        assert_eq!(
            (api.generation)(),
            0,
            "cycle {cycle}: a runtime is held before init"
        );
        assert_eq!((api.init)(), 0, "cycle {cycle}: offload_embed_init");
        // offload's own lifecycle state started over too: this is its first generation.
        assert_eq!((api.generation)(), 1, "cycle {cycle}: offload generation");
        assert_eq!((api.work)(), 0, "cycle {cycle}: offload_embed_work");
        assert_eq!((api.work)(), 0, "cycle {cycle}: offload_embed_work again");
        // A kernel launch on worker threads: they must not pin the library either.
        let image = offload_host::fixtures::KERNELS;
        // SAFETY: `image` is a live slice of `image.len()` bytes.
        let launched = unsafe { (api.launch)(image.as_ptr(), image.len()) };
        assert_eq!(launched, 0, "cycle {cycle}: offload_embed_launch");
        if shutdown_before_close {
            assert_eq!((api.shutdown)(), 0, "cycle {cycle}: offload_embed_shutdown");
            assert_eq!(
                (api.generation)(),
                0,
                "cycle {cycle}: runtime held after shutdown"
            );
            assert_eq!((api.shutdown)(), -2, "cycle {cycle}: second shutdown");
        }
        close(lib, api);
        let left = mappings(&path);
        assert!(
            left.is_empty(),
            "cycle {cycle}: {LIB_NAME} still mapped after dlclose (something pins it):\n{}",
            left.join("\n")
        );
    }
}

/// L2 and L6: 200 × (dlopen → init → a host function that panics, caught and returned by
/// the next sync → shutdown → dlclose): the panic machinery leaves nothing behind that pins
/// the library (no thread-local destructor on a thread offload does not own).
///
/// With `RUST_BACKTRACE` set, std's backtrace printer maps the library's file to read its
/// symbols and keeps that mapping in a cache of its own, which `/proc/self/maps` shows after
/// `dlclose` although the library itself is gone: the cycles then run in a child without it.
#[test]
fn dlopen_cycles_with_a_panicking_host_function() {
    if std::env::var("RUST_BACKTRACE").is_ok_and(|v| v != "0") {
        run_child("dlopen_cycles_with_a_panicking_host_function", "panicking");
        return;
    }
    let _serial = serial();
    let path = lib_path();
    for cycle in 0..CYCLES {
        let (lib, api) = load(&path);
        assert_eq!((api.init)(), 0, "cycle {cycle}: offload_embed_init");
        assert_eq!(
            (api.panicking_host_fn)(),
            0,
            "cycle {cycle}: the host function's panic did not come back as Error::Callback"
        );
        assert_eq!((api.shutdown)(), 0, "cycle {cycle}: offload_embed_shutdown");
        close(lib, api);
        let left = mappings(&path);
        assert!(
            left.is_empty(),
            "cycle {cycle}: {LIB_NAME} still mapped after a panicking host function:\n{}",
            left.join("\n")
        );
    }
}

/// L2: 200 × (dlopen → init → work → shutdown → dlclose); the library unloads every time
/// and its statics start over.
#[test]
fn dlopen_init_shutdown_dlclose_cycles() {
    cycles(true);
}

/// L2 without shutdown: 200 × (dlopen → init → work → dlclose). The exit hook shuts the
/// runtime down at dlclose; the library still unloads and the next load works.
#[test]
fn dlopen_init_dlclose_without_shutdown_cycles() {
    cycles(false);
}

/// Runs the child test `name` of this executable with `OFFLOAD_EMBED_CHILD=<mode>`; returns
/// its stderr after checking that it exited successfully.
fn run_child(name: &str, mode: &str) -> String {
    common::run_child(name, CHILD_ENV, mode)
}

fn position(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("child stderr lacks {needle:?}:\n{haystack}"))
}

/// The exit hook at process exit: a runtime still held when the process exits (library
/// neither shut down nor closed) is deinitialised by the hook, after `main` returned.
#[test]
fn exit_hook_runs_at_process_exit() {
    let stderr = run_child("child_exit", "exit");
    let returning = position(&stderr, "child: returning");
    let deinit = position(&stderr, DEINIT_LINE);
    assert!(
        deinit > returning,
        "platform deinitialised before the child returned:\n{stderr}"
    );
    assert_eq!(
        stderr.matches(DEINIT_LINE).count(),
        1,
        "deinit not exactly once:\n{stderr}"
    );
}

/// The exit hook at dlclose: closing the library without shutdown runs the hook then
/// (not at process exit, when its code would be gone), and the library unloads.
#[test]
fn exit_hook_runs_at_dlclose() {
    let stderr = run_child("child_dlclose", "dlclose");
    let before = position(&stderr, "child: before dlclose");
    let deinit = position(&stderr, DEINIT_LINE);
    let after = position(&stderr, "child: after dlclose");
    assert!(
        before < deinit && deinit < after,
        "deinit not between the dlclose markers:\n{stderr}"
    );
    assert_eq!(
        stderr.matches(DEINIT_LINE).count(),
        1,
        "deinit not exactly once:\n{stderr}"
    );
    assert!(
        position(&stderr, "child: unmapped") > after,
        "unmapped marker out of order:\n{stderr}"
    );
}

/// A vendor backend on its protocol-checking fake (offload-driver/fake), for the dlopen
/// cycles: what the child loads, launches and asks the fake.
struct Vendor {
    /// The backend's number for `offload_embed_launch_on`, and its name.
    code: u32,
    name: &'static str,
    fake: offload_testing::fake::FakeDriver,
    library: &'static str,
    hooks: &'static str,
    /// The fixture program with `add_one(buf, n)`.
    fixture: &'static [u8],
    /// The fake's kinds of live object that must be none at the end.
    live: &'static [&'static str],
}

/// The vendor's fake; with `real_var` set to 1 (the GPU kit) the cycles run on the real
/// driver instead, and only the unmap check and the launches are asserted.
const fn fake(
    source: &'static str,
    prefix: &'static str,
    real_var: &'static str,
) -> offload_testing::fake::FakeDriver {
    offload_testing::fake::FakeDriver {
        case_var: CHILD_ENV,
        source,
        build_dir: env!("CARGO_TARGET_TMPDIR"),
        prefix,
        real_var,
    }
}

const VENDORS: [Vendor; 3] = [
    Vendor {
        code: 0,
        name: "cuda",
        fake: fake(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../offload-driver/fake/fake_cuda.c"
            ),
            "embed-fake-cuda",
            "OFFLOAD_CUDA_REAL",
        ),
        library: "libcuda.so.1",
        hooks: "fake_cuda",
        fixture: offload_cuda::fixtures::KERNELS,
        live: &["context", "alloc", "module", "stream"],
    },
    Vendor {
        code: 1,
        name: "hip",
        fake: fake(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../offload-driver/fake/fake_hip.c"
            ),
            "embed-fake-hip",
            "OFFLOAD_HIP_REAL",
        ),
        library: "libamdhip64.so",
        hooks: "fake_hip",
        fixture: offload_hip::fixtures::KERNELS,
        live: &["alloc", "module", "stream"],
    },
    Vendor {
        code: 2,
        name: "ze",
        fake: fake(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../offload-driver/fake/fake_ze.c"
            ),
            "embed-fake-ze",
            "OFFLOAD_ZE_REAL",
        ),
        library: "libze_loader.so.1",
        hooks: "fake_ze",
        fixture: offload_ze::fixtures::KERNELS,
        live: &["context", "device-mem", "module", "list"],
    },
];

/// L2 with a vendor backend on its protocol-checking fake: 200 × (dlopen → init → launch on
/// the vendor's device → shutdown → dlclose) in a child that finds the fake under the
/// driver's name; the library unloads every time (the driver stays: it is opened
/// `RTLD_NODELETE`, as a real one must be), and the fake saw no protocol violation and
/// nothing left alive. Skipped (printed) where the library was built without the backend's
/// feature; `cargo test --workspace --all-features`, CI's command, builds it with every
/// backend.
fn dlopen_cycles_on_the_fake(vendor: &Vendor) {
    let Some(dir) = vendor.fake.build("full", vendor.library, &[]) else {
        return;
    };
    let result = vendor
        .fake
        .run(&dir, &format!("{}-cycles", vendor.name), &[]);
    if result.starts_with("no backend") {
        assert!(
            !vendor.fake.real(),
            "{}=1 but the embedding library found no {} device",
            vendor.fake.real_var,
            vendor.name
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the embedding library has no {} backend",
            vendor.name
        );
        println!(
            "SKIP dlopen cycles on the {} fake: built without the feature",
            vendor.name
        );
        return;
    }
    let live: Vec<String> = vendor.live.iter().map(|k| format!("{k}:0")).collect();
    let report = if vendor.fake.real() {
        offload_testing::fake::REAL.to_string()
    } else {
        format!("violations=[] live={}", live.join(","))
    };
    assert_eq!(result, format!("cycles=200 {report}"));
}

#[test]
fn dlopen_cycles_on_the_cuda_fake() {
    dlopen_cycles_on_the_fake(&VENDORS[0]);
}

#[test]
fn dlopen_cycles_on_the_hip_fake() {
    dlopen_cycles_on_the_fake(&VENDORS[1]);
}

#[test]
fn dlopen_cycles_on_the_ze_fake() {
    dlopen_cycles_on_the_fake(&VENDORS[2]);
}

/// Child of the `dlopen_cycles_on_the_*_fake` tests (run by the fake-driver harness, which
/// reads its `RESULT` line); does nothing in a normal run.
#[test]
fn child() {
    let Some(vendor) = VENDORS
        .iter()
        .find(|v| is_child(&format!("{}-cycles", v.name)))
    else {
        return;
    };
    let path = lib_path();
    let mut done = 0;
    for cycle in 0..CYCLES {
        let (lib, api) = load(&path);
        assert_eq!((api.init)(), 0, "cycle {cycle}: offload_embed_init");
        let image = vendor.fixture;
        // SAFETY: `image` is a live slice of `image.len()` bytes.
        let launched = unsafe { (api.launch_on)(vendor.code, image.as_ptr(), image.len()) };
        if launched == -4 {
            println!("RESULT no backend");
            return;
        }
        assert_eq!(launched, 0, "cycle {cycle}: offload_embed_launch_on");
        assert_eq!((api.shutdown)(), 0, "cycle {cycle}: offload_embed_shutdown");
        close(lib, api);
        let left = mappings(&path);
        assert!(
            left.is_empty(),
            "cycle {cycle}: still mapped: {}",
            left.join("\n")
        );
        done += 1;
    }
    if vendor.fake.real() {
        println!("RESULT cycles={done} {}", offload_testing::fake::REAL);
        return;
    }
    // SAFETY: in this child, the vendor's library is the fake the parent built.
    let fake = unsafe { offload_testing::fake::FakeHooks::open(vendor.library, vendor.hooks) };
    let live: Vec<String> = vendor
        .live
        .iter()
        .map(|k| format!("{k}:{}", fake.live(k)))
        .collect();
    println!(
        "RESULT cycles={done} violations={:?} live={}",
        fake.violations(),
        live.join(",")
    );
}

fn is_child(mode: &str) -> bool {
    std::env::var(CHILD_ENV).as_deref() == Ok(mode)
}

/// Child of [`exit_hook_runs_at_process_exit`]; does nothing in a normal run.
#[test]
fn child_exit() {
    if !is_child("exit") {
        return;
    }
    let (lib, api) = load(&lib_path());
    assert_eq!((api.init_traced)(), 0, "offload_embed_init_traced");
    assert_eq!((api.work)(), 0, "offload_embed_work");
    // Neither shutdown nor dlclose: the exit hook must deinitialise the platforms.
    std::mem::forget(lib);
    eprintln!("child: returning");
}

/// Child of [`exit_hook_runs_at_dlclose`]; does nothing in a normal run.
#[test]
fn child_dlclose() {
    if !is_child("dlclose") {
        return;
    }
    let path = lib_path();
    let (lib, api) = load(&path);
    assert_eq!((api.init_traced)(), 0, "offload_embed_init_traced");
    assert_eq!((api.work)(), 0, "offload_embed_work");
    eprintln!("child: before dlclose");
    close(lib, api);
    eprintln!("child: after dlclose");
    let left = mappings(&path);
    assert!(
        left.is_empty(),
        "{LIB_NAME} still mapped after dlclose:\n{}",
        left.join("\n")
    );
    eprintln!("child: unmapped");
}
