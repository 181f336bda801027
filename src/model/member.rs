//! A member device's state: the one word `doctor`, `show` and `usage`
//! give it (decided in [`crate::doctor::members`]).

use serde::{Deserialize, Serialize};

/// A member's state, the same word in `show`, `usage` and `doctor`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum MemberState {
    /// In use, current.
    #[default]
    Present,
    /// The kernel counts it missing (`missing` in `btrfs filesystem
    /// show`; mounted with `-o degraded`, or lost at run time on 7.2+).
    Missing,
    /// The kernel still counts it a member, but its block device is gone
    /// (pulled out, a link that dropped): writes to it fail from now on.
    Vanished,
    /// Its own superblock is older than the filesystem's: it was away
    /// while the filesystem committed, and its copies of what was written
    /// meanwhile are old until a scrub rewrites them.
    Stale,
    /// Missing or vanished at the last look, back now, with no scrub
    /// since: its copies of what was written meanwhile may be old.
    Returned,
}

impl MemberState {
    /// The word printed (`missing`, `stale`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Present => "present",
            MemberState::Missing => "missing",
            MemberState::Vanished => "vanished",
            MemberState::Stale => "stale",
            MemberState::Returned => "returned",
        }
    }

    /// Gone now (missing or vanished).
    pub fn gone(self) -> bool {
        matches!(self, MemberState::Missing | MemberState::Vanished)
    }
}
