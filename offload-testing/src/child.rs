//! Child processes of a test, the one runner every test crate of the workspace uses: run a
//! test of this test binary (or any program) in a child with its own environment, under a
//! watchdog, so a hang is a failure with the output so far, never a hung test; or talk to
//! a child line by line ([`Child`]), with a deadline on every line.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a child runs, or takes to print an expected line, unless told otherwise.
pub const WATCHDOG: Duration = Duration::from_secs(120);

/// The command that runs test `test` of this test binary alone in a child, with its output
/// shown (`--nocapture`) and panics without backtraces.
///
/// ```no_run
/// let out = offload_testing::child::run(offload_testing::child::test_command("a_test"));
/// assert!(out.status.success());
/// ```
pub fn test_command(test: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("RUST_BACKTRACE", "0");
    command
}

/// Runs `command` to its end under the [`WATCHDOG`].
///
/// ```
/// let out = offload_testing::child::run(std::process::Command::new("true"));
/// assert!(out.status.success());
/// ```
pub fn run(command: Command) -> Output {
    run_within(command, WATCHDOG)
}

/// Runs `command` to its end, killing it after `limit`: a hang panics with the output so
/// far.
///
/// ```
/// use std::{process::Command, time::Duration};
/// let mut sleep = Command::new("sleep");
/// sleep.arg("10");
/// let hung = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
///     offload_testing::child::run_within(sleep, Duration::from_millis(50))
/// }));
/// assert!(hung.is_err(), "a child past its watchdog is a failure");
/// ```
pub fn run_within(mut command: Command, limit: Duration) -> Output {
    let what = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    // Drain both pipes while waiting: a child that fills one would otherwise block forever.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        match child.try_wait().expect("wait for the child") {
            Some(status) => break Some(status),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "{what} ran past its {limit:?} watchdog and was killed\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ),
    }
}

/// Runs test `test` of this binary in a child with `vars` set, under the watchdog; checks
/// that it passed and really ran (a filter that matches nothing passes too), and returns
/// its output.
///
/// ```no_run
/// // In a test binary whose `child_case` test does the work when `CASE` is set:
/// let out = offload_testing::child::run_test("child_case", &[("CASE", "1")]);
/// assert!(String::from_utf8_lossy(&out.stdout).contains("RESULT"));
/// ```
pub fn run_test(test: &str, vars: &[(&str, &str)]) -> Output {
    let mut command = test_command(test);
    command.envs(vars.iter().copied());
    let out = run(command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child `{test}` failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "child `{test}` ran no test:\n{stdout}"
    );
    out
}

/// A child process running one test of this test binary, spoken to line by line: the
/// parent writes to its stdin and reads what it prints, each read within the
/// [`WATCHDOG`]. Dropping it kills the child.
///
/// ```no_run
/// use offload_testing::child::Child;
/// let mut child = Child::spawn("a_test", &[("ROLE", "child")]);
/// let ready = child.expect("READY");
/// child.say("GO");
/// child.finish();
/// # let _ = ready;
/// ```
pub struct Child {
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    reader: Option<JoinHandle<()>>,
    /// The child's process id.
    pub pid: u32,
}

impl Child {
    /// Runs test `test` of this binary with `vars` set.
    pub fn spawn(test: &str, vars: &[(&str, &str)]) -> Child {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            // Not `--test-threads=1`: the harness would print `test NAME ... ` before
            // the first line of output instead of after the test.
            .args(["--exact", test, "--nocapture"])
            .env_remove("XDG_RUNTIME_DIR");
        command.envs(vars.iter().copied());
        Child::from_command(command)
    }

    /// Runs `command` (a test of this binary under a wrapper such as `setpriv`, say), its
    /// stdin and stdout piped to this `Child`.
    pub fn from_command(mut command: Command) -> Child {
        let what = format!("{command:?}");
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let pid = child.id();
        Child {
            child,
            stdin,
            lines,
            reader: Some(reader),
            pid,
        }
    }

    /// The next line starting with `prefix` (other output is skipped); panics after the
    /// watchdog or when the child's output ends.
    pub fn expect(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("child {} printed no {prefix} line ({e})", self.pid),
            }
        }
    }

    /// Writes a line to the child's stdin.
    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the child's stdin");
        writeln!(stdin, "{line}").expect("write to the child");
        stdin.flush().expect("flush to the child");
    }

    /// Sends the child a signal (e.g. `libc::SIGSTOP`, `SIGCONT`, `SIGKILL`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with our own child's pid, which we have not waited for (so it
        // cannot have been reused), and a signal number; no memory is involved.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.pid);
    }

    /// Stops the child (`SIGSTOP`) and waits, up to the [`WATCHDOG`], until every thread of
    /// it has stopped: `kill` only asks, and a thread that runs on meanwhile (its progress
    /// thread answering a message, say) makes a test that relies on the stop flaky.
    ///
    /// ```no_run
    /// # let child: offload_testing::child::Child = unimplemented!();
    /// child.stop();
    /// ```
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let deadline = Instant::now() + WATCHDOG;
        let stopped = || {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
                return false;
            };
            tasks.flatten().all(|task| {
                std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                    // The state follows the command name, which ends at the last ')'.
                    stat.rfind(')')
                        .and_then(|at| stat[at + 1..].split_whitespace().next())
                        == Some("T")
                })
            })
        };
        while !stopped() {
            assert!(
                Instant::now() < deadline,
                "child {} never stopped",
                self.pid
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Kills the child (`SIGKILL`) and waits until it is gone.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill the child");
        self.child.wait().expect("wait for the killed child");
    }

    /// Waits for the child to exit and checks it succeeded.
    pub fn finish(mut self) {
        self.stdin.take();
        let status = self.child.wait().expect("wait for the child");
        assert!(status.success(), "child {} exited with {status}", self.pid);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader ends at the pipe's end: its descriptor is closed after this.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Prints a line and flushes (a child's answer to its parent).
///
/// ```
/// offload_testing::child::say("READY");
/// ```
pub fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}
