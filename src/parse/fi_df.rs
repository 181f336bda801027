//! The output of `btrfs filesystem df`, captured anywhere: every format
//! btrfs-progs ever printed (0.19's profile-less `Data: total=34.01GB` rows
//! with binary `KB/MB/GB`, 3.12–3.16's `unknown, single`, IEC and SI human
//! units, `-b` raw bytes, `-k/-m/-g/-t`, `zone_unusable=`, the `WARNING:`
//! lines for multiple profiles, `-v` details) and both dialects of the JSON of
//! `btrfs --format json filesystem df` (numbers quoted before 6.5, bare
//! after).
//!
//! The default reader is lenient: it reads what people paste — email quotes
//! (`> `, `>> `, `> > `), indentation, prompts and command lines, `# ` and
//! `echo "..."` wrappers, code fences, rows collapsed onto one line,
//! quoted-printable `=3D`, CRLF, markdown emphasis — and says what it skipped
//! (line number and why). A damaged row (a lost first letter, a row split
//! over two lines) is never guessed: it is named in a warning and left out.
//! [`ParseOptions::strict`] accepts only exact btrfs-progs output.
//!
//! Units are decided per document, with a stated rule (see [`UnitReading`]).
//! Never panics, whatever the input.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::space::{BgProfile, BgType, SpaceRecord};
use crate::report::units::rounding_error;

/// What the input was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// Text lines (`Data, single: total=..., used=...`).
    Text,
    /// `btrfs --format json filesystem df`.
    Json,
}

/// How the reader treats what is around the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// Accept only exact btrfs-progs output: any other line is an error.
    pub strict: bool,
}

/// How the sizes of a document were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnitBasis {
    /// Bytes only (`-b`, JSON): exact.
    Bytes,
    /// `KiB/MiB/GiB/...`: powers of 1024, as the suffix says.
    Iec,
    /// `kB/MB/GB/...` from `--si`/`-H`: powers of 1000.
    Si,
    /// `KB/MB/GB/...` of btrfs-progs before 3.x: powers of 1024 (its old
    /// `pretty_sizes` divided by 1024 and printed "GB").
    LegacyBinary,
    /// `MB/GB/...` with nothing to tell old binary from `--si`: read as
    /// binary, each error bound widened to cover the SI reading too.
    Ambiguous,
}

/// The unit rule applied to one document, stated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnitReading {
    /// The reading taken.
    pub basis: UnitBasis,
    /// Why, in a sentence (which markers were seen).
    pub rule: String,
}

/// A line the lenient reader did not take rows from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedLine {
    /// 1-based line number in the input.
    pub line: usize,
    /// The line (shortened).
    pub text: String,
    /// Why it was skipped.
    pub reason: String,
    /// True when it looked like (part of) a row: a damaged paste, whose
    /// figures are missing from the records.
    pub damaged: bool,
}

/// A parsed capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParsedDf {
    /// Text or JSON.
    pub format: InputFormat,
    /// One record per row or JSON entry, in input order.
    pub records: Vec<SpaceRecord>,
    /// The multiple-profile warnings found in the text (`Data: single, raid0`).
    pub warnings: Vec<String>,
    /// Lines skipped, with why (lenient reader only).
    pub skipped: Vec<SkippedLine>,
    /// What was undone around the rows (`email quote marks`, `quoted-printable`, ...).
    pub unwrapped: Vec<String>,
    /// How the sizes were read.
    pub units: UnitReading,
}

/// Where and why the input did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line (text) or entry (JSON) number; 0 for the whole input.
    pub line: usize,
    /// What was wrong and what was expected.
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

const EXPECTED: &str = "expected 'TYPE, PROFILE: total=SIZE, used=SIZE'";

/// Parses a capture of `btrfs filesystem df` (text or JSON), leniently.
pub fn parse_fi_df(input: &str) -> Result<ParsedDf, ParseError> {
    parse_fi_df_with(input, ParseOptions::default())
}

/// Parses a capture of `btrfs filesystem df` with the given options.
pub fn parse_fi_df_with(input: &str, opts: ParseOptions) -> Result<ParsedDf, ParseError> {
    let trimmed = input.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with('{') {
        return parse_json(trimmed);
    }
    if !opts.strict && input.contains("\"filesystem-df\"") {
        return parse_wrapped_json(input);
    }
    parse_text(input, opts)
}

// ---------------------------------------------------------------------------
// Text.

/// A size as printed, before the document's unit rule is applied.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RawSize {
    value: f64,
    /// Integer digits only: exact bytes.
    integer: Option<u64>,
    suffix: Suffix,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suffix {
    /// No suffix (`104857600`, or old progs' `0.00`).
    None,
    /// `B`.
    Bytes,
    /// `KiB` .. `EiB`: 1024^n.
    Iec(u32),
    /// `kB`: 1000 (only `--si` prints it).
    SiKilo,
    /// `KB`: only btrfs-progs before 3.x printed it (1024).
    OldKilo,
    /// `MB` .. `EB`: 1000^n or 1024^n, decided per document.
    Decimal(u32),
}

fn suffix_of(s: &str) -> Option<Suffix> {
    const IEC: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    const DEC: [&str; 5] = ["MB", "GB", "TB", "PB", "EB"];
    match s {
        "" => return Some(Suffix::None),
        "B" => return Some(Suffix::Bytes),
        "kB" => return Some(Suffix::SiKilo),
        "KB" => return Some(Suffix::OldKilo),
        _ => {}
    }
    if let Some(i) = IEC.iter().position(|u| *u == s) {
        return Some(Suffix::Iec(i as u32 + 1));
    }
    DEC.iter()
        .position(|u| *u == s)
        .map(|i| Suffix::Decimal(i as u32 + 2))
}

#[derive(Debug, Clone)]
struct RawRow {
    line: usize,
    bg_type: BgType,
    profile: BgProfile,
    profileless: bool,
    total: RawSize,
    used: RawSize,
    zone: Option<RawSize>,
}

/// One logical line: its 1-based number in the input and its text.
struct Logical {
    line: usize,
    text: String,
}

/// Undoes quoted-printable (`=3D`, soft line breaks) when the input has
/// `=3D`, keeping each logical line's first input line number.
fn decode_lines(input: &str, strict: bool, unwrapped: &mut Vec<String>) -> Vec<Logical> {
    let qp = !strict && input.contains("=3D");
    let mut out: Vec<Logical> = Vec::new();
    let mut pending: Option<Logical> = None;
    for (i, raw) in input.lines().enumerate() {
        let line = raw.trim_end_matches('\r');
        if !qp {
            out.push(Logical {
                line: i + 1,
                text: line.to_owned(),
            });
            continue;
        }
        // A soft break: the next line's text (without its quote marks)
        // continues this one.
        let cont = match pending.take() {
            Some(mut p) => {
                p.text.push_str(strip_quotes(line).0);
                p
            }
            None => Logical {
                line: i + 1,
                text: line.to_owned(),
            },
        };
        if cont.text.ends_with('=') {
            let mut c = cont;
            c.text.pop();
            pending = Some(c);
        } else {
            out.push(cont);
        }
    }
    if let Some(p) = pending {
        out.push(p);
    }
    if qp {
        unwrapped.push("quoted-printable (=3D, soft line breaks) decoded".to_owned());
        for l in &mut out {
            l.text = l.text.replace("=3D", "=").replace("=20", " ");
        }
    }
    out
}

/// Strips email quote marks of any depth (`> `, `>> `, `> > `) and the
/// indentation around them; returns the rest and whether any were found.
pub(crate) fn strip_quotes(line: &str) -> (&str, bool) {
    let mut rest = line.trim_start();
    let mut quoted = false;
    while let Some(r) = rest.strip_prefix('>') {
        quoted = true;
        rest = r.trim_start();
    }
    (rest, quoted)
}

const TYPE_NAMES: [(&str, BgType); 6] = [
    ("Data+Metadata", BgType::DataMetadata),
    ("GlobalReserve", BgType::GlobalReserve),
    ("Metadata", BgType::Metadata),
    ("System", BgType::System),
    ("Data", BgType::Data),
    ("unknown", BgType::Unknown),
];

/// A row's head found at some byte offset: `Type[, PROFILE]:` then
/// `total=`; returns the type, the profile text (None: profile-less), and
/// the offset just past the colon.
fn row_head(s: &str, at: usize) -> Option<(BgType, Option<&str>, usize)> {
    let rest = &s[at..];
    if at > 0 {
        let prev = s[..at].chars().next_back()?;
        if prev.is_alphanumeric() || prev == '+' {
            return None;
        }
    }
    let (name, bg_type) = TYPE_NAMES.iter().find(|(n, _)| {
        rest.get(..n.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(n))
    })?;
    let mut pos = at + name.len();
    let after = &s[pos..];
    let trimmed = after.trim_start_matches([' ', '\t']);
    pos += after.len() - trimmed.len();
    let mut profile = None;
    let after_profile = if let Some(r) = trimmed.strip_prefix(',') {
        let r2 = r.trim_start_matches([' ', '\t']);
        let word_len = r2
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(r2.len());
        if word_len == 0 {
            return None;
        }
        profile = Some(&r2[..word_len]);
        let r3 = &r2[word_len..];
        let r3t = r3.trim_start_matches([' ', '\t']);
        pos += trimmed.len() - r3t.len();
        r3t
    } else {
        trimmed
    };
    let after_colon = after_profile.strip_prefix(':')?;
    pos += 1;
    let body = after_colon.trim_start_matches([' ', '\t']);
    if !body.starts_with("total=") {
        return None;
    }
    Some((*bg_type, profile, pos))
}

/// Every row head in a line, in order.
fn row_heads(s: &str) -> Vec<(usize, BgType, Option<&str>, usize)> {
    let mut out = Vec::new();
    let mut next = 0;
    for (at, _) in s.char_indices() {
        if at < next {
            continue;
        }
        if let Some((t, p, end)) = row_head(s, at) {
            out.push((at, t, p, end));
            next = end;
        }
    }
    out
}

/// `$ `, `# btrfs fi df /`, `user@host:~$ ...`, fences: what a skipped line is.
pub(crate) fn classify_noise(text: &str) -> &'static str {
    let t = text.trim();
    if t.starts_with("```") || t.starts_with("~~~") || t.starts_with("}}}") || t.starts_with("{{") {
        return "a code fence or markup";
    }
    if t.contains("btrfs") && (t.contains(" df") || t.contains(" fi") || t.contains("filesystem")) {
        return "the command line";
    }
    if t.starts_with('$')
        || t.ends_with('$')
        || t.ends_with('#')
        || t.ends_with('~')
        || (t.contains('@') && (t.contains("$ ") || t.contains("# ") || t.contains(":~")))
    {
        return "a shell prompt";
    }
    "not a `btrfs filesystem df` row"
}

/// Text around rows that carries nothing: quote marks, comment marks,
/// emphasis, bullets, `echo "` wrappers.
fn is_wrapper(s: &str) -> bool {
    let t = s.trim();
    let t = t.strip_prefix("echo").map_or(t, str::trim_start);
    t.chars().all(|c| {
        matches!(
            c,
            '#' | '*' | '`' | '"' | '\'' | '-' | '|' | ';' | '>' | ' ' | '\t'
        )
    })
}

fn parse_text(input: &str, opts: ParseOptions) -> Result<ParsedDf, ParseError> {
    let strict = opts.strict;
    let mut unwrapped = Vec::new();
    let lines = decode_lines(input, strict, &mut unwrapped);
    let mut rows: Vec<RawRow> = Vec::new();
    let mut warnings = Vec::new();
    let mut skipped: Vec<SkippedLine> = Vec::new();
    let mut saw_quotes = false;
    let mut saw_emphasis = false;
    let fail = |line: usize, message: String| ParseError { line, message };
    for l in &lines {
        let n = l.line;
        let (text, quoted): (String, bool) = if strict {
            (l.text.clone(), false)
        } else {
            let (rest, q) = strip_quotes(&l.text);
            if rest.starts_with("```") && row_heads(rest).is_empty() {
                skipped.push(SkippedLine {
                    line: n,
                    text: shorten(rest.trim()),
                    reason: classify_noise(rest).to_owned(),
                    damaged: false,
                });
                continue;
            }
            let mut t = rest.to_owned();
            if t.contains("**") || t.contains('`') {
                let before = t.len();
                t = t.replace("**", "").replace('`', "");
                saw_emphasis |= t.len() != before && !row_heads(&t).is_empty();
            }
            (t, q)
        };
        saw_quotes |= quoted;
        if text.trim().is_empty() || is_verbose_detail(&text) {
            continue;
        }
        if let Some(w) = text.trim_start().strip_prefix("WARNING:") {
            if let Some(detail) = profile_warning(w) {
                warnings.push(detail);
            }
            continue;
        }
        let heads = row_heads(&text);
        if heads.is_empty() {
            let looks_like_row = text.contains("total=") || text.contains("used=");
            if strict {
                return Err(fail(n, strict_line_error(&text)));
            }
            skipped.push(SkippedLine {
                line: n,
                text: shorten(text.trim()),
                reason: if looks_like_row {
                    damaged_reason(&text)
                } else {
                    classify_noise(&text).to_owned()
                },
                damaged: looks_like_row,
            });
            continue;
        }
        let first = heads[0].0;
        if first > 0 {
            let prefix = &text[..first];
            if strict {
                return Err(fail(n, format!("{EXPECTED}, found '{}'", shorten(&text))));
            }
            if !is_wrapper(prefix) {
                skipped.push(SkippedLine {
                    line: n,
                    text: shorten(prefix.trim()),
                    reason: format!(
                        "text before the row: {} (rows on this line were read)",
                        classify_noise(prefix)
                    ),
                    damaged: false,
                });
            }
        }
        for (k, &(_, bg_type, profile, body_start)) in heads.iter().enumerate() {
            let end = heads.get(k + 1).map_or(text.len(), |h| h.0);
            let body = &text[body_start..end];
            let profile_value = match profile {
                None => BgProfile::Known(crate::model::profile::Profile::Single),
                Some(p) => match BgProfile::from_progs_name(p) {
                    Some(v) => v,
                    None => {
                        let message = format!("unknown profile '{}'", shorten(p));
                        if strict {
                            return Err(fail(n, message));
                        }
                        skipped.push(SkippedLine {
                            line: n,
                            text: shorten(text.trim()),
                            reason: format!("{message}: row not read"),
                            damaged: true,
                        });
                        continue;
                    }
                },
            };
            match parse_fields(body, strict) {
                Ok((total, used, zone, trailing)) => {
                    if let Some(tail) = trailing {
                        if strict {
                            return Err(fail(
                                n,
                                format!("unexpected text after the row: '{}'", shorten(&tail)),
                            ));
                        }
                        if !is_wrapper(&tail) {
                            skipped.push(SkippedLine {
                                line: n,
                                text: shorten(&tail),
                                reason: if TYPE_NAMES
                                    .iter()
                                    .any(|(t, _)| tail.trim().trim_end_matches(',').eq_ignore_ascii_case(t))
                                {
                                    "text after the row: the start of the next row? (a row split over two lines: that row is not read)".to_owned()
                                } else {
                                    "text after the row (the row was read)".to_owned()
                                },
                                damaged: TYPE_NAMES.iter().any(|(t, _)| tail.contains(t)),
                            });
                        }
                    }
                    rows.push(RawRow {
                        line: n,
                        bg_type,
                        profile: profile_value,
                        profileless: profile.is_none(),
                        total,
                        used,
                        zone,
                    });
                }
                Err(message) => {
                    if strict {
                        return Err(fail(n, message));
                    }
                    skipped.push(SkippedLine {
                        line: n,
                        text: shorten(text.trim()),
                        reason: format!("{message}: row not read"),
                        damaged: true,
                    });
                }
            }
        }
    }
    if saw_quotes {
        unwrapped.push("email quote marks ('> ')".to_owned());
    }
    if saw_emphasis {
        unwrapped.push("markdown emphasis and backticks".to_owned());
    }
    if rows.is_empty() {
        let why = skipped
            .iter()
            .find(|s| s.damaged)
            .map(|s| format!(" (line {}: {})", s.line, s.reason))
            .unwrap_or_default();
        return Err(ParseError {
            line: 0,
            message: format!("no 'btrfs filesystem df' rows found ({EXPECTED}){why}"),
        });
    }
    let units = unit_reading(&rows);
    let records = rows.iter().map(|r| to_record(r, units.basis)).collect();
    Ok(ParsedDf {
        format: InputFormat::Text,
        records,
        warnings,
        skipped,
        unwrapped,
        units,
    })
}

fn strict_line_error(text: &str) -> String {
    if text.contains("total=") {
        damaged_reason(text)
    } else {
        format!("{EXPECTED}, found '{}'", shorten(text))
    }
}

/// Why a line with `total=`/`used=` is not a row.
fn damaged_reason(text: &str) -> String {
    let head = text.split(':').next().unwrap_or("").trim();
    let kind = head.split(',').next().unwrap_or("").trim();
    if !text.contains(':') {
        return format!("looks like part of a row but has no 'TYPE, PROFILE:' head: {EXPECTED}");
    }
    if BgType::from_progs_name(kind).is_none() {
        let hint = TYPE_NAMES
            .iter()
            .find(|(n, _)| n.len() > 1 && n[1..].eq_ignore_ascii_case(kind))
            .map(|(n, _)| format!(" (a lost first letter of '{n}'?)"))
            .or_else(|| {
                BgProfile::from_progs_name(kind).map(|_| {
                    " (a profile without its type: a row split over two lines?)".to_owned()
                })
            })
            .unwrap_or_default();
        return format!(
            "unknown block group type '{}'{hint}: row not read",
            shorten(kind)
        );
    }
    format!("{EXPECTED}, found '{}'", shorten(text.trim()))
}

/// `total=..., used=...[, zone_unusable=...]` and whatever follows.
#[allow(clippy::type_complexity)]
fn parse_fields(
    body: &str,
    strict: bool,
) -> Result<(RawSize, RawSize, Option<RawSize>, Option<String>), String> {
    let mut total = None;
    let mut used = None;
    let mut zone = None;
    let mut trailing: Option<String> = None;
    let fields: Vec<&str> = body.split(',').collect();
    for (i, field) in fields.iter().enumerate() {
        let f = field.trim();
        if f.is_empty() {
            if i + 1 == fields.len() && i > 0 {
                // A trailing comma.
                trailing = Some(",".to_owned());
                continue;
            }
            return Err("an empty field (truncated line?)".to_owned());
        }
        let Some((key, value)) = f.split_once('=') else {
            // Not a field: what follows the row.
            let rest = fields[i..].join(",");
            trailing = Some(rest.trim().to_owned());
            break;
        };
        let value = value.trim();
        let (token, tail) = match value.split_once(char::is_whitespace) {
            Some((tok, tail)) => (tok, Some(tail.trim())),
            None => (value, None),
        };
        let (token, tail) = if token.ends_with('"') && !strict {
            (token.trim_end_matches('"'), tail.or(Some("\"")))
        } else {
            (token, tail)
        };
        if let Some(t) = tail.filter(|t| !t.is_empty()) {
            if strict {
                return Err(format!(
                    "expected ', ' after '{}' (missing comma?)",
                    shorten(token)
                ));
            }
            if t.contains('=') {
                return Err(format!(
                    "expected ', ' after '{}' (missing comma?)",
                    shorten(token)
                ));
            }
            let rest = std::iter::once(t)
                .chain(fields[i + 1..].iter().copied())
                .collect::<Vec<_>>()
                .join(",");
            trailing = Some(rest.trim().to_owned());
        }
        let parsed = parse_size(token)?;
        let slot = match key.trim() {
            "total" => &mut total,
            "used" => &mut used,
            "zone_unusable" => &mut zone,
            other => {
                return Err(format!(
                    "unknown field '{}' (expected total, used, zone_unusable)",
                    shorten(other)
                ));
            }
        };
        if slot.replace(parsed).is_some() {
            return Err(format!("field '{}' given twice", key.trim()));
        }
        if trailing.is_some() {
            break;
        }
    }
    match (total, used) {
        (Some(t), Some(u)) => Ok((t, u, zone, trailing)),
        (None, _) => Err("'total=' is missing".to_owned()),
        (_, None) => Err("'used=' is missing (truncated line?)".to_owned()),
    }
}

/// At most this many characters of an input line are quoted in a note or
/// an error (the input may be someone else's file: never a whole line).
pub(crate) const EXCERPT_CHARS: usize = 60;

/// A short, printable excerpt of input text for notes and errors: control
/// characters escaped ([`crate::report::text::escape_control`]), cut to [`EXCERPT_CHARS`]
/// characters of the input (`...` marks the cut).
pub fn excerpt(s: &str) -> String {
    let cut = s.chars().count() > EXCERPT_CHARS;
    let head: String = s.chars().take(EXCERPT_CHARS).collect();
    let mut out = crate::report::text::escape_control(&head).into_owned();
    if cut {
        out.push_str("...");
    }
    out
}

fn shorten(s: &str) -> String {
    excerpt(s)
}

/// A size as btrfs-progs prints it: raw bytes, or a number with decimals
/// and a unit (or none: old progs printed `0.00`).
fn parse_size(text: &str) -> Result<RawSize, String> {
    if text.is_empty() {
        return Err("a size is missing (truncated line?)".to_owned());
    }
    if text.chars().all(|c| c.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(|v| RawSize {
                value: v as f64,
                integer: Some(v),
                suffix: Suffix::None,
            })
            .map_err(|_| format!("'{}' does not fit in 64 bits", shorten(text)));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let suffix = suffix_of(suffix).ok_or_else(|| {
        format!(
            "unknown unit in '{}' (expected B, KiB, MiB, GiB, TiB, PiB, EiB, kB, KB, MB, GB, TB, PB or EB)",
            shorten(text)
        )
    })?;
    let valid = !number.is_empty()
        && number.chars().filter(|&c| c == '.').count() <= 1
        && !number.starts_with('.')
        && !number.ends_with('.');
    if !valid {
        return Err(format!("'{}' is not a size", shorten(text)));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{}' is not a size", shorten(text)))?;
    // The largest multiplier any reading could give: refuse what cannot fit.
    let biggest = match suffix {
        Suffix::None | Suffix::Bytes => 1.0,
        Suffix::Iec(p) => 1024f64.powi(p as i32),
        Suffix::SiKilo | Suffix::OldKilo => 1024.0,
        Suffix::Decimal(p) => 1024f64.powi(p as i32),
    };
    if !(value * biggest).is_finite() || value * biggest >= u64::MAX as f64 {
        return Err(format!("'{}' does not fit in 64 bits", shorten(text)));
    }
    let integer = number
        .parse::<u64>()
        .ok()
        .filter(|_| matches!(suffix, Suffix::None | Suffix::Bytes));
    Ok(RawSize {
        value,
        integer,
        suffix,
    })
}

/// The document's unit rule: old-format markers (profile-less rows, `KB`)
/// mean binary; `kB` or a `B` suffix mean SI for `MB/GB/...`; neither (or
/// both) is ambiguous: read as binary with bounds that cover SI too.
fn unit_reading(rows: &[RawRow]) -> UnitReading {
    let sizes: Vec<&RawSize> = rows
        .iter()
        .flat_map(|r| [Some(&r.total), Some(&r.used), r.zone.as_ref()])
        .flatten()
        .collect();
    let has = |f: &dyn Fn(Suffix) -> bool| sizes.iter().any(|s| f(s.suffix));
    let has_decimal = has(&|s| matches!(s, Suffix::Decimal(_)));
    let has_old_kilo = has(&|s| s == Suffix::OldKilo);
    let has_si_kilo = has(&|s| s == Suffix::SiKilo);
    let has_b = has(&|s| s == Suffix::Bytes);
    let has_iec = has(&|s| matches!(s, Suffix::Iec(_)));
    let profileless = rows.iter().any(|r| r.profileless);
    let mut old = Vec::new();
    if profileless {
        old.push("profile-less rows ('Data: total=')");
    }
    if has_old_kilo {
        old.push("'KB'");
    }
    let mut si = Vec::new();
    if has_si_kilo {
        si.push("'kB'");
    }
    if has_b {
        si.push("a 'B' suffix");
    }
    // Rows only btrfs-progs of the IEC era prints (3.17 and later), where
    // MB/GB come only from --si.
    if rows.iter().any(|r| r.bg_type == BgType::GlobalReserve) {
        si.push("a GlobalReserve row (btrfs-progs 3.17+)");
    }
    // Profiles newer kernels brought (RAID1C3/RAID1C4: Linux 5.5); btrfs-progs
    // of the same version names them.
    if rows
        .iter()
        .any(|r| matches!(r.profile, BgProfile::Known(p) if p.min_kernel().is_some()))
    {
        si.push("RAID1C3/RAID1C4 (btrfs-progs 5.5+)");
    }
    if rows.iter().any(|r| r.zone.is_some()) {
        si.push("zone_unusable (zoned, btrfs-progs 5.12+)");
    }
    if !has_decimal && !has_old_kilo && !has_si_kilo {
        return if has_iec {
            UnitReading {
                basis: UnitBasis::Iec,
                rule: "IEC units (KiB, MiB, GiB: powers of 1024, as printed)".to_owned(),
            }
        } else {
            UnitReading {
                basis: UnitBasis::Bytes,
                rule: "bytes (-b): exact".to_owned(),
            }
        };
    }
    match (old.is_empty(), si.is_empty()) {
        (false, true) => UnitReading {
            basis: UnitBasis::LegacyBinary,
            rule: format!(
                "KB/MB/GB read as powers of 1024: old btrfs-progs (before 3.x) printed binary sizes with these suffixes, and this paste has its markers: {}",
                old.join(", ")
            ),
        },
        (true, false) => UnitReading {
            basis: UnitBasis::Si,
            rule: format!(
                "kB/MB/GB read as powers of 1000 (--si / -H output: {})",
                si.join(", ")
            ),
        },
        _ => UnitReading {
            basis: UnitBasis::Ambiguous,
            rule: format!(
                "ambiguous units: MB/GB could be old btrfs-progs' binary sizes or --si's decimal ones{}; read as binary (powers of 1024), each error bound covers the decimal reading too",
                if old.is_empty() {
                    String::new()
                } else {
                    format!(" (markers of both: {}; {})", old.join(", "), si.join(", "))
                }
            ),
        },
    }
}

/// Bytes and error bound of one size under the document's rule.
fn resolve(s: &RawSize, basis: UnitBasis) -> (u64, u64) {
    if let Some(v) = s.integer {
        return (v, 0);
    }
    let (unit, alt) = match s.suffix {
        Suffix::None | Suffix::Bytes => (1u64, None),
        Suffix::Iec(p) => (1024u64.pow(p), None),
        Suffix::SiKilo => (1000, None),
        Suffix::OldKilo => (1024, None),
        Suffix::Decimal(p) => match basis {
            UnitBasis::Si => (1000u64.pow(p), None),
            UnitBasis::Ambiguous => (1024u64.pow(p), Some(1000u64.pow(p))),
            _ => (1024u64.pow(p), None),
        },
    };
    let bytes = (s.value * unit as f64).round() as u64;
    let mut error = rounding_error(s.value, unit);
    if let Some(alt) = alt {
        let other = (s.value * alt as f64).round() as u64;
        error = error.max(bytes.abs_diff(other) + rounding_error(s.value, alt));
    }
    (bytes, error)
}

fn to_record(r: &RawRow, basis: UnitBasis) -> SpaceRecord {
    let (total, te) = resolve(&r.total, basis);
    let (used, ue) = resolve(&r.used, basis);
    let zone = r.zone.as_ref().map(|z| resolve(z, basis));
    let _ = r.line;
    SpaceRecord {
        bg_type: r.bg_type,
        profile: r.profile,
        total_bytes: total,
        used_bytes: used,
        zone_unusable_bytes: zone.map(|z| z.0),
        exact: te == 0 && ue == 0 && zone.is_none_or(|z| z.1 == 0),
        total_error_bytes: te,
        used_error_bytes: ue,
        zone_unusable_error_bytes: zone.map(|z| z.1),
    }
}

/// `btrfs -v filesystem df` adds per-type sysfs details: `Data:` then
/// indented `  bytes_used   1.00MiB` lines. They carry nothing the records
/// lack, so they are skipped.
fn is_verbose_detail(line: &str) -> bool {
    matches!(
        line.trim_end(),
        "Data:" | "Metadata:" | "Mixed:" | "System:"
    ) || (line.starts_with("  ")
        && !line.contains('=')
        && line.split_whitespace().next().is_some_and(|w| {
            w.chars().all(|c| c.is_ascii_lowercase() || c == '_') && w.contains('_')
        }))
}

/// `WARNING:    Data: single, raid0` → `Data: single, raid0`; the heading
/// warning (`Multiple block group profiles detected`) gives `None`.
fn profile_warning(text: &str) -> Option<String> {
    let t = text.trim();
    let (kind, rest) = t.split_once(':')?;
    BgType::from_progs_name(kind.trim())?;
    Some(format!("{}: {}", kind.trim(), excerpt(rest.trim())))
}

// ---------------------------------------------------------------------------
// JSON.

fn json_units() -> UnitReading {
    UnitReading {
        basis: UnitBasis::Bytes,
        rule: "JSON: bytes, exact".to_owned(),
    }
}

/// JSON pasted with quote marks or prompts around it.
fn parse_wrapped_json(input: &str) -> Result<ParsedDf, ParseError> {
    let mut unwrapped = Vec::new();
    let mut quoted = false;
    let body: Vec<&str> = input
        .lines()
        .map(|l| {
            let (rest, q) = strip_quotes(l.trim_end_matches('\r'));
            quoted |= q;
            rest
        })
        .collect();
    let joined = body.join("\n");
    let (Some(start), Some(end)) = (joined.find('{'), joined.rfind('}')) else {
        return Err(ParseError {
            line: 0,
            message: "JSON without a complete '{...}' object".to_owned(),
        });
    };
    if end < start {
        return Err(ParseError {
            line: 0,
            message: "JSON without a complete '{...}' object".to_owned(),
        });
    }
    let mut skipped = Vec::new();
    let before_lines = joined[..start].lines().count();
    for (i, l) in joined[..start].lines().enumerate() {
        if !l.trim().is_empty() {
            skipped.push(SkippedLine {
                line: i + 1,
                text: shorten(l.trim()),
                reason: format!("before the JSON: {}", classify_noise(l)),
                damaged: false,
            });
        }
    }
    let after_start = joined[..=end].lines().count();
    for (i, l) in joined[end + 1..].lines().enumerate().skip(1) {
        if !l.trim().is_empty() {
            skipped.push(SkippedLine {
                line: after_start + i,
                text: shorten(l.trim()),
                reason: format!("after the JSON: {}", classify_noise(l)),
                damaged: false,
            });
        }
    }
    let _ = before_lines;
    if quoted {
        unwrapped.push("email quote marks ('> ')".to_owned());
    }
    let mut parsed = parse_json(&joined[start..=end])?;
    parsed.skipped = skipped;
    parsed.unwrapped = unwrapped;
    Ok(parsed)
}

fn parse_json(input: &str) -> Result<ParsedDf, ParseError> {
    let whole = |message: String| ParseError { line: 0, message };
    let v: Value = serde_json::from_str(input).map_err(|e| ParseError {
        line: e.line(),
        message: format!("invalid JSON: {e}"),
    })?;
    if let Some(records) = v.get("records").and_then(Value::as_array) {
        return parse_own_json(records);
    }
    let entries = v
        .get("filesystem-df")
        .and_then(Value::as_array)
        .ok_or_else(|| whole("JSON without a 'filesystem-df' array (expected `btrfs --format json filesystem df`)".into()))?;
    let mut records = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = |message: String| ParseError {
            line: 0,
            message: format!("entry {}: {message}", i + 1),
        };
        let text = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| at(format!("'{k}' is missing or not a string")))
        };
        let number = |k: &str| -> Result<Option<u64>, ParseError> {
            match e.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| at(format!("'{k}' is not a byte count"))),
                Some(Value::String(s)) => s
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| at(format!("'{k}' is not a byte count: '{}'", shorten(s)))),
                Some(_) => Err(at(format!("'{k}' is not a byte count"))),
            }
        };
        let bg_type = BgType::from_progs_name(text("bg-type")?).ok_or_else(|| {
            at(format!(
                "unknown block group type '{}'",
                shorten(text("bg-type").unwrap_or(""))
            ))
        })?;
        let profile = BgProfile::from_progs_name(text("bg-profile")?).ok_or_else(|| {
            at(format!(
                "unknown profile '{}'",
                shorten(text("bg-profile").unwrap_or(""))
            ))
        })?;
        let total = number("total")?.ok_or_else(|| at("'total' is missing".into()))?;
        let used = number("used")?.ok_or_else(|| at("'used' is missing".into()))?;
        let zone = number("zone_unusable")?;
        records.push(SpaceRecord::exact(bg_type, profile, total, used, zone));
    }
    if records.is_empty() {
        return Err(whole("the 'filesystem-df' array is empty".into()));
    }
    Ok(ParsedDf {
        format: InputFormat::Json,
        records,
        warnings: Vec::new(),
        skipped: Vec::new(),
        unwrapped: Vec::new(),
        units: json_units(),
    })
}

/// btrfs-lab's own `df --json` records, so its output can be fed back.
fn parse_own_json(records: &[Value]) -> Result<ParsedDf, ParseError> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let at = |message: String| ParseError {
            line: 0,
            message: format!("record {}: {message}", i + 1),
        };
        let text = |k: &str| {
            r.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| at(format!("'{k}' is missing or not a string")))
        };
        let number = |k: &str| r.get(k).and_then(Value::as_u64);
        let bg_type =
            BgType::from_json_name(text("type")?).ok_or_else(|| at("unknown 'type'".into()))?;
        let profile = BgProfile::from_progs_name(text("profile")?)
            .ok_or_else(|| at("unknown 'profile'".into()))?;
        let total = number("total_bytes").ok_or_else(|| at("'total_bytes' is missing".into()))?;
        let used = number("used_bytes").ok_or_else(|| at("'used_bytes' is missing".into()))?;
        let mut rec =
            SpaceRecord::exact(bg_type, profile, total, used, number("zone_unusable_bytes"));
        if r.get("exact").and_then(Value::as_bool) == Some(false) {
            rec.exact = false;
            rec.total_error_bytes = number("total_error_bytes").unwrap_or(0);
            rec.used_error_bytes = number("used_error_bytes").unwrap_or(0);
            rec.zone_unusable_error_bytes = number("zone_unusable_error_bytes");
        }
        out.push(rec);
    }
    if out.is_empty() {
        return Err(ParseError {
            line: 0,
            message: "the 'records' array is empty".into(),
        });
    }
    Ok(ParsedDf {
        format: InputFormat::Json,
        records: out,
        warnings: Vec::new(),
        skipped: Vec::new(),
        unwrapped: Vec::new(),
        units: json_units(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::Profile;
    use proptest::prelude::*;

    // `btrfs filesystem df` (btrfs-progs 6.2) of a 3-device RAID0/RAID1
    // sandbox, in the forms it prints.
    const HUMAN: &str = "\
Data, RAID0: total=307.12MiB, used=100.00MiB
System, RAID1: total=8.00MiB, used=16.00KiB
Metadata, RAID1: total=256.00MiB, used=240.00KiB
GlobalReserve, single: total=5.50MiB, used=0.00B
";
    const RAW: &str = "\
Data, RAID0: total=322043904, used=104857600
System, RAID1: total=8388608, used=16384
Metadata, RAID1: total=268435456, used=245760
GlobalReserve, single: total=5767168, used=0
";
    const SI: &str = "\
Data, RAID0: total=322.04MB, used=104.86MB
System, RAID1: total=8.39MB, used=16.38kB
Metadata, RAID1: total=268.43MB, used=245.76kB
GlobalReserve, single: total=5.77MB, used=0.00B
";
    const KIB: &str = "\
Data, RAID0: total=314496.00KiB, used=102400.00KiB
System, RAID1: total=8192.00KiB, used=16.00KiB
Metadata, RAID1: total=262144.00KiB, used=240.00KiB
GlobalReserve, single: total=5632.00KiB, used=0.00KiB
";
    const JSON_62: &str = r#"{
  "__header": { "version": "1" },
  "filesystem-df": [
    { "bg-type": "Data", "bg-profile": "RAID0", "total": "322043904", "used": "104857600" },
    { "bg-type": "System", "bg-profile": "RAID1", "total": "8388608", "used": "16384" },
    { "bg-type": "Metadata", "bg-profile": "RAID1", "total": "268435456", "used": "245760" },
    { "bg-type": "GlobalReserve", "bg-profile": "single", "total": "5767168", "used": "0" }
  ]
}"#;

    /// Lines of someone else's file are quoted only as a short excerpt with
    /// control characters escaped: in the skipped lines, in `--strict`
    /// errors and in the error of input without rows.
    #[test]
    fn input_lines_are_quoted_short_and_escaped() {
        let long = format!("\u{1b}]0;title\u{7}\u{1b}[2J{}", "x".repeat(200));
        let text = format!("{long}\n{HUMAN}");
        let p = parse_fi_df(&text).unwrap();
        let s = &p.skipped[0];
        assert!(!s.text.chars().any(char::is_control), "{:?}", s.text);
        assert!(s.text.starts_with("\\e]0;title\\x07\\e[2J"), "{}", s.text);
        assert!(s.text.ends_with("..."), "{}", s.text);
        assert!(!s.text.contains(&"x".repeat(100)), "{}", s.text);
        let e = parse_fi_df_with(&text, ParseOptions { strict: true }).unwrap_err();
        let m = e.to_string();
        assert!(!m.chars().any(char::is_control), "{m:?}");
        assert!(!m.contains(&"x".repeat(100)), "{m}");
        let only_noise = format!("{long}\nData, single: total=1.00GiB\n");
        let m = parse_fi_df(&only_noise).unwrap_err().to_string();
        assert!(
            !m.chars().any(char::is_control) && !m.contains(&"x".repeat(100)),
            "{m}"
        );
        assert_eq!(excerpt("plain"), "plain");
        assert_eq!(excerpt(&"é".repeat(70)).chars().count(), EXCERPT_CHARS + 3);
    }

    #[test]
    fn raw_and_json_are_exact_and_equal() {
        let raw = parse_fi_df(RAW).unwrap();
        let json = parse_fi_df(JSON_62).unwrap();
        assert_eq!(raw.format, InputFormat::Text);
        assert_eq!(json.format, InputFormat::Json);
        assert_eq!(raw.records, json.records);
        assert!(raw.records.iter().all(|r| r.exact));
        assert_eq!(raw.records[0].bg_type, BgType::Data);
        assert_eq!(raw.records[0].profile, BgProfile::Known(Profile::Raid0));
        assert_eq!(raw.records[0].total_bytes, 322_043_904);
    }

    #[test]
    fn human_forms_agree_within_their_rounding() {
        let exact = parse_fi_df(RAW).unwrap().records;
        for text in [HUMAN, SI, KIB] {
            let parsed = parse_fi_df(text).unwrap().records;
            assert_eq!(parsed.len(), exact.len());
            for (p, e) in parsed.iter().zip(&exact) {
                assert_eq!((p.bg_type, p.profile), (e.bg_type, e.profile));
                assert!(
                    p.total_bytes.abs_diff(e.total_bytes) <= p.total_error_bytes,
                    "{text}: {p:?}"
                );
                assert!(
                    p.used_bytes.abs_diff(e.used_bytes) <= p.used_error_bytes,
                    "{text}: {p:?}"
                );
            }
        }
        let human = parse_fi_df(HUMAN).unwrap().records;
        assert!(!human[0].exact);
        assert_eq!(human[3].used_error_bytes, 0, "0.00B is exact");
    }

    #[test]
    fn conversions_zoned_mixed_and_warnings() {
        let text = "\
Data, single: total=1.00GiB, used=512.00MiB
Data, RAID0: total=2.00GiB, used=1.00GiB, zone_unusable=16.00MiB
Data+Metadata, DUP: total=8388608, used=0
unknown, UNKNOWN: total=0, used=0
WARNING: Multiple block group profiles detected, see 'man btrfs(5)'
WARNING:    Data: single, raid0
";
        let p = parse_fi_df(text).unwrap();
        assert_eq!(p.records.len(), 4);
        assert_eq!(p.records[1].zone_unusable_bytes, Some(16 << 20));
        assert_eq!(p.records[2].bg_type, BgType::DataMetadata);
        assert_eq!(p.records[3].profile, BgProfile::Unknown);
        assert_eq!(p.warnings, vec!["Data: single, raid0"]);
    }

    #[test]
    fn newer_json_with_numbers_and_zone_unusable() {
        let j = r#"{"__header":{"version":"1"},"filesystem-df":[{"bg-type":"Data","bg-profile":"single","total":8388608,"used":0,"zone_unusable":4096}]}"#;
        let p = parse_fi_df(j).unwrap();
        assert_eq!(p.records[0].zone_unusable_bytes, Some(4096));
    }

    #[test]
    fn reads_its_own_json_back() {
        let p = parse_fi_df(RAW).unwrap();
        let json = serde_json::json!({ "records": p.records }).to_string();
        assert_eq!(parse_fi_df(&json).unwrap().records, p.records);
        let h = parse_fi_df(HUMAN).unwrap();
        let json = serde_json::json!({ "records": h.records }).to_string();
        assert_eq!(parse_fi_df(&json).unwrap().records, h.records);
    }

    #[test]
    fn skips_verbose_details() {
        let text = "Data, single: total=8388608, used=0\nData:\n  bytes_used                        0.00B\n";
        assert_eq!(parse_fi_df(text).unwrap().records.len(), 1);
    }

    const STRICT: ParseOptions = ParseOptions { strict: true };

    #[test]
    fn errors_name_the_line_and_what_was_expected() {
        let cases = [
            ("garbage\n", "line 1: expected 'TYPE, PROFILE"),
            (
                "Data, single: total=1.00GiB\n",
                "line 1: 'used=' is missing",
            ),
            (
                "Data, single: total=1.00GiB, used=\n",
                "line 1: a size is missing",
            ),
            (
                "Data, single: total=1.00XiB, used=0\n",
                "line 1: unknown unit in '1.00XiB'",
            ),
            (
                "Data, raid7: total=1, used=0\n",
                "line 1: unknown profile 'raid7'",
            ),
            (
                "Dat, single: total=1, used=0\n",
                "line 1: unknown block group type 'Dat'",
            ),
            (
                "Data, single: total=99999999999999999999999, used=0\n",
                "does not fit in 64 bits",
            ),
            (
                "Data, single: total=99999999999.00EiB, used=0\n",
                "does not fit in 64 bits",
            ),
            (
                "Data, single: total=1, used=0\nData, DUP: total=1 used=0\n",
                "line 2: expected ', ' after '1' (missing comma?)",
            ),
            ("", "no 'btrfs filesystem df' rows found"),
            ("{\"x\": 1}", "without a 'filesystem-df' array"),
            (
                "{\"filesystem-df\": [{\"bg-type\": \"Data\"}]}",
                "entry 1: 'bg-profile' is missing",
            ),
            ("{\"filesystem-df\": [", "invalid JSON"),
        ];
        for (input, want) in cases {
            let e = parse_fi_df_with(input, STRICT).unwrap_err().to_string();
            assert!(e.contains(want), "{input:?}: got '{e}', want '{want}'");
        }
    }

    #[test]
    fn lenient_reads_what_people_wrap_around_it_and_says_what_it_skipped() {
        let text = "\
Hi, here is my output:\r
> > user@host:~$ sudo btrfs fi df /\r
> > Data, single: total=7.31GiB, used=4.54GiB\r
> >\r
>>\tSystem, DUP: total=8.00MiB, used=16.00KiB\r
> > # Metadata, DUP: total=558.88MiB, used=177.11MiB\r
echo \"GlobalReserve, single: total=16.00MiB, used=1.00MiB\"\r
```\r
";
        let p = parse_fi_df(text).unwrap();
        assert_eq!(p.records.len(), 4);
        assert_eq!(p.records[1].bg_type, BgType::System);
        assert_eq!(
            p.records[2].used_bytes,
            (177.11f64 * 1048576.0).round() as u64
        );
        assert_eq!(p.records[3].used_bytes, 1 << 20);
        let lines: Vec<(usize, &str)> = p
            .skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        assert_eq!(
            lines,
            vec![
                (1, "not a `btrfs filesystem df` row"),
                (2, "the command line"),
                (8, "a code fence or markup")
            ]
        );
        assert!(p.skipped.iter().all(|s| !s.damaged));
        assert!(p.unwrapped.iter().any(|u| u.contains("quote")));
        assert_eq!(p.units.basis, UnitBasis::Iec);
        // Strict refuses the same paste on its first line.
        let e = parse_fi_df_with(text, STRICT).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn collapsed_rows_and_prompt_on_one_line() {
        let text = "$ btrfs fi df / Data, single: total=1.00GiB, used=512.00MiB System, DUP: total=8.00MiB, used=16.00KiB Metadata, DUP: total=1.00GiB, used=100.00MiB\n";
        let p = parse_fi_df(text).unwrap();
        let kinds: Vec<BgType> = p.records.iter().map(|r| r.bg_type).collect();
        assert_eq!(kinds, [BgType::Data, BgType::System, BgType::Metadata]);
        assert_eq!(p.records[0].total_bytes, 1 << 30);
        assert_eq!(p.skipped.len(), 1);
        assert!(
            p.skipped[0].reason.contains("text before the row"),
            "{:?}",
            p.skipped
        );
    }

    #[test]
    fn old_format_is_binary_and_says_so() {
        // btrfs-progs 0.20-rc1 (a real paste, tests/fixtures/fi-df).
        let text = "\
Data: total=34.01GB, used=26.02GB
System, DUP: total=8.00MB, used=12.00KB
System: total=4.00MB, used=0.00
Metadata, DUP: total=3.00GB, used=2.04GB
Metadata: total=8.00MB, used=0.00
";
        let p = parse_fi_df(text).unwrap();
        assert_eq!(p.units.basis, UnitBasis::LegacyBinary);
        assert!(p.units.rule.contains("profile-less"), "{}", p.units.rule);
        let d = &p.records[0];
        assert_eq!(d.profile, BgProfile::Known(Profile::Single));
        // 34.01 × 2^30, never × 10^9.
        assert_eq!(d.total_bytes, (34.01f64 * 1073741824.0).round() as u64);
        assert!(d.total_error_bytes < 20_000_000, "{d:?}");
        assert_eq!(p.records[2].used_bytes, 0);
        assert_eq!(p.records[2].used_error_bytes, 0);
        assert_eq!(p.records[1].used_bytes, 12 * 1024);
        // Strict accepts it too: it is exact btrfs-progs output of its time.
        assert_eq!(parse_fi_df_with(text, STRICT).unwrap().records, p.records);
    }

    #[test]
    fn si_and_ambiguous_units() {
        let si = parse_fi_df(SI).unwrap();
        assert_eq!(si.units.basis, UnitBasis::Si);
        assert_eq!(si.records[0].total_bytes, 322_040_000);
        // `--si -g` of a modern btrfs-progs: no kB, no B, but a
        // GlobalReserve row, which old binary-GB versions never printed.
        let g = parse_fi_df("Data, single: total=1.07GB, used=0.54GB\nGlobalReserve, single: total=0.01GB, used=0.00GB\n").unwrap();
        assert_eq!(g.units.basis, UnitBasis::Si, "{}", g.units.rule);
        assert_eq!(g.records[0].total_bytes, 1_070_000_000);
        let amb = parse_fi_df("Data, single: total=1.00GB, used=512.00MB\n").unwrap();
        assert_eq!(amb.units.basis, UnitBasis::Ambiguous);
        let r = &amb.records[0];
        assert_eq!(r.total_bytes, 1 << 30);
        // The bound covers the decimal reading (10^9) as well.
        assert!(
            r.total_bytes - r.total_error_bytes <= 1_000_000_000,
            "{r:?}"
        );
        assert!(!r.exact);
    }

    #[test]
    fn quoted_printable_email_is_decoded() {
        let text = "> introduced a regression that raid profile of GlobalReserve will be outpu=\nt\n>   Data, single: total=3D5.02TiB, used=3D4.98TiB\n>   GlobalReserve, unknown: total=3D512.00MiB, used=3D0.00B\n";
        let p = parse_fi_df(text).unwrap();
        assert_eq!(p.records.len(), 2);
        assert_eq!(p.records[1].profile, BgProfile::Unknown);
        assert_eq!(p.records[1].total_bytes, 512 << 20);
        assert!(p.unwrapped.iter().any(|u| u.contains("quoted-printable")));
        assert_eq!(p.skipped[0].line, 1);
    }

    #[test]
    fn damaged_rows_are_named_never_guessed() {
        // A lost first letter.
        let p = parse_fi_df("ata, single: total=1.00GiB, used=1.00MiB\nMetadata, DUP: total=1.00GiB, used=1.00MiB\n").unwrap();
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.skipped[0].line, 1);
        assert!(p.skipped[0].damaged);
        assert!(
            p.skipped[0].reason.contains("lost first letter of 'Data'"),
            "{:?}",
            p.skipped
        );
        // A row split over two lines (a real paste).
        let p = parse_fi_df("Data, RAID0: total=3.71GB, used=256.00KB System,\nRAID1: total=8.00MB, used=8.00KB\nSystem: total=4.00MB, used=0.00\n").unwrap();
        assert_eq!(
            p.records.len(),
            2,
            "no made-up System RAID1 row: {:?}",
            p.records
        );
        let damaged: Vec<usize> = p
            .skipped
            .iter()
            .filter(|s| s.damaged)
            .map(|s| s.line)
            .collect();
        assert_eq!(damaged, [1, 2], "{:?}", p.skipped);
        assert!(
            p.skipped[1].reason.contains("split over two lines"),
            "{:?}",
            p.skipped
        );
        // Nothing left: an error that names the damage.
        let e = parse_fi_df("ata, single: total=1.00GiB, used=1.00MiB\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 1") && e.contains("lost first letter"),
            "{e}"
        );
    }

    #[test]
    fn json_with_a_prompt_and_quotes_around_it() {
        let text = format!(
            "$ btrfs --format json fi df /\n{}\n$ \n",
            JSON_62
                .lines()
                .map(|l| format!("> {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let p = parse_fi_df(&text).unwrap();
        assert_eq!(p.format, InputFormat::Json);
        assert_eq!(p.records, parse_fi_df(RAW).unwrap().records);
        assert_eq!(p.skipped[0].line, 1);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(s in "\\PC{0,200}") {
            let _ = parse_fi_df(&s);
            let _ = parse_fi_df_with(&s, STRICT);
        }

        /// Any wrapping people put around exact rows reads back the same
        /// records, and never invents one.
        #[test]
        fn wrapped_rows_round_trip(
            total: u64, used: u64,
            quote in "(|> |>> |> > |>\t)",
            indent in "( |\t| \t|)",
            prefix in "(|# |\\*\\*|`)",
            eol in "(\n|\r\n)",
            prompt in "(|\\$ btrfs fi df /mnt\n|root@h:~# btrfs filesystem df /\n)",
        ) {
            let rows = [format!("Data, RAID1C3: total={total}, used={used}"), "GlobalReserve, single: total=5767168, used=0".to_owned()];
            let mut text = prompt.replace('\n', eol.as_str());
            for r in &rows {
                text.push_str(&format!("{quote}{indent}{prefix}{r}{}{eol}", if prefix == "**" { "**" } else if prefix == "`" { "`" } else { "" }));
            }
            let p = parse_fi_df(&text).unwrap();
            prop_assert_eq!(p.records.len(), 2);
            prop_assert_eq!((p.records[0].total_bytes, p.records[0].used_bytes, p.records[0].exact), (total, used, true));
            prop_assert!(p.skipped.iter().all(|s| !s.damaged), "{:?}", p.skipped);
        }

        /// Lines damaged anywhere never panic and never give more rows than
        /// the input has row heads.
        #[test]
        fn damaged_never_adds_rows(cut in 0usize..120, junk in "\\PC{0,12}") {
            let mut text = HUMAN.to_owned();
            let at = text.char_indices().map(|(i, _)| i).nth(cut % text.chars().count()).unwrap_or(0);
            text.insert_str(at, &junk);
            if let Ok(p) = parse_fi_df(&text) {
                prop_assert!(p.records.len() <= 4 + junk.matches(':').count());
            }
        }

        #[test]
        fn never_panics_on_near_miss_lines(
            t in "(Data|System|Metadata|Data\\+Metadata|GlobalReserve|unknown|X)",
            p in "(single|DUP|RAID0|RAID1C3|UNKNOWN|raid9)",
            total in "[0-9.]{0,25}(B|KiB|MiB|GiB|EiB|kB|MB|XB|)",
            used in "[0-9.]{0,25}(B|KiB|MiB|GiB|EiB|kB|MB|XB|)",
            sep in "(, |,|: | )",
        ) {
            let line = format!("{t}{sep}{p}: total={total}, used={used}\n");
            if let Ok(parsed) = parse_fi_df(&line) {
                prop_assert_eq!(parsed.records.len(), 1);
            }
        }

        #[test]
        fn raw_lines_round_trip(total: u64, used: u64) {
            let line = format!("Metadata, RAID1C3: total={total}, used={used}\n");
            let r = &parse_fi_df(&line).unwrap().records[0];
            prop_assert_eq!((r.total_bytes, r.used_bytes, r.exact), (total, used, true));
        }

        #[test]
        fn human_lines_round_trip_within_the_error(size in 0u64..(1u64 << 62)) {
            use crate::report::units::{pretty_size, UnitBase, UnitMode};
            for mode in [UnitMode::Human(UnitBase::Binary), UnitMode::Human(UnitBase::Decimal),
                         UnitMode::Fixed(UnitBase::Binary, 2), UnitMode::Fixed(UnitBase::Decimal, 3)] {
                let line = format!("Data, single: total={}, used=0.00B\n", pretty_size(size, mode));
                let r = &parse_fi_df(&line).unwrap().records[0];
                prop_assert!(r.total_bytes.abs_diff(size) <= r.total_error_bytes, "{} -> {:?}", line, r);
            }
        }

        #[test]
        fn never_panics_on_arbitrary_json(s in "\\{\"filesystem-df\": \\[\\{\"bg-type\": \"(Data|X)\", \"bg-profile\": \"(single|x)\", \"total\": (\"[0-9a-z-]{0,22}\"|[0-9.e-]{0,22}|null), \"used\": (\"[0-9]{0,22}\"|[0-9-]{0,22})\\}\\]\\}") {
            let _ = parse_fi_df(&s);
        }
    }
}
