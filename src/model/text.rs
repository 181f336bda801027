//! Text that came from other users (file names, process names, labels)
//! rendered safely on root's terminal: control characters are escaped the
//! way `ls` and GNU quoting do it, so a name cannot move the cursor, change
//! colours, set the window title or hide itself.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;

/// Escapes the control characters of `s` (C0, DEL and C1, and the Unicode
/// bidi overrides that reorder text): `\n`, `\t`, `\r`, `\e` (ESC); any
/// other C0 or DEL becomes `\xHH`, C1 and bidi characters `\u{HHHH}`. A
/// backslash is kept as it is. Borrowed when there is nothing to escape.
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !needs_escape(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// Whether `c` must not reach a terminal raw: C0 controls, DEL, C1
/// controls, and the bidirectional overrides and isolates (which make a
/// name display as another one).
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// An `OsStr` for display: invalid UTF-8 replaced (U+FFFD), then
/// [`escape_control`].
pub fn escape_os(s: &OsStr) -> String {
    escape_control(&s.to_string_lossy()).into_owned()
}

/// A path for display: invalid UTF-8 replaced (U+FFFD), then
/// [`escape_control`].
pub fn escape_path(p: &Path) -> String {
    escape_os(p.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(escape_control("a b/c\\d é"), Cow::Borrowed(_)));
    }

    #[test]
    fn controls_are_escaped() {
        assert_eq!(escape_control("a\x1b[31mb"), "a\\e[31mb");
        assert_eq!(escape_control("x\ny\tz\r"), "x\\ny\\tz\\r");
        assert_eq!(escape_control("\x07\x7f"), "\\x07\\x7f");
        assert_eq!(escape_control("\u{9b}31m"), "\\u{009b}31m");
        assert_eq!(escape_control("ab\u{202e}cd"), "ab\\u{202e}cd");
    }

    #[test]
    fn os_and_path_are_lossy_then_escaped() {
        let s = OsStr::from_bytes(b"f\xff\x1b]0;t\x07");
        assert_eq!(escape_os(s), "f\u{fffd}\\e]0;t\\x07");
        assert_eq!(escape_path(Path::new(s)), "f\u{fffd}\\e]0;t\\x07");
    }
}
