//! The `offload-info` binary: its text and JSON list every platform, device and device
//! property; a Vulkan build shows lavapipe's limits; a bad command line exits with 2.
//!
//! The Vulkan part runs when this build has the `vulkan` feature and the binary found a
//! lavapipe (`llvmpipe`) device, and is required when `CI=true`; otherwise it prints a
//! SKIP line.

use std::process::{Command, Output};

use serde_json::Value;

/// Every property of `offload::DeviceInfo`, as the binary names it in text and JSON.
const PROPERTIES: [&str; 14] = [
    "name",
    "vendor",
    "backend",
    "memory",
    "compute_units",
    "vendor_id",
    "driver_version",
    "max_block_threads",
    "max_block",
    "max_grid",
    "max_alloc",
    "shared_memory",
    "address_bits",
    "clock_mhz",
];

/// Lavapipe's (Mesa's) Vulkan vendor id.
const MESA_VENDOR_ID: u64 = 0x10005;

/// Runs `offload-info` with `args` and the default configuration.
fn offload_info(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_offload-info"));
    cmd.args(args);
    for var in [
        "OFFLOAD_BACKENDS",
        "OFFLOAD_IPC_CACHE_SIZE",
        "OFFLOAD_HOST_DEVICES",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("offload-info runs")
}

/// Runs `offload-info` with `args`, asserts it succeeded and returns its stdout.
fn success(args: &[&str]) -> String {
    let out = offload_info(args);
    let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    assert_eq!(
        out.status.code(),
        Some(0),
        "offload-info {args:?} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The `--json` document, parsed.
fn json() -> Value {
    let stdout = success(&["--json"]);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("--json output is not JSON ({e}):\n{stdout}"))
}

/// Every device object of the document.
fn devices(doc: &Value) -> Vec<&serde_json::Map<String, Value>> {
    doc["platforms"]
        .as_array()
        .expect("\"platforms\" is an array")
        .iter()
        .flat_map(|p| p["devices"].as_array().expect("\"devices\" is an array"))
        .map(|d| d.as_object().expect("a device is an object"))
        .collect()
}

#[test]
fn text_lists_every_platform_device_and_property() {
    let text = success(&[]);
    let doc = json();
    let devices = devices(&doc);

    let host = devices
        .iter()
        .find(|d| d["backend"] == "host")
        .unwrap_or_else(|| panic!("no host device in the JSON:\n{doc:#}"));
    let host_name = host["name"].as_str().expect("a device name is a string");
    assert!(
        text.lines().any(
            |l| l.trim_start().starts_with("Device ") && l.ends_with(&format!(": {host_name}"))
        ),
        "the text does not list the host device `{host_name}`:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.split(" : ").map(str::trim).eq(["backend", "host"])),
        "no `backend : host` line:\n{text}"
    );
    for p in doc["platforms"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().expect("a platform name is a string");
        assert!(
            text.contains(&format!(": {name}\n")),
            "platform `{name}` missing:\n{text}"
        );
    }

    for key in PROPERTIES {
        let lines = text
            .lines()
            .filter(|l| l.split(" : ").next().map(str::trim) == Some(key))
            .count();
        // `name` and `backend` are also platform lines; every device has each key.
        assert!(
            lines >= devices.len(),
            "`{key}` is on {lines} text lines, expected one per device ({}):\n{text}",
            devices.len()
        );
    }

    let nulls = devices
        .iter()
        .flat_map(|d| d.values())
        .filter(|v| v.is_null())
        .count();
    assert_eq!(
        text.matches(": not reported").count(),
        nulls,
        "text and JSON disagree on unreported properties:\n{text}"
    );
    assert!(text.contains("Unavailable platforms:"), "{text}");
}

#[test]
fn json_devices_have_every_property() {
    let doc = json();
    assert!(doc["unavailable"].is_array(), "{doc:#}");
    for u in doc["unavailable"].as_array().into_iter().flatten() {
        assert!(u["backend"].is_string() && u["reason"].is_string(), "{u}");
    }
    for p in doc["platforms"].as_array().into_iter().flatten() {
        assert!(p["name"].is_string() && p["backend"].is_string(), "{p}");
    }
    let devices = devices(&doc);
    assert!(
        devices.iter().any(|d| d["backend"] == "host"),
        "no host device:\n{doc:#}"
    );
    for dev in &devices {
        for key in PROPERTIES {
            assert!(dev.contains_key(key), "device lacks `{key}`: {dev:?}");
        }
        assert_eq!(dev.len(), PROPERTIES.len(), "unexpected keys: {dev:?}");
        assert!(
            dev["memory"].is_u64() && dev["compute_units"].is_u64(),
            "{dev:?}"
        );
        for key in ["max_block", "max_grid"] {
            let dims = &dev[key];
            assert!(
                dims.is_null() || dims.as_array().is_some_and(|a| a.len() == 3),
                "`{key}` is neither null nor three numbers: {dims}"
            );
        }
    }
}

#[test]
fn vulkan_device_reports_lavapipe_limits() {
    if !cfg!(feature = "vulkan") {
        println!("SKIP: offload-info was built without the `vulkan` feature");
        return;
    }
    let doc = json();
    let devices = devices(&doc);
    let lavapipe = devices.iter().any(|d| {
        d["name"]
            .as_str()
            .is_some_and(|n| n.to_ascii_lowercase().contains("llvmpipe"))
    });
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !lavapipe && !ci {
        let why = doc["unavailable"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|u| u["backend"] == "vulkan")
            .and_then(|u| u["reason"].as_str())
            .unwrap_or("the Vulkan platform opened without one");
        println!("SKIP: no lavapipe (llvmpipe) Vulkan device ({why}); set CI=true to require it");
        return;
    }
    let vulkan: Vec<_> = devices
        .iter()
        .filter(|d| d["backend"] == "vulkan")
        .collect();
    assert!(
        vulkan.iter().any(|d| d["vendor_id"] == MESA_VENDOR_ID),
        "no Vulkan device with vendor id {MESA_VENDOR_ID:#x}:\n{doc:#}"
    );
    for dev in vulkan {
        for key in ["max_block_threads", "max_grid", "shared_memory"] {
            assert!(!dev[key].is_null(), "Vulkan device lacks `{key}`: {dev:?}");
        }
    }
}

#[test]
fn unknown_argument_prints_usage_and_exits_2() {
    let out = offload_info(&["--no-such-flag"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "stdout is not empty");
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
    assert!(stderr.contains("Usage: offload-info"), "{stderr}");
}

#[test]
fn help_prints_usage() {
    let stdout = success(&["--help"]);
    assert!(stdout.starts_with("Usage: offload-info"), "{stdout}");
}
