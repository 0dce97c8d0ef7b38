//! L9: a child forked from a process running offload gets `Error::Forked` from its first
//! call, at once — never a hang on a lock a thread of the parent held — and its handles'
//! drops and its exit run nothing of the parent's runtime. A child forked before offload
//! started may start it itself. Each child runs under a watchdog (`alarm`).

mod common;

use std::time::Duration;

use offload::{Error, MemKind, Offload};

/// Forks; the child runs `child` (its exit code: 0 when it held) then `exit`s (running
/// the exit hooks, offload's among them); the parent waits for it. The child is killed
/// by `SIGALRM` after 20 s, which fails the test.
fn in_child(child: impl FnOnce() -> bool) {
    // SAFETY: the child only runs `child` (offload calls that must not block) and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain libc calls in the child.
        unsafe { libc::alarm(20) };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // `exit`, not `_exit`: the exit hooks run, offload's too (it must do nothing).
        // SAFETY: leaves the child; nothing of the test harness runs after.
        unsafe { libc::exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status),
        "the forked child did not exit: signal {} (SIGALRM is the watchdog: a hang)",
        libc::WTERMSIG(status)
    );
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the forked child's checks failed"
    );
}

#[test]
fn a_forked_child_gets_forked_at_once_from_every_call() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.devices().unwrap().remove(0);
    let buf = dev.alloc(64, MemKind::Host).unwrap();
    buf.write(0, &[7; 64]).unwrap();
    let queue = dev.queue().unwrap();
    // Moved into the child's closure: dropped there in the child (which must do nothing),
    // with the closure in the parent.
    let extra = dev.alloc(64, MemKind::Host).unwrap();
    // A thread of the parent holds the buffer's lock at the fork: in the child that lock
    // stays held forever, so a call that took it would hang.
    let (held, release) = std::sync::mpsc::channel::<()>();
    let (holding, wait_held) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let buf = &buf;
        s.spawn(move || {
            buf.with_mapped(|_| {
                holding.send(()).unwrap();
                let _ = release.recv_timeout(Duration::from_secs(30));
            })
            .unwrap();
        });
        wait_held.recv().unwrap();
        in_child(|| {
            let mut out = [0u8; 8];
            let forked = |r: offload::Result<()>| matches!(r, Err(Error::Forked { .. }));
            let checks = [
                forked(buf.read(0, &mut out)),
                forked(buf.write(0, &out)),
                forked(queue.sync()),
                forked(dev.alloc(8, MemKind::Host).map(drop)),
                forked(Offload::init().map(drop)),
            ];
            let named = match buf.read(0, &mut out) {
                Err(e) => {
                    e.to_string().contains("Buffer::read") && e.to_string().contains("forked")
                }
                Ok(()) => false,
            };
            // Dropping an inherited handle runs nothing of the parent's runtime.
            drop(extra);
            checks.iter().all(|&c| c) && named
        });
        held.send(()).unwrap();
    });
    drop(queue);
    drop(buf);
    rt.shutdown().unwrap();
}

#[test]
fn a_child_forked_before_offload_started_may_start_it() {
    let _serial = common::serial();
    // This test binary's other test may have started offload already: then the child is
    // a forked one and says so; run this one first in a process of its own.
    if std::env::var("OFFLOAD_TEST_CHILD").as_deref() != Ok("fresh") {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_child_forked_before_offload_started_may_start_it",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env("OFFLOAD_TEST_CHILD", "fresh")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    in_child(|| {
        let Ok(rt) = Offload::init() else {
            return false;
        };
        let buf = rt.devices().unwrap()[0].alloc(8, MemKind::Host).unwrap();
        let worked = buf.write(0, &[1; 8]).is_ok();
        drop(buf);
        worked && rt.shutdown().is_ok()
    });
}
