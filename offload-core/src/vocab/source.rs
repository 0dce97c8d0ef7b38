//! Programs from source: the languages offload compiles, a [`Source`] (text and options),
//! and the [`CompilerId`] a device reports — everything that changes a compiler's output,
//! which the compile cache keys on.

use crate::sync::Arc;
use std::fmt;

/// A source language a backend may compile.
///
/// ```
/// assert_eq!(offload::Language::Wgsl.to_string(), "WGSL");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Language {
    /// WGSL, compiled to SPIR-V in process by naga (Vulkan).
    Wgsl,
    /// C, compiled to a shared object by the system C compiler (host).
    C,
    /// CUDA C++, compiled to PTX by nvrtc (CUDA).
    Cuda,
}

impl Language {
    /// Its name in messages and cache keys.
    ///
    /// ```
    /// assert_eq!(offload::Language::Cuda.name(), "CUDA");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Language::Wgsl => "WGSL",
            Language::C => "C",
            Language::Cuda => "CUDA",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Program source text in one language, with compiler options.
///
/// ```
/// use offload::{Language, Source};
/// let s = Source::c("/* ... */").option("-DN=4");
/// assert_eq!(s.language(), Language::C);
/// assert_eq!(s.options(), ["-DN=4"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    language: Language,
    text: Arc<str>,
    options: Vec<String>,
}

impl Source {
    /// Source in `language`.
    ///
    /// ```
    /// let s = offload::Source::new(offload::Language::Wgsl, "@compute @workgroup_size(1) fn main() {}");
    /// assert!(s.text().starts_with("@compute"));
    /// ```
    pub fn new(language: Language, text: impl Into<String>) -> Source {
        Source {
            language,
            text: Arc::from(text.into()),
            options: Vec::new(),
        }
    }

    /// WGSL source (Vulkan).
    ///
    /// ```
    /// assert_eq!(offload::Source::wgsl("").language(), offload::Language::Wgsl);
    /// ```
    pub fn wgsl(text: impl Into<String>) -> Source {
        Source::new(Language::Wgsl, text)
    }

    /// C source (host), with `offload_host.h` on the include path.
    ///
    /// ```
    /// assert_eq!(offload::Source::c("").language(), offload::Language::C);
    /// ```
    pub fn c(text: impl Into<String>) -> Source {
        Source::new(Language::C, text)
    }

    /// CUDA C++ source (CUDA, through nvrtc).
    ///
    /// ```
    /// assert_eq!(offload::Source::cuda("").language(), offload::Language::Cuda);
    /// ```
    pub fn cuda(text: impl Into<String>) -> Source {
        Source::new(Language::Cuda, text)
    }

    /// Adds a compiler option (passed as one argument: `-DN=4`, `-O3`, `--use_fast_math`).
    ///
    /// ```
    /// assert_eq!(offload::Source::c("").option("-O3").options().len(), 1);
    /// ```
    pub fn option(mut self, option: impl Into<String>) -> Source {
        self.options.push(option.into());
        self
    }

    /// The language.
    ///
    /// ```
    /// assert_eq!(offload::Source::c("x").language(), offload::Language::C);
    /// ```
    pub fn language(&self) -> Language {
        self.language
    }

    /// The text.
    ///
    /// ```
    /// assert_eq!(offload::Source::c("int x;").text(), "int x;");
    /// ```
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The compiler options, in order.
    ///
    /// ```
    /// assert!(offload::Source::c("").options().is_empty());
    /// ```
    pub fn options(&self) -> &[String] {
        &self.options
    }
}

/// What a device's compiler for one language is: everything that changes its output.
///
/// ```
/// let id = offload::CompilerId::new("naga 28.0", "spirv-1.3");
/// assert_eq!(id.target, "spirv-1.3");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CompilerId {
    /// The compiler and its version (`cc (Debian 12.2.0-14) 12.2.0`, `naga 28`, `nvrtc 12.4`).
    pub identity: String,
    /// What it compiles for (`x86_64-linux-gnu`, `spirv-1.3`, `compute_86`).
    pub target: String,
}

impl CompilerId {
    /// A compiler identity and target.
    ///
    /// ```
    /// let id = offload::CompilerId::new("cc 12", "x86_64-linux-gnu");
    /// assert_eq!(id.identity, "cc 12");
    /// ```
    pub fn new(identity: impl Into<String>, target: impl Into<String>) -> CompilerId {
        CompilerId {
            identity: identity.into(),
            target: target.into(),
        }
    }
}
