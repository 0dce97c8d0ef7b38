//! AMD GPU code objects, read before the runtime sees them: an ELF64 shared object for
//! `EM_AMDGPU` (224) and the HSA OS ABI, its target from `e_flags` (`EF_AMDGPU_MACH`), its
//! kernels and their parameters from the `NT_AMDGPU_METADATA` note (MessagePack:
//! `amdhsa.kernels[].args[]` with `.size`, `.offset` and `.value_kind`), its globals from
//! the dynamic symbols. A clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`) is unpacked to
//! its `amdgcn-amd-amdhsa` code object for the device's architecture (its `gcnArchName`,
//! features after `:` aside). A code object for another architecture, or a bundle without
//! one for the device, names the targets the image has and the one the device needs.
//! Anything else is a reason, which the caller turns into `Error::InvalidBinary`: nothing
//! malformed or foreign reaches `hipModuleLoadData`.
//!
//! The ELF structures are read with the `object` crate and the MessagePack with `rmpv`
//! (both bounds-checked and fuzzed; `rmpv` with a depth limit); this module owns the
//! bundle format, what a code object must be for offload, and the metadata's meaning.

use object::LittleEndian as LE;
use object::elf::{self as abi, FileHeader64};
use object::read::StringTable;
use object::read::elf::{FileHeader, SectionHeader, SectionTable, Sym, SymbolTable};
use offload_core::ParamKind;

/// One kernel of a code object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    pub name: String,
    /// The explicit parameters, in order (hidden ones are the runtime's).
    pub params: Vec<ParamKind>,
}

/// What a code object holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    /// `gfx90a`, … (from `e_flags`).
    pub target: String,
    pub kernels: Vec<KernelInfo>,
    pub globals: Vec<String>,
    /// Where the code object lies in the image (all of it, or a bundle's entry).
    pub range: std::ops::Range<usize>,
}

/// The bundle magic of clang's offload bundler.
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// `ELFOSABI_AMDGPU_HSA` (LLVM's `BinaryFormat/ELF.h`; `object` does not name it).
const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// `NT_AMDGPU_METADATA` (LLVM's `BinaryFormat/ELF.h`), a note named `AMDGPU`.
const NT_AMDGPU_METADATA: u32 = 32;
/// `EF_AMDGPU_MACH`: the target's bits of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;

/// The `EF_AMDGPU_MACH` values of the targets ROCm 5 to 7 support.
const MACHS: &[(u32, &str)] = &[
    (0x2c, "gfx900"),
    (0x2d, "gfx902"),
    (0x2e, "gfx904"),
    (0x2f, "gfx906"),
    (0x30, "gfx908"),
    (0x31, "gfx909"),
    (0x32, "gfx90c"),
    (0x33, "gfx1010"),
    (0x34, "gfx1011"),
    (0x35, "gfx1012"),
    (0x36, "gfx1030"),
    (0x37, "gfx1031"),
    (0x38, "gfx1032"),
    (0x39, "gfx1033"),
    (0x3d, "gfx1035"),
    (0x3e, "gfx1034"),
    (0x3f, "gfx90a"),
    (0x40, "gfx940"),
    (0x41, "gfx1100"),
    (0x42, "gfx1013"),
    (0x43, "gfx1150"),
    (0x44, "gfx1103"),
    (0x45, "gfx1036"),
    (0x46, "gfx1101"),
    (0x47, "gfx1102"),
    (0x48, "gfx1200"),
    (0x4a, "gfx1151"),
    (0x4b, "gfx941"),
    (0x4c, "gfx942"),
    (0x4e, "gfx1201"),
    (0x4f, "gfx950"),
];

/// The processor of a target id or `gcnArchName`: `gfx90a` of `gfx90a:sramecc+:xnack-`.
fn processor(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}

/// The target id of a bundle entry's id: `gfx90a:xnack+` of
/// `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+` (empty when it names none).
fn entry_target(id: &str) -> &str {
    id.split_once("amdgcn-amd-amdhsa")
        .map_or("", |(_, rest)| rest.trim_start_matches('-'))
}

/// Where the code object lies in `image`: all of it, or the AMD GPU entry of a bundle for
/// `arch` (the device's `gcnArchName`; with `None`, a bundle must hold exactly one).
pub fn code_object(image: &[u8], arch: Option<&str>) -> Result<std::ops::Range<usize>, String> {
    if !image.starts_with(BUNDLE_MAGIC) {
        return Ok(0..image.len());
    }
    let mut at = Reader::new(image, BUNDLE_MAGIC.len());
    let count = at.u64("the bundle's entry count")?;
    let mut found = Vec::new();
    for _ in 0..count.min(1024) {
        let offset = at.u64("a bundle entry's offset")?;
        let size = at.u64("a bundle entry's size")?;
        let id_len = at.u64("a bundle entry's id length")?;
        let id = at.bytes(id_len, "a bundle entry's id")?;
        let id = String::from_utf8_lossy(id).into_owned();
        if id.contains("amdgcn-amd-amdhsa") {
            let body = usize::try_from(offset)
                .ok()
                .zip(usize::try_from(size).ok())
                .and_then(|(o, s)| Some(o..o.checked_add(s)?))
                .filter(|range| range.end <= image.len())
                .ok_or_else(|| format!("bundle entry `{id}` lies outside the bundle"))?;
            found.push((id, body));
        }
    }
    let targets = || {
        found
            .iter()
            .map(|(id, _)| entry_target(id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (found.len(), arch) {
        (0, _) => Err("the offload bundle holds no amdgcn-amd-amdhsa code object".into()),
        (1, None) => Ok(found.remove(0).1),
        (_, None) => Err(format!(
            "the offload bundle holds code objects for {}, and the runtime did not say which \
             architecture the device is: pass one code object",
            targets()
        )),
        (_, Some(arch)) => {
            let wanted = processor(arch);
            match found
                .iter()
                .position(|(id, _)| processor(entry_target(id)) == wanted)
            {
                Some(at) => Ok(found.swap_remove(at).1),
                None => Err(format!(
                    "the offload bundle holds code objects for {}, none for the device's {arch}",
                    targets()
                )),
            }
        }
    }
}

/// Reads a code object (or the entry of a bundle for `arch`), checked against `arch`, the
/// device's `gcnArchName`, where it is known.
pub fn inspect(image: &[u8], arch: Option<&str>) -> Result<CodeObject, String> {
    let range = code_object(image, arch)?;
    let elf = &image[range.clone()];
    let header = object::pod::from_bytes::<FileHeader64<LE>>(elf)
        .ok()
        .map(|(header, _)| header)
        .filter(|h| h.e_ident.magic == abi::ELFMAG)
        .ok_or("not an AMD GPU code object (no ELF header)")?;
    if header.e_ident.class != abi::ELFCLASS64 || header.e_ident.data != abi::ELFDATA2LSB {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let machine = header.e_machine(LE);
    if machine != abi::EM_AMDGPU {
        return Err(format!(
            "an ELF for machine {}, not an AMD GPU code object (EM_AMDGPU = 224)",
            machine.0
        ));
    }
    let os_abi = header.e_ident.os_abi.0;
    if os_abi != ELFOSABI_AMDGPU_HSA {
        return Err(format!(
            "ELF OS ABI {os_abi} is not HSA ({ELFOSABI_AMDGPU_HSA})"
        ));
    }
    let kind = header.e_type(LE);
    if kind != abi::ET_DYN {
        return Err(format!(
            "ELF type {} is not a linked code object (ET_DYN): link it with ld.lld -shared",
            kind.0
        ));
    }
    let mach = header.e_flags(LE).0 & EF_AMDGPU_MACH;
    let target = MACHS
        .iter()
        .find(|(m, _)| *m == mach)
        .map(|(_, name)| (*name).to_string())
        .ok_or_else(|| format!("unknown AMD GPU target (EF_AMDGPU_MACH {mach:#x})"))?;
    let headers = header
        .section_headers(LE, elf)
        .map_err(|e| format!("the section headers: {e}"))?;
    let sections: SectionTable<'_, FileHeader64<LE>> =
        SectionTable::new(headers, StringTable::default());
    let mut metadata = None;
    for s in headers {
        if s.sh_type(LE) == abi::SHT_NOTE && !inside(elf, s) {
            return Err("a note section lies outside the image".into());
        }
        let Some(notes) = s
            .notes(LE, elf)
            .map_err(|e| format!("a note section: {e}"))?
        else {
            continue;
        };
        for note in notes {
            let note = note.map_err(|e| format!("a note: {e}"))?;
            if note.name() == b"AMDGPU" && note.n_type(LE).0 == NT_AMDGPU_METADATA {
                metadata = Some(note.desc());
            }
        }
    }
    let metadata = metadata.ok_or("the code object has no NT_AMDGPU_METADATA note")?;
    let kernels = kernels(&msgpack(metadata)?)?;
    let globals = globals(elf, &sections)?;
    if let Some(arch) = arch.filter(|arch| processor(arch) != target) {
        return Err(format!(
            "the code object is for {target}, the device is {arch}: build it for {} \
             (--offload-arch / -mcpu)",
            processor(arch)
        ));
    }
    Ok(CodeObject {
        target,
        kernels,
        globals,
        range,
    })
}

/// Exported data symbols (not kernel descriptors) of the dynamic symbol table.
fn globals(
    elf: &[u8],
    sections: &SectionTable<'_, FileHeader64<LE>>,
) -> Result<Vec<String>, String> {
    let Some((index, dynsym)) = sections
        .enumerate()
        .find(|(_, s)| s.sh_type(LE) == abi::SHT_DYNSYM)
    else {
        return Ok(Vec::new());
    };
    if !inside(elf, dynsym) {
        return Err("the dynamic symbols lies outside the image".into());
    }
    let strtab = sections
        .iter()
        .nth(dynsym.sh_link(LE) as usize)
        .ok_or("the dynamic symbols have no string table")?;
    if !inside(elf, strtab) {
        return Err("the dynamic string table lies outside the image".into());
    }
    let entsize = dynsym.sh_entsize(LE);
    if entsize != 0 && usize::try_from(entsize).ok() != Some(size_of::<abi::Sym64<LE>>()) {
        return Err(format!("dynamic symbol size {entsize} is not 24"));
    }
    let table = SymbolTable::parse(LE, elf, sections, index, dynsym)
        .map_err(|e| format!("the dynamic symbols: {e}"))?;
    let mut names = Vec::new();
    for sym in table.iter() {
        if sym.st_type() != abi::STT_OBJECT || sym.st_shndx(LE) == abi::SHN_UNDEF {
            continue;
        }
        let name = table
            .symbol_name(LE, sym)
            .map_err(|e| format!("a dynamic symbol's name: {e}"))?;
        let name = String::from_utf8_lossy(name).into_owned();
        if !name.ends_with(".kd") && !name.is_empty() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Whether the bytes of section `s` lie inside `elf`, the offset of an empty one too
/// (`object` reads no bytes there, but the runtime is given it).
fn inside(elf: &[u8], s: &abi::SectionHeader64<LE>) -> bool {
    s.file_range(LE).is_none_or(|(offset, size)| {
        offset
            .checked_add(size)
            .is_some_and(|end| end <= elf.len() as u64)
    })
}

/// The kernels of the metadata map.
fn kernels(metadata: &Value) -> Result<Vec<KernelInfo>, String> {
    let list = metadata
        .get("amdhsa.kernels")
        .and_then(Value::array)
        .ok_or("the metadata has no amdhsa.kernels list")?;
    let mut kernels = Vec::new();
    for kernel in list {
        let name = kernel
            .get(".name")
            .and_then(Value::str)
            .ok_or("a kernel without .name in the metadata")?;
        let mut params = Vec::new();
        let args = match kernel.get(".args") {
            None => &[][..],
            Some(args) => args
                .array()
                .ok_or_else(|| format!("kernel `{name}`: .args is not a list"))?,
        };
        let mut end = 0u64;
        for (i, arg) in args.iter().enumerate() {
            let field = |key: &str| {
                arg.get(key)
                    .ok_or_else(|| format!("kernel `{name}`: argument {i} has no {key}"))
            };
            let kind = field(".value_kind")?
                .str()
                .ok_or_else(|| format!("kernel `{name}`: argument {i}'s .value_kind"))?;
            let size = field(".size")?
                .uint()
                .ok_or_else(|| format!("kernel `{name}`: argument {i}'s .size"))?;
            let offset = field(".offset")?
                .uint()
                .ok_or_else(|| format!("kernel `{name}`: argument {i}'s .offset"))?;
            if offset < end {
                return Err(format!(
                    "kernel `{name}`: argument {i} at offset {offset} overlaps the one before"
                ));
            }
            end = offset.saturating_add(size);
            match kind {
                "global_buffer" if size == 8 => params.push(ParamKind::Buffer),
                "by_value" if (1..=8).contains(&size) => {
                    params.push(ParamKind::Scalar(size as usize))
                }
                k if k.starts_with("hidden_") => {}
                other => {
                    return Err(format!(
                        "kernel `{name}`: argument {i} is a {size}-byte `{other}`, which \
                         offload cannot pass (buffers and scalars of up to 8 bytes only)"
                    ));
                }
            }
        }
        kernels.push(KernelInfo {
            name: name.to_string(),
            params,
        });
    }
    Ok(kernels)
}

/// Bounds-checked little-endian reads of a bundle's header.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], at: usize) -> Self {
        Reader { data, at }
    }

    fn array<const N: usize>(&self, at: usize) -> Result<[u8; N], String> {
        at.checked_add(N)
            .and_then(|end| self.data.get(at..end))
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("truncated at byte {at}"))
    }

    fn u64_at(&self, at: usize) -> Result<u64, String> {
        self.array(at).map(u64::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let v = self
            .u64_at(self.at)
            .map_err(|_| format!("truncated: {what}"))?;
        self.at += 8;
        Ok(v)
    }

    fn bytes(&mut self, len: u64, what: &str) -> Result<&'a [u8], String> {
        let b = self.slice(self.at as u64, len, what)?;
        self.at += b.len();
        Ok(b)
    }

    fn slice(&self, offset: u64, len: u64, what: &str) -> Result<&'a [u8], String> {
        usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| self.data.get(o..o.checked_add(l)?))
            .ok_or_else(|| format!("{what} lies outside the image"))
    }
}

/// A MessagePack value (the subset code object metadata uses, and every other kind read
/// and skipped).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    fn array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    fn uint(&self) -> Option<u64> {
        match *self {
            Value::UInt(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// How deep `rmpv` may recurse: code object metadata nests five levels (map, kernel list,
/// kernel, argument list, argument), and 32 are allowed, bounding the recursion on any
/// input. `rmpv` spends its depth twice on a container (the value and its items) and up to
/// three times on a leaf (a string: the value, the string, its bytes).
const MAX_DEPTH: usize = 2 * 32 + 3;

/// Reads one MessagePack value that fills `data`.
pub fn msgpack(data: &[u8]) -> Result<Value, String> {
    let mut rest = data;
    let value =
        rmpv::decode::read_value_with_max_depth(&mut rest, MAX_DEPTH).map_err(|e| match e {
            rmpv::decode::Error::DepthLimitExceeded => {
                "the metadata nests deeper than 32 levels".to_string()
            }
            e => format!("the metadata is not MessagePack: {e}"),
        })?;
    if !rest.is_empty() {
        return Err(format!(
            "the metadata has {} bytes after its value",
            rest.len()
        ));
    }
    Ok(from_rmpv(value))
}

/// `rmpv`'s value as this module's (kept private: `rmpv` is not part of the API): a signed
/// integer only when it is negative, a string's invalid UTF-8 replaced, an extension as
/// `Nil`.
fn from_rmpv(value: rmpv::Value) -> Value {
    use rmpv::Value as V;
    match value {
        V::Nil | V::Ext(..) => Value::Nil,
        V::Boolean(b) => Value::Bool(b),
        V::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => Value::UInt(u),
            (None, Some(i)) => Value::Int(i),
            (None, None) => Value::Nil,
        },
        V::F32(f) => Value::Float(f64::from(f)),
        V::F64(f) => Value::Float(f),
        V::String(s) => Value::Str(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        V::Binary(b) => Value::Bin(b),
        V::Array(items) => Value::Array(items.into_iter().map(from_rmpv).collect()),
        V::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (from_rmpv(k), from_rmpv(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fixtures::{KERNELS, bundle, for_mach};

    #[test]
    fn the_fixture_is_read() {
        let object = inspect(KERNELS, None).unwrap();
        assert_eq!(object.target, "gfx90a");
        assert_eq!(object.range, 0..KERNELS.len());
        let names: Vec<&str> = object.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["add_one", "fill", "noop", "read_global"]);
        assert_eq!(
            object.kernels[0].params,
            [ParamKind::Buffer, ParamKind::Scalar(4)]
        );
        assert_eq!(
            object.kernels[1].params,
            [
                ParamKind::Buffer,
                ParamKind::Scalar(4),
                ParamKind::Scalar(4)
            ]
        );
        assert!(object.kernels[2].params.is_empty());
        assert_eq!(object.globals, ["g"]);
    }

    #[test]
    fn a_bundle_of_one_code_object_is_unpacked() {
        let bundle = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", KERNELS)]);
        let range = code_object(&bundle, None).unwrap();
        assert_eq!(&bundle[range], KERNELS);
        assert_eq!(inspect(&bundle, None).unwrap().target, "gfx90a");
        // Truncated: a reason, never a panic.
        for cut in 0..bundle.len() - KERNELS.len() {
            assert!(inspect(&bundle[..cut], None).is_err());
        }
    }

    #[test]
    fn a_bundle_of_several_architectures_gives_the_device_its_own() {
        let gfx906 = for_mach(0x2f);
        let bundle = bundle(&[
            ("hipv4-amdgcn-amd-amdhsa--gfx906", &gfx906),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", KERNELS),
        ]);
        for (arch, target) in [("gfx90a:sramecc+:xnack-", "gfx90a"), ("gfx906", "gfx906")] {
            let object = inspect(&bundle, Some(arch)).unwrap();
            assert_eq!(object.target, target);
            assert_eq!(
                bundle[object.range.clone()][48],
                if target == "gfx906" { 0x2f } else { 0x3f }
            );
        }
        let none = inspect(&bundle, Some("gfx1100")).unwrap_err();
        assert_eq!(
            none,
            "the offload bundle holds code objects for gfx906, gfx90a:xnack-, none for the \
             device's gfx1100"
        );
        let unknown = inspect(&bundle, None).unwrap_err();
        assert!(
            unknown.contains("did not say which architecture"),
            "{unknown}"
        );
    }

    #[test]
    fn a_code_object_for_another_architecture_is_refused() {
        let e = inspect(KERNELS, Some("gfx1100")).unwrap_err();
        assert_eq!(
            e,
            "the code object is for gfx90a, the device is gfx1100: build it for gfx1100 \
             (--offload-arch / -mcpu)"
        );
        // Features after the processor do not count: the runtime checks those.
        assert!(inspect(KERNELS, Some("gfx90a:sramecc+:xnack-")).is_ok());
    }

    #[test]
    fn damaged_code_objects_are_reasons_never_panics() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..2000 {
            let mut image = KERNELS.to_vec();
            for _ in 0..1 + round % 8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x as usize) % image.len();
                image[at] = (x >> 32) as u8;
            }
            let _ = inspect(&image, None);
            let _ = inspect(&image[..(x as usize) % image.len()], Some("gfx90a"));
        }
        let mut foreign = KERNELS.to_vec();
        foreign[18] = 62; // EM_X86_64
        assert!(inspect(&foreign, None).unwrap_err().contains("machine 62"));
    }

    #[test]
    fn msgpack_values() {
        assert_eq!(msgpack(&[0x05]).unwrap(), Value::UInt(5));
        assert_eq!(msgpack(&[0xff]).unwrap(), Value::Int(-1));
        assert_eq!(msgpack(&[0xd0, 0x80]).unwrap(), Value::Int(-128));
        assert_eq!(msgpack(&[0xcd, 0x01, 0x10]).unwrap(), Value::UInt(272));
        assert_eq!(
            msgpack(&[0x81, 0xa1, b'a', 0x92, 0xc3, 0xc0]).unwrap(),
            Value::Map(vec![(
                Value::Str("a".into()),
                Value::Array(vec![Value::Bool(true), Value::Nil])
            )])
        );
        assert!(msgpack(&[0x92, 0x01]).is_err());
        assert!(msgpack(&[0x01, 0x02]).is_err());
        let deep = vec![0x91; 100];
        assert!(msgpack(&deep).unwrap_err().contains("deeper"));
    }
}
