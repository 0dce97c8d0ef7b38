//! The one JSON string escaper of the workspace: the Chrome trace
//! ([`trace`](crate::trace)) and `offload-info --json` both write their string literals
//! with [`JsonStr`](crate::json::JsonStr). It owns nothing but the escaping; each writer
//! lays out its own document. Uses nothing of the crate.

use std::fmt::{self, Write as _};

/// A string as a JSON string literal (RFC 8259): quotes and backslashes escaped, the
/// control characters U+0000–U+001F escaped (`\n`, `\r`, `\t`, `\b`, `\f`, else `\u00XX`),
/// everything else — DEL and non-ASCII included — as it is (a `str` is valid UTF-8).
#[derive(Debug, Clone, Copy)]
pub struct JsonStr<'a>(pub &'a str);

impl fmt::Display for JsonStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\u{8}' => f.write_str("\\b")?,
                '\u{c}' => f.write_str("\\f")?,
                c if c < ' ' => write!(f, "\\u{:04x}", u32::from(c))?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

#[cfg(test)]
mod tests {
    use super::JsonStr;

    fn lit(s: &str) -> String {
        JsonStr(s).to_string()
    }

    #[test]
    fn quotes_backslashes_and_control_characters_are_escaped() {
        assert_eq!(lit(""), r#""""#);
        assert_eq!(lit("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(lit("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
        assert_eq!(lit("\u{0}\u{1}\u{1f}"), r#""\u0000\u0001\u001f""#);
        // DEL is no control character to JSON; a slash needs no escape.
        assert_eq!(lit("\u{7f}/"), "\"\u{7f}/\"");
    }

    #[test]
    fn non_ascii_is_written_as_it_is() {
        assert_eq!(lit("plain é"), "\"plain é\"");
        assert_eq!(lit("π ≈ 3 🚀"), "\"π ≈ 3 🚀\"");
        assert_eq!(lit("\u{2028}"), "\"\u{2028}\"");
    }
}
