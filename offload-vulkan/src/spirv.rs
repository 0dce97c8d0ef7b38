//! SPIR-V validation and reflection, before the driver sees a module (P4).
//!
//! A small hand-written walk over the instruction stream: the header (magic, version, id
//! bound, schema), every instruction's word count, the module's structure (one memory
//! model, functions properly closed, declarations before the first function), and then what
//! offload needs to launch each `GLCompute` entry point: its workgroup size (`LocalSize`,
//! `LocalSizeId` or the `WorkgroupSize` built-in, literal or specialisable), the storage
//! buffers it uses (descriptor set and binding) and the leaves of its push-constant block
//! (offset and size). Anything malformed is `Error::InvalidBinary` with the reason; nothing
//! here panics on any input, and nothing here talks to the driver.
//!
//! Which globals an entry point uses: from SPIR-V 1.4 on, its `OpEntryPoint` interface lists
//! every global variable it references (the specification requires it); before 1.4 the
//! interface lists only inputs and outputs, so the functions reachable from the entry point
//! are scanned for the instructions that take a pointer operand.

use std::collections::{HashMap, HashSet};

use offload_core::{BackendKind, Error, ParamKind, Result, ScalarType};

const MAGIC: u32 = 0x0723_0203;
/// The universal limit on the id bound (SPIR-V specification, "Universal Limits").
const MAX_BOUND: u32 = 4_194_303;
const HEADER_WORDS: usize = 5;
/// The largest binding number offload binds: drivers size a descriptor set layout by its
/// largest binding (lavapipe crashes on one near `u32::MAX`).
const MAX_BINDING: u32 = 4095;

/// The `OpSourceExtension` that marks a module as compiled by offload from WGSL with
/// naga's `Restrict` bounds checks (`wgsl.rs`): its bindings' minimum sizes are then
/// checked at every launch. A hand-written module may carry it too; it only adds checks.
pub(crate) const BOUNDS_CHECKED: &str = "offload: bounds-checked (naga Restrict)";

// Opcodes.
const OP_NOP: u16 = 0;
const OP_SOURCE_EXTENSION: u16 = 4;
const OP_EXT_INST_IMPORT: u16 = 11;
const OP_EXT_INST: u16 = 12;
const OP_MEMORY_MODEL: u16 = 14;
const OP_ENTRY_POINT: u16 = 15;
const OP_EXECUTION_MODE: u16 = 16;
const OP_CAPABILITY: u16 = 17;
const OP_TYPE_BOOL: u16 = 20;
const OP_TYPE_INT: u16 = 21;
const OP_TYPE_FLOAT: u16 = 22;
const OP_TYPE_VECTOR: u16 = 23;
const OP_TYPE_MATRIX: u16 = 24;
const OP_TYPE_ARRAY: u16 = 28;
const OP_TYPE_RUNTIME_ARRAY: u16 = 29;
const OP_TYPE_STRUCT: u16 = 30;
const OP_TYPE_POINTER: u16 = 32;
const OP_CONSTANT: u16 = 43;
const OP_SPEC_CONSTANT: u16 = 50;
const OP_CONSTANT_COMPOSITE: u16 = 44;
const OP_SPEC_CONSTANT_COMPOSITE: u16 = 51;
const OP_FUNCTION: u16 = 54;
const OP_FUNCTION_END: u16 = 56;
const OP_FUNCTION_CALL: u16 = 57;
const OP_VARIABLE: u16 = 59;
const OP_DECORATE: u16 = 71;
const OP_MEMBER_DECORATE: u16 = 72;
const OP_DECORATION_GROUP: u16 = 73;
const OP_GROUP_DECORATE: u16 = 74;
const OP_GROUP_MEMBER_DECORATE: u16 = 75;
const OP_EXECUTION_MODE_ID: u16 = 331;

// Operand values.
const CAPABILITY_SHADER: u32 = 1;
const CAPABILITY_KERNEL: u32 = 6;
const MEMORY_MODEL_OPENCL: u32 = 2;
const MODEL_GL_COMPUTE: u32 = 5;
const MODE_LOCAL_SIZE: u32 = 17;
const MODE_LOCAL_SIZE_ID: u32 = 38;
const STORAGE_UNIFORM_CONSTANT: u32 = 0;
const STORAGE_UNIFORM: u32 = 2;
const STORAGE_WORKGROUP: u32 = 4;
const STORAGE_FUNCTION: u32 = 7;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_STORAGE_BUFFER: u32 = 12;
const STORAGE_PHYSICAL_STORAGE_BUFFER: u32 = 5349;
const DECORATION_SPEC_ID: u32 = 1;
const DECORATION_BLOCK: u32 = 2;
const DECORATION_BUFFER_BLOCK: u32 = 3;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_MATRIX_STRIDE: u32 = 7;
const DECORATION_BUILT_IN: u32 = 11;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;
const BUILT_IN_WORKGROUP_SIZE: u32 = 25;

/// A SPIR-V version, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SpirvVersion {
    pub major: u8,
    pub minor: u8,
}

impl std::fmt::Display for SpirvVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl SpirvVersion {
    /// The newest SPIR-V a Vulkan version must accept (Vulkan 1.0: 1.0, 1.1: 1.3, 1.2: 1.5,
    /// 1.3 and later: 1.6).
    pub(crate) fn for_vulkan(api: u32) -> SpirvVersion {
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
pub(crate) enum WorkgroupSize {
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
    pub(crate) fn declared(&self) -> [u32; 3] {
        match *self {
            WorkgroupSize::Literal { size, .. }
            | WorkgroupSize::Spec { size, .. }
            | WorkgroupSize::Fixed { size } => size,
        }
    }
}

/// One leaf of a push-constant block: a scalar parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PushLeaf {
    pub offset: u32,
    pub size: u32,
    /// Its type, where it is a plain number (checked at launch).
    pub ty: Option<ScalarType>,
}

/// What offload needs to know about one `GLCompute` entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryPoint {
    pub name: String,
    pub workgroup: WorkgroupSize,
    /// Storage-buffer bindings of descriptor set 0, ascending: argument `i` binds to
    /// `bindings[i]`.
    pub bindings: Vec<u32>,
    /// In a module marked [`BOUNDS_CHECKED`], the fewest bytes the buffer (or range) bound
    /// to each of `bindings` must hold: its block's fixed members, and one element of a
    /// trailing runtime array (WebGPU's "minimum binding size"); 0 in other modules, and
    /// where the module does not say (a member without an `Offset`, a runtime array
    /// without an `ArrayStride`). Checked at every launch, so a runtime array is never
    /// empty and an index clamped to its last element stays inside the binding.
    pub min_sizes: Vec<u64>,
    /// The push-constant leaves in declaration order: the scalar parameters.
    pub push: Vec<PushLeaf>,
    /// Bytes of push constants to cover (the end of the last leaf, rounded up to 4).
    pub push_size: u32,
    /// Whether the entry point uses workgroup (shared) memory.
    pub uses_workgroup_memory: bool,
    /// Why offload cannot launch this entry point, if it cannot (a valid module that uses
    /// what the argument convention has no place for: images, uniform buffers, set 1, …).
    pub unsupported: Option<String>,
}

impl EntryPoint {
    /// The parameters: one buffer per binding, then one scalar per push-constant leaf.
    pub(crate) fn params(&self) -> Vec<ParamKind> {
        let buffers = self.bindings.iter().map(|_| ParamKind::Buffer);
        let scalars = self.push.iter().map(|l| match l.ty {
            Some(ty) => ParamKind::Typed(ty),
            None => ParamKind::Scalar(l.size as usize),
        });
        buffers.chain(scalars).collect()
    }
}

/// A validated module: its words (host order) and its compute entry points.
#[derive(Clone, Debug)]
pub(crate) struct Reflection {
    pub words: Vec<u32>,
    pub version: SpirvVersion,
    pub entry_points: Vec<EntryPoint>,
    /// Whether the module carries the [`BOUNDS_CHECKED`] marker.
    pub bounds_checked: bool,
}

impl Reflection {
    /// A copy of the module's words with entry point `entry`'s `LocalSize` set to `size`,
    /// or `None` if its size is not a `LocalSize` literal.
    pub(crate) fn with_local_size(&self, entry: usize, size: [u32; 3]) -> Option<Vec<u32>> {
        let WorkgroupSize::Literal { at, .. } = self.entry_points.get(entry)?.workgroup else {
            return None;
        };
        let mut words = self.words.clone();
        words.get_mut(at..at + 3)?.copy_from_slice(&size);
        Some(words)
    }
}

fn invalid(call: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: BackendKind::Vulkan,
        call,
        reason: format!("SPIR-V: {}", reason.into()),
    }
}

/// One instruction: its opcode, the index of its first word, and its words.
#[derive(Clone, Copy)]
struct Inst<'a> {
    op: u16,
    at: usize,
    words: &'a [u32],
}

impl<'a> Inst<'a> {
    /// Operand word `i` (word 0 is the opcode word).
    fn word(&self, i: usize) -> Option<u32> {
        self.words.get(i).copied()
    }

    /// A literal string starting at word `i`, and the index of the word after it.
    fn string(&self, i: usize) -> Option<(String, usize)> {
        let rest = self.words.get(i..)?;
        let mut bytes = Vec::new();
        for (n, w) in rest.iter().enumerate() {
            for b in w.to_le_bytes() {
                if b == 0 {
                    let s = String::from_utf8(bytes).ok()?;
                    return Some((s, i + n + 1));
                }
                bytes.push(b);
            }
        }
        None
    }
}

/// What a type id is, as far as reflection needs.
#[derive(Clone, Debug)]
enum Type {
    Bool,
    /// Width in bits, and whether it is signed.
    Int(u32, bool),
    Float(u32),
    Vector(u32, u32),
    Matrix(u32, u32),
    Array(u32, u32),
    RuntimeArray,
    Struct(Vec<u32>),
    Pointer(u32, u32),
    Other,
}

#[derive(Clone, Copy, Debug)]
enum Constant {
    /// A constant's value (low word) and whether it is a specialisation constant.
    Scalar { value: u32, spec: bool },
    /// A composite's first three components (whether each is a specialisation constant is
    /// the components' business).
    Composite { parts: [u32; 3] },
}

#[derive(Clone, Debug, Default)]
struct Decorations {
    set: Option<u32>,
    binding: Option<u32>,
    spec_id: Option<u32>,
    builtin: Option<u32>,
    block: bool,
    buffer_block: bool,
    array_stride: Option<u32>,
    /// Per member: (offset, matrix stride).
    members: HashMap<u32, (Option<u32>, Option<u32>)>,
}

struct Parsed<'a> {
    version: SpirvVersion,
    bound: u32,
    insts: Vec<Inst<'a>>,
}

fn bad_magic(call: &'static str, first: u32) -> Error {
    if first == MAGIC.swap_bytes() {
        return invalid(
            call,
            "the magic number is byte-swapped: the module was written for a host of the other \
             endianness (Vulkan takes SPIR-V words in host order)",
        );
    }
    invalid(
        call,
        format!("magic number {first:#010x}, expected {MAGIC:#010x}: not a SPIR-V module"),
    )
}

/// Splits the module into instructions, checking the header and every word count.
fn split<'a>(words: &'a [u32], max: SpirvVersion, call: &'static str) -> Result<Parsed<'a>> {
    if let Some(&first) = words.first()
        && first != MAGIC
    {
        return Err(bad_magic(call, first));
    }
    let Some(header) = words.get(..HEADER_WORDS) else {
        return Err(invalid(
            call,
            format!(
                "{} bytes is shorter than the 20-byte header",
                words.len() * 4
            ),
        ));
    };
    let v = header[1];
    let version = SpirvVersion {
        major: (v >> 16) as u8,
        minor: (v >> 8) as u8,
    };
    if v & 0xFF00_00FF != 0 || version.major != 1 || version.minor > 6 {
        return Err(invalid(
            call,
            format!("unknown version word {v:#010x} (SPIR-V 1.0 to 1.6 exist)"),
        ));
    }
    if version > max {
        return Err(invalid(
            call,
            format!(
                "SPIR-V {version} is newer than the {max} this device's Vulkan version accepts"
            ),
        ));
    }
    let bound = header[3];
    if bound == 0 || bound > MAX_BOUND {
        return Err(invalid(
            call,
            format!("id bound {bound} is outside 1..={MAX_BOUND}"),
        ));
    }
    if header[4] != 0 {
        return Err(invalid(
            call,
            format!("schema word is {:#x}, must be 0", header[4]),
        ));
    }
    let mut insts = Vec::new();
    let mut at = HEADER_WORDS;
    while at < words.len() {
        let first = words[at];
        let count = (first >> 16) as usize;
        let op = (first & 0xFFFF) as u16;
        if count == 0 {
            return Err(invalid(
                call,
                format!("instruction at word {at} (opcode {op}) has a word count of 0"),
            ));
        }
        let Some(inst_words) = words.get(at..at + count) else {
            return Err(invalid(
                call,
                format!(
                    "instruction at word {at} (opcode {op}) has {count} words but only {} \
                     remain: the module is truncated",
                    words.len() - at
                ),
            ));
        };
        insts.push(Inst {
            op,
            at,
            words: inst_words,
        });
        at += count;
    }
    Ok(Parsed {
        version,
        bound,
        insts,
    })
}

/// The positions of an instruction's operands that may be a pointer to a global variable
/// (for modules before SPIR-V 1.4, whose entry points do not list the globals they use).
fn pointer_operands(op: u16, len: usize) -> std::ops::Range<usize> {
    match op {
        // OpLoad, OpAccessChain, OpInBoundsAccessChain, OpPtrAccessChain, OpArrayLength,
        // OpGenericPtrMemSemantics, OpInBoundsPtrAccessChain, OpImageTexelPointer,
        // OpCopyObject, OpConvertPtrToU, OpPtrCastToGeneric, OpGenericCastToPtr, OpBitcast,
        // atomics (pointer first), OpAtomicFlagTestAndSet, float atomics,
        // OpCooperativeMatrixLoadKHR.
        61
        | 65
        | 66
        | 67
        | 68
        | 69
        | 70
        | 60
        | 83
        | 117
        | 121
        | 122
        | 124
        | 227
        | 229
        | 230..=242
        | 318
        | 5614
        | 5615
        | 6035
        | 4457 => 3..4.min(len),
        // OpStore, OpAtomicStore, OpAtomicFlagClear, OpCooperativeMatrixStoreKHR,
        // OpReturnValue.
        62 | 228 | 319 | 4458 | 254 => 1..2.min(len),
        // OpCopyMemory, OpCopyMemorySized.
        63 | 64 => 1..3.min(len),
        // OpFunctionCall: every argument.
        OP_FUNCTION_CALL => 4..len,
        // OpSelect; OpPtrEqual, OpPtrNotEqual, OpPtrDiff; OpCompositeConstruct; OpPhi
        // (value/parent pairs: parents are labels, harmless).
        169 => 4..6.min(len),
        401..=403 => 3..5.min(len),
        80 | 245 => 3..len,
        // OpVariable (an initialiser may be a pointer).
        OP_VARIABLE => 4..5.min(len),
        _ => 0..0,
    }
}

/// Word positions of an instruction that are ids, for the instructions whose operands are
/// known here (debug names, decorations, constants, memory, composites, conversions,
/// arithmetic, relational, bit, atomic and control-flow instructions): each must be a
/// non-zero id below the bound. Drivers index tables with ids, and some crash on an
/// out-of-range one (lavapipe, on a corrupted `OpName` target).
fn id_operands(op: u16, len: usize) -> [std::ops::Range<usize>; 2] {
    let all = 1..len;
    let none = 0..0;
    let upto = |end: usize| 1..end.min(len);
    match op {
        // OpSource: an optional file id after language and version.
        3 => [3..4.min(len), none],
        // OpName, OpMemberName, OpString, OpLine, OpDecorate (target), OpMemberDecorate
        // (struct), OpDecorateString, OpMemberDecorateString, OpSelectionMerge, OpLabel,
        // OpBranch, OpReturnValue, OpDecorationGroup.
        5 | 6 | 7 | 8 | 71 | 72 | 73 | 5632 | 5633 | 247 | 248 | 249 | 254 => [upto(2), none],
        // OpExtInst: type, result, set; the operands after the instruction number.
        12 => [upto(4), 5..len],
        // OpUndef, OpConstantTrue/False/Null, OpSpecConstantTrue/False, OpFunctionParameter,
        // OpStore, OpCopyMemory, OpLoopMerge, OpConstant and OpSpecConstant (type, result).
        1 | 41 | 42 | 46 | 48 | 49 | 55 | 62 | 63 | 246 | 43 | 50 => [upto(3), none],
        // OpFunction: type, result, then (after the control mask) the function type.
        54 => [upto(3), 4..5.min(len)],
        // OpVariable: type, result, then (after the storage class) the initialiser.
        59 => [upto(3), 4..len],
        // OpLoad, OpArrayLength, OpCompositeExtract, OpBranchConditional (before weights),
        // OpControlBarrier.
        61 | 68 | 81 | 250 | 224 => [upto(4), none],
        // OpVectorShuffle, OpCompositeInsert (before literal indices).
        79 | 82 => [upto(5), none],
        // OpMemoryBarrier; OpSwitch (selector and default; the rest are literal/label pairs).
        225 | 251 => [upto(3), none],
        // OpDecorateId: target, then id operands after the decoration.
        332 => [upto(2), 3..len],
        // Composite constants, function calls, access chains, dynamic vector access,
        // composite construction, copies, conversions (not OpGenericCastToPtrExplicit),
        // arithmetic, relational and logical, bit instructions, atomics, OpPhi.
        44
        | 51
        | 57
        | 65
        | 66
        | 67
        | 70
        | 77
        | 78
        | 80
        | 83
        | 84
        | 109..=122
        | 124
        | 126..=152
        | 154..=191
        | 194..=205
        | 227..=242
        | 245 => [all, none],
        _ => [none.clone(), none],
    }
}

#[derive(Default)]
struct Function {
    globals: HashSet<u32>,
    calls: HashSet<u32>,
}

/// Validates `image` and reflects its compute entry points. `max` is the newest SPIR-V
/// version the device accepts.
pub(crate) fn reflect(image: &[u8], max: SpirvVersion, call: &'static str) -> Result<Reflection> {
    if image.is_empty() {
        return Err(invalid(call, "the image is empty"));
    }
    if image.len() % 4 != 0 {
        return Err(invalid(
            call,
            format!(
                "{} bytes is not a whole number of 32-bit words",
                image.len()
            ),
        ));
    }
    let words: Vec<u32> = image
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let (version, (entry_points, bounds_checked)) = {
        let parsed = split(&words, max, call)?;
        (parsed.version, Walk::new(parsed.bound, call).run(&parsed)?)
    };
    Ok(Reflection {
        words,
        version,
        entry_points,
        bounds_checked,
    })
}

/// Marks a module as bounds-checked ([`BOUNDS_CHECKED`]): an `OpSourceExtension` inserted
/// before the first instruction of the debug section (after the capabilities,
/// extensions, imports, memory model, entry points and execution modes), where the
/// specification's layout puts it. `words` is a whole module, header included.
#[cfg_attr(not(feature = "wgsl"), allow(dead_code))]
pub(crate) fn mark_bounds_checked(words: &mut Vec<u32>) {
    const PROLOGUE: [u16; 7] = [
        OP_CAPABILITY,
        10, // OpExtension
        OP_EXT_INST_IMPORT,
        OP_MEMORY_MODEL,
        OP_ENTRY_POINT,
        OP_EXECUTION_MODE,
        OP_EXECUTION_MODE_ID,
    ];
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, op) = ((first >> 16) as usize, first as u16);
        if count == 0 || !PROLOGUE.contains(&op) {
            break;
        }
        at += count;
    }
    let mut bytes = BOUNDS_CHECKED.as_bytes().to_vec();
    bytes.resize(bytes.len() / 4 * 4 + 4, 0); // nul-terminated, whole words
    let mut inst = vec![((bytes.len() as u32 / 4 + 1) << 16) | u32::from(OP_SOURCE_EXTENSION)];
    inst.extend(
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    let at = at.min(words.len());
    words.splice(at..at, inst);
}

/// The state of one walk over a module.
struct Walk {
    bound: u32,
    call: &'static str,
    types: HashMap<u32, Type>,
    constants: HashMap<u32, Constant>,
    decorations: HashMap<u32, Decorations>,
    /// Global variables: id -> (pointer type, storage class).
    globals: HashMap<u32, (u32, u32)>,
    functions: HashMap<u32, Function>,
    defined: HashSet<u32>,
    nonsemantic_sets: HashSet<u32>,
    /// Whether an `OpSourceExtension` is the [`BOUNDS_CHECKED`] marker.
    bounds_checked: bool,
}

/// An entry point as declared, before its uses are resolved.
struct Declared {
    name: String,
    function: u32,
    interface: Vec<u32>,
    local_size: Option<([u32; 3], usize)>,
    local_size_id: Option<[u32; 3]>,
}

impl Walk {
    fn new(bound: u32, call: &'static str) -> Walk {
        Walk {
            bound,
            call,
            types: HashMap::new(),
            constants: HashMap::new(),
            decorations: HashMap::new(),
            globals: HashMap::new(),
            functions: HashMap::new(),
            defined: HashSet::new(),
            nonsemantic_sets: HashSet::new(),
            bounds_checked: false,
        }
    }

    fn err(&self, reason: impl Into<String>) -> Error {
        invalid(self.call, reason)
    }

    /// Operand `i` of `inst`, or an error naming the instruction.
    fn operand(&self, inst: &Inst<'_>, i: usize) -> Result<u32> {
        inst.word(i).ok_or_else(|| {
            self.err(format!(
                "instruction at word {} (opcode {}) has {} words, too few for its operands",
                inst.at,
                inst.op,
                inst.words.len()
            ))
        })
    }

    /// Operand `i` as an id: present and below the bound.
    fn id(&self, inst: &Inst<'_>, i: usize) -> Result<u32> {
        let id = self.operand(inst, i)?;
        if id == 0 || id >= self.bound {
            return Err(self.err(format!(
                "instruction at word {} (opcode {}) uses id {id}, outside the bound {}",
                inst.at, inst.op, self.bound
            )));
        }
        Ok(id)
    }

    /// Records the result id of `inst` (operand `i`), rejecting redefinitions.
    fn define(&mut self, inst: &Inst<'_>, i: usize) -> Result<u32> {
        let id = self.id(inst, i)?;
        if !self.defined.insert(id) {
            return Err(self.err(format!(
                "id {id} is defined twice (again at word {})",
                inst.at
            )));
        }
        Ok(id)
    }

    fn decorations(&mut self, id: u32) -> &mut Decorations {
        self.decorations.entry(id).or_default()
    }

    /// The compute entry points, and whether the module is marked [`BOUNDS_CHECKED`].
    fn run(mut self, parsed: &Parsed<'_>) -> Result<(Vec<EntryPoint>, bool)> {
        let mut declared: Vec<Declared> = Vec::new();
        let mut modes: Vec<(u32, u32, Inst<'_>)> = Vec::new();
        let mut memory_models = 0;
        let mut shader = false;
        let mut current: Option<u32> = None;
        let mut seen_function = false;
        for inst in &parsed.insts {
            let op = inst.op;
            let len = inst.words.len();
            let in_function = current.is_some();
            let nonsemantic = op == OP_EXT_INST
                && inst
                    .word(3)
                    .is_some_and(|set| self.nonsemantic_sets.contains(&set));
            if !nonsemantic {
                for range in id_operands(op, len) {
                    for i in range {
                        self.id(inst, i)?;
                    }
                }
            }
            match op {
                OP_NOP => {}
                OP_SOURCE_EXTENSION if !in_function => {
                    if inst.string(1).is_some_and(|(s, _)| s == BOUNDS_CHECKED) {
                        self.bounds_checked = true;
                    }
                }
                OP_CAPABILITY => match self.operand(inst, 1)? {
                    CAPABILITY_SHADER => shader = true,
                    CAPABILITY_KERNEL => {
                        return Err(self.err(
                            "the module declares the Kernel capability: an OpenCL kernel, not \
                             a Vulkan compute shader",
                        ));
                    }
                    _ => {}
                },
                OP_EXT_INST_IMPORT => {
                    let id = self.define(inst, 1)?;
                    let (name, _) = inst
                        .string(2)
                        .ok_or_else(|| self.err("OpExtInstImport has a malformed name"))?;
                    if name.starts_with("NonSemantic.") {
                        self.nonsemantic_sets.insert(id);
                    }
                }
                OP_MEMORY_MODEL => {
                    memory_models += 1;
                    if self.operand(inst, 2)? == MEMORY_MODEL_OPENCL {
                        return Err(self.err(
                            "the memory model is OpenCL: an OpenCL kernel, not a Vulkan \
                             compute shader",
                        ));
                    }
                }
                OP_ENTRY_POINT => {
                    if seen_function {
                        return Err(self.err("OpEntryPoint after the first function"));
                    }
                    let model = self.operand(inst, 1)?;
                    let function = self.id(inst, 2)?;
                    let (name, next) = inst.string(3).ok_or_else(|| {
                        self.err(format!(
                            "OpEntryPoint at word {} has a malformed name",
                            inst.at
                        ))
                    })?;
                    let mut interface = Vec::new();
                    for i in next..len {
                        interface.push(self.id(inst, i)?);
                    }
                    if model == MODEL_GL_COMPUTE {
                        if declared.iter().any(|d| d.name == name) {
                            return Err(
                                self.err(format!("two GLCompute entry points are named `{name}`"))
                            );
                        }
                        declared.push(Declared {
                            name,
                            function,
                            interface,
                            local_size: None,
                            local_size_id: None,
                        });
                    }
                }
                OP_EXECUTION_MODE | OP_EXECUTION_MODE_ID => {
                    if seen_function {
                        return Err(self.err("OpExecutionMode after the first function"));
                    }
                    let entry = self.id(inst, 1)?;
                    let mode = self.operand(inst, 2)?;
                    modes.push((entry, mode, *inst));
                }
                OP_DECORATE => {
                    let target = self.id(inst, 1)?;
                    let decoration = self.operand(inst, 2)?;
                    let value = inst.word(3);
                    let d = self.decorations(target);
                    match decoration {
                        DECORATION_SPEC_ID => d.spec_id = value,
                        DECORATION_BLOCK => d.block = true,
                        DECORATION_BUFFER_BLOCK => d.buffer_block = true,
                        DECORATION_ARRAY_STRIDE => d.array_stride = value,
                        DECORATION_BUILT_IN => d.builtin = value,
                        DECORATION_BINDING => d.binding = value,
                        DECORATION_DESCRIPTOR_SET => d.set = value,
                        _ => {}
                    }
                }
                OP_MEMBER_DECORATE => {
                    let target = self.id(inst, 1)?;
                    let member = self.operand(inst, 2)?;
                    let decoration = self.operand(inst, 3)?;
                    let value = inst.word(4);
                    let entry = self.decorations(target).members.entry(member).or_default();
                    match decoration {
                        DECORATION_OFFSET => entry.0 = value,
                        DECORATION_MATRIX_STRIDE => entry.1 = value,
                        _ => {}
                    }
                }
                OP_DECORATION_GROUP => {
                    self.define(inst, 1)?;
                }
                OP_GROUP_DECORATE => {
                    let group = self.id(inst, 1)?;
                    let d = self.decorations.get(&group).cloned().unwrap_or_default();
                    for i in 2..len {
                        let target = self.id(inst, i)?;
                        let t = self.decorations(target);
                        t.set = t.set.or(d.set);
                        t.binding = t.binding.or(d.binding);
                        t.spec_id = t.spec_id.or(d.spec_id);
                        t.builtin = t.builtin.or(d.builtin);
                        t.array_stride = t.array_stride.or(d.array_stride);
                        t.block |= d.block;
                        t.buffer_block |= d.buffer_block;
                    }
                }
                OP_GROUP_MEMBER_DECORATE => {
                    let group = self.id(inst, 1)?;
                    let d = self.decorations.get(&group).cloned().unwrap_or_default();
                    let mut i = 2;
                    while i + 1 < len {
                        let target = self.id(inst, i)?;
                        let member = self.operand(inst, i + 1)?;
                        // A group's own member decorations are keyed by member 0.
                        if let Some(&(offset, stride)) = d.members.get(&0) {
                            let m = self.decorations(target).members.entry(member).or_default();
                            m.0 = m.0.or(offset);
                            m.1 = m.1.or(stride);
                        }
                        i += 2;
                    }
                }
                19..=39 if !in_function => self.type_decl(inst)?,
                19..=39 => {
                    return Err(self.err(format!(
                        "type declaration (opcode {op}) inside a function at word {}",
                        inst.at
                    )));
                }
                OP_CONSTANT | OP_SPEC_CONSTANT => {
                    let id = self.define(inst, 2)?;
                    let value = self.operand(inst, 3)?;
                    self.constants.insert(
                        id,
                        Constant::Scalar {
                            value,
                            spec: op == OP_SPEC_CONSTANT,
                        },
                    );
                }
                OP_CONSTANT_COMPOSITE | OP_SPEC_CONSTANT_COMPOSITE => {
                    let id = self.define(inst, 2)?;
                    let mut parts = [0; 3];
                    for (k, part) in parts.iter_mut().enumerate() {
                        if let Some(p) = inst.word(3 + k) {
                            *part = p;
                        }
                    }
                    self.constants.insert(id, Constant::Composite { parts });
                }
                OP_VARIABLE => {
                    let ty = self.id(inst, 1)?;
                    let id = self.define(inst, 2)?;
                    let storage = self.operand(inst, 3)?;
                    match current {
                        None if storage == STORAGE_FUNCTION => {
                            return Err(self.err(format!(
                                "global variable {id} has the Function storage class"
                            )));
                        }
                        None => {
                            self.globals.insert(id, (ty, storage));
                        }
                        Some(f) => self.note_uses(f, inst)?,
                    }
                }
                OP_FUNCTION => {
                    if current.is_some() {
                        return Err(self.err(format!(
                            "OpFunction at word {} inside another function",
                            inst.at
                        )));
                    }
                    let id = self.define(inst, 2)?;
                    seen_function = true;
                    current = Some(id);
                    self.functions.entry(id).or_default();
                }
                OP_FUNCTION_END => {
                    if current.take().is_none() {
                        return Err(self.err(format!(
                            "OpFunctionEnd at word {} outside a function",
                            inst.at
                        )));
                    }
                }
                _ => {
                    if let Some(f) = current {
                        self.note_uses(f, inst)?;
                    } else if matches!(op, OP_FUNCTION_CALL | 248..=255) {
                        return Err(self.err(format!(
                            "instruction (opcode {op}) at word {} outside a function",
                            inst.at
                        )));
                    }
                }
            }
        }
        if current.is_some() {
            return Err(self.err("the last function has no OpFunctionEnd: truncated module"));
        }
        if memory_models != 1 {
            return Err(self.err(format!(
                "{memory_models} OpMemoryModel instructions (exactly one is required)"
            )));
        }
        if !shader {
            return Err(self.err("no Shader capability: not a Vulkan shader module"));
        }
        if declared.is_empty() {
            return Err(self.err("the module has no GLCompute entry point"));
        }
        for (entry, mode, inst) in &modes {
            let Some(d) = declared.iter_mut().find(|d| d.function == *entry) else {
                continue; // a mode of a non-compute entry point
            };
            match (*mode, inst.op) {
                (MODE_LOCAL_SIZE, OP_EXECUTION_MODE) if inst.words.len() >= 6 => {
                    let size = [inst.words[3], inst.words[4], inst.words[5]];
                    d.local_size = Some((size, inst.at + 3));
                }
                (MODE_LOCAL_SIZE_ID, OP_EXECUTION_MODE_ID) if inst.words.len() >= 6 => {
                    d.local_size_id = Some([inst.words[3], inst.words[4], inst.words[5]]);
                }
                (MODE_LOCAL_SIZE | MODE_LOCAL_SIZE_ID, _) => {
                    return Err(self.err(format!(
                        "execution mode {mode} of `{}` at word {} is malformed",
                        d.name, inst.at
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
        let version = parsed.version;
        let mut entry_points = declared
            .iter()
            .map(|d| self.entry_point(d, builtin_size, version))
            .collect::<Result<Vec<_>>>()?;
        if !self.bounds_checked {
            for e in &mut entry_points {
                e.min_sizes.iter_mut().for_each(|m| *m = 0);
            }
        }
        Ok((entry_points, self.bounds_checked))
    }

    fn type_decl(&mut self, inst: &Inst<'_>) -> Result<()> {
        let op = inst.op;
        if op == 39 {
            // OpTypeForwardPointer declares no result.
            self.id(inst, 1)?;
            return Ok(());
        }
        let id = self.define(inst, 1)?;
        let ty = match op {
            OP_TYPE_BOOL => Type::Bool,
            OP_TYPE_INT => Type::Int(self.operand(inst, 2)?, self.operand(inst, 3)? != 0),
            OP_TYPE_FLOAT => Type::Float(self.operand(inst, 2)?),
            OP_TYPE_VECTOR => Type::Vector(self.id(inst, 2)?, self.operand(inst, 3)?),
            OP_TYPE_MATRIX => Type::Matrix(self.id(inst, 2)?, self.operand(inst, 3)?),
            OP_TYPE_ARRAY => Type::Array(self.id(inst, 2)?, self.id(inst, 3)?),
            OP_TYPE_RUNTIME_ARRAY => {
                self.id(inst, 2)?;
                Type::RuntimeArray
            }
            OP_TYPE_STRUCT => {
                let mut members = Vec::new();
                for i in 2..inst.words.len() {
                    members.push(self.id(inst, i)?);
                }
                Type::Struct(members)
            }
            OP_TYPE_POINTER => Type::Pointer(self.operand(inst, 2)?, self.id(inst, 3)?),
            _ => Type::Other,
        };
        self.types.insert(id, ty);
        Ok(())
    }

    /// Notes which globals and functions an instruction of function `f` references.
    fn note_uses(&mut self, f: u32, inst: &Inst<'_>) -> Result<()> {
        let len = inst.words.len();
        if inst.op == OP_FUNCTION_CALL {
            let callee = self.id(inst, 3)?;
            self.functions.entry(f).or_default().calls.insert(callee);
        }
        if inst.op == OP_EXT_INST {
            let set = self.id(inst, 3)?;
            if self.nonsemantic_sets.contains(&set) {
                return Ok(()); // debug information is not a use
            }
        }
        let range = if inst.op == OP_EXT_INST {
            5..len
        } else {
            pointer_operands(inst.op, len)
        };
        for i in range {
            let word = inst.words[i];
            if self.globals.contains_key(&word) {
                self.functions.entry(f).or_default().globals.insert(word);
            }
        }
        Ok(())
    }

    /// The globals used by the static call tree of `function`.
    fn used_globals(&self, function: u32) -> HashSet<u32> {
        let mut seen = HashSet::new();
        let mut stack = vec![function];
        let mut globals = HashSet::new();
        while let Some(f) = stack.pop() {
            if !seen.insert(f) {
                continue;
            }
            if let Some(func) = self.functions.get(&f) {
                globals.extend(func.globals.iter().copied());
                stack.extend(func.calls.iter().copied());
            }
        }
        globals
    }

    fn entry_point(
        &self,
        d: &Declared,
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
        let mut bindings = Vec::new();
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
                    let storage_buffer = storage == STORAGE_STORAGE_BUFFER
                        || (storage == STORAGE_UNIFORM && buffer_block);
                    if !storage_buffer {
                        let what = if storage == STORAGE_UNIFORM {
                            "a uniform buffer"
                        } else {
                            "an image, sampler or other opaque resource"
                        };
                        unsupported.push(format!(
                            "set {set} binding {binding} is {what} (offload binds storage \
                             buffers only)"
                        ));
                    } else if !matches!(self.types.get(&pointee), Some(Type::Struct(_))) {
                        unsupported.push(format!(
                            "set {set} binding {binding} is an array of buffers (offload \
                             binds one buffer per binding)"
                        ));
                    } else if set != 0 {
                        unsupported.push(format!(
                            "a storage buffer in descriptor set {set} (offload binds set 0 only)"
                        ));
                    } else if binding > MAX_BINDING {
                        unsupported.push(format!(
                            "storage buffer binding {binding} (offload binds 0 to {MAX_BINDING})"
                        ));
                    } else {
                        let min = self.min_binding_size(pointee).unwrap_or(0);
                        match bindings.iter_mut().find(|(b, _)| *b == binding) {
                            Some((_, known)) => *known = min.max(*known),
                            None => bindings.push((binding, min)),
                        }
                    }
                }
                STORAGE_PUSH_CONSTANT => {
                    push_blocks += 1;
                    self.leaves(pointee, 0, &mut push, 0).map_err(|reason| {
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
        let (bindings, min_sizes) = bindings.into_iter().unzip();
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
            min_sizes,
            push,
            push_size,
            uses_workgroup_memory,
            unsupported: (!unsupported.is_empty()).then(|| unsupported.join("; ")),
        })
    }

    fn constant(&self, id: u32) -> Option<Constant> {
        self.constants.get(&id).copied()
    }

    /// A dimension given by constant `id`: its value and, if specialisable, its SpecId.
    fn dimension(&self, id: u32, what: &str) -> Result<(u32, Option<u32>)> {
        match self.constant(id) {
            Some(Constant::Scalar { value, spec }) => {
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

    fn workgroup_size(&self, d: &Declared, builtin: Option<u32>) -> Result<WorkgroupSize> {
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

    /// Flattens a push-constant type into its leaves, in declaration order.
    fn leaves(
        &self,
        ty: u32,
        base: u32,
        out: &mut Vec<PushLeaf>,
        depth: u32,
    ) -> std::result::Result<(), String> {
        if depth > 16 {
            return Err("structs nested more than 16 deep".into());
        }
        let Some(Type::Struct(members)) = self.types.get(&ty) else {
            return Err(format!("the block {ty} is not a struct"));
        };
        let deco = self.decorations.get(&ty);
        for (m, &member) in members.iter().enumerate() {
            let (offset, matrix_stride) = deco
                .and_then(|d| d.members.get(&(m as u32)).copied())
                .unwrap_or((None, None));
            let offset =
                offset.ok_or_else(|| format!("member {m} of struct {ty} has no Offset"))?;
            let at = base
                .checked_add(offset)
                .ok_or_else(|| "offsets overflow".to_string())?;
            if let Some(Type::Struct(_)) = self.types.get(&member) {
                self.leaves(member, at, out, depth + 1)?;
            } else {
                let size = self.size_of(member, matrix_stride, 0)?;
                out.push(PushLeaf {
                    offset: at,
                    size,
                    ty: self.scalar_type(member),
                });
            }
        }
        Ok(())
    }

    /// The fewest bytes a buffer bound to storage block `block` must hold: the end of its
    /// last member, a trailing runtime array counting one element (its `ArrayStride`).
    /// `None` where the module leaves a size open (no `Offset`, no `ArrayStride`).
    fn min_binding_size(&self, block: u32) -> Option<u64> {
        let Some(Type::Struct(members)) = self.types.get(&block) else {
            return None;
        };
        let deco = self.decorations.get(&block)?;
        let mut end = 0u64;
        for (m, &member) in members.iter().enumerate() {
            let (offset, matrix_stride) = deco.members.get(&(m as u32)).copied()?;
            let size = match self.types.get(&member) {
                Some(Type::RuntimeArray) => self.decorations.get(&member)?.array_stride?,
                _ => self.size_of(member, matrix_stride, 0).ok()?,
            };
            end = end.max(u64::from(offset?) + u64::from(size));
        }
        Some(end)
    }

    /// The Rust type of a scalar push-constant member (`None` for vectors, matrices,
    /// arrays and 16-bit floats: those are declared by size).
    fn scalar_type(&self, ty: u32) -> Option<ScalarType> {
        Some(match self.types.get(&ty)? {
            Type::Int(8, false) => ScalarType::U8,
            Type::Int(8, true) => ScalarType::I8,
            Type::Int(16, false) => ScalarType::U16,
            Type::Int(16, true) => ScalarType::I16,
            Type::Int(32, false) => ScalarType::U32,
            Type::Int(32, true) => ScalarType::I32,
            Type::Int(64, false) => ScalarType::U64,
            Type::Int(64, true) => ScalarType::I64,
            Type::Float(32) => ScalarType::F32,
            Type::Float(64) => ScalarType::F64,
            _ => return None,
        })
    }

    /// The size in bytes of a push-constant member's (or a storage block member's) type.
    fn size_of(
        &self,
        ty: u32,
        matrix_stride: Option<u32>,
        depth: u32,
    ) -> std::result::Result<u32, String> {
        if depth > 16 {
            return Err("types nested more than 16 deep".into());
        }
        let too_big = || "a member larger than 4 GiB".to_string();
        match self.types.get(&ty) {
            Some(Type::Int(w, _) | Type::Float(w)) if matches!(w, 8 | 16 | 32 | 64) => Ok(w / 8),
            Some(Type::Vector(c, n)) => self
                .size_of(*c, None, depth + 1)?
                .checked_mul(*n)
                .ok_or_else(too_big),
            Some(Type::Matrix(col, n)) => {
                let column = match matrix_stride {
                    Some(s) => s,
                    None => self.size_of(*col, None, depth + 1)?,
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
                    None => self.size_of(*elem, None, depth + 1)?,
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
                    let size = self.size_of(member, stride, depth + 1)?;
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
        w.extend(inst(OP_CAPABILITY, &[CAPABILITY_SHADER]));
        w.extend(inst(OP_MEMORY_MODEL, &[0, 1]));
        let mut ep = vec![MODEL_GL_COMPUTE, 1];
        ep.extend(string("main"));
        if version >= 0x0001_0400 {
            ep.extend([20, 30]);
        }
        w.extend(inst(OP_ENTRY_POINT, &ep));
        w.extend(inst(OP_EXECUTION_MODE, &[1, MODE_LOCAL_SIZE, 8, 4, 1]));
        w.extend(inst(OP_DECORATE, &[20, DECORATION_DESCRIPTOR_SET, 0]));
        w.extend(inst(OP_DECORATE, &[20, DECORATION_BINDING, 1]));
        w.extend(inst(OP_DECORATE, &[11, DECORATION_BLOCK]));
        w.extend(inst(OP_MEMBER_DECORATE, &[11, 0, DECORATION_OFFSET, 0]));
        w.extend(inst(OP_DECORATE, &[14, DECORATION_BLOCK]));
        w.extend(inst(OP_MEMBER_DECORATE, &[14, 0, DECORATION_OFFSET, 0]));
        w.extend(inst(OP_MEMBER_DECORATE, &[14, 1, DECORATION_OFFSET, 8]));
        w.extend(inst(19, &[2])); // void
        w.extend(inst(33, &[3, 2])); // fn type
        w.extend(inst(OP_TYPE_INT, &[4, 32, 0]));
        w.extend(inst(OP_TYPE_FLOAT, &[5, 32]));
        w.extend(inst(OP_TYPE_RUNTIME_ARRAY, &[10, 4]));
        w.extend(inst(OP_TYPE_STRUCT, &[11, 10]));
        w.extend(inst(OP_TYPE_POINTER, &[12, STORAGE_STORAGE_BUFFER, 11]));
        w.extend(inst(OP_TYPE_STRUCT, &[14, 4, 5]));
        w.extend(inst(OP_TYPE_POINTER, &[15, STORAGE_PUSH_CONSTANT, 14]));
        w.extend(inst(OP_TYPE_POINTER, &[16, STORAGE_PUSH_CONSTANT, 4]));
        w.extend(inst(OP_CONSTANT, &[4, 17, 0]));
        w.extend(inst(OP_VARIABLE, &[12, 20, STORAGE_STORAGE_BUFFER]));
        w.extend(inst(OP_VARIABLE, &[15, 30, STORAGE_PUSH_CONSTANT]));
        w.extend(inst(OP_FUNCTION, &[2, 1, 0, 3]));
        w.extend(inst(248, &[21])); // label
        w.extend(inst(65, &[16, 22, 30, 17])); // access chain into the push block
        w.extend(inst(61, &[4, 23, 22])); // load
        w.extend(inst(68, &[4, 24, 20, 0])); // array length of the buffer
        w.extend(inst(253, &[])); // return
        w.extend(inst(OP_FUNCTION_END, &[]));
        w
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

        mark_bounds_checked(&mut words);
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
                if op == OP_SOURCE_EXTENSION {
                    break at;
                }
                assert!(
                    [
                        OP_CAPABILITY,
                        10,
                        OP_EXT_INST_IMPORT,
                        OP_MEMORY_MODEL,
                        OP_ENTRY_POINT
                    ]
                    .contains(&op)
                        || op == OP_EXECUTION_MODE,
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
        assert_eq!(prev_op, OP_EXECUTION_MODE);
    }

    #[test]
    fn a_marked_module_without_strides_has_unknown_minimum_sizes() {
        let mut words = minimal(0x0001_0300);
        mark_bounds_checked(&mut words);
        let r = reflect(&bytes(&words), V16, "t").unwrap();
        assert!(r.bounds_checked);
        assert_eq!(r.entry_points[0].min_sizes, [0]);
    }

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
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
                        ty: Some(ScalarType::U32)
                    },
                    PushLeaf {
                        offset: 8,
                        size: 4,
                        ty: Some(ScalarType::F32)
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
        w[HEADER_WORDS] = u32::from(OP_CAPABILITY);
        assert!(reason(reflect(&bytes(&w), V16, "t")).contains("word count of 0"));
        // A word count past the end.
        let mut w = good.clone();
        w[HEADER_WORDS] = (0xFFFF << 16) | u32::from(OP_CAPABILITY);
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
    fn workgroup_size_from_specialisation_constants() {
        // WorkgroupSize built-in = SpecConstantComposite(spec 0 -> id 100, const 1, const 1)
        let mut w = minimal(0x0001_0300);
        w[3] = 60;
        let extra_deco = [
            inst(OP_DECORATE, &[50, DECORATION_SPEC_ID, 7]),
            inst(
                OP_DECORATE,
                &[52, DECORATION_BUILT_IN, BUILT_IN_WORKGROUP_SIZE],
            ),
        ]
        .concat();
        let vec3 = inst(OP_TYPE_VECTOR, &[53, 4, 3]);
        let consts = [
            inst(OP_SPEC_CONSTANT, &[4, 50, 32]),
            inst(OP_CONSTANT, &[4, 51, 1]),
            inst(OP_SPEC_CONSTANT_COMPOSITE, &[53, 52, 50, 51, 51]),
        ]
        .concat();
        // Insert decorations before the first type (void) and constants before the variables.
        let void_at = w.windows(2).position(|p| p == [(2 << 16) | 19, 2]).unwrap();
        w.splice(void_at..void_at, extra_deco);
        let var_at = w
            .windows(3)
            .position(|p| p == [(4 << 16) | u32::from(OP_VARIABLE), 12, 20])
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
