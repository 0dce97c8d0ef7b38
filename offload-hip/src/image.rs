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
/// `EM_AMDGPU`.
const EM_AMDGPU: u16 = 224;
/// `ELFOSABI_AMDGPU_HSA`.
const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// `NT_AMDGPU_METADATA`.
const NT_AMDGPU_METADATA: u32 = 32;

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
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" {
        return Err("not an AMD GPU code object (no ELF header)".into());
    }
    if elf[4] != 2 || elf[5] != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let r = Reader::new(elf, 0);
    let machine = r.u16_at(18)?;
    if machine != EM_AMDGPU {
        return Err(format!(
            "an ELF for machine {machine}, not an AMD GPU code object (EM_AMDGPU = 224)"
        ));
    }
    if elf[7] != ELFOSABI_AMDGPU_HSA {
        return Err(format!(
            "ELF OS ABI {} is not HSA ({ELFOSABI_AMDGPU_HSA})",
            elf[7]
        ));
    }
    let kind = r.u16_at(16)?;
    if kind != 3 {
        return Err(format!(
            "ELF type {kind} is not a linked code object (ET_DYN): link it with ld.lld -shared"
        ));
    }
    let flags = r.u32_at(48)?;
    let mach = flags & 0xff;
    let target = MACHS
        .iter()
        .find(|(m, _)| *m == mach)
        .map(|(_, name)| (*name).to_string())
        .ok_or_else(|| format!("unknown AMD GPU target (EF_AMDGPU_MACH {mach:#x})"))?;
    let sections = sections(&r)?;
    let mut metadata = None;
    for s in sections.iter().filter(|s| s.kind == 7) {
        let data = r.slice(s.offset, s.size, "a note section")?;
        for (name, kind, desc) in notes(data)? {
            if name == b"AMDGPU" && kind == NT_AMDGPU_METADATA {
                metadata = Some(desc);
            }
        }
    }
    let metadata = metadata.ok_or("the code object has no NT_AMDGPU_METADATA note")?;
    let kernels = kernels(&msgpack(metadata)?)?;
    let globals = globals(&r, &sections)?;
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

/// A section header's type, file range, link.
struct Section {
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

fn sections(r: &Reader<'_>) -> Result<Vec<Section>, String> {
    let shoff = r.u64_at(40)?;
    let shentsize = u64::from(r.u16_at(58)?);
    let shnum = u64::from(r.u16_at(60)?);
    if shentsize < 64 && shnum > 0 {
        return Err(format!("section header size {shentsize} is below 64"));
    }
    (0..shnum)
        .map(|i| {
            let at = shoff
                .checked_add(i * shentsize)
                .ok_or("section headers overflow")?;
            // A header's fields are read at `at + 4` to `at + 64`: those must not wrap
            // (fuzz/corpus/amd_code_object/regression-shoff-overflow).
            let at = usize::try_from(at)
                .ok()
                .filter(|at| at.checked_add(64).is_some())
                .ok_or("section headers overflow")?;
            Ok(Section {
                kind: r.u32_at(at + 4)?,
                offset: r.u64_at(at + 24)?,
                size: r.u64_at(at + 32)?,
                link: r.u32_at(at + 40)?,
                entsize: r.u64_at(at + 56)?,
            })
        })
        .collect()
}

/// A note: its name without the NUL, its type, its descriptor.
type Note<'a> = (&'a [u8], u32, &'a [u8]);

/// The notes of a note section.
fn notes(data: &[u8]) -> Result<Vec<Note<'_>>, String> {
    let r = Reader::new(data, 0);
    let mut at = 0usize;
    let mut out = Vec::new();
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    while at + 12 <= data.len() {
        let namesz = r.u32_at(at)? as usize;
        let descsz = r.u32_at(at + 4)? as usize;
        let kind = r.u32_at(at + 8)?;
        let name_at = at + 12;
        let desc_at = align4(name_at + namesz).ok_or("a note overflows")?;
        let name = data
            .get(name_at..name_at + namesz)
            .ok_or("a note's name runs past its section")?;
        let desc = data
            .get(desc_at..desc_at.checked_add(descsz).ok_or("a note overflows")?)
            .ok_or("a note's descriptor runs past its section")?;
        let name = name.strip_suffix(&[0]).unwrap_or(name);
        out.push((name, kind, desc));
        at = align4(desc_at + descsz).ok_or("a note overflows")?;
    }
    Ok(out)
}

/// Exported data symbols (not kernel descriptors) of the dynamic symbol table.
fn globals(r: &Reader<'_>, sections: &[Section]) -> Result<Vec<String>, String> {
    let Some(dynsym) = sections.iter().find(|s| s.kind == 11) else {
        return Ok(Vec::new());
    };
    let strtab = sections
        .get(dynsym.link as usize)
        .ok_or("the dynamic symbols have no string table")?;
    let strings = r.slice(strtab.offset, strtab.size, "the dynamic string table")?;
    let entsize = if dynsym.entsize == 0 {
        24
    } else {
        dynsym.entsize
    };
    if entsize < 24 {
        return Err(format!("dynamic symbol size {entsize} is below 24"));
    }
    let table = r.slice(dynsym.offset, dynsym.size, "the dynamic symbols")?;
    let t = Reader::new(table, 0);
    let mut names = Vec::new();
    for i in 0..(dynsym.size / entsize) as usize {
        let at = i * entsize as usize;
        let name = t.u32_at(at)? as usize;
        let info = table[at + 4];
        let shndx = t.u16_at(at + 6)?;
        // STT_OBJECT, defined.
        if info & 0xf != 1 || shndx == 0 {
            continue;
        }
        let name = strings
            .get(name..)
            .and_then(|s| s.split(|&b| b == 0).next())
            .ok_or("a symbol name lies outside the string table")?;
        let name = String::from_utf8_lossy(name).into_owned();
        if !name.ends_with(".kd") && !name.is_empty() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
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

/// Bounds-checked little-endian reads.
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

    fn u16_at(&self, at: usize) -> Result<u16, String> {
        self.array(at).map(u16::from_le_bytes)
    }

    fn u32_at(&self, at: usize) -> Result<u32, String> {
        self.array(at).map(u32::from_le_bytes)
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

/// Reads one MessagePack value that fills `data`.
pub fn msgpack(data: &[u8]) -> Result<Value, String> {
    let mut at = 0;
    let value = read_value(data, &mut at, 0)?;
    if at != data.len() {
        return Err(format!(
            "the metadata has {} bytes after its value",
            data.len() - at
        ));
    }
    Ok(value)
}

fn take<'a>(data: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let bytes = at
        .checked_add(n)
        .and_then(|end| data.get(*at..end))
        .ok_or("the metadata is truncated")?;
    *at += n;
    Ok(bytes)
}

fn be(data: &[u8], at: &mut usize, n: usize) -> Result<u64, String> {
    Ok(take(data, at, n)?
        .iter()
        .fold(0u64, |v, &b| (v << 8) | u64::from(b)))
}

fn read_value(data: &[u8], at: &mut usize, depth: u32) -> Result<Value, String> {
    if depth > 32 {
        return Err("the metadata nests deeper than 32 levels".into());
    }
    let tag = take(data, at, 1)?[0];
    let str_of = |data: &[u8], at: &mut usize, n: u64| -> Result<Value, String> {
        let n = usize::try_from(n).map_err(|_| "a string too long")?;
        Ok(Value::Str(
            String::from_utf8_lossy(take(data, at, n)?).into_owned(),
        ))
    };
    let array = |data: &[u8], at: &mut usize, n: u64| -> Result<Value, String> {
        let mut items = Vec::new();
        for _ in 0..n {
            items.push(read_value(data, at, depth + 1)?);
        }
        Ok(Value::Array(items))
    };
    let map = |data: &[u8], at: &mut usize, n: u64| -> Result<Value, String> {
        let mut entries = Vec::new();
        for _ in 0..n {
            let k = read_value(data, at, depth + 1)?;
            let v = read_value(data, at, depth + 1)?;
            entries.push((k, v));
        }
        Ok(Value::Map(entries))
    };
    match tag {
        0x00..=0x7f => Ok(Value::UInt(u64::from(tag))),
        0x80..=0x8f => map(data, at, u64::from(tag & 0x0f)),
        0x90..=0x9f => array(data, at, u64::from(tag & 0x0f)),
        0xa0..=0xbf => str_of(data, at, u64::from(tag & 0x1f)),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Bool(false)),
        0xc3 => Ok(Value::Bool(true)),
        0xc4..=0xc6 => {
            let n = be(data, at, 1 << (tag - 0xc4))?;
            let n = usize::try_from(n).map_err(|_| "a binary too long")?;
            Ok(Value::Bin(take(data, at, n)?.to_vec()))
        }
        0xc7..=0xc9 => {
            // ext 8/16/32: length, type, data; skipped.
            let n = be(data, at, 1 << (tag - 0xc7))?;
            let n = usize::try_from(n).map_err(|_| "an extension too long")?;
            take(data, at, n + 1)?;
            Ok(Value::Nil)
        }
        0xca => Ok(Value::Float(f64::from(f32::from_bits(
            be(data, at, 4)? as u32
        )))),
        0xcb => Ok(Value::Float(f64::from_bits(be(data, at, 8)?))),
        0xcc..=0xcf => Ok(Value::UInt(be(data, at, 1 << (tag - 0xcc))?)),
        0xd0..=0xd3 => {
            let n = 1usize << (tag - 0xd0);
            let raw = be(data, at, n)?;
            let shift = 64 - 8 * n as u32;
            Ok(Value::Int(((raw << shift) as i64) >> shift))
        }
        0xd4..=0xd8 => {
            // fixext 1/2/4/8/16: type, data; skipped.
            take(data, at, 1 + (1 << (tag - 0xd4)))?;
            Ok(Value::Nil)
        }
        0xd9..=0xdb => {
            let n = be(data, at, 1 << (tag - 0xd9))?;
            str_of(data, at, n)
        }
        0xdc | 0xdd => {
            let n = be(data, at, if tag == 0xdc { 2 } else { 4 })?;
            array(data, at, n)
        }
        0xde | 0xdf => {
            let n = be(data, at, if tag == 0xde { 2 } else { 4 })?;
            map(data, at, n)
        }
        0xc1 => Err("the metadata holds the never-used MessagePack byte 0xc1".into()),
        0xe0..=0xff => Ok(Value::Int(i64::from(tag as i8))),
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
