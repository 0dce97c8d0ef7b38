//! PTX text: the header, `.entry` declarations with their parameters, and module-scope
//! `.global`/`.const` variables.

use super::{Entry, Global, ImageKind, Inspected, Param, excerpt, sm};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `.name`
    Directive,
    /// A name, an opcode (`ld.global.u32`), a register (`%r1`), a label.
    Ident,
    /// Starts with a digit: `8`, `0x1f`, `8.4`, `0f3F800000`.
    Number,
    /// `"..."`
    Str,
    /// Any other single character.
    Punct(char),
}

#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    kind: Kind,
    text: &'a str,
    line: u32,
}

impl Tok<'_> {
    fn is(&self, kind: Kind, text: &str) -> bool {
        self.kind == kind && self.text == text
    }

    fn is_punct(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }
}

/// A streaming tokenizer (a large PTX is tens of megabytes: no token vector).
struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    line: u32,
    peeked: Option<Tok<'a>>,
}

fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c == b'%'
}

fn ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Self {
        Lexer {
            src,
            pos: 0,
            line: 1,
            peeked: None,
        }
    }

    fn next(&mut self) -> Result<Option<Tok<'a>>, String> {
        match self.peeked.take() {
            Some(t) => Ok(Some(t)),
            None => self.scan(),
        }
    }

    fn peek(&mut self) -> Result<Option<Tok<'a>>, String> {
        if self.peeked.is_none() {
            self.peeked = self.scan()?;
        }
        Ok(self.peeked)
    }

    /// The next token, or `Err(what)` at the end of the text.
    fn expect_some(&mut self, what: &str) -> Result<Tok<'a>, String> {
        self.next()?
            .ok_or_else(|| format!("PTX ends inside {what}"))
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.src.as_bytes().get(at).copied()
    }

    fn scan(&mut self) -> Result<Option<Tok<'a>>, String> {
        // Whitespace and comments.
        loop {
            let Some(c) = self.byte(self.pos) else {
                return Ok(None);
            };
            match c {
                b'\n' => {
                    self.line = self.line.saturating_add(1);
                    self.pos += 1;
                }
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => self.pos += 1,
                b'/' if self.byte(self.pos + 1) == Some(b'/') => {
                    while let Some(c) = self.byte(self.pos) {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                b'/' if self.byte(self.pos + 1) == Some(b'*') => {
                    let opened = self.line;
                    self.pos += 2;
                    loop {
                        match self.byte(self.pos) {
                            None => {
                                return Err(format!(
                                    "PTX comment opened at line {opened} is never closed"
                                ));
                            }
                            Some(b'*') if self.byte(self.pos + 1) == Some(b'/') => {
                                self.pos += 2;
                                break;
                            }
                            Some(b'\n') => {
                                self.line = self.line.saturating_add(1);
                                self.pos += 1;
                            }
                            Some(_) => self.pos += 1,
                        }
                    }
                }
                _ => break,
            }
        }
        let start = self.pos;
        let line = self.line;
        let Some(c) = self.byte(start) else {
            return Ok(None);
        };
        let kind = if c == b'"' {
            self.pos += 1;
            loop {
                match self.byte(self.pos) {
                    None | Some(b'\n') => {
                        return Err(format!("PTX string at line {line} is never closed"));
                    }
                    Some(b'\\') => self.pos += 2,
                    Some(b'"') => {
                        self.pos += 1;
                        break;
                    }
                    Some(_) => self.pos += 1,
                }
            }
            Kind::Str
        } else if c == 0 {
            return Err(format!(
                "PTX has a NUL byte at line {line} (offset {start}) before its end; the \
                 driver stops reading there"
            ));
        } else if c == b'.'
            && self
                .byte(start + 1)
                .is_some_and(|c| ident_start(c) && c != b'%')
        {
            self.pos += 1;
            while self.byte(self.pos).is_some_and(ident_char) {
                self.pos += 1;
            }
            Kind::Directive
        } else if ident_start(c) {
            self.pos += 1;
            while self
                .byte(self.pos)
                .is_some_and(|c| ident_char(c) || c == b'.')
            {
                self.pos += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() {
            while self
                .byte(self.pos)
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
            {
                self.pos += 1;
            }
            Kind::Number
        } else {
            let ch = self
                .src
                .get(start..)
                .and_then(|s| s.chars().next())
                .unwrap_or('\u{fffd}');
            self.pos += ch.len_utf8().max(1);
            Kind::Punct(ch)
        };
        let text = self.src.get(start..self.pos).unwrap_or("");
        Ok(Some(Tok { kind, text, line }))
    }
}

/// A PTX integer literal: decimal, `0x` hex, `0b` binary, `0` octal, optional `U`.
fn int(text: &str) -> Option<u64> {
    let t = text.strip_suffix(['U', 'u']).unwrap_or(text);
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        u64::from_str_radix(b, 2).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        t.get(1..).and_then(|o| u64::from_str_radix(o, 8).ok())
    } else {
        t.parse().ok()
    }
}

/// The size of a PTX fundamental type, and whether it is `.f64`.
fn type_size(directive: &str) -> Option<(u32, bool)> {
    Some(match directive {
        ".u8" | ".s8" | ".b8" => (1, false),
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => (2, false),
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => (4, false),
        ".u64" | ".s64" | ".b64" => (8, false),
        ".f64" => (8, true),
        ".b128" => (16, false),
        _ => return None,
    })
}

fn opaque_type(directive: &str) -> bool {
    matches!(directive, ".texref" | ".samplerref" | ".surfref")
}

fn version(tok: &Tok<'_>) -> Result<(u32, u32), String> {
    let bad = || {
        format!(
            "PTX .version '{}' at line {} is not MAJOR.MINOR",
            excerpt(tok.text, 16),
            tok.line
        )
    };
    if tok.kind != Kind::Number {
        return Err(bad());
    }
    let (major, minor) = tok.text.split_once('.').ok_or_else(bad)?;
    Ok((
        major.parse().map_err(|_| bad())?,
        minor.parse().map_err(|_| bad())?,
    ))
}

/// How a PTX target may be JIT-compiled for other devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// `sm_XY`: any device of X.Y or newer.
    Plain,
    /// `sm_XYa`: architecture-specific features, exactly X.Y.
    Arch,
    /// `sm_XYf`: family-specific features, major X with minor ≥ Y.
    Family,
}

fn target(tok: &Tok<'_>) -> Result<((u32, u32), Variant), String> {
    let bad = || {
        format!(
            "PTX .target '{}' at line {} is not sm_NN",
            excerpt(tok.text, 16),
            tok.line
        )
    };
    if tok.kind != Kind::Ident {
        return Err(bad());
    }
    let rest = tok.text.strip_prefix("sm_").ok_or_else(bad)?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(digits);
    let number: u32 = number.parse().map_err(|_| bad())?;
    if number < 10 || !suffix.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(bad());
    }
    let variant = match suffix {
        "a" => Variant::Arch,
        "f" => Variant::Family,
        // Plain, or a suffix newer than this module: the driver decides.
        _ => Variant::Plain,
    };
    Ok((super::cc_of(number), variant))
}

/// The first PTX ISA version that knows `target` (NVIDIA's PTX ISA release notes, "PTX
/// ISA version" per target); `None` for a target older than sm_50 or newer than this table,
/// where the driver decides. A PTX file whose `.version` is older than its target's is
/// refused by the driver's JIT (measured: `.version 7.0` with `.target sm_90` on an H200).
/// The `a`/`f` variants are held to their plain target's version only: a refusal here that
/// the driver would accept is worse than leaving a doubtful case to the driver.
fn first_isa_of(target: (u32, u32)) -> Option<(u32, u32)> {
    Some(match target {
        (5, 0) => (4, 0),
        (5, 2) => (4, 1),
        (5, 3) => (4, 2),
        (6, 0..=2) => (5, 0),
        (7, 0) => (6, 0),
        (7, 2) => (6, 1),
        (7, 5) => (6, 3),
        (8, 0) => (7, 0),
        (8, 6) => (7, 1),
        (8, 7) => (7, 4),
        (8, 9) | (9, 0) => (7, 8),
        (10, 0) | (10, 1) => (8, 6),
        (10, 3) => (8, 8),
        (11, 0) => (9, 0),
        (12, 0) => (8, 7),
        (12, 1) => (8, 8),
        _ => return None,
    })
}

pub(super) fn inspect(bytes: &[u8], device: (u32, u32)) -> Result<Inspected, String> {
    // The driver reads PTX up to its NUL; trailing NULs (the caller's, a fatbin's
    // padding) are not part of the text.
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    let body = bytes.get(..end).unwrap_or_default();
    if body.is_empty() {
        return Err("not a CUDA image: it holds only NUL bytes".to_owned());
    }
    let text = std::str::from_utf8(body).map_err(|e| {
        let at = e.valid_up_to();
        format!(
            "not a CUDA image: neither a cubin (ELF), a fatbin nor PTX text (byte {:#04x} at \
             offset {at} is not UTF-8)",
            body.get(at).copied().unwrap_or(0)
        )
    })?;
    Parser::new(text).run(device)
}

struct Parser<'a> {
    lx: Lexer<'a>,
    version: Option<(u32, u32)>,
    target: Option<((u32, u32), Variant, String)>,
    entries: Vec<Entry>,
    globals: Vec<Global>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            lx: Lexer::new(text),
            version: None,
            target: None,
            entries: Vec::new(),
            globals: Vec::new(),
        }
    }

    fn run(mut self, device: (u32, u32)) -> Result<Inspected, String> {
        match self.lx.next() {
            Ok(Some(t)) if t.is(Kind::Directive, ".version") => {
                let v = self.lx.expect_some("the .version directive")?;
                self.version = Some(version(&v)?);
            }
            Ok(Some(t)) => {
                return Err(format!(
                    "not a CUDA image: text that does not begin with a PTX .version \
                     directive (it begins with '{}')",
                    excerpt(t.text, 24)
                ));
            }
            Ok(None) => {
                return Err(
                    "not a CUDA image: text without a PTX .version directive (only \
                            whitespace and comments)"
                        .to_owned(),
                );
            }
            Err(e) => return Err(e),
        }
        let mut braces: Vec<u32> = Vec::new();
        let mut parens: u32 = 0;
        let mut external = false;
        while let Some(t) = self.lx.next()? {
            match t.kind {
                Kind::Punct('{') => braces.push(t.line),
                Kind::Punct('}') => {
                    if braces.pop().is_none() {
                        return Err(format!("PTX line {}: '}}' without a matching '{{'", t.line));
                    }
                    if braces.is_empty() {
                        external = false;
                    }
                }
                _ if !braces.is_empty() => {}
                Kind::Punct('(') => parens = parens.saturating_add(1),
                Kind::Punct(')') => {
                    parens = parens.checked_sub(1).ok_or_else(|| {
                        format!("PTX line {}: ')' without a matching '('", t.line)
                    })?;
                }
                _ if parens > 0 => {}
                Kind::Punct(';') => external = false,
                Kind::Directive => match t.text {
                    ".version" => {
                        return Err(format!("PTX has a second .version at line {}", t.line));
                    }
                    ".target" => self.target_directive(&t)?,
                    ".address_size" => {
                        let n = self.lx.expect_some("the .address_size directive")?;
                        if n.kind != Kind::Number || n.text != "64" {
                            return Err(format!(
                                "PTX .address_size is {}; offload needs 64-bit PTX",
                                excerpt(n.text, 16)
                            ));
                        }
                    }
                    ".extern" => external = true,
                    ".entry" => {
                        self.require_header(&t, "an .entry")?;
                        self.entry()?;
                        external = false;
                    }
                    ".func" => {
                        self.require_header(&t, "a .func")?;
                        external = false;
                    }
                    ".global" | ".const" => {
                        self.require_header(&t, "a variable")?;
                        self.variable(t.text == ".const", external)?;
                        external = false;
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        if let Some(line) = braces.last() {
            return Err(format!(
                "PTX ends inside the {{ }} block opened at line {line}"
            ));
        }
        if parens > 0 {
            return Err("PTX ends inside a ( ) list".to_owned());
        }
        let Some((arch, variant, name)) = self.target else {
            return Err("PTX has no .target directive".to_owned());
        };
        if self.entries.is_empty() {
            return Err("PTX has no .entry (no kernels)".to_owned());
        }
        let runs = match variant {
            Variant::Plain => arch <= device,
            Variant::Arch => arch == device,
            Variant::Family => super::cubin_runs_on(arch, device),
        };
        if let (Some(version), Some(first)) = (self.version, first_isa_of(arch))
            && version < first
        {
            return Err(format!(
                "PTX .version {}.{} is older than its .target {name}, which needs PTX ISA {}.{} \
                 or later (the driver's JIT refuses it): compile it for a newer PTX version",
                version.0, version.1, first.0, first.1
            ));
        }
        if !runs {
            let why = match variant {
                Variant::Plain => String::new(),
                Variant::Arch => format!(" ({name} runs only on {} devices)", sm(arch)),
                Variant::Family => format!(
                    " ({name} runs only on devices of major version {} from {})",
                    arch.0,
                    sm(arch)
                ),
            };
            return Err(format!(
                "PTX targets {name} but the device is {}{why}",
                sm(device)
            ));
        }
        Ok(Inspected {
            kind: ImageKind::Ptx,
            entries: self.entries,
            globals: self.globals,
            arch: Some(arch),
            ptx_version: self.version,
        })
    }

    fn require_header(&self, at: &Tok<'_>, what: &str) -> Result<(), String> {
        if self.target.is_none() {
            return Err(format!(
                "PTX declares {what} at line {} before its .target",
                at.line
            ));
        }
        Ok(())
    }

    /// `.target sm_86[, texmode_independent, debug, ...]`
    fn target_directive(&mut self, at: &Tok<'_>) -> Result<(), String> {
        if self.target.is_some() {
            return Err(format!("PTX has a second .target at line {}", at.line));
        }
        let t = self.lx.expect_some("the .target directive")?;
        let (arch, variant) = target(&t)?;
        self.target = Some((arch, variant, t.text.to_owned()));
        // The other items of the list (texmode_*, debug, map_f64_to_f32).
        while self.lx.peek()?.is_some_and(|t| t.is_punct(',')) {
            self.lx.next()?;
            self.lx.expect_some("the .target directive")?;
        }
        Ok(())
    }

    /// After `.entry`: `name [( .param ..., ... )]`.
    fn entry(&mut self) -> Result<(), String> {
        let name = self.lx.expect_some("an .entry")?;
        if name.kind != Kind::Ident {
            return Err(format!(
                "PTX line {}: '{}' after .entry is not a kernel name",
                name.line,
                excerpt(name.text, 24)
            ));
        }
        if self.entries.iter().any(|e| e.name == name.text) {
            return Err(format!("PTX declares .entry {} twice", name.text));
        }
        let mut params = Vec::new();
        if self.lx.peek()?.is_some_and(|t| t.is_punct('(')) {
            self.lx.next()?;
            let within = format!("the parameter list of .entry {}", name.text);
            if self.lx.peek()?.is_some_and(|t| t.is_punct(')')) {
                self.lx.next()?;
            } else {
                loop {
                    let mut toks = Vec::new();
                    let last = loop {
                        let t = self.lx.expect_some(&within)?;
                        if t.is_punct(',') || t.is_punct(')') {
                            break t;
                        }
                        if t.is_punct('(') || t.is_punct('{') || t.is_punct(';') {
                            return Err(format!(
                                "PTX line {}: unexpected '{}' in {within}",
                                t.line, t.text
                            ));
                        }
                        toks.push(t);
                    };
                    params.push(param(name.text, params.len(), &toks, last.line)?);
                    if last.is_punct(')') {
                        break;
                    }
                }
            }
        }
        self.entries.push(Entry {
            name: name.text.to_owned(),
            params,
        });
        Ok(())
    }

    /// After `.global` / `.const` at module scope, through its `;`.
    fn variable(&mut self, constant: bool, external: bool) -> Result<(), String> {
        let within = "a variable declaration";
        // The old banked form, `.const[2]`.
        if self.lx.peek()?.is_some_and(|t| t.is_punct('[')) {
            self.lx.next()?;
            let n = self.lx.expect_some(within)?;
            let close = self.lx.expect_some(within)?;
            if n.kind != Kind::Number || !close.is_punct(']') {
                return Err(format!("PTX line {}: bad constant bank", n.line));
            }
        }
        let mut element: Option<u32> = None;
        let mut vector: u32 = 1;
        let mut known = true;
        loop {
            let Some(t) = self.lx.peek()? else {
                return Err(format!("PTX ends inside {within}"));
            };
            if t.kind != Kind::Directive {
                break;
            }
            self.lx.next()?;
            match t.text {
                ".align" => {
                    let n = self.lx.expect_some(within)?;
                    let ok =
                        n.kind == Kind::Number && int(n.text).is_some_and(|a| a.is_power_of_two());
                    if !ok {
                        return Err(format!(
                            "PTX line {}: .align {} is not a power of two",
                            n.line,
                            excerpt(n.text, 16)
                        ));
                    }
                }
                ".v2" => vector = 2,
                ".v4" => vector = 4,
                ".v8" => vector = 8,
                ".attribute" => self.skip_group(within)?,
                other => match type_size(other) {
                    Some((size, _)) => element = Some(size),
                    // Opaque (.texref ...) or a type this module does not know: the
                    // variable is left out.
                    None => known = false,
                },
            }
        }
        let element = element.filter(|_| known);
        // Declarators: `name[dims] [= init]`, comma-separated, up to `;`.
        loop {
            let name = self.lx.expect_some(within)?;
            if name.kind != Kind::Ident {
                return Err(format!(
                    "PTX line {}: expected a variable name, found '{}'",
                    name.line,
                    excerpt(name.text, 24)
                ));
            }
            let mut count: Option<u64> = Some(1);
            let mut unsized_dims = 0u32;
            let mut dims = 0u32;
            while self.lx.peek()?.is_some_and(|t| t.is_punct('[')) {
                self.lx.next()?;
                dims += 1;
                let t = self.lx.expect_some(within)?;
                if t.is_punct(']') {
                    unsized_dims += 1;
                    continue;
                }
                let n = int(t.text)
                    .filter(|_| t.kind == Kind::Number)
                    .ok_or_else(|| {
                        format!(
                            "PTX line {}: array size '{}' of {} is not a number",
                            t.line,
                            excerpt(t.text, 16),
                            name.text
                        )
                    })?;
                count = count.and_then(|c| c.checked_mul(n));
                let close = self.lx.expect_some(within)?;
                if !close.is_punct(']') {
                    return Err(format!(
                        "PTX line {}: expected ']' after the array size of {}",
                        close.line, name.text
                    ));
                }
            }
            let mut initialised = None;
            if self.lx.peek()?.is_some_and(|t| t.is_punct('=')) {
                self.lx.next()?;
                initialised = Some(self.skip_initialiser(within)?);
            }
            // An unsized one-dimensional array takes its length from its initialiser.
            if unsized_dims > 0 {
                count = match (unsized_dims, dims, initialised) {
                    (1, 1, Some(Some(n))) => Some(n),
                    _ => None,
                };
            }
            let size = element
                .zip(count)
                .and_then(|(e, c)| c.checked_mul(u64::from(e) * u64::from(vector)));
            let wanted = !external
                && !name.text.starts_with('$')
                && !self.globals.iter().any(|g| g.name == name.text);
            if let Some(size) = size.filter(|_| wanted) {
                self.globals.push(Global {
                    name: name.text.to_owned(),
                    size,
                    constant,
                });
            }
            let t = self.lx.expect_some(within)?;
            if t.is_punct(';') {
                return Ok(());
            }
            if !t.is_punct(',') {
                return Err(format!(
                    "PTX line {}: expected ',' or ';' after variable {}, found '{}'",
                    t.line,
                    name.text,
                    excerpt(t.text, 24)
                ));
            }
        }
    }

    /// `( ... )` after `.attribute`.
    fn skip_group(&mut self, within: &str) -> Result<(), String> {
        let open = self.lx.expect_some(within)?;
        if !open.is_punct('(') {
            return Err(format!(
                "PTX line {}: expected '(' after .attribute",
                open.line
            ));
        }
        let mut depth = 1u32;
        while depth > 0 {
            let t = self.lx.expect_some(within)?;
            if t.is_punct('(') {
                depth += 1;
            } else if t.is_punct(')') {
                depth -= 1;
            }
        }
        Ok(())
    }

    /// Skips an initialiser up to (not including) the `,` or `;` that ends it; says how
    /// many elements a `{ ... }` initialiser has at its top level.
    fn skip_initialiser(&mut self, within: &str) -> Result<Option<u64>, String> {
        let braced = self.lx.peek()?.is_some_and(|t| t.is_punct('{'));
        let mut depth = 0u32;
        let mut elements = 0u64;
        let mut empty = true;
        loop {
            let Some(t) = self.lx.peek()? else {
                return Err(format!("PTX ends inside {within}"));
            };
            match t.kind {
                Kind::Punct(',' | ';') if depth == 0 => break,
                Kind::Punct('{' | '(') => depth += 1,
                Kind::Punct('}' | ')') => {
                    depth = depth.checked_sub(1).ok_or_else(|| {
                        format!(
                            "PTX line {}: unbalanced '{}' in an initialiser",
                            t.line, t.text
                        )
                    })?;
                }
                Kind::Punct(',') if depth == 1 && braced => elements += 1,
                _ if depth == 1 && braced => empty = false,
                _ => {}
            }
            if depth >= 2 && braced {
                empty = false;
            }
            self.lx.next()?;
        }
        Ok(braced.then_some(if empty { 0 } else { elements + 1 }))
    }
}

/// One entry parameter from its tokens (after the list's `(` or `,`).
fn param(entry: &str, index: usize, toks: &[Tok<'_>], line: u32) -> Result<Param, String> {
    let at = |what: String| format!("PTX .entry {entry}: parameter {index} {what}");
    let mut it = toks.iter().peekable();
    match it.next() {
        Some(t) if t.is(Kind::Directive, ".param") => {}
        Some(t) => {
            return Err(at(format!(
                "at line {} is not a .param (it begins with '{}')",
                t.line,
                excerpt(t.text, 24)
            )));
        }
        None => return Err(at(format!("at line {line} is empty"))),
    }
    let mut align: Option<u32> = None;
    let mut ty: Option<(u32, bool, &str)> = None;
    let mut ptr = false;
    let mut name: Option<&str> = None;
    let mut count: u64 = 1;
    while let Some(t) = it.next() {
        if name.is_some() {
            // Only `[N]` may follow the name.
            if !t.is_punct('[') {
                return Err(at(format!("has '{}' after its name", excerpt(t.text, 24))));
            }
            let n = it
                .next()
                .ok_or_else(|| at("ends inside '[ ]'".to_owned()))?;
            let close = it.next();
            let value = int(n.text)
                .filter(|&v| {
                    v > 0 && n.kind == Kind::Number && close.is_some_and(|c| c.is_punct(']'))
                })
                .ok_or_else(|| at(format!("has a bad array size '{}'", excerpt(n.text, 16))))?;
            count = count
                .checked_mul(value)
                .ok_or_else(|| at("is too large".to_owned()))?;
            continue;
        }
        match t.kind {
            Kind::Directive => match t.text {
                ".align" => {
                    let n = it
                        .next()
                        .ok_or_else(|| at("ends after .align".to_owned()))?;
                    let a = int(n.text)
                        .filter(|a| n.kind == Kind::Number && a.is_power_of_two())
                        .and_then(|a| u32::try_from(a).ok())
                        .ok_or_else(|| {
                            at(format!(
                                "has .align {}, not a power of two",
                                excerpt(n.text, 16)
                            ))
                        })?;
                    // After .ptr, .align is the pointee's alignment.
                    if !ptr {
                        align = Some(a);
                    }
                }
                ".ptr" => {
                    if ty.is_none() {
                        return Err(at("has .ptr before its type".to_owned()));
                    }
                    ptr = true;
                }
                ".global" | ".const" | ".shared" | ".local" if ptr => {}
                other if opaque_type(other) => {
                    return Err(at(format!(
                        "has the opaque type {other}, which offload cannot pass"
                    )));
                }
                other => {
                    let Some((size, f64)) = type_size(other) else {
                        return Err(at(format!(
                            "has '{other}', which is not a parameter type offload knows"
                        )));
                    };
                    if ty.is_some() {
                        return Err(at(format!("has a second type {other}")));
                    }
                    ty = Some((size, f64, other));
                }
            },
            Kind::Ident => name = Some(t.text),
            _ => {
                return Err(at(format!(
                    "at line {} has an unexpected '{}'",
                    t.line,
                    excerpt(t.text, 24)
                )));
            }
        }
    }
    let Some((element, f64, type_name)) = ty else {
        return Err(at("has no type".to_owned()));
    };
    let Some(name) = name else {
        return Err(at("has no name".to_owned()));
    };
    let size = count
        .checked_mul(u64::from(element))
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| at(format!("({name}) is too large")))?;
    if ptr && size != 8 {
        return Err(at(format!(
            "({name}) is a {type_name} .ptr of {size} bytes; pointers are 8 bytes"
        )));
    }
    let pointer = if ptr {
        Some(true)
    } else if size == 8 && !f64 {
        None
    } else {
        Some(false)
    };
    use offload_core::ScalarType as T;
    let ty = match (count, pointer, type_name) {
        (1, Some(false), ".u8") => Some(T::U8),
        (1, Some(false), ".s8") => Some(T::I8),
        (1, Some(false), ".u16") => Some(T::U16),
        (1, Some(false), ".s16") => Some(T::I16),
        (1, Some(false), ".u32") => Some(T::U32),
        (1, Some(false), ".s32") => Some(T::I32),
        (1, Some(false), ".f32") => Some(T::F32),
        (1, Some(false), ".f64") => Some(T::F64),
        _ => None,
    };
    Ok(Param {
        size,
        align: align.unwrap_or(element),
        pointer,
        ty,
        name: name.to_owned(),
    })
}
