//! What each member device is doing, read from the kernel and the members'
//! own superblocks, and compared with what doctor saw the last time it
//! looked (its record in `STATE/members/FSID.json`): present, missing (the
//! kernel says so), vanished (the kernel still counts it, its block device
//! is gone), stale (its superblock is behind the filesystem: it missed
//! transactions), returned (it was missing or vanished at the last look,
//! and no scrub since resynced it), and error counters rising since then.
//!
//! The classification is pure ([`classify`], [`rising`]); the record is
//! read and written by [`load`] and [`save`] through the state directory's
//! safe reader and writer.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::facts::{ErrorCounts, FsFacts};
use crate::error::Result;
use crate::sys::fs::state::StateRoom;

/// The state directory's room for these records.
pub const ROOM: &str = "members";

pub use crate::model::member::MemberState;

/// What doctor saw of one member at its last look.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberRecord {
    /// btrfs device id.
    pub devid: u64,
    /// Its state then.
    pub state: MemberState,
    /// Since when (seconds since the epoch) it has been in that state, as
    /// far as doctor's looks tell.
    pub since: u64,
    /// Its error counters then (absent when not read).
    #[serde(default)]
    pub errors: Option<ErrorCounts>,
}

/// What doctor saw of a filesystem's members at its last look.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MembersRecord {
    /// Filesystem UUID.
    pub fsid: String,
    /// When (seconds since the epoch).
    pub at: u64,
    /// The kernel running then (`uname -r`): error counters count more
    /// from 7.1 on.
    pub kernel: String,
    /// Each member.
    pub members: Vec<MemberRecord>,
}

/// What the kernel and the member's superblock say of one member now, as
/// [`classify`] takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// The kernel lists it missing.
    pub missing: bool,
    /// Its block device is gone (no such device, or another filesystem's
    /// superblock on it).
    pub block_gone: bool,
    /// The generation in its own superblock, when read.
    pub generation: Option<u64>,
}

/// A superblock this many transactions behind the filesystem is stale:
/// one is the transaction being committed while doctor reads.
const STALE_AFTER: u64 = 1;

/// The state of one member and since when: from what is seen now, the
/// filesystem's generation, the last look's record of it and the end of
/// the last complete scrub of it (seconds since the epoch).
pub fn classify(
    seen: Seen,
    fs_generation: Option<u64>,
    before: Option<&MemberRecord>,
    scrubbed_at: Option<u64>,
    now: u64,
) -> (MemberState, u64) {
    let state = if seen.missing {
        MemberState::Missing
    } else if seen.block_gone {
        MemberState::Vanished
    } else if let (Some(g), Some(fs)) = (seen.generation, fs_generation)
        && g.saturating_add(STALE_AFTER) < fs
    {
        MemberState::Stale
    } else {
        match before {
            // Gone at the last look, or returned and not resynced since.
            Some(b) if b.state != MemberState::Present => {
                let back = if b.state.gone() { now } else { b.since };
                if scrubbed_at.is_some_and(|t| t >= back) {
                    MemberState::Present
                } else {
                    MemberState::Returned
                }
            }
            _ => MemberState::Present,
        }
    };
    let since = match before {
        Some(b) if b.state == state => b.since,
        // Stale and returned are one episode: the time it came back.
        Some(b) if state == MemberState::Returned && b.state == MemberState::Stale => b.since,
        _ => now,
    };
    (state, since)
}

/// Error counters that rose since the last look: (kind, increase), the
/// counters at UINT64_MAX left out. Empty when none rose, when either was
/// not read, or when the counters were reset since.
pub fn rising(now: Option<ErrorCounts>, before: Option<ErrorCounts>) -> Vec<(&'static str, u64)> {
    let (Some(now), Some(before)) = (now, before) else {
        return Vec::new();
    };
    let then: std::collections::BTreeMap<&str, u64> = before.valid_kinds().into_iter().collect();
    let now_kinds = now.valid_kinds();
    // A reset (btrfs device stats -z) makes every counter go down or stay.
    if now_kinds
        .iter()
        .any(|(k, n)| then.get(k).is_some_and(|t| n < t))
    {
        return Vec::new();
    }
    now_kinds
        .into_iter()
        .filter_map(|(k, n)| {
            let t = *then.get(k)?;
            (n > t).then(|| (k, n - t))
        })
        .collect()
}

/// One member as the kernel lists it, for [`now`].
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// btrfs device id.
    pub devid: u64,
    /// The block device the kernel names (empty or `missing` when missing).
    pub path: &'a str,
    /// The kernel lists it missing.
    pub missing: bool,
}

/// A member's state now, with what it was decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberNow {
    /// The state.
    pub state: MemberState,
    /// Since when.
    pub since: u64,
    /// The state began at this look (told by `--notify`).
    pub new: bool,
    /// The generation in its own superblock, when read.
    pub generation: Option<u64>,
    /// Its error counters at the last look.
    pub errors_before: Option<ErrorCounts>,
}

/// Each member's state now, as doctor, `show` and `usage` name it: what
/// the kernel says (`members`), each member's own superblock (on the host
/// only: a --sysroot tree has no devices to read), the last look's record
/// in `state_dir` (read, never written here) and the last scrub of each
/// member (`scrubs`). Also the last look's record and the filesystem's
/// generation (the newest of the kernel's, `fs_generation`, and the
/// members').
pub fn now(
    root: &crate::sys::fs::root::SysRoot,
    fsid: &str,
    members: &[Member<'_>],
    fs_generation: u64,
    state_dir: &Path,
    scrubs: &[crate::doctor::scrub::ScrubDevice],
    now: u64,
) -> (Vec<MemberNow>, Option<MembersRecord>, Option<u64>) {
    let before = load(state_dir, fsid);
    let seen: Vec<Seen> = members
        .iter()
        .map(|m| {
            let block = if m.missing || !root.is_host() {
                Default::default()
            } else {
                crate::sys::block::member::look(Path::new(m.path), fsid, m.devid)
            };
            Seen {
                missing: m.missing,
                block_gone: block.gone,
                generation: block.generation,
            }
        })
        .collect();
    let generation = seen
        .iter()
        .filter_map(|s| s.generation)
        .chain(Some(fs_generation).filter(|g| *g > 0))
        .max();
    let out = members
        .iter()
        .zip(&seen)
        .map(|(m, s)| {
            let b = before
                .as_ref()
                .and_then(|r| r.members.iter().find(|x| x.devid == m.devid));
            // The end of the last complete, repairing scrub of this member.
            let scrubbed_at = scrubs
                .iter()
                .filter(|x| x.devid == m.devid && x.finished && !x.readonly)
                .map(|x| x.started + x.duration)
                .max();
            let (state, since) = classify(*s, generation, b, scrubbed_at, now);
            MemberNow {
                state,
                since,
                new: state != MemberState::Present
                    && b.is_none_or(|b| b.state != state)
                    && !(state == MemberState::Returned
                        && b.is_some_and(|b| b.state == MemberState::Stale)),
                generation: s.generation,
                errors_before: b.and_then(|b| b.errors),
            }
        })
        .collect();
    (out, before, generation)
}

/// Each member's state as `show` and `usage` give it: [`now`] with the
/// scrubs on record in `state_dir`, at this time. `members`: (devid, the
/// block device the kernel names, missing).
pub fn states(
    root: &crate::sys::fs::root::SysRoot,
    fsid: &str,
    members: &[(u64, &str, bool)],
    fs_generation: u64,
    state_dir: &Path,
) -> Vec<MemberState> {
    let inputs: Vec<Member<'_>> = members
        .iter()
        .map(|&(devid, path, missing)| Member {
            devid,
            path,
            missing,
        })
        .collect();
    let scrubs = crate::doctor::scrub::last(root, &crate::scrub::StateStore::new(state_dir), fsid);
    now(
        root,
        fsid,
        &inputs,
        fs_generation,
        state_dir,
        &scrubs,
        crate::doctor::now_unix(),
    )
    .0
    .into_iter()
    .map(|m| m.state)
    .collect()
}

/// The record of this look.
pub fn record(f: &FsFacts, now: u64) -> MembersRecord {
    MembersRecord {
        fsid: f.uuid.clone(),
        at: now,
        kernel: f.kernel.clone(),
        members: f
            .devices
            .iter()
            .map(|d| MemberRecord {
                devid: d.devid,
                state: d.state,
                since: d.state_since.unwrap_or(now),
                errors: d.errors,
            })
            .collect(),
    }
}

/// The last look's record of `fsid` in the state directory; `None` when
/// there is none or it is not one (a record that cannot be read never
/// stops doctor: the states are then those of a first look).
pub fn load(state_dir: &Path, fsid: &str) -> Option<MembersRecord> {
    StateRoom::new(state_dir, ROOM)
        .load::<MembersRecord>(&file_name(fsid))
        .ok()
        .flatten()
        .filter(|r| r.fsid == fsid)
}

/// Saves this look's record (replaced atomically).
pub fn save(state_dir: &Path, r: &MembersRecord) -> Result<()> {
    StateRoom::new(state_dir, ROOM).save(&file_name(&r.fsid), r)
}

fn file_name(fsid: &str) -> String {
    format!("{fsid}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(state: MemberState, since: u64) -> MemberRecord {
        MemberRecord {
            devid: 3,
            state,
            since,
            errors: None,
        }
    }

    #[test]
    fn states_from_the_kernel_the_superblock_and_the_last_look() {
        let seen = Seen::default();
        assert_eq!(
            classify(seen, Some(10), None, None, 100),
            (MemberState::Present, 100)
        );
        let missing = Seen {
            missing: true,
            ..seen
        };
        assert_eq!(
            classify(missing, Some(10), None, None, 100).0,
            MemberState::Missing
        );
        let gone = Seen {
            block_gone: true,
            ..seen
        };
        assert_eq!(
            classify(gone, Some(10), None, None, 100).0,
            MemberState::Vanished
        );
        // One transaction behind: the commit in flight, not stale.
        let behind = |g| Seen {
            generation: Some(g),
            ..seen
        };
        assert_eq!(
            classify(behind(9), Some(10), None, None, 100).0,
            MemberState::Present
        );
        assert_eq!(
            classify(behind(7), Some(10), None, None, 100).0,
            MemberState::Stale
        );
        // Vanished at the last look (50), present now: returned since now.
        let was = rec(MemberState::Vanished, 50);
        assert_eq!(
            classify(behind(10), Some(10), Some(&was), None, 100),
            (MemberState::Returned, 100)
        );
        // Still returned at the next look, since the same time...
        let back = rec(MemberState::Returned, 100);
        assert_eq!(
            classify(behind(10), Some(10), Some(&back), Some(90), 200),
            (MemberState::Returned, 100)
        );
        // ... until a scrub ends after it came back.
        assert_eq!(
            classify(behind(10), Some(10), Some(&back), Some(150), 200),
            (MemberState::Present, 200)
        );
        // Stale at the last look, current now (a commit wrote its
        // superblock): returned since it was seen stale.
        let stale = rec(MemberState::Stale, 120);
        assert_eq!(
            classify(behind(10), Some(10), Some(&stale), None, 200),
            (MemberState::Returned, 120)
        );
        // Missing since 50, still missing: since 50.
        assert_eq!(
            classify(
                missing,
                Some(10),
                Some(&rec(MemberState::Missing, 50)),
                None,
                200
            ),
            (MemberState::Missing, 50)
        );
    }

    #[test]
    fn rising_counters_leave_out_resets_and_invalid_values() {
        let c = |write, corruption| ErrorCounts {
            write,
            corruption,
            ..ErrorCounts::default()
        };
        assert_eq!(rising(Some(c(5, 1)), Some(c(2, 1))), vec![("write", 3)]);
        assert!(rising(Some(c(2, 1)), Some(c(2, 1))).is_empty());
        // Reset then new errors: not called rising (the history is gone).
        assert!(rising(Some(c(1, 0)), Some(c(2, 1))).is_empty());
        assert!(rising(Some(c(5, 1)), None).is_empty());
        let invalid = c(5, crate::operation::state::INVALID_COUNT);
        assert_eq!(rising(Some(invalid), Some(c(2, 1))), vec![("write", 3)]);
    }
}
