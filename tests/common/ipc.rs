//! What the IPC tests share: the backends they run on, and what a process has mapped.

use offload::{BackendKind, Device, Offload};

/// The backends to run on: host, and Vulkan where the build has it and a driver is found
/// (under `CI=true` a missing driver fails: CI installs lavapipe).
pub fn kinds() -> Vec<BackendKind> {
    let mut kinds = vec![BackendKind::Host];
    if cfg!(feature = "vulkan") {
        let rt = Offload::init().unwrap();
        if rt
            .devices()
            .unwrap()
            .iter()
            .any(|d| d.backend() == BackendKind::Vulkan)
        {
            kinds.push(BackendKind::Vulkan);
        } else {
            let why = rt.unavailable().unwrap();
            assert!(!super::in_ci(), "CI=true: no Vulkan device ({why:?})");
            eprintln!("SKIPPED vulkan: no Vulkan device ({why:?})");
        }
        rt.shutdown().unwrap();
    }
    kinds
}

/// The runtime's first device of `kind`.
pub fn device(rt: &Offload, kind: BackendKind) -> Device {
    rt.devices()
        .unwrap()
        .into_iter()
        .find(|d| d.backend() == kind)
        .unwrap()
}

/// Offload's memfd mappings in `pid`'s address space (host memory shared through IPC).
pub fn memfd_mappings(pid: u32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains(offload::host::MEMFD_NAME))
        .count()
}
