//! The host backend's C compiler: finding the system's (`$CC`, else `cc` on `PATH`), naming
//! it for the compile cache, and compiling one [`Source`] into a shared object in a private
//! temporary directory that is removed whatever happens.
//!
//! Naming a compiler means running it three times (`--version`, `-dumpfullversion`,
//! `-dumpmachine`): milliseconds, which a fresh process whose program is in the disk cache
//! would otherwise pay before its first launch. So the answer is probed once per compiler
//! and process, and also remembered across processes in the compile cache's directory (see
//! [`remembered`]), under the [`stamp`] of the compiler's file (inode, size, times: what
//! any change to the compiler changes), which costs a fresh process no more than the
//! `stat` that finding the compiler does anyway.
//!
//! No shell is involved: the compiler runs with an argument vector, the user's options one
//! argument each.

use std::collections::hash_map::RandomState;
use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use offload_core::{BackendKind, CompilerId, Error, Language, Result, Source};

use crate::lock;

/// The flags every host compile gets, before the user's options (a later `-O`, `-std` or
/// `-march` of the user's wins). `-O3`, not `-O2`: GCC 12's `-O2` vectorises only loops
/// whose trip count it knows to be a multiple of the vector width, which a kernel's block
/// range never is.
pub(crate) const FLAGS: &[&str] = &["-shared", "-fPIC", "-O3", "-std=c11"];

/// Code for the CPU it runs on: the whole instruction set (AVX2 and FMA where the CPU has
/// them; a plain x86-64 build has SSE2 only). Given where the compiler accepts it and the
/// CPU has a [`crate::cpu::fingerprint`], which then joins the compiler's target (and so
/// every cache key): a program compiled here is never served to another CPU.
pub(crate) const NATIVE: &str = "-march=native";

/// What a probed target carries when the compiler accepted [`NATIVE`] (remembered with it).
const NATIVE_MARK: &str = " +native";

/// The most bytes of compiler output an error carries.
const MAX_LOG: usize = 64 << 10;

/// The header's and the source's names in the temporary directory.
const HEADER_NAME: &str = "offload_host.h";
const SOURCE_NAME: &str = "kernel.c";
const OUTPUT_NAME: &str = "kernel.so";

/// A C compiler found on this machine.
#[derive(Clone, Debug)]
struct Cc {
    /// The program run (absolute, or as `$CC` named it with a `/`).
    program: PathBuf,
    /// Its identity; with [`NATIVE`], the target names this machine's CPU too.
    id: CompilerId,
    /// Whether compiles get [`NATIVE`].
    native: bool,
}

impl Cc {
    /// The compiler as probed (its target carrying [`NATIVE_MARK`] if it accepts
    /// [`NATIVE`]), for this machine: [`NATIVE`] where the CPU has a fingerprint, whose
    /// name then replaces the mark.
    fn new(program: PathBuf, probed: &CompilerId) -> Cc {
        let (target, accepts) = match probed.target.strip_suffix(NATIVE_MARK) {
            Some(target) => (target, true),
            None => (probed.target.as_str(), false),
        };
        let cpu = crate::cpu::fingerprint().filter(|_| accepts);
        let target = match cpu {
            Some(cpu) => format!("{target} {NATIVE} for {cpu}"),
            None => target.to_string(),
        };
        Cc {
            program,
            id: CompilerId::new(probed.identity.clone(), target),
            native: cpu.is_some(),
        }
    }
}

/// One compiler's identity once probed; its lock is held by the one probing it.
type Probe = Arc<Mutex<Option<CompilerId>>>;

/// Compilers probed in this process, by the program found: one entry per `$CC`/`PATH`
/// resolution, each probed once (concurrent first callers wait for the one probing).
/// A failed probe is not kept, so a compiler installed later is found.
static PROBED: Mutex<Vec<(PathBuf, Probe)>> = Mutex::new(Vec::new());

/// `Error::Compile` of a C compile.
fn compile_error(log: impl Into<String>) -> Error {
    Error::Compile {
        backend: BackendKind::Host,
        call: "",
        language: Language::C,
        log: log.into(),
    }
}

/// The compiler the host uses for `language`: `Some` for C, `None` for the rest. `cache`
/// is the compile cache's directory, where the identity is remembered across processes.
pub(crate) fn compiler(language: Language, cache: Option<&Path>) -> Result<Option<CompilerId>> {
    match language {
        Language::C => Ok(Some(find(cache)?.id)),
        _ => Ok(None),
    }
}

/// The C compiler `$CC` names (a program name looked up on `PATH`, or a path), else `cc`
/// on `PATH`, with its identity: known to this process already, else remembered in
/// `cache` for the compiler's current file, else probed (and remembered there).
fn find(cache: Option<&Path>) -> Result<Cc> {
    let (program, file) = resolve()?;
    let slot = {
        let mut probed = lock(&PROBED);
        match probed.iter().find(|(p, _)| *p == program) {
            Some((_, slot)) => slot.clone(),
            None => {
                let slot = Arc::default();
                probed.push((program.clone(), Arc::clone(&slot)));
                slot
            }
        }
    };
    let mut id = lock(&slot);
    if let Some(id) = id.as_ref() {
        return Ok(Cc::new(program, id));
    }
    let probed = identify(&program, &file, cache)?;
    *id = Some(probed.clone());
    Ok(Cc::new(program, &probed))
}

/// The program `$CC` (or `cc`) names, checked to be an executable file, and what `stat`
/// says of that file.
fn resolve() -> Result<(PathBuf, fs::Metadata)> {
    let cc = std::env::var_os("CC").filter(|v| !v.is_empty());
    let named = cc.clone().unwrap_or_else(|| OsString::from("cc"));
    let shown = named.to_string_lossy().into_owned();
    let what = match &cc {
        Some(_) => format!("CC={shown:?}"),
        None => "`cc`".to_string(),
    };
    let hint = if shown.chars().any(char::is_whitespace) {
        " (CC names one program, without arguments: pass flags with Source::option)"
    } else {
        ""
    };
    if shown.contains('/') {
        let path = PathBuf::from(&named);
        return match executable(&path) {
            Some(file) => Ok((path, file)),
            None => Err(compile_error(format!(
                "no C compiler: {what} is not an executable file{hint}"
            ))),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        // An empty entry would mean the current directory: never run a compiler from there.
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(&named))
        .find_map(|candidate| executable(&candidate).map(|file| (candidate, file)))
        .ok_or_else(|| {
            let set = if cc.is_some() { "" } else { " (set CC to one)" };
            compile_error(format!(
                "no C compiler: {what} was not found on PATH{set}{hint}"
            ))
        })
}

fn executable(path: &Path) -> Option<fs::Metadata> {
    fs::metadata(path)
        .ok()
        .filter(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `program` ran with `args` and succeeded.
fn ask_ok(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `program` with `args` and returns its output, or `None` if it could not run or
/// failed.
fn ask(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The compiler's identity (first line of `--version` and its full version) and target
/// (`-dumpmachine`, with [`NATIVE_MARK`] if the compiler accepts [`NATIVE`]: some do not,
/// GCC before 6 on AArch64 for one).
fn probe(program: &Path) -> Result<CompilerId> {
    let version = ask(program, &["--version"]).ok_or_else(|| {
        compile_error(format!(
            "no C compiler: `{} --version` did not run or failed",
            program.display()
        ))
    })?;
    let first = version.lines().next().unwrap_or_default().trim();
    let number = ask(program, &["-dumpfullversion"])
        .or_else(|| ask(program, &["-dumpversion"]))
        .unwrap_or_default();
    let identity = format!("{first} {number}").trim().to_string();
    let target = ask(program, &["-dumpmachine"])
        .and_then(|t| t.lines().next().map(str::to_string))
        .unwrap_or_else(|| format!("{}-linux", std::env::consts::ARCH));
    // Preprocessing an empty file is enough for the driver to check the option.
    let native = ask_ok(
        program,
        &[NATIVE, "-E", "-x", "c", "/dev/null", "-o", "/dev/null"],
    );
    let target = if native {
        format!("{target}{NATIVE_MARK}")
    } else {
        target
    };
    Ok(CompilerId::new(identity, target))
}

/// The identity of `program` (`stat` says `file` of the file it runs): remembered in the
/// compile cache's directory `cache` for this very file, else probed, then remembered
/// there if the file was checked to be a compiler's own and did not change meanwhile.
fn identify(program: &Path, file: &fs::Metadata, cache: Option<&Path>) -> Result<CompilerId> {
    let Some(dir) = cache else {
        return probe(program);
    };
    let stamp = stamp(program, file);
    if let Some(id) = remembered::read(dir, program, &stamp) {
        return Ok(id);
    }
    let checked = own_compiler(program, &stamp);
    let id = probe(program)?;
    let unchanged = fs::metadata(program).is_ok_and(|now| self::stamp(program, &now) == stamp);
    if let Some(home) = checked.filter(|_| unchanged) {
        remembered::write(dir, program, &stamp, &home, &id);
    }
    Ok(id)
}

/// Compiler drivers that run another compiler (found on `PATH`, or configured): what they
/// print depends on more than their own file, so they are probed in every process.
const WRAPPERS: &[&str] = &["ccache", "sccache", "distcc", "icecc", "buildcache"];

/// What identifies the file `program` runs, without running it or even opening it (its
/// `stat`, which resolving the program took already): the path, and the file's device,
/// inode, size, modification and change times (nanoseconds) and mode.
///
/// Whatever replaces or alters the compiler changes it: a package upgrade writes a new
/// file (another inode, new times), an in-place write or a `chmod` moves the change time,
/// which no program can set back, and `update-alternatives` or another `$CC` ends the
/// links at another file (another inode).
fn stamp(program: &Path, file: &fs::Metadata) -> String {
    format!(
        "{program:?} dev {} ino {} size {} mtime {}.{:09} ctime {}.{:09} mode {:o}",
        file.dev(),
        file.ino(),
        file.size(),
        file.mtime(),
        file.mtime_nsec(),
        file.ctime(),
        file.ctime_nsec(),
        file.mode(),
    )
}

/// The directory of the file `program` runs, if that file is the one `stamp` describes
/// and a compiler's own: an ELF executable (a script can run anything) that is not a
/// known wrapper ([`WRAPPERS`]) by the name its links end at. Checked once, when its
/// identity is remembered; the stamp then vouches that the file is still that one.
fn own_compiler(program: &Path, stamp: &str) -> Option<PathBuf> {
    let mut file = File::open(program).ok()?;
    // The file the links end at, as the kernel opened it.
    let real = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let name = real.file_name()?.as_bytes();
    if !real.is_absolute() || WRAPPERS.iter().any(|w| name.starts_with(w.as_bytes())) {
        return None;
    }
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).ok()?;
    let opened = file.metadata().ok()?;
    (&magic == b"\x7fELF" && self::stamp(program, &opened) == stamp)
        .then(|| real.parent().map(Path::to_path_buf))
        .flatten()
}

/// Compiler identities remembered in the compile cache's directory, one extended attribute
/// of the directory per compiler program (`user.offload.cc.<hash of its path>`), whose
/// value is the compiler file's [`stamp`], its directory and that directory's times, the
/// identity and the target. An attribute, not a file: the directory holds cache entries
/// only, and one `setxattr` replaces a value atomically (a reader sees the old one or the
/// new one).
///
/// A value is used only if the stamp is the compiler's current one and its directory's
/// times are unchanged (a file added next to the compiler, such as a clang configuration
/// file, changes them); anything else (no attribute, another stamp, a file system without
/// user attributes, a damaged value) is a probe. Read and written only in a directory
/// this user owns that others cannot write (the cache's own rule: whoever can write there
/// can plant native code anyway).
mod remembered {
    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use rustix::fs::{FileType, XattrFlags};

    use offload_core::CompilerId;

    /// v2: the target carries `NATIVE_MARK` where the compiler accepts `-march=native`.
    const FORMAT: &str = "offload cc identity v2";

    /// The attribute's name for `program`: FNV-1a of its path, stable across processes
    /// and builds.
    fn name(program: &Path) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in program.as_os_str().as_bytes() {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("user.offload.cc.{hash:016x}")
    }

    /// Whether `dir` is a directory of this user's alone (the cache's own check).
    fn private(dir: &Path) -> bool {
        rustix::fs::stat(dir).is_ok_and(|st| {
            FileType::from_raw_mode(st.st_mode) == FileType::Directory
                && st.st_uid == rustix::process::geteuid().as_raw()
                && st.st_mode & 0o022 == 0
        })
    }

    /// A directory's times, as remembered.
    fn times(dir: &Path) -> Option<String> {
        let m = fs::metadata(dir).ok()?;
        Some(format!(
            "{}.{:09} {}.{:09}",
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        ))
    }

    /// The identity remembered for `program` with this `stamp`.
    pub(super) fn read(dir: &Path, program: &Path, stamp: &str) -> Option<CompilerId> {
        if !private(dir) {
            return None;
        }
        let mut buf = [0u8; 4096];
        let len = rustix::fs::getxattr(dir, name(program), &mut buf[..]).ok()?;
        let text = std::str::from_utf8(&buf[..len]).ok()?;
        let mut lines = text
            .strip_prefix(FORMAT)?
            .strip_prefix('\n')?
            .strip_prefix(stamp)?
            .strip_prefix('\n')?
            .split_terminator('\n');
        let (home, identity, target) = (lines.next()?, lines.next()?, lines.next()?);
        let (was, home) = home.split_at_checked(home.find(" /")?)?;
        if lines.next().is_some() || identity.is_empty() || times(Path::new(&home[1..]))? != was {
            return None;
        }
        Some(CompilerId::new(identity, target))
    }

    /// Remembers `id` for `program` with this `stamp`, the compiler's file living in
    /// `home`; creates the directory (0700) as the cache does. Silently nothing where that
    /// fails.
    pub(super) fn write(dir: &Path, program: &Path, stamp: &str, home: &Path, id: &CompilerId) {
        use std::os::unix::fs::DirBuilderExt;
        let Some((home, was)) = home.to_str().zip(times(home)) else {
            return;
        };
        if [home, &id.identity, &id.target]
            .iter()
            .any(|s| s.contains('\n'))
        {
            return;
        }
        // Best effort: without the directory the compile cache is simply not used.
        let _ = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
        if !private(dir) {
            return;
        }
        let value = format!(
            "{FORMAT}\n{stamp}\n{was} {home}\n{}\n{}\n",
            id.identity, id.target
        );
        if let Err(e) =
            rustix::fs::setxattr(dir, name(program), value.as_bytes(), XattrFlags::empty())
        {
            tracing::debug!(target: "offload::compile", dir = %dir.display(), error = %e, "compiler identity not remembered");
        }
    }
}

/// Compiles C `source` into a shared object (see [`FLAGS`]), in a private temporary
/// directory with `offload_host.h` next to the source.
pub(crate) fn compile(source: &Source, cache: Option<&Path>) -> Result<Vec<u8>> {
    if source.language() != Language::C {
        return Err(Error::Unsupported {
            backend: BackendKind::Host,
            call: "",
            reason: format!("the host backend compiles C, not {}", source.language()),
        });
    }
    let cc = find(cache)?;
    let dir = TempDir::new().map_err(|e| io_error("create a private temporary directory", &e))?;
    let header = dir.path().join(HEADER_NAME);
    let input = dir.path().join(SOURCE_NAME);
    let output = dir.path().join(OUTPUT_NAME);
    write_new(&header, crate::HEADER.as_bytes())
        .and_then(|()| write_new(&input, source.text().as_bytes()))
        .map_err(|e| io_error("write the source to a temporary directory", &e))?;
    let run = Command::new(&cc.program)
        .args(FLAGS)
        .args(cc.native.then_some(NATIVE))
        .arg("-I")
        .arg(dir.path())
        .args(source.options())
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            compile_error(format!(
                "the C compiler `{}` did not start: {e}",
                cc.program.display()
            ))
        })?;
    let log = log_of(&run, dir.path());
    if !run.status.success() {
        let log = if log.is_empty() {
            format!(
                "`{}` failed ({}) and printed nothing",
                cc.program.display(),
                run.status
            )
        } else {
            log
        };
        return Err(compile_error(log));
    }
    if !log.is_empty() {
        tracing::warn!(target: "offload::compile", compiler = %cc.id.identity, "C compiler warnings:\n{log}");
    }
    fs::read(&output).map_err(|e| io_error("read the compiled shared object", &e))
}

/// What the compiler printed (stderr, then stdout), with the temporary directory's name
/// taken out of its paths (`kernel.c:3:5: error: …`), at most [`MAX_LOG`] bytes.
fn log_of(run: &Output, dir: &Path) -> String {
    let mut text = String::from_utf8_lossy(&run.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&run.stdout));
    let prefix = format!("{}/", dir.display());
    let text = text.replace(&prefix, "");
    let text = text.trim_end();
    if text.len() <= MAX_LOG {
        return text.to_string();
    }
    let mut cut = MAX_LOG;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n… ({} more bytes of compiler output)",
        &text[..cut],
        text.len() - cut
    )
}

fn io_error(what: &str, e: &io::Error) -> Error {
    Error::Driver {
        backend: BackendKind::Host,
        call: "",
        code: i64::from(e.raw_os_error().unwrap_or(0)),
        message: format!("C compile: cannot {what}: {e}"),
    }
}

/// Writes a new file, readable by this user only.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?
        .write_all(bytes)
}

/// A directory of this process alone under `std::env::temp_dir()`: created 0700 with a
/// fresh, unguessable name (never an existing one), removed with everything in it on drop.
struct TempDir(PathBuf);

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl TempDir {
    fn new() -> io::Result<TempDir> {
        let base = std::env::temp_dir();
        let mut last = io::Error::new(io::ErrorKind::AlreadyExists, "no free name");
        for _ in 0..16 {
            let mut random = RandomState::new().build_hasher();
            random.write_u64(TEMP_COUNTER.fetch_add(1, Ordering::Relaxed));
            let path = base.join(format!(
                "offload-cc-{}-{:016x}",
                std::process::id(),
                random.finish()
            ));
            // Not recursive: the name must be new, so nobody else's directory is used.
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a temp directory left behind is the OS's to sweep.
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// A private cache directory whose file system keeps user attributes (`None`: skip).
    fn attribute_dir() -> Option<TempDir> {
        let dir = TempDir::new().unwrap();
        let test = "user.offload.test";
        match rustix::fs::setxattr(dir.path(), test, b"x", rustix::fs::XattrFlags::empty()) {
            Ok(()) => {
                rustix::fs::removexattr(dir.path(), test).unwrap();
                Some(dir)
            }
            Err(e) => {
                eprintln!(
                    "skipped: {} keeps no user attributes ({e})",
                    dir.path().display()
                );
                None
            }
        }
    }

    /// Runs `sh -c script` with `args`. Files these tests run are written by another
    /// process: one this process wrote could still be open in a child another test thread
    /// forks meanwhile, and running it would fail (`ETXTBSY`).
    fn sh(script: &str, args: &[&Path]) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }

    /// A copy of the system's C compiler (an ELF program) in a directory of its own.
    fn compiler_copy(name: &str) -> (TempDir, PathBuf) {
        let dir = TempDir::new().unwrap();
        let program = dir.path().join(name);
        let cc = fs::canonicalize(resolve().unwrap().0).unwrap();
        sh(r#"cp "$1" "$2""#, &[&cc, &program]);
        (dir, program)
    }

    fn stamp_of(program: &Path) -> String {
        stamp(program, &fs::metadata(program).unwrap())
    }

    fn identify_with(program: &Path, cache: Option<&Path>) -> CompilerId {
        identify(program, &fs::metadata(program).unwrap(), cache).unwrap()
    }

    #[test]
    fn a_compiler_is_remembered_until_its_file_changes() {
        let Some(cache) = attribute_dir() else { return };
        let cache = cache.path();
        let (dir, program) = compiler_copy("cc-copy");
        let home = dir.path();
        let before = stamp_of(&program);
        assert_eq!(own_compiler(&program, &before).as_deref(), Some(home));

        // Probed once, then remembered: the next process reads what was remembered and
        // runs nothing (a planted identity shows it was not probed).
        let probed = identify_with(&program, Some(cache));
        assert!(probed.identity.contains("cc-copy"), "{probed:?}");
        assert_eq!(
            remembered::read(cache, &program, &before),
            Some(probed.clone())
        );
        let planted = CompilerId::new("planted", "planted-target");
        remembered::write(cache, &program, &before, home, &planted);
        assert_eq!(identify_with(&program, Some(cache)), planted);

        // Any change to the compiler misses: its mode, its bytes, a new file in its place,
        // a file added next to it. Each time it is probed again (and remembered anew).
        let changes: [&dyn Fn(); 4] = [
            &|| fs::set_permissions(&program, fs::Permissions::from_mode(0o700)).unwrap(),
            &|| sh(r#"printf x >> "$1""#, &[&program]),
            &|| sh(r#"cp "$1" "$1.new" && mv "$1.new" "$1""#, &[&program]),
            &|| write_new(&home.join("clang.cfg"), b"--target=x").unwrap(),
        ];
        let mut seen = vec![before];
        for (i, change) in changes.iter().enumerate() {
            let last = stamp_of(&program);
            remembered::write(cache, &program, &last, home, &planted);
            assert_eq!(
                remembered::read(cache, &program, &last),
                Some(planted.clone())
            );
            change();
            let now = stamp_of(&program);
            assert_eq!(remembered::read(cache, &program, &now), None, "change {i}");
            assert_eq!(identify_with(&program, Some(cache)), probed, "change {i}");
            assert_eq!(
                remembered::read(cache, &program, &now),
                Some(probed.clone())
            );
            if i < 3 {
                assert!(!seen.contains(&now), "change {i} left the stamp");
            }
            seen.push(now);
        }

        // Without a cache directory, or with one others may write, nothing is remembered.
        let last = seen.last().unwrap();
        remembered::write(cache, &program, last, home, &planted);
        assert_eq!(identify_with(&program, None), probed);
        fs::set_permissions(cache, fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(remembered::read(cache, &program, last), None);
        assert_eq!(identify_with(&program, Some(cache)), probed);
    }

    #[test]
    fn another_link_target_is_another_compiler() {
        let (dir, program) = compiler_copy("cc-a");
        let other = dir.path().join("cc-b");
        sh(r#"cp "$1" "$2""#, &[&program, &other]);
        let link = dir.path().join("cc");
        std::os::unix::fs::symlink(&program, &link).unwrap();
        let a = stamp_of(&link);
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert_ne!(a, stamp_of(&link));
    }

    #[test]
    fn scripts_and_wrappers_are_probed_in_every_process() {
        let Some(cache) = attribute_dir() else { return };
        let cache = cache.path();
        let (dir, wrapper) = compiler_copy("ccache");
        let link = dir.path().join("gcc");
        std::os::unix::fs::symlink(&wrapper, &link).unwrap();
        let script = dir.path().join("cc-script");
        let cc = resolve().unwrap().0;
        sh(
            r#"printf '#!/bin/sh\nexec %s "$@"\n' "$1" > "$2" && chmod 700 "$2""#,
            &[&cc, &script],
        );
        for (program, why) in [
            (&wrapper, "a wrapper runs another compiler"),
            (&link, "a wrapper under a compiler's name"),
            (&script, "a script can run anything"),
        ] {
            let stamp = stamp_of(program);
            assert_eq!(own_compiler(program, &stamp), None, "{why}");
            identify_with(program, Some(cache));
            assert_eq!(remembered::read(cache, program, &stamp), None, "{why}");
        }
        // A stamp of another file is not vouched for either.
        let (_other, program) = compiler_copy("cc");
        assert_eq!(own_compiler(&program, &stamp_of(&wrapper)), None);
    }

    #[test]
    fn a_temporary_directory_is_private_and_removed() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().to_path_buf();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777 & !0o700, 0, "{mode:o}");
        write_new(&path.join("x"), b"x").unwrap();
        assert!(
            write_new(&path.join("x"), b"y").is_err(),
            "never overwrites"
        );
        let other = TempDir::new().unwrap();
        assert_ne!(other.path(), path);
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn a_long_log_is_cut_at_a_character() {
        let run = Output {
            status: std::process::ExitStatus::from_raw(0),
            stdout: Vec::new(),
            stderr: "é".repeat(MAX_LOG).into_bytes(),
        };
        let log = log_of(&run, Path::new("/nowhere"));
        assert!(log.len() < MAX_LOG + 100);
        assert!(log.ends_with(&format!("({} more bytes of compiler output)", MAX_LOG)));
    }

    #[test]
    fn paths_in_the_log_are_the_file_names() {
        let run = Output {
            status: std::process::ExitStatus::from_raw(256),
            stdout: Vec::new(),
            stderr: b"/tmp/offload-cc-1-ab/kernel.c:1:1: error: x\n".to_vec(),
        };
        assert_eq!(
            log_of(&run, Path::new("/tmp/offload-cc-1-ab")),
            "kernel.c:1:1: error: x"
        );
    }
}
