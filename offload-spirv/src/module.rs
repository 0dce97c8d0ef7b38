//! The flavour-independent SPIR-V reader: what both the Vulkan (`GLCompute`) and the
//! OpenCL (`Kernel`) reflections stand on.
//!
//! It owns the header (magic, version, id bound, schema), the split into instructions with
//! every word count checked, the id operands checked against the bound, the module's
//! structure (one memory model, entry points and execution modes before the first function,
//! types outside functions, functions properly closed, no id defined twice) and the tables a
//! reflection reads: types, constants, decorations, names of entry points, global variables
//! and, per function, its parameters, the globals it references and the functions it calls.
//! What a flavour accepts (capabilities, memory model, execution model) is the flavour's
//! business; nothing here panics on any input.

use std::collections::{HashMap, HashSet};

use offload_core::{BackendKind, Error, Result, ScalarType};

/// The SPIR-V magic number, in the module's first word.
pub const MAGIC: u32 = spirv::MAGIC_NUMBER;
/// The universal limit on the id bound (SPIR-V specification, "Universal Limits").
pub const MAX_BOUND: u32 = 4_194_303;
/// Words in the module header: magic, version, generator, bound, schema.
pub const HEADER_WORDS: usize = 5;

/// Opcodes the reader and the reflections name, numbered by the `spirv` crate's `Op` (an
/// instruction's first word holds its opcode in the low 16 bits).
pub mod op {
    #![allow(missing_docs)]
    use spirv::Op;
    pub const NOP: u16 = Op::Nop as u16;
    pub const NAME: u16 = Op::Name as u16;
    pub const SOURCE_EXTENSION: u16 = Op::SourceExtension as u16;
    pub const EXTENSION: u16 = Op::Extension as u16;
    pub const EXT_INST_IMPORT: u16 = Op::ExtInstImport as u16;
    pub const EXT_INST: u16 = Op::ExtInst as u16;
    pub const MEMORY_MODEL: u16 = Op::MemoryModel as u16;
    pub const ENTRY_POINT: u16 = Op::EntryPoint as u16;
    pub const EXECUTION_MODE: u16 = Op::ExecutionMode as u16;
    pub const CAPABILITY: u16 = Op::Capability as u16;
    pub const TYPE_VOID: u16 = Op::TypeVoid as u16;
    pub const TYPE_BOOL: u16 = Op::TypeBool as u16;
    pub const TYPE_INT: u16 = Op::TypeInt as u16;
    pub const TYPE_FLOAT: u16 = Op::TypeFloat as u16;
    pub const TYPE_VECTOR: u16 = Op::TypeVector as u16;
    pub const TYPE_MATRIX: u16 = Op::TypeMatrix as u16;
    pub const TYPE_ARRAY: u16 = Op::TypeArray as u16;
    pub const TYPE_RUNTIME_ARRAY: u16 = Op::TypeRuntimeArray as u16;
    pub const TYPE_STRUCT: u16 = Op::TypeStruct as u16;
    pub const TYPE_POINTER: u16 = Op::TypePointer as u16;
    pub const TYPE_FUNCTION: u16 = Op::TypeFunction as u16;
    pub const TYPE_FORWARD_POINTER: u16 = Op::TypeForwardPointer as u16;
    pub const CONSTANT: u16 = Op::Constant as u16;
    pub const CONSTANT_COMPOSITE: u16 = Op::ConstantComposite as u16;
    pub const SPEC_CONSTANT: u16 = Op::SpecConstant as u16;
    pub const SPEC_CONSTANT_COMPOSITE: u16 = Op::SpecConstantComposite as u16;
    pub const FUNCTION: u16 = Op::Function as u16;
    pub const FUNCTION_PARAMETER: u16 = Op::FunctionParameter as u16;
    pub const FUNCTION_END: u16 = Op::FunctionEnd as u16;
    pub const FUNCTION_CALL: u16 = Op::FunctionCall as u16;
    pub const VARIABLE: u16 = Op::Variable as u16;
    pub const DECORATE: u16 = Op::Decorate as u16;
    pub const MEMBER_DECORATE: u16 = Op::MemberDecorate as u16;
    pub const DECORATION_GROUP: u16 = Op::DecorationGroup as u16;
    pub const GROUP_DECORATE: u16 = Op::GroupDecorate as u16;
    pub const GROUP_MEMBER_DECORATE: u16 = Op::GroupMemberDecorate as u16;
    pub const EXECUTION_MODE_ID: u16 = Op::ExecutionModeId as u16;
    /// The first block instruction (`OpLabel`); the block instructions run to
    /// [`UNREACHABLE`].
    pub const LABEL: u16 = Op::Label as u16;
    /// The last block instruction (`OpUnreachable`).
    pub const UNREACHABLE: u16 = Op::Unreachable as u16;
}

/// Operand values (capabilities, models, storage classes, decorations) the reader and the
/// reflections name, numbered by the `spirv` crate's enums.
pub mod value {
    #![allow(missing_docs)]
    use spirv::{
        AddressingModel, Capability, Decoration, ExecutionModel, FunctionParameterAttribute,
        LinkageType, MemoryModel, StorageClass,
    };
    pub const CAPABILITY_SHADER: u32 = Capability::Shader as u32;
    pub const CAPABILITY_KERNEL: u32 = Capability::Kernel as u32;
    pub const ADDRESSING_PHYSICAL64: u32 = AddressingModel::Physical64 as u32;
    pub const MEMORY_MODEL_OPENCL: u32 = MemoryModel::OpenCL as u32;
    pub const MODEL_GL_COMPUTE: u32 = ExecutionModel::GLCompute as u32;
    pub const MODEL_KERNEL: u32 = ExecutionModel::Kernel as u32;
    pub const STORAGE_UNIFORM_CONSTANT: u32 = StorageClass::UniformConstant as u32;
    pub const STORAGE_UNIFORM: u32 = StorageClass::Uniform as u32;
    pub const STORAGE_WORKGROUP: u32 = StorageClass::Workgroup as u32;
    pub const STORAGE_CROSS_WORKGROUP: u32 = StorageClass::CrossWorkgroup as u32;
    pub const STORAGE_FUNCTION: u32 = StorageClass::Function as u32;
    pub const STORAGE_PUSH_CONSTANT: u32 = StorageClass::PushConstant as u32;
    pub const STORAGE_STORAGE_BUFFER: u32 = StorageClass::StorageBuffer as u32;
    pub const STORAGE_PHYSICAL_STORAGE_BUFFER: u32 = StorageClass::PhysicalStorageBuffer as u32;
    pub const DECORATION_SPEC_ID: u32 = Decoration::SpecId as u32;
    pub const DECORATION_BLOCK: u32 = Decoration::Block as u32;
    pub const DECORATION_BUFFER_BLOCK: u32 = Decoration::BufferBlock as u32;
    pub const DECORATION_ARRAY_STRIDE: u32 = Decoration::ArrayStride as u32;
    pub const DECORATION_MATRIX_STRIDE: u32 = Decoration::MatrixStride as u32;
    pub const DECORATION_CPACKED: u32 = Decoration::CPacked as u32;
    pub const DECORATION_BUILT_IN: u32 = Decoration::BuiltIn as u32;
    pub const DECORATION_BINDING: u32 = Decoration::Binding as u32;
    pub const DECORATION_DESCRIPTOR_SET: u32 = Decoration::DescriptorSet as u32;
    pub const DECORATION_OFFSET: u32 = Decoration::Offset as u32;
    pub const DECORATION_FUNC_PARAM_ATTR: u32 = Decoration::FuncParamAttr as u32;
    pub const DECORATION_LINKAGE_ATTRIBUTES: u32 = Decoration::LinkageAttributes as u32;
    pub const LINKAGE_EXPORT: u32 = LinkageType::Export as u32;
    pub const FUNC_PARAM_ATTR_BY_VAL: u32 = FunctionParameterAttribute::ByVal as u32;
}

use op::*;
use value::*;

/// A SPIR-V version, `major.minor`.
///
/// ```
/// use offload_spirv::Version;
/// let v = Version { major: 1, minor: 4 };
/// assert_eq!(v.to_string(), "1.4");
/// assert!(v < Version::NEWEST);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Always 1 in a module the reader accepts.
    pub major: u8,
    /// 0 to 6.
    pub minor: u8,
}

impl Version {
    /// The newest SPIR-V version that exists (1.6).
    pub const NEWEST: Version = Version { major: 1, minor: 6 };
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Who reads a module: the backend and the user's call that errors name.
///
/// ```
/// use offload_core::{BackendKind, Error};
/// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "" };
/// let Error::InvalidBinary { backend, reason, .. } = ctx.err("no kernels") else { panic!() };
/// assert_eq!((backend, reason.as_str()), (BackendKind::Ze, "SPIR-V: no kernels"));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Context {
    /// The backend whose `InvalidBinary` errors this reader returns.
    pub backend: BackendKind,
    /// The call errors name: empty from a backend (the handle of the user's call names it).
    pub call: &'static str,
}

impl Context {
    /// `Error::InvalidBinary` for this backend and call, the reason prefixed by `SPIR-V: `.
    ///
    /// ```
    /// use offload_core::BackendKind;
    /// let ctx = offload_spirv::Context { backend: BackendKind::Vulkan, call: "t" };
    /// assert!(ctx.err("bad").to_string().contains("SPIR-V: bad"));
    /// ```
    pub fn err(&self, reason: impl Into<String>) -> Error {
        Error::InvalidBinary {
            backend: self.backend,
            call: self.call,
            reason: format!("SPIR-V: {}", reason.into()),
        }
    }

    /// The image as host-order words: it must be non-empty and a whole number of words.
    ///
    /// ```
    /// use offload_core::BackendKind;
    /// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
    /// assert_eq!(ctx.words(&1u32.to_ne_bytes()).unwrap(), [1]);
    /// assert!(ctx.words(&[1, 2, 3]).is_err());
    /// ```
    pub fn words(&self, image: &[u8]) -> Result<Vec<u32>> {
        if image.is_empty() {
            return Err(self.err("the image is empty"));
        }
        if image.len() % 4 != 0 {
            return Err(self.err(format!(
                "{} bytes is not a whole number of 32-bit words",
                image.len()
            )));
        }
        Ok(image
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Checks the header of `words`: magic (host order), a version from 1.0 to 1.6, an id
    /// bound within the universal limit and a zero schema.
    ///
    /// ```
    /// use offload_core::BackendKind;
    /// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
    /// let h = ctx.header(&[offload_spirv::MAGIC, 0x0001_0400, 0, 9, 0]).unwrap();
    /// assert_eq!((h.version.to_string(), h.bound), ("1.4".to_string(), 9));
    /// assert!(ctx.header(&[offload_spirv::MAGIC, 0x0001_0700, 0, 9, 0]).is_err());
    /// ```
    pub fn header(&self, words: &[u32]) -> Result<Header> {
        if let Some(&first) = words.first()
            && first != MAGIC
        {
            return Err(self.bad_magic(first));
        }
        let Some(header) = words.get(..HEADER_WORDS) else {
            return Err(self.err(format!(
                "{} bytes is shorter than the 20-byte header",
                words.len() * 4
            )));
        };
        let v = header[1];
        let version = Version {
            major: (v >> 16) as u8,
            minor: (v >> 8) as u8,
        };
        if v & 0xFF00_00FF != 0 || version.major != 1 || version.minor > 6 {
            return Err(self.err(format!(
                "unknown version word {v:#010x} (SPIR-V 1.0 to 1.6 exist)"
            )));
        }
        let bound = header[3];
        if bound == 0 || bound > MAX_BOUND {
            return Err(self.err(format!("id bound {bound} is outside 1..={MAX_BOUND}")));
        }
        if header[4] != 0 {
            return Err(self.err(format!("schema word is {:#x}, must be 0", header[4])));
        }
        Ok(Header { version, bound })
    }

    fn bad_magic(&self, first: u32) -> Error {
        if first == MAGIC.swap_bytes() {
            return self.err(
                "the magic number is byte-swapped: the module was written for a host of the \
                 other endianness (offload takes SPIR-V words in host order)",
            );
        }
        self.err(format!(
            "magic number {first:#010x}, expected {MAGIC:#010x}: not a SPIR-V module"
        ))
    }

    /// Splits `words` (a whole module whose header [`Context::header`] accepted) into
    /// instructions and walks them: structure, ids and the tables of [`Module`].
    ///
    /// ```
    /// use offload_core::BackendKind;
    /// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
    /// let words = [offload_spirv::MAGIC, 0x0001_0000, 0, 1, 0, (3 << 16) | 14, 2, 2];
    /// let header = ctx.header(&words).unwrap();
    /// let module = ctx.module(&words, header).unwrap();
    /// assert_eq!(module.memory_model, (2, 2)); // Physical64 OpenCL
    /// ```
    pub fn module<'a>(&self, words: &'a [u32], header: Header) -> Result<Module<'a>> {
        let insts = self.split(words)?;
        let mut walk = Module {
            ctx: *self,
            header,
            insts: Vec::new(),
            capabilities: Vec::new(),
            memory_model: (0, 0),
            entry_points: Vec::new(),
            modes: Vec::new(),
            source_extensions: Vec::new(),
            types: HashMap::new(),
            constants: HashMap::new(),
            decorations: HashMap::new(),
            globals: HashMap::new(),
            functions: HashMap::new(),
            defined: HashSet::new(),
            nonsemantic_sets: HashSet::new(),
        };
        walk.run(&insts)?;
        walk.insts = insts;
        Ok(walk)
    }

    fn split<'a>(&self, words: &'a [u32]) -> Result<Vec<Inst<'a>>> {
        let mut insts = Vec::new();
        let mut at = HEADER_WORDS;
        while at < words.len() {
            let first = words[at];
            let count = (first >> 16) as usize;
            let op = (first & 0xFFFF) as u16;
            if count == 0 {
                return Err(self.err(format!(
                    "instruction at word {at} (opcode {op}) has a word count of 0"
                )));
            }
            let Some(inst_words) = words.get(at..at + count) else {
                return Err(self.err(format!(
                    "instruction at word {at} (opcode {op}) has {count} words but only {} \
                     remain: the module is truncated",
                    words.len() - at
                )));
            };
            insts.push(Inst {
                op,
                at,
                words: inst_words,
            });
            at += count;
        }
        Ok(insts)
    }
}

/// A checked module header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The SPIR-V version the module declares.
    pub version: Version,
    /// Every id is below it.
    pub bound: u32,
}

/// One instruction: its opcode, the index of its first word, and its words.
///
/// ```
/// let words = [(2 << 16) | 17, 6]; // OpCapability Kernel
/// let inst = offload_spirv::Inst { op: 17, at: 5, words: &words };
/// assert_eq!(inst.word(1), Some(6));
/// assert_eq!(inst.word(2), None);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Inst<'a> {
    /// The opcode (low half of the first word).
    pub op: u16,
    /// The index of its first word in the module.
    pub at: usize,
    /// All its words, the opcode word included.
    pub words: &'a [u32],
}

impl Inst<'_> {
    /// Word `i` (word 0 is the opcode word).
    pub fn word(&self, i: usize) -> Option<u32> {
        self.words.get(i).copied()
    }

    /// A literal string starting at word `i`, and the index of the word after it; `None`
    /// if it is not nul-terminated inside the instruction or not UTF-8.
    ///
    /// ```
    /// let words = [0, u32::from_le_bytes(*b"main"), 0];
    /// let inst = offload_spirv::Inst { op: 5, at: 0, words: &words };
    /// assert_eq!(inst.string(1), Some(("main".to_string(), 3)));
    /// ```
    pub fn string(&self, i: usize) -> Option<(String, usize)> {
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    /// `OpTypeBool`.
    Bool,
    /// Width in bits, and whether it is signed.
    Int(u32, bool),
    /// Width in bits.
    Float(u32),
    /// Component type, count.
    Vector(u32, u32),
    /// Column type, count.
    Matrix(u32, u32),
    /// Element type, length constant.
    Array(u32, u32),
    /// `OpTypeRuntimeArray`.
    RuntimeArray,
    /// Member types.
    Struct(Vec<u32>),
    /// Storage class, pointee type.
    Pointer(u32, u32),
    /// Return type, parameter types.
    Function(u32, Vec<u32>),
    /// Any other type (void, images, samplers, events, …).
    Other,
}

/// A constant's value, as far as reflection needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constant {
    /// A scalar constant (`OpConstant`, `OpSpecConstant`).
    Scalar {
        /// Its low word.
        value: u32,
        /// Its second word (0 for 32-bit and narrower values).
        high: u32,
        /// Whether it is a specialisation constant.
        spec: bool,
    },
    /// A composite constant.
    Composite {
        /// Its first three components (whether each is a specialisation constant is the
        /// components' business).
        parts: [u32; 3],
    },
}

/// The decorations of one id that reflection reads.
#[derive(Clone, Debug, Default)]
pub struct Decorations {
    /// `DescriptorSet`.
    pub set: Option<u32>,
    /// `Binding`.
    pub binding: Option<u32>,
    /// `SpecId`.
    pub spec_id: Option<u32>,
    /// `BuiltIn`.
    pub builtin: Option<u32>,
    /// `Block`.
    pub block: bool,
    /// `BufferBlock`.
    pub buffer_block: bool,
    /// `CPacked` (an OpenCL struct without padding).
    pub packed: bool,
    /// `ArrayStride`.
    pub array_stride: Option<u32>,
    /// `LinkageAttributes`: the name and the linkage type (0 export, 1 import).
    pub linkage: Option<(String, u32)>,
    /// `FuncParamAttr` values (2 is `ByVal`).
    pub param_attrs: Vec<u32>,
    /// Per member: (offset, matrix stride).
    pub members: HashMap<u32, (Option<u32>, Option<u32>)>,
}

/// An `OpEntryPoint`.
#[derive(Clone, Debug)]
pub struct EntryDecl {
    /// The execution model (5 `GLCompute`, 6 `Kernel`, …).
    pub model: u32,
    /// The function id.
    pub function: u32,
    /// The entry point's name.
    pub name: String,
    /// The interface ids.
    pub interface: Vec<u32>,
}

/// An `OpExecutionMode` or `OpExecutionModeId`.
#[derive(Clone, Copy, Debug)]
pub struct Mode<'a> {
    /// The entry point's function id.
    pub entry: u32,
    /// The mode.
    pub mode: u32,
    /// The instruction.
    pub inst: Inst<'a>,
}

/// One function: its parameters and what its body references.
#[derive(Clone, Debug, Default)]
pub struct Function {
    /// Its `OpTypeFunction` id.
    pub ty: u32,
    /// Its `OpFunctionParameter`s in order: (type id, result id).
    pub params: Vec<(u32, u32)>,
    /// The global variables its instructions take as pointer operands.
    pub globals: HashSet<u32>,
    /// The functions it calls.
    pub calls: HashSet<u32>,
}

/// A split, structurally checked module and its tables (see the module docs).
///
/// ```
/// use offload_core::BackendKind;
/// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
/// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
/// let words = ctx.words(&image).unwrap();
/// let module = ctx.module(&words, ctx.header(&words).unwrap()).unwrap();
/// assert_eq!(module.entry_points.len(), 4);
/// assert!(module.capabilities.contains(&6)); // Kernel
/// ```
#[derive(Debug)]
pub struct Module<'a> {
    /// Who reads it (errors name the backend and call).
    pub ctx: Context,
    /// Its header.
    pub header: Header,
    /// Every instruction, in order.
    pub insts: Vec<Inst<'a>>,
    /// The declared capabilities, in order.
    pub capabilities: Vec<u32>,
    /// The addressing and memory models of its one `OpMemoryModel`.
    pub memory_model: (u32, u32),
    /// Its entry points, in order (names unique per execution model).
    pub entry_points: Vec<EntryDecl>,
    /// Its execution modes, in order.
    pub modes: Vec<Mode<'a>>,
    /// The strings of its `OpSourceExtension`s outside functions.
    pub source_extensions: Vec<String>,
    /// Types by id.
    pub types: HashMap<u32, Type>,
    /// Constants by id.
    pub constants: HashMap<u32, Constant>,
    /// Decorations by target id (group decorations applied).
    pub decorations: HashMap<u32, Decorations>,
    /// Global variables: id -> (pointer type, storage class).
    pub globals: HashMap<u32, (u32, u32)>,
    /// Functions by id.
    pub functions: HashMap<u32, Function>,
    defined: HashSet<u32>,
    nonsemantic_sets: HashSet<u32>,
}

/// The name of an execution model, for errors.
///
/// ```
/// assert_eq!(offload_spirv::model_name(5), "GLCompute");
/// assert_eq!(offload_spirv::model_name(6), "Kernel");
/// ```
pub fn model_name(model: u32) -> String {
    match spirv::ExecutionModel::from_u32(model) {
        Some(m) => format!("{m:?}"),
        None => format!("execution model {model}"),
    }
}

/// The positions of an instruction's operands that may be a pointer to a global variable
/// (for modules before SPIR-V 1.4, whose entry points do not list the globals they use).
fn pointer_operands(op: u16, len: usize) -> std::ops::Range<usize> {
    use spirv::Op as O;
    let Some(o) = O::from_u32(u32::from(op)) else {
        return 0..0;
    };
    match o {
        // Pointer first (after type and result): loads, access chains, conversions, atomics.
        O::Load
        | O::AccessChain
        | O::InBoundsAccessChain
        | O::PtrAccessChain
        | O::ArrayLength
        | O::GenericPtrMemSemantics
        | O::InBoundsPtrAccessChain
        | O::ImageTexelPointer
        | O::CopyObject
        | O::ConvertPtrToU
        | O::PtrCastToGeneric
        | O::GenericCastToPtr
        | O::Bitcast
        | O::AtomicLoad
        | O::AtomicExchange
        | O::AtomicFlagTestAndSet
        | O::AtomicFMinEXT
        | O::AtomicFMaxEXT
        | O::AtomicFAddEXT
        | O::CooperativeMatrixLoadKHR => 3..4.min(len),
        // The other atomics with a pointer first.
        _ if within(o, O::AtomicCompareExchange, O::AtomicXor) => 3..4.min(len),
        O::Store
        | O::AtomicStore
        | O::AtomicFlagClear
        | O::CooperativeMatrixStoreKHR
        | O::ReturnValue => 1..2.min(len),
        O::CopyMemory | O::CopyMemorySized => 1..3.min(len),
        // Every argument.
        O::FunctionCall => 4..len,
        // OpPhi: value/parent pairs (parents are labels, harmless).
        O::Select => 4..6.min(len),
        O::PtrEqual | O::PtrNotEqual | O::PtrDiff => 3..5.min(len),
        O::CompositeConstruct | O::Phi => 3..len,
        // An initialiser may be a pointer.
        O::Variable => 4..5.min(len),
        _ => 0..0,
    }
}

/// Whether `o` is one of the opcodes `first..=last` (a family the specification numbers
/// in a row: conversions, arithmetic, relational and logical, bit and atomic instructions).
fn within(o: spirv::Op, first: spirv::Op, last: spirv::Op) -> bool {
    (first as u32..=last as u32).contains(&(o as u32))
}

/// Word positions of an instruction that are ids, for the instructions whose operands are
/// known here (debug names, decorations, constants, memory, composites, conversions,
/// arithmetic, relational, bit, atomic and control-flow instructions): each must be a
/// non-zero id below the bound. Drivers index tables with ids, and some crash on an
/// out-of-range one (lavapipe, on a corrupted `OpName` target).
fn id_operands(op: u16, len: usize) -> [std::ops::Range<usize>; 2] {
    use spirv::Op as O;
    let all = 1..len;
    let none = 0..0;
    let upto = |end: usize| 1..end.min(len);
    let Some(o) = O::from_u32(u32::from(op)) else {
        return [none.clone(), none];
    };
    match o {
        // An optional file id after language and version.
        O::Source => [3..4.min(len), none],
        // The target, struct or label first.
        O::Name
        | O::MemberName
        | O::String
        | O::Line
        | O::Decorate
        | O::MemberDecorate
        | O::DecorationGroup
        | O::DecorateString
        | O::MemberDecorateString
        | O::SelectionMerge
        | O::Label
        | O::Branch
        | O::ReturnValue => [upto(2), none],
        // Type, result, set; the operands after the instruction number.
        O::ExtInst => [upto(4), 5..len],
        // Type and result (OpStore, OpCopyMemory, OpLoopMerge: their two ids).
        O::Undef
        | O::ConstantTrue
        | O::ConstantFalse
        | O::ConstantNull
        | O::SpecConstantTrue
        | O::SpecConstantFalse
        | O::FunctionParameter
        | O::Store
        | O::CopyMemory
        | O::LoopMerge
        | O::Constant
        | O::SpecConstant => [upto(3), none],
        // Type, result, then (after the control mask) the function type.
        O::Function => [upto(3), 4..5.min(len)],
        // Type, result, then (after the storage class) the initialiser.
        O::Variable => [upto(3), 4..len],
        // OpBranchConditional: before the weights.
        O::Load
        | O::ArrayLength
        | O::CompositeExtract
        | O::BranchConditional
        | O::ControlBarrier => [upto(4), none],
        // Before the literal indices.
        O::VectorShuffle | O::CompositeInsert => [upto(5), none],
        // OpSwitch: selector and default (the rest are literal/label pairs).
        O::MemoryBarrier | O::Switch => [upto(3), none],
        // The target, then id operands after the decoration.
        O::DecorateId => [upto(2), 3..len],
        // Composite constants, function calls, access chains, dynamic vector access,
        // composite construction, copies, conversions (not OpGenericCastToPtrExplicit),
        // arithmetic, relational and logical, bit instructions, atomics, OpPhi.
        O::ConstantComposite
        | O::SpecConstantComposite
        | O::FunctionCall
        | O::AccessChain
        | O::InBoundsAccessChain
        | O::PtrAccessChain
        | O::InBoundsPtrAccessChain
        | O::VectorExtractDynamic
        | O::VectorInsertDynamic
        | O::CompositeConstruct
        | O::CopyObject
        | O::Transpose
        | O::Bitcast
        | O::Phi => [all, none],
        _ if within(o, O::ConvertFToU, O::GenericCastToPtr)
            || within(o, O::SNegate, O::SMulExtended)
            || within(o, O::Any, O::FUnordGreaterThanEqual)
            || within(o, O::ShiftRightLogical, O::BitCount)
            || within(o, O::AtomicLoad, O::AtomicXor) =>
        {
            [all, none]
        }
        _ => [none.clone(), none],
    }
}

impl<'a> Module<'a> {
    /// `Error::InvalidBinary` for this module's backend and call.
    ///
    /// ```
    /// use offload_core::BackendKind;
    /// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
    /// let words = [offload_spirv::MAGIC, 0x0001_0000, 0, 1, 0, (3 << 16) | 14, 2, 2];
    /// let module = ctx.module(&words, ctx.header(&words).unwrap()).unwrap();
    /// assert!(module.err("x").to_string().contains("SPIR-V: x"));
    /// ```
    pub fn err(&self, reason: impl Into<String>) -> Error {
        self.ctx.err(reason)
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
        if id == 0 || id >= self.header.bound {
            return Err(self.err(format!(
                "instruction at word {} (opcode {}) uses id {id}, outside the bound {}",
                inst.at, inst.op, self.header.bound
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

    fn decorations_mut(&mut self, id: u32) -> &mut Decorations {
        self.decorations.entry(id).or_default()
    }

    /// The walk: structure, ids and tables.
    fn run(&mut self, insts: &[Inst<'a>]) -> Result<()> {
        let mut memory_models = 0;
        let mut current: Option<u32> = None;
        let mut seen_function = false;
        for inst in insts {
            let op = inst.op;
            let len = inst.words.len();
            let in_function = current.is_some();
            let nonsemantic = op == EXT_INST
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
                NOP => {}
                SOURCE_EXTENSION if !in_function => {
                    if let Some((s, _)) = inst.string(1) {
                        self.source_extensions.push(s);
                    }
                }
                CAPABILITY => {
                    let capability = self.operand(inst, 1)?;
                    self.capabilities.push(capability);
                }
                EXT_INST_IMPORT => {
                    let id = self.define(inst, 1)?;
                    let (name, _) = inst
                        .string(2)
                        .ok_or_else(|| self.err("OpExtInstImport has a malformed name"))?;
                    if name.starts_with("NonSemantic.") {
                        self.nonsemantic_sets.insert(id);
                    }
                }
                MEMORY_MODEL => {
                    memory_models += 1;
                    self.memory_model = (self.operand(inst, 1)?, self.operand(inst, 2)?);
                }
                ENTRY_POINT => {
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
                    if name.is_empty() {
                        // Nothing could launch it: kernels are looked up by name.
                        return Err(self.err(format!(
                            "OpEntryPoint at word {} has an empty name",
                            inst.at
                        )));
                    }
                    let mut interface = Vec::new();
                    for i in next..len {
                        interface.push(self.id(inst, i)?);
                    }
                    if self
                        .entry_points
                        .iter()
                        .any(|d| d.model == model && d.name == name)
                    {
                        return Err(self.err(format!(
                            "two {} entry points are named `{name}`",
                            model_name(model)
                        )));
                    }
                    self.entry_points.push(EntryDecl {
                        model,
                        function,
                        name,
                        interface,
                    });
                }
                EXECUTION_MODE | EXECUTION_MODE_ID => {
                    if seen_function {
                        return Err(self.err("OpExecutionMode after the first function"));
                    }
                    let entry = self.id(inst, 1)?;
                    let mode = self.operand(inst, 2)?;
                    self.modes.push(Mode {
                        entry,
                        mode,
                        inst: *inst,
                    });
                }
                DECORATE => {
                    let target = self.id(inst, 1)?;
                    let decoration = self.operand(inst, 2)?;
                    let value = inst.word(3);
                    let linkage = if decoration == DECORATION_LINKAGE_ATTRIBUTES {
                        let (name, next) = inst.string(3).ok_or_else(|| {
                            self.err(format!(
                                "LinkageAttributes at word {} has a malformed name",
                                inst.at
                            ))
                        })?;
                        Some((name, self.operand(inst, next)?))
                    } else {
                        None
                    };
                    let d = self.decorations_mut(target);
                    match decoration {
                        DECORATION_SPEC_ID => d.spec_id = value,
                        DECORATION_BLOCK => d.block = true,
                        DECORATION_BUFFER_BLOCK => d.buffer_block = true,
                        DECORATION_CPACKED => d.packed = true,
                        DECORATION_ARRAY_STRIDE => d.array_stride = value,
                        DECORATION_BUILT_IN => d.builtin = value,
                        DECORATION_BINDING => d.binding = value,
                        DECORATION_DESCRIPTOR_SET => d.set = value,
                        DECORATION_LINKAGE_ATTRIBUTES => d.linkage = linkage,
                        DECORATION_FUNC_PARAM_ATTR => d.param_attrs.extend(value),
                        _ => {}
                    }
                }
                MEMBER_DECORATE => {
                    let target = self.id(inst, 1)?;
                    let member = self.operand(inst, 2)?;
                    let decoration = self.operand(inst, 3)?;
                    let value = inst.word(4);
                    let entry = self
                        .decorations_mut(target)
                        .members
                        .entry(member)
                        .or_default();
                    match decoration {
                        DECORATION_OFFSET => entry.0 = value,
                        DECORATION_MATRIX_STRIDE => entry.1 = value,
                        _ => {}
                    }
                }
                DECORATION_GROUP => {
                    self.define(inst, 1)?;
                }
                GROUP_DECORATE => {
                    let group = self.id(inst, 1)?;
                    let d = self.decorations.get(&group).cloned().unwrap_or_default();
                    for i in 2..len {
                        let target = self.id(inst, i)?;
                        let t = self.decorations_mut(target);
                        t.set = t.set.or(d.set);
                        t.binding = t.binding.or(d.binding);
                        t.spec_id = t.spec_id.or(d.spec_id);
                        t.builtin = t.builtin.or(d.builtin);
                        t.array_stride = t.array_stride.or(d.array_stride);
                        t.block |= d.block;
                        t.buffer_block |= d.buffer_block;
                        t.packed |= d.packed;
                        if t.linkage.is_none() {
                            t.linkage.clone_from(&d.linkage);
                        }
                        t.param_attrs.extend(d.param_attrs.iter().copied());
                    }
                }
                GROUP_MEMBER_DECORATE => {
                    let group = self.id(inst, 1)?;
                    let d = self.decorations.get(&group).cloned().unwrap_or_default();
                    let mut i = 2;
                    while i + 1 < len {
                        let target = self.id(inst, i)?;
                        let member = self.operand(inst, i + 1)?;
                        // A group's own member decorations are keyed by member 0.
                        if let Some(&(offset, stride)) = d.members.get(&0) {
                            let m = self
                                .decorations_mut(target)
                                .members
                                .entry(member)
                                .or_default();
                            m.0 = m.0.or(offset);
                            m.1 = m.1.or(stride);
                        }
                        i += 2;
                    }
                }
                TYPE_VOID..=TYPE_FORWARD_POINTER if !in_function => self.type_decl(inst)?,
                TYPE_VOID..=TYPE_FORWARD_POINTER => {
                    return Err(self.err(format!(
                        "type declaration (opcode {op}) inside a function at word {}",
                        inst.at
                    )));
                }
                CONSTANT | SPEC_CONSTANT => {
                    let id = self.define(inst, 2)?;
                    let value = self.operand(inst, 3)?;
                    let high = inst.word(4).unwrap_or(0);
                    self.constants.insert(
                        id,
                        Constant::Scalar {
                            value,
                            high,
                            spec: op == SPEC_CONSTANT,
                        },
                    );
                }
                CONSTANT_COMPOSITE | SPEC_CONSTANT_COMPOSITE => {
                    let id = self.define(inst, 2)?;
                    let mut parts = [0; 3];
                    for (k, part) in parts.iter_mut().enumerate() {
                        if let Some(p) = inst.word(3 + k) {
                            *part = p;
                        }
                    }
                    self.constants.insert(id, Constant::Composite { parts });
                }
                VARIABLE => {
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
                FUNCTION => {
                    if current.is_some() {
                        return Err(self.err(format!(
                            "OpFunction at word {} inside another function",
                            inst.at
                        )));
                    }
                    let id = self.define(inst, 2)?;
                    let ty = self.id(inst, 4)?;
                    seen_function = true;
                    current = Some(id);
                    self.functions.entry(id).or_default().ty = ty;
                }
                FUNCTION_END => {
                    if current.take().is_none() {
                        return Err(self.err(format!(
                            "OpFunctionEnd at word {} outside a function",
                            inst.at
                        )));
                    }
                }
                _ => {
                    if let Some(f) = current {
                        if op == FUNCTION_PARAMETER {
                            let param = (self.id(inst, 1)?, self.id(inst, 2)?);
                            self.functions.entry(f).or_default().params.push(param);
                        }
                        self.note_uses(f, inst)?;
                    } else if matches!(op, FUNCTION_CALL | LABEL..=UNREACHABLE) {
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
        Ok(())
    }

    fn type_decl(&mut self, inst: &Inst<'_>) -> Result<()> {
        let op = inst.op;
        if op == TYPE_FORWARD_POINTER {
            // OpTypeForwardPointer declares no result.
            self.id(inst, 1)?;
            return Ok(());
        }
        let id = self.define(inst, 1)?;
        let ty = match op {
            TYPE_BOOL => Type::Bool,
            TYPE_INT => Type::Int(self.operand(inst, 2)?, self.operand(inst, 3)? != 0),
            TYPE_FLOAT => Type::Float(self.operand(inst, 2)?),
            TYPE_VECTOR => Type::Vector(self.id(inst, 2)?, self.operand(inst, 3)?),
            TYPE_MATRIX => Type::Matrix(self.id(inst, 2)?, self.operand(inst, 3)?),
            TYPE_ARRAY => Type::Array(self.id(inst, 2)?, self.id(inst, 3)?),
            TYPE_RUNTIME_ARRAY => {
                self.id(inst, 2)?;
                Type::RuntimeArray
            }
            TYPE_STRUCT => {
                let mut members = Vec::new();
                for i in 2..inst.words.len() {
                    members.push(self.id(inst, i)?);
                }
                Type::Struct(members)
            }
            TYPE_POINTER => Type::Pointer(self.operand(inst, 2)?, self.id(inst, 3)?),
            TYPE_FUNCTION => {
                let ret = self.id(inst, 2)?;
                let mut params = Vec::new();
                for i in 3..inst.words.len() {
                    params.push(self.id(inst, i)?);
                }
                Type::Function(ret, params)
            }
            _ => Type::Other,
        };
        self.types.insert(id, ty);
        Ok(())
    }

    /// Notes which globals and functions an instruction of function `f` references.
    fn note_uses(&mut self, f: u32, inst: &Inst<'_>) -> Result<()> {
        let len = inst.words.len();
        if inst.op == FUNCTION_CALL {
            let callee = self.id(inst, 3)?;
            self.functions.entry(f).or_default().calls.insert(callee);
        }
        if inst.op == EXT_INST {
            let set = self.id(inst, 3)?;
            if self.nonsemantic_sets.contains(&set) {
                return Ok(()); // debug information is not a use
            }
        }
        let range = if inst.op == EXT_INST {
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
    ///
    /// ```
    /// use offload_core::BackendKind;
    /// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
    /// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
    /// let words = ctx.words(&image).unwrap();
    /// let m = ctx.module(&words, ctx.header(&words).unwrap()).unwrap();
    /// let read_global = m.entry_points.iter().find(|e| e.name == "read_global").unwrap();
    /// assert_eq!(m.used_globals(read_global.function).len(), 2); // g and the invocation id
    /// ```
    pub fn used_globals(&self, function: u32) -> HashSet<u32> {
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

    /// The scalar constant `id`, if it is one.
    pub fn constant(&self, id: u32) -> Option<Constant> {
        self.constants.get(&id).copied()
    }

    /// The Rust type of a scalar type id: an integer of 8, 16, 32 or 64 bits by its
    /// signedness, a 32- or 64-bit float; `None` for anything else (vectors, matrices,
    /// arrays, 16-bit floats, …).
    ///
    /// ```
    /// use offload_core::{BackendKind, ScalarType};
    /// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
    /// let ctx = offload_spirv::Context { backend: BackendKind::Ze, call: "t" };
    /// let words = ctx.words(&image).unwrap();
    /// let m = ctx.module(&words, ctx.header(&words).unwrap()).unwrap();
    /// let uint = m.types.iter().find(|(_, t)| **t == offload_spirv::Type::Int(32, false)).unwrap();
    /// assert_eq!(m.scalar_type(*uint.0), Some(ScalarType::U32));
    /// ```
    pub fn scalar_type(&self, ty: u32) -> Option<ScalarType> {
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
}
