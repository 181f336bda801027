//! Text that came from other users (file names, process names, labels)
//! rendered safely on root's terminal: control characters are escaped the
//! way `ls` and GNU quoting do it, so a name cannot move the cursor, change
//! colours, set the window title or hide itself. And counted nouns
//! ([`count`]): "1 file", "2 files", never "1 files".

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

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
pub(crate) fn escape_os(s: &OsStr) -> String {
    escape_control(&s.to_string_lossy()).into_owned()
}

/// A path for display: invalid UTF-8 replaced (U+FFFD), then
/// [`escape_control`].
pub fn escape_path(p: &Path) -> String {
    escape_os(p.as_os_str())
}

/// The raw bytes of `p` when they are not UTF-8 (for a report's
/// `path_bytes` field next to the lossy `path`); `None` for a UTF-8 path.
pub(crate) fn non_utf8_bytes(p: &Path) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    p.to_str()
        .is_none()
        .then(|| p.as_os_str().as_bytes().to_vec())
}

/// Serializes a path as a string, lossily (U+FFFD for bytes that are not
/// UTF-8) instead of failing: `#[serde(serialize_with = "lossy_path")]`.
/// A report that must keep the exact name has a `path_bytes` field too.
pub(crate) fn lossy_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// [`lossy_path`] for an optional path.
pub(crate) fn lossy_opt_path<S: serde::Serializer, P: AsRef<Path>>(
    p: &Option<P>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&*p.as_ref().to_string_lossy()),
        None => s.serialize_none(),
    }
}

/// [`lossy_path`] for a list of paths.
pub(crate) fn lossy_paths<S: serde::Serializer, P: AsRef<Path>>(
    v: &[P],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for p in v {
        seq.serialize_element(&*p.as_ref().to_string_lossy())?;
    }
    seq.end()
}

/// `n` and the noun in its number: `count(1, "file", "files")` is
/// "1 file", `count(2, ...)` "2 files".
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An argv shown to the user: words quoted only where a shell would need it,
/// so it can be copied and run as printed. THE shell quoting of btrfs-lab:
/// every suggested command (findings' `command`, hints, plans) is built as
/// an argv and printed by it, text and JSON alike (issue 48). A word with
/// a control character (a newline in a mount point) is ANSI-C quoted
/// (`$'a\nb'`, bash, zsh, ksh, busybox sh): nothing raw reaches the
/// terminal and the shell reads back the very bytes.
pub fn display_argv<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|a| quote_word(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote_word(w: &str) -> String {
    let safe = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        w.to_owned()
    } else if w.chars().any(char::is_control) {
        let mut out = String::from("$'");
        for c in w.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => {
                    let mut b = [0; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('\'');
        out
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// `text` filled to `width` columns at word boundaries (a word longer than
/// the line stands alone): the first line begins with `first`, the others
/// with `rest`; every line ends with a newline; columns are characters.
/// The words of `text` as [`fill`] places them: a figure and its unit
/// (`2000 MB/s`, `12 s`, `3.5 GiB`, `40 %`) stay together on one line.
fn unbroken_words(text: &str) -> Vec<String> {
    const UNITS: &[&str] = &[
        "B", "KiB", "MiB", "GiB", "TiB", "kB", "KB", "MB", "GB", "TB", "B/s", "KiB/s", "MiB/s",
        "GiB/s", "kB/s", "MB/s", "GB/s", "s", "ms", "µs", "ns", "min", "h", "%", "×",
    ];
    let figure = |w: &str| {
        !w.is_empty()
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars()
                .all(|c| c.is_ascii_digit() || ".,~≈(–-".contains(c))
    };
    let mut words: Vec<String> = Vec::new();
    for w in text.split_whitespace() {
        let unit = w.trim_end_matches([',', ';', ':', '.', ')']);
        match words.last_mut() {
            Some(prev) if figure(prev) && UNITS.contains(&unit) => {
                prev.push(' ');
                prev.push_str(w);
            }
            _ => words.push(w.to_owned()),
        }
    }
    words
}

/// The filling under [`wrap`]: output calls [`wrap`], [`wrap_hanging`] or
/// [`wrap_message`], which fill to the output's [`width`].
pub fn fill(text: &str, width: usize, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut lead = first;
    let mut line = String::new();
    let mut col = 0;
    for word in unbroken_words(text) {
        let word = word.as_str();
        let len = word.chars().count();
        if !line.is_empty() && lead.chars().count() + col + 1 + len > width {
            out.push_str(lead);
            out.push_str(&line);
            out.push('\n');
            lead = rest;
            line.clear();
            col = 0;
        }
        if !line.is_empty() {
            line.push(' ');
            col += 1;
        }
        line.push_str(word);
        col += len;
    }
    if !line.is_empty() {
        out.push_str(lead);
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The columns text output is filled to when neither `COLUMNS` nor a
/// terminal says otherwise (a pipe, a file, a cron mail).
pub const DEFAULT_WIDTH: usize = 80;

/// The narrowest and widest fill: a narrower terminal still gets whole
/// words per line, and prose on a wide one stays readable (a table may
/// be wider; it is not filled).
const MIN_WIDTH: usize = 40;
const MAX_TERMINAL_WIDTH: usize = 100;

static WIDTH: AtomicUsize = AtomicUsize::new(DEFAULT_WIDTH);

/// The columns text output fills ([`wrap`], errors, notes, plans): set
/// once at start-up by [`set_width`] ([`width_for`]), 80 until then.
pub fn width() -> usize {
    WIDTH.load(Ordering::Relaxed)
}

/// Sets [`width`] (the binary does, from [`width_for`]).
pub fn set_width(columns: usize) {
    WIDTH.store(columns.max(MIN_WIDTH), Ordering::Relaxed);
}

/// The fill width of a run: `COLUMNS` when it is set to a number (the
/// user's or a test's explicit choice, taken as it is), else the width of
/// the terminal stdout is (at most 100 columns: prose wider than that is
/// hard to read), else 80.
pub fn width_for(columns_env: Option<&str>, terminal_columns: Option<usize>) -> usize {
    if let Some(n) = columns_env.and_then(|c| c.trim().parse::<usize>().ok())
        && n > 0
    {
        return n.max(MIN_WIDTH);
    }
    match terminal_columns {
        Some(n) if n > 0 => n.clamp(MIN_WIDTH, MAX_TERMINAL_WIDTH),
        _ => DEFAULT_WIDTH,
    }
}

/// `text` filled to the output's [`width`], every line indented by
/// `indent`. THE wrapping of btrfs-lab's text output: no caller picks a
/// width of its own.
pub fn wrap(text: &str, indent: &str) -> String {
    fill(text, width(), indent, indent)
}

/// `text` filled to the output's [`width`]: the first line begins with
/// `first`, the others with `rest` (a label and its hanging indent).
pub fn wrap_hanging(text: &str, first: &str, rest: &str) -> String {
    fill(text, width(), first, rest)
}

/// How a command line shown to be copied starts. Such a line is never
/// filled: a line break pasted into a shell would run two commands.
pub const COMMAND_STARTS: &[&str] = &["btrfs-lab ", "btrfs ", "mount ", "umount "];

/// A message of one or more paragraphs (split at `\n`) filled to the
/// output's [`width`]: the first line begins with `first`, every other
/// line is indented by `rest`; no newline at the end. Errors, warnings,
/// notes and hints are printed through it.
pub fn wrap_message(first: &str, text: &str, rest: &str) -> String {
    let mut out = String::new();
    for (i, para) in text.split('\n').enumerate() {
        let lead = if i == 0 { first } else { rest };
        let filled = fill(para, width(), lead, rest);
        if filled.is_empty() {
            out.push_str(lead.trim_end());
            out.push('\n');
        } else {
            out.push_str(&filled);
        }
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

/// Text made to fit the output's [`width`], keeping its layout: the
/// output layer's last word on every text report, status and note (so a
/// line no renderer filled still fits), and what renderers call on their
/// finished lines: a line that fits stays as it is (table columns keep their
/// alignment); a longer one is filled under its own indent, its bullet
/// (`- `, `1. `) or its label (`RISK: `, `next: `) hanging. A line that is
/// one word, or a command shown to be copied (it starts with the program:
/// a copied line break would run two commands), stays whole.
pub fn fit(text: &str) -> String {
    fit_to(text, width())
}

/// [`fit`] at `width` columns.
fn fit_to(text: &str, width: usize) -> String {
    const COMMANDS: &[&str] = COMMAND_STARTS;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches('\n');
        let body = bare.trim_start();
        if bare.chars().count() <= width
            || !body.contains(char::is_whitespace)
            || COMMANDS.iter().any(|c| body.starts_with(c))
        {
            out.push_str(line);
            continue;
        }
        let indent = &bare[..bare.len() - body.len()];
        let first_word = body.split_whitespace().next().unwrap_or("");
        let hang = if first_word == "-"
            || first_word == "*"
            || (first_word.ends_with('.')
                && first_word[..first_word.len() - 1].parse::<u32>().is_ok())
            || (first_word.ends_with(':') && first_word.len() <= 12)
        {
            first_word.chars().count() + 1
        } else {
            2
        };
        let mut rest = format!("{indent}{}", " ".repeat(hang));
        // A label aligned with those of the lines around it (`filesystem
        // btrfs on ...`): its value is filled in its column.
        let mut lead = indent.to_owned();
        let mut body = body;
        // (A table's row: the value of its last column, when that column
        // starts in the line's first half.)
        let mut column_at = None;
        let mut from = 0;
        while let Some(gap) = body[from..].find("  ").map(|g| g + from) {
            let value_at = body.len() - body[gap..].trim_start().len();
            let column = indent.chars().count() + body[..value_at].chars().count();
            if column > width / 2 {
                break;
            }
            column_at = Some((value_at, column));
            from = value_at;
        }
        if let Some((value_at, column)) = column_at
            && value_at < body.len()
        {
            lead = format!("{indent}{}", &body[..value_at]);
            rest = " ".repeat(column);
            body = &body[value_at..];
        }
        let indent = lead.as_str();
        // A command after a colon goes on a line of its own, whole.
        let command = COMMANDS
            .iter()
            .filter_map(|c| body.find(&format!(": {c}")))
            .min();
        match command {
            Some(at) => {
                out.push_str(&fill(&body[..=at], width, indent, &rest));
                out.push_str(&format!("{rest}{}\n", &body[at + 2..]));
            }
            None => out.push_str(&fill(body, width, indent, &rest)),
        }
        if !line.ends_with('\n') {
            out.truncate(out.trim_end_matches('\n').len());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_keeps_what_fits_and_hangs_the_rest_under_its_bullet_or_label() {
        let text = "  data    single → raid0   1GiB\n  - a note that is much longer than forty columns wide\nRISK: data on raid0 is lost when any one device fails\n    btrfs balance start -dconvert=raid0,soft /a/long/mount/point\n";
        assert_eq!(
            fit_to(text, 40),
            "  data    single → raid0   1GiB\n  - a note that is much longer than\n    forty columns wide\nRISK: data on raid0 is lost when any one\n      device fails\n    btrfs balance start -dconvert=raid0,soft /a/long/mount/point\n"
        );
        assert_eq!(
            fit_to(
                "  next, to spread the data over all devices: btrfs-lab balance /a/long/mount\n",
                40
            ),
            "  next, to spread the data over all\n    devices:\n    btrfs-lab balance /a/long/mount\n"
        );
        assert_eq!(
            fit_to("  filesystem  btrfs on /dev/loop0, mounted at /a/b\n", 40),
            "  filesystem  btrfs on /dev/loop0,\n              mounted at /a/b\n"
        );
        assert_eq!(
            fit_to("  a.img   6MiB  holds data: --migrate copies it\n", 40),
            "  a.img   6MiB  holds data: --migrate\n                copies it\n"
        );
    }
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn the_width_is_columns_then_the_terminal_then_80() {
        assert_eq!(width_for(None, None), 80);
        assert_eq!(width_for(Some("120"), Some(60)), 120);
        assert_eq!(width_for(Some("junk"), Some(60)), 60);
        assert_eq!(width_for(None, Some(300)), 100);
        assert_eq!(width_for(None, Some(10)), 40);
        assert_eq!(width_for(Some("0"), None), 80);
    }

    #[test]
    fn a_message_hangs_under_its_label_paragraph_by_paragraph() {
        let m = fill("aaa bbb ccc", 13, "error: ", "  ");
        assert_eq!(m, "error: aaa\n  bbb ccc\n");
        // wrap_message keeps the message's own line breaks.
        let w = wrap_message("note: ", "one\ntwo", "  ");
        assert_eq!(w, "note: one\n  two");
    }

    #[test]
    fn a_line_too_wide_is_filled_under_its_indent_and_a_command_is_not() {
        let long = format!("  {}\n", "word ".repeat(30).trim_end());
        let fitted = fit(&long);
        assert!(fitted.lines().count() > 1);
        assert!(fitted.lines().all(|l| l.chars().count() <= 80));
        assert!(fitted.lines().skip(1).all(|l| l.starts_with("    word")));
        let command = format!("  btrfs-lab {}\n", "x ".repeat(50));
        assert_eq!(fit(&command), command);
        assert_eq!(fit("short\n"), "short\n");
    }

    #[test]
    fn a_figure_keeps_its_unit() {
        let f = fill("it takes about 0m01s at 2000 MB/s, or 12 s", 30, "", "");
        assert_eq!(f, "it takes about 0m01s at\n2000 MB/s, or 12 s\n");
        // A word that only looks like a unit after a word stays a word.
        assert_eq!(fill("plan B is fine", 80, "", ""), "plan B is fine\n");
    }

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
    fn paths_serialize_lossily_with_the_bytes_kept_apart() {
        #[derive(serde::Serialize)]
        struct R {
            #[serde(serialize_with = "lossy_path")]
            p: std::path::PathBuf,
            #[serde(serialize_with = "lossy_paths")]
            v: Vec<std::path::PathBuf>,
            #[serde(serialize_with = "lossy_opt_path")]
            o: Option<std::path::PathBuf>,
        }
        let bad = Path::new(OsStr::from_bytes(b"/d/a\xffb")).to_path_buf();
        let r = R {
            p: bad.clone(),
            v: vec![bad.clone(), "/ok".into()],
            o: Some(bad.clone()),
        };
        let lossy = "/d/a\u{fffd}b";
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"p": lossy, "v": [lossy, "/ok"], "o": lossy})
        );
        assert_eq!(non_utf8_bytes(&bad), Some(b"/d/a\xffb".to_vec()));
        assert_eq!(non_utf8_bytes(Path::new("/ok")), None);
    }

    #[test]
    fn os_and_path_are_lossy_then_escaped() {
        let s = OsStr::from_bytes(b"f\xff\x1b]0;t\x07");
        assert_eq!(escape_os(s), "f\u{fffd}\\e]0;t\\x07");
        assert_eq!(escape_path(Path::new(s)), "f\u{fffd}\\e]0;t\\x07");
    }
}
