//! `btrfs balance status [-v]` as pasted (every version): `Balance on
//! '/mnt' is running` (`, pause requested`, `, cancel requested`), `is
//! paused`, `No balance found on '/mnt'`, the progress line `2 out of about
//! 10 chunks balanced (3 considered),  80% left` (where "considered" may
//! exceed "about": it counts every chunk the filters looked at, "about"
//! only those they matched) and, with `-v`, `Dumping filters: flags 0x7,
//! state 0x1, force is off` with a `DATA (flags 0x2): balancing, usage=50`
//! line per type.

use serde::{Deserialize, Serialize};

use super::paste::{PLine, number};

/// What the balance was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BalanceState {
    /// Running.
    Running,
    /// Running, a pause asked for.
    PauseRequested,
    /// Running, a cancel asked for.
    CancelRequested,
    /// Paused (or interrupted by an unmount: it resumes at the next mount).
    Paused,
    /// No balance.
    None,
}

/// A `balance status` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BalanceStatus {
    /// The mount point named.
    pub path: Option<String>,
    /// State.
    pub state: BalanceState,
    /// Chunks relocated so far.
    pub balanced: Option<u64>,
    /// Chunks the filters matched (`about`).
    pub about: Option<u64>,
    /// Chunks the filters looked at (`considered`).
    pub considered: Option<u64>,
    /// `% left`.
    pub left_percent: Option<u64>,
    /// The `-v` filter lines, as printed.
    pub filters: Vec<String>,
}

fn quoted(t: &str) -> Option<String> {
    let a = t.find('\'')?;
    let b = t.rfind('\'')?;
    (b > a).then(|| t[a + 1..b].to_owned())
}

/// `2 out of about 10 chunks balanced (3 considered),  80% left`.
fn progress(s: &mut BalanceStatus, t: &str) -> bool {
    let Some((done, rest)) = number(t) else {
        return false;
    };
    let Some(rest) = rest.trim_start().strip_prefix("out of about ") else {
        return false;
    };
    let Some((about, rest)) = number(rest) else {
        return false;
    };
    s.balanced = Some(done);
    s.about = Some(about);
    s.considered = rest
        .split_once('(')
        .and_then(|(_, r)| number(r))
        .map(|(n, _)| n);
    s.left_percent = rest
        .split_once("),")
        .and_then(|(_, r)| number(r))
        .map(|(n, _)| n);
    true
}

/// Reads the `balance status` that starts at `lines[0]`.
pub fn read(lines: &[PLine]) -> Option<(BalanceStatus, usize)> {
    let t = lines.first()?.text;
    let state = if t.starts_with("No balance found on ") {
        BalanceState::None
    } else if t.starts_with("Balance on ") {
        if t.ends_with("is paused") {
            BalanceState::Paused
        } else if t.contains("is running, pause requested") {
            BalanceState::PauseRequested
        } else if t.contains("is running, cancel requested") {
            BalanceState::CancelRequested
        } else if t.contains("is running") {
            BalanceState::Running
        } else {
            return None;
        }
    } else {
        // The progress line alone (pasted without its first line).
        let mut s = BalanceStatus {
            path: None,
            state: BalanceState::Running,
            balanced: None,
            about: None,
            considered: None,
            left_percent: None,
            filters: Vec::new(),
        };
        return progress(&mut s, t).then_some((s, 1));
    };
    let mut s = BalanceStatus {
        path: quoted(t),
        state,
        balanced: None,
        about: None,
        considered: None,
        left_percent: None,
        filters: Vec::new(),
    };
    let mut used = 1;
    for (i, l) in lines.iter().enumerate().skip(1) {
        let t = l.text;
        let filter = t.starts_with("Dumping filters:")
            || ["DATA (", "METADATA (", "SYSTEM ("]
                .iter()
                .any(|p| t.starts_with(p));
        if filter {
            if s.filters.len() < 8 {
                s.filters.push(t.to_owned());
            }
        } else if !progress(&mut s, t) {
            break;
        }
        used = i + 1;
    }
    Some((s, used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::paste::clean;

    #[test]
    fn considered_may_exceed_about() {
        // kdave/btrfs-progs#654 (progs 5.4).
        let t = "Balance on '/btrfs' is running
35 out of about 101 chunks balanced (466 considered),  65% left
Dumping filters: flags 0x6, state 0x0, force is off
  METADATA (flags 0x100): converting, target=64, soft is off
  SYSTEM (flags 0x100): converting, target=64, soft is off";
        let l = crate::parse::paste::test_lines(t);
        let (s, used) = read(&l).unwrap();
        assert_eq!(used, 5);
        assert_eq!(s.state, BalanceState::Running);
        assert_eq!(
            (s.balanced, s.about, s.considered, s.left_percent),
            (Some(35), Some(101), Some(466), Some(65))
        );
        assert_eq!(s.filters.len(), 3);
        let l = [clean(1, "No balance found on '/mnt'")];
        assert_eq!(read(&l).unwrap().0.state, BalanceState::None);
        let l = [clean(1, "Balance on '/mnt' is paused")];
        assert_eq!(read(&l).unwrap().0.path.as_deref(), Some("/mnt"));
    }
}
