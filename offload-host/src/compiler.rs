//! The host backend's C compiler: finding the system's (`$CC`, else `cc` on `PATH`), naming
//! it for the compile cache (probed once per compiler and process), and compiling one
//! [`Source`] into a shared object in a private temporary directory that is removed
//! whatever happens.
//!
//! No shell is involved: the compiler runs with an argument vector, the user's options one
//! argument each.

use std::collections::hash_map::RandomState;
use std::ffi::OsString;
use std::fs::{self, DirBuilder, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use offload_core::{BackendKind, CompilerId, Error, Language, Result, Source};

const CALL: &str = "Program::load";

/// The flags every host compile gets, before the user's options (a later `-O` or `-std`
/// of the user's wins). `-O3`, not `-O2`: GCC 12's `-O2` vectorises only loops whose trip
/// count it knows to be a multiple of the vector width, which a kernel's block range
/// never is.
pub(crate) const FLAGS: &[&str] = &["-shared", "-fPIC", "-O3", "-std=c11"];

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
    id: CompilerId,
}

/// One compiler's identity once probed; its lock is held by the one probing it.
type Probe = Arc<Mutex<Option<CompilerId>>>;

/// Compilers probed in this process, by the program found: one entry per `$CC`/`PATH`
/// resolution, each probed once (concurrent first callers wait for the one probing).
/// A failed probe is not kept, so a compiler installed later is found.
static PROBED: Mutex<Vec<(PathBuf, Probe)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `Error::Compile` of a C compile.
fn compile_error(log: impl Into<String>) -> Error {
    Error::Compile {
        backend: BackendKind::Host,
        call: CALL,
        language: Language::C,
        log: log.into(),
    }
}

/// The compiler the host uses for `language`: `Some` for C, `None` for the rest.
pub(crate) fn compiler(language: Language) -> Result<Option<CompilerId>> {
    match language {
        Language::C => Ok(Some(find()?.id)),
        _ => Ok(None),
    }
}

/// The C compiler `$CC` names (a program name looked up on `PATH`, or a path), else `cc`
/// on `PATH`, with its identity.
fn find() -> Result<Cc> {
    let program = resolve()?;
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
        return Ok(Cc {
            program,
            id: id.clone(),
        });
    }
    let probed = probe(&program)?;
    *id = Some(probed.clone());
    Ok(Cc {
        program,
        id: probed,
    })
}

/// The program `$CC` (or `cc`) names, checked to be an executable file.
fn resolve() -> Result<PathBuf> {
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
        return if executable(&path) {
            Ok(path)
        } else {
            Err(compile_error(format!(
                "no C compiler: {what} is not an executable file{hint}"
            )))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        // An empty entry would mean the current directory: never run a compiler from there.
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(&named))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| {
            let set = if cc.is_some() { "" } else { " (set CC to one)" };
            compile_error(format!(
                "no C compiler: {what} was not found on PATH{set}{hint}"
            ))
        })
}

fn executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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
/// (`-dumpmachine`).
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
    Ok(CompilerId::new(identity, target))
}

/// Compiles C `source` into a shared object (see [`FLAGS`]), in a private temporary
/// directory with `offload_host.h` next to the source.
pub(crate) fn compile(source: &Source) -> Result<Vec<u8>> {
    if source.language() != Language::C {
        return Err(Error::Unsupported {
            backend: BackendKind::Host,
            call: CALL,
            reason: format!("the host backend compiles C, not {}", source.language()),
        });
    }
    let cc = find()?;
    let dir = TempDir::new().map_err(|e| io_error("create a private temporary directory", &e))?;
    let header = dir.path().join(HEADER_NAME);
    let input = dir.path().join(SOURCE_NAME);
    let output = dir.path().join(OUTPUT_NAME);
    write_new(&header, crate::HEADER.as_bytes())
        .and_then(|()| write_new(&input, source.text().as_bytes()))
        .map_err(|e| io_error("write the source to a temporary directory", &e))?;
    let run = Command::new(&cc.program)
        .args(FLAGS)
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
        call: CALL,
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
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

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
