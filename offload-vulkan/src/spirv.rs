//! SPIR-V validation and reflection for Vulkan, before the driver sees a module (P4).
//!
//! The flavour-independent reading — the header (magic, version, id bound, schema), every
//! instruction's word count, the module's structure (one memory model, functions properly
//! closed, declarations before the first function) and the tables of types, constants,
//! decorations, globals and functions — is `offload_spirv::module`, shared with the Level
//! Zero backend. This file owns what is Vulkan's: refusing a module that is not a Vulkan
//! compute shader (an OpenCL kernel, no `Shader` capability, no `GLCompute` entry point, a
//! version the device does not take), and what offload needs to launch each `GLCompute`
//! entry point: its workgroup size (`LocalSize`, `LocalSizeId` or the `WorkgroupSize`
//! built-in, literal or specialisable), the storage buffers it uses (descriptor set and
//! binding) and the leaves of its push-constant block (offset and size). Anything
//! malformed is `Error::InvalidBinary` with the reason; nothing here panics on any input,
//! and nothing here talks to the driver.
//!
//! Which globals an entry point uses: from SPIR-V 1.4 on, its `OpEntryPoint` interface lists
//! every global variable it references (the specification requires it); before 1.4 the
//! interface lists only inputs and outputs, so the functions reachable from the entry point
//! are scanned for the instructions that take a pointer operand.

use std::ops::Deref;

use offload_core::{BackendKind, ParamKind, Result, ScalarType};
use offload_spirv::module::{op::*, value::*};
use offload_spirv::{Constant, Context, EntryDecl, HEADER_WORDS, Module, Type};

/// The largest binding number offload binds: drivers size a descriptor set layout by its
/// largest binding (lavapipe crashes on one near `u32::MAX`).
pub(crate) const MAX_BINDING: u32 = 4095;
/// How many type nodes one size or push-constant walk may visit. A struct may name the same
/// member type many times at every level, so a walk of 16 levels would otherwise visit up
/// to (members)^16 nodes: a few kilobytes of SPIR-V could keep it busy for ever (and push
/// as many leaves). Real push-constant blocks and block members have a few dozen.
const TYPE_BUDGET: u32 = 1 << 16;

/// Takes one visit from a walk's budget ([`TYPE_BUDGET`]).
fn spend(budget: &mut u32) -> std::result::Result<(), String> {
    *budget = budget
        .checked_sub(1)
        .ok_or_else(|| format!("a type with more than {TYPE_BUDGET} nested members"))?;
    Ok(())
}

/// The `OpSourceExtension` that marks a module as compiled by offload from WGSL with its
/// bounds checks (`wgsl/checks.rs`: an out-of-range read gives zero, an out-of-range write
/// does nothing): its bindings' minimum sizes are then checked at every launch. A
/// hand-written module may carry it too; it only adds checks.
pub const BOUNDS_CHECKED: &str = "offload: bounds-checked (offload checks over naga Restrict)";

/// How the `OpSourceExtension` begins that says where a WGSL kernel's bounds report is
/// bound (`wgsl/report.rs`): `offload: bounds report at binding B for a,b,c`, with the
/// entry points in the order the report numbers them. Read only beside
/// [`BOUNDS_CHECKED`]; the binding is then not a parameter: the queue binds its own
/// memory there.
pub const BOUNDS_REPORT: &str = "offload: bounds report at binding ";

/// Where a module's bounds report is bound, and its entry points as the report numbers
/// them (see [`BOUNDS_REPORT`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundsReport {
    pub binding: u32,
    pub entries: Vec<String>,
}

/// The [`BOUNDS_REPORT`] marker for a report at `binding` of a module with `entries`.
///
/// ```
/// let m = offload_vulkan::spirv::report_marker(7, &["a".into(), "b".into()]);
/// assert_eq!(m, "offload: bounds report at binding 7 for a,b");
/// ```
pub fn report_marker(binding: u32, entries: &[String]) -> String {
    format!("{BOUNDS_REPORT}{binding} for {}", entries.join(","))
}

/// Reads a [`BOUNDS_REPORT`] marker; `None` when it is malformed.
fn parse_report(marker: &str) -> Option<BoundsReport> {
    let rest = marker.strip_prefix(BOUNDS_REPORT)?;
    let (binding, entries) = rest.split_once(" for ")?;
    let binding = binding.parse().ok().filter(|&b| b <= MAX_BINDING)?;
    let entries = entries.split(',').map(str::to_string).collect();
    Some(BoundsReport { binding, entries })
}

const MODE_LOCAL_SIZE: u32 = spirv::ExecutionMode::LocalSize as u32;
const MODE_LOCAL_SIZE_ID: u32 = spirv::ExecutionMode::LocalSizeId as u32;
const BUILT_IN_WORKGROUP_SIZE: u32 = spirv::BuiltIn::WorkgroupSize as u32;

/// A SPIR-V version, `major.minor` (offload-spirv's).
pub use offload_spirv::Version as SpirvVersion;

/// The SPIR-V versions a Vulkan version takes.
pub trait ForVulkan {
    /// The newest SPIR-V a Vulkan version must accept (Vulkan 1.0: 1.0, 1.1: 1.3, 1.2: 1.5,
    /// 1.3 and later: 1.6).
    fn for_vulkan(api: u32) -> Self;
}

impl ForVulkan for SpirvVersion {
    fn for_vulkan(api: u32) -> SpirvVersion {
        let minor = match (
            ash::vk::api_version_major(api),
            ash::vk::api_version_minor(api),
        ) {
            (1, 0) => 0,
            (1, 1) => 3,
            (1, 2) => 5,
            _ => 6,
        };
        SpirvVersion { major: 1, minor }
    }
}

/// How an entry point declares its workgroup size, and so how offload can run it with
/// another block size (see the crate docs, "Launch geometry").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkgroupSize {
    /// `OpExecutionMode LocalSize x y z`; `at` is the index of the word holding `x`, so a
    /// copy of the module with other literals there runs another size.
    Literal { size: [u32; 3], at: usize },
    /// The `WorkgroupSize` built-in or `LocalSizeId` made of specialisation constants:
    /// each dimension with a `SpecId` can be set when the pipeline is made.
    Spec {
        size: [u32; 3],
        ids: [Option<u32>; 3],
    },
    /// Constants that cannot be changed: only this size runs.
    Fixed { size: [u32; 3] },
}

impl WorkgroupSize {
    /// The size the module declares.
    pub fn declared(&self) -> [u32; 3] {
        match *self {
            WorkgroupSize::Literal { size, .. }
            | WorkgroupSize::Spec { size, .. }
            | WorkgroupSize::Fixed { size } => size,
        }
    }
}

/// One member of a push-constant block: a by-value parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushLeaf {
    pub offset: u32,
    pub size: u32,
    /// What it takes (checked at launch): `Typed` for a plain number, `Pod` for a vector,
    /// matrix, array or struct, `Scalar(size)` for anything else (a 16-bit float, a
    /// device address).
    pub kind: ParamKind,
}

/// Element types as WGSL names them, in [`ScalarType`]'s order, then `f16` (which has no
/// `ScalarType`): the index is an element "key".
macro_rules! of_each {
    ($p:literal, $s:literal) => {
        [
            concat!($p, "u8", $s),
            concat!($p, "i8", $s),
            concat!($p, "u16", $s),
            concat!($p, "i16", $s),
            concat!($p, "u32", $s),
            concat!($p, "i32", $s),
            concat!($p, "f32", $s),
            concat!($p, "u64", $s),
            concat!($p, "i64", $s),
            concat!($p, "f64", $s),
            concat!($p, "f16", $s),
        ]
    };
}
const ELEMENTS: usize = 11;
const KEY_TYPES: [ScalarType; ELEMENTS - 1] = [
    ScalarType::U8,
    ScalarType::I8,
    ScalarType::U16,
    ScalarType::I16,
    ScalarType::U32,
    ScalarType::I32,
    ScalarType::F32,
    ScalarType::U64,
    ScalarType::I64,
    ScalarType::F64,
];
/// `vecN<T>` for N = 2, 3, 4.
static VECTOR_NAMES: [[&str; ELEMENTS]; 3] = [
    of_each!("vec2<", ">"),
    of_each!("vec3<", ">"),
    of_each!("vec4<", ">"),
];
/// `matCxR<T>` for C, R = 2, 3, 4, at `(C - 2) * 3 + R - 2`.
static MATRIX_NAMES: [[&str; ELEMENTS]; 9] = [
    of_each!("mat2x2<", ">"),
    of_each!("mat2x3<", ">"),
    of_each!("mat2x4<", ">"),
    of_each!("mat3x2<", ">"),
    of_each!("mat3x3<", ">"),
    of_each!("mat3x4<", ">"),
    of_each!("mat4x2<", ">"),
    of_each!("mat4x3<", ">"),
    of_each!("mat4x4<", ">"),
];
static ARRAY_NAMES: [&str; ELEMENTS] = of_each!("array of ", "");
static STRUCT_NAMES: [&str; ELEMENTS] = of_each!("struct of ", "");

/// What the element walk of a composite found: no scalar yet, one element key for all,
/// or several (or unknown) ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elements {
    None,
    One(usize),
    Mixed,
}

impl Elements {
    fn add(&mut self, key: Option<usize>) {
        *self = match (*self, key) {
            (Elements::None, Some(k)) => Elements::One(k),
            (Elements::One(a), Some(b)) if a == b => Elements::One(a),
            _ => Elements::Mixed,
        };
    }

    fn key(self) -> Option<usize> {
        match self {
            Elements::One(k) => Some(k),
            _ => None,
        }
    }
}

/// What offload needs to know about one `GLCompute` entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPoint {
    pub name: String,
    pub workgroup: WorkgroupSize,
    /// Storage- and uniform-buffer bindings of descriptor set 0, ascending: argument `i`
    /// binds to `bindings[i]`.
    pub bindings: Vec<u32>,
    /// Whether each of `bindings` is a uniform buffer (`UNIFORM_BUFFER`); otherwise it is
    /// a storage buffer.
    pub uniform: Vec<bool>,
    /// In a module marked [`BOUNDS_CHECKED`], the fewest bytes the buffer (or range) bound
    /// to each of `bindings` must hold: its block's fixed members, and one element of a
    /// trailing runtime array (WebGPU's "minimum binding size"); 0 in other modules, and
    /// where the module does not say (a member without an `Offset`, a runtime array
    /// without an `ArrayStride`). Checked at every launch, so the block's fixed members
    /// are inside the binding and a runtime array's length is what the buffer holds. A uniform
    /// block has no runtime array: its size is checked in every module.
    pub min_sizes: Vec<u64>,
    /// The `ArrayStride` of each of `bindings`' trailing runtime array, where its block
    /// ends in one (one element of it is in `min_sizes`): so that a refusal can say what
    /// the binding holds.
    pub array_strides: Vec<Option<u64>>,
    /// The push-constant members in declaration order: the by-value parameters.
    pub push: Vec<PushLeaf>,
    /// Bytes of push constants to cover (the end of the last member, rounded up to 4).
    pub push_size: u32,
    /// Whether the entry point uses workgroup (shared) memory.
    pub uses_workgroup_memory: bool,
    /// Why offload cannot launch this entry point, if it cannot (a valid module that uses
    /// what the argument convention has no place for: images, uniform buffers, set 1, …).
    pub unsupported: Option<String>,
    /// The binding of the module's bounds report, where this entry point uses it (not one
    /// of `bindings`: the queue binds its own memory there).
    pub report_binding: Option<u32>,
}

impl EntryPoint {
    /// The parameters: one buffer (storage or uniform) per binding, then one value per
    /// push-constant member.
    pub fn params(&self) -> Vec<ParamKind> {
        let buffers = self.uniform.iter().map(|&uniform| {
            if uniform {
                ParamKind::Uniform
            } else {
                ParamKind::Buffer
            }
        });
        buffers.chain(self.push.iter().map(|l| l.kind)).collect()
    }
}

/// A validated module: its words (host order) and its compute entry points.
#[derive(Clone, Debug)]
pub struct Reflection {
    pub words: Vec<u32>,
    pub version: SpirvVersion,
    pub entry_points: Vec<EntryPoint>,
    /// Whether the module carries the [`BOUNDS_CHECKED`] marker.
    pub bounds_checked: bool,
    /// Where its kernels record their first out-of-range access ([`BOUNDS_REPORT`]).
    pub report: Option<BoundsReport>,
}

impl Reflection {
    /// A copy of the module's words with entry point `entry`'s `LocalSize` set to `size`,
    /// or `None` if its size is not a `LocalSize` literal.
    pub fn with_local_size(&self, entry: usize, size: [u32; 3]) -> Option<Vec<u32>> {
        let WorkgroupSize::Literal { at, .. } = self.entry_points.get(entry)?.workgroup else {
            return None;
        };
        let mut words = self.words.clone();
        words.get_mut(at..at + 3)?.copy_from_slice(&size);
        Some(words)
    }
}

fn context(call: &'static str) -> Context {
    Context {
        backend: BackendKind::Vulkan,
        call,
    }
}

/// Validates `image` and reflects its compute entry points. `max` is the newest SPIR-V
/// version the device accepts.
pub fn reflect(image: &[u8], max: SpirvVersion, call: &'static str) -> Result<Reflection> {
    let ctx = context(call);
    let words = ctx.words(image)?;
    let header = ctx.header(&words)?;
    let version = header.version;
    if version > max {
        return Err(ctx.err(format!(
            "SPIR-V {version} is newer than the {max} this device's Vulkan version accepts"
        )));
    }
    let (entry_points, bounds_checked, report) = {
        let module = ctx.module(&words, header)?;
        Vk { m: &module }.run()?
    };
    Ok(Reflection {
        words,
        version,
        entry_points,
        bounds_checked,
        report,
    })
}

/// Marks a module as bounds-checked ([`BOUNDS_CHECKED`]), and where its bounds report is
/// bound ([`report_marker`]) if it has one: `OpSourceExtension`s inserted
/// before the first instruction of the debug section (after the capabilities,
/// extensions, imports, memory model, entry points and execution modes), where the
/// specification's layout puts it. `words` is a whole module, header included.
#[cfg_attr(not(feature = "wgsl"), allow(dead_code))]
pub fn mark_bounds_checked(words: &mut Vec<u32>, report: Option<&str>) {
    const PROLOGUE: [u16; 7] = [
        CAPABILITY,
        EXTENSION,
        EXT_INST_IMPORT,
        MEMORY_MODEL,
        ENTRY_POINT,
        EXECUTION_MODE,
        EXECUTION_MODE_ID,
    ];
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, op) = ((first >> 16) as usize, first as u16);
        if count == 0 || !PROLOGUE.contains(&op) {
            break;
        }
        at += count;
    }
    let mut inst = Vec::new();
    for text in std::iter::once(BOUNDS_CHECKED).chain(report) {
        let mut bytes = text.as_bytes().to_vec();
        bytes.resize(bytes.len() / 4 * 4 + 4, 0); // nul-terminated, whole words
        inst.push(((bytes.len() as u32 / 4 + 1) << 16) | u32::from(SOURCE_EXTENSION));
        inst.extend(
            bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
    }
    let at = at.min(words.len());
    words.splice(at..at, inst);
}

/// The Vulkan reflection of a read module.
struct Vk<'m, 'a> {
    m: &'m Module<'a>,
}

impl<'a> Deref for Vk<'_, 'a> {
    type Target = Module<'a>;
    fn deref(&self) -> &Module<'a> {
        self.m
    }
}

/// A `GLCompute` entry point as declared, with its workgroup-size execution modes.
struct Declared<'d> {
    decl: &'d EntryDecl,
    local_size: Option<([u32; 3], usize)>,
    local_size_id: Option<[u32; 3]>,
}

impl Deref for Declared<'_> {
    type Target = EntryDecl;
    fn deref(&self) -> &EntryDecl {
        self.decl
    }
}

impl Vk<'_, '_> {
    /// The compute entry points, whether the module is marked [`BOUNDS_CHECKED`], and its
    /// bounds report.
    fn run(&self) -> Result<(Vec<EntryPoint>, bool, Option<BoundsReport>)> {
        if self.capabilities.contains(&CAPABILITY_KERNEL) {
            return Err(self.err(
                "the module declares the Kernel capability: an OpenCL kernel, not a Vulkan \
                 compute shader",
            ));
        }
        if self.memory_model.1 == MEMORY_MODEL_OPENCL {
            return Err(self
                .err("the memory model is OpenCL: an OpenCL kernel, not a Vulkan compute shader"));
        }
        if !self.capabilities.contains(&CAPABILITY_SHADER) {
            return Err(self.err("no Shader capability: not a Vulkan shader module"));
        }
        let mut declared: Vec<Declared<'_>> = self
            .entry_points
            .iter()
            .filter(|e| e.model == MODEL_GL_COMPUTE)
            .map(|decl| Declared {
                decl,
                local_size: None,
                local_size_id: None,
            })
            .collect();
        if declared.is_empty() {
            return Err(self.err("the module has no GLCompute entry point"));
        }
        for mode in &self.modes {
            let Some(d) = declared.iter_mut().find(|d| d.function == mode.entry) else {
                continue; // a mode of a non-compute entry point
            };
            let inst = &mode.inst;
            match (mode.mode, inst.op) {
                (MODE_LOCAL_SIZE, EXECUTION_MODE) if inst.words.len() >= 6 => {
                    let size = [inst.words[3], inst.words[4], inst.words[5]];
                    d.local_size = Some((size, inst.at + 3));
                }
                (MODE_LOCAL_SIZE_ID, EXECUTION_MODE_ID) if inst.words.len() >= 6 => {
                    d.local_size_id = Some([inst.words[3], inst.words[4], inst.words[5]]);
                }
                (MODE_LOCAL_SIZE | MODE_LOCAL_SIZE_ID, _) => {
                    return Err(self.err(format!(
                        "execution mode {} of `{}` at word {} is malformed",
                        mode.mode, d.name, inst.at
                    )));
                }
                _ => {}
            }
        }
        let builtin_size = self
            .decorations
            .iter()
            .find(|(_, d)| d.builtin == Some(BUILT_IN_WORKGROUP_SIZE))
            .map(|(id, _)| *id);
        let version = self.header.version;
        let bounds_checked = self.source_extensions.iter().any(|s| s == BOUNDS_CHECKED);
        let mut entry_points = declared
            .iter()
            .map(|d| self.entry_point(d, builtin_size, version))
            .collect::<Result<Vec<_>>>()?;
        if !bounds_checked {
            for e in &mut entry_points {
                for (m, &uniform) in e.min_sizes.iter_mut().zip(&e.uniform) {
                    if !uniform {
                        *m = 0;
                    }
                }
            }
        }
        let report = bounds_checked
            .then(|| self.source_extensions.iter().find_map(|s| parse_report(s)))
            .flatten();
        if let Some(report) = &report {
            for e in &mut entry_points {
                // Only a storage binding can be the report; anything else stays a parameter.
                let at = e.bindings.iter().position(|&b| b == report.binding);
                if let Some(i) = at.filter(|&i| !e.uniform[i]) {
                    e.bindings.remove(i);
                    e.uniform.remove(i);
                    e.min_sizes.remove(i);
                    e.array_strides.remove(i);
                    e.report_binding = Some(report.binding);
                }
            }
        }
        Ok((entry_points, bounds_checked, report))
    }

    fn entry_point(
        &self,
        d: &Declared<'_>,
        builtin_size: Option<u32>,
        version: SpirvVersion,
    ) -> Result<EntryPoint> {
        let name = &d.name;
        if !self.functions.contains_key(&d.function) {
            return Err(self.err(format!(
                "entry point `{name}` names id {}, which is not a function",
                d.function
            )));
        }
        let workgroup = self.workgroup_size(d, builtin_size)?;
        if workgroup.declared().contains(&0) {
            return Err(self.err(format!(
                "entry point `{name}` has workgroup size {:?}, with a zero",
                workgroup.declared()
            )));
        }
        let used: Vec<u32> = if version >= (SpirvVersion { major: 1, minor: 4 }) {
            d.interface
                .iter()
                .copied()
                .filter(|id| self.globals.contains_key(id))
                .collect()
        } else {
            let mut v: Vec<u32> = self.used_globals(d.function).into_iter().collect();
            v.sort_unstable();
            v
        };
        let mut bindings: Vec<(u32, u64, bool, Option<u64>)> = Vec::new();
        let mut push = Vec::new();
        let mut push_blocks = 0;
        let mut uses_workgroup_memory = false;
        let mut unsupported = Vec::new();
        for id in used {
            let Some(&(ptr, storage)) = self.globals.get(&id) else {
                continue;
            };
            let pointee = match self.types.get(&ptr) {
                Some(Type::Pointer(_, pointee)) => *pointee,
                _ => {
                    return Err(
                        self.err(format!("global variable {id} does not have a pointer type"))
                    );
                }
            };
            let deco = self.decorations.get(&id);
            let pointee_deco = self.decorations.get(&pointee);
            let buffer_block = pointee_deco.is_some_and(|p| p.buffer_block);
            match storage {
                STORAGE_STORAGE_BUFFER | STORAGE_UNIFORM | STORAGE_UNIFORM_CONSTANT => {
                    let (Some(set), Some(binding)) =
                        (deco.and_then(|d| d.set), deco.and_then(|d| d.binding))
                    else {
                        return Err(self.err(format!(
                            "resource variable {id} of `{name}` lacks a DescriptorSet or \
                             Binding decoration"
                        )));
                    };
                    // A `Uniform` block decorated `BufferBlock` is a storage buffer (the
                    // SPIR-V 1.0 way); other `Uniform` blocks are uniform buffers.
                    let uniform = storage == STORAGE_UNIFORM && !buffer_block;
                    let what = if uniform {
                        "uniform buffer"
                    } else {
                        "storage buffer"
                    };
                    if storage == STORAGE_UNIFORM_CONSTANT {
                        unsupported.push(format!(
                            "set {set} binding {binding} is an image, sampler or other opaque \
                             resource (offload binds storage and uniform buffers only)"
                        ));
                    } else if !matches!(self.types.get(&pointee), Some(Type::Struct(_))) {
                        unsupported.push(format!(
                            "set {set} binding {binding} is an array of buffers (offload \
                             binds one buffer per binding)"
                        ));
                    } else if set != 0 {
                        unsupported.push(format!(
                            "a {what} in descriptor set {set} (offload binds set 0 only)"
                        ));
                    } else if binding > MAX_BINDING {
                        unsupported.push(format!(
                            "{what} binding {binding} (offload binds 0 to {MAX_BINDING})"
                        ));
                    } else {
                        let (min, stride) = self.min_binding_size(pointee).unwrap_or((0, None));
                        match bindings.iter_mut().find(|(b, ..)| *b == binding) {
                            Some((_, known, u, s)) if *u == uniform => {
                                if min > *known {
                                    (*known, *s) = (min, stride);
                                }
                            }
                            Some(_) => unsupported.push(format!(
                                "binding {binding} is used as both a storage and a uniform \
                                 buffer"
                            )),
                            None => bindings.push((binding, min, uniform, stride)),
                        }
                    }
                }
                STORAGE_PUSH_CONSTANT => {
                    push_blocks += 1;
                    let mut budget = TYPE_BUDGET;
                    self.push_members(pointee, &mut push, &mut budget)
                        .map_err(|reason| {
                            self.err(format!("push constants of `{name}`: {reason}"))
                        })?;
                }
                STORAGE_WORKGROUP => uses_workgroup_memory = true,
                _ => {}
            }
        }
        if push_blocks > 1 {
            return Err(self.err(format!(
                "entry point `{name}` uses {push_blocks} push-constant blocks (at most one is \
                 allowed)"
            )));
        }
        bindings.sort_unstable();
        let min_sizes = bindings.iter().map(|b| b.1).collect();
        let uniform = bindings.iter().map(|b| b.2).collect();
        let array_strides = bindings.iter().map(|b| b.3).collect();
        let bindings = bindings.iter().map(|b| b.0).collect();
        let push_end = push
            .iter()
            .map(|l: &PushLeaf| u64::from(l.offset) + u64::from(l.size))
            .max()
            .unwrap_or(0);
        let push_size = u32::try_from(push_end.next_multiple_of(4))
            .map_err(|_| self.err(format!("push constants of `{name}` are too large")))?;
        Ok(EntryPoint {
            name: name.clone(),
            workgroup,
            bindings,
            uniform,
            min_sizes,
            array_strides,
            push,
            push_size,
            uses_workgroup_memory,
            unsupported: (!unsupported.is_empty()).then(|| unsupported.join("; ")),
            report_binding: None,
        })
    }

    /// A dimension given by constant `id`: its value and, if specialisable, its SpecId.
    fn dimension(&self, id: u32, what: &str) -> Result<(u32, Option<u32>)> {
        match self.constant(id) {
            Some(Constant::Scalar { value, spec, .. }) => {
                let spec_id = if spec {
                    self.decorations.get(&id).and_then(|d| d.spec_id)
                } else {
                    None
                };
                Ok((value, spec_id))
            }
            _ => Err(self.err(format!("{what}: component {id} is not a scalar constant"))),
        }
    }

    fn workgroup_size(&self, d: &Declared<'_>, builtin: Option<u32>) -> Result<WorkgroupSize> {
        let from_ids = |ids: [u32; 3], what: &str| -> Result<WorkgroupSize> {
            let mut size = [0; 3];
            let mut spec = [None; 3];
            for k in 0..3 {
                (size[k], spec[k]) = self.dimension(ids[k], what)?;
            }
            Ok(if spec.iter().any(Option::is_some) {
                WorkgroupSize::Spec { size, ids: spec }
            } else {
                WorkgroupSize::Fixed { size }
            })
        };
        if let Some(id) = builtin {
            return match self.constant(id) {
                Some(Constant::Composite { parts }) => {
                    from_ids(parts, "the WorkgroupSize built-in")
                }
                _ => Err(self.err(
                    "the WorkgroupSize built-in decorates something that is not a constant \
                     composite",
                )),
            };
        }
        if let Some(ids) = d.local_size_id {
            return from_ids(ids, "LocalSizeId");
        }
        match d.local_size {
            Some((size, at)) => Ok(WorkgroupSize::Literal { size, at }),
            None => Err(self.err(format!(
                "entry point `{}` declares no workgroup size (LocalSize)",
                d.name
            ))),
        }
    }

    /// The parameters of push-constant block `block`: its members in declaration order,
    /// each one parameter at the `Offset` the shader declares (a struct member is one
    /// `Pod` parameter). A block whose only member is a struct is unwrapped first, again
    /// while that holds: naga wraps every push-constant variable in such a block, so
    /// WGSL `var<immediate> args: Args;` takes the members of `Args`.
    fn push_members(
        &self,
        block: u32,
        out: &mut Vec<PushLeaf>,
        budget: &mut u32,
    ) -> std::result::Result<(), String> {
        let (mut ty, mut base) = (block, 0u32);
        let mut depth = 0;
        let members = loop {
            spend(budget)?;
            let Some(Type::Struct(members)) = self.types.get(&ty) else {
                return Err(format!("the block {ty} is not a struct"));
            };
            match members[..] {
                [only] if matches!(self.types.get(&only), Some(Type::Struct(_))) => {
                    depth += 1;
                    if depth > 16 {
                        return Err("structs nested more than 16 deep".into());
                    }
                    let offset = self.member_offset(ty, 0)?.0;
                    base = base
                        .checked_add(offset)
                        .ok_or_else(|| "offsets overflow".to_string())?;
                    ty = only;
                }
                _ => break members,
            }
        };
        for (m, &member) in members.iter().enumerate() {
            let (offset, matrix_stride) = self.member_offset(ty, m)?;
            let at = base
                .checked_add(offset)
                .ok_or_else(|| "offsets overflow".to_string())?;
            let size = self.size_of(member, matrix_stride, 0, budget)?;
            out.push(PushLeaf {
                offset: at,
                size,
                kind: self.value_kind(member, size, budget)?,
            });
        }
        Ok(())
    }

    /// The `Offset` (required) and `MatrixStride` of member `m` of struct `ty`.
    fn member_offset(&self, ty: u32, m: usize) -> std::result::Result<(u32, Option<u32>), String> {
        let (offset, matrix_stride) = self
            .decorations
            .get(&ty)
            .and_then(|d| d.members.get(&(m as u32)).copied())
            .unwrap_or((None, None));
        let offset = offset.ok_or_else(|| format!("member {m} of struct {ty} has no Offset"))?;
        Ok((offset, matrix_stride))
    }

    /// What a push-constant member of type `ty` and `size` bytes takes: `Typed` for a
    /// plain number, `Pod` for a vector, matrix, array or struct (named as WGSL would,
    /// with its element type where all its scalars share one), `Scalar(size)` otherwise.
    fn value_kind(
        &self,
        ty: u32,
        size: u32,
        budget: &mut u32,
    ) -> std::result::Result<ParamKind, String> {
        if let Some(t) = self.scalar_type(ty) {
            return Ok(ParamKind::Typed(t));
        }
        let mut elements = Elements::None;
        let name = match self.types.get(&ty) {
            Some(Type::Vector(c, n)) => {
                let key = self.element_key(*c);
                match (key, n) {
                    (Some(k), 2..=4) => VECTOR_NAMES[*n as usize - 2][k],
                    _ => "vector",
                }
            }
            Some(Type::Matrix(col, columns)) => {
                let (key, rows) = match self.types.get(col) {
                    Some(Type::Vector(c, rows)) => (self.element_key(*c), *rows),
                    _ => (None, 0),
                };
                match (key, columns, rows) {
                    (Some(k), 2..=4, 2..=4) => {
                        MATRIX_NAMES[(*columns as usize - 2) * 3 + rows as usize - 2][k]
                    }
                    _ => "matrix",
                }
            }
            Some(Type::Array(..)) => {
                self.elements(ty, &mut elements, 0, budget)?;
                elements.key().map_or("array", |k| ARRAY_NAMES[k])
            }
            Some(Type::Struct(_)) => {
                self.elements(ty, &mut elements, 0, budget)?;
                elements.key().map_or("struct", |k| STRUCT_NAMES[k])
            }
            // A 16-bit float, a device address: known by size.
            _ => return Ok(ParamKind::Scalar(size as usize)),
        };
        if elements == Elements::None {
            self.elements(ty, &mut elements, 0, budget)?;
        }
        Ok(ParamKind::Pod {
            name,
            size: size as usize,
            elem: elements.key().and_then(|k| KEY_TYPES.get(k)).copied(),
        })
    }

    /// The element key of a scalar type (see [`of_each`]); `None` for anything else.
    fn element_key(&self, ty: u32) -> Option<usize> {
        match self.types.get(&ty)? {
            Type::Float(16) => Some(ELEMENTS - 1),
            _ => {
                let t = self.scalar_type(ty)?;
                KEY_TYPES.iter().position(|&k| k == t)
            }
        }
    }

    /// Adds the element keys of every scalar in type `ty` to `found`.
    fn elements(
        &self,
        ty: u32,
        found: &mut Elements,
        depth: u32,
        budget: &mut u32,
    ) -> std::result::Result<(), String> {
        if depth > 16 {
            return Err("types nested more than 16 deep".into());
        }
        spend(budget)?;
        match self.types.get(&ty) {
            Some(Type::Vector(c, _) | Type::Matrix(c, _) | Type::Array(c, _)) => {
                self.elements(*c, found, depth + 1, budget)?
            }
            Some(Type::Struct(members)) => {
                for &m in members {
                    self.elements(m, found, depth + 1, budget)?;
                    if *found == Elements::Mixed {
                        break;
                    }
                }
            }
            _ => found.add(self.element_key(ty)),
        }
        Ok(())
    }

    /// The fewest bytes a buffer bound to storage block `block` must hold: the end of its
    /// last member, a trailing runtime array counting one element (its `ArrayStride`, the
    /// second value, where the block has one). `None` where the module leaves a size open (no `Offset`, no `ArrayStride`).
    fn min_binding_size(&self, block: u32) -> Option<(u64, Option<u64>)> {
        let Some(Type::Struct(members)) = self.types.get(&block) else {
            return None;
        };
        let deco = self.decorations.get(&block)?;
        let mut end = 0u64;
        let mut stride = None;
        for (m, &member) in members.iter().enumerate() {
            let (offset, matrix_stride) = deco.members.get(&(m as u32)).copied()?;
            let size = match self.types.get(&member) {
                Some(Type::RuntimeArray) => {
                    let s = self.decorations.get(&member)?.array_stride?;
                    stride = Some(u64::from(s));
                    s
                }
                _ => {
                    let mut budget = TYPE_BUDGET;
                    self.size_of(member, matrix_stride, 0, &mut budget).ok()?
                }
            };
            end = end.max(u64::from(offset?) + u64::from(size));
        }
        Some((end, stride))
    }

    /// The size in bytes of a push-constant member's (or a storage block member's) type.
    fn size_of(
        &self,
        ty: u32,
        matrix_stride: Option<u32>,
        depth: u32,
        budget: &mut u32,
    ) -> std::result::Result<u32, String> {
        if depth > 16 {
            return Err("types nested more than 16 deep".into());
        }
        spend(budget)?;
        let too_big = || "a member larger than 4 GiB".to_string();
        match self.types.get(&ty) {
            Some(Type::Int(w, _) | Type::Float(w)) if matches!(w, 8 | 16 | 32 | 64) => Ok(w / 8),
            Some(Type::Vector(c, n)) => self
                .size_of(*c, None, depth + 1, budget)?
                .checked_mul(*n)
                .ok_or_else(too_big),
            Some(Type::Matrix(col, n)) => {
                let column = match matrix_stride {
                    Some(s) => s,
                    None => self.size_of(*col, None, depth + 1, budget)?,
                };
                column.checked_mul(*n).ok_or_else(too_big)
            }
            Some(Type::Array(elem, len)) => {
                let len = match self.constant(*len) {
                    Some(Constant::Scalar { value, .. }) => value,
                    _ => return Err(format!("array {ty} has no constant length")),
                };
                let stride = match self.decorations.get(&ty).and_then(|d| d.array_stride) {
                    Some(s) => s,
                    None => self.size_of(*elem, None, depth + 1, budget)?,
                };
                stride.checked_mul(len).ok_or_else(too_big)
            }
            Some(Type::Struct(members)) => {
                let deco = self.decorations.get(&ty);
                let mut end = 0u32;
                for (m, &member) in members.iter().enumerate() {
                    let (offset, stride) = deco
                        .and_then(|d| d.members.get(&(m as u32)).copied())
                        .unwrap_or((None, None));
                    let offset =
                        offset.ok_or_else(|| format!("member {m} of struct {ty} has no Offset"))?;
                    let size = self.size_of(member, stride, depth + 1, budget)?;
                    end = end.max(offset.checked_add(size).ok_or_else(too_big)?);
                }
                Ok(end)
            }
            Some(Type::Pointer(STORAGE_PHYSICAL_STORAGE_BUFFER, _)) => Ok(8),
            Some(Type::Bool) => Err("a bool has no size a host can pass".into()),
            Some(Type::RuntimeArray) => Err("a runtime array cannot be a push constant".into()),
            _ => Err(format!("type {ty} cannot be a push constant")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offload_core::Error;
    use offload_spirv::MAGIC;
    use offload_spirv::module::op;

    const V13: SpirvVersion = SpirvVersion { major: 1, minor: 3 };
    const V16: SpirvVersion = SpirvVersion { major: 1, minor: 6 };

    fn inst(op: u16, operands: &[u32]) -> Vec<u32> {
        let mut v = vec![((operands.len() as u32 + 1) << 16) | u32::from(op)];
        v.extend_from_slice(operands);
        v
    }

    fn string(s: &str) -> Vec<u32> {
        let mut bytes = s.as_bytes().to_vec();
        bytes.push(0);
        while bytes.len() % 4 != 0 {
            bytes.push(0);
        }
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A minimal valid compute module: `main` with LocalSize 8 4 1, one storage buffer at
    /// set 0 binding 1 and a push-constant block {u32 at 0, f32 at 8}, both used.
    fn minimal(version: u32) -> Vec<u32> {
        let mut w = vec![MAGIC, version, 0, 40, 0];
        w.extend(inst(op::CAPABILITY, &[CAPABILITY_SHADER]));
        w.extend(inst(op::MEMORY_MODEL, &[0, 1]));
        let mut ep = vec![MODEL_GL_COMPUTE, 1];
        ep.extend(string("main"));
        if version >= 0x0001_0400 {
            ep.extend([20, 30]);
        }
        w.extend(inst(op::ENTRY_POINT, &ep));
        w.extend(inst(op::EXECUTION_MODE, &[1, MODE_LOCAL_SIZE, 8, 4, 1]));
        w.extend(inst(op::DECORATE, &[20, DECORATION_DESCRIPTOR_SET, 0]));
        w.extend(inst(op::DECORATE, &[20, DECORATION_BINDING, 1]));
        w.extend(inst(op::DECORATE, &[11, DECORATION_BLOCK]));
        w.extend(inst(op::MEMBER_DECORATE, &[11, 0, DECORATION_OFFSET, 0]));
        w.extend(inst(op::DECORATE, &[14, DECORATION_BLOCK]));
        w.extend(inst(op::MEMBER_DECORATE, &[14, 0, DECORATION_OFFSET, 0]));
        w.extend(inst(op::MEMBER_DECORATE, &[14, 1, DECORATION_OFFSET, 8]));
        w.extend(inst(19, &[2])); // void
        w.extend(inst(33, &[3, 2])); // fn type
        w.extend(inst(op::TYPE_INT, &[4, 32, 0]));
        w.extend(inst(op::TYPE_FLOAT, &[5, 32]));
        w.extend(inst(op::TYPE_RUNTIME_ARRAY, &[10, 4]));
        w.extend(inst(op::TYPE_STRUCT, &[11, 10]));
        w.extend(inst(op::TYPE_POINTER, &[12, STORAGE_STORAGE_BUFFER, 11]));
        w.extend(inst(op::TYPE_STRUCT, &[14, 4, 5]));
        w.extend(inst(op::TYPE_POINTER, &[15, STORAGE_PUSH_CONSTANT, 14]));
        w.extend(inst(op::TYPE_POINTER, &[16, STORAGE_PUSH_CONSTANT, 4]));
        w.extend(inst(op::CONSTANT, &[4, 17, 0]));
        w.extend(inst(op::VARIABLE, &[12, 20, STORAGE_STORAGE_BUFFER]));
        w.extend(inst(op::VARIABLE, &[15, 30, STORAGE_PUSH_CONSTANT]));
        w.extend(inst(op::FUNCTION, &[2, 1, 0, 3]));
        w.extend(inst(248, &[21])); // label
        w.extend(inst(65, &[16, 22, 30, 17])); // access chain into the push block
        w.extend(inst(61, &[4, 23, 22])); // load
        w.extend(inst(68, &[4, 24, 20, 0])); // array length of the buffer
        w.extend(inst(253, &[])); // return
        w.extend(inst(op::FUNCTION_END, &[]));
        w
    }

    /// `minimal`'s module whose push-constant block's first member is a struct nested
    /// `levels` deep, each level holding `width` members of the level below (all at offset
    /// 0), the innermost one u32: (width)^levels paths through a few kilobytes of words.
    fn wide_push_block(levels: u32, width: u32) -> Vec<u32> {
        let words = minimal(0x0001_0300);
        let mut w = vec![MAGIC, 0x0001_0300, 0, 101 + levels, 0];
        let mut at = HEADER_WORDS;
        while at < words.len() {
            let len = (words[at] >> 16) as usize;
            let (op, operands) = (words[at] as u16, &words[at + 1..at + len]);
            if op == op::TYPE_STRUCT && operands[0] == 14 {
                // The nested structs (ids 100 + k), then the block with the top one.
                w.extend(inst(op::TYPE_STRUCT, &[100, 4]));
                for k in 1..=levels {
                    let mut members = vec![100 + k];
                    members.extend(std::iter::repeat_n(100 + k - 1, width as usize));
                    w.extend(inst(op::TYPE_STRUCT, &members));
                }
                w.extend(inst(op::TYPE_STRUCT, &[14, 100 + levels, 5]));
            } else {
                if op == op::DECORATE && operands == [11, DECORATION_BLOCK] {
                    w.extend(inst(op::MEMBER_DECORATE, &[100, 0, DECORATION_OFFSET, 0]));
                    for k in 1..=levels {
                        for m in 0..width {
                            w.extend(inst(
                                op::MEMBER_DECORATE,
                                &[100 + k, m, DECORATION_OFFSET, 0],
                            ));
                        }
                    }
                }
                w.extend_from_slice(&words[at..at + len]);
            }
            at += len;
        }
        w
    }

    #[test]
    fn a_push_block_of_exponentially_many_paths_is_refused_at_once() {
        // A sane nesting still reflects: the nested struct (2 levels of 3, 9 u32s all at
        // offset 0) is one parameter, then the f32.
        let small = reflect(&bytes(&wide_push_block(2, 3)), V13, "t").unwrap();
        let push = &small.entry_points[0].push;
        assert_eq!(push.len(), 2);
        assert_eq!(
            push[0].kind,
            ParamKind::Pod {
                name: "struct of u32",
                size: 4,
                elem: Some(ScalarType::U32)
            }
        );
        // 64^12 paths: without a budget the walk would never end (or exhaust memory).
        let started = std::time::Instant::now();
        let e = reason(reflect(&bytes(&wide_push_block(12, 64)), V13, "t"));
        assert!(e.contains("nested members"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    /// WGSL through naga as host-order words (the tests' compiler; no bounds checks).
    fn naga(wgsl: &str) -> Vec<u32> {
        let module = naga::front::wgsl::parse_str(wgsl).unwrap();
        let caps = naga::valid::Capabilities::all();
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap();
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            ..Default::default()
        };
        naga::back::spv::write_vec(&module, &info, &options, None).unwrap()
    }

    #[test]
    fn the_marker_sits_in_the_debug_section_and_turns_on_minimum_sizes() {
        let wgsl = "
            struct Head { count: u32, pad: vec3<u32>, items: array<vec2<f32>> }
            @group(0) @binding(0) var<storage, read_write> head: Head;
            @group(0) @binding(2) var<storage, read_write> fixed: array<u32, 10>;
            @group(0) @binding(1) var<storage, read_write> plain: array<u32>;
            @compute @workgroup_size(1)
            fn main() { head.items[head.count].x = f32(fixed[3] + plain[7]); }";
        let mut words = naga(wgsl);
        let plain = reflect(&bytes(&words), V13, "t").unwrap();
        assert!(!plain.bounds_checked);
        assert_eq!(plain.entry_points[0].bindings, [0, 1, 2]);
        assert_eq!(plain.entry_points[0].min_sizes, [0, 0, 0]);

        mark_bounds_checked(&mut words, None);
        let marked = reflect(&bytes(&words), V13, "t").unwrap();
        assert!(marked.bounds_checked);
        // Head: count at 0, pad (a vec3, aligned to 16) at 16..28, items (aligned to 8)
        // at 32 with one 8-byte element: 40. A runtime array of u32: one element;
        // array<u32, 10>: all of it.
        assert_eq!(marked.entry_points[0].min_sizes, [40, 4, 40]);
        // Right after the execution modes, before the first debug or annotation
        // instruction.
        let marker_at = {
            let mut at = HEADER_WORDS;
            loop {
                let op = words[at] as u16;
                if op == op::SOURCE_EXTENSION {
                    break at;
                }
                assert!(
                    [
                        op::CAPABILITY,
                        10,
                        op::EXT_INST_IMPORT,
                        op::MEMORY_MODEL,
                        op::ENTRY_POINT
                    ]
                    .contains(&op)
                        || op == op::EXECUTION_MODE,
                    "opcode {op} before the marker"
                );
                at += (words[at] >> 16) as usize;
            }
        };
        let prev_op = {
            let mut at = HEADER_WORDS;
            let mut prev = 0;
            while at < marker_at {
                prev = words[at] as u16;
                at += (words[at] >> 16) as usize;
            }
            prev
        };
        assert_eq!(prev_op, op::EXECUTION_MODE);
    }

    #[test]
    fn a_marked_module_without_strides_has_unknown_minimum_sizes() {
        let mut words = minimal(0x0001_0300);
        mark_bounds_checked(&mut words, None);
        let r = reflect(&bytes(&words), V16, "t").unwrap();
        assert!(r.bounds_checked);
        assert_eq!(r.entry_points[0].min_sizes, [0]);
    }

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    /// Push-constant members are one parameter each, named as WGSL names their types; the
    /// block naga wraps around `var<immediate>` is unwrapped.
    #[test]
    fn composite_push_constants_are_one_pod_parameter_each() {
        let wgsl = "
            struct Inner { a: f32, b: vec2<f32> }
            struct Mixed { n: u32, x: f32 }
            struct Args {
                n: u32, v: vec2<f32>, w: vec4<i32>, m: mat4x4<f32>, c: mat2x3<f32>,
                inner: Inner, mixed: Mixed, list: array<u32, 3>,
            }
            var<immediate> args: Args;
            @group(0) @binding(0) var<storage, read_write> out: array<f32>;
            @compute @workgroup_size(1)
            fn main() {
                out[0] = f32(args.n) + args.v.x + f32(args.w.y) + args.m[1].x + args.c[1].z
                    + args.inner.b.y + f32(args.mixed.n) + f32(args.list[2]);
            }";
        let r = reflect(&bytes(&naga(wgsl)), V13, "t").unwrap();
        let e = &r.entry_points[0];
        let pod = |name, size, elem| ParamKind::Pod { name, size, elem };
        use ScalarType::*;
        assert_eq!(
            e.params(),
            [
                ParamKind::Buffer,
                ParamKind::Typed(U32),
                pod("vec2<f32>", 8, Some(F32)),
                pod("vec4<i32>", 16, Some(I32)),
                pod("mat4x4<f32>", 64, Some(F32)),
                pod("mat2x3<f32>", 32, Some(F32)),
                pod("struct of f32", 16, Some(F32)),
                pod("struct", 8, None),
                pod("array of u32", 12, Some(U32)),
            ]
        );
        let offsets: Vec<u32> = e.push.iter().map(|l| l.offset).collect();
        assert_eq!(offsets, [0, 8, 16, 32, 96, 128, 144, 152]);
        assert_eq!(e.push_size, 164);
        // A lone vector is wrapped by naga in a block of one member: one parameter.
        let lone = "var<immediate> v: vec2<f32>;
            @group(0) @binding(0) var<storage, read_write> out: array<f32>;
            @compute @workgroup_size(1) fn main() { out[0] = v.y; }";
        let r = reflect(&bytes(&naga(lone)), V13, "t").unwrap();
        assert_eq!(
            r.entry_points[0].params()[1],
            pod("vec2<f32>", 8, Some(F32))
        );
    }

    /// A `var<uniform>` is a uniform-buffer parameter among the storage buffers, in binding
    /// order, whose block size is its minimum size also in a module that is not marked.
    #[test]
    fn uniform_buffers_are_parameters_in_binding_order() {
        let wgsl = "
            struct U { scale: f32, offset: vec4<f32> }
            @group(0) @binding(0) var<storage, read> input: array<f32>;
            @group(0) @binding(1) var<uniform> u: U;
            @group(0) @binding(2) var<storage, read_write> out: array<f32>;
            @compute @workgroup_size(1)
            fn main() { out[0] = input[0] * u.scale + u.offset.w; }";
        let r = reflect(&bytes(&naga(wgsl)), V13, "t").unwrap();
        let e = &r.entry_points[0];
        assert_eq!(e.unsupported, None);
        assert_eq!(e.bindings, [0, 1, 2]);
        assert_eq!(e.uniform, [false, true, false]);
        assert_eq!(e.min_sizes, [0, 32, 0]);
        assert_eq!(
            e.params(),
            [ParamKind::Buffer, ParamKind::Uniform, ParamKind::Buffer]
        );
    }

    fn reason(r: Result<Reflection>) -> String {
        match r {
            Err(Error::InvalidBinary { reason, .. }) => reason,
            other => panic!("expected InvalidBinary, got {other:?}"),
        }
    }

    #[test]
    fn a_minimal_module_reflects_its_parameters() {
        for version in [0x0001_0000, 0x0001_0300, 0x0001_0400, 0x0001_0600] {
            let r = reflect(&bytes(&minimal(version)), V16, "t").unwrap();
            assert_eq!(r.entry_points.len(), 1);
            let e = &r.entry_points[0];
            assert_eq!(e.name, "main");
            assert_eq!(e.bindings, vec![1]);
            assert_eq!(
                e.push,
                vec![
                    PushLeaf {
                        offset: 0,
                        size: 4,
                        kind: ParamKind::Typed(ScalarType::U32)
                    },
                    PushLeaf {
                        offset: 8,
                        size: 4,
                        kind: ParamKind::Typed(ScalarType::F32)
                    }
                ]
            );
            assert_eq!(e.push_size, 12);
            assert_eq!(
                e.params(),
                vec![
                    ParamKind::Buffer,
                    ParamKind::Typed(ScalarType::U32),
                    ParamKind::Typed(ScalarType::F32)
                ]
            );
            assert!(matches!(
                e.workgroup,
                WorkgroupSize::Literal {
                    size: [8, 4, 1],
                    ..
                }
            ));
            let patched = r.with_local_size(0, [3, 2, 1]).unwrap();
            let again = reflect(&bytes(&patched), V16, "t").unwrap();
            assert_eq!(again.entry_points[0].workgroup.declared(), [3, 2, 1]);
        }
    }

    #[test]
    fn header_errors_say_what_is_wrong() {
        let good = minimal(0x0001_0300);
        assert!(reason(reflect(&[], V16, "t")).contains("empty"));
        assert!(reason(reflect(&[1, 2, 3], V16, "t")).contains("whole number"));
        assert!(reason(reflect(&bytes(&good[..3]), V16, "t")).contains("header"));
        let mut w = good.clone();
        w[0] = MAGIC.swap_bytes();
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("byte-swapped"));
        w[0] = 0xDEAD_BEEF;
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("magic"));
        let mut w = good.clone();
        w[1] = 0x0001_0700;
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("version"));
        let w = minimal(0x0001_0600);
        assert!(reason(reflect(&bytes(&w), V13, "t")).contains("newer"));
        let mut w = good.clone();
        w[3] = 0;
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("bound"));
        let mut w = good.clone();
        w[3] = 10; // ids up to 30 are used
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("bound"));
        let mut w = good.clone();
        w[4] = 1;
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("schema"));
    }

    #[test]
    fn broken_streams_are_rejected_at_every_cut() {
        let good = minimal(0x0001_0300);
        // Every truncation at a word boundary is rejected, never accepted or panicking.
        for len in 0..good.len() {
            assert!(
                reflect(&bytes(&good[..len]), V16, "t").is_err(),
                "cut at {len}"
            );
        }
        // A zero word count.
        let mut w = good.clone();
        w[HEADER_WORDS] = u32::from(op::CAPABILITY);
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("word count of 0"));
        // A word count past the end.
        let mut w = good.clone();
        w[HEADER_WORDS] = (0xFFFF << 16) | u32::from(op::CAPABILITY);
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("truncated"));
        // Every single-word corruption is handled without a panic.
        for i in 0..good.len() {
            for value in [0, 1, 0xFFFF_FFFF, 0x0001_0000, 0x0004_0000 | 15] {
                let mut w = good.clone();
                w[i] = value;
                let _ = reflect(&bytes(&w), V16, "t");
            }
        }
    }

    #[test]
    fn kernels_and_missing_pieces_are_rejected() {
        let mut w = minimal(0x0001_0300);
        w[HEADER_WORDS + 1] = CAPABILITY_KERNEL;
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("OpenCL"));
        let mut w = minimal(0x0001_0300);
        // Turn the entry point into a vertex shader: no compute entry point is left.
        let at = w.iter().position(|&x| x == MODEL_GL_COMPUTE).unwrap();
        w[at] = 0;
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("no GLCompute"));
    }

    #[test]
    fn an_opencl_kernel_is_refused_as_such() {
        // The Level Zero fixture: clang's OpenCL C to SPIR-V (Kernel, Physical64, OpenCL).
        let image = include_bytes!("../../offload-ze/fixtures/kernels.spv");
        let r = reason(reflect(image, V16, "t"));
        assert!(
            r.contains("OpenCL kernel, not a Vulkan compute shader"),
            "{r}"
        );
    }

    #[test]
    fn workgroup_size_from_specialisation_constants() {
        // WorkgroupSize built-in = SpecConstantComposite(spec 0 -> id 100, const 1, const 1)
        let mut w = minimal(0x0001_0300);
        w[3] = 60;
        let extra_deco = [
            inst(op::DECORATE, &[50, DECORATION_SPEC_ID, 7]),
            inst(
                op::DECORATE,
                &[52, DECORATION_BUILT_IN, BUILT_IN_WORKGROUP_SIZE],
            ),
        ]
        .concat();
        let vec3 = inst(op::TYPE_VECTOR, &[53, 4, 3]);
        let consts = [
            inst(op::SPEC_CONSTANT, &[4, 50, 32]),
            inst(op::CONSTANT, &[4, 51, 1]),
            inst(op::SPEC_CONSTANT_COMPOSITE, &[53, 52, 50, 51, 51]),
        ]
        .concat();
        // Insert decorations before the first type (void) and constants before the variables.
        let void_at = w.windows(2).position(|p| p == [(2 << 16) | 19, 2]).unwrap();
        w.splice(void_at..void_at, extra_deco);
        let var_at = w
            .windows(3)
            .position(|p| p == [(4 << 16) | u32::from(op::VARIABLE), 12, 20])
            .unwrap();
        w.splice(var_at..var_at, [vec3, consts].concat());
        let r = reflect(&bytes(&w), V16, "t").unwrap();
        assert_eq!(
            r.entry_points[0].workgroup,
            WorkgroupSize::Spec {
                size: [32, 1, 1],
                ids: [Some(7), None, None]
            }
        );
        assert!(r.with_local_size(0, [1, 1, 1]).is_none());
    }
}
