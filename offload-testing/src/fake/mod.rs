//! The fake-driver harness of the backends' tests: a stand-in
//! driver written in C is compiled with the system C compiler into a private directory,
//! and each case runs in a child process (the test binary again, its `child` test) with
//! that directory first on `LD_LIBRARY_PATH`, which the dynamic loader reads only at
//! process start. Without a C compiler the tests print SKIP, except under `CI=true`.
//!
//! The fakes live in `offload-driver/fake/`: `fake_common.h` (object registry, violation
//! log, call counters, failure injection) and `fake_cuda.c`, a protocol-checking libcuda
//! over host memory. [`FakeHooks`] reads a loaded fake's violations and counters.
//!
//! Test support: its failures are test failures, so it panics where a test would.
#![allow(clippy::unwrap_used, clippy::panic, clippy::missing_panics_doc)]

use std::ffi::{CStr, CString, c_char, c_int, c_ulong};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_core::{Config, Error, MemKind, NoPlatforms, Offload, PlatformEntry, Program, Uninit};

use offload_core::hal::{Device, Platform};

use offload_driver::Stats;

// Launches of the fixture kernels (unsafe by contract), a handle's descriptor passed to a
// child, and the fake's hooks.
#[allow(unsafe_code)]
pub mod cases;
pub mod probe;
pub mod real;

/// How long a child case runs against the real driver (`real_var` set) before it counts
/// as hung: the GPU kit's check of the cases allows 300 s.
pub const REAL_WATCHDOG: std::time::Duration = std::time::Duration::from_secs(280);

/// Where a backend's fake driver comes from and how its children are told their case.
///
/// With `real_var` set to `1` in the environment, the same cases run on the real driver the
/// dynamic loader finds instead (the GPU kit, `scripts/gpu/`): nothing is compiled,
/// `LD_LIBRARY_PATH` is passed on as it is, [`FakeHooks`] are [absent](FakeHooks::absent),
/// and what only the fake can tell (its protocol log, live objects and call counts, its
/// failure switch, deferred queues) is reported as `(real driver)` on both sides of an
/// assertion or skipped with a printed reason. The switch changes the driver, not the
/// assertions about what offload computes.
///
/// ```
/// use offload_testing::fake::FakeDriver;
/// const FAKE: FakeDriver = FakeDriver {
///     case_var: "OFFLOAD_DOC_FAKE_CASE",
///     source: "/nonexistent/fake_doc.c",
///     build_dir: "/tmp",
///     prefix: "fake-doc",
///     real_var: "OFFLOAD_DOC_REAL",
/// };
/// assert_eq!(FAKE.prefix, "fake-doc");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct FakeDriver {
    /// Set in a child: which case to run.
    pub case_var: &'static str,
    /// The C source of the fake driver.
    pub source: &'static str,
    /// Where the builds go (the test's `CARGO_TARGET_TMPDIR`).
    pub build_dir: &'static str,
    /// Each build's directory is `<prefix>-<variant>`.
    pub prefix: &'static str,
    /// Set to `1`, the cases run on the real driver (see above); `""`: this harness always
    /// runs the fake (its cases check the fake's own answers).
    pub real_var: &'static str,
}

/// What a report says on the real driver, in place of the fake's protocol log and live
/// objects (and of any value only the fake determines).
pub const REAL: &str = "(real driver)";

impl FakeDriver {
    /// Whether the cases run on the real driver (`real_var` is `1`).
    ///
    /// ```
    /// # let fake = offload_testing::fake::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc",
    /// #     real_var: "OFFLOAD_DOC_REAL" };
    /// assert!(!fake.real()); // OFFLOAD_DOC_REAL is not set here
    /// ```
    pub fn real(&self) -> bool {
        !self.real_var.is_empty() && std::env::var(self.real_var).as_deref() == Ok("1")
    }

    /// `value` on the fake, [`REAL`] on the real driver: for what only the fake determines
    /// (a call count, whether deferred work is still pending), so that one expected line
    /// serves both.
    ///
    /// ```
    /// # let fake = offload_testing::fake::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc",
    /// #     real_var: "" };
    /// assert_eq!(fake.fake_only(1), "1");
    /// ```
    pub fn fake_only(&self, value: impl std::fmt::Display) -> String {
        if self.real() {
            REAL.to_string()
        } else {
            value.to_string()
        }
    }

    /// In real mode, prints why a check that needs the fake is skipped and returns `true`.
    ///
    /// ```
    /// # let fake = offload_testing::fake::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc",
    /// #     real_var: "" };
    /// if fake.skip_on_real("needs the fake's failure switch") {
    ///     return;
    /// }
    /// ```
    pub fn skip_on_real(&self, why: &str) -> bool {
        let real = self.real();
        if real {
            println!("SKIP on the real driver ({}=1): {why}", self.real_var);
        }
        real
    }
}

impl FakeDriver {
    /// Builds the fake driver with `defines` into a directory of its own, as `file`; `None`
    /// (after printing SKIP) when the C compiler cannot, which fails the test under
    /// `CI=true`.
    ///
    /// ```no_run
    /// # let fake = offload_testing::fake::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc",
    /// #     real_var: "" };
    /// if let Some(dir) = fake.build("full", "libfake.so.1", &["NO_TOTAL_MEM"]) {
    ///     assert!(dir.join("libfake.so.1").exists());
    /// }
    /// ```
    pub fn build(&self, variant: &str, file: &str, defines: &[&str]) -> Option<PathBuf> {
        if self.real() {
            println!("REAL: {file} is the driver the dynamic loader finds, not the fake");
            return Some(PathBuf::from(self.build_dir));
        }
        static BUILDS: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(self.build_dir).join(format!("{}-{variant}", self.prefix));
        std::fs::create_dir_all(&dir).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        // Built under a name of its own and renamed into place, so that tests building the
        // same variant at once never let a child load a half-written library.
        let partial = dir.join(format!(
            ".{file}.{}.{}",
            std::process::id(),
            BUILDS.fetch_add(1, Ordering::Relaxed)
        ));
        let built = Command::new(&cc)
            .args(["-shared", "-fPIC", "-o"])
            .arg(&partial)
            .arg(self.source)
            .args(defines.iter().map(|d| format!("-D{d}")))
            .status();
        match built {
            Ok(status) if status.success() => {
                std::fs::rename(&partial, dir.join(file)).unwrap();
                Some(dir)
            }
            other => {
                let why = format!("cannot build the fake {file} with `{cc}`: {other:?}");
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
                println!("SKIP: {why}");
                None
            }
        }
    }

    /// Runs `case` in a child that finds the fake driver in `dir`; returns its RESULT line.
    ///
    /// ```no_run
    /// # let fake = offload_testing::fake::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc",
    /// #     real_var: "" };
    /// let dir = fake.build("full", "libfake.so.1", &[]).unwrap();
    /// assert!(fake.run(&dir, "open", &[("FAKE_COUNT", "0")]).starts_with("error "));
    /// ```
    pub fn run(&self, dir: &Path, case: &str, vars: &[(&str, &str)]) -> String {
        let mut command = crate::child::test_command("child");
        command.env(self.case_var, case).envs(vars.iter().copied());
        if !self.real() {
            command.env("LD_LIBRARY_PATH", dir);
        }
        // A real driver makes each `init` cost a context (0.1-0.5 s): the conformance suite's
        // 300-odd inits took over two minutes on an H200 (the re-entrancy table alone).
        let limit = if self.real() {
            REAL_WATCHDOG
        } else {
            crate::child::WATCHDOG
        };
        let out = crate::child::run_within(command, limit);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child {case} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The conformance suite's summary (how many cases ran) reaches the test's output.
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            if line.starts_with("offload conformance:") {
                println!("{case}: {line}");
            }
        }
        stdout
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, result)| result))
            .unwrap_or_else(|| panic!("child {case} printed no RESULT:\n{stdout}"))
            .to_string()
    }

    /// The child side, for the test binary's `child` test: in a child, runs its case
    /// (`open`: [`open_platform`], `runtime`: [`through_runtime`], `properties`:
    /// [`properties`]) and prints what it saw
    /// as `RESULT <text>`; outside one, does nothing.
    ///
    /// ```no_run
    /// # let fake = offload_testing::fake::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc",
    /// #     real_var: "" };
    /// # fn platform() -> offload_core::PlatformEntry { unimplemented!() }
    /// # fn stats() -> offload_driver::Stats { unimplemented!() }
    /// # type CudaPlatform = offload_core::reference::Reference;
    /// #[test]
    /// fn child() {
    ///     fake.child::<CudaPlatform>(platform, stats);
    /// }
    /// ```
    pub fn child<B: Platform>(&self, entry: fn() -> PlatformEntry, stats: fn() -> Stats) {
        let Ok(case) = std::env::var(self.case_var) else {
            return; // not a child
        };
        let result = match case.as_str() {
            "open" => open_platform::<B>(stats),
            "runtime" => through_runtime::<B>(entry(), stats),
            "properties" => properties::<B>(),
            other => format!("unknown case {other}"),
        };
        println!("RESULT {result}");
    }
}

/// An error's variant and fields, for tests that check the data a message is made of
/// (`Error`'s own `Debug` prints its message).
fn fields(e: &Error) -> String {
    match e {
        Error::DriverNotFound {
            backend,
            library,
            reason,
            ..
        } => format!(
            "DriverNotFound {{ backend: {backend:?}, library: {library:?}, reason: {reason:?} }}"
        ),
        Error::NoDevice {
            backend,
            library,
            reason,
        } => {
            format!("NoDevice {{ backend: {backend:?}, library: {library:?}, reason: {reason:?} }}")
        }
        Error::Driver {
            backend,
            call,
            code,
            message,
        } => format!(
            "Driver {{ backend: {backend:?}, call: {call:?}, code: {code}, message: {message:?} }}"
        ),
        other => other.to_string(),
    }
}

/// Opens platform `B` directly and describes what it found: its name, every device's
/// `name|vendor|memory|compute units`, what `alloc` answered (`ok`, the buffer freed at
/// once, or the error), and the counters after `deinit`.
///
/// ```no_run
/// # type CudaPlatform = offload_core::reference::Reference;
/// # fn stats() -> offload_driver::Stats { unimplemented!() }
/// println!("{}", offload_testing::fake::open_platform::<CudaPlatform>(stats));
/// ```
pub fn open_platform<B: Platform>(stats: fn() -> Stats) -> String {
    let platform = match B::open(&Config::default()) {
        Ok(platform) => platform,
        Err(e) => return format!("error {}", fields(&e)),
    };
    let mut devices = Vec::new();
    for dev in platform.devices() {
        devices.push(match dev.info() {
            Ok(i) => format!("{}|{}|{}|{}", i.name, i.vendor, i.memory, i.compute_units),
            Err(e) => format!("error {}", fields(&e)),
        });
    }
    let first = platform.devices().remove(0);
    let alloc = match first.alloc(64, MemKind::Device) {
        Ok(buffer) => {
            first.free(buffer).unwrap();
            "ok".to_string()
        }
        Err(e) => e.to_string(),
    };
    drop(first);
    platform.deinit().unwrap();
    let stats = stats();
    format!(
        "name={} devices=[{}] alloc={alloc} opened={} deinitialised={}",
        platform.name(),
        devices.join("; "),
        stats.opened,
        stats.deinitialised
    )
}

/// Opens platform `B` and lists the first device's typed properties (`None` for what the
/// driver did not report).
///
/// ```no_run
/// # type CudaPlatform = offload_core::reference::Reference;
/// println!("{}", offload_testing::fake::properties::<CudaPlatform>());
/// ```
pub fn properties<B: Platform>() -> String {
    let platform = match B::open(&Config::default()) {
        Ok(platform) => platform,
        Err(e) => return format!("error {}", fields(&e)),
    };
    let text = match platform.devices().remove(0).info() {
        Ok(i) => format!(
            "vendor_id={:?} driver={:?} block_threads={:?} block={:?} grid={:?} \
             alloc={:?} shared={:?} bits={:?} clock={:?}",
            i.vendor_id,
            i.driver_version,
            i.max_block_threads,
            i.max_block,
            i.max_grid,
            i.max_alloc,
            i.shared_memory,
            i.address_bits,
            i.clock_mhz
        ),
        Err(e) => format!("error {}", fields(&e)),
    };
    let _ = platform.deinit();
    text
}

/// Starts a runtime with only `entry` (platform `B`) and uses its devices: the platform's
/// name, the devices' names, what `alloc` (`ok` or the error) and `Program::load` of 16
/// zero bytes answered, and whether
/// shutdown was the last and the counters after it.
///
/// ```no_run
/// # type CudaPlatform = offload_core::reference::Reference;
/// # fn platform() -> offload_core::PlatformEntry { unimplemented!() }
/// # fn stats() -> offload_driver::Stats { unimplemented!() }
/// println!("{}", offload_testing::fake::through_runtime::<CudaPlatform>(platform(), stats));
/// ```
pub fn through_runtime<B: Platform>(entry: PlatformEntry, stats: fn() -> Stats) -> String {
    let rt = match Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(entry)
        .start()
    {
        Ok(rt) => rt,
        Err(e) => return format!("error {}", fields(&e)),
    };
    let platforms = rt.platforms().unwrap();
    let devices = rt.devices().unwrap();
    let names: Vec<String> = devices.iter().map(|d| d.info().unwrap().name).collect();
    let alloc = match devices[0].alloc(64, MemKind::Device) {
        Ok(buffer) => {
            buffer.free().unwrap();
            "ok".to_string()
        }
        Err(e) => e.to_string(),
    };
    let load = Program::new([0u8; 16]).load(&devices[0]).unwrap_err();
    assert!(devices.iter().all(|d| d.backend() == B::KIND));
    drop(devices);
    let down = rt.shutdown().unwrap();
    let stats = stats();
    format!(
        "platform={} devices={names:?} alloc={alloc} load={load} \
         last={} opened={} deinitialised={}",
        platforms[0].name,
        down.was_last(),
        stats.opened,
        stats.deinitialised
    )
}

/// The test hooks of a fake driver that this process has loaded (`<prefix>_violations`,
/// `<prefix>_clear_violations`, `<prefix>_fail`, `<prefix>_calls`, `<prefix>_live`; see the
/// top of `offload-driver/fake/fake_cuda.c`), found by opening the fake again under the
/// library name the backend loaded it by: `dlopen` of a loaded soname returns that library.
///
/// ```no_run
/// use offload_testing::fake::FakeHooks;
/// // SAFETY: in a child of the fake-driver harness, libcuda.so.1 is offload's fake.
/// let fake = unsafe { FakeHooks::open("libcuda.so.1", "fake_cuda") };
/// // ... drive the backend ...
/// assert_eq!(fake.violations(), Vec::<String>::new());
/// assert_eq!(fake.live("alloc"), 0);
/// ```
pub struct FakeHooks {
    /// `None`: the real driver is loaded, which has no hooks ([`FakeHooks::absent`]).
    table: Option<HookTable>,
}

/// A loaded fake's hook functions.
struct HookTable {
    violations: unsafe extern "C" fn(*mut c_char, usize) -> c_int,
    clear: unsafe extern "C" fn(),
    fail: unsafe extern "C" fn(*const c_char, c_int, c_int),
    calls: unsafe extern "C" fn(*const c_char) -> c_ulong,
    live: unsafe extern "C" fn(*const c_char) -> c_int,
    /// Every entry point called ("name=calls,..."); a fake without it lists none.
    entries: Option<unsafe extern "C" fn(*mut c_char, usize) -> c_int>,
    /// Keeps the fake loaded while the hooks are in use.
    _library: libloading::Library,
}

impl std::fmt::Debug for FakeHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHooks").finish_non_exhaustive()
    }
}

/// Room for the whole violation log (64 messages of at most 320 bytes, joined).
const VIOLATIONS_TEXT: usize = 64 * 1024;

#[allow(unsafe_code)]
impl FakeHooks {
    /// Opens `library` (loading it if this process has not yet) and finds the hooks named
    /// `<prefix>_...`; panics if it has none.
    ///
    /// # Safety
    ///
    /// `library` must be one of offload's fake drivers (this harness built it, and the
    /// dynamic loader finds it under that name), whose hooks have the C signatures listed at
    /// the top of `offload-driver/fake/fake_cuda.c`; opening it runs its initialisers.
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// // SAFETY: in a child of the fake-driver harness, libcuda.so.1 is offload's fake.
    /// let fake = unsafe { FakeHooks::open("libcuda.so.1", "fake_cuda") };
    /// assert_eq!(fake.live("context"), 0);
    /// ```
    pub unsafe fn open(library: &str, prefix: &str) -> FakeHooks {
        // SAFETY: the caller promises that `library` is a fake driver, whose initialisers
        // only read its FAKE_* environment variables.
        let library = unsafe { libloading::Library::new(library) }
            .unwrap_or_else(|e| panic!("cannot open the fake {library}: {e}"));
        macro_rules! hook {
            ($name:literal) => {{
                let symbol = format!("{prefix}_{}\0", $name);
                // SAFETY: the caller promises the hook has this signature (the field's type).
                *unsafe { library.get(symbol.as_bytes()) }
                    .unwrap_or_else(|e| panic!("the fake has no hook {symbol}: {e}"))
            }};
        }
        FakeHooks {
            table: Some(HookTable {
                violations: hook!("violations"),
                clear: hook!("clear_violations"),
                fail: hook!("fail"),
                calls: hook!("calls"),
                live: hook!("live"),
                // SAFETY: the caller promises the hook, where the fake has it, has this signature.
                entries: unsafe { library.get(format!("{prefix}_entries\0").as_bytes()) }
                    .ok()
                    .map(|symbol| *symbol),
                _library: library,
            }),
        }
    }

    /// The hooks of a real driver: none. [`violations`](Self::violations) and
    /// [`entries`](Self::entries) are empty, [`clear`](Self::clear) does nothing, and
    /// [`fail`](Self::fail), [`calls`](Self::calls) and [`live`](Self::live) panic: a case
    /// that needs them is skipped on the real driver ([`FakeDriver::skip_on_real`]).
    ///
    /// ```
    /// let hooks = offload_testing::fake::FakeHooks::absent();
    /// assert!(!hooks.present() && hooks.violations().is_empty());
    /// ```
    pub fn absent() -> FakeHooks {
        FakeHooks { table: None }
    }

    /// Whether these are a fake's hooks (not [`absent`](Self::absent)).
    ///
    /// ```
    /// assert!(!offload_testing::fake::FakeHooks::absent().present());
    /// ```
    pub fn present(&self) -> bool {
        self.table.is_some()
    }

    /// The fake's hooks; panics on the real driver.
    fn table(&self, what: &str) -> &HookTable {
        self.table.as_ref().unwrap_or_else(|| {
            panic!("{what} needs the fake driver's hooks; the real driver has none")
        })
    }

    /// The violations recorded so far, oldest first (after 64, a last message says how many
    /// more there were).
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// # let fake: FakeHooks = unimplemented!();
    /// for message in fake.violations() {
    ///     eprintln!("protocol violation: {message}");
    /// }
    /// ```
    pub fn violations(&self) -> Vec<String> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let mut text = vec![0u8; VIOLATIONS_TEXT];
        // SAFETY: the hook writes at most `text.len()` bytes, NUL-terminated, into `text`.
        let count = unsafe { (table.violations)(text.as_mut_ptr().cast(), text.len()) };
        if count == 0 {
            return Vec::new();
        }
        let text = CStr::from_bytes_until_nul(&text).unwrap().to_string_lossy();
        text.split("; ").map(str::to_string).collect()
    }

    /// Forgets the violations recorded so far and disarms every failure armed by
    /// [`fail`](Self::fail) that has not fired, so one run's failure never reaches the next.
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// # let fake: FakeHooks = unimplemented!();
    /// fake.clear();
    /// assert!(fake.violations().is_empty());
    /// ```
    pub fn clear(&self) {
        if let Some(table) = &self.table {
            // SAFETY: the hook takes no arguments.
            unsafe { (table.clear)() }
        }
    }

    /// Makes the `nth` call of `entry` from now on (1: the next one) return `code` instead
    /// of doing its work.
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// # let fake: FakeHooks = unimplemented!();
    /// fake.fail("cuMemAlloc_v2", 1, 2); // the next allocation: CUDA_ERROR_OUT_OF_MEMORY
    /// ```
    pub fn fail(&self, entry: &str, nth: i32, code: i32) {
        let fail = self.table("FakeHooks::fail").fail;
        let entry = CString::new(entry).unwrap();
        // SAFETY: `entry` is a NUL-terminated string that outlives the call.
        unsafe { fail(entry.as_ptr(), nth, code) }
    }

    /// How many times `entry` has been called in this process.
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// # let fake: FakeHooks = unimplemented!();
    /// assert_eq!(fake.calls("cuInit"), 1);
    /// ```
    pub fn calls(&self, entry: &str) -> u64 {
        let hook = self.table("FakeHooks::calls").calls;
        let entry = CString::new(entry).unwrap();
        // SAFETY: `entry` is a NUL-terminated string that outlives the call.
        let calls = unsafe { hook(entry.as_ptr()) };
        #[allow(clippy::useless_conversion)] // c_ulong is u32 on some targets
        u64::from(calls)
    }

    /// Every entry point called so far in this process, with its call count, in the order
    /// of their first calls (empty for a fake without the hook).
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// # let fake: FakeHooks = unimplemented!();
    /// for (entry, calls) in fake.entries() {
    ///     println!("{entry}: {calls}");
    /// }
    /// ```
    pub fn entries(&self) -> Vec<(String, u64)> {
        let Some(entries) = self.table.as_ref().and_then(|t| t.entries) else {
            return Vec::new();
        };
        let mut text = vec![0u8; VIOLATIONS_TEXT];
        // SAFETY: the hook writes at most `text.len()` bytes, NUL-terminated, into `text`.
        unsafe { entries(text.as_mut_ptr().cast(), text.len()) };
        let text = CStr::from_bytes_until_nul(&text).unwrap().to_string_lossy();
        text.split(',')
            .filter_map(|item| item.split_once('='))
            .map(|(entry, calls)| (entry.to_string(), calls.parse().unwrap()))
            .collect()
    }

    /// How many objects of `kind` are alive: "alloc", "host", "module", "function",
    /// "global", "stream", "event", "ipc" or "context".
    ///
    /// ```no_run
    /// # use offload_testing::fake::FakeHooks;
    /// # let fake: FakeHooks = unimplemented!();
    /// assert_eq!((fake.live("alloc"), fake.live("module")), (0, 0));
    /// ```
    pub fn live(&self, kind: &str) -> i32 {
        let live = self.table("FakeHooks::live").live;
        let kind = CString::new(kind).unwrap();
        // SAFETY: `kind` is a NUL-terminated string that outlives the call.
        unsafe { live(kind.as_ptr()) }
    }
}
