//! This machine's CPU, named for the compile cache.
//!
//! Host C is compiled with `-march=native` (compiler.rs), so a compiled program is code for
//! this CPU: another CPU may lack an instruction it uses. The compile cache can be shared
//! by machines (a home directory on NFS across a cluster's nodes), so the CPU is part of
//! every host program's key: its [`fingerprint`] joins the compiler's target. It is what
//! the kernel reports for the first CPU in `/proc/cpuinfo` — vendor, family, model,
//! stepping, model name and the feature flags (x86), or implementer, architecture, variant,
//! part and features (AArch64) — so two machines share cache entries only when the
//! compiler would see the same CPU. Where that file cannot be read there is no fingerprint,
//! and the compiler does not get `-march=native`.

use std::io::Read;
use std::sync::OnceLock;

/// The fields of `/proc/cpuinfo` that name a CPU and what it can run.
const FIELDS: &[&str] = &[
    // x86
    "vendor_id",
    "cpu family",
    "model",
    "model name",
    "stepping",
    "flags",
    // AArch64
    "CPU implementer",
    "CPU architecture",
    "CPU variant",
    "CPU part",
    "CPU revision",
    "Features",
];

/// `/proc/cpuinfo` is read this far: the first CPU's block, which is all the fingerprint
/// uses (the file repeats it for every CPU, and a many-core machine's is long).
const READ: u64 = 16 << 10;

/// This machine's CPU: the model name (when the kernel gives one) and a hash of the
/// identifying fields, e.g. `AMD EPYC 7B13 #5f0c27d94a3e61b2`. `None` where
/// `/proc/cpuinfo` cannot be read or names nothing. Read once per process.
pub(crate) fn fingerprint() -> Option<&'static str> {
    static CPU: OnceLock<Option<String>> = OnceLock::new();
    CPU.get_or_init(|| {
        let mut text = String::new();
        std::fs::File::open("/proc/cpuinfo")
            .ok()?
            .take(READ)
            .read_to_string(&mut text)
            .ok()?;
        of(&text)
    })
    .as_deref()
}

/// The fingerprint of a `/proc/cpuinfo` text: its first block's identifying fields.
fn of(cpuinfo: &str) -> Option<String> {
    let first = cpuinfo.split("\n\n").next().unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut name = None;
    let mut found = false;
    for line in first.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if !FIELDS.contains(&key) {
            continue;
        }
        found = true;
        if key == "model name" {
            name = Some(value);
        }
        // FNV-1a over `key=value;`, stable across processes and builds.
        for &b in key
            .as_bytes()
            .iter()
            .chain(b"=")
            .chain(value.as_bytes())
            .chain(b";")
        {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    found.then(|| match name {
        Some(name) => format!("{name} #{hash:016x}"),
        None => format!("#{hash:016x}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
        model\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\ncpu MHz\t\t: 2445.406\n\
        flags\t\t: fpu sse2 avx avx2\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n";

    #[test]
    fn names_the_first_cpu_by_its_identifying_fields() {
        let cpu = of(X86).unwrap();
        assert!(cpu.starts_with("AMD EPYC #"), "{cpu}");
        // The clock is not identity: another reading gives the same fingerprint.
        assert_eq!(of(&X86.replace("2445.406", "3000.000")).unwrap(), cpu);
        // One feature more or less is another CPU.
        assert_ne!(of(&X86.replace("avx avx2", "avx")).unwrap(), cpu);
        assert_ne!(
            of(&X86.replace("model\t\t: 1", "model\t\t: 17")).unwrap(),
            cpu
        );
    }

    #[test]
    fn aarch64_has_no_model_name() {
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\n\
            CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n\
            CPU part\t: 0xd40\nCPU revision\t: 1\n";
        let cpu = of(arm).unwrap();
        assert!(cpu.starts_with('#'), "{cpu}");
        assert_ne!(of(&arm.replace("sve", "sve2")).unwrap(), cpu);
    }

    #[test]
    fn nothing_identifying_is_no_fingerprint() {
        assert_eq!(of(""), None);
        assert_eq!(of("processor\t: 0\nBogoMIPS\t: 50.00\n"), None);
    }

    #[test]
    fn this_machine_has_one_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(fingerprint().is_some());
        }
    }
}
