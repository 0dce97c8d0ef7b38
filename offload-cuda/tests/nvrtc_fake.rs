//! CUDA source programs (`Program::from_source(Source::cuda(..))`) against two stand-ins:
//! the protocol-checking fake libcuda (offload-driver/fake/fake_cuda.c) and the
//! protocol-checking fake NVRTC (offload-driver/fake/fake_nvrtc.c), which "compiles" a
//! source mentioning `add_one` to the fixture PTX and fails `#error` and `syntax error`
//! with NVRTC-style logs. Both are built into one private directory; each case runs in a
//! child process that finds them there (`LD_LIBRARY_PATH`), and ends by reading both fakes'
//! violation logs and live objects, which the parent asserts are empty.
//!
//! No real NVRTC ran here: these tests show that offload drives NVRTC's API correctly
//! (every program destroyed, sizes read before contents, errors and logs passed on, one
//! compile per target), not that NVRTC compiles any particular source.
//!
//! With `OFFLOAD_CUDA_REAL=1` (the GPU kit, scripts/gpu) the first three tests run on the
//! real libcuda and NVRTC the dynamic loader finds: the source compiles and add_one runs
//! once per program, and the compile errors carry NVRTC's log naming the line; what only the
//! fakes know (their logs, call counts, the fixture's other kernels, a second device) reads
//! `(real driver)`, and the tests of the fakes' own behaviour are skipped, saying so.

use offload_core::hal::{Device as _, Platform as _};
use offload_core::{
    CompilerId, Config, Dims, Error, Language, NoPlatforms, Offload, Program, Ready, Source,
    Uninit, compile_stats,
};
use offload_cuda::CudaPlatform;
use offload_testing::fake::{FakeDriver, FakeHooks};

const CASE: &str = "OFFLOAD_CUDA_NVRTC_CASE";
const PREFIX: &str = "fake-nvrtc";

/// The fake libcuda, built into the same directories as the fake NVRTC.
const CUDA: FakeDriver = FakeDriver {
    case_var: CASE,
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_cuda.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: PREFIX,
    real_var: "OFFLOAD_CUDA_REAL",
};

/// The fake NVRTC.
const NVRTC: FakeDriver = FakeDriver {
    case_var: CASE,
    source: concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../offload-driver/fake/fake_nvrtc.c"
    ),
    build_dir: env!("CARGO_TARGET_TMPDIR"),
    prefix: PREFIX,
    real_var: "OFFLOAD_CUDA_REAL",
};

/// What the fake NVRTC compiles a source mentioning `add_one` to.
const PTX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kernels.ptx");

/// CUDA C++ for the fixture's `add_one` (`extern "C"`: NVRTC mangles C++ names).
const ADD_ONE_CU: &str = r#"extern "C" __global__ void add_one(unsigned int *buf, unsigned int n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] += 1;
}
"#;

/// A source with a syntax error on line 3.
const BROKEN_CU: &str = "extern \"C\" __global__ void add_one(unsigned int *buf) {\n    \
                         buf[0] = 1;\n    syntax error here\n}\n";

/// A source whose line 2 is an `#error`.
const ERROR_CU: &str = "// add_one\n#error N must be a power of two\n";

/// The directory of `variant`: the fake libcuda, and the fake NVRTC as `nvrtc` (none:
/// `None`) built with `defines`.
fn built(variant: &str, nvrtc: Option<&str>, defines: &[&str]) -> Option<std::path::PathBuf> {
    let dir = CUDA.build(variant, "libcuda.so.1", &[])?;
    if let Some(file) = nvrtc {
        let also = NVRTC.build(variant, file, defines)?;
        assert_eq!(also, dir);
    }
    Some(dir)
}

fn run(dir: &std::path::Path, case: &str, vars: &[(&str, &str)]) -> String {
    let mut all = vec![("FAKE_NVRTC_PTX", PTX), ("OFFLOAD_CACHE", "0")];
    all.extend_from_slice(vars);
    CUDA.run(dir, case, &all)
}

// ---- the child side ------------------------------------------------------------------

/// The child side: runs the case and prints `RESULT <text>`.
#[test]
fn child() {
    let Ok(case) = std::env::var(CASE) else {
        return; // not a child
    };
    let result = match case.as_str() {
        "add-one" => add_one_case(),
        "compile-error" => compile_error_case(),
        "no-nvrtc" => no_nvrtc_case(),
        "threads" => threads_case(),
        "hal" => hal_case(),
        "injected" => injected_case(),
        "careless" => careless_case(),
        other => format!("unknown case {other}"),
    };
    println!("RESULT {result}");
}

fn cuda_hooks() -> FakeHooks {
    if CUDA.real() {
        return FakeHooks::absent();
    }
    // SAFETY: in a child of this harness, libcuda.so.1 is the fake this file built.
    unsafe { FakeHooks::open("libcuda.so.1", "fake_cuda") }
}

/// The hooks of the fake NVRTC that the backend loaded.
fn nvrtc_hooks() -> FakeHooks {
    if CUDA.real() {
        return FakeHooks::absent();
    }
    let library = offload_cuda::nvrtc_library().expect("the backend loaded no NVRTC");
    // SAFETY: in a child of this harness, the NVRTC the backend found is the fake this file
    // built (the cases that could find another say so first).
    unsafe { FakeHooks::open(library, "fake_nvrtc") }
}

/// Both fakes' violations and what is still alive, after everything was dropped.
fn report(cuda: &FakeHooks, nvrtc: &FakeHooks) -> String {
    if !cuda.present() {
        return offload_testing::fake::REAL.to_string();
    }
    let live: Vec<String> = ["alloc", "module", "stream", "event", "context"]
        .iter()
        .map(|k| format!("{k}:{}", cuda.live(k)))
        .collect();
    format!(
        "cuda={:?} nvrtc={:?} programs={} live={}",
        cuda.violations(),
        nvrtc.violations(),
        nvrtc.live("program"),
        live.join(",")
    )
}

const CLEAN: &str = "cuda=[] nvrtc=[] programs=0 live=alloc:0,module:0,stream:0,event:0,context:0";

/// What [`report`] says when nothing is wrong: [`CLEAN`] on the fakes.
fn clean() -> String {
    CUDA.fake_only(CLEAN)
}

/// A fake's call count, or [`REAL`](offload_testing::fake::REAL).
fn calls(hooks: &FakeHooks, entry: &str) -> String {
    CUDA.fake_only(if hooks.present() {
        hooks.calls(entry)
    } else {
        0
    })
}

fn start() -> Offload<Ready, NoPlatforms> {
    Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(offload_cuda::platform())
        .compile_cache(None)
        .start()
        .unwrap()
}

/// An error's variant and fields (its `Debug` prints the message).
fn fields(e: &Error) -> String {
    match e {
        Error::Compile {
            backend,
            call,
            language,
            log,
        } => format!(
            "Compile {{ backend: {backend:?}, call: {call:?}, language: {language:?}, \
             log: {log:?} }}"
        ),
        other => format!("other: {other}"),
    }
}

/// Launches add_one over 1000 elements of 41 on `dev` and says whether all became 42.
fn add_one_runs(dev: &offload_core::Device, module: &offload_core::Module) -> bool {
    let add_one = module.kernel("add_one").unwrap();
    let data = dev.upload(&[41u32; 1000]).unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: add_one adds 1 to the first n u32s of its buffer, which holds n.
    unsafe {
        queue
            .launch(
                &add_one,
                Dims::for_num_elems(1000),
                &offload_core::args![&data, 1000u32],
            )
            .unwrap()
    };
    queue.sync().unwrap();
    data.to_vec().unwrap().iter().all(|&v| v == 42)
}

fn add_one_case() -> String {
    let cuda = cuda_hooks();
    let before = compile_stats();
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let module = Program::from_source(Source::cuda(ADD_ONE_CU))
        .label("add_one.cu")
        .load(&dev)
        .unwrap();
    let kernels = module.kernels().unwrap();
    let ran = add_one_runs(&dev, &module);
    let compiles = compile_stats().compiles - before.compiles;
    let nvrtc = nvrtc_hooks();
    drop((module, dev));
    rt.shutdown().unwrap();
    format!(
        "kernels={} ran={ran} compiles={compiles} library={} {}",
        CUDA.fake_only(format!("{kernels:?}")),
        CUDA.fake_only(format!("{:?}", offload_cuda::nvrtc_library())),
        report(&cuda, &nvrtc)
    )
}

fn compile_error_case() -> String {
    let cuda = cuda_hooks();
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let mut out = Vec::new();
    for source in [BROKEN_CU, ERROR_CU] {
        let program = Program::from_source(Source::cuda(source));
        out.push(fields(&program.load(&dev).unwrap_err()));
        // A failed compile is not kept: the next load compiles again.
        out.push(fields(&program.load(&dev).unwrap_err()));
    }
    let nvrtc = nvrtc_hooks();
    let counts = format!(
        "compiles={} created={} destroyed={} module-loads={}",
        calls(&nvrtc, "nvrtcCompileProgram"),
        calls(&nvrtc, "nvrtcCreateProgram"),
        calls(&nvrtc, "nvrtcDestroyProgram"),
        calls(&cuda, "cuModuleLoadDataEx")
    );
    drop(dev);
    rt.shutdown().unwrap();
    format!("{} | {counts} {}", out.join(" | "), report(&cuda, &nvrtc))
}

fn no_nvrtc_case() -> String {
    let cuda = cuda_hooks();
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let program = Program::from_source(Source::cuda(ADD_ONE_CU));
    let first = program.load(&dev);
    if let Some(library) = offload_cuda::nvrtc_library() {
        return format!("found {library}"); // a real NVRTC on this machine
    }
    let first = fields(&first.unwrap_err());
    let again = fields(&program.load(&dev).unwrap_err());
    // Images still load: only source programs need NVRTC.
    let module = Program::new(offload_cuda::fixtures::KERNELS)
        .load(&dev)
        .unwrap();
    let ran = add_one_runs(&dev, &module);
    drop((module, dev));
    rt.shutdown().unwrap();
    format!(
        "{first} same-again={} images-run={ran} cuda={:?}",
        first == again,
        cuda.violations()
    )
}

/// Eight threads load one program on both devices at once (compiles slowed down so that
/// they overlap) and run add_one on each.
fn threads_case() -> String {
    let cuda = cuda_hooks();
    let before = compile_stats();
    let rt = start();
    let devices = rt.devices().unwrap();
    let program = Program::from_source(Source::cuda(ADD_ONE_CU));
    let barrier = std::sync::Barrier::new(8);
    let ran = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let (program, devices, barrier) = (&program, &devices, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut ok = true;
                    let mut modules = Vec::new();
                    for i in 0..devices.len() {
                        let dev = &devices[(t + i) % devices.len()];
                        let module = program.load(dev).unwrap();
                        ok &= add_one_runs(dev, &module);
                        modules.push(module);
                    }
                    // Kept until every thread has loaded, so that each device loads the
                    // module once (the last handle's drop unloads it).
                    barrier.wait();
                    ok
                })
            })
            .collect();
        handles.into_iter().all(|h| h.join().unwrap())
    });
    let after = compile_stats();
    let nvrtc = nvrtc_hooks();
    let counts = format!(
        "devices={} ran={ran} compiles={} nvrtc-compiles={} module-loads={}",
        CUDA.fake_only(devices.len()),
        after.compiles - before.compiles,
        calls(&nvrtc, "nvrtcCompileProgram"),
        calls(&cuda, "cuModuleLoadDataEx"),
    );
    drop((program, devices));
    rt.shutdown().unwrap();
    format!("{counts} {}", report(&cuda, &nvrtc))
}

/// The hal calls the core makes, directly: the compiler a device reports and what
/// `compile` hands back. Sources: `ADD_ONE_CU` with `-DN=4`, then with an architecture
/// option of its own.
fn hal_case() -> String {
    let cuda = CudaPlatform::open(&Config::default()).unwrap();
    let dev = cuda.devices().remove(0);
    let id = match dev.compiler(Language::Cuda) {
        Ok(Some(CompilerId {
            identity, target, ..
        })) => format!("{identity} for {target}"),
        Ok(None) => "none".into(),
        Err(e) => {
            drop(dev);
            cuda.deinit().unwrap();
            return fields(&e);
        }
    };
    let wgsl = dev.compiler(Language::Wgsl).unwrap();
    let mut out = vec![format!("compiler={id} wgsl={wgsl:?}")];
    for source in [
        Source::cuda(ADD_ONE_CU).option("-DN=4"),
        Source::cuda(ADD_ONE_CU).option("--gpu-architecture=compute_80"),
    ] {
        match dev.compile(&source) {
            Ok(ptx) => {
                let text = String::from_utf8(ptx.clone()).unwrap();
                let header = text.lines().nth(1).unwrap_or("").to_string();
                let target = text
                    .lines()
                    .find(|l| l.starts_with(".target"))
                    .unwrap_or("");
                let loaded = dev.load(&ptx).map(drop).map_err(|e| e.to_string());
                out.push(format!(
                    "[{header}] [{target}] nul={} loaded={loaded:?}",
                    ptx.contains(&0)
                ));
            }
            Err(e) => out.push(fields(&e)),
        }
    }
    let nvrtc = nvrtc_hooks();
    drop(dev);
    cuda.deinit().unwrap();
    format!(
        "{} library={:?} {}",
        out.join(" "),
        offload_cuda::nvrtc_library(),
        report(&cuda_hooks(), &nvrtc)
    )
}

/// NVRTC calls failing one by one (the fake told to): each is `Error::Compile` naming the
/// call, and its program is destroyed all the same.
fn injected_case() -> String {
    let cuda = cuda_hooks();
    let rt = start();
    let dev = rt.devices().unwrap().remove(0);
    let program = Program::from_source(Source::cuda(ADD_ONE_CU));
    let mut out = Vec::new();
    let nvrtc = {
        // A first load opens NVRTC, so that its hooks can be armed.
        let failing = Program::from_source(Source::cuda(BROKEN_CU));
        out.push(match failing.load(&dev) {
            Err(Error::Compile { .. }) => "opened".to_string(),
            other => format!("{other:?}"),
        });
        nvrtc_hooks()
    };
    for (entry, code) in [
        ("nvrtcCreateProgram", 2),
        ("nvrtcCompileProgram", 1),
        ("nvrtcGetPTXSize", 11),
        ("nvrtcGetPTX", 11),
    ] {
        nvrtc.fail(entry, 1, code);
        out.push(match program.load(&dev) {
            Err(Error::Compile { log, .. }) => log,
            other => format!("{other:?}"),
        });
    }
    let ran = add_one_runs(&dev, &program.load(&dev).unwrap());
    let counts = format!(
        "ran={ran} created={} destroyed={}",
        nvrtc.calls("nvrtcCreateProgram"),
        nvrtc.calls("nvrtcDestroyProgram")
    );
    drop((program, dev));
    rt.shutdown().unwrap();
    format!("{} | {counts} {}", out.join(" | "), report(&cuda, &nvrtc))
}

/// A client that breaks NVRTC's rules, calling the fake directly: the fake must say so.
fn careless_case() -> String {
    use std::ffi::{c_char, c_int, c_void};
    type Program = *mut c_void;
    // SAFETY: libnvrtc.so is the fake this file built; its initialisers read only its
    // FAKE_* variables.
    let lib = unsafe { offload_driver::Library::open(&["libnvrtc.so"]) }.unwrap();
    macro_rules! entry {
        ($name:literal: $ty:ty) => {{
            let address = lib.lookup($name);
            assert!(!address.is_null(), "the fake has no {}", $name);
            // SAFETY: the fake defines the entry point with this nvrtc.h signature, and
            // stays loaded (RTLD_NODELETE).
            unsafe { std::mem::transmute::<*const c_void, $ty>(address) }
        }};
    }
    type Create = unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int;
    let create = entry!("nvrtcCreateProgram": Create);
    let compile = entry!(
        "nvrtcCompileProgram": unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int
    );
    let log = entry!("nvrtcGetProgramLog": unsafe extern "C" fn(Program, *mut c_char) -> c_int);
    let ptx_size = entry!("nvrtcGetPTXSize": unsafe extern "C" fn(Program, *mut usize) -> c_int);
    let ptx = entry!("nvrtcGetPTX": unsafe extern "C" fn(Program, *mut c_char) -> c_int);
    let destroy = entry!("nvrtcDestroyProgram": unsafe extern "C" fn(*mut Program) -> c_int);
    let source = c"extern \"C\" __global__ void add_one() {}";
    let mut buffer = vec![0 as c_char; 1 << 20];
    let mut size = 0usize;
    let mut codes = Vec::new();
    // SAFETY: every pointer is valid for the call; the fake checks the protocol, which is
    // what this case breaks on purpose (`buffer` is larger than anything the fake writes).
    unsafe {
        let mut p: Program = std::ptr::null_mut();
        codes.push(create(
            &mut p,
            source.as_ptr(),
            c"careless.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        ));
        codes.push(ptx_size(p, &mut size)); // before any compile
        codes.push(compile(p, 0, std::ptr::null()));
        codes.push(log(p, buffer.as_mut_ptr())); // without its size
        codes.push(ptx(p, buffer.as_mut_ptr())); // without its size
        let stale = p;
        codes.push(destroy(&mut p));
        codes.push(ptx_size(stale, &mut size)); // after destroy
        let mut again = stale;
        codes.push(destroy(&mut again)); // twice
        let mut leaked: Program = std::ptr::null_mut();
        codes.push(create(
            &mut leaked,
            source.as_ptr(),
            std::ptr::null(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        ));
    }
    // SAFETY: as above.
    let hooks = unsafe { FakeHooks::open("libnvrtc.so", "fake_nvrtc") };
    let violations = hooks.violations();
    hooks.clear();
    format!(
        "codes={codes:?} programs={} violations={violations:?}",
        hooks.live("program")
    )
}

// ---- the parent side -----------------------------------------------------------------

#[test]
fn cuda_source_compiles_loads_and_runs_add_one() {
    let Some(dir) = built("with-nvrtc", Some("libnvrtc.so"), &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "add-one", &[]),
        format!(
            "kernels={} ran=true compiles=1 library={} {}",
            CUDA.fake_only(
                "[\"add_one\", \"fill\", \"noop\", \"read_global\", \"shared_reverse\"]"
            ),
            CUDA.fake_only("Some(\"libnvrtc.so\")"),
            clean()
        )
    );
}

#[test]
fn a_compile_error_is_error_compile_with_nvrtcs_log() {
    let Some(dir) = built("with-nvrtc", Some("libnvrtc.so"), &[]) else {
        return;
    };
    let syntax = "Compile { backend: Cuda, call: \"Program::load\", language: Cuda, \
                  log: \"offload.cu(3): error: expected a \\\";\\\"\\n\\n1 error detected in \
                  the compilation of \\\"offload.cu\\\".\" }";
    let error = "Compile { backend: Cuda, call: \"Program::load\", language: Cuda, \
                 log: \"offload.cu(2): catastrophic error: #error directive: N must be a \
                 power of two\\n\\n1 catastrophic error detected in the compilation of \
                 \\\"offload.cu\\\".\\nCompilation terminated.\" }";
    let result = run(&dir, "compile-error", &[]);
    if CUDA.real() {
        // NVRTC's own words: the line of each error, and the four compiles failing.
        let parts: Vec<&str> = result.split(" | ").collect();
        assert_eq!(parts.len(), 5, "{result}");
        for (part, line) in parts[..4]
            .iter()
            .zip(["(3): error", "(3): error", "(2):", "(2):"])
        {
            assert!(
                part.starts_with("Compile { backend: Cuda, call: \"Program::load\"")
                    && part.contains(&format!("offload.cu{line}")),
                "{part}"
            );
        }
        println!("NVRTC's logs: {result}");
        return;
    }
    assert_eq!(
        result,
        format!(
            "{syntax} | {syntax} | {error} | {error} | compiles=4 created=4 destroyed=4 \
             module-loads=0 {CLEAN}"
        )
    );
}

#[test]
fn without_nvrtc_source_is_a_compile_error_naming_libnvrtc_and_images_still_load() {
    if CUDA.skip_on_real("checks the fake NVRTC's own answers") {
        return;
    }
    let Some(dir) = built("no-nvrtc", None, &[]) else {
        return;
    };
    let result = run(&dir, "no-nvrtc", &[]);
    println!("{result}");
    if result.starts_with("found ") {
        println!("SKIP: this machine has an NVRTC of its own ({result})");
        return;
    }
    let prefix = "Compile { backend: Cuda, call: \"Program::load\", language: Cuda, \
                  log: \"nvrtc not found: tried libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12, \
                  libnvrtc.so.11.2, libnvrtc.so.11.1, libnvrtc.so.11.0: libnvrtc.so: cannot \
                  open shared object file: No such file or directory; libnvrtc.so.13: ";
    assert!(result.starts_with(prefix), "{result}");
    assert!(
        result.ends_with("\" } same-again=true images-run=true cuda=[]"),
        "{result}"
    );
}

#[test]
fn eight_threads_loading_one_program_compile_it_once() {
    let Some(dir) = built("with-nvrtc", Some("libnvrtc.so"), &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "threads", &[("FAKE_NVRTC_COMPILE_MS", "200")]),
        format!(
            "devices={} ran=true compiles=1 nvrtc-compiles={} module-loads={} {}",
            CUDA.fake_only(2),
            CUDA.fake_only(1),
            CUDA.fake_only(2),
            clean()
        )
    );
}

#[test]
fn the_compiler_is_nvrtc_for_the_devices_architecture() {
    if CUDA.skip_on_real("checks the fake NVRTC's own answers") {
        return;
    }
    let Some(dir) = built("with-nvrtc", Some("libnvrtc.so"), &[]) else {
        return;
    };
    let ok = "nul=false loaded=Ok(())";
    assert_eq!(
        run(&dir, "hal", &[]),
        format!(
            "compiler=nvrtc 12.4 for compute_86 wgsl=None \
             [// fake nvrtc 12.4 options: --gpu-architecture=compute_86 -DN=4] \
             [.target sm_86] {ok} \
             [// fake nvrtc 12.4 options: --gpu-architecture=compute_80] \
             [.target sm_80] {ok} library=Some(\"libnvrtc.so\") {CLEAN}"
        )
    );
    // An NVRTC that stops short of the device compiles for the newest it has.
    let result = run(&dir, "hal", &[("FAKE_NVRTC_ARCHS", "50,60,70,80")]);
    assert!(
        result.starts_with(
            "compiler=nvrtc 12.4 for compute_80 wgsl=None \
             [// fake nvrtc 12.4 options: --gpu-architecture=compute_80 -DN=4] [.target sm_80]"
        ),
        "{result}"
    );
    // One newer than the device has nothing for it.
    assert_eq!(
        run(
            &dir,
            "hal",
            &[
                ("FAKE_NVRTC_ARCHS", "90,100"),
                ("FAKE_NVRTC_VERSION", "13.0")
            ]
        ),
        "Compile { backend: Cuda, call: \"Program::load\", language: Cuda, log: \"nvrtc 13.0 \
         compiles for compute_90, compute_100; none runs on this device of compute \
         capability 8.6\" }"
    );
}

#[test]
fn an_nvrtc_without_the_architecture_list_compiles_for_the_device() {
    if CUDA.skip_on_real("checks the fake NVRTC's own answers") {
        return;
    }
    let Some(dir) = built("old-nvrtc", Some("libnvrtc.so"), &["NO_SUPPORTED_ARCHS"]) else {
        return;
    };
    let result = run(&dir, "hal", &[("FAKE_NVRTC_VERSION", "11.1")]);
    assert!(
        result.starts_with("compiler=nvrtc 11.1 for compute_86 wgsl=None"),
        "{result}"
    );
    assert!(result.ends_with(CLEAN), "{result}");
}

#[test]
fn a_versioned_soname_is_found() {
    if CUDA.skip_on_real("checks the fake NVRTC's own answers") {
        return;
    }
    let Some(dir) = built("nvrtc-11", Some("libnvrtc.so.11.2"), &[]) else {
        return;
    };
    let result = run(&dir, "hal", &[("FAKE_NVRTC_VERSION", "11.8")]);
    if result.contains("library=Some(\"libnvrtc.so\")") {
        println!("SKIP: this machine's own libnvrtc.so comes first ({result})");
        return;
    }
    assert!(
        result.starts_with("compiler=nvrtc 11.8 for compute_86 wgsl=None"),
        "{result}"
    );
    assert!(
        result.ends_with(&format!("library=Some(\"libnvrtc.so.11.2\") {CLEAN}")),
        "{result}"
    );
}

#[test]
fn failing_nvrtc_calls_are_compile_errors_and_destroy_their_program() {
    if CUDA.skip_on_real("checks the fake NVRTC's own answers") {
        return;
    }
    let Some(dir) = built("with-nvrtc", Some("libnvrtc.so"), &[]) else {
        return;
    };
    assert_eq!(
        run(&dir, "injected", &[]),
        format!(
            "opened | nvrtcCreateProgram: NVRTC_ERROR_PROGRAM_CREATION_FAILURE (2) | \
             nvrtcCompileProgram: NVRTC_ERROR_OUT_OF_MEMORY (1) | \
             nvrtcGetPTXSize: NVRTC_ERROR_INTERNAL_ERROR (11) | \
             nvrtcGetPTX: NVRTC_ERROR_INTERNAL_ERROR (11) | ran=true created=6 destroyed=5 \
             {CLEAN}"
        )
    );
}

#[test]
fn the_fake_nvrtc_reports_a_careless_client() {
    if CUDA.skip_on_real("checks the fake NVRTC's own answers") {
        return;
    }
    let Some(dir) = built("with-nvrtc", Some("libnvrtc.so"), &[]) else {
        return;
    };
    let result = run(&dir, "careless", &[]);
    println!("the fake reported, as it should: {result}");
    for rule in [
        "PTX of a failed program: nvrtcGetPTXSize",
        "log without its size: nvrtcGetProgramLog",
        "PTX without its size: nvrtcGetPTX",
        "use after destroy: nvrtcGetPTXSize",
        "double destroy: nvrtcDestroyProgram",
    ] {
        assert!(result.contains(rule), "{rule}: {result}");
    }
    assert!(
        result.starts_with("codes=[0, 4, 0, 0, 0, 0, 4, 4, 0] programs=1 "),
        "{result}"
    );
}
