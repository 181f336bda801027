//! Pasted text as people put it in tickets, mails and forums: every line
//! with what surrounds the tool's output taken off (`> ` quote marks of any
//! depth, indentation, `dmesg` and `journalctl`/syslog timestamps with their
//! host and program, shell prompts), and a window over the lines so that a
//! reader of megabytes keeps only a bounded number of them.
//!
//! Taking a prefix off never copies: a [`PLine`]'s text is a slice of the
//! input (or of a raw mail's quoted-printable body decoded once,
//! [`unquote_printable`], its line numbers kept). A line longer than
//! [`MAX_LINE`] bytes is cut there. [`segment`] finds every output in the
//! lines and hands each block to its reader (`fi df` and `fi usage` blocks
//! as text for the readers of `df --parse` and `usage --parse`). Never
//! panics; linear in the input.

use super::balance_status::BalanceStatus;
use super::dev_stats::DevStats;
use super::dev_usage::DeviceUsage;
use super::fi_show::FiShow;
use super::kernel_log::KernelEvent;
use super::replace_status::ReplaceStatus;
use super::scrub::ScrubReport;

/// Bytes of a line that are read; the rest is ignored (a pasted output
/// line is never this long).
pub const MAX_LINE: usize = 4096;

/// Lines a block of output may span; readers look no further ahead.
pub const LOOKAHEAD: usize = 4096;

/// One line of a paste.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PLine<'a> {
    /// 1-based line number in the input.
    pub no: usize,
    /// The text without quote marks, indentation, timestamp or prompt.
    pub text: &'a str,
    /// A `dmesg` or syslog/journal timestamp was taken off: a log line.
    pub logged: bool,
    /// A shell prompt was taken off: `text` is a command line.
    pub command: bool,
    /// The line was longer than [`MAX_LINE`] and was cut.
    pub cut: bool,
}

impl PLine<'_> {
    /// A line with nothing on it.
    pub fn blank(&self) -> bool {
        self.text.is_empty()
    }
}

/// The part of `s` up to `max` bytes, at a character boundary.
pub fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A pasted text's lines, cleaned and numbered from 1 (the parsers' tests).
#[cfg(test)]
pub(crate) fn test_lines(s: &str) -> Vec<PLine<'_>> {
    s.lines()
        .enumerate()
        .map(|(i, l)| clean(i + 1, l))
        .collect()
}

/// Cleans one raw line (numbered `no`).
pub fn clean(no: usize, raw: &str) -> PLine<'_> {
    let cut = raw.len() > MAX_LINE;
    let mut s = head(raw, MAX_LINE).trim_end();
    s = s.trim_start_matches('\u{feff}');
    // Quote marks and indentation, any depth.
    loop {
        let t = s.trim_start();
        match t.strip_prefix('>') {
            Some(r) => s = r,
            None => {
                s = t;
                break;
            }
        }
    }
    let mut logged = false;
    for _ in 0..3 {
        if let Some(r) = strip_dmesg_stamp(s).or_else(|| strip_syslog(s)) {
            s = r.trim_start();
            logged = true;
        } else {
            break;
        }
    }
    let mut command = false;
    if let Some(r) = strip_prompt(s) {
        s = r.trim();
        command = true;
    }
    PLine {
        no,
        text: s,
        logged,
        command,
        cut,
    }
}

/// `[12345.678901] `, `[  +0,000508] `, `[Apr19 18:52] ` (`dmesg -H`),
/// `[Mon Mar  4 10:00:00 2024] ` (`dmesg -T`).
fn strip_dmesg_stamp(s: &str) -> Option<&str> {
    let rest = s.strip_prefix('[')?;
    let end = rest.find(']')?;
    let inside = &rest[..end];
    let ok = (1..=32).contains(&inside.len())
        && inside.bytes().any(|b| b.is_ascii_digit())
        && inside
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" .:,+-".contains(&b));
    ok.then(|| &rest[end + 1..])
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn is_time(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 8
        && b[2] == b':'
        && b[5] == b':'
        && b.iter().all(|c| c.is_ascii_digit() || b":.,".contains(c))
}

/// `Mar 17 03:01:44 host kernel: `, `2024-03-17T03:01:44+0100 host
/// btrfs-scrub[123]: `: the time, the host and the program.
fn strip_syslog(s: &str) -> Option<&str> {
    let mut words = s.split_ascii_whitespace();
    let first = words.next()?;
    let timed = if MONTHS.contains(&first) {
        let day = words.next()?;
        day.len() <= 2 && day.bytes().all(|b| b.is_ascii_digit()) && is_time(words.next()?)
    } else if first.len() >= 19 && first.as_bytes()[4] == b'-' {
        first.as_bytes()[10] == b'T' && first.as_bytes()[..4].iter().all(u8::is_ascii_digit)
    } else {
        // `journalctl -o short-unix`: `1634463961.245751 host kernel: `.
        first.len() >= 12
            && first.contains('.')
            && first.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    };
    if !timed {
        return None;
    }
    let _host = words.next()?;
    let program = words.next()?;
    if !program.ends_with(':') || program.len() > 64 {
        return None;
    }
    let at = program.as_ptr() as usize - s.as_ptr() as usize + program.len();
    Some(&s[at..])
}

/// Commands whose line a prompt starts.
const COMMANDS: [&str; 12] = [
    "btrfs",
    "sudo",
    "uname",
    "dmesg",
    "journalctl",
    "mount",
    "cat",
    "grep",
    "doas",
    "mkfs.btrfs",
    "btrfs-progs",
    "smartctl",
];

fn is_command(s: &str) -> bool {
    let word = s.split_ascii_whitespace().next().unwrap_or("");
    let word = word.rsplit('/').next().unwrap_or(word);
    COMMANDS.contains(&word)
}

/// `$ `, `# `, `% `, `❯ `, `user@host:~$ `, `[root@host ~]# `: the prompt
/// of a command line (a `# ` line only when a command follows, not a
/// heading).
fn strip_prompt(s: &str) -> Option<&str> {
    for p in ["$ ", "# ", "% ", "❯ ", "> "] {
        if let Some(r) = s.strip_prefix(p) {
            return is_command(r.trim_start()).then_some(r);
        }
    }
    // `user@host:~$ cmd`, `[root@host ~]# cmd`, `host:~ # cmd`.
    let window = head(s, 120);
    for p in ["$ ", "# ", "% ", "❯ "] {
        if let Some(i) = window.find(p) {
            let before = &window[..i];
            let rest = &s[i + p.len()..];
            if (before.contains('@') || before.ends_with(']') || before.contains(":~"))
                && !before.contains(' ')
                || before.starts_with('[') && before.ends_with(']')
            {
                return is_command(rest.trim_start()).then_some(rest);
            }
        }
    }
    // A bare command line (`btrfs scrub status /mnt`).
    let t = s.trim_start();
    ((t.starts_with("btrfs ") && !t.contains(": ")) || t.starts_with("sudo btrfs ")).then_some(t)
}

/// Joins of soft line breaks kept at most (the rest are left broken).
const MAX_JOINS: usize = 1 << 20;

/// A mail's quoted-printable body decoded: soft line breaks (`=` at the
/// end of a line) joined, `=XX` bytes decoded, no-break spaces (`=C2=A0`)
/// made spaces. `None` when `input` does not look quoted-printable. With
/// the text, where its lines start in the input: (line of the text,
/// line of the input) at each line after a join.
pub fn unquote_printable(input: &str) -> Option<(String, Vec<(usize, usize)>)> {
    let marked = input.contains("=C2=A0") || input.contains("=3D") || input.contains("=20\n");
    if !marked
        || !input
            .lines()
            .any(|l| l.trim_end_matches('\r').ends_with('='))
    {
        return None;
    }
    let mut bytes = Vec::with_capacity(input.len());
    let mut starts = Vec::new();
    let (mut out_line, mut joins, mut joined) = (0usize, 0usize, false);
    for (i, raw) in input.split('\n').enumerate() {
        let raw = raw.trim_end_matches('\r');
        if joined {
            joined = false;
        } else if i != out_line {
            starts.push((out_line, i));
        }
        let soft = raw.ends_with('=') && joins < MAX_JOINS;
        let body = if soft { &raw[..raw.len() - 1] } else { raw };
        let b = body.as_bytes();
        let mut k = 0;
        while k < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if b[k] == b'='
                && k + 2 < b.len()
                && let (Some(h), Some(l)) = (hex(b[k + 1]), hex(b[k + 2]))
            {
                bytes.push((h * 16 + l) as u8);
                k += 3;
                continue;
            }
            bytes.push(b[k]);
            k += 1;
        }
        if soft {
            joins += 1;
            joined = true;
        } else {
            bytes.push(b'\n');
            out_line += 1;
        }
    }
    let text = String::from_utf8_lossy(&bytes).replace('\u{a0}', " ");
    // Keep only the shifts: a line of the text maps to the input's line
    // of the last entry at or before it, plus the distance.
    starts.dedup_by(|b, a| b.1 - b.0 == a.1 - a.0);
    Some((text, starts))
}

/// The lines of `input`, cleaned, with a bounded window for readers that
/// look ahead: at most about 2 × [`LOOKAHEAD`] lines are held.
pub struct Lines<'a> {
    rest: std::iter::Enumerate<std::str::Split<'a, char>>,
    buf: Vec<PLine<'a>>,
    pos: usize,
    /// (line of the text, line of the input) where they differ (a
    /// decoded mail); empty: the same.
    map: Vec<(usize, usize)>,
}

impl<'a> Lines<'a> {
    /// A window over `input`.
    pub fn new(input: &'a str) -> Self {
        Self::mapped(input, Vec::new())
    }

    /// A window over a decoded text whose lines start at `map`'s lines of
    /// the input ([`unquote_printable`]).
    pub fn mapped(input: &'a str, map: Vec<(usize, usize)>) -> Self {
        Self {
            rest: input.split('\n').enumerate(),
            buf: Vec::new(),
            pos: 0,
            map,
        }
    }

    /// The input's line number of line `i` (0-based) of the text.
    fn number(&self, i: usize) -> usize {
        let at = self.map.partition_point(|(t, _)| *t <= i);
        match at.checked_sub(1).and_then(|a| self.map.get(a)) {
            Some((t, o)) => o + (i - t) + 1,
            None => i + 1,
        }
    }

    /// The lines from the current one on (at most [`LOOKAHEAD`] of them);
    /// empty at the end.
    pub fn view(&mut self) -> &[PLine<'a>] {
        if self.pos >= LOOKAHEAD {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() < self.pos + LOOKAHEAD {
            match self.rest.next() {
                Some((i, raw)) => {
                    let no = self.number(i);
                    self.buf.push(clean(no, raw));
                }
                None => break,
            }
        }
        let end = self.buf.len().min(self.pos + LOOKAHEAD);
        &self.buf[self.pos..end]
    }

    /// Moves past `n` lines (at least one).
    pub fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n.max(1)).min(self.buf.len());
    }
}

/// The first number in `s` (digits only), and what follows it.
pub fn number(s: &str) -> Option<(u64, &str)> {
    let s = s.trim_start();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// The value after `key` in `s` (`key VALUE`, up to the next space or
/// comma).
pub fn after<'s>(s: &'s str, key: &str) -> Option<&'s str> {
    let at = s.find(key)? + key.len();
    let rest = s[at..].trim_start();
    let end = rest.find([' ', ',', ')']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// `after` as a number.
pub fn after_num<T: std::str::FromStr>(s: &str, key: &str) -> Option<T> {
    after(s, key)?.parse().ok()
}

// ---------------------------------------------------------------------------
// Finding the outputs in a paste.

/// One output found in a paste.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// `btrfs filesystem df` (text or JSON): its lines, for
    /// [`super::fi_df`].
    FiDf(String),
    /// `btrfs filesystem usage` (`-T` too): its lines, for the usage reader.
    FiUsage(String),
    /// `btrfs filesystem show`.
    FiShow(FiShow),
    /// `btrfs device stats`.
    DevStats(DevStats),
    /// `btrfs device usage`.
    DevUsage(Vec<DeviceUsage>),
    /// `btrfs scrub status` / `scrub start -B`.
    Scrub(Vec<ScrubReport>),
    /// `btrfs balance status`.
    Balance(BalanceStatus),
    /// `btrfs replace status`.
    Replace(ReplaceStatus),
    /// BTRFS kernel lines (line number, event), `Other` lines left out.
    Kernel(Vec<(usize, KernelEvent)>),
    /// Versions: `btrfs --version`, `uname -r`, `uname -a`, `Linux
    /// version`, or a line of prose naming them.
    Versions {
        /// btrfs-progs.
        progs: Option<String>,
        /// The kernel release.
        kernel: Option<String>,
    },
}

/// An output and the lines it spans.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// First line (1-based).
    pub first: usize,
    /// Last line.
    pub last: usize,
    /// What it is.
    pub found: Found,
}

const DF_HEADS: [&str; 7] = [
    "Data, ",
    "Data+Metadata, ",
    "System, ",
    "Metadata, ",
    "GlobalReserve, ",
    "unknown, ",
    "Data: ",
];

fn df_row(t: &str) -> bool {
    // `# Data, RAID1: total=...` in a script's comment.
    let t = t.trim_start_matches('#').trim_start();
    (DF_HEADS.iter().any(|h| t.starts_with(h))
        || t.starts_with("System: ")
        || t.starts_with("Metadata: "))
        && t.contains("total=")
}

const USAGE_KEYS: [&str; 13] = [
    "Overall:",
    "Device size:",
    "Device allocated:",
    "Device unallocated:",
    "Device missing:",
    "Device slack:",
    "Used:",
    "Free (estimated):",
    "Free (statfs, df):",
    "Data ratio:",
    "Metadata ratio:",
    "Global reserve:",
    "Multiple profiles:",
];

fn usage_bg_header(t: &str) -> bool {
    t.contains(": Size:") && t.split(':').next().is_some_and(|h| h.contains(','))
}

const TABLE_WORDS: [&str; 19] = [
    "Data",
    "Metadata",
    "System",
    "single",
    "DUP",
    "RAID0",
    "RAID1",
    "RAID1C3",
    "RAID1C4",
    "RAID10",
    "RAID5",
    "RAID6",
    "Unallocated",
    "Total",
    "Slack",
    "Path",
    "Id",
    "Used",
    "mixed",
];

fn usage_line(t: &str) -> bool {
    if USAGE_KEYS.iter().any(|k| t.starts_with(k)) || usage_bg_header(t) || t == "Unallocated:" {
        return true;
    }
    let mut w = t.split_ascii_whitespace();
    let first = w.next().unwrap_or("");
    if (first.starts_with('/') || first.starts_with("<missing"))
        && t.split_ascii_whitespace().count() <= 3
    {
        return true;
    }
    if first.starts_with("--")
        || first.bytes().all(|b| b.is_ascii_digit())
        || first == "Total"
        || first == "Used"
    {
        return true;
    }
    if t.split_ascii_whitespace()
        .all(|w| TABLE_WORDS.contains(&w) || w.starts_with("RAID"))
    {
        return true;
    }
    t.starts_with("WARNING: ") && (t.contains("chunk") || t.contains("root"))
}

/// The line after a `{...}` JSON document that starts at `lines[0]`, and
/// which document it is (`filesystem-df`, `device-stats`), looking at most
/// a few lines in for its name.
fn json_doc(lines: &[PLine]) -> Option<(usize, &'static str)> {
    if lines.first()?.text != "{" {
        return None;
    }
    let name = lines.iter().take(8).find_map(|l| {
        ["filesystem-df", "device-stats"]
            .into_iter()
            .find(|n| l.text.starts_with(&format!("\"{n}\"")))
    })?;
    let mut depth: i64 = 0;
    for (i, l) in lines.iter().enumerate() {
        for b in l.text.bytes() {
            match b {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                _ => {}
            }
        }
        if depth <= 0 {
            return Some((i + 1, name));
        }
    }
    // Never closed: the lines looked at are taken, so none is scanned twice.
    Some((lines.len(), name))
}

fn joined(lines: &[PLine]) -> String {
    let mut s = String::new();
    for l in lines {
        s.push_str(l.text);
        s.push('\n');
    }
    s
}

/// The lines of a `filesystem usage` from `lines[0]` on.
fn usage_len(lines: &[PLine]) -> usize {
    let mut end = 1;
    for (i, l) in lines.iter().enumerate().skip(1) {
        if l.blank() {
            continue;
        }
        if l.command || !usage_line(l.text) {
            break;
        }
        end = i + 1;
    }
    end
}

/// What starts at `v[0]`, and how many lines it spans.
fn block_at(v: &[PLine]) -> Option<(Found, usize)> {
    let l = &v[0];
    let t = l.text;
    if t.is_empty() {
        return None;
    }
    if let Some((n, name)) = json_doc(v) {
        return match name {
            "filesystem-df" => Some((Found::FiDf(joined(&v[..n])), n)),
            _ => {
                let at = v[..n]
                    .iter()
                    .position(|l| l.text.starts_with("\"device-stats\""))?;
                super::dev_stats::read(&v[at..n]).map(|(s, _)| (Found::DevStats(s), n))
            }
        };
    }
    if df_row(t) || t.starts_with("\"filesystem-df\"") {
        let n = if df_row(t) {
            1 + v[1..]
                .iter()
                .take_while(|l| {
                    df_row(l.text) || l.text.starts_with("WARNING: ") && l.text.contains("profile")
                })
                .count()
        } else {
            1 + v[1..]
                .iter()
                .position(|l| l.text.starts_with(']'))
                .map_or(0, |p| p + 1)
        };
        return Some((Found::FiDf(joined(&v[..n])), n));
    }
    let overall_cut = t.starts_with("Device size:")
        && v.get(1)
            .is_some_and(|l| l.text.starts_with("Device allocated:"));
    if t == "Overall:" || usage_bg_header(t) || overall_cut {
        let n = usage_len(v);
        return Some((Found::FiUsage(joined(&v[..n])), n));
    }
    if let Some((s, n)) = super::fi_show::read(v) {
        return Some((Found::FiShow(s), n));
    }
    if let Some((s, n)) = super::dev_stats::read(v) {
        return Some((Found::DevStats(s), n));
    }
    if let Some((s, n)) = super::dev_usage::read(v) {
        return Some((Found::DevUsage(s), n));
    }
    if let Some((s, n)) = super::scrub::read(v) {
        return Some((Found::Scrub(s), n));
    }
    if let Some((s, n)) = super::balance_status::read(v) {
        return Some((Found::Balance(s), n));
    }
    if let Some((s, n)) = super::replace_status::read(v) {
        return Some((Found::Replace(s), n));
    }
    if let Some(e) = super::kernel_log::read(t) {
        let mut events = Vec::new();
        let mut n = 0;
        let mut first = Some(e);
        let mut i = 0;
        while let Some(l) = v.get(i) {
            let mut e = match first.take() {
                Some(e) => Some(e),
                None => super::kernel_log::read(l.text),
            };
            // A line a mail client wrapped: its rest on the next line.
            if e == Some(KernelEvent::Other)
                && let Some(next) = v.get(i + 1)
                && !next.logged
                && !next.blank()
                && !next.command
                && !next.text.contains("BTRFS")
                && next.text.len() < 200
                && !next.text.starts_with(['[', '`', '$', '#', '>'])
                && super::versions::progs_version(next.text).is_none()
                && super::versions::kernel_in_line(next.text).is_none()
            {
                let joined = format!("{} {}", l.text, next.text);
                e = super::kernel_log::read(&joined);
                i += 1;
            }
            match e {
                Some(KernelEvent::Other) => {}
                Some(e) => events.push((l.no, e)),
                None if l.logged && !l.blank() => {}
                None => break,
            }
            i += 1;
            n = i;
        }
        return Some((Found::Kernel(events), n));
    }
    let progs = super::versions::progs_version(t).map(str::to_owned);
    let kernel = super::versions::kernel_in_line(t).map(str::to_owned);
    if progs.is_some() || kernel.is_some() {
        return Some((Found::Versions { progs, kernel }, 1));
    }
    if l.command
        && t.ends_with("uname -r")
        && let Some(next) = v.get(1)
        && super::versions::is_release(next.text)
    {
        let kernel = Some(next.text.to_owned());
        return Some((
            Found::Versions {
                progs: None,
                kernel,
            },
            2,
        ));
    }
    None
}

/// Finds every output in `input`, in order, and gives each to `each`.
/// Linear in the input: each line is looked at a bounded number of times
/// and at most [`LOOKAHEAD`] lines are held.
pub fn segment(input: &str, mut each: impl FnMut(Block)) {
    let decoded = unquote_printable(input);
    let mut lines = match &decoded {
        Some((text, map)) => Lines::mapped(text, map.clone()),
        None => Lines::new(input),
    };
    loop {
        let v = lines.view();
        let Some(first) = v.first() else { break };
        let no = first.no;
        match block_at(v) {
            Some((found, n)) => {
                let n = n.clamp(1, v.len());
                let last = v[n - 1].no;
                each(Block {
                    first: no,
                    last,
                    found,
                });
                lines.advance(n);
            }
            None => lines.advance(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_off_quotes_stamps_and_prompts() {
        let l = clean(3, "> >   [  264.661396] BTRFS error (device sda): x\r");
        assert_eq!(l.text, "BTRFS error (device sda): x");
        assert!(l.logged && !l.command);
        let l = clean(
            1,
            "Mar 17 03:01:44 server kernel: BTRFS warning (device sdb1): csum failed",
        );
        assert_eq!(l.text, "BTRFS warning (device sdb1): csum failed");
        let l = clean(
            1,
            "May 01 09:26:06 server btrfs-scrub[3160846]: Error summary:    csum=2",
        );
        assert_eq!(l.text, "Error summary:    csum=2");
        let l = clean(
            1,
            "2024-03-17T03:01:44+0100 host kernel: BTRFS info (device a): b",
        );
        assert_eq!(l.text, "BTRFS info (device a): b");
        let l = clean(1, "[Apr19 18:52] BTRFS: error (device nvme0n1p2) in x");
        assert!(l.text.starts_with("BTRFS: error"));
        for p in [
            "$ sudo btrfs scrub status /mnt",
            "# btrfs scrub status /mnt",
            "root@nas:~# btrfs scrub status /mnt",
            "[root@nas ~]# btrfs scrub status /mnt",
            "❯ btrfs scrub status /mnt",
        ] {
            let l = clean(1, p);
            assert!(l.command, "{p}");
            assert!(
                l.text.ends_with("btrfs scrub status /mnt"),
                "{p}: {}",
                l.text
            );
        }
        // A heading is not a prompt.
        assert!(!clean(1, "# Scrub results").command);
        assert_eq!(clean(1, "\tdevid    1 size 1").text, "devid    1 size 1");
    }

    #[test]
    fn quoted_printable_mail_is_decoded_with_its_line_numbers() {
        let mail = "> [74713.07] BTRFS info (device sde1): flagging fs f=\neature\n> a=3Db=C2=A0c\nlast=\n";
        let (text, map) = unquote_printable(mail).unwrap();
        assert_eq!(
            text,
            "> [74713.07] BTRFS info (device sde1): flagging fs feature\n> a=b c\nlast\n"
        );
        let mut lines = Lines::mapped(&text, map);
        let v = lines.view();
        assert_eq!(v[0].no, 1);
        assert_eq!((v[1].no, v[1].text), (3, "a=b c"));
        assert_eq!(v[2].no, 4);
        assert!(unquote_printable("no = here\n").is_none());
        for s in ["=", "=C2=A0=", "=3D=\n=", "=C2=A0\n=\n=x=\n"] {
            let _ = unquote_printable(s);
        }
        assert_eq!(
            clean(
                1,
                "1634463961.245751 BlueQ kernel: BTRFS error (device sdb1): x"
            )
            .text,
            "BTRFS error (device sdb1): x"
        );
    }

    #[test]
    fn hostile_lines_are_cut_and_never_panic() {
        let long = "é".repeat(MAX_LINE);
        let l = clean(1, &long);
        assert!(l.cut && l.text.len() <= MAX_LINE);
        for s in [
            "[",
            "[]",
            "[\u{1b}]x",
            ">>>>",
            "Mar",
            "Mar 1",
            "$ ",
            "\u{0}\u{7f}",
        ] {
            let _ = clean(1, s);
        }
    }

    #[test]
    fn the_window_holds_a_bounded_number_of_lines() {
        let input = "x\n".repeat(3 * LOOKAHEAD + 5);
        let mut lines = Lines::new(&input);
        let mut seen = 0;
        loop {
            let v = lines.view();
            if v.is_empty() {
                break;
            }
            assert!(v.len() <= LOOKAHEAD);
            assert_eq!(v[0].no, seen + 1);
            seen += 1;
            lines.advance(1);
            assert!(lines.buf.len() <= 2 * LOOKAHEAD + 1);
        }
        assert_eq!(seen, 3 * LOOKAHEAD + 6);
    }
}
