//! Programs from WGSL source (the `wgsl` feature): this module owns the Vulkan backend's
//! compiler — what [`Device::compiler`](offload_core::hal::Device::compiler) reports for
//! `Language::Wgsl` (the compile cache's identity and target) and what
//! [`Device::compile`](offload_core::hal::Device::compile) does with the text.
//!
//! naga compiles in process, in five steps, each of which can refuse the source with
//! `Error::Compile` and naga's diagnostics (where naga knows the span, and it does for
//! every parse error: `wgsl:LINE:COLUMN`, with the offending source line underlined):
//!
//! 1. **Parse** (`naga::front::wgsl`). Push constants are `var<immediate>` in naga 28; the
//!    older spelling `var<push_constant>` is refused by naga as an unknown address space,
//!    and offload adds a hint naming `var<immediate>` to that error.
//! 2. **Validate** (`naga::valid::Validator`, every `ValidationFlags` check, with only the
//!    `IMMEDIATES` capability: push constants, spelled `var<immediate>` in naga 28). The
//!    module is type-checked, so the SPIR-V that reaches the driver is type-correct:
//!    the hole a hand-written SPIR-V image leaves open (offload's own SPIR-V check is
//!    structural only, and a well-formed but type-incorrect module can crash a driver) is
//!    closed for WGSL. Features the device does not enable (64-bit or 16-bit types,
//!    subgroups, ray queries, …) are refused here, and the writer may declare no SPIR-V
//!    capability but `Shader`.
//! 3. **Overrides**: the options set pipeline-overridable constants (`NAME=VALUE`, see
//!    [`compile`]), which naga folds into plain constants (a workgroup size may be one).
//! 4. **Check bounds** (`checks.rs`): every load, store and atomic through an index into
//!    an array, vector or matrix — in a storage buffer, workgroup memory or a variable —
//!    is compared with its length (`arrayLength` for runtime arrays); an out-of-range read
//!    gives zero and an out-of-range write or atomic does nothing. With the bounds report
//!    ([`crate::VulkanOptions::bounds_report`]) the first such access of a launch is
//!    also recorded for the queue's next sync.
//! 5. **Write SPIR-V** (`naga::back::spv`) with naga's `Restrict` policy under those
//!    checks: every index is clamped into its array as well, so no access leaves its array
//!    even where the checks do not look (an array held in a value). Together with the
//!    launch check that every bound buffer holds at least its binding's minimum size (the
//!    block's fixed members and one runtime-array element; see `spirv.rs`), this is what
//!    makes every memory access of a WGSL kernel provably in bounds of its arguments: an
//!    out-of-range index never reaches memory beyond its buffer, nor valid data inside it.
//!    (naga's own `ReadZeroSkipWrite` policy, used before, gives the same reads and writes
//!    but cannot write an atomic on an indexed element at all; `Restrict` alone clamps a
//!    stray write onto the array's last element.) Loops are bounded
//!    (`force_loop_bounding`) and workgroup memory is zeroed as WGSL requires. The whole
//!    module is written: every `@compute` entry point is a kernel.
//!
//! The SPIR-V version is what the device accepts, at most 1.3 (Vulkan 1.0: 1.0; 1.1 and
//! later: 1.3), so one compile serves every Vulkan 1.1+ device. The result is an
//! ordinary SPIR-V image that [`Device::load`](offload_core::hal::Device::load)
//! validates and reflects like any other.

/// No compiler without the `wgsl` feature: the core answers `Error::Unsupported`.
#[cfg(not(feature = "wgsl"))]
pub(crate) fn compiler(api: u32, report: bool) -> Option<offload_core::CompilerId> {
    let _ = (api, report);
    None
}

#[cfg(feature = "wgsl")]
pub(crate) use with_naga::{compile, compiler};

#[cfg(feature = "wgsl")]
mod checks;

#[cfg(feature = "wgsl")]
mod with_naga {
    use std::collections::BTreeMap;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::OnceLock;

    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};
    use offload_core::{BackendKind, CompilerId, Error, Language, Result, Source};

    use crate::spirv::{ForVulkan, SpirvVersion};

    /// The SPIR-V version compiled for a device of Vulkan version `api`: the newest it
    /// accepts, at most 1.3.
    pub(super) fn target(api: u32) -> SpirvVersion {
        SpirvVersion::for_vulkan(api).min(SpirvVersion { major: 1, minor: 3 })
    }

    /// The naga release series this crate is built against (Cargo.toml: `naga = "28"`).
    const NAGA: &str = "naga 28";

    /// The writer settings that change naga's output (all fixed but the report), for the
    /// cache key.
    const SETTINGS: &str = "bounds=offload-checks+restrict, caps=Shader, debug-names, \
                            loop-bounding, workgroup-zeroing=polyfill";

    /// A kernel whose SPIR-V fingerprints the exact naga build: a patch release that
    /// writes other code gives another identity, so the compile cache compiles again.
    const PROBE: &str = "
        struct Args { n: u32, a: f32 }
        @group(0) @binding(0) var<storage, read_write> buf: array<f32>;
        @group(0) @binding(1) var<storage, read_write> count: atomic<u32>;
        var<immediate> args: Args;
        var<workgroup> tile: array<f32, 64>;
        @compute @workgroup_size(64)
        fn probe(@builtin(global_invocation_id) g: vec3<u32>,
                 @builtin(local_invocation_index) l: u32) {
            var acc = vec4<f32>(0.0);
            for (var k = 0u; k < args.n; k++) { acc[k % 4u] += buf[g.x * k + 3u] / args.a; }
            tile[l] = acc.x + acc.w;
            workgroupBarrier();
            if g.x < args.n { buf[g.x] = tile[63u - l] + f32(i32(args.n) / -1); }
            atomicAdd(&count, select(0u, 1u, any(acc > vec4(1.0))));
        }";

    /// Appended to naga's "unknown address space: `push_constant`": wgpu and older naga
    /// spell push constants `var<push_constant>`, naga 28 `var<immediate>`.
    const PUSH_CONSTANT_HINT: &str = "hint: naga 28 spells push constants \
        `var<immediate>` (older naga and wgpu releases: `var<push_constant>`): write \
        `var<immediate> args: Args;` — offload passes its members as the kernel's arguments \
        after the buffers\n";

    fn error(log: String) -> Error {
        Error::Compile {
            backend: BackendKind::Vulkan,
            call: "",
            language: Language::Wgsl,
            log,
        }
    }

    /// `naga 28 (<settings>, report=on|off; build <fingerprint>)` with target `spirv-1.x`;
    /// `report`: whether kernels record their first out-of-range access (the bounds
    /// report, `VulkanOptions::bounds_report`).
    pub(crate) fn compiler(api: u32, report: bool) -> Option<CompilerId> {
        static IDENTITY: [OnceLock<String>; 2] = [OnceLock::new(), OnceLock::new()];
        let identity = IDENTITY[usize::from(report)].get_or_init(|| {
            let probe = Source::wgsl(PROBE);
            // FNV-1a over the probe's words at the newest target: stable across Rust
            // releases and processes (unlike the standard library's hasher).
            let fingerprint = compile_words(&probe, SpirvVersion { major: 1, minor: 3 }, report)
                .map(|words| {
                    words
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                        })
                })
                .unwrap_or(0);
            let report = if report { "on" } else { "off" };
            format!("{NAGA} ({SETTINGS}, report={report}; build {fingerprint:016x})")
        });
        Some(CompilerId::new(
            identity.clone(),
            format!("spirv-{}", target(api)),
        ))
    }

    /// Compiles WGSL `source` to a SPIR-V image (words in host order) for a device of
    /// Vulkan version `api`; see the module docs for the steps.
    ///
    /// Options: each is `NAME=VALUE`, setting the pipeline-overridable constant `NAME`
    /// (`override NAME: u32 = 64;`, or its `@id(n)` as `n=VALUE`) to `VALUE`, a number
    /// or `true`/`false`. Any other option, or a name the source does not declare, is
    /// `Error::Compile` saying so. `report`: add the bounds report (`report.rs`).
    pub(crate) fn compile(source: &Source, api: u32, report: bool) -> Result<Vec<u8>> {
        if source.language() != Language::Wgsl {
            return Err(Error::Unsupported {
                backend: BackendKind::Vulkan,
                call: "",
                reason: format!(
                    "the Vulkan backend compiles WGSL, not {}",
                    source.language()
                ),
            });
        }
        let words = compile_words(source, target(api), report)?;
        Ok(words.iter().flat_map(|w| w.to_ne_bytes()).collect())
    }

    fn compile_words(source: &Source, version: SpirvVersion, report: bool) -> Result<Vec<u32>> {
        // naga is a large parser and code generator; a bug in it that panics must not
        // unwind through the compile cache's lock into the caller.
        catch_unwind(AssertUnwindSafe(|| naga_compile(source, version, report))).unwrap_or_else(
            |panic| {
                Err(error(format!(
                    "naga panicked compiling this source: {}",
                    offload_core::hal::panic_text(&*panic)
                )))
            },
        )
    }

    fn naga_compile(source: &Source, version: SpirvVersion, report: bool) -> Result<Vec<u32>> {
        let text = source.text();
        let overrides = parse_options(source.options())?;
        let module = naga::front::wgsl::parse_str(text).map_err(|e| {
            let mut log = e.emit_to_string(text);
            if e.message() == "unknown address space: `push_constant`" {
                log.push_str(PUSH_CONSTANT_HINT);
            }
            error(log)
        })?;
        let info = Validator::new(ValidationFlags::all(), Capabilities::IMMEDIATES)
            .validate(&module)
            .map_err(|e| {
                let mut log = e.emit_to_string(text);
                if log.contains("Capabilities::") {
                    log.push_str(
                        "offload's Vulkan devices take WGSL with only push constants \
                         (`var<immediate>`) beyond the core language: no 64- or 16-bit \
                         types, subgroups or other optional features\n",
                    );
                }
                error(log)
            })?;
        if !module
            .entry_points
            .iter()
            .any(|ep| ep.stage == naga::ShaderStage::Compute)
        {
            return Err(error(
                "the source declares no `@compute` entry point: a Vulkan kernel is a \
                 `@compute @workgroup_size(..) fn`"
                    .to_string(),
            ));
        }
        let (module, info) = apply_overrides(&module, &info, &overrides)?;
        let (module, info, plan) = checked(module.into_owned(), &info, report)?;
        // Under offload's checks (`checks.rs`), naga's `Restrict`: every index clamped into
        // its array, so memory stays inside the arrays even where the checks do not look.
        let policy = BoundsCheckPolicy::Restrict;
        let options = spv::Options {
            lang_version: (version.major, version.minor),
            // Fixed flags (naga's default adds debug names only in its debug builds, so
            // the output would depend on the build profile): names for drivers' and the
            // validation layer's messages, nothing for graphics.
            flags: spv::WriterFlags::DEBUG,
            // Without a binding map every resource keeps its own `@group`/`@binding`
            // (which WGSL requires of every buffer).
            fake_missing_bindings: true,
            capabilities: Some([spv::Capability::Shader].into_iter().collect()),
            bounds_check_policies: BoundsCheckPolicies {
                index: policy,
                buffer: policy,
                image_load: policy,
                binding_array: policy,
            },
            zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Polyfill,
            force_loop_bounding: true,
            ..spv::Options::default()
        };
        let mut words = spv::write_vec(&module, &info, &options, None)
            .map_err(|e| error(format!("naga could not write SPIR-V {version}: {e}")))?;
        // Turns on the launch check of the bindings' minimum sizes (a block's fixed
        // members must be there for the checks above to hold), and says where the report
        // is bound.
        let report = plan.map(|p| crate::spirv::report_marker(p.binding, &p.entries));
        crate::spirv::mark_bounds_checked(&mut words, report.as_deref());
        Ok(words)
    }

    /// The module with offload's bounds checks (and the report, with `report`), validated
    /// again, and the report's plan where it has one.
    fn checked(
        mut module: naga::Module,
        info: &ModuleInfo,
        report: bool,
    ) -> Result<(naga::Module, ModuleInfo, Option<super::checks::Plan>)> {
        let bug = |what: String| {
            error(format!(
                "offload's bounds-check pass failed on this module (an offload bug; please \
                 report it with the source): {what}"
            ))
        };
        let plan = super::checks::instrument(&mut module, info, report, crate::spirv::MAX_BINDING)
            .map_err(bug)?;
        let info = Validator::new(ValidationFlags::all(), Capabilities::IMMEDIATES)
            .validate(&module)
            .map_err(|e| bug(e.emit_to_string("")))?;
        Ok((module, info, plan))
    }

    /// The options as pipeline constants (`NAME=VALUE`).
    fn parse_options(options: &[String]) -> Result<BTreeMap<String, f64>> {
        let mut constants = BTreeMap::new();
        for option in options {
            let parsed = option.split_once('=').and_then(|(name, value)| {
                let name = name.trim();
                let value = match value.trim() {
                    "true" => 1.0,
                    "false" => 0.0,
                    v => v.parse::<f64>().ok().filter(|v| v.is_finite())?,
                };
                let ident =
                    name.chars().all(|c| c.is_alphanumeric() || c == '_') && !name.is_empty();
                ident.then(|| (name.to_string(), value))
            });
            let Some((name, value)) = parsed else {
                return Err(error(format!(
                    "unknown option {option:?}: the WGSL compiler (naga) takes only \
                     `NAME=VALUE`, which sets the pipeline-overridable constant NAME \
                     (`override NAME: u32;` in the source, or its @id) to VALUE (a finite \
                     number, `true` or `false`)"
                )));
            };
            constants.insert(name, value);
        }
        Ok(constants)
    }

    /// Folds the module's overrides into constants with the options' values (and their
    /// defaults); a name the source does not declare is an error.
    fn apply_overrides<'a>(
        module: &'a naga::Module,
        info: &'a ModuleInfo,
        constants: &BTreeMap<String, f64>,
    ) -> Result<(
        std::borrow::Cow<'a, naga::Module>,
        std::borrow::Cow<'a, ModuleInfo>,
    )> {
        let declared: Vec<String> = module
            .overrides
            .iter()
            .flat_map(|(_, o)| o.name.iter().cloned().chain(o.id.map(|id| id.to_string())))
            .collect();
        for name in constants.keys() {
            if !declared.contains(name) {
                let known = if declared.is_empty() {
                    "it declares none".to_string()
                } else {
                    format!("it declares {}", declared.join(", "))
                };
                return Err(error(format!(
                    "option {name}=…: the source declares no pipeline-overridable constant \
                     `{name}` ({known})"
                )));
            }
        }
        let pipeline: naga::back::PipelineConstants =
            constants.iter().map(|(k, v)| (k.clone(), *v)).collect();
        naga::back::pipeline_constants::process_overrides(module, info, None, &pipeline)
            .map_err(|e| error(format!("pipeline-overridable constants: {e}")))
    }
}

#[cfg(all(test, feature = "wgsl"))]
mod tests {
    use offload_core::{Error, Source};

    use super::with_naga::{compile, compiler, target};
    use crate::spirv::{SpirvVersion, reflect};

    const V1_0: u32 = ash::vk::API_VERSION_1_0;
    const V1_3: u32 = ash::vk::API_VERSION_1_3;

    #[test]
    fn the_target_is_what_the_device_takes_at_most_spirv_1_3() {
        let v = |major, minor| SpirvVersion { major, minor };
        assert_eq!(target(V1_0), v(1, 0));
        assert_eq!(target(ash::vk::API_VERSION_1_1), v(1, 3));
        assert_eq!(target(V1_3), v(1, 3));
        assert_eq!(compiler(V1_0, true).unwrap().target, "spirv-1.0");
        assert_eq!(compiler(V1_3, true).unwrap().target, "spirv-1.3");
    }

    /// The probe compiles (a failure would leave the identity without its fingerprint).
    #[test]
    fn the_identity_fingerprints_naga_with_the_probe() {
        let id = compiler(V1_3, true).unwrap().identity;
        assert!(
            id.starts_with("naga 28 (bounds=offload-checks+restrict"),
            "{id}"
        );
        assert!(!id.ends_with("build 0000000000000000)"), "{id}");
    }

    #[test]
    fn the_output_is_marked_validated_spirv_for_both_targets() {
        let text = include_str!("../../tests/fixtures/kernels.wgsl");
        for (api, minor) in [(V1_0, 0), (V1_3, 3)] {
            let image = compile(&Source::wgsl(text), api, true).unwrap();
            let r = reflect(&image, SpirvVersion { major: 1, minor }, "t").unwrap();
            assert_eq!(r.version, SpirvVersion { major: 1, minor });
            assert!(r.bounds_checked);
            let mut names: Vec<&str> = r.entry_points.iter().map(|e| e.name.as_str()).collect();
            names.sort_unstable();
            assert_eq!(names, ["add_one", "fill", "noop"]);
            for e in &r.entry_points {
                assert!(e.min_sizes.iter().all(|&m| m == 4), "{e:?}");
            }
        }
    }

    /// The checks rebuild every function: a module with every kind of statement and
    /// expression they meet (loops with `continuing` and `break if`, a switch, early
    /// returns, helper functions with pointer and value parameters, local initialisers,
    /// composite loads, atomics with and without their result, workgroup and private
    /// arrays, a uniform block) compiles, with and without the report, and the report is
    /// bound after the last binding and hidden from the parameters.
    #[test]
    fn the_checks_keep_every_kind_of_function_valid() {
        let text = "
struct P { a: u32, b: array<u32, 3> }
struct U { k: vec4<u32>, m: mat4x4<f32> }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> ps: array<P>;
@group(0) @binding(2) var<storage, read_write> c: array<atomic<i32>>;
@group(0) @binding(3) var<uniform> u: U;
var<workgroup> w: array<atomic<u32>, 8>;
var<private> pr: array<f32, 4>;
fn bump(p: ptr<function, array<u32, 4>>, i: u32) -> u32 { (*p)[i] += 1u; return (*p)[i]; }
fn pick(v: vec4<u32>, i: i32) -> u32 { return v[i]; }
@compute @workgroup_size(8)
fn zoo(@builtin(local_invocation_index) l: u32, @builtin(global_invocation_id) g: vec3<u32>) {
    var acc = array<u32, 4>(1u, 2u, 3u, 4u);
    let named = ps[g.x];
    if g.x > 100u { return; }
    var i = 0u;
    loop {
        if i >= out[0] { break; }
        acc[i % 5u] += bump(&acc, i) + named.b[i];
        continuing { i += 1u; break if i > 8u; }
    }
    switch l { case 0u: { out[g.x + 1u] = pick(u.k, i32(l) - 1); } default: { pr[l] = u.m[l % 5u][1]; } }
    let old = atomicAdd(&c[g.x * 7u], -1);
    atomicMax(&c[l], old);
    let r = atomicCompareExchangeWeak(&c[g.y], 0, 1);
    atomicOr(&w[l + 1u], 2u);
    workgroupBarrier();
    out[l] = atomicLoad(&w[l]) + u32(r.exchanged) + u32(pr[l % 4u]) + acc[l & 3u];
}";
        for report in [false, true] {
            let image = compile(&Source::wgsl(text), V1_3, report).unwrap();
            let r = reflect(&image, SpirvVersion { major: 1, minor: 3 }, "t").unwrap();
            assert!(r.bounds_checked);
            let e = &r.entry_points[0];
            assert_eq!(e.bindings, [0, 1, 2, 3], "{e:?}");
            assert_eq!(r.report.is_some(), report);
            assert_eq!(e.report_binding, report.then_some(4));
            spirv_val(&image);
        }
    }

    /// Runs `spirv-val` (SPIRV-Tools) on `image` where it is installed; says so where not.
    fn spirv_val(image: &[u8]) {
        let path = std::env::temp_dir().join(format!("offload-checks-{}.spv", std::process::id()));
        std::fs::write(&path, image).unwrap();
        let run = std::process::Command::new("spirv-val")
            .args(["--target-env", "vulkan1.1"])
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        match run {
            Ok(out) => assert!(
                out.status.success(),
                "spirv-val: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("spirv-val not run (install spirv-tools): {e}"),
        }
    }

    /// wgpu's `var<push_constant>` is naga 28's `var<immediate>`: the error says so.
    #[test]
    fn push_constant_is_refused_with_a_hint_naming_immediate() {
        let text = "struct A { n: u32 }\nvar<push_constant> args: A;\n\
                    @group(0) @binding(0) var<storage, read_write> b: array<u32>;\n\
                    @compute @workgroup_size(1) fn f() { b[0] = args.n; }";
        let Err(Error::Compile { log, .. }) = compile(&Source::wgsl(text), V1_3, true) else {
            panic!("var<push_constant> compiled");
        };
        assert!(log.contains("unknown address space"), "{log}");
        assert!(log.contains("wgsl:2:"), "{log}");
        assert!(log.contains("`var<immediate>`"), "{log}");
        // Other unknown address spaces get no such hint.
        let other = text.replace("push_constant", "constant");
        let Err(Error::Compile { log, .. }) = compile(&Source::wgsl(&other), V1_3, true) else {
            panic!("var<constant> compiled");
        };
        assert!(!log.contains("var<immediate>"), "{log}");
    }

    #[test]
    fn other_languages_are_not_compiled_here() {
        let e = compile(&Source::c("int x;"), V1_3, true).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    }
}
