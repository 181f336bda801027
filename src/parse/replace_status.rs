//! `btrfs replace status [-1]` as pasted (every version): `12.3% done, 0
//! write errs, 0 uncorr. read errs` while it runs (repeated on one line by
//! a terminal without `-1`), `Started on 11.Oct 08:55:23, finished on
//! 11.Oct 09:12:34, 0 write errs, 0 uncorr. read errs`, `..., canceled on
//! DATE at 12.3%, ...`, `..., suspended on DATE at 12.3%, ...` (after an
//! unmount; older progs say `interrupted`), and `Never started`.

use serde::{Deserialize, Serialize};

use super::paste::PLine;

/// Where the replace was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReplaceState {
    /// Running.
    Running,
    /// Finished.
    Finished,
    /// Cancelled.
    Canceled,
    /// Suspended (interrupted by an unmount).
    Suspended,
    /// Never started.
    NeverStarted,
}

/// A `replace status` output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceStatus {
    /// State.
    pub state: ReplaceState,
    /// `% done` (or where it stopped).
    pub percent: Option<f64>,
    /// Write errors on the new device.
    pub write_errors: u64,
    /// Reads that found no good copy.
    pub uncorrectable_read_errors: u64,
}

fn count_before(t: &str, what: &str) -> Option<u64> {
    let i = t.rfind(what)?;
    t[..i]
        .split([' ', ','])
        .rfind(|w| !w.is_empty())?
        .parse()
        .ok()
}

fn percent(t: &str) -> Option<f64> {
    let i = t.rfind('%')?;
    let start = t[..i]
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map_or(0, |(s, c)| s + c.len_utf8());
    t[start..i].parse().ok()
}

/// Reads a `replace status` line at `lines[0]`.
pub fn read(lines: &[PLine]) -> Option<(ReplaceStatus, usize)> {
    let t = lines.first()?.text;
    if t == "Never started" {
        return Some((
            ReplaceStatus {
                state: ReplaceState::NeverStarted,
                percent: None,
                write_errors: 0,
                uncorrectable_read_errors: 0,
            },
            1,
        ));
    }
    // A terminal's repeated progress: the last one counts.
    let t = t.rsplit('\r').next().unwrap_or(t);
    let write_errors = count_before(t, " write errs")?;
    let uncorrectable_read_errors = count_before(t, " uncorr. read errs")?;
    let state = if t.contains(", finished on ") {
        ReplaceState::Finished
    } else if t.contains(", canceled on ") || t.contains(", cancelled on ") {
        ReplaceState::Canceled
    } else if t.contains(", suspended on ") || t.contains(", interrupted on ") {
        ReplaceState::Suspended
    } else if t.contains("% done") {
        ReplaceState::Running
    } else {
        return None;
    };
    let head = t.split(" write errs").next().unwrap_or(t);
    Some((
        ReplaceStatus {
            state,
            percent: if state == ReplaceState::Finished {
                Some(100.0)
            } else {
                percent(head)
            },
            write_errors,
            uncorrectable_read_errors,
        },
        1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::paste::clean;

    #[test]
    fn reads_every_state() {
        let r = |s: &str| read(&[clean(1, s)]).map(|r| r.0);
        let f = r("Started on 11.Oct 08:55:23, finished on 11.Oct 09:12:34, 0 write errs, 0 uncorr. read errs").unwrap();
        assert_eq!(f.state, ReplaceState::Finished);
        let f = r("3.4% done, 0 write errs, 2 uncorr. read errs").unwrap();
        assert_eq!(
            (f.state, f.percent, f.uncorrectable_read_errors),
            (ReplaceState::Running, Some(3.4), 2)
        );
        let f = r("Started on  1.Jan 10:00:00, canceled on  1.Jan 11:00:00 at 12.5%, 1 write errs, 0 uncorr. read errs").unwrap();
        assert_eq!(
            (f.state, f.percent, f.write_errors),
            (ReplaceState::Canceled, Some(12.5), 1)
        );
        let f = r("Started on  1.Jan 10:00:00, suspended on  1.Jan 11:00:00 at 50.0%, 0 write errs, 0 uncorr. read errs").unwrap();
        assert_eq!(f.state, ReplaceState::Suspended);
        assert_eq!(
            r("Never started").unwrap().state,
            ReplaceState::NeverStarted
        );
        assert!(r("0 write errs").is_none());
    }
}
