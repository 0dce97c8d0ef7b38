//! Cubins: ELF64 images for `EM_CUDA`, their `sm_` architecture, kernels and the
//! `.nv.info` parameter tables.
//!
//! The ELF structures are read with the `object` crate (bounds-checked, fuzzed). On top,
//! offload's checks: every header table and every section's contents lie inside the bytes,
//! each refusal saying where; what makes an ELF a cubin a device can run; and the
//! `.nv.info` attributes, which are NVIDIA's and read here.

use object::LittleEndian as LE;
use object::elf::{self as abi, FileHeader64};
use object::read::StringTable;
use object::read::elf::{FileHeader, SectionHeader, SectionTable, Sym, SymbolTable};

use super::{
    Entry, Global, HashMap, ImageKind, Inspected, Param, cc_of, cubin_runs_on, le_u16, le_u32,
    pow2_dividing, sm,
};

const EHDR: usize = size_of::<FileHeader64<LE>>();
const SHDR: u64 = size_of::<abi::SectionHeader64<LE>>() as u64;
const PHDR: u64 = size_of::<abi::ProgramHeader64<LE>>() as u64;
const SYM: u64 = size_of::<abi::Sym64<LE>>() as u64;
/// `st_other` bit of a `__global__` function (cuda-gdb: `STO_CUDA_ENTRY 0x10`).
const STO_CUDA_ENTRY: u8 = 0x10;
/// `EI_ABIVERSION` of the original layout: the SM in `e_flags & 0xff`.
const ABI_CUDA_V1: u8 = 7;
/// `EI_ABIVERSION` of the CUDA 12.8+ layout: the SM in `(e_flags >> 8) & 0xff`.
const ABI_CUDA_V2: u8 = 8;
const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;
const EIFMT_SVAL: u8 = 4;
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIATTR_KPARAM_INFO_V2: u8 = 0x45;

fn machine_name(m: u16) -> &'static str {
    match m {
        3 => " (x86)",
        20 => " (PowerPC)",
        21 => " (PowerPC64)",
        40 => " (ARM)",
        62 => " (x86-64)",
        183 => " (AArch64)",
        224 => " (AMDGPU)",
        243 => " (RISC-V)",
        247 => " (BPF)",
        _ => "",
    }
}

/// A section's name and contents.
struct Section<'a> {
    name: &'a str,
    data: &'a [u8],
}

/// The SM number in `e_flags` (see the module's notes).
fn sm_number(abi_version: u8, flags: u32) -> u32 {
    let low = flags & 0xff;
    let high = (flags >> 8) & 0xff;
    match abi_version {
        ABI_CUDA_V1 => low,
        ABI_CUDA_V2 => high,
        _ if (20..=90).contains(&low) => low,
        _ => high,
    }
}

pub(super) fn inspect(b: &[u8], device: (u32, u32)) -> Result<Inspected, String> {
    let len = b.len();
    // The machine first, from the header's first 20 bytes in either byte order: a foreign
    // ELF is named as such even when it is not a 64-bit little-endian one.
    let big_endian = b.get(5) == Some(&abi::ELFDATA2MSB.0);
    let machine = b.get(18..20).map(|m| {
        let m = [m[0], m[1]];
        if big_endian {
            u16::from_be_bytes(m)
        } else {
            u16::from_le_bytes(m)
        }
    });
    if let Some(m) = machine.filter(|&m| m != abi::EM_CUDA.0) {
        return Err(format!(
            "not a CUDA image: ELF machine {m}{}, expected 190 (CUDA)",
            machine_name(m)
        ));
    }
    let Some((header, _)) = object::pod::from_bytes::<FileHeader64<LE>>(b).ok() else {
        return Err(format!(
            "truncated: the ELF header needs {EHDR} bytes, the image has {len}"
        ));
    };
    let class = header.e_ident.class;
    if class != abi::ELFCLASS64 {
        return Err(format!(
            "cubin is not ELF64 (EI_CLASS {}); offload loads 64-bit cubins",
            class.0
        ));
    }
    if header.e_ident.data != abi::ELFDATA2LSB {
        return Err(format!(
            "cubin is not little-endian (EI_DATA {})",
            header.e_ident.data.0
        ));
    }
    let flags = header.e_flags(LE).0;
    let abi = header.e_ident.abi_version;
    let number = sm_number(abi, flags);
    if number < 10 {
        return Err(format!(
            "cubin e_flags {flags:#010x} (EI_ABIVERSION {abi}) name no SM architecture"
        ));
    }
    let arch = cc_of(number);
    if !cubin_runs_on(arch, device) {
        return Err(format!(
            "cubin is for {} but the device is {}; a cubin runs only on its own major \
             version, at the same or a newer minor",
            sm(arch),
            sm(device)
        ));
    }

    // Program headers: inside the bytes.
    let (phoff, phentsize, phnum) = (
        header.e_phoff(LE),
        header.e_phentsize(LE),
        header.e_phnum(LE),
    );
    if phnum > 0 {
        if u64::from(phentsize) != PHDR {
            return Err(format!(
                "cubin program headers are {phentsize} bytes, ELF64's are {PHDR}"
            ));
        }
        table_fits(phoff, u64::from(phnum), PHDR, len, "program header")?;
        header
            .program_headers(LE, b)
            .map_err(|e| format!("cubin program headers: {e}"))?;
    }

    // Section headers: inside the bytes, then their names and contents.
    let (shoff, shentsize) = (header.e_shoff(LE), header.e_shentsize(LE));
    if shoff == 0 {
        return Err("cubin has no section headers".to_owned());
    }
    if u64::from(shentsize) != SHDR {
        return Err(format!(
            "cubin section headers are {shentsize} bytes, ELF64's are {SHDR}"
        ));
    }
    table_fits(shoff, 1, SHDR, len, "section header")?;
    // Extended numbering: a count or string-table index too large for the ELF header
    // lives in section 0.
    let count = header
        .shnum(LE, b)
        .map_err(|e| format!("cubin section count: {e}"))?;
    let section_0 = header
        .section_0(LE, b)
        .map_err(|e| format!("cubin section 0: {e}"))?;
    let strndx = match header.e_shstrndx(LE) {
        abi::SHN_XINDEX => section_0.map_or(0, |s| s.sh_link(LE)),
        index => u32::from(index.0),
    };
    table_fits(shoff, u64::from(count), SHDR, len, "section header")?;
    if count == 0 {
        return Err("cubin has no sections".to_owned());
    }
    let headers = header
        .section_headers(LE, b)
        .map_err(|e| format!("cubin section headers: {e}"))?;
    let data_of = |i: usize, s: &abi::SectionHeader64<LE>, name: &str| -> Result<&[u8], String> {
        if s.sh_type(LE) == abi::SHT_NULL {
            return Ok(&[]);
        }
        // `object` reads no bytes of an empty section, wherever it says it is: its offset
        // must be inside the image too.
        let (offset, size) = (s.sh_offset(LE), s.sh_size(LE));
        s.data(LE, b)
            .ok()
            .filter(|_| s.sh_type(LE) == abi::SHT_NOBITS || offset <= len as u64)
            .ok_or_else(|| {
                let end = u128::from(offset) + u128::from(size);
                format!("truncated: section {i}{name} ends at {end}, the image has {len} bytes")
            })
    };
    let Some(names) = headers.get(strndx as usize) else {
        return Err(format!(
            "cubin's section-name table is section {strndx}, but it has {count} sections"
        ));
    };
    if names.sh_type(LE) != abi::SHT_STRTAB {
        return Err(format!(
            "cubin's section-name table (section {strndx}) is not a string table"
        ));
    }
    let names = data_of(strndx as usize, names, "")?;
    let mut sections = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        let name = string(names, h.sh_name(LE))
            .map_err(|why| format!("cubin section {i}: its name {why} (the section-name table)"))?;
        let label = format!(" ({name})");
        let data = data_of(i, h, &label)?;
        sections.push(Section { name, data });
    }
    let by_name: HashMap<&str, usize> = sections
        .iter()
        .enumerate()
        .rev()
        .map(|(i, s)| (s.name, i))
        .collect();

    // Symbols: kernels and variables.
    let table: SectionTable<'_, FileHeader64<LE>> =
        SectionTable::new(headers, StringTable::default());
    let mut kernels: Vec<&str> = Vec::new();
    let mut globals: Vec<Global> = Vec::new();
    for (index, h) in table.enumerate() {
        if h.sh_type(LE) != abi::SHT_SYMTAB {
            continue;
        }
        let Some(s) = sections.get(index.0) else {
            continue;
        };
        if h.sh_entsize(LE) != SYM || s.data.len() as u64 % SYM != 0 {
            return Err(format!(
                "cubin symbol table {} has {}-byte entries and {} bytes; ELF64 symbols are \
                 {SYM} bytes",
                s.name,
                h.sh_entsize(LE),
                s.data.len()
            ));
        }
        let link = h.sh_link(LE);
        let strtab = headers
            .get(link as usize)
            .filter(|t| t.sh_type(LE) == abi::SHT_STRTAB)
            .and_then(|_| sections.get(link as usize))
            .ok_or_else(|| {
                format!(
                    "cubin symbol table {} (section {}) links to section {link}, not a string \
                     table",
                    s.name, index.0
                )
            })?;
        let symbols = SymbolTable::parse(LE, b, &table, index, h)
            .map_err(|e| format!("cubin symbol table {}: {e}", s.name))?;
        for (n, sym) in symbols.iter().enumerate().skip(1) {
            let name = string(strtab.data, sym.st_name(LE)).map_err(|why| {
                format!(
                    "cubin symbol {n} of {}: its name {why} ({})",
                    s.name, strtab.name
                )
            })?;
            let shndx = sym.st_shndx(LE).0;
            let Some(home) = sections.get(usize::from(shndx)).filter(|_| shndx != 0) else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            let ty = sym.st_type();
            if ty == abi::STT_FUNC && sym.st_other().0 & STO_CUDA_ENTRY != 0 {
                if !kernels.contains(&name) {
                    kernels.push(name);
                }
            } else if ty == abi::STT_OBJECT && !name.starts_with('$') {
                let constant = match home.name.strip_prefix(".nv.constant") {
                    Some(bank) if !bank.is_empty() && bank.bytes().all(|c| c.is_ascii_digit()) => {
                        true
                    }
                    _ if home.name == ".nv.global" || home.name.starts_with(".nv.global.") => false,
                    _ => continue,
                };
                if !globals.iter().any(|g| g.name == name) {
                    globals.push(Global {
                        name: name.to_owned(),
                        size: sym.st_size(LE),
                        constant,
                    });
                }
            }
        }
    }
    if kernels.is_empty() {
        kernels = sections
            .iter()
            .filter_map(|s| s.name.strip_prefix(".nv.info."))
            .filter(|n| !n.is_empty())
            .collect();
    }
    if kernels.is_empty() {
        return Err("cubin has no kernels (no STO_CUDA_ENTRY function and no \
                    .nv.info.<kernel> section)"
            .to_owned());
    }
    let mut entries = Vec::with_capacity(kernels.len());
    for name in kernels {
        let info = by_name
            .get(format!(".nv.info.{name}").as_str())
            .and_then(|&i| sections.get(i));
        let params = match info {
            Some(s) => params(name, s)?,
            None => Vec::new(),
        };
        entries.push(Entry {
            name: name.to_owned(),
            params,
        });
    }
    Ok(Inspected {
        kind: ImageKind::Cubin,
        entries,
        globals,
        arch: Some(arch),
        ptx_version: None,
    })
}

/// Header `i` of a table of `count` headers of `size` bytes at `off` all end inside.
fn table_fits(off: u64, count: u64, size: u64, len: usize, what: &str) -> Result<(), String> {
    let len64 = len as u64;
    let end = u128::from(off) + u128::from(count) * u128::from(size);
    if end <= u128::from(len64) {
        return Ok(());
    }
    // The first header that does not fit.
    let first = if off >= len64 {
        0
    } else {
        (len64 - off) / size
    };
    let first_end = u128::from(off) + u128::from(first + 1) * u128::from(size);
    Err(format!(
        "truncated: {what} {first} ends at {first_end}, the image has {len} bytes"
    ))
}

/// The NUL-terminated UTF-8 string at `off` of a string table, or why there is none.
fn string(table: &[u8], off: u32) -> Result<&str, String> {
    let bytes = StringTable::new(table, 0, table.len() as u64)
        .get(off)
        .map_err(|()| {
            if u64::from(off) >= table.len() as u64 {
                format!(
                    "offset {off} is outside the string table of {} bytes",
                    table.len()
                )
            } else {
                format!("at offset {off} is not NUL-terminated")
            }
        })?;
    std::str::from_utf8(bytes).map_err(|_| format!("at offset {off} is not UTF-8"))
}

/// A kernel's parameters from the `KPARAM_INFO` records of its `.nv.info.<name>`.
fn params(kernel: &str, s: &Section<'_>) -> Result<Vec<Param>, String> {
    let at = |what: String| format!("cubin section {}: {what}", s.name);
    let d = s.data;
    let mut records: Vec<(u32, u32, u32)> = Vec::new(); // (ordinal, offset, size)
    let mut pos = 0usize;
    while pos < d.len() {
        let (Some(&format), Some(&attr), Some(value)) =
            (d.get(pos), d.get(pos + 1), le_u16(d, pos + 2))
        else {
            return Err(at(format!(
                "attribute at offset {pos} is truncated (the section has {} bytes)",
                d.len()
            )));
        };
        match format {
            EIFMT_NVAL | EIFMT_BVAL | EIFMT_HVAL => pos += 4,
            EIFMT_SVAL => {
                let start = pos + 4;
                let end = start + usize::from(value);
                let payload = d.get(start..end).ok_or_else(|| {
                    at(format!(
                        "attribute {attr:#04x} at offset {pos} needs {end} bytes, the \
                         section has {}",
                        d.len()
                    ))
                })?;
                if attr == EIATTR_KPARAM_INFO || attr == EIATTR_KPARAM_INFO_V2 {
                    let (Some(ordinal), Some(offset), Some(packed), Some(v2_size)) = (
                        le_u16(payload, 4),
                        le_u16(payload, 6),
                        le_u32(payload, 8),
                        le_u16(payload, 8),
                    ) else {
                        return Err(at(format!(
                            "KPARAM_INFO at offset {pos} has {} bytes, not 12",
                            payload.len()
                        )));
                    };
                    let size = if attr == EIATTR_KPARAM_INFO {
                        packed >> 18
                    } else {
                        u32::from(v2_size)
                    };
                    records.push((u32::from(ordinal), u32::from(offset), size));
                }
                pos = end;
            }
            other => {
                return Err(at(format!(
                    "attribute {attr:#04x} at offset {pos} has unknown format {other}"
                )));
            }
        }
    }
    records.sort_unstable();
    records.dedup();
    let mut out: Vec<Param> = Vec::with_capacity(records.len());
    let mut previous: Option<(u32, u32)> = None; // (offset, size)
    for (ordinal, offset, size) in records {
        let i = out.len() as u32;
        if ordinal < i {
            let (o, n) = previous.unwrap_or_default();
            return Err(format!(
                "cubin kernel {kernel}: KPARAM_INFO describes parameter {ordinal} twice \
                 (offset {o}, {n} bytes and offset {offset}, {size} bytes)"
            ));
        }
        if ordinal > i {
            return Err(format!(
                "cubin kernel {kernel}: KPARAM_INFO has no record for parameter {i} (it has \
                 one for {ordinal})"
            ));
        }
        if size == 0 {
            return Err(format!("cubin kernel {kernel}: parameter {i} has size 0"));
        }
        if previous.is_some_and(|(o, n)| u64::from(offset) < u64::from(o) + u64::from(n)) {
            return Err(format!(
                "cubin kernel {kernel}: parameter {i} (offset {offset}, {size} bytes) \
                 overlaps parameter {}",
                i - 1
            ));
        }
        previous = Some((offset, size));
        let align = if offset == 0 {
            pow2_dividing(size)
        } else {
            pow2_dividing(size).min(pow2_dividing(offset))
        };
        out.push(Param {
            size,
            align,
            pointer: None,
            ty: None,
            name: String::new(),
        });
    }
    Ok(out)
}
