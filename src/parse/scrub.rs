//! `btrfs scrub status [-d]` and `btrfs scrub start -B [-d]` as pasted, in
//! both of btrfs-progs' styles:
//!
//! - classic (up to 5.1): `scrub status for UUID` / `scrub done for UUID`
//!   then tab-indented `scrub started at DATE and finished after 00:12:34`
//!   (`, running for`, `and was aborted after`, `and was interrupted after`,
//!   `scrub resumed at ...`), `total bytes scrubbed: 1.23TiB with 0 errors`,
//!   `error details: csum=3`, `corrected errors: 3, uncorrectable errors: 0,
//!   unverified errors: 0`; `-d` gives `scrub device /dev/sda (id 1) status`;
//! - key-value (5.2 on): `UUID:`, `Scrub started:`, `Scrub resumed:`,
//!   `Status:`, `Duration:`, `Time left:`, `ETA:`, `Total to scrub:`,
//!   `Bytes scrubbed:`, `Rate:`, `Error summary:` (`no errors found` or
//!   `csum=3 read=1`) and `Corrected:`/`Uncorrectable:`/`Unverified:`;
//!   `-d` gives `Scrub device /dev/sda (id 1) status|history|done`.

use serde::{Deserialize, Serialize};

use super::paste::{PLine, after, number};

/// Which of btrfs-progs' layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ScrubStyle {
    /// btrfs-progs up to 5.1: tab-indented sentences.
    Classic,
    /// btrfs-progs 5.2 on: `Key:   value` lines.
    KeyValue,
}

/// Where the scrub was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScrubState {
    /// Ran to its end.
    Finished,
    /// Still running when the output was taken.
    Running,
    /// Cancelled (`aborted`).
    Aborted,
    /// Interrupted (unmount, reboot).
    Interrupted,
    /// Not said.
    Unknown,
}

/// One scrub report: the filesystem's or, with `-d`, one device's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubReport {
    /// Layout.
    pub style: ScrubStyle,
    /// `scrub done for` / `Scrub device ... done`: printed by `scrub start -B`.
    pub done: bool,
    /// Filesystem UUID, when printed.
    pub uuid: Option<String>,
    /// The device of a `-d` report.
    pub device: Option<String>,
    /// State.
    pub state: ScrubState,
    /// A resumed scrub (`Scrub resumed:`, `scrub resumed at`).
    pub resumed: bool,
    /// When it started, as printed.
    pub started: Option<String>,
    /// How long it ran, as printed.
    pub duration: Option<String>,
    /// Bytes scrubbed (or to scrub), as printed.
    pub bytes: Option<String>,
    /// Errors found in total (`with N errors`, or the sum of the summary).
    pub errors: u64,
    /// `csum=3`, `read=1`, ...
    pub error_details: Vec<(String, u64)>,
    /// Errors repaired.
    pub corrected: Option<u64>,
    /// Errors without a good copy.
    pub uncorrectable: Option<u64>,
    /// Errors found and read fine on a second try.
    pub unverified: Option<u64>,
}

fn header(t: &str) -> Option<(ScrubStyle, bool, Option<String>, Option<String>)> {
    let classic = |rest: &str| Some(rest.trim().to_owned()).filter(|s| !s.is_empty());
    if let Some(r) = t.strip_prefix("scrub status for ") {
        return Some((ScrubStyle::Classic, false, classic(r), None));
    }
    if let Some(r) = t.strip_prefix("scrub done for ") {
        // 5.2 on print the same header before key-value lines.
        return Some((ScrubStyle::Classic, true, classic(r), None));
    }
    for (prefix, style) in [
        ("scrub device ", ScrubStyle::Classic),
        ("Scrub device ", ScrubStyle::KeyValue),
    ] {
        if let Some(r) = t.strip_prefix(prefix) {
            let dev = r.split(" (id").next().unwrap_or(r).trim().to_owned();
            let done = r.ends_with(" done");
            if r.contains("(id ") {
                return Some((style, done, None, Some(dev)));
            }
        }
    }
    if let Some(r) = t.strip_prefix("UUID:") {
        return Some((ScrubStyle::KeyValue, false, classic(r), None));
    }
    None
}

/// Whether a line belongs to a scrub report (after its header).
fn field(r: &mut ScrubReport, t: &str) -> bool {
    // Key-value style.
    if let Some((k, v)) = t.split_once(':') {
        let v = v.trim();
        let kv = |r: &mut ScrubReport| r.style = ScrubStyle::KeyValue;
        match k.trim() {
            "Scrub started" => {
                kv(r);
                r.started = Some(v.to_owned());
                return true;
            }
            "Scrub resumed" => {
                kv(r);
                r.resumed = true;
                return true;
            }
            "Status" => {
                kv(r);
                r.state = match v {
                    "finished" => ScrubState::Finished,
                    "running" => ScrubState::Running,
                    "aborted" | "cancelled" | "canceled" => ScrubState::Aborted,
                    "interrupted" => ScrubState::Interrupted,
                    _ => ScrubState::Unknown,
                };
                return true;
            }
            "Duration" => {
                r.duration = Some(v.to_owned());
                return true;
            }
            "Total to scrub" | "Bytes scrubbed" => {
                if r.bytes.is_none() || k.trim() == "Bytes scrubbed" {
                    r.bytes = Some(v.split_whitespace().next().unwrap_or("").to_owned());
                }
                return true;
            }
            "Time left" | "ETA" | "Rate" | "Scrub canceled" | "Scrub cancelled" => return true,
            "Error summary" => {
                if v != "no errors found" {
                    details(r, v);
                }
                return true;
            }
            // The summary lines and `-R`'s raw counters alike.
            "Corrected" | "corrected_errors" => {
                r.corrected = number(v).map(|n| n.0);
                return true;
            }
            "Uncorrectable" | "uncorrectable_errors" => {
                r.uncorrectable = number(v).map(|n| n.0);
                return true;
            }
            "Unverified" | "unverified_errors" => {
                r.unverified = number(v).map(|n| n.0);
                return true;
            }
            "error details" => {
                details(r, v);
                return true;
            }
            // `-R`: the raw counters.
            "read_errors" | "csum_errors" | "verify_errors" | "super_errors" => {
                if let Some((n, _)) = number(v)
                    && n > 0
                {
                    details(r, &format!("{}={n}", k.trim().trim_end_matches("_errors")));
                }
                return true;
            }
            "data_extents_scrubbed"
            | "tree_extents_scrubbed"
            | "data_bytes_scrubbed"
            | "tree_bytes_scrubbed"
            | "no_csum"
            | "csum_discards"
            | "malloc_errors"
            | "last_physical" => return true,
            "total bytes scrubbed" => {
                r.bytes = v.split_whitespace().next().map(str::to_owned);
                r.errors = after(v, "with").and_then(|n| n.parse().ok()).unwrap_or(0);
                return true;
            }
            _ => {}
        }
    }
    // Classic style sentences.
    if let Some(rest) = t
        .strip_prefix("scrub started at ")
        .or_else(|| t.strip_prefix("scrub resumed at "))
    {
        r.resumed |= t.starts_with("scrub resumed");
        let (when, how) = split_when(rest);
        r.started = Some(when.to_owned());
        if let Some(d) = how.strip_prefix("finished after ") {
            r.state = ScrubState::Finished;
            r.duration = Some(d.trim().to_owned());
        } else if let Some(d) = how.strip_prefix("running for ") {
            r.state = ScrubState::Running;
            r.duration = Some(d.trim().to_owned());
        } else if let Some(d) = how.strip_prefix("was aborted after ") {
            r.state = ScrubState::Aborted;
            r.duration = Some(d.trim().to_owned());
        } else if let Some(d) = how
            .strip_prefix("was interrupted after ")
            .or_else(|| how.strip_prefix("interrupted after "))
        {
            r.state = ScrubState::Interrupted;
            r.duration = Some(d.trim().to_owned());
        }
        return true;
    }
    if t.starts_with("corrected errors:") {
        r.corrected = after(t, "corrected errors:").and_then(|n| n.parse().ok());
        r.uncorrectable = after(t, "uncorrectable errors:").and_then(|n| n.parse().ok());
        r.unverified = after(t, "unverified errors:").and_then(|n| n.parse().ok());
        return true;
    }
    if let Some(rest) = t.strip_prefix("total ")
        && rest.contains(" scrubbed at rate ")
    {
        // 5.2 development snapshots: `total 62.55GiB scrubbed at rate ...`.
        r.bytes = rest.split_whitespace().next().map(str::to_owned);
        return true;
    }
    matches!(t, "no errors found" | "no stats available")
        || t.starts_with("Starting scrub on devid")
        || t.starts_with("WARNING: errors detected during scrubbing")
        || t.starts_with("ERROR: there are") && t.contains("uncorrectable")
}

/// `Sun Feb  5 10:00:01 2017 and finished after 00:12:34` or `..., running
/// for 0:04:31`: the date and the rest.
fn split_when(s: &str) -> (&str, &str) {
    for sep in [" and ", ", "] {
        if let Some(i) = s.find(sep) {
            return (&s[..i], &s[i + sep.len()..]);
        }
    }
    (s, "")
}

fn details(r: &mut ScrubReport, v: &str) {
    for w in v.split_whitespace() {
        if let Some((k, n)) = w.split_once('=')
            && let Ok(n) = n.parse::<u64>()
            && r.error_details.len() < 16
        {
            r.error_details.push((k.to_owned(), n));
        }
    }
    let sum: u64 = r
        .error_details
        .iter()
        .fold(0u64, |a, (_, n)| a.saturating_add(*n));
    r.errors = r.errors.max(sum);
}

/// Reads the scrub reports that start at `lines[0]`: one per header, the
/// filesystem's and each `-d` device's. Returns them and the lines used.
pub fn read(lines: &[PLine]) -> Option<(Vec<ScrubReport>, usize)> {
    let mut out: Vec<ScrubReport> = Vec::new();
    let mut used = 0;
    let mut i = 0;
    // `Starting scrub on devid N` lines come before `scrub done for`.
    while i < lines.len() && lines[i].text.starts_with("Starting scrub on devid") {
        i += 1;
    }
    let first = lines.get(i)?;
    if header(first.text).is_none() {
        // A report pasted without its `UUID:` line.
        let t = first.text;
        // A journal's `btrfs-scrub[pid]: Error summary: csum=2` alone.
        let logged_summary = first.logged && t.starts_with("Error summary:");
        if !(t.starts_with("Scrub started:") || t.starts_with("Scrub resumed:") || logged_summary) {
            return None;
        }
        out.push(ScrubReport {
            style: ScrubStyle::KeyValue,
            done: false,
            uuid: None,
            device: None,
            state: ScrubState::Unknown,
            resumed: false,
            started: None,
            duration: None,
            bytes: None,
            errors: 0,
            error_details: Vec::new(),
            corrected: None,
            uncorrectable: None,
            unverified: None,
        });
    }
    while let Some(l) = lines.get(i) {
        if let Some((style, done, uuid, device)) = header(l.text) {
            {
                out.push(ScrubReport {
                    style,
                    done,
                    uuid: uuid
                        .clone()
                        .or_else(|| out.last().and_then(|r| r.uuid.clone())),
                    device,
                    state: ScrubState::Unknown,
                    resumed: false,
                    started: None,
                    duration: None,
                    bytes: None,
                    errors: 0,
                    error_details: Vec::new(),
                    corrected: None,
                    uncorrectable: None,
                    unverified: None,
                });
            }
            i += 1;
            used = i;
            continue;
        }
        let Some(r) = out.last_mut() else { break };
        if l.blank() {
            i += 1;
            continue;
        }
        if !field(r, l.text) {
            break;
        }
        i += 1;
        used = i;
    }
    for r in &mut out {
        if r.state == ScrubState::Unknown && r.style == ScrubStyle::Classic && r.done {
            r.state = ScrubState::Finished;
        }
        r.errors = r
            .errors
            .max(r.corrected.unwrap_or(0) + r.uncorrectable.unwrap_or(0));
    }
    // A report with nothing but its header is a mention, not output.
    (out.iter().any(|r| {
        r.started.is_some() || r.bytes.is_some() || r.state != ScrubState::Unknown || r.errors > 0
    }))
    .then_some((out, used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::paste::test_lines as lines;

    #[test]
    fn reads_the_key_value_style_with_errors() {
        // kdave/btrfs-progs#867 (progs 6.x).
        let t = "UUID:             a5c81116-78a5-4edb-b57c-b08e90e1391b
Scrub started:    Fri Aug  9 16:58:37 2024
Status:           finished
Duration:         0:02:50
Total to scrub:   407.09GiB
Rate:             2.39GiB/s
Error summary:    csum=11
  Corrected:      0
  Uncorrectable:  11
  Unverified:     0
after";
        let l = lines(t);
        let (r, used) = read(&l).unwrap();
        assert_eq!(used, 10);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].state, ScrubState::Finished);
        assert_eq!(r[0].uncorrectable, Some(11));
        assert_eq!(r[0].errors, 11);
        assert_eq!(r[0].error_details, vec![("csum".to_owned(), 11)]);
    }

    #[test]
    fn reads_the_classic_style_and_resumed_scrubs() {
        let t = "scrub status for 0f2e4a1c-1111-2222-3333-444455556666
\tscrub resumed at Sun Feb  5 10:00:01 2017 and finished after 00:12:34
\ttotal bytes scrubbed: 1.23TiB with 3 errors
\terror details: csum=3
\tcorrected errors: 3, uncorrectable errors: 0, unverified errors: 0";
        let l = lines(t);
        let (r, used) = read(&l).unwrap();
        assert_eq!(used, 5);
        assert!(r[0].resumed);
        assert_eq!(r[0].style, ScrubStyle::Classic);
        assert_eq!(r[0].state, ScrubState::Finished);
        assert_eq!(
            (r[0].errors, r[0].corrected, r[0].uncorrectable),
            (3, Some(3), Some(0))
        );
        let l = lines(
            "scrub status for x\n\tscrub started at Sun Feb  5 10:00:01 2017, running for 00:01:02\n\ttotal bytes scrubbed: 1.00GiB with 0 errors",
        );
        assert_eq!(read(&l).unwrap().0[0].state, ScrubState::Running);
        let l = lines(
            "scrub status for x\n\tscrub started at Sun Feb  5 10:00:01 2017 and was aborted after 00:01:02",
        );
        assert_eq!(read(&l).unwrap().0[0].state, ScrubState::Aborted);
    }

    #[test]
    fn reads_start_b_with_devices() {
        let t = "Starting scrub on devid 1
scrub done for 44cb181f-faf6-48c2-a462-904cfe493576
Scrub started:    Fri May 29 23:54:53 2026
Scrub resumed:    Fri May 29 23:58:53 2026
Status:           finished
Duration:         0:10:23
Error summary:    no errors found

Scrub device /dev/sda (id 1) done
Scrub started:    Fri May 29 23:54:53 2026
Status:           finished
Error summary:    read=2
  Corrected:      2
  Uncorrectable:  0
  Unverified:     0";
        let l = lines(t);
        let (r, used) = read(&l).unwrap();
        assert_eq!(used, 15);
        assert_eq!(r.len(), 2);
        assert!(r[0].done && r[0].resumed);
        assert_eq!(r[0].style, ScrubStyle::KeyValue);
        assert_eq!(r[1].device.as_deref(), Some("/dev/sda"));
        assert_eq!(r[1].corrected, Some(2));
    }

    #[test]
    fn a_mention_is_not_a_report() {
        assert!(read(&lines("UUID: 1234")).is_none());
        assert!(read(&lines("scrub status for")).is_none());
    }
}
