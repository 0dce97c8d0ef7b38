//! The Chrome time trace (`OFFLOAD_TRACE`, docs/trace.md): two rounds of the quickstart's
//! steps, run in a child process with the trace on, write a file that parses as Chrome trace JSON, named with
//! the child's pid, holding complete events for init, platform opens, loads, launches,
//! syncs and shutdown (with its drain), and a `thread_name` metadata event for every thread
//! in it (offload's compile pool by its job); a free of exported memory a peer process
//! mapped has a span for its wait on the peer, which says whether it ended in quarantine
//! (a stopped peer); a runtime
//! never shut down is traced by the exit hook; a file that cannot be written is a warning,
//! not a failure of the program.
#![cfg(feature = "fixtures")]

mod common;

use std::path::{Path, PathBuf};

use offload::{BackendKind, MemKind, Offload, Program, Source};
use offload_testing::child::{self, Child};
use serde_json::Value;

/// The quickstart's steps, twice: init, allocate, write, load, launch, read back, shut down;
/// the first round also compiles a program on the compile pool (a thread of offload's).
fn two_rounds() -> offload::Result<()> {
    for round in 0..2 {
        let rt = Offload::init()?;
        let dev = rt.devices()?.remove(0);
        if round == 0 {
            // Source no cache has seen, so that it compiles, on the pool's thread: the load
            // waits for the compile the pool started.
            let source = format!(
                "#include \"offload_host.h\"\n/* {} {:?} */\n\
                 OFFLOAD_KERNEL(nothing, \"\") {{ (void)launch; }}\n",
                std::process::id(),
                std::time::SystemTime::now()
            );
            let program = Program::from_source(Source::c(source));
            program.compile_in_background(&dev)?;
            std::thread::sleep(std::time::Duration::from_millis(200));
            program.load(&dev)?;
        }
        let buf = dev.alloc(1024, MemKind::Device)?;
        buf.write(0, &[0; 1024])?;
        let queue = dev.queue()?;
        // SAFETY: the buffer holds 256 u32s.
        unsafe { common::add_one(&queue, &buf, 256) }?;
        let mut back = [0u8; 1024];
        queue.read(&buf, 0, &mut back)?;
        assert_eq!(u32::from_ne_bytes(back[..4].try_into().unwrap()), 1);
        rt.shutdown()?;
    }
    Ok(())
}

/// A host runtime whose exported buffer a peer process (`ipc_peer`, untraced) maps, then
/// frees it: the free waits for the peer's unmap. A second one is freed while the peer is
/// stopped: that wait runs out (200 ms) and the memory is quarantined (I3).
fn ipc_free() {
    let rt = Offload::builder()
        .backends([BackendKind::Host])
        .ipc_unmap_timeout_ms(200)
        .start()
        .expect("start");
    let endpoint = rt.ipc_endpoint().expect("endpoint");
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = std::process::Command::new(exe);
    command
        .args(["--exact", "trace_child", "--nocapture"])
        .env("TRACE_CHILD", "ipc_peer")
        .env("OFFLOAD_BACKENDS", "host")
        .env_remove("OFFLOAD_TRACE")
        .env_remove("XDG_RUNTIME_DIR");
    let peer = Child::from_command(command);
    let name = peer.expect("NAME ")["NAME ".len()..].to_string();
    let to = endpoint.connect(&name).expect("connect");
    let dev = rt.device(BackendKind::Host).expect("host device");
    let buf = dev.alloc_exportable(4096, MemKind::Device).expect("alloc");
    endpoint.send(to, &buf, 0, 4096, 1).expect("send");
    peer.expect("GOT");
    buf.free().expect("free");
    let held = dev.alloc_exportable(4096, MemKind::Device).expect("alloc");
    endpoint.send(to, &held, 0, 4096, 1).expect("send");
    peer.expect("GOT");
    peer.stop();
    let quarantined = held.free().unwrap_err();
    assert!(
        matches!(quarantined, offload::Error::Quarantined { .. }),
        "{quarantined}"
    );
    peer.signal(libc::SIGCONT);
    let last = dev.alloc_exportable(64, MemKind::Device).expect("alloc");
    endpoint.send(to, &last, 0, 4, 2).expect("send the end");
    peer.expect("BYE");
    peer.finish();
    drop((endpoint, last));
    rt.shutdown().expect("shutdown");
}

/// The peer of `ipc_free`: maps what it receives (tag 1: says GOT; the mapping stays
/// cached), until tag 2.
fn ipc_peer() {
    let rt = Offload::init().expect("init");
    let endpoint = rt.ipc_endpoint().expect("endpoint");
    child::say(&format!("NAME {}", endpoint.name()));
    loop {
        let got = endpoint.recv().expect("recv");
        if got.tag() == 2 {
            break;
        }
        got.buffer().read(0, &mut [0u8; 4]).expect("read the view");
        drop(got);
        child::say("GOT");
    }
    drop(endpoint);
    rt.shutdown().expect("shutdown");
    child::say("BYE");
}

/// What a child does, by `TRACE_CHILD`: `two_rounds`, `ipc_free` (with its peer,
/// `ipc_peer`), or `no_shutdown` (init, a sync, and exit with the runtime still live).
/// Without it, nothing (a plain run of this binary).
#[test]
fn trace_child() {
    match std::env::var("TRACE_CHILD").as_deref() {
        Ok("two_rounds") => two_rounds().expect("two rounds"),
        Ok("ipc_free") => ipc_free(),
        Ok("ipc_peer") => ipc_peer(),
        Ok("no_shutdown") => {
            let rt = Offload::init().expect("init");
            rt.devices().expect("devices")[0]
                .queue()
                .expect("queue")
                .sync()
                .expect("sync");
            // Never shut down: the exit hook deinitialises it, and writes the trace.
            std::mem::forget(rt);
        }
        _ => {}
    }
}

/// A fresh, empty directory for one test's traces.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the trace directory");
    dir
}

/// Runs `trace_child` as `case` with `OFFLOAD_TRACE=<dir>/<case>-{pid}.json`; returns the
/// one file it wrote, whose name carries the child's pid, parsed, and that pid.
fn traced_child(case: &str) -> (Value, u64) {
    let dir = fresh_dir(case);
    let template = dir.join(format!("{case}-{{pid}}.json"));
    child::run_test(
        "trace_child",
        &[
            ("TRACE_CHILD", case),
            ("OFFLOAD_TRACE", template.to_str().expect("a UTF-8 path")),
        ],
    );
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read the trace directory")
        .map(|e| e.expect("an entry").path())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "one trace file, no temporary left: {files:?}"
    );
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let pid: u64 = name
        .strip_prefix(&format!("{case}-"))
        .and_then(|n| n.strip_suffix(".json"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{{pid}} is not a pid in {name}"));
    let text = std::fs::read_to_string(&files[0]).expect("read the trace");
    let json: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the trace is not JSON ({e}):\n{text}"));
    (json, pid)
}

/// The complete events of a Chrome trace, each checked for the fields Perfetto and
/// chrome://tracing need: (name, ts, dur) in microseconds.
fn complete_events(trace: &Value, pid: u64) -> Vec<(String, f64, f64)> {
    let events = trace["traceEvents"]
        .as_array()
        .expect("a traceEvents array");
    let mut out = Vec::new();
    for e in events {
        assert_eq!(e["pid"].as_u64(), Some(pid), "pid of {e}");
        assert!(e["tid"].is_u64(), "tid of {e}");
        let name = e["name"].as_str().unwrap_or_else(|| panic!("name of {e}"));
        match e["ph"].as_str() {
            Some("M") => continue,
            Some("X") => {}
            other => panic!("phase {other:?} of {e}"),
        }
        let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("ts of {e}"));
        let dur = e["dur"].as_f64().unwrap_or_else(|| panic!("dur of {e}"));
        assert!(ts >= 0.0 && dur >= 0.0, "{e}");
        assert!(
            e["cat"]
                .as_str()
                .is_some_and(|c| c.starts_with("offload::")),
            "{e}"
        );
        assert!(e["args"].is_object(), "{e}");
        out.push((name.to_owned(), ts, dur));
    }
    out
}

/// The `thread_name` metadata events, as (tid, name); each tid of a complete event has
/// one, and no tid has two.
fn thread_names(trace: &Value) -> Vec<(u64, String)> {
    let events = trace["traceEvents"]
        .as_array()
        .expect("a traceEvents array");
    let mut names: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            let name = e["args"]["name"].as_str().unwrap_or_else(|| panic!("{e}"));
            assert!(!name.is_empty(), "{e}");
            (e["tid"].as_u64().unwrap(), name.to_owned())
        })
        .collect();
    names.sort();
    let mut tids: Vec<u64> = names.iter().map(|(t, _)| *t).collect();
    tids.dedup();
    assert_eq!(tids.len(), names.len(), "a thread named twice: {names:?}");
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let tid = e["tid"].as_u64().unwrap();
        assert!(
            tids.contains(&tid),
            "thread {tid} has no thread_name: {e}; names: {names:?}"
        );
    }
    names
}

fn count(events: &[(String, f64, f64)], name: &str) -> usize {
    events.iter().filter(|(n, ..)| n == name).count()
}

#[test]
fn two_rounds_write_a_chrome_trace() {
    let (trace, pid) = traced_child("two_rounds");
    let events = complete_events(&trace, pid);
    let names: Vec<&str> = events.iter().map(|(n, ..)| n.as_str()).collect();
    // Two rounds, each written at its shutdown: the file holds both.
    assert_eq!(count(&events, "init"), 2, "{names:?}");
    assert_eq!(count(&events, "shutdown"), 2, "{names:?}");
    for span in ["platform_open", "launch", "sync"] {
        assert!(
            count(&events, span) >= 2,
            "no {span} in each round: {names:?}"
        );
    }
    assert!(
        count(&events, "load") + count(&events, "compile") >= 2,
        "{names:?}"
    );
    // The launches of round 1 lie between its init and its shutdown.
    let at = |name: &str| {
        events
            .iter()
            .find(|(n, ..)| n == name)
            .map(|&(_, ts, dur)| (ts, ts + dur))
            .unwrap()
    };
    let (init, launch, shutdown) = (at("init"), at("launch"), at("shutdown"));
    assert!(
        init.1 <= launch.0 && launch.1 <= shutdown.0,
        "{init:?} {launch:?} {shutdown:?}"
    );
    assert_eq!(trace["otherData"]["dropped_events"].as_u64(), Some(0));
    assert_eq!(trace["displayTimeUnit"].as_str(), Some("ns"));
    // The wait a user feels in each shutdown, the drain of its queues, has its own span
    // inside the shutdown's.
    assert_eq!(count(&events, "shutdown_drain"), 2, "{names:?}");
    let drain = at("shutdown_drain");
    assert!(
        shutdown.0 <= drain.0 && drain.1 <= shutdown.1,
        "{drain:?} {shutdown:?}"
    );
    // The child's test runs on a thread the test harness names after it: the trace shows
    // that name, not a number; offload's own threads are named by their job (the compile
    // ran on the compile pool).
    let names = thread_names(&trace);
    assert!(names.iter().any(|(_, n)| n == "trace_child"), "{names:?}");
    let pool = names
        .iter()
        .find(|(_, n)| n == "offload compile pool")
        .unwrap_or_else(|| panic!("no compile pool thread: {names:?}"));
    let compiled_there = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "compile" && e["tid"].as_u64() == Some(pool.0));
    assert!(compiled_there, "no compile on the pool's thread: {names:?}");
}

#[test]
fn a_free_that_waits_for_a_peer_has_a_span() {
    let (trace, pid) = traced_child("ipc_free");
    let events = complete_events(&trace, pid);
    let names: Vec<&str> = events.iter().map(|(n, ..)| n.as_str()).collect();
    assert_eq!(count(&events, "ipc_unmap_wait"), 2, "{names:?}");
    let waits: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "ipc_unmap_wait")
        .collect();
    for wait in &waits {
        assert!(wait["args"]["mappings"].as_u64() >= Some(1), "{wait}");
        assert_eq!(wait["cat"].as_str(), Some("offload::ipc"), "{wait}");
    }
    // The first free's peer answered in time: nothing was quarantined, and its span says
    // so. The second's was stopped: its span lasts the timeout and ends in quarantine.
    let (answered, stopped) = (waits[0], waits[1]);
    assert_eq!(
        answered["args"]["unanswered"].as_u64(),
        Some(0),
        "{answered}"
    );
    assert_eq!(
        answered["args"]["quarantined"].as_bool(),
        Some(false),
        "{answered}"
    );
    assert_eq!(stopped["args"]["unanswered"].as_u64(), Some(1), "{stopped}");
    assert_eq!(
        stopped["args"]["quarantined"].as_bool(),
        Some(true),
        "{stopped}"
    );
    assert!(stopped["dur"].as_f64() >= Some(200_000.0), "{stopped}");
    thread_names(&trace);
}

#[test]
fn a_runtime_never_shut_down_is_traced_at_exit() {
    let (trace, pid) = traced_child("no_shutdown");
    let events = complete_events(&trace, pid);
    for span in ["init", "sync", "shutdown"] {
        assert_eq!(count(&events, span), 1, "{span}: {events:?}");
    }
}

#[test]
fn a_trace_that_cannot_be_written_is_a_warning_not_a_failure() {
    let dir = fresh_dir("unwritable");
    let path = dir.join("no-such-directory").join("t.json");
    let out = child::run_test(
        "trace_child",
        &[
            ("TRACE_CHILD", "two_rounds"),
            ("OFFLOAD_TRACE", path.to_str().expect("a UTF-8 path")),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("offload: the trace could not be written to"),
        "{stderr}"
    );
    assert!(!path.exists());
}
