//! `offload-info`: lists what the offload runtime finds on this machine, like
//! `llvm-offload-device-info` or `vulkaninfo`: every platform that opened, with its
//! devices and all of their properties ([`offload::DeviceInfo`]), and every platform that
//! was looked for but is unavailable, with the reason.
//!
//! ```text
//! cargo run --bin offload-info                             # host backend, text
//! cargo run --bin offload-info --features vulkan           # host and Vulkan, text
//! cargo run --bin offload-info --features vulkan -- --json # one JSON document
//! ```
//!
//! The text output has one aligned `key : value` line per property, byte sizes in
//! binary units with the exact byte count, and `not reported` for a property the driver
//! does not give. The JSON output is an object `{"platforms": [{"name", "backend",
//! "devices": [{...}]}], "unavailable": [{"backend", "reason"}]}` with the same property
//! keys, numbers as numbers and an unreported property as `null`.
//!
//! Exit status: 0 on success, 1 when the runtime reports an error (printed to stderr),
//! 2 on a bad command line. The runtime honours the usual `OFFLOAD_*` variables.
//!
//! The JSON is written by a tiny writer here rather than serde, so the binary adds no
//! dependency to the crate; its strings are escaped by the workspace's one JSON string
//! escaper (`offload_core::json`, which the Chrome trace uses too).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::process::ExitCode;

use offload::{DeviceInfo, Error, Offload, PlatformInfo, Unavailable};
use offload_core::json::JsonStr;

const USAGE: &str = "\
Usage: offload-info [--json]

Lists the offload platforms, their devices and every device property, and the
platforms that are unavailable and why.

Options:
  --json      print one JSON document instead of text
  -h, --help  print this help
";

/// What the command line asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Text,
    Json,
    Help,
}

/// Reads the arguments; an unknown one is returned as the error.
fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Mode, OsString> {
    let mut mode = Mode::Text;
    for arg in args {
        match arg.to_str() {
            Some("--json") if mode != Mode::Help => mode = Mode::Json,
            Some("--json") => {}
            Some("-h" | "--help") => mode = Mode::Help,
            _ => return Err(arg),
        }
    }
    Ok(mode)
}

/// A runtime error and the call that gave it.
#[derive(Debug)]
struct Failure {
    call: String,
    error: Error,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.error)
    }
}

/// Attaches the call's name to a runtime error.
fn during<T>(call: impl Into<String>, result: offload::Result<T>) -> Result<T, Failure> {
    result.map_err(|error| Failure {
        call: call.into(),
        error,
    })
}

/// An opened platform and the properties of its devices.
struct PlatformReport {
    platform: PlatformInfo,
    devices: Vec<DeviceInfo>,
}

/// Everything the runtime said, gathered before it is shut down.
struct Report {
    platforms: Vec<PlatformReport>,
    unavailable: Vec<Unavailable>,
}

/// Asks the runtime for its platforms, their devices' properties and the unavailable
/// platforms. Devices come in platform order, so each platform takes the next
/// `PlatformInfo::devices` of them.
fn gather(rt: &Offload) -> Result<Report, Failure> {
    let platforms = during("Offload::platforms", rt.platforms())?;
    let unavailable = during("Offload::unavailable", rt.unavailable())?;
    let mut devices = during("Offload::devices", rt.devices())?.into_iter();
    let mut reports = Vec::with_capacity(platforms.len());
    for (p, platform) in platforms.into_iter().enumerate() {
        let infos = devices
            .by_ref()
            .take(platform.devices)
            .enumerate()
            .map(|(d, dev)| during(format!("Device::info (device {p}.{d})"), dev.info()))
            .collect::<Result<Vec<_>, _>>()?;
        reports.push(PlatformReport {
            platform,
            devices: infos,
        });
    }
    Ok(Report {
        platforms: reports,
        unavailable,
    })
}

/// One device property, typed so that text and JSON can each show it their way.
enum Value {
    Text(String),
    Number(u64),
    Hex(u32),
    Bytes(u64),
    Dims([u32; 3]),
    NotReported,
}

/// Wraps an optional property, `None` being `NotReported`.
fn opt<T>(value: Option<T>, wrap: impl FnOnce(T) -> Value) -> Value {
    value.map_or(Value::NotReported, wrap)
}

/// Every property of a device, in `DeviceInfo`'s order, keyed by its field name.
fn properties(info: &DeviceInfo) -> [(&'static str, Value); 14] {
    let num = |n: u32| Value::Number(n.into());
    [
        ("name", Value::Text(info.name.clone())),
        ("vendor", Value::Text(info.vendor.clone())),
        ("backend", Value::Text(info.backend.to_string())),
        ("memory", Value::Bytes(info.memory)),
        ("compute_units", num(info.compute_units)),
        ("vendor_id", opt(info.vendor_id, Value::Hex)),
        (
            "driver_version",
            opt(info.driver_version.clone(), Value::Text),
        ),
        ("max_block_threads", opt(info.max_block_threads, num)),
        ("max_block", opt(info.max_block, Value::Dims)),
        ("max_grid", opt(info.max_grid, Value::Dims)),
        ("max_alloc", opt(info.max_alloc, Value::Bytes)),
        ("shared_memory", opt(info.shared_memory, Value::Bytes)),
        ("address_bits", opt(info.address_bits, num)),
        ("clock_mhz", opt(info.clock_mhz, num)),
    ]
}

/// A byte count in binary units with the exact count: `48 KiB (49152 bytes)`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >> (10 * (unit + 2)) > 0 {
        unit += 1;
    }
    let scale = 1u64 << (10 * (unit + 1));
    let size = if bytes % scale == 0 {
        (bytes / scale).to_string()
    } else {
        format!("{:.1}", bytes as f64 / scale as f64)
    };
    format!("{size} {} ({bytes} bytes)", UNITS[unit])
}

impl fmt::Display for Value {
    /// The text form of a property.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Text(s) => f.write_str(s),
            Value::Number(n) => write!(f, "{n}"),
            Value::Hex(n) => write!(f, "{n:#x}"),
            Value::Bytes(n) => f.write_str(&human_bytes(*n)),
            Value::Dims([x, y, z]) => write!(f, "{x} x {y} x {z}"),
            Value::NotReported => f.write_str("not reported"),
        }
    }
}

/// Width of the widest property key, for aligned text.
const KEY_WIDTH: usize = "max_block_threads".len();

/// The report as text.
fn render_text(report: &Report) -> String {
    let mut out = String::new();
    let opened = report.platforms.len();
    let devices: usize = report.platforms.iter().map(|p| p.devices.len()).sum();
    out += &format!(
        "offload-info: {opened} platform(s) opened, {devices} device(s), {} unavailable\n",
        report.unavailable.len()
    );
    for (p, platform) in report.platforms.iter().enumerate() {
        text_platform(&mut out, p, platform);
    }
    out += "\nUnavailable platforms:";
    if report.unavailable.is_empty() {
        out += " none\n";
    } else {
        out += "\n";
        for u in &report.unavailable {
            text_line(&mut out, "  ", u.backend.name(), &u.reason);
        }
    }
    out
}

/// One platform and its devices as text.
fn text_platform(out: &mut String, p: usize, report: &PlatformReport) {
    let platform = &report.platform;
    *out += &format!("\nPlatform {p}: {}\n", platform.name);
    text_line(out, "  ", "name", &platform.name);
    text_line(out, "  ", "backend", &platform.backend);
    text_line(out, "  ", "devices", &platform.devices);
    for (d, info) in report.devices.iter().enumerate() {
        *out += &format!("\n  Device {p}.{d}: {}\n", info.name);
        for (key, value) in properties(info) {
            text_line(out, "    ", key, &value);
        }
    }
}

/// One aligned `key : value` line.
fn text_line(out: &mut String, indent: &str, key: &str, value: &dyn fmt::Display) {
    *out += &format!("{indent}{key:<KEY_WIDTH$} : {value}\n");
}

/// A JSON value, just enough of one for this report.
enum Json {
    Null,
    Number(u64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(&'static str, Json)>),
}

impl From<Value> for Json {
    fn from(value: Value) -> Json {
        match value {
            Value::Text(s) => Json::String(s),
            Value::Number(n) | Value::Bytes(n) => Json::Number(n),
            Value::Hex(n) => Json::Number(n.into()),
            Value::Dims(dims) => Json::Array(dims.map(|n| Json::Number(n.into())).into()),
            Value::NotReported => Json::Null,
        }
    }
}

/// Appends `s` as a JSON string literal, with the workspace's one escaper
/// (`offload_core::json`, which the Chrome trace writes with too).
fn write_json_string(out: &mut String, s: &str) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{}", JsonStr(s));
}

impl Json {
    /// Whether this is a number (a list of numbers is written on one line).
    fn is_number(&self) -> bool {
        matches!(self, Json::Number(_))
    }

    /// Appends the value, pretty-printed with two-space indentation from `depth`;
    /// a list of numbers stays on one line.
    fn write(&self, out: &mut String, depth: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Number(n) => out.push_str(&n.to_string()),
            Json::String(s) => write_json_string(out, s),
            Json::Array(items) if items.iter().all(Json::is_number) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, depth + 1);
                }
                out.push(']');
            }
            Json::Array(items) => {
                write_list(out, depth, '[', ']', items, |out, item| {
                    item.write(out, depth + 1);
                });
            }
            Json::Object(members) => {
                write_list(out, depth, '{', '}', members, |out, (key, value)| {
                    write_json_string(out, key);
                    out.push_str(": ");
                    value.write(out, depth + 1);
                });
            }
        }
    }
}

/// Appends a bracketed, comma-separated list, one item a line; `[]` or `{}` when empty.
fn write_list<T>(
    out: &mut String,
    depth: usize,
    open: char,
    close: char,
    items: &[T],
    mut item: impl FnMut(&mut String, &T),
) {
    out.push(open);
    for (i, it) in items.iter().enumerate() {
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str(&"  ".repeat(depth + 1));
        item(out, it);
    }
    if !items.is_empty() {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    }
    out.push(close);
}

/// The report as one JSON document.
fn render_json(report: &Report) -> String {
    let platforms = report.platforms.iter().map(|p| {
        let devices = p.devices.iter().map(|info| {
            Json::Object(
                properties(info)
                    .into_iter()
                    .map(|(key, value)| (key, value.into()))
                    .collect(),
            )
        });
        Json::Object(vec![
            ("name", Json::String(p.platform.name.clone())),
            ("backend", Json::String(p.platform.backend.to_string())),
            ("devices", Json::Array(devices.collect())),
        ])
    });
    let unavailable = report.unavailable.iter().map(|u| {
        Json::Object(vec![
            ("backend", Json::String(u.backend.to_string())),
            ("reason", Json::String(u.reason.clone())),
        ])
    });
    let doc = Json::Object(vec![
        ("platforms", Json::Array(platforms.collect())),
        ("unavailable", Json::Array(unavailable.collect())),
    ]);
    let mut out = String::new();
    doc.write(&mut out, 0);
    out.push('\n');
    out
}

/// Prints to stderr, ignoring a failure to (there is nowhere left to report it).
fn complain(message: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "offload-info: {message}");
}

/// Starts the runtime, gathers the report, shuts the runtime down and prints the report
/// (also when only the shutdown failed). Returns whether everything succeeded.
fn run(mode: Mode) -> bool {
    let rt = match Offload::init() {
        Ok(rt) => rt,
        Err(e) => {
            complain(format_args!("Offload::init failed: {e}"));
            return false;
        }
    };
    let report = gather(&rt);
    let shutdown = rt.shutdown();
    let mut ok = true;
    match report {
        Ok(report) => {
            let text = match mode {
                Mode::Json => render_json(&report),
                Mode::Text | Mode::Help => render_text(&report),
            };
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                complain(format_args!("cannot write the output: {e}"));
                ok = false;
            }
        }
        Err(failure) => {
            complain(format_args!("{failure}"));
            ok = false;
        }
    }
    if let Err(e) = shutdown {
        complain(format_args!("Offload::shutdown failed: {e}"));
        ok = false;
    }
    ok
}

fn main() -> ExitCode {
    match parse_args(std::env::args_os().skip(1)) {
        Ok(Mode::Help) => {
            let _ = std::io::stdout().write_all(USAGE.as_bytes());
            ExitCode::SUCCESS
        }
        Ok(mode) => {
            if run(mode) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(arg) => {
            complain(format_args!(
                "unknown argument `{}`\n\n{USAGE}",
                arg.to_string_lossy()
            ));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_string(s: &str) -> String {
        let mut out = String::new();
        write_json_string(&mut out, s);
        out
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(json_string("plain é"), "\"plain é\"");
        assert_eq!(json_string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(json_string("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
        assert_eq!(json_string("\u{1}\u{1f}\u{7f}"), "\"\\u0001\\u001f\u{7f}\"");
    }

    #[test]
    fn byte_sizes_are_human_and_exact() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_bytes(49152), "48 KiB (49152 bytes)");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB (1610612736 bytes)");
        assert_eq!(
            human_bytes(u64::MAX),
            "16.0 EiB (18446744073709551615 bytes)"
        );
    }

    #[test]
    fn arguments() {
        let args = |list: &[&str]| parse_args(list.iter().map(OsString::from));
        assert_eq!(args(&[]), Ok(Mode::Text));
        assert_eq!(args(&["--json"]), Ok(Mode::Json));
        assert_eq!(args(&["--json", "-h"]), Ok(Mode::Help));
        assert_eq!(args(&["--help", "--json"]), Ok(Mode::Help));
        assert_eq!(args(&["--jsn"]), Err(OsString::from("--jsn")));
    }

    #[test]
    fn empty_lists_and_nesting() {
        let doc = Json::Object(vec![
            ("a", Json::Array(vec![])),
            ("b", Json::Array(vec![Json::Null, Json::Number(7)])),
            ("c", Json::Array(vec![Json::Number(1), Json::Number(2)])),
        ]);
        let mut out = String::new();
        doc.write(&mut out, 0);
        assert_eq!(
            out,
            "{\n  \"a\": [],\n  \"b\": [\n    null,\n    7\n  ],\n  \"c\": [1, 2]\n}"
        );
    }
}
