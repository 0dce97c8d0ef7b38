//! What a program image is by its first bytes ([`ImageFormat`]): the cheap look the runtime
//! takes before opening a platform for it (`Offload::devices_for`), and that backends use
//! to say which images they may run ([`crate::hal::Platform::may_run`]). It decides the
//! container only; whether a device can load the image is its `validate`'s answer.

/// The container of a program image, told from its first bytes.
///
/// ```
/// use offload_core::hal::ImageFormat;
/// let spirv = 0x0723_0203u32.to_ne_bytes();
/// assert_eq!(ImageFormat::of(&spirv), ImageFormat::Spirv);
/// assert_eq!(ImageFormat::of(b"// generated\n.version 8.0\n.target sm_80\n"), ImageFormat::Ptx);
/// assert_eq!(ImageFormat::of(b"hello"), ImageFormat::Unknown);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageFormat {
    /// A SPIR-V module in this machine's byte order (Vulkan, Level Zero).
    Spirv,
    /// A SPIR-V module in the other byte order.
    SpirvSwapped,
    /// A 64-bit little-endian ELF file for machine `machine` (`e_machine`: 62 x86-64, 183
    /// AArch64, 190 CUDA, 224 AMD GPU, 205 Intel GPU).
    Elf {
        /// Its `e_machine`.
        machine: u16,
    },
    /// PTX assembly text (its first directive is `.version`).
    Ptx,
    /// A CUDA fatbin container.
    Fatbin,
    /// A clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`).
    OffloadBundle,
    /// The core's reference backend's text format ([`crate::reference`]).
    Reference,
    /// None of these.
    Unknown,
}

/// The first line of the reference backend's images (`crate::reference::MAGIC`, which is
/// this; it lives here so that this module needs nothing above `hal`).
pub(crate) const REFERENCE_MAGIC: &str = "OFFLOAD-REFERENCE 1";
/// The SPIR-V magic number.
const SPIRV_MAGIC: u32 = 0x0723_0203;
/// The fatbin container's magic, little-endian.
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// How much of a text image is looked at for PTX's `.version`.
const TEXT_LOOK: usize = 4096;

impl ImageFormat {
    /// The container `image` is, from its first bytes; never reads past the first 4 KiB.
    ///
    /// ```
    /// use offload_core::hal::ImageFormat;
    /// let mut elf = vec![0u8; 64];
    /// elf[..4].copy_from_slice(b"\x7fELF");
    /// elf[4] = 2; // 64-bit
    /// elf[5] = 1; // little-endian
    /// elf[18..20].copy_from_slice(&190u16.to_le_bytes());
    /// assert_eq!(ImageFormat::of(&elf), ImageFormat::Elf { machine: 190 });
    /// ```
    pub fn of(image: &[u8]) -> ImageFormat {
        let word = image.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok());
        if let Some(word) = word {
            if u32::from_ne_bytes(word) == SPIRV_MAGIC {
                return ImageFormat::Spirv;
            }
            if u32::from_ne_bytes(word).swap_bytes() == SPIRV_MAGIC {
                return ImageFormat::SpirvSwapped;
            }
            if u32::from_le_bytes(word) == FATBIN_MAGIC {
                return ImageFormat::Fatbin;
            }
        }
        if image.starts_with(b"\x7fELF") {
            return match image.get(18..20) {
                Some(&[lo, hi]) if image.len() >= 64 && image[4] == 2 && image[5] == 1 => {
                    ImageFormat::Elf {
                        machine: u16::from_le_bytes([lo, hi]),
                    }
                }
                _ => ImageFormat::Unknown,
            };
        }
        if image.starts_with(b"__CLANG_OFFLOAD_BUNDLE__") {
            return ImageFormat::OffloadBundle;
        }
        if image.starts_with(REFERENCE_MAGIC.as_bytes()) {
            return ImageFormat::Reference;
        }
        if first_directive_is_version(&image[..image.len().min(TEXT_LOOK)]) {
            return ImageFormat::Ptx;
        }
        ImageFormat::Unknown
    }
}

/// Whether `text`, past whitespace and `//` and `/* */` comments, starts with `.version`
/// (PTX requires it to be the first directive).
fn first_directive_is_version(mut text: &[u8]) -> bool {
    loop {
        text = text.trim_ascii_start();
        if let Some(rest) = text.strip_prefix(b"//") {
            match rest.iter().position(|&b| b == b'\n') {
                Some(end) => text = &rest[end..],
                None => return false,
            }
        } else if let Some(rest) = text.strip_prefix(b"/*") {
            match rest.windows(2).position(|w| w == b"*/") {
                Some(end) => text = &rest[end + 2..],
                None => return false,
            }
        } else {
            return text.starts_with(b".version");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_container_is_told_apart() {
        let mut spirv = Vec::new();
        spirv.extend_from_slice(&SPIRV_MAGIC.to_ne_bytes());
        assert_eq!(ImageFormat::of(&spirv), ImageFormat::Spirv);
        assert_eq!(
            ImageFormat::of(&SPIRV_MAGIC.swap_bytes().to_ne_bytes()),
            ImageFormat::SpirvSwapped
        );
        assert_eq!(
            ImageFormat::of(&FATBIN_MAGIC.to_le_bytes()),
            ImageFormat::Fatbin
        );
        assert_eq!(
            ImageFormat::of(b"/* a */ // b\n  .version 7.8"),
            ImageFormat::Ptx
        );
        assert_eq!(ImageFormat::of(b"// only a comment"), ImageFormat::Unknown);
        assert_eq!(ImageFormat::of(b".target sm_80"), ImageFormat::Unknown);
        assert_eq!(
            ImageFormat::of(b"__CLANG_OFFLOAD_BUNDLE__\0"),
            ImageFormat::OffloadBundle
        );
        // A truncated or 32-bit ELF is no ELF this runtime loads.
        assert_eq!(ImageFormat::of(b"\x7fELF\x02\x01"), ImageFormat::Unknown);
        assert_eq!(ImageFormat::of(b""), ImageFormat::Unknown);
    }
}
