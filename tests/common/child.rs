//! A child process running one test of this test binary, spoken to line by line: the
//! parent writes to its stdin and reads what it prints, with a deadline on every read so
//! a child that hangs fails the test instead of hanging it.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a child may take to print an expected line.
const DEADLINE: Duration = Duration::from_secs(60);

pub struct Child {
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    reader: Option<JoinHandle<()>>,
    pub pid: u32,
}

impl Child {
    /// Runs test `test` of this binary with `vars` set.
    pub fn spawn(test: &str, vars: &[(&str, &str)]) -> Child {
        let exe = std::env::current_exe().unwrap();
        let mut command = Command::new(exe);
        command
            // Not `--test-threads=1`: the harness would print `test NAME ... ` before
            // the first line of output instead of after the test.
            .args(["--exact", test, "--nocapture"])
            .env_remove("XDG_RUNTIME_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in vars {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
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
    /// deadline or when the child's output ends.
    pub fn expect(&self, prefix: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
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
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends the child a signal (`SIGSTOP`, `SIGCONT`, `SIGKILL`).
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Waits for the child to exit and checks it succeeded.
    pub fn finish(mut self) {
        self.stdin.take();
        let status = self.child.wait().unwrap();
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
pub fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}
