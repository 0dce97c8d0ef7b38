//! Fatbins: the container of PTX and cubin entries for several architectures, and the
//! choice of the entry the driver would load.

use super::{ImageKind, Inspected, cc_of, cubin_runs_on, le_u16, le_u32, le_u64, sm};

/// The fatbinary container's magic (`__cudaFatMAGIC2`'s text header).
pub(super) const MAGIC: u32 = 0xBA55_ED50;
/// `__fatBinC_Wrapper_t`, the host-side structure that points to a fatbin.
pub(super) const WRAPPER_MAGIC: u32 = 0x4662_43B1;
const HEADER: usize = 16;
const ENTRY_HEADER: usize = 64;
const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
/// `FATBIN_FLAG_COMPRESS`, `FATBIN_FLAG_COMPRESS2` (LZ4), `FATBIN_FLAG_ZCOMPRESS` (zstd).
const FLAG_COMPRESSED: u64 = 0x1000 | 0x2000 | 0x8000;
const FLAG_ZSTD: u64 = 0x8000;
/// An `sm_XYa` entry (arch-specific: only X.Y runs it).
const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
/// An `sm_XYf` entry (family-specific: major X, minor ≥ Y).
const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;
const ZSTD_MAGIC: &[u8] = b"\x28\xb5\x2f\xfd";
const LZ4_FRAME_MAGIC: &[u8] = b"\x04\x22\x4d\x18";
/// The most a compressed payload may claim to decompress to.
const MAX_DECOMPRESSED: u64 = 1 << 30;

struct FatEntry<'a> {
    index: usize,
    kind: u16,
    arch: (u32, u32),
    flags: u64,
    /// The stored payload (compressed when `decompressed` is not 0 or `flags` says
    /// so), without padding where the header gives its exact size.
    payload: &'a [u8],
    decompressed: u64,
}

impl FatEntry<'_> {
    /// `sm_86`, `sm_90a`, `sm_100f`.
    fn arch_name(&self) -> String {
        let suffix = if self.flags & FLAG_ARCH_SPECIFIC != 0 {
            "a"
        } else if self.flags & FLAG_FAMILY_SPECIFIC != 0 {
            "f"
        } else {
            ""
        };
        format!("{}{suffix}", sm(self.arch))
    }

    fn describe(&self) -> String {
        let kind = if self.kind == KIND_ELF {
            "cubin"
        } else {
            "PTX"
        };
        format!("{kind} {}", self.arch_name())
    }

    /// Whether the driver could load this entry on `device`.
    fn candidate(&self, device: (u32, u32)) -> bool {
        let runs = if self.flags & FLAG_ARCH_SPECIFIC != 0 {
            self.arch == device
        } else if self.kind == KIND_ELF || self.flags & FLAG_FAMILY_SPECIFIC != 0 {
            cubin_runs_on(self.arch, device)
        } else {
            self.arch <= device
        };
        (self.kind == KIND_ELF || self.kind == KIND_PTX) && runs
    }
}

pub(super) fn inspect(b: &[u8], device: (u32, u32)) -> Result<Inspected, String> {
    let len = b.len();
    let (Some(version), Some(header), Some(size)) = (le_u16(b, 4), le_u16(b, 6), le_u64(b, 8))
    else {
        return Err(format!(
            "truncated: the fatbin header needs {HEADER} bytes, the image has {len}"
        ));
    };
    if version != 1 {
        return Err(format!(
            "fatbin version {version} is not known (expected 1)"
        ));
    }
    let header = usize::from(header);
    if header < HEADER {
        return Err(format!(
            "fatbin header size {header} is smaller than {HEADER} bytes"
        ));
    }
    let end = u64::try_from(header)
        .ok()
        .and_then(|h| h.checked_add(size))
        .and_then(|e| usize::try_from(e).ok())
        .filter(|&e| e <= len)
        .ok_or_else(|| {
            format!(
                "truncated: the fatbin says it ends at {}, the image has {len} bytes",
                u128::from(size) + header as u128
            )
        })?;
    // Only the first container: what follows it (another container, padding) is not
    // what the driver loads.
    let mut entries = Vec::new();
    let mut pos = header;
    while pos < end {
        let index = entries.len();
        if end - pos < ENTRY_HEADER {
            return Err(format!(
                "truncated: fatbin entry {index} at offset {pos} needs a {ENTRY_HEADER}-byte \
                 header, the fatbin ends at {end}"
            ));
        }
        let field32 = |at: usize| le_u32(b, pos + at).unwrap_or(0);
        let field64 = |at: usize| le_u64(b, pos + at).unwrap_or(0);
        let kind = le_u16(b, pos).unwrap_or(0);
        let entry_header = field32(4) as usize;
        let padded = field64(8);
        let stored = field32(16);
        let arch = field32(28);
        let flags = field64(40);
        let decompressed = field64(56);
        if entry_header < ENTRY_HEADER {
            return Err(format!(
                "fatbin entry {index}: header size {entry_header} is smaller than \
                 {ENTRY_HEADER} bytes"
            ));
        }
        let start = pos.checked_add(entry_header).filter(|&s| s <= end);
        let stop = start
            .and_then(|s| s.checked_add(usize::try_from(padded).ok()?))
            .filter(|&s| s <= end);
        let (Some(start), Some(stop)) = (start, stop) else {
            return Err(format!(
                "truncated: fatbin entry {index} ends at {}, the fatbin ends at {end}",
                pos as u128 + entry_header as u128 + u128::from(padded)
            ));
        };
        let padded_payload = b.get(start..stop).unwrap_or_default();
        let payload = match stored as usize {
            0 => padded_payload,
            n if n <= padded_payload.len() => padded_payload.get(..n).unwrap_or_default(),
            n => {
                return Err(format!(
                    "fatbin entry {index}: payload size {n} is larger than its {}-byte slot",
                    padded_payload.len()
                ));
            }
        };
        if (kind == KIND_PTX || kind == KIND_ELF) && arch < 10 {
            return Err(format!(
                "fatbin entry {index} names no architecture ({arch})"
            ));
        }
        entries.push(FatEntry {
            index,
            kind,
            arch: cc_of(arch),
            flags,
            payload,
            decompressed,
        });
        pos = stop;
    }

    // The driver's choice: the newest cubin the device runs, else the newest PTX it can
    // JIT.
    let mut cubins: Vec<&FatEntry<'_>> = entries
        .iter()
        .filter(|e| e.kind == KIND_ELF && e.candidate(device))
        .collect();
    let mut ptxs: Vec<&FatEntry<'_>> = entries
        .iter()
        .filter(|e| e.kind == KIND_PTX && e.candidate(device))
        .collect();
    cubins.sort_by_key(|e| std::cmp::Reverse(e.arch));
    ptxs.sort_by_key(|e| std::cmp::Reverse(e.arch));
    let order: Vec<&FatEntry<'_>> = cubins.into_iter().chain(ptxs).collect();
    let Some(best) = order.first() else {
        let list = |kind: u16| {
            entries
                .iter()
                .filter(|e| e.kind == kind)
                .map(FatEntry::arch_name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (c, p) = (list(KIND_ELF), list(KIND_PTX));
        let holds = match (c.is_empty(), p.is_empty()) {
            (true, true) => "no cubin and no PTX".to_owned(),
            (false, true) => format!("cubins for {c} and no PTX"),
            (true, false) => format!("no cubin and PTX for {p}"),
            (false, false) => format!("cubins for {c} and PTX for {p}"),
        };
        let others = entries
            .iter()
            .filter(|e| e.kind != KIND_ELF && e.kind != KIND_PTX)
            .count();
        let others = match others {
            0 => String::new(),
            1 => " and 1 entry of another kind (e.g. LTO IR), which the driver does not load"
                .to_owned(),
            n => format!(
                " and {n} entries of other kinds (e.g. LTO IR), which the driver does not load"
            ),
        };
        return Err(format!(
            "fatbin has no image the device ({}) can run: it holds {holds}{others}",
            sm(device)
        ));
    };
    for e in &order {
        let Some(bytes) = payload(e)? else {
            continue; // zstd or an LZ4 frame: not decoded here.
        };
        let inner = super::inspect(&bytes, device)
            .map_err(|why| format!("fatbin entry {} ({}): {why}", e.index, e.describe()))?;
        let expected = if e.kind == KIND_ELF {
            ImageKind::Cubin
        } else {
            ImageKind::Ptx
        };
        if inner.kind != expected {
            return Err(format!(
                "fatbin entry {} says it is {} but holds a {:?} image",
                e.index,
                e.describe(),
                inner.kind
            ));
        }
        if e.kind == KIND_ELF && inner.arch != Some(e.arch) {
            return Err(format!(
                "fatbin entry {} says {} but its cubin is for {}",
                e.index,
                e.arch_name(),
                inner.arch.map_or_else(|| "no architecture".to_owned(), sm)
            ));
        }
        return Ok(Inspected {
            kind: ImageKind::Fatbin,
            entries: inner.entries,
            globals: inner.globals,
            arch: Some(best.arch),
            ptx_version: inner.ptx_version,
        });
    }
    // Every candidate is compressed in a way not decoded here: what the headers say.
    Ok(Inspected {
        kind: ImageKind::Fatbin,
        entries: Vec::new(),
        globals: Vec::new(),
        arch: Some(best.arch),
        ptx_version: None,
    })
}

/// An entry's payload, decompressed; `None` for zstd and LZ4 frames.
fn payload(e: &FatEntry<'_>) -> Result<Option<Vec<u8>>, String> {
    if e.flags & FLAG_COMPRESSED == 0 && e.decompressed == 0 {
        return Ok(Some(e.payload.to_vec()));
    }
    if e.flags & FLAG_ZSTD != 0
        || e.payload.starts_with(ZSTD_MAGIC)
        || e.payload.starts_with(LZ4_FRAME_MAGIC)
    {
        return Ok(None);
    }
    if e.decompressed == 0 || e.decompressed > MAX_DECOMPRESSED {
        return Err(format!(
            "fatbin entry {}: compressed, with a decompressed size of {} bytes",
            e.index, e.decompressed
        ));
    }
    let limit = usize::try_from(e.decompressed).unwrap_or(usize::MAX);
    lz4_block(e.payload, limit)
        .map(Some)
        .map_err(|why| format!("fatbin entry {}: bad LZ4 payload: {why}", e.index))
}

/// Decodes the LZ4 block format (no frame) into at most `limit` bytes. Stops once
/// `limit` bytes are out (what follows is padding).
pub(super) fn lz4_block(src: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let mut out: Vec<u8> = Vec::with_capacity(limit.min(1 << 24));
    let mut i = 0usize;
    let truncated = || "it ends inside a sequence".to_owned();
    let length = |i: &mut usize, mut n: usize| -> Result<usize, String> {
        if n == 15 {
            loop {
                let more = *src.get(*i).ok_or_else(truncated)?;
                *i += 1;
                n = n.checked_add(usize::from(more)).ok_or_else(truncated)?;
                if more != 255 {
                    break;
                }
            }
        }
        Ok(n)
    };
    while i < src.len() && out.len() < limit {
        let token = *src.get(i).ok_or_else(truncated)?;
        i += 1;
        let literals = length(&mut i, usize::from(token >> 4))?;
        let end = i.checked_add(literals).ok_or_else(truncated)?;
        let lit = src.get(i..end).ok_or_else(truncated)?;
        if out.len() + lit.len() > limit {
            return Err(format!("it decodes past its {limit} bytes"));
        }
        out.extend_from_slice(lit);
        i = end;
        if i >= src.len() || out.len() >= limit {
            break;
        }
        let distance = usize::from(le_u16(src, i).ok_or_else(truncated)?);
        i += 2;
        if distance == 0 || distance > out.len() {
            return Err(format!(
                "a match reaches {distance} bytes back, {} are decoded",
                out.len()
            ));
        }
        let matched = length(&mut i, usize::from(token & 15))?
            .checked_add(4)
            .ok_or_else(truncated)?;
        if matched > limit - out.len() {
            return Err(format!("it decodes past its {limit} bytes"));
        }
        for _ in 0..matched {
            let byte = out
                .get(out.len() - distance)
                .copied()
                .ok_or_else(truncated)?;
            out.push(byte);
        }
    }
    Ok(out)
}
