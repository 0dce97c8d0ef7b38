//! IPC between two processes, on the host backend and (with `--features vulkan`) on
//! Vulkan, in one run. The bench starts child processes of itself as peers.
//!
//! * `ipc_pingpong_<backend>`: a cached send of 64 bytes of a buffer → the peer receives the
//!   view and drops it → the sender sees the answer (`wait_answered`), **paired** with the
//!   floor: a raw `SOCK_SEQPACKET` message of the same size to another child that answers
//!   with 16 bytes, and nothing else, waiting in a blocking `recv` on both ends.
//!   **Goal: cached ping-pong ≤ 1.15 × the raw floor.**
//! * `ipc_pingpong_vs_polling_<backend>`: the same cached ping-pong paired with a raw
//!   ping-pong whose two ends poll (`MSG_DONTWAIT` in a loop) for up to 50 µs before they
//!   block, as offload's progress does: the floor without wake-ups.
//! * `ipc_uncached_pingpong_<backend>`: the same with `OFFLOAD_IPC_CACHE_SIZE=0` (export,
//!   descriptor passing, import and unmap every time), paired with the floor again.
//! * `ipc stream`: 10,000 sends of 64-byte ranges of one buffer without waiting, then
//!   `wait_answered`, cached and uncached; printed with the exports and imports per send.
//! * `alloc_exportable_<size>_<backend>`: what making memory exportable costs, paired with
//!   `alloc`: allocate + free, 4 KiB and 1 MiB.
//! * `ipc free`: 100 frees of buffers a peer has mapped (cached), the peer idle (blocked in
//!   `read(stdin)`), asleep (`sleep` in a loop) or spinning in plain Rust — never calling
//!   offload: its progress thread answers — or polling (`endpoint.poll()` in a loop):
//!   median and p99 of one free, unmap round trip included. Goal: p99 ≤ 50 ms.
//!
//! Run with `cargo bench --bench ipc` (add `--features vulkan` for Vulkan).
//! `OFFLOAD_BENCH_IPC_FREE=idle,sleeping,spinning,polling` runs only the frees, with those peers (to compare
//! builds: a build without a progress thread waits out the unmap timeout with an idle
//! peer, so leave `idle` out there).

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::Criterion;
use offload::ipc::{IpcEndpoint, PeerId};
use offload::{BackendKind, Buffer, MemKind, Offload};
use offload_bench::{Paired, paired};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrUnix, SocketFlags, SocketType};

const ROLE: &str = "OFFLOAD_BENCH_IPC_ROLE";
const MESSAGE: usize = 56; // a `Use` message
const ANSWER: usize = 16; // a `Done` message
const STREAM: usize = 10_000;
/// Buffers freed per peer in the `ipc free` scenario.
const FREES: usize = 100;

fn line(out: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{out}");
    let _ = stdout.flush();
}

/// The child processes: a raw echo, or an offload peer that drops what it receives.
fn child(role: &str) {
    match role {
        "raw" | "raw-polling" => {
            let polling = role == "raw-polling";
            let path =
                std::env::temp_dir().join(format!("offload-bench-raw-{}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let listener = rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::SEQPACKET,
                SocketFlags::CLOEXEC,
                None,
            )
            .unwrap();
            rustix::net::bind(&listener, &SocketAddrUnix::new(&path).unwrap()).unwrap();
            rustix::net::listen(&listener, 1).unwrap();
            line(&format!("NAME {}", path.display()));
            let socket = rustix::net::accept(&listener).unwrap();
            let _ = std::fs::remove_file(&path);
            let mut buf = [0u8; MESSAGE];
            let answer = [0u8; ANSWER];
            loop {
                match recv_polling(&socket, &mut buf, polling) {
                    Some(0) | None => return,
                    Some(_) => {
                        let _ = rustix::net::send(&socket, &answer, SendFlags::NOSIGNAL);
                    }
                }
            }
        }
        "idle" | "sleeping" | "spinning" | "polling" => {
            // Takes FREES views and drops them (the mappings stay cached), says HELD, then
            // waits for a line on stdin: blocked in `read`, or calling `poll` meanwhile.
            let rt = Offload::init().unwrap();
            let endpoint = rt.ipc_endpoint().unwrap();
            line(&format!("NAME {}", endpoint.name()));
            for _ in 0..FREES {
                drop(endpoint.recv().unwrap());
            }
            line("HELD");
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = done.clone();
            let reader = std::thread::spawn(move || {
                let _ = std::io::stdin().read_line(&mut String::new());
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            while role != "idle" && !done.load(std::sync::atomic::Ordering::SeqCst) {
                match role {
                    "polling" => endpoint.poll().unwrap(),
                    "sleeping" => std::thread::sleep(Duration::from_millis(20)),
                    _ => std::hint::spin_loop(),
                }
            }
            reader.join().unwrap();
            drop(endpoint);
            let _ = rt.shutdown();
        }
        _ => {
            let rt = Offload::init().unwrap();
            let endpoint = rt.ipc_endpoint().unwrap();
            line(&format!("NAME {}", endpoint.name()));
            loop {
                match endpoint.recv_timeout(Duration::from_secs(30)) {
                    Ok(Some(got)) if got.tag() == u64::MAX => {
                        line(&format!("IMPORTS {}", offload::ipc::stats().imports));
                    }
                    Ok(Some(got)) => drop(got),
                    _ => return,
                }
            }
        }
    }
}

struct Peer {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    name: String,
}

impl Peer {
    fn spawn(role: &str, kind: BackendKind) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("--bench")
            .env(ROLE, role)
            .env("OFFLOAD_BACKENDS", kind.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut peer = Peer {
            child,
            lines,
            name: String::new(),
        };
        peer.name = peer
            .expect("NAME")
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string();
        peer
    }

    fn expect(&mut self, prefix: &str) -> String {
        loop {
            let l = self.lines.next().expect("the child ended").unwrap();
            if l.starts_with(prefix) {
                return l;
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn raw_connect(name: &str) -> OwnedFd {
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    rustix::net::connect(&socket, &SocketAddrUnix::new(name).unwrap()).unwrap();
    socket
}

/// Receives one packet: blocking, or (`polling`) trying without blocking for up to 50 µs
/// first. `None` on an error.
fn recv_polling(socket: &OwnedFd, buf: &mut [u8], polling: bool) -> Option<usize> {
    if polling {
        let until = Instant::now() + Duration::from_micros(50);
        while Instant::now() < until {
            match rustix::net::recv(socket, &mut *buf, RecvFlags::DONTWAIT) {
                Ok((n, _)) => return Some(n),
                Err(rustix::io::Errno::AGAIN) => std::hint::spin_loop(),
                Err(_) => return None,
            }
        }
    }
    rustix::net::recv(socket, buf, RecvFlags::empty())
        .ok()
        .map(|(n, _)| n)
}

fn raw_pingpong(socket: &OwnedFd, polling: bool) {
    let message = [7u8; MESSAGE];
    let mut answer = [0u8; ANSWER];
    rustix::net::send(socket, &message, SendFlags::NOSIGNAL).unwrap();
    assert_eq!(recv_polling(socket, &mut answer, polling), Some(ANSWER));
}

fn pingpong(endpoint: &IpcEndpoint, to: PeerId, buf: &Buffer) {
    endpoint.send(to, buf, 0, 64, 1).unwrap();
    endpoint.wait_answered(to, Duration::from_secs(10)).unwrap();
}

/// Times `STREAM` sends without waiting, then waits for every answer. Gives the time and
/// the exports made, and the imports the peer made.
fn stream(
    endpoint: &IpcEndpoint,
    to: PeerId,
    buf: &Buffer,
    peer: &mut Peer,
) -> (Duration, usize, usize) {
    let exports = offload::ipc::stats().exports;
    endpoint.send(to, buf, 0, 4, u64::MAX).unwrap();
    let imports: usize = peer
        .expect("IMPORTS")
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let start = Instant::now();
    for i in 0..STREAM {
        endpoint.send(to, buf, (i % 64) * 64, 64, i as u64).unwrap();
    }
    endpoint
        .wait_answered(to, Duration::from_secs(120))
        .unwrap();
    let took = start.elapsed();
    endpoint.send(to, buf, 0, 4, u64::MAX).unwrap();
    let after: usize = peer
        .expect("IMPORTS")
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    // Take away the two STATS probes' own sends.
    let exports = offload::ipc::stats().exports - exports;
    // The two probes' own sends: their exports (uncached: one each) and one import.
    let probes = if exports >= STREAM { 2 } else { 0 };
    (took, exports - probes, after.saturating_sub(imports + 1))
}

/// A runtime of `kind` alone with an IPC cache of `cache` entries, and its device; `None`
/// where this machine has no such device.
fn start(kind: BackendKind, cache: usize) -> Option<(Offload, offload::Device)> {
    let rt = Offload::builder()
        .backends([kind])
        .ipc_cache_size(cache)
        .start()
        .ok()?;
    let dev = rt
        .devices()
        .ok()?
        .into_iter()
        .find(|d| d.backend() == kind)?;
    Some((rt, dev))
}

/// One backend's ping-pongs and stream, with cache `cache`.
fn run(
    c: &mut Criterion,
    kind: BackendKind,
    cache: usize,
    reports: &mut Vec<String>,
) -> Option<Vec<Paired>> {
    let (rt, dev) = start(kind, cache)?;
    let endpoint = rt.ipc_endpoint().unwrap();
    let mut peer = Peer::spawn("peer", kind);
    let to = endpoint.connect(&peer.name).unwrap();
    let mut echo = Peer::spawn("raw", kind);
    let raw = raw_connect(&echo.name);
    let buf = dev.alloc_exportable(4096, MemKind::Device).unwrap();
    pingpong(&endpoint, to, &buf);
    raw_pingpong(&raw, false);
    let name = if cache == 0 {
        format!("ipc_uncached_pingpong_{kind}")
    } else {
        format!("ipc_pingpong_{kind}")
    };
    let mut out = vec![paired(
        c,
        &name,
        ("offload", "raw_seqpacket"),
        30,
        || pingpong(&endpoint, to, &buf),
        || raw_pingpong(&raw, false),
    )];
    drop(raw);
    let _ = echo.child.wait();
    if cache > 0 {
        let mut polling_echo = Peer::spawn("raw-polling", kind);
        let polling = raw_connect(&polling_echo.name);
        raw_pingpong(&polling, true);
        out.push(paired(
            c,
            &format!("ipc_pingpong_vs_polling_{kind}"),
            ("offload", "raw_seqpacket_polling"),
            30,
            || pingpong(&endpoint, to, &buf),
            || raw_pingpong(&polling, true),
        ));
        drop(polling);
        let _ = polling_echo.child.wait();
    }
    let (took, exports, imports) = stream(&endpoint, to, &buf, &mut peer);
    reports.push(format!(
        "ipc stream {kind} cache {cache}: {STREAM} sends in {:.2} ms ({:.2} µs/send); {exports} \
         exports and {imports} imports ({:.4} and {:.4} per send)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / STREAM as f64,
        exports as f64 / STREAM as f64,
        imports as f64 / STREAM as f64
    ));
    drop((endpoint, buf));
    rt.shutdown().unwrap();
    Some(out)
}

/// `FREES` frees of buffers a `role` peer ("idle" or "polling") has mapped: a line with the
/// median and p99 of one free.
fn frees(kind: BackendKind, role: &str) -> Option<String> {
    let (rt, dev) = start(kind, FREES)?;
    let endpoint = rt.ipc_endpoint().unwrap();
    let mut peer = Peer::spawn(role, kind);
    let to = endpoint.connect(&peer.name).unwrap();
    let buffers: Vec<Buffer> = (0..FREES)
        .map(|i| {
            let b = dev.alloc_exportable(4096, MemKind::Device).unwrap();
            endpoint.send(to, &b, 0, 64, i as u64).unwrap();
            b
        })
        .collect();
    peer.expect("HELD");
    endpoint.wait_answered(to, Duration::from_secs(30)).unwrap();
    let mut times: Vec<Duration> = buffers
        .into_iter()
        .map(|b| {
            let start = Instant::now();
            b.free().unwrap();
            start.elapsed()
        })
        .collect();
    times.sort();
    let stdin = peer.child.stdin.as_mut().unwrap();
    let _ = writeln!(stdin, "done");
    let _ = peer.child.wait();
    drop(endpoint);
    rt.shutdown().unwrap();
    Some(format!(
        "ipc free {kind}, {role} peer: {FREES} frees, median {:.1} µs, p99 {:.1} µs",
        times[FREES / 2].as_secs_f64() * 1e6,
        times[FREES * 99 / 100 - 1].as_secs_f64() * 1e6,
    ))
}

fn alloc_cost(c: &mut Criterion, kind: BackendKind) -> Vec<Paired> {
    let Ok(rt) = Offload::builder().backends([kind]).start() else {
        return Vec::new();
    };
    let dev = rt
        .devices()
        .unwrap()
        .into_iter()
        .find(|d| d.backend() == kind)
        .unwrap();
    let mut out = Vec::new();
    for (size, label) in [(4096usize, "4KiB"), (1 << 20, "1MiB")] {
        out.push(paired(
            c,
            &format!("alloc_exportable_{label}_{kind}"),
            ("alloc_exportable", "alloc"),
            30,
            || {
                black_box(dev.alloc_exportable(size, MemKind::Device).unwrap())
                    .free()
                    .unwrap()
            },
            || {
                black_box(dev.alloc(size, MemKind::Device).unwrap())
                    .free()
                    .unwrap()
            },
        ));
    }
    drop(dev);
    rt.shutdown().unwrap();
    out
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        return child(&role);
    }
    let mut kinds = vec![BackendKind::Host];
    if cfg!(feature = "vulkan") {
        kinds.push(BackendKind::Vulkan);
    }
    let free_roles = |list: &str| -> Vec<String> {
        list.split(',')
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect()
    };
    if let Ok(list) = std::env::var("OFFLOAD_BENCH_IPC_FREE") {
        for kind in &kinds {
            for role in free_roles(&list) {
                match frees(*kind, &role) {
                    Some(r) => println!("  {r}"),
                    None => println!("{kind}: no device here, not measured"),
                }
            }
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    let mut paired_reports = Vec::new();
    let mut streams = Vec::new();
    for kind in kinds {
        for cache in [16, 0] {
            match run(&mut c, kind, cache, &mut streams) {
                Some(r) => paired_reports.extend(r),
                None => println!("{kind}: no device here, not measured"),
            }
        }
        paired_reports.extend(alloc_cost(&mut c, kind));
        for role in ["idle", "sleeping", "spinning", "polling"] {
            streams.extend(frees(kind, role));
        }
    }
    c.final_summary();
    println!("\nsummary (goal: cached ping-pong <= 1.15 x the raw floor):");
    for r in paired_reports.iter().filter(|r| r.samples > 0) {
        println!("  {r}");
    }
    for s in streams {
        println!("  {s}");
    }
}
