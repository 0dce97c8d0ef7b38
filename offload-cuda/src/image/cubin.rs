//! Cubins: ELF64 images for `EM_CUDA`, their `sm_` architecture, kernels and the
//! `.nv.info` parameter tables.

use super::{
    Entry, Global, HashMap, ImageKind, Inspected, Param, cc_of, cubin_runs_on, le_u16, le_u32,
    le_u64, pow2_dividing, slice_at, sm,
};

const EM_CUDA: u16 = 190;
const EHDR: usize = 64;
const SHDR: u64 = 64;
const PHDR: u64 = 56;
const SYM: u64 = 24;
const SHT_NULL: u32 = 0;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_NOBITS: u32 = 8;
const SHN_XINDEX: u16 = 0xffff;
const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
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

struct Section<'a> {
    name: &'a str,
    ty: u32,
    link: u32,
    entsize: u64,
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
    let big_endian = b.get(5) == Some(&2);
    let machine = b.get(18..20).map(|m| {
        let m = [
            m.first().copied().unwrap_or(0),
            m.get(1).copied().unwrap_or(0),
        ];
        if big_endian {
            u16::from_be_bytes(m)
        } else {
            u16::from_le_bytes(m)
        }
    });
    if let Some(m) = machine.filter(|&m| m != EM_CUDA) {
        return Err(format!(
            "not a CUDA image: ELF machine {m}{}, expected 190 (CUDA)",
            machine_name(m)
        ));
    }
    if len < EHDR {
        return Err(format!(
            "truncated: the ELF header needs {EHDR} bytes, the image has {len}"
        ));
    }
    let class = b.get(4).copied().unwrap_or(0);
    if class != 2 {
        return Err(format!(
            "cubin is not ELF64 (EI_CLASS {class}); offload loads 64-bit cubins"
        ));
    }
    if big_endian || b.get(5) != Some(&1) {
        return Err(format!(
            "cubin is not little-endian (EI_DATA {})",
            b.get(5).copied().unwrap_or(0)
        ));
    }
    let hdr = |at: usize| le_u64(b, at).unwrap_or(0);
    let hdr16 = |at: usize| le_u16(b, at).unwrap_or(0);
    let flags = le_u32(b, 0x30).unwrap_or(0);
    let abi = b.get(8).copied().unwrap_or(0);
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
    let (phoff, phentsize, phnum) = (hdr(0x20), hdr16(0x36), hdr16(0x38));
    if phnum > 0 {
        if u64::from(phentsize) != PHDR {
            return Err(format!(
                "cubin program headers are {phentsize} bytes, ELF64's are {PHDR}"
            ));
        }
        table_fits(phoff, u64::from(phnum), PHDR, len, "program header")?;
    }

    // Section headers: inside the bytes, then their names and contents.
    let (shoff, shentsize, shnum, shstrndx) = (hdr(0x28), hdr16(0x3a), hdr16(0x3c), hdr16(0x3e));
    if shoff == 0 {
        return Err("cubin has no section headers".to_owned());
    }
    if u64::from(shentsize) != SHDR {
        return Err(format!(
            "cubin section headers are {shentsize} bytes, ELF64's are {SHDR}"
        ));
    }
    table_fits(shoff, 1, SHDR, len, "section header")?;
    let raw = |i: u64, field: u64, wide: bool| -> u64 {
        let at = shoff
            .checked_add(i.saturating_mul(SHDR))
            .and_then(|a| a.checked_add(field))
            .and_then(|a| usize::try_from(a).ok());
        match (at, wide) {
            (Some(at), true) => le_u64(b, at).unwrap_or(0),
            (Some(at), false) => le_u32(b, at).map_or(0, u64::from),
            (None, _) => 0,
        }
    };
    // Extended numbering: a count or string-table index too large for the ELF header
    // lives in section 0.
    let count = if shnum == 0 {
        raw(0, 32, true)
    } else {
        u64::from(shnum)
    };
    let strndx = if shstrndx == SHN_XINDEX {
        raw(0, 40, false)
    } else {
        u64::from(shstrndx)
    };
    table_fits(shoff, count, SHDR, len, "section header")?;
    if count == 0 {
        return Err("cubin has no sections".to_owned());
    }
    let header = |i: u64| {
        (
            u32::try_from(raw(i, 0, false)).unwrap_or(u32::MAX),
            u32::try_from(raw(i, 4, false)).unwrap_or(u32::MAX),
            raw(i, 24, true),
            raw(i, 32, true),
            u32::try_from(raw(i, 40, false)).unwrap_or(u32::MAX),
            raw(i, 56, true),
        )
    };
    let data_of = |i: u64, name: &str| -> Result<&[u8], String> {
        let (_, ty, offset, size, _, _) = header(i);
        if ty == SHT_NOBITS || ty == SHT_NULL {
            return Ok(&[]);
        }
        slice_at(b, offset, size).ok_or_else(|| {
            let end = u128::from(offset) + u128::from(size);
            format!("truncated: section {i}{name} ends at {end}, the image has {len} bytes")
        })
    };
    if strndx >= count {
        return Err(format!(
            "cubin's section-name table is section {strndx}, but it has {count} sections"
        ));
    }
    if header(strndx).1 != SHT_STRTAB {
        return Err(format!(
            "cubin's section-name table (section {strndx}) is not a string table"
        ));
    }
    let names = data_of(strndx, "")?;
    let mut sections = Vec::new();
    for i in 0..count {
        let (name_off, ty, _, _, link, entsize) = header(i);
        let name = string(names, name_off)
            .map_err(|why| format!("cubin section {i}: its name {why} (the section-name table)"))?;
        let label = format!(" ({name})");
        let data = data_of(i, &label)?;
        sections.push(Section {
            name,
            ty,
            link,
            entsize,
            data,
        });
    }
    let by_name: HashMap<&str, usize> = sections
        .iter()
        .enumerate()
        .rev()
        .map(|(i, s)| (s.name, i))
        .collect();

    // Symbols: kernels and variables.
    let mut kernels: Vec<&str> = Vec::new();
    let mut globals: Vec<Global> = Vec::new();
    for (i, s) in sections.iter().enumerate() {
        if s.ty != SHT_SYMTAB {
            continue;
        }
        if s.entsize != SYM || s.data.len() as u64 % SYM != 0 {
            return Err(format!(
                "cubin symbol table {} has {}-byte entries and {} bytes; ELF64 symbols are \
                 {SYM} bytes",
                s.name,
                s.entsize,
                s.data.len()
            ));
        }
        let strtab = usize::try_from(s.link)
            .ok()
            .and_then(|l| sections.get(l))
            .filter(|t| t.ty == SHT_STRTAB)
            .ok_or_else(|| {
                format!(
                    "cubin symbol table {} (section {i}) links to section {}, not a string \
                     table",
                    s.name, s.link
                )
            })?;
        for (n, sym) in s.data.chunks_exact(SYM as usize).enumerate().skip(1) {
            let name_off = le_u32(sym, 0).unwrap_or(0);
            let info = sym.get(4).copied().unwrap_or(0);
            let other = sym.get(5).copied().unwrap_or(0);
            let shndx = le_u16(sym, 6).unwrap_or(0);
            let size = le_u64(sym, 16).unwrap_or(0);
            let name = string(strtab.data, name_off).map_err(|why| {
                format!(
                    "cubin symbol {n} of {}: its name {why} ({})",
                    s.name, strtab.name
                )
            })?;
            let Some(home) = sections.get(usize::from(shndx)).filter(|_| shndx != 0) else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            let ty = info & 0xf;
            if ty == STT_FUNC && other & STO_CUDA_ENTRY != 0 {
                if !kernels.contains(&name) {
                    kernels.push(name);
                }
            } else if ty == STT_OBJECT && !name.starts_with('$') {
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
                        size,
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

/// The NUL-terminated UTF-8 string at `off` of a string table.
fn string(table: &[u8], off: u32) -> Result<&str, String> {
    let at = usize::try_from(off).unwrap_or(usize::MAX);
    let rest = table.get(at..).filter(|r| !r.is_empty()).ok_or_else(|| {
        format!(
            "offset {off} is outside the string table of {} bytes",
            table.len()
        )
    })?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| format!("at offset {off} is not NUL-terminated"))?;
    std::str::from_utf8(rest.get(..end).unwrap_or_default())
        .map_err(|_| format!("at offset {off} is not UTF-8"))
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
