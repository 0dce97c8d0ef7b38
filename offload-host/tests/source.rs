//! Host programs from C source (`Program::from_source(Source::c(..))`): compiled by the
//! system C compiler, loaded and launched; compile errors and a missing compiler as
//! `Error::Compile`; options reaching the compiler; one compile per program however many
//! devices and threads load it.
//!
//! Every test uses the same runtime settings (the runtime is process-wide) with the disk
//! cache off, and every source text is new to the process, so each counted compile is this
//! test's. Tests that compile hold `serial()`, so the process-wide counters and the temporary
//! directories seen are theirs alone. The missing-compiler case runs in a child process
//! (this binary again) with `CC` set there: changing the environment of a multi-threaded
//! test process would race.

use std::process::Command;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};

use offload_core::hal::{Device as _, Platform as _};
use offload_core::{
    BackendKind, Config, Device, Dims, Error, Language, Offload, Program, Source, compile_stats,
};

use offload_testing::serial;

/// The runtime every test shares: the host platform with two devices, no disk cache.
fn runtime() -> Offload {
    Offload::builder()
        .platform(offload_host::platform())
        .host_devices(2)
        .compile_cache(None)
        .start()
        .expect("host runtime")
}

/// `text` with a comment no other source of this process has.
fn unique(text: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "/* {} {nanos} {} */\n{text}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// This process's compile directories still in the temporary directory.
fn leftover_dirs() -> Vec<String> {
    let prefix = format!("offload-cc-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

const SAXPY: &str = include_str!("../fixtures/saxpy.c");

/// y = a * x + y on `dev`, with the SAXPY kernel of `program`.
fn run_saxpy(dev: &Device, program: &Program) -> Vec<f32> {
    const N: u32 = 1000; // not a multiple of the block or of the vector width
    let saxpy = program.load(dev).unwrap().kernel("saxpy").unwrap();
    let x = dev
        .upload(&(0..N).map(|i| i as f32).collect::<Vec<_>>())
        .unwrap();
    let y = dev.upload(&vec![1.0f32; N as usize]).unwrap();
    let queue = dev.queue().unwrap();
    let dims = Dims::grid([N.div_ceil(64), 1, 1]).block([64, 1, 1]);
    // SAFETY: saxpy reads n floats of x and writes n floats of y; both hold n = N.
    unsafe { queue.launch(&saxpy, dims, &offload_core::args![&x, &y, 2.0f32, N]) }.unwrap();
    queue.sync().unwrap();
    y.to_vec().unwrap()
}

fn expected_saxpy() -> Vec<f32> {
    (0..1000).map(|i| 2.0 * i as f32 + 1.0).collect()
}

#[test]
fn a_c_kernel_from_source_compiles_loads_and_runs() {
    let _serial = serial();
    let rt = runtime();
    let dev = rt.devices().unwrap().remove(0);
    let before = compile_stats().compiles;
    let program = Program::from_source(Source::c(unique(SAXPY))).label("saxpy");
    assert_eq!(run_saxpy(&dev, &program), expected_saxpy());
    assert_eq!(compile_stats().compiles, before + 1);
    assert_eq!(leftover_dirs(), Vec::<String>::new(), "compile dir removed");
    // The naive form computes the same.
    let naive = Program::from_source(Source::c(unique(include_str!("../fixtures/saxpy_naive.c"))));
    assert_eq!(run_saxpy(&dev, &naive), expected_saxpy());
}

#[test]
fn a_syntax_error_is_a_compile_error_with_the_compilers_log() {
    let _serial = serial();
    let rt = runtime();
    let dev = rt.devices().unwrap().remove(0);
    let before = compile_stats().compiles;
    let broken = unique("#include \"offload_host.h\"\nOFFLOAD_KERNEL(k, \"b\") { int x = ; }\n");
    let err = Program::from_source(Source::c(broken))
        .load(&dev)
        .unwrap_err();
    let Error::Compile {
        backend,
        call,
        language,
        log,
    } = &err
    else {
        panic!("not a compile error: {err}");
    };
    assert_eq!(
        (*backend, *call, *language),
        (BackendKind::Host, "Program::load", Language::C)
    );
    assert!(log.contains("error:"), "{log}");
    // The log names the source file, not the private directory it was compiled in.
    assert!(log.contains("kernel.c:3:"), "{log}");
    assert!(!log.contains("offload-cc-"), "{log}");
    assert!(err.to_string().contains("C compile failed"), "{err}");
    assert_eq!(
        compile_stats().compiles,
        before,
        "a failed compile is no compile"
    );
    assert_eq!(leftover_dirs(), Vec::<String>::new(), "compile dir removed");
}

#[test]
fn options_reach_the_compiler() {
    let _serial = serial();
    let rt = runtime();
    let dev = rt.devices().unwrap().remove(0);
    let text = unique(
        r#"#include <offload_host.h>
#ifndef VALUE
#error VALUE is not defined
#endif
OFFLOAD_KERNEL(put, "bI") { /* (uint32_t *out, uint32_t n) */
    uint32_t *out = OFFLOAD_BUFFER(uint32_t, 0);
    uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);
    for (uint32_t t = 0; t < launch->block[0]; t++) {
        uint64_t i = OFFLOAD_INDEX_X(t);
        if (i < n) out[i] = VALUE;
    }
}
"#,
    );
    let put = |source: Source| -> Vec<u32> {
        let kernel = Program::from_source(source)
            .load(&dev)
            .unwrap()
            .kernel("put")
            .unwrap();
        let out = dev.alloc_zeros::<u32>(10).unwrap();
        let queue = dev.queue().unwrap();
        // SAFETY: put writes n = 10 u32s of its 10-element buffer.
        unsafe {
            queue.launch(
                &kernel,
                Dims::for_num_elems(10),
                &offload_core::args![&out, 10u32],
            )
        }
        .unwrap();
        queue.sync().unwrap();
        out.to_vec().unwrap()
    };
    assert_eq!(put(Source::c(&*text).option("-DVALUE=7")), [7; 10]);
    assert_eq!(put(Source::c(&*text).option("-DVALUE=9")), [9; 10]);
    // Without the option the source's own #error stops it.
    let err = Program::from_source(Source::c(&*text))
        .load(&dev)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Compile { log, .. } if log.contains("VALUE is not defined")),
        "{err}"
    );
}

/// A kernel that reports, in `out[0]`, whether the compiler targeted AVX2 (x86-64) or
/// SVE (AArch64): what `-march=native` turns on for a CPU that has it.
const FEATURE: &str = r#"#include <offload_host.h>
OFFLOAD_KERNEL(feature, "b") {
    uint32_t *out = OFFLOAD_BUFFER(uint32_t, 0);
#if defined(__AVX2__) || defined(__ARM_FEATURE_SVE)
    out[0] = 1;
#else
    out[0] = 0;
#endif
}
"#;

/// Whether this CPU has the feature [`FEATURE`] looks for.
fn cpu_has_feature() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2");
    #[cfg(target_arch = "aarch64")]
    return std::arch::is_aarch64_feature_detected!("sve");
    #[allow(unreachable_code)]
    false
}

fn feature_compiled(dev: &Device, source: Source) -> bool {
    let kernel = Program::from_source(source)
        .load(dev)
        .unwrap()
        .kernel("feature")
        .unwrap();
    let out = dev.alloc_zeros::<u32>(1).unwrap();
    let queue = dev.queue().unwrap();
    // SAFETY: feature writes out[0] of its one-element buffer.
    unsafe { queue.launch(&kernel, Dims::grid([1, 1, 1]), &offload_core::args![&out]) }.unwrap();
    queue.sync().unwrap();
    out.to_vec().unwrap()[0] == 1
}

#[test]
fn c_is_compiled_for_this_cpu_unless_the_program_says_otherwise() {
    let _serial = serial();
    let rt = runtime();
    let dev = rt.devices().unwrap().remove(0);
    let has = cpu_has_feature();
    if !has {
        eprintln!("skipped: this CPU has neither AVX2 nor SVE, so -march=native shows nothing");
        return;
    }
    // The default flags target this CPU: a plain x86-64 (or armv8-a) build has no AVX2
    // (SVE).
    assert!(feature_compiled(&dev, Source::c(unique(FEATURE))));
    // The program's own -march comes after the defaults, and wins.
    let baseline = if cfg!(target_arch = "x86_64") {
        "-march=x86-64"
    } else {
        "-march=armv8-a"
    };
    assert!(!feature_compiled(
        &dev,
        Source::c(unique(FEATURE)).option(baseline)
    ));
}

#[test]
fn two_devices_loading_one_program_compile_it_once() {
    let _serial = serial();
    let rt = runtime();
    let devices = rt.devices().unwrap();
    assert_eq!(devices.len(), 2);
    let program = Program::from_source(Source::c(unique(SAXPY)));
    let before = compile_stats();
    for dev in &devices {
        assert_eq!(run_saxpy(dev, &program), expected_saxpy());
    }
    let after = compile_stats();
    assert_eq!(after.compiles, before.compiles + 1);
    assert!(after.memory_hits > before.memory_hits);
}

#[test]
fn sixteen_threads_on_two_devices_compile_once() {
    let _serial = serial();
    let rt = runtime();
    let devices = rt.devices().unwrap();
    let program = Program::from_source(Source::c(unique(SAXPY)));
    let before = compile_stats().compiles;
    let start = Barrier::new(16);
    std::thread::scope(|s| {
        for i in 0..16 {
            let (dev, program, start) = (&devices[i % 2], &program, &start);
            s.spawn(move || {
                start.wait();
                let module = program.load(dev).unwrap();
                module.kernel("saxpy").unwrap();
            });
        }
    });
    assert_eq!(compile_stats().compiles, before + 1);
    for dev in &devices {
        assert_eq!(run_saxpy(dev, &program), expected_saxpy());
    }
    assert_eq!(compile_stats().compiles, before + 1);
    assert_eq!(leftover_dirs(), Vec::<String>::new());
}

#[test]
fn the_host_names_its_c_compiler_and_compiles_no_other_language() {
    let host = offload_host::HostPlatform::open(&Config::default()).unwrap();
    let dev = host.devices().remove(0);
    let id = dev.compiler(Language::C).unwrap().expect("a C compiler");
    assert!(!id.identity.is_empty());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let machine = Command::new(&cc).arg("-dumpmachine").output().unwrap();
    let machine = String::from_utf8_lossy(&machine.stdout).trim().to_string();
    // GCC and clang on Linux take -march=native, and /proc/cpuinfo names the CPU: the
    // target says the code is for this CPU (so the cache key holds it).
    let native = id
        .target
        .strip_prefix(&machine)
        .and_then(|rest| rest.strip_prefix(" -march=native for "));
    assert!(native.is_some_and(|cpu| cpu.contains('#')), "{}", id.target);
    assert_eq!(dev.compiler(Language::C).unwrap(), Some(id), "stable");
    assert_eq!(dev.compiler(Language::Wgsl).unwrap(), None);
    assert_eq!(dev.compiler(Language::Cuda).unwrap(), None);
    drop(dev);
    host.deinit().unwrap();

    let rt = runtime();
    let dev = rt.devices().unwrap().remove(0);
    let err = Program::from_source(Source::wgsl("@compute @workgroup_size(1) fn main() {}"))
        .load(&dev)
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
}

/// Runs the `child` test of this binary with `vars` set (and `remove`d); returns its
/// `RESULT` line.
fn run_child(vars: &[(&str, &str)], remove: &[&str]) -> String {
    let mut cmd = offload_testing::child::test_command("child");
    cmd.env("OFFLOAD_TEST_CHILD", "1")
        .env_remove("OFFLOAD_HOST_DEVICES")
        .env("OFFLOAD_CACHE", "0");
    for var in remove {
        cmd.env_remove(var);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = offload_testing::child::run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no RESULT in:\n{stdout}"))
        .to_string()
}

/// The child side: loads a C program and prints the error as `RESULT <error>`.
#[test]
fn child() {
    if std::env::var_os("OFFLOAD_TEST_CHILD").is_none() {
        return;
    }
    let rt = runtime();
    let dev = rt.devices().unwrap().remove(0);
    let result = Program::from_source(Source::c(unique(SAXPY))).load(&dev);
    match result {
        Ok(_) => println!("RESULT loaded"),
        Err(Error::Compile { language, log, .. }) => println!("RESULT Compile {language}: {log}"),
        Err(other) => println!("RESULT other: {other}"),
    }
}

#[test]
fn a_missing_compiler_is_a_compile_error_naming_what_was_looked_for() {
    assert_eq!(
        run_child(&[("CC", "/nonexistent/cc")], &[]),
        r#"Compile C: no C compiler: CC="/nonexistent/cc" is not an executable file"#
    );
    assert_eq!(
        run_child(&[("CC", "no-such-compiler-xyz")], &[]),
        r#"Compile C: no C compiler: CC="no-such-compiler-xyz" was not found on PATH"#
    );
    assert_eq!(
        run_child(&[("PATH", "/nonexistent")], &["CC"]),
        "Compile C: no C compiler: `cc` was not found on PATH (set CC to one)"
    );
    // An empty CC counts as unset; the compiler found works.
    assert_eq!(run_child(&[("CC", "")], &[]), "loaded");
}
