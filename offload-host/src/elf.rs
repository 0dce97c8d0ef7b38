//! ELF validation and dynamic-symbol lookup for host programs, in safe code.
//!
//! A corrupt image must never reach the dynamic loader's crash paths (P4), so before
//! `dlopen` sees an image, every structure the loader will follow is checked to lie inside
//! the bytes: header, program headers and their segments, section headers and their
//! contents. The dynamic symbol table is read here too: it gives each symbol's size and
//! kind, which `dlsym` cannot. The ELF structures are read with the `object` crate
//! (bounds-checked, fuzzed); what this module adds on top is offload's rule, that
//! everything the loader follows lies inside the bytes, and what the backend needs.

use object::LittleEndian as LE;
use object::elf::{self as abi, FileHeader64};
use object::read::StringTable;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};

/// What the validation found that the backend needs later.
#[derive(Debug)]
pub struct Image {
    pub symbols: Vec<Symbol>,
}

/// One defined dynamic symbol.
#[derive(Debug, Clone)]
pub struct Symbol {
    pub name: String,
    pub size: u64,
    pub kind: SymbolKind,
    pub writable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolKind {
    Function,
    Object,
    Other,
}

impl Image {
    pub fn symbol(&self, name: &str) -> Option<&Symbol> {
        self.symbols.iter().find(|s| s.name == name)
    }
}

#[cfg(target_arch = "x86_64")]
const HOST_MACHINE: abi::Machine = abi::EM_X86_64;
#[cfg(target_arch = "aarch64")]
const HOST_MACHINE: abi::Machine = abi::EM_AARCH64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const HOST_MACHINE: abi::Machine = abi::EM_NONE;

/// Whether `image` is an ELF file for this machine, by its header alone (`validate` checks
/// the rest).
pub fn runs_here(image: &[u8]) -> bool {
    offload_core::hal::ImageFormat::of(image)
        == offload_core::hal::ImageFormat::Elf {
            machine: HOST_MACHINE.0,
        }
}

fn machine_name(m: abi::Machine) -> String {
    match m {
        abi::EM_X86_64 => "x86-64".into(),
        abi::EM_AARCH64 => "AArch64".into(),
        abi::EM_386 => "i386".into(),
        abi::EM_ARM => "ARM".into(),
        abi::EM_RISCV => "RISC-V".into(),
        other => format!("machine {}", other.0),
    }
}

/// Checks that `bytes` is a shared object for this machine that the loader can map without
/// reading outside it, and reads its dynamic symbols.
pub fn validate(bytes: &[u8]) -> Result<Image, String> {
    if bytes.is_empty() {
        return Err("empty image".into());
    }
    // The header's fields one by one, each refusal with its reason (`FileHeader::parse`
    // checks them together).
    let header = object::pod::from_bytes::<FileHeader64<LE>>(bytes)
        .ok()
        .map(|(header, _)| header)
        .filter(|h| h.e_ident.magic == abi::ELFMAG)
        .ok_or("not an ELF file (bad magic)")?;
    let ident = &header.e_ident;
    if ident.class != abi::ELFCLASS64 {
        return Err("not a 64-bit ELF file".into());
    }
    if ident.data != abi::ELFDATA2LSB {
        return Err("not little-endian".into());
    }
    if ident.version != abi::EV_CURRENT || header.e_version(LE) != u32::from(abi::EV_CURRENT.0) {
        return Err("unknown ELF version".into());
    }
    let e_type = header.e_type(LE);
    if e_type != abi::ET_DYN {
        return Err(format!("not a shared object (ELF type {})", e_type.0));
    }
    let machine = header.e_machine(LE);
    if machine != HOST_MACHINE {
        return Err(format!(
            "built for {}, this machine is {}",
            machine_name(machine),
            machine_name(HOST_MACHINE)
        ));
    }
    if usize::from(header.e_ehsize(LE)) != size_of::<FileHeader64<LE>>() {
        return Err("bad ELF header size".into());
    }
    let phdrs = header
        .program_headers(LE, bytes)
        .map_err(|e| format!("program headers: {e}"))?;
    if phdrs.is_empty() {
        return Err("no usable program headers".into());
    }
    let mut loads = 0;
    for (i, ph) in phdrs.iter().enumerate() {
        let p_type = ph.p_type(LE);
        if p_type == abi::PT_LOAD || p_type == abi::PT_DYNAMIC {
            // The loader reads these: they must lie inside the image.
            let (at, len) = ph.file_range(LE);
            inside(at, len, bytes).map_err(|e| format!("segment {i}: {e}"))?;
        }
        if p_type == abi::PT_LOAD {
            loads += 1;
            if ph.p_filesz(LE) > ph.p_memsz(LE) {
                return Err(format!("segment {i}: file size exceeds memory size"));
            }
        }
    }
    if loads == 0 {
        return Err("no loadable segment".into());
    }

    if header.e_shoff(LE) == 0 || header.e_shnum(LE) == 0 {
        return Err("no section headers (stripped of them): cannot find the symbol table".into());
    }
    let headers = header
        .section_headers(LE, bytes)
        .map_err(|e| format!("bad section header table: {e}"))?;
    if headers.is_empty() || usize::from(header.e_shstrndx(LE).0) >= headers.len() {
        return Err("bad section header table".into());
    }
    for (i, s) in headers.iter().enumerate() {
        if s.sh_type(LE) == abi::SHT_NULL {
            continue;
        }
        // Everything but SHT_NOBITS (no file range) has its bytes in the file.
        if let Some((at, len)) = s.file_range(LE) {
            inside(at, len, bytes).map_err(|e| format!("section {i}: {e}"))?;
        }
    }
    let sections: SectionTable<'_, FileHeader64<LE>> =
        SectionTable::new(headers, StringTable::default());

    let (index, dynsym) = sections
        .enumerate()
        .find(|(_, s)| s.sh_type(LE) == abi::SHT_DYNSYM)
        .ok_or("no dynamic symbol table")?;
    if usize::try_from(dynsym.sh_entsize(LE)).ok() != Some(size_of::<abi::Sym64<LE>>()) {
        return Err("bad dynamic symbol entry size".into());
    }
    if headers
        .get(dynsym.sh_link(LE) as usize)
        .is_none_or(|s| s.sh_type(LE) != abi::SHT_STRTAB)
    {
        return Err("dynamic symbol table has no string table".into());
    }
    let table = object::read::elf::SymbolTable::parse(LE, bytes, &sections, index, dynsym)
        .map_err(|e| format!("dynamic symbol table: {e}"))?;
    let mut symbols = Vec::new();
    for sym in table.iter().skip(1) {
        // Undefined or special: not defined by this image.
        let Some(shndx) = sym.st_shndx(LE).index() else {
            continue;
        };
        let name = table
            .symbol_name(LE, sym)
            .map_err(|e| format!("dynamic symbol name: {e}"))?;
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let kind = match sym.st_type() {
            abi::STT_FUNC => SymbolKind::Function,
            abi::STT_OBJECT => SymbolKind::Object,
            _ => SymbolKind::Other,
        };
        let writable = headers
            .get(usize::from(shndx))
            .is_some_and(|s| s.sh_flags(LE).0 & abi::SHF_WRITE.0 != 0);
        symbols.push(Symbol {
            name: name.to_string(),
            size: sym.st_size(LE),
            kind,
            writable,
        });
    }
    Ok(Image { symbols })
}

/// Whether the `len` bytes at `at` lie inside `bytes`, and if not, why. The offset of an
/// empty range counts too (`object` reads no bytes there, but the loader is given it).
fn inside(at: u64, len: u64, bytes: &[u8]) -> Result<(), String> {
    match at.checked_add(len) {
        None => Err("offset overflow".into()),
        Some(end) if end > bytes.len() as u64 => Err(format!(
            "truncated: needs bytes {at}..{end} of {}",
            bytes.len()
        )),
        Some(_) => Ok(()),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_a_shared_object_for_this_machine() {
        assert!(validate(&[]).unwrap_err().contains("empty"));
        assert!(validate(&[0u8; 100]).unwrap_err().contains("magic"));
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 1;
        assert!(validate(&header).unwrap_err().contains("64-bit"));
        header[4] = 2;
        header[5] = 1;
        header[6] = 1;
        header[20] = 1;
        header[16] = 2; // ET_EXEC
        assert!(validate(&header).unwrap_err().contains("shared object"));
        header[16] = 3;
        header[18] = 40; // ARM
        assert!(validate(&header).unwrap_err().contains("ARM"));
    }
}
