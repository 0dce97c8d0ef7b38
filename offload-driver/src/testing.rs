//! The fake-driver harness of the backends' tests (cargo feature `testing`): a stand-in
//! driver written in C is compiled with the system C compiler into a private directory,
//! and each case runs in a child process (the test binary again, its `child` test) with
//! that directory first on `LD_LIBRARY_PATH`, which the dynamic loader reads only at
//! process start. Without a C compiler the tests print SKIP, except under `CI=true`.
//!
//! Test support: its failures are test failures, so it panics where a test would.
#![allow(clippy::unwrap_used, clippy::panic, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_core::{Config, MemKind, NoPlatforms, Offload, PlatformEntry, Program, Uninit};

use offload_core::hal::{Device, Platform};

use crate::Stats;

/// Where a backend's fake driver comes from and how its children are told their case.
///
/// ```
/// use offload_driver::testing::FakeDriver;
/// const FAKE: FakeDriver = FakeDriver {
///     case_var: "OFFLOAD_DOC_FAKE_CASE",
///     source: "/nonexistent/fake_doc.c",
///     build_dir: "/tmp",
///     prefix: "fake-doc",
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
}

impl FakeDriver {
    /// Builds the fake driver with `defines` into a directory of its own, as `file`; `None`
    /// (after printing SKIP) when the C compiler cannot, which fails the test under
    /// `CI=true`.
    ///
    /// ```no_run
    /// # let fake = offload_driver::testing::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc" };
    /// if let Some(dir) = fake.build("full", "libfake.so.1", &["NO_TOTAL_MEM"]) {
    ///     assert!(dir.join("libfake.so.1").exists());
    /// }
    /// ```
    pub fn build(&self, variant: &str, file: &str, defines: &[&str]) -> Option<PathBuf> {
        let dir = Path::new(self.build_dir).join(format!("{}-{variant}", self.prefix));
        std::fs::create_dir_all(&dir).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = Command::new(&cc)
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join(file))
            .arg(self.source)
            .args(defines.iter().map(|d| format!("-D{d}")))
            .status();
        match built {
            Ok(status) if status.success() => Some(dir),
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
    /// # let fake = offload_driver::testing::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc" };
    /// let dir = fake.build("full", "libfake.so.1", &[]).unwrap();
    /// assert!(fake.run(&dir, "open", &[("FAKE_COUNT", "0")]).starts_with("error "));
    /// ```
    pub fn run(&self, dir: &Path, case: &str, vars: &[(&str, &str)]) -> String {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(self.case_var, case)
            .env("LD_LIBRARY_PATH", dir)
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child {case} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
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
    /// # let fake = offload_driver::testing::FakeDriver {
    /// #     case_var: "C", source: "fake.c", build_dir: "/tmp", prefix: "fake-doc" };
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

/// Opens platform `B` directly and describes what it found: its name, every device's
/// `name|vendor|memory|compute units`, what `alloc` answered, and the counters after
/// `deinit`.
///
/// ```no_run
/// # type CudaPlatform = offload_core::reference::Reference;
/// # fn stats() -> offload_driver::Stats { unimplemented!() }
/// println!("{}", offload_driver::testing::open_platform::<CudaPlatform>(stats));
/// ```
pub fn open_platform<B: Platform>(stats: fn() -> Stats) -> String {
    let platform = match B::open(&Config::default()) {
        Ok(platform) => platform,
        Err(e) => return format!("error {e:?}"),
    };
    let mut devices = Vec::new();
    for dev in platform.devices() {
        devices.push(match dev.info() {
            Ok(i) => format!("{}|{}|{}|{}", i.name, i.vendor, i.memory, i.compute_units),
            Err(e) => format!("error {e:?}"),
        });
    }
    let first = platform.devices().remove(0);
    let alloc = match first.alloc(64, MemKind::Device) {
        Ok(_) => panic!("alloc succeeded on a memory-less platform"),
        Err(e) => e,
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
/// println!("{}", offload_driver::testing::properties::<CudaPlatform>());
/// ```
pub fn properties<B: Platform>() -> String {
    let platform = match B::open(&Config::default()) {
        Ok(platform) => platform,
        Err(e) => return format!("error {e:?}"),
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
        Err(e) => format!("error {e:?}"),
    };
    let _ = platform.deinit();
    text
}

/// Starts a runtime with only `entry` (platform `B`) and uses its devices: the platform's
/// name, the devices' names, what `alloc` and `Program::load` answered, and whether
/// shutdown was the last and the counters after it.
///
/// ```no_run
/// # type CudaPlatform = offload_core::reference::Reference;
/// # fn platform() -> offload_core::PlatformEntry { unimplemented!() }
/// # fn stats() -> offload_driver::Stats { unimplemented!() }
/// println!("{}", offload_driver::testing::through_runtime::<CudaPlatform>(platform(), stats));
/// ```
pub fn through_runtime<B: Platform>(entry: PlatformEntry, stats: fn() -> Stats) -> String {
    let rt = match Offload::<Uninit, NoPlatforms>::builder()
        .backends([])
        .platform(entry)
        .start()
    {
        Ok(rt) => rt,
        Err(e) => return format!("error {e:?}"),
    };
    let platforms = rt.platforms().unwrap();
    let devices = rt.devices().unwrap();
    let names: Vec<String> = devices.iter().map(|d| d.info().unwrap().name).collect();
    let alloc = devices[0].alloc(64, MemKind::Device).unwrap_err();
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
