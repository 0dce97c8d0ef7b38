//! ELF validation and dynamic-symbol lookup for host programs, in safe code.
//!
//! A corrupt image must never reach the dynamic loader's crash paths (P4), so before
//! `dlopen` sees an image, every structure the loader will follow is checked to lie inside
//! the bytes: header, program headers and their segments, section headers and their
//! contents. The dynamic symbol table is parsed here too: it gives each symbol's size and
//! kind, which `dlsym` cannot.

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

const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

#[cfg(target_arch = "x86_64")]
const HOST_MACHINE: u16 = EM_X86_64;
#[cfg(target_arch = "aarch64")]
const HOST_MACHINE: u16 = EM_AARCH64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const HOST_MACHINE: u16 = 0;

/// Whether `image` is an ELF file for this machine, by its header alone (`validate` checks
/// the rest).
pub fn runs_here(image: &[u8]) -> bool {
    offload_core::hal::ImageFormat::of(image)
        == offload_core::hal::ImageFormat::Elf {
            machine: HOST_MACHINE,
        }
}

fn machine_name(m: u16) -> String {
    match m {
        EM_X86_64 => "x86-64".into(),
        EM_AARCH64 => "AArch64".into(),
        3 => "i386".into(),
        40 => "ARM".into(),
        243 => "RISC-V".into(),
        other => format!("machine {other}"),
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&self, at: u64, len: u64) -> Result<&[u8], String> {
        let end = at.checked_add(len).ok_or("offset overflow")?;
        if end > self.0.len() as u64 {
            return Err(format!(
                "truncated: needs bytes {at}..{end} of {}",
                self.0.len()
            ));
        }
        Ok(&self.0[at as usize..end as usize])
    }
    fn u8(&self, at: u64) -> Result<u8, String> {
        Ok(self.bytes(at, 1)?[0])
    }
    fn u16(&self, at: u64) -> Result<u16, String> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&self, at: u64) -> Result<u32, String> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&self, at: u64) -> Result<u64, String> {
        let b = self.bytes(at, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

struct Section {
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

/// Checks that `bytes` is a shared object for this machine that the loader can map without
/// reading outside it, and reads its dynamic symbols.
pub fn validate(bytes: &[u8]) -> Result<Image, String> {
    let r = Reader(bytes);
    if bytes.is_empty() {
        return Err("empty image".into());
    }
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file (bad magic)".into());
    }
    if r.u8(4)? != 2 {
        return Err("not a 64-bit ELF file".into());
    }
    if r.u8(5)? != 1 {
        return Err("not little-endian".into());
    }
    if r.u8(6)? != 1 || r.u32(20)? != 1 {
        return Err("unknown ELF version".into());
    }
    let e_type = r.u16(16)?;
    if e_type != 3 {
        return Err(format!("not a shared object (ELF type {e_type})"));
    }
    let machine = r.u16(18)?;
    if machine != HOST_MACHINE {
        return Err(format!(
            "built for {}, this machine is {}",
            machine_name(machine),
            machine_name(HOST_MACHINE)
        ));
    }
    if r.u16(52)? != 64 {
        return Err("bad ELF header size".into());
    }
    let (phoff, phentsize, phnum) = (r.u64(32)?, r.u16(54)?, r.u16(56)?);
    if phnum == 0 || phentsize != 56 {
        return Err("no usable program headers".into());
    }
    r.bytes(phoff, u64::from(phnum) * 56)
        .map_err(|e| format!("program headers: {e}"))?;
    let mut loads = 0;
    for i in 0..u64::from(phnum) {
        let at = phoff + i * 56;
        let (p_type, offset, filesz, memsz) =
            (r.u32(at)?, r.u64(at + 8)?, r.u64(at + 32)?, r.u64(at + 40)?);
        if p_type == 1 || p_type == 2 {
            // PT_LOAD and PT_DYNAMIC are read by the loader: they must lie inside the image.
            r.bytes(offset, filesz)
                .map_err(|e| format!("segment {i}: {e}"))?;
        }
        if p_type == 1 {
            loads += 1;
            if filesz > memsz {
                return Err(format!("segment {i}: file size exceeds memory size"));
            }
        }
    }
    if loads == 0 {
        return Err("no loadable segment".into());
    }

    let (shoff, shentsize, shnum, shstrndx) = (r.u64(40)?, r.u16(58)?, r.u16(60)?, r.u16(62)?);
    if shnum == 0 {
        return Err("no section headers (stripped of them): cannot find the symbol table".into());
    }
    if shentsize != 64 || shstrndx >= shnum {
        return Err("bad section header table".into());
    }
    r.bytes(shoff, u64::from(shnum) * 64)
        .map_err(|e| format!("section headers: {e}"))?;
    let mut sections = Vec::with_capacity(usize::from(shnum));
    for i in 0..u64::from(shnum) {
        let at = shoff + i * 64;
        let s = Section {
            kind: r.u32(at + 4)?,
            flags: r.u64(at + 8)?,
            offset: r.u64(at + 24)?,
            size: r.u64(at + 32)?,
            link: r.u32(at + 40)?,
            entsize: r.u64(at + 56)?,
        };
        if s.kind != 8 && s.kind != 0 {
            // Everything but SHT_NOBITS / SHT_NULL has its bytes in the file.
            r.bytes(s.offset, s.size)
                .map_err(|e| format!("section {i}: {e}"))?;
        }
        sections.push(s);
    }

    let dynsym = sections
        .iter()
        .find(|s| s.kind == 11)
        .ok_or("no dynamic symbol table")?;
    if dynsym.entsize != 24 {
        return Err("bad dynamic symbol entry size".into());
    }
    let strtab = sections
        .get(dynsym.link as usize)
        .filter(|s| s.kind == 3)
        .ok_or("dynamic symbol table has no string table")?;
    let strings = r.bytes(strtab.offset, strtab.size)?;
    let mut symbols = Vec::new();
    for i in 1..dynsym.size / 24 {
        let at = dynsym.offset + i * 24;
        let (name_at, info, shndx, size) =
            (r.u32(at)?, r.u8(at + 4)?, r.u16(at + 6)?, r.u64(at + 16)?);
        if shndx == 0 || shndx >= 0xff00 {
            continue; // undefined or special: not defined by this image
        }
        let name_bytes = strings
            .get(name_at as usize..)
            .ok_or("symbol name outside its string table")?;
        let len = name_bytes
            .iter()
            .position(|&b| b == 0)
            .ok_or("unterminated symbol name")?;
        let Ok(name) = std::str::from_utf8(&name_bytes[..len]) else {
            continue;
        };
        let kind = match info & 0xf {
            2 => SymbolKind::Function,
            1 => SymbolKind::Object,
            _ => SymbolKind::Other,
        };
        let writable = sections
            .get(usize::from(shndx))
            .is_some_and(|s| s.flags & 1 != 0);
        symbols.push(Symbol {
            name: name.to_string(),
            size,
            kind,
            writable,
        });
    }
    Ok(Image { symbols })
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
