//! I4 with two copies of offload in one process: `liboffload_embed.so` is copied to two
//! files and both are `dlopen`ed with `RTLD_LOCAL`, so each has its own offload (its own
//! statics, runtime, process token and progress thread). Each makes an IPC endpoint; the
//! names differ, a delivery from one to the other reaches its addressee and only it, and
//! the stale-socket cleanup a new endpoint runs never removes the other copy's socket.
//!
//! Like `dlopen.rs`, this file links neither `offload_embed` nor `offload`: every call goes
//! through `dlsym`. Every blocking step is bounded (the fixture's receive and answer
//! timeouts), and a watchdog aborts the process should anything hang regardless.

mod common;

use common::lib_path;
use std::ffi::{CStr, CString, c_char};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

/// The fixture's statuses (tests/embed/src/lib.rs).
const OK: i32 = 0;
const ERR_NOTHING_ARRIVED: i32 = -8;
/// How long a receive that expects a delivery waits, and one that expects none.
const ARRIVES_MS: u32 = 10_000;
const NOTHING_MS: u32 = 300;
/// The whole test must be done by then, or the watchdog aborts the process.
const WATCHDOG: Duration = Duration::from_secs(120);

/// The lines of /proc/self/maps that map `path`.
fn mappings(path: &Path) -> Vec<String> {
    common::mappings_where(|mapped| mapped == path)
}

/// The exports of one loaded copy. Valid only while its [`Library`] is loaded.
struct Api {
    init: extern "C" fn() -> i32,
    shutdown: extern "C" fn() -> i32,
    generation: extern "C" fn() -> u64,
    counter: extern "C" fn() -> u64,
    endpoint: unsafe extern "C" fn(*mut u8, usize) -> i32,
    send: unsafe extern "C" fn(*const c_char, u8, u64) -> i32,
    recv: unsafe extern "C" fn(u32, *mut u8, *mut u64) -> i32,
    close_endpoint: extern "C" fn() -> i32,
}

/// One copy of the library: its file, the loaded library and its exports.
struct Copy {
    label: &'static str,
    path: PathBuf,
    lib: Library,
    api: Api,
}

impl Copy {
    /// Copies the library to `path` (a file of its own, so `dlopen` cannot take it for the
    /// other copy) and loads it `RTLD_NOW | RTLD_LOCAL`.
    fn load(label: &'static str, from: &Path, path: PathBuf) -> Copy {
        std::fs::copy(from, &path).expect("copy the library");
        // SAFETY: the library is our own fixture; its initialisers are Rust statics (const)
        // and std's, which are sound to run on dlopen.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) }
            .unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
        // SAFETY: the symbols are the fixture's `extern "C"` exports with exactly these
        // signatures (see tests/embed/src/lib.rs). The function pointers are copied out and
        // used only while `lib` is loaded (`close` takes them with it).
        let api = unsafe {
            Api {
                init: *lib.get(b"offload_embed_init\0").expect("init"),
                shutdown: *lib.get(b"offload_embed_shutdown\0").expect("shutdown"),
                generation: *lib.get(b"offload_embed_generation\0").expect("generation"),
                counter: *lib.get(b"offload_embed_counter\0").expect("counter"),
                endpoint: *lib.get(b"offload_embed_endpoint\0").expect("endpoint"),
                send: *lib.get(b"offload_embed_send\0").expect("send"),
                recv: *lib.get(b"offload_embed_recv\0").expect("recv"),
                close_endpoint: *lib
                    .get(b"offload_embed_close_endpoint\0")
                    .expect("close_endpoint"),
            }
        };
        Copy {
            label,
            path,
            lib,
            api,
        }
    }

    /// Makes this copy's endpoint; gives its name.
    fn make_endpoint(&self) -> CString {
        let mut name = vec![0u8; 4096];
        // SAFETY: `name` has `name.len()` writable bytes.
        let status = unsafe { (self.api.endpoint)(name.as_mut_ptr(), name.len()) };
        assert_eq!(status, OK, "copy {}: offload_embed_endpoint", self.label);
        CStr::from_bytes_until_nul(&name)
            .expect("the name is NUL-terminated")
            .to_owned()
    }

    /// Sends 64 bytes of `value` with `tag` to the endpoint `to`; waits (bounded) until it
    /// answered.
    fn send(&self, to: &CStr, value: u8, tag: u64) -> i32 {
        // SAFETY: `to` is a NUL-terminated string that outlives the call.
        unsafe { (self.api.send)(to.as_ptr(), value, tag) }
    }

    /// One delivery (its first byte and tag), or the status.
    fn recv(&self, timeout_ms: u32) -> Result<(u8, u64), i32> {
        let (mut value, mut tag) = (0u8, 0u64);
        // SAFETY: both point to live locals of the right types.
        match unsafe { (self.api.recv)(timeout_ms, &mut value, &mut tag) } {
            OK => Ok((value, tag)),
            status => Err(status),
        }
    }

    /// `dlclose`s the copy (its exports go with it); gives its file's path.
    fn close(self) -> PathBuf {
        let Copy { path, lib, .. } = self;
        lib.close().expect("dlclose");
        path
    }
}

fn as_path(name: &CStr) -> &Path {
    Path::new(name.to_str().expect("endpoint names are UTF-8"))
}

/// `<pid>-<token>-<n>` of an endpoint name `<dir>/<pid>-<token>-<n>.sock`.
fn parts(name: &CStr) -> Vec<String> {
    let file = as_path(name).file_name().unwrap().to_str().unwrap();
    let stem = file
        .strip_suffix(".sock")
        .unwrap_or_else(|| panic!("{file}"));
    stem.split('-').map(str::to_owned).collect()
}

/// `from` sends `value`/`tag` to `to` (whose endpoint is `to_name`) while `to` receives in
/// another thread: the delivery reaches `to`, exactly once and unchanged, and nothing
/// reaches `from`.
fn deliver(from: &Copy, to: &Copy, to_name: &CStr, value: u8, tag: u64) {
    let (a, b) = (from.label, to.label);
    let (sent, got) = std::thread::scope(|s| {
        let receiver = s.spawn(|| to.recv(ARRIVES_MS));
        let sent = from.send(to_name, value, tag);
        (
            sent,
            receiver.join().expect("the receiving thread panicked"),
        )
    });
    assert_eq!(sent, OK, "{a}→{b}: offload_embed_send");
    assert_eq!(
        got,
        Ok((value, tag)),
        "{a}→{b}: what {b} received (value, tag)"
    );
    assert_eq!(
        to.recv(NOTHING_MS),
        Err(ERR_NOTHING_ARRIVED),
        "{a}→{b}: {b} received a second delivery"
    );
    assert_eq!(
        from.recv(NOTHING_MS),
        Err(ERR_NOTHING_ARRIVED),
        "{a}→{b}: a delivery addressed to {b} reached the sender {a}"
    );
}

/// Aborts the process unless the returned sender is dropped within [`WATCHDOG`] (a test
/// that panics drops it too): a hang fails instead of stalling the run.
fn watchdog(what: &'static str) -> mpsc::Sender<()> {
    let (done, watch) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(WATCHDOG) {
            eprintln!("{what}: not done after {WATCHDOG:?}; aborting");
            std::process::abort();
        }
    });
    done
}

/// Two copies of the library, in a directory of this process's own, each loaded
/// `RTLD_LOCAL` and initialised; checks that they are two copies indeed (statics and
/// offload lifecycle of their own). Gives the directory too.
fn load_two(test: &str) -> (PathBuf, Copy, Copy) {
    let original = lib_path();
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("embed-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the copies' directory");
    let a = Copy::load("A", &original, dir.join("liboffload_embed_a.so"));
    let b = Copy::load("B", &original, dir.join("liboffload_embed_b.so"));
    assert_eq!((a.api.counter)(), 1);
    assert_eq!((a.api.counter)(), 2);
    assert_eq!(
        (b.api.counter)(),
        1,
        "B shares A's statics: one copy loaded"
    );
    assert_eq!((a.api.init)(), OK, "A: offload_embed_init");
    assert_eq!((b.api.init)(), OK, "B: offload_embed_init");
    assert_eq!(
        (a.api.generation)(),
        1,
        "A: first generation of its offload"
    );
    assert_eq!(
        (b.api.generation)(),
        1,
        "B: first generation of its offload"
    );
    (dir, a, b)
}

/// I4, two copies of offload in one process (`dlopen` of two copies of a library embedding
/// it, `RTLD_LOCAL`): their endpoints' names differ (in the per-copy token); A→B and B→A
/// each reach their addressee and only it; a new endpoint of A removes the socket file of a
/// process that is gone but never B's (whose pid is alive: this one), and A→B and B→A still
/// work after; each copy's shutdown removes its socket and only its own. (Whether the
/// copies then unload is [`two_copies_with_endpoints_unload_at_dlclose`]'s question.)
#[test]
fn two_copies_have_distinct_endpoints_and_deliver_to_their_addressee() {
    let done = watchdog("two_copies_have_distinct_endpoints_and_deliver_to_their_addressee");
    let (dir, a, b) = load_two("two-copies");

    // Distinct names: same directory and pid, each copy's own token.
    let a_name = a.make_endpoint();
    let b_name = b.make_endpoint();
    assert_ne!(a_name, b_name, "the two copies' endpoints share a name");
    let (pa, pb) = (parts(&a_name), parts(&b_name));
    assert_eq!(pa.len(), 3, "{a_name:?}");
    assert_eq!(pb.len(), 3, "{b_name:?}");
    let pid = std::process::id().to_string();
    assert_eq!(
        (pa[0].as_str(), pb[0].as_str()),
        (pid.as_str(), pid.as_str())
    );
    assert_ne!(pa[1], pb[1], "the two copies drew one token");
    let socket_dir = as_path(&a_name).parent().unwrap().to_path_buf();
    assert_eq!(as_path(&b_name).parent(), Some(socket_dir.as_path()));
    assert!(as_path(&a_name).exists(), "A's socket file is missing");
    assert!(as_path(&b_name).exists(), "B's socket file is missing");

    // Each delivery reaches its addressee, and only it.
    deliver(&a, &b, &b_name, 0xA1, 1);
    deliver(&b, &a, &a_name, 0xB2, 2);

    // Stale-socket cleanup: a real socket file left by a process that is gone (a child that
    // exited and was reaped), then a new endpoint of A.
    let mut child = Command::new("true").spawn().expect("spawn `true`");
    let dead = child.id();
    child.wait().expect("reap `true`");
    let stale = socket_dir.join(format!("{dead}-deadbeef-1.sock"));
    drop(UnixListener::bind(&stale).expect("bind the stale socket"));
    assert!(stale.exists(), "the stale socket file was not left behind");
    assert_eq!(
        (a.api.close_endpoint)(),
        OK,
        "A: offload_embed_close_endpoint"
    );
    assert!(
        !as_path(&a_name).exists(),
        "A's closed endpoint left its socket"
    );
    let a_name2 = a.make_endpoint();
    assert_ne!(a_name2, a_name, "A's new endpoint took its old name");
    assert_eq!(parts(&a_name2)[1], pa[1], "A's token changed");
    let reused = Path::new(&format!("/proc/{dead}")).exists();
    assert!(
        !stale.exists() || reused,
        "the socket file of process {dead}, which is gone, was not removed"
    );
    if reused {
        eprintln!("pid {dead} was reused: the stale file's removal is not checked");
        let _ = std::fs::remove_file(&stale);
    }
    assert!(
        as_path(&b_name).exists(),
        "A's new endpoint removed B's socket file (B's pid is alive)"
    );
    deliver(&a, &b, &b_name, 0xA3, 3);
    deliver(&b, &a, &a_name2, 0xB4, 4);

    // Each shutdown closes its own copy's endpoint, and only it.
    assert_eq!((a.api.shutdown)(), OK, "A: offload_embed_shutdown");
    assert!(
        !as_path(&a_name2).exists(),
        "A's socket outlived its shutdown"
    );
    assert!(as_path(&b_name).exists(), "A's shutdown removed B's socket");
    assert_eq!(
        b.recv(NOTHING_MS),
        Err(ERR_NOTHING_ARRIVED),
        "B: a delivery after A's shutdown"
    );
    assert_eq!((b.api.shutdown)(), OK, "B: offload_embed_shutdown");
    assert!(
        !as_path(&b_name).exists(),
        "B's socket outlived its shutdown"
    );
    a.close();
    b.close();
    let _ = std::fs::remove_dir_all(&dir);
    drop(done);
}

const CHILD_ENV: &str = "OFFLOAD_EMBED_TWO_COPIES_CHILD";

/// L2 with IPC: two copies that made endpoints and exchanged deliveries, all on one
/// application thread, are shut down and `dlclose`d there: both unload at once (nothing
/// offload did pins them: no thread-local destructor left on that thread), and the thread
/// then exits cleanly (no destructor of the unloaded code left to run). In a child, which
/// a crash at that exit kills.
///
/// (It caught offload's IPC progress thread when that was a `std::thread`: std's spawn hooks
/// left a thread-local destructor on the thread that made the first endpoint, pinning the
/// library, and `std::thread::current()` in the shutdown left a pthread-key destructor in
/// the unloaded code. Helper threads are plain pthreads now: `offload-thread`.)
#[test]
fn two_copies_with_endpoints_unload_at_dlclose() {
    let stderr = common::run_child("child_unload", CHILD_ENV, "unload");
    assert!(
        stderr.contains("child: unmapped") && stderr.contains("child: thread exited"),
        "child `child_unload` lacks its markers:\n{stderr}"
    );
}

/// Child of [`two_copies_with_endpoints_unload_at_dlclose`]; does nothing in a normal run.
#[test]
fn child_unload() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("unload") {
        return;
    }
    let done = watchdog("child_unload");
    // The application thread: everything happens on it, then it exits.
    std::thread::spawn(|| {
        let (dir, a, b) = load_two("unload");
        let a_name = a.make_endpoint();
        let b_name = b.make_endpoint();
        deliver(&a, &b, &b_name, 0xA1, 1);
        deliver(&b, &a, &a_name, 0xB2, 2);
        assert_eq!((a.api.shutdown)(), OK, "A: offload_embed_shutdown");
        assert_eq!((b.api.shutdown)(), OK, "B: offload_embed_shutdown");
        for path in [a.close(), b.close()] {
            let left = mappings(&path);
            assert!(
                left.is_empty(),
                "{} still mapped after dlclose (something pins it):\n{}",
                path.display(),
                left.join("\n")
            );
        }
        eprintln!("child: unmapped");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .join()
    .expect("the application thread failed");
    eprintln!("child: thread exited");
    drop(done);
}
