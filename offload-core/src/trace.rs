//! A Chrome time trace of the runtime: `OFFLOAD_TRACE=<file>` (or the builder's
//! [`trace`](crate::Offload::trace)) writes offload's own `tracing` spans — `init`,
//! `platform_open`, `compile`, `load`, `launch`, `sync`, `ipc_send`, `ipc_unmap_wait`,
//! `shutdown` — as
//! complete events (`"ph":"X"`, microseconds) of the JSON `traceEvents` format that
//! Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` read. It is offload's
//! counterpart of Proteus's `PROTEUS_ENABLE_TIME_TRACE`.
//!
//! # How spans reach it
//!
//! offload never fights the application for the global `tracing` subscriber. When a
//! runtime starts with a trace file and no global subscriber is set yet, it installs a
//! small one of its own that sees only offload's spans (targets `offload::*`) and records
//! nothing else; an application that has its own subscriber adds [`layer()`] to it instead
//! (with `tracing-subscriber`'s `SubscriberExt::with`). An application that sets a global
//! subscriber *after* a traced runtime started finds offload's in place (its
//! `set_global_default` fails): set yours first, with the layer. A global subscriber set
//! without the layer gets a warning (target `offload::trace`) and no trace.
//!
//! # What is recorded, and when it is written
//!
//! A span is one event per entry (enter to exit, on the thread that entered it), with its
//! fields as `args`. Every thread with an event gets a `thread_name` metadata event:
//! offload's own threads by their job (`offload executor (queue 0)`, `offload IPC
//! progress`, `offload compile pool`, `offload host functions`, `offload host worker 0`),
//! the process's first thread `main`, others by their OS name, else `thread <n>`. At most [`MAX_EVENTS`] are kept per process; later ones are counted,
//! not kept (`otherData.dropped_events` in the file). The file is written, whole, at every
//! deinitialising shutdown of a traced runtime (the last `shutdown`, the last drop, or the
//! exit hook for a runtime never shut down), so a process that starts and stops offload
//! several times gets every round in one file. `{pid}` in the path is the process id, so
//! MPI ranks and child processes each write their own. A file that cannot be written is a
//! warning (target `offload::trace`; on standard error too when offload's own subscriber
//! is the global one, since nothing else would show it), never an error of the shutdown
//! and never a panic: the trace is a diagnostic.
//!
//! # Cost
//!
//! With no trace asked for, nothing here runs: a span whose callsite no subscriber wants
//! costs `tracing`'s check of one static (measured on the launch benchmark, see
//! docs/trace.md). With a trace, every offload span takes this module's lock twice.
//!
//! # Why not `tracing-chrome`
//!
//! The `tracing-chrome` crate writes the same format, but it opens the file when the layer
//! is built and panics if that fails, writes from a `std::thread` of its own (which pins a
//! `dlclose`d library, L2), keeps every event without bound and needs `tracing-subscriber`'s
//! registry (whose thread-locals pin the library too). This module needs only the `Layer`
//! trait of `tracing-subscriber`, built with no default features, and keeps no
//! thread-local with a destructor.
//!
//! The module uses nothing else of the crate but the lock shim and the shared JSON string
//! escaper (`json`): the runtime arms it at `start` (`typestate`) and calls [`write`] at
//! the end of a teardown (`runtime::lifecycle`).

use crate::json::JsonStr;
use crate::sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, PoisonError, statics,
};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The most events one process keeps for its trace; later ones are counted as dropped
/// (`otherData.dropped_events` in the file), so a long run's trace stays bounded (about
/// 100 bytes an event, a few more for its fields).
///
/// ```
/// assert_eq!(offload_core::trace::MAX_EVENTS, 100_000);
/// ```
pub const MAX_EVENTS: usize = 100_000;

statics! {
    /// Whether a traced runtime is live (spans are recorded only then).
    static ON: AtomicBool = AtomicBool::new(false);
    /// Whether [`layer()`] was added to a subscriber, or offload's own subscriber installed.
    static COLLECTING: AtomicBool = AtomicBool::new(false);
    /// Whether the global subscriber is offload's own.
    static OWN: AtomicBool = AtomicBool::new(false);
    /// Whether the warning about a global subscriber without the layer was given.
    static WARNED: AtomicBool = AtomicBool::new(false);
    static RECORDER: Mutex<Recorder> = Mutex::new(Recorder {
        epoch: None,
        open: BTreeMap::new(),
        events: Vec::new(),
        dropped: 0,
        dirty: false,
        threads: Vec::new(),
    });
    static NEXT_TID: AtomicU64 = AtomicU64::new(1);
    /// Spans in `Recorder::open` (changed under its lock): enter, exit and close return at once
    /// when it is 0, so a layer in an application that traces nothing costs one load per call.
    static OPEN: AtomicUsize = AtomicUsize::new(0);
}

crate::sync::thread_local! {
    /// This thread's number in the trace (0: not given yet). A const-initialised `Cell`
    /// has no destructor, so it pins no `dlclose`d library (L2).
    static TID: Cell<u64> = const { Cell::new(0) };
}

/// A span between `new_span` and `close`.
struct OpenSpan {
    name: &'static str,
    cat: &'static str,
    /// The span's fields, as the members of a JSON object.
    args: Arc<str>,
    /// References of offload's own subscriber (a `Layer` is told when the span closes).
    refs: usize,
    /// Entries not yet exited: (thread, when).
    entered: Vec<(u64, Instant)>,
}

/// One complete (`"ph":"X"`) event.
struct Complete {
    name: &'static str,
    cat: &'static str,
    tid: u64,
    start: Instant,
    dur_ns: u64,
    args: Arc<str>,
}

struct Recorder {
    /// Timestamps count from here: the first time a trace was armed.
    epoch: Option<Instant>,
    open: BTreeMap<u64, OpenSpan>,
    events: Vec<Complete>,
    dropped: u64,
    /// Events recorded since the file was last written.
    dirty: bool,
    /// Each traced thread's number and name (`thread_name` metadata in the file).
    threads: Vec<(u64, String)>,
}

impl Recorder {
    /// Keeps `event`, or counts it as dropped beyond [`MAX_EVENTS`].
    fn push(&mut self, event: Complete) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(event);
        } else {
            self.dropped += 1;
        }
        self.dirty = true;
    }

    fn insert(&mut self, id: u64, span: OpenSpan) {
        if self.open.insert(id, span).is_none() {
            OPEN.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn remove(&mut self, id: u64) {
        if self.open.remove(&id).is_some() {
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Whether no span is open here (nothing to do for an enter, exit or close).
fn none_open() -> bool {
    OPEN.load(Ordering::Relaxed) == 0
}

fn recorder() -> MutexGuard<'static, Recorder> {
    // A panic elsewhere while the lock was held leaves the recorder consistent.
    RECORDER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This thread's number in the trace; the first time, its name is noted too. Never called
/// with the recorder's lock held.
fn tid() -> u64 {
    TID.with(|t| {
        if t.get() == 0 {
            let tid = NEXT_TID.fetch_add(1, Ordering::Relaxed);
            t.set(tid);
            let name = thread_label(os_thread_name().as_deref(), is_main_thread(), tid);
            let mut r = recorder();
            // Bounded as the events are: past that, a thread shows as its number.
            if r.threads.len() < MAX_EVENTS {
                r.threads.push((tid, name));
            }
        }
        t.get()
    })
}

/// The calling thread's name as the kernel keeps it (15 bytes at most), if it can be read.
fn os_thread_name() -> Option<String> {
    let comm = std::fs::read_to_string("/proc/thread-self/comm").ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

/// Whether the calling thread is the process's first (`/proc/thread-self` is
/// `<pid>/task/<tid>`, and the first thread's id is the pid).
fn is_main_thread() -> bool {
    std::fs::read_link("/proc/thread-self").is_ok_and(|link| {
        let mut parts = link.to_str().unwrap_or_default().split('/');
        matches!((parts.next(), parts.next(), parts.next()), (Some(pid), Some("task"), Some(tid)) if pid == tid)
    })
}

/// A thread's name in the trace: offload's own threads (named by `offload-thread`, cut to
/// 15 bytes by the kernel) by their job, the process's first thread `main`, another thread
/// by its OS name, else `thread <tid>`.
fn thread_label(os_name: Option<&str>, main: bool, tid: u64) -> String {
    if main {
        return "main".into();
    }
    let Some(name) = os_name.filter(|n| !n.is_empty()) else {
        return format!("thread {tid}");
    };
    let number = |prefix: &str| {
        name.strip_prefix(prefix)
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Some(q) = number("offload-q") {
        format!("offload executor (queue {q})")
    } else if let Some(w) = number("offload-host-") {
        format!("offload host worker {w}")
    } else if name == "offload-host-fn" {
        "offload host functions".into()
    } else if name.starts_with("offload-ipc") {
        "offload IPC progress".into()
    } else if name == "offload-compile" {
        "offload compile pool".into()
    } else {
        name.to_owned()
    }
}

fn is_offload(meta: &Metadata<'_>) -> bool {
    meta.is_span() && (meta.target() == "offload" || meta.target().starts_with("offload::"))
}

/// Turns recording on for a runtime that starts with a trace file `path` (none: nothing
/// happens), and makes sure spans reach this module: by the application's subscriber if it
/// has [`layer()`], else by offload's own, installed as the global default when none is set.
/// Returns whether this call turned recording on (it was off).
pub(crate) fn arm(path: Option<&Path>) -> bool {
    if path.is_none() {
        return false;
    }
    recorder().epoch.get_or_insert_with(Instant::now);
    let armed = !ON.swap(true, Ordering::SeqCst);
    if COLLECTING.load(Ordering::SeqCst) {
        return armed;
    }
    if !tracing::dispatcher::has_been_set()
        && tracing::subscriber::set_global_default(Collector::default()).is_ok()
    {
        OWN.store(true, Ordering::SeqCst);
        COLLECTING.store(true, Ordering::SeqCst);
        return armed;
    }
    if !WARNED.swap(true, Ordering::SeqCst) {
        tracing::warn!(
            target: "offload::trace",
            "a trace file is set (OFFLOAD_TRACE or `trace(..)`), but the global tracing \
             subscriber is the application's and has no `offload::trace::layer()`: add it \
             to record the trace"
        );
    }
    armed
}

/// Keeps recording only while the live runtime is traced (`traced`): called once a `start`
/// has its runtime.
pub(crate) fn set_live(traced: bool) {
    ON.store(traced, Ordering::SeqCst);
}

fn new_span(id: &Id, attrs: &Attributes<'_>) {
    if !ON.load(Ordering::Relaxed) || !is_offload(attrs.metadata()) {
        return;
    }
    let mut args = Args(String::new());
    attrs.record(&mut args);
    let meta = attrs.metadata();
    recorder().insert(
        id.into_u64(),
        OpenSpan {
            name: meta.name(),
            cat: meta.target(),
            args: args.0.into(),
            refs: 1,
            entered: Vec::new(),
        },
    );
}

fn record(id: &Id, values: &Record<'_>) {
    if none_open() {
        return;
    }
    let mut r = recorder();
    if let Some(span) = r.open.get_mut(&id.into_u64()) {
        let mut args = Args(span.args.to_string());
        values.record(&mut args);
        span.args = args.0.into();
    }
}

fn enter(id: &Id) {
    if none_open() {
        return;
    }
    let now = Instant::now();
    let tid = tid();
    if let Some(span) = recorder().open.get_mut(&id.into_u64()) {
        span.entered.push((tid, now));
    }
}

fn exit(id: &Id) {
    if none_open() {
        return;
    }
    let now = Instant::now();
    let tid = tid();
    let mut r = recorder();
    let Some(span) = r.open.get_mut(&id.into_u64()) else {
        return;
    };
    let Some(at) = span.entered.iter().rposition(|(t, _)| *t == tid) else {
        return;
    };
    let (_, start) = span.entered.remove(at);
    let event = Complete {
        name: span.name,
        cat: span.cat,
        tid,
        start,
        dur_ns: u64::try_from(now.duration_since(start).as_nanos()).unwrap_or(u64::MAX),
        args: span.args.clone(),
    };
    r.push(event);
}

/// One reference less (offload's own subscriber); true when the span closed.
fn release(id: &Id) -> bool {
    if none_open() {
        return true;
    }
    let mut r = recorder();
    let key = id.into_u64();
    match r.open.get_mut(&key) {
        Some(span) if span.refs > 1 => {
            span.refs -= 1;
            false
        }
        Some(_) => {
            r.remove(key);
            true
        }
        None => true,
    }
}

/// Writes the trace recorded so far to `path` (the configuration of a runtime being
/// deinitialised; none: nothing happens), `{pid}` replaced by the process id, through a
/// temporary file renamed into place. A failure is a warning; nothing panics.
pub(crate) fn write(path: Option<&Path>) {
    let Some(path) = path else {
        return;
    };
    let path = with_pid(path);
    let json = {
        let mut r = recorder();
        if !r.dirty && path.exists() {
            return;
        }
        r.dirty = false;
        json(&r)
    };
    let mut tmp = path.clone().into_os_string();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, json.as_bytes()).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        // Best effort: the write's error is what is logged below.
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(
            target: "offload::trace",
            path = %path.display(),
            error = %e,
            "the trace could not be written"
        );
        if OWN.load(Ordering::SeqCst) {
            // offload's own subscriber shows no warning: this line is the only word of it.
            eprintln!(
                "offload: the trace could not be written to {}: {e}",
                path.display()
            );
        }
    }
}

/// `path` with every `{pid}` replaced by this process's id.
fn with_pid(path: &Path) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = path.as_os_str().as_bytes();
    let pid = std::process::id().to_string();
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = rest.windows(5).position(|w| w == b"{pid}") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(pid.as_bytes());
        rest = &rest[at + 5..];
    }
    out.extend_from_slice(rest);
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The trace as Chrome's JSON object format.
fn json(r: &Recorder) -> String {
    let pid = std::process::id();
    let epoch = r.epoch.unwrap_or_else(Instant::now);
    let mut out = String::with_capacity(128 + r.events.len() * 128);
    let _ = write!(
        out,
        "{{\"traceEvents\":[\n{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"offload\"}}}}"
    );
    // A name for every thread that has an event in the file (writing to a String cannot
    // fail, here and below).
    let shown: std::collections::BTreeSet<u64> = r.events.iter().map(|e| e.tid).collect();
    for (tid, name) in r.threads.iter().filter(|(t, _)| shown.contains(t)) {
        let _ = write!(
            out,
            ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
            JsonStr(name)
        );
    }
    for e in &r.events {
        let ts = e.start.saturating_duration_since(epoch).as_nanos();
        let _ = write!(
            out,
            ",\n{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"ts\":{}.{:03},\"dur\":{}.{:03},\"pid\":{pid},\"tid\":{},\"args\":{{{}}}}}",
            JsonStr(e.name),
            JsonStr(e.cat),
            ts / 1000,
            ts % 1000,
            e.dur_ns / 1000,
            e.dur_ns % 1000,
            e.tid,
            e.args
        );
    }
    let _ = write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"producer\":\"offload {}\",\"events\":{},\"dropped_events\":{},\"max_events\":{MAX_EVENTS}}}}}\n",
        env!("CARGO_PKG_VERSION"),
        r.events.len(),
        r.dropped
    );
    out
}

/// A span's fields, as the members of a JSON object (`"k":v,…`).
struct Args(String);

impl Args {
    fn key(&mut self, field: &Field) {
        if !self.0.is_empty() {
            self.0.push(',');
        }
        let _ = write!(self.0, "{}:", JsonStr(field.name()));
    }
}

impl Visit for Args {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.key(field);
        let _ = write!(self.0, "{}", JsonStr(&format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        let _ = write!(self.0, "{}", JsonStr(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.0, "{value}");
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.0, "{value}");
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let _ = write!(self.0, "{value}");
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        if value.is_finite() {
            let _ = write!(self.0, "{value}");
        } else {
            let _ = write!(self.0, "\"{value}\"");
        }
    }
}

/// The [`Layer`] that records offload's spans for the trace, for an application with a
/// `tracing` subscriber of its own; see [`layer()`].
///
/// ```
/// use tracing_subscriber::layer::SubscriberExt;
/// let subscriber = tracing_subscriber::registry().with(offload_core::trace::layer());
/// tracing::subscriber::with_default(subscriber, || {
///     // offload's spans here reach the trace of a traced runtime.
/// });
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceLayer {
    _private: (),
}

/// The layer to add to your own `tracing` subscriber so that offload's spans reach the
/// trace (`OFFLOAD_TRACE`, or the builder's [`trace`](crate::Offload::trace)) while
/// the subscriber stays yours; without a subscriber of your own, offload installs one
/// that records its spans only. The layer records offload's spans (targets `offload::*`)
/// while a traced runtime is live and ignores everything else; it filters nothing, so
/// give your subscriber a filter that lets offload's spans through (`offload=trace` for
/// every one: `launch` and `sync` are debug spans).
///
/// ```
/// use offload_core::reference::Offload;
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let path = std::env::temp_dir().join(format!("offload-layer-{}.json", std::process::id()));
/// let subscriber = tracing_subscriber::registry().with(offload_core::trace::layer());
/// tracing::subscriber::set_global_default(subscriber).expect("no global subscriber yet");
///
/// let rt = Offload::builder().trace(&path).start()?;
/// rt.devices()?[0].queue()?.sync()?;
/// rt.shutdown()?; // the last shutdown writes the trace
/// let json = std::fs::read_to_string(&path).expect("the trace");
/// assert!(json.contains(r#""name":"sync""#), "{json}");
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), offload_core::Error>(())
/// ```
pub fn layer() -> TraceLayer {
    TraceLayer::default()
}

impl<S: Subscriber> Layer<S> for TraceLayer {
    fn on_layer(&mut self, _: &mut S) {
        COLLECTING.store(true, Ordering::SeqCst);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        new_span(id, attrs);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        record(id, values);
    }

    fn on_enter(&self, id: &Id, _: Context<'_, S>) {
        enter(id);
    }

    fn on_exit(&self, id: &Id, _: Context<'_, S>) {
        exit(id);
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        if !none_open() {
            recorder().remove(id.into_u64());
        }
    }
}

/// offload's own global subscriber, installed only when none is set: it enables offload's
/// spans and nothing else, and numbers them itself (no registry, no thread-locals).
#[derive(Default)]
struct Collector {
    next: AtomicU64,
}

impl Subscriber for Collector {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_offload(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        is_offload(meta)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1);
        new_span(&id, attrs);
        id
    }

    fn record(&self, id: &Id, values: &Record<'_>) {
        record(id, values);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, id: &Id) {
        enter(id);
    }

    fn exit(&self, id: &Id) {
        exit(id);
    }

    fn clone_span(&self, id: &Id) -> Id {
        if !none_open() {
            if let Some(span) = recorder().open.get_mut(&id.into_u64()) {
                span.refs += 1;
            }
        }
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        release(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_is_replaced_everywhere() {
        let pid = std::process::id();
        assert_eq!(
            with_pid(Path::new("/tmp/{pid}/t-{pid}.json")),
            PathBuf::from(format!("/tmp/{pid}/t-{pid}.json"))
        );
        assert_eq!(with_pid(Path::new("t.json")), PathBuf::from("t.json"));
    }

    #[test]
    fn strings_are_escaped_for_json() {
        assert_eq!(
            JsonStr("a\"b\\c\nd\u{1}").to_string(),
            r#""a\"b\\c\nd\u0001""#
        );
    }

    #[test]
    fn offloads_threads_are_named_for_their_jobs() {
        let label = |name, main| thread_label(name, main, 7);
        assert_eq!(
            label(Some("offload-q3"), false),
            "offload executor (queue 3)"
        );
        assert_eq!(
            label(Some("offload-host-0"), false),
            "offload host worker 0"
        );
        assert_eq!(
            label(Some("offload-host-fn"), false),
            "offload host functions"
        );
        // `offload-ipc-progress`, as the kernel keeps it.
        assert_eq!(
            label(Some("offload-ipc-pro"), false),
            "offload IPC progress"
        );
        assert_eq!(
            label(Some("offload-compile"), false),
            "offload compile pool"
        );
        assert_eq!(label(Some("render"), false), "render");
        assert_eq!(label(Some("app"), true), "main");
        assert_eq!(label(Some(""), false), "thread 7");
        assert_eq!(label(None, false), "thread 7");
    }

    #[test]
    fn the_recorder_keeps_at_most_max_events_and_counts_the_rest() {
        let start = Instant::now();
        let mut r = Recorder {
            epoch: Some(start),
            open: BTreeMap::new(),
            events: Vec::new(),
            dropped: 0,
            dirty: false,
            threads: vec![(1, "main".into()), (2, "idle".into())],
        };
        for _ in 0..MAX_EVENTS + 3 {
            r.push(Complete {
                name: "launch",
                cat: "offload::launch",
                tid: 1,
                start,
                dur_ns: 1_500,
                args: r#""kernel":"noop""#.into(),
            });
        }
        assert_eq!((r.events.len(), r.dropped), (MAX_EVENTS, 3));
        let text = json(&r);
        assert!(text.starts_with("{\"traceEvents\":["), "{}", &text[..80]);
        assert!(text.contains(r#""dur":1.500"#));
        assert!(text.contains(r#""args":{"kernel":"noop"}"#));
        // Named: the threads with events, not the others.
        assert!(text.contains(r#"{"name":"thread_name","ph":"M","pid":"#));
        assert!(text.contains(r#""tid":1,"args":{"name":"main"}}"#));
        assert!(!text.contains("idle"));
        assert!(text.ends_with(
            r#""dropped_events":3,"max_events":100000}}
"#
        ));
    }
}
