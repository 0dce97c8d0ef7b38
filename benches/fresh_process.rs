//! The first launch of a **fresh process** whose program comes from a warm disk cache:
//! the bench runs children of itself, because what a fresh process pays once
//! (finding and identifying the C compiler, opening the host platform, starting its
//! threads, the first `dlopen`) is invisible to a benchmark that loops inside one process.
//!
//! 1. One child warms a private cache directory (it compiles the C program and writes the
//!    entry).
//! 2. Then, `ROUNDS` times, in an order that rotates each round, four fresh children, each
//!    timing itself from just before its first offload call to the return of its first
//!    launch's `sync`:
//!    * `offload from warm cache`: `Offload::init()`, the host device,
//!      `Program::from_source(Source::c(..))` (found on disk: the child checks that it
//!      compiled nothing), `kernel`, `queue`, `launch`, `sync`. **Goal: median ≤ 0.5 ms.**
//!    * `offload from image file`: the same, but the program is the prebuilt shared object
//!      read from a file (`Program::new`): no compiler and no cache in the way.
//!    * `offload, compiler probed`: the warm-cache child again, after the parent removed
//!      what the cache directory remembers of the compiler (`user.offload.cc.*`
//!      attributes): the child runs `cc` three times to name it, as every fresh process
//!      did before the compiler's identity was remembered — what remembering it saves.
//!    * `raw dlopen floor`: `dlopen` of the same prebuilt shared object from a file,
//!      `dlsym` of the kernel, one call on the calling thread: what loading and running
//!      native code costs a fresh process at the least.
//!
//!    The parent prints each one's median and p90 of the in-process time, its median
//!    ratio to the floor, and, for context, the median wall time from spawn to exit.
//!    The offload children also report where their time went (init, device, load,
//!    kernel, queue, launch + sync: medians).
//!
//! Run: `cargo bench --bench fresh_process`. `OFFLOAD_BENCH_FRESH_ROUNDS=n` (default 40).

use std::ffi::c_void;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use offload::{BackendKind, Dims, Offload, Program, Source};

const ROLE: &str = "OFFLOAD_BENCH_FRESH_ROLE";
const SO: &str = "OFFLOAD_BENCH_FRESH_SO";
const N: u32 = 256;

/// The kernel (benches/kernels/put.c, shared with the other compile benchmark).
const C_KERNEL: &str = include_str!("kernels/put.c");

/// `offload_launch` of offload_host.h.
#[repr(C)]
struct Launch {
    grid: [u32; 3],
    block: [u32; 3],
    block_id: [u32; 3],
    shared_size: u32,
    shared: *mut c_void,
}

type KernelFn = unsafe extern "C" fn(*const *mut c_void, *const Launch);

fn ns(since: Instant) -> u128 {
    since.elapsed().as_nanos()
}

/// Prints the child's result line.
fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The offload children: from source (warm cache) or from an image file.
fn offload_child(from_source: bool, warming: bool) {
    let image = (!from_source)
        .then(|| std::fs::read(std::env::var_os(SO).expect("the .so path")).expect("read .so"));
    let t0 = Instant::now();
    let rt = Offload::init().expect("init");
    let t_init = ns(t0);
    let dev = rt.device(BackendKind::Host).expect("a host device");
    let t_dev = ns(t0);
    let program = match image {
        None => Program::from_source(Source::c(C_KERNEL)),
        Some(bytes) => Program::new(bytes),
    };
    let module = program.load(&dev).expect("load");
    let t_load = ns(t0);
    let put = module.kernel("put").expect("put");
    let t_kernel = ns(t0);
    let buf = dev.alloc_zeros::<u32>(N as usize).expect("alloc");
    let queue = dev.queue().expect("queue");
    let t_queue = ns(t0);
    // SAFETY: `put` writes the first n u32s of its buffer, which holds N.
    unsafe { queue.launch(&put, Dims::for_num_elems(N), &offload::args![&buf, N]) }
        .expect("launch");
    queue.sync().expect("sync");
    let total = ns(t0);
    let mut check = vec![0u32; N as usize];
    buf.read(0, &mut check).expect("read");
    assert!(check.iter().all(|&v| v == 7), "the kernel ran");
    let stats = offload::compile_stats();
    if from_source && !warming {
        assert_eq!(
            (stats.compiles, stats.disk_hits),
            (0, 1),
            "a warm cache: found on disk, nothing compiled"
        );
    }
    report(&format!(
        "T {total} init {t_init} device {} load {} kernel {} queue {} launch+sync {}",
        t_dev - t_init,
        t_load - t_dev,
        t_kernel - t_load,
        t_queue - t_kernel,
        total - t_queue
    ));
}

/// The floor: `dlopen` + `dlsym` + one call of the same shared object.
fn raw_child() {
    let path = std::env::var_os(SO).expect("the .so path");
    let mut data = vec![0u32; N as usize];
    let t0 = Instant::now();
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
    // SAFETY: the shared object is the bench's own kernel, built by the parent.
    let lib = unsafe { libloading::os::unix::Library::open(Some(&path), flags) }.expect("dlopen");
    // SAFETY: `put` has the host kernel ABI.
    let put: KernelFn = *unsafe { lib.get::<KernelFn>(b"put\0") }.expect("dlsym");
    let mut ptr = data.as_mut_ptr().cast::<c_void>();
    let mut n = N;
    let args: [*mut c_void; 2] = [
        (&raw mut ptr).cast::<c_void>(),
        (&raw mut n).cast::<c_void>(),
    ];
    let launch = Launch {
        grid: [1, 1, 1],
        block: [N, 1, 1],
        block_id: [0, 0, 0],
        shared_size: 0,
        shared: std::ptr::null_mut(),
    };
    // SAFETY: the arguments are those `put` declares ("bI"), for a buffer of N u32s.
    unsafe { put(args.as_ptr(), &launch) };
    let total = ns(t0);
    assert!(data.iter().all(|&v| v == 7), "the kernel ran");
    report(&format!("T {total}"));
}

struct Kind {
    name: &'static str,
    role: &'static str,
    /// In-process nanoseconds to the first launch's return.
    inside: Vec<f64>,
    /// Spawn to exit, nanoseconds.
    wall: Vec<f64>,
    /// Named steps (warm-cache children only).
    steps: Vec<(String, Vec<f64>)>,
}

/// Removes the compiler identities the cache directory remembers.
fn forget_compilers(cache: &Path) {
    let mut names = vec![0u8; 64 << 10];
    let Ok(len) = rustix::fs::listxattr(cache, &mut names[..]) else {
        return;
    };
    for name in names[..len].split(|&b| b == 0) {
        if name.starts_with(b"user.offload.cc.") {
            let name = std::ffi::CString::new(name).unwrap();
            rustix::fs::removexattr(cache, name.as_c_str()).unwrap();
        }
    }
}

fn spawn(role: &str, cache: &Path, so: &Path) -> (String, f64) {
    if role == "probed" {
        forget_compilers(cache);
    }
    let start = Instant::now();
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--bench")
        .env(ROLE, role)
        .env(SO, so)
        .env("OFFLOAD_CACHE_DIR", cache)
        .env_remove("OFFLOAD_CACHE")
        .env("OFFLOAD_BACKENDS", "host")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("spawn a child");
    let wall = start.elapsed().as_nanos() as f64;
    assert!(out.status.success(), "child {role} failed: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("T "))
        .unwrap_or_else(|| panic!("child {role} printed no result: {text}"))
        .to_string();
    (line, wall)
}

fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn us(ns: f64) -> String {
    format!("{:.1} µs", ns / 1e3)
}

/// Compiles the kernel into `dir/put.so` with the flags the host backend uses.
fn prebuild(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("offload_host.h"), offload::host::HEADER).unwrap();
    std::fs::write(dir.join("kernel.c"), C_KERNEL).unwrap();
    let so = dir.join("put.so");
    let cc = std::env::var_os("CC")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "cc".into());
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-O3", "-std=c11", "-I"])
        .arg(dir)
        .arg("-o")
        .arg(&so)
        .arg(dir.join("kernel.c"))
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    so
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("warm") => return offload_child(true, true),
        Ok("source" | "probed") => return offload_child(true, false),
        Ok("image") => return offload_child(false, false),
        Ok("raw") => return raw_child(),
        Ok(other) => panic!("unknown role {other}"),
        Err(_) => {}
    }
    // `cargo bench` passes `--bench`; a filter argument other than ours skips the bench.
    if let Some(filter) = std::env::args().skip(1).find(|a| !a.starts_with('-'))
        && !"fresh_process".contains(filter.as_str())
    {
        return;
    }
    let rounds: usize = std::env::var("OFFLOAD_BENCH_FRESH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let dir = std::env::temp_dir().join(format!("offload-bench-fresh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache");
    let so = prebuild(&dir);

    let (warm, warm_wall) = spawn("warm", &cache, &so);
    println!(
        "warming child (compiles): {} in process, {} spawn to exit",
        us(warm.split_whitespace().nth(1).unwrap().parse().unwrap()),
        us(warm_wall)
    );

    let mut kinds = [
        ("offload from warm cache", "source"),
        ("offload, compiler probed", "probed"),
        ("offload from image file", "image"),
        ("raw dlopen floor", "raw"),
    ]
    .map(|(name, role)| Kind {
        name,
        role,
        inside: Vec::new(),
        wall: Vec::new(),
        steps: Vec::new(),
    });
    let count = kinds.len();
    for round in 0..rounds {
        for i in 0..count {
            let kind = &mut kinds[(round + i) % count];
            let (line, wall) = spawn(kind.role, &cache, &so);
            let mut words = line.split_whitespace().skip(1);
            kind.inside
                .push(words.next().unwrap().parse::<f64>().unwrap());
            kind.wall.push(wall);
            let mut at = 0;
            while let (Some(name), Some(value)) = (words.next(), words.next()) {
                if kind.steps.len() <= at {
                    kind.steps.push((name.to_string(), Vec::new()));
                }
                kind.steps[at].1.push(value.parse().unwrap());
                at += 1;
            }
        }
    }
    let floor_at = count - 1;
    let floor = quantile(&kinds[floor_at].inside, 0.5);
    println!(
        "fresh-process first launch, {rounds} children each (in process: before the first call → first launch returns):"
    );
    for kind in &kinds {
        let ratios: Vec<f64> = kind
            .inside
            .iter()
            .zip(&kinds[floor_at].inside)
            .map(|(a, b)| a / b)
            .collect();
        println!(
            "  {:<24} median {:>9} p90 {:>9} | paired ratio to floor {:.2} | spawn→exit median {}",
            kind.name,
            us(quantile(&kind.inside, 0.5)),
            us(quantile(&kind.inside, 0.9)),
            quantile(&ratios, 0.5),
            us(quantile(&kind.wall, 0.5)),
        );
        if !kind.steps.is_empty() {
            let steps: Vec<String> = kind
                .steps
                .iter()
                .map(|(name, v)| format!("{name} {}", us(quantile(v, 0.5))))
                .collect();
            println!("      steps (medians): {}", steps.join(", "));
        }
    }
    let goal = quantile(&kinds[0].inside, 0.5);
    println!(
        "goal: warm-cache first launch median ≤ 500 µs: {} ({}; floor {})",
        if goal <= 500e3 { "met" } else { "not met" },
        us(goal),
        us(floor)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
