//! The typed documents `balance` prints with `--json` (docs/json.md, named
//! in [`crate::schema`]): the JSON Lines records of a run
//! (`balance-record`) and `--status`'s one document (`balance-status`).
//! Tests read them back as these types.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::plan::{Spread, Step};
use super::run::{Outcome, Progress, RunRecord};
use crate::device::add::{AddPlan, AddResult};
use crate::model::balance::BalanceInfo;
use crate::operation::reason::Reason;

/// One JSON Lines record of `balance --json`, tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum BalanceRecord {
    /// The plan (always first).
    Plan {
        /// What the balance does (`device add --then-balance`: planned on
        /// the filesystem as it will be after the add).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<Box<BalancePlan>>,
        /// `device add --then-balance`: the add's plan.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        add: Option<Box<AddPlan>>,
    },
    /// `device add --then-balance`: the add is done; the balance, planned
    /// again on the filesystem as it now is, starts.
    Added {
        /// What the add did.
        result: AddResult,
    },
    /// About twice a second.
    Progress {
        /// The counters.
        progress: Progress,
    },
    /// A signal arrived: pausing after the current chunk.
    Pausing,
    /// Resuming or following an existing balance.
    Notice {
        /// One sentence.
        message: String,
    },
    /// The last record.
    Result(BalanceResult),
}

impl RunRecord for BalanceRecord {
    fn progress(progress: Progress) -> Self {
        BalanceRecord::Progress { progress }
    }
    fn pausing() -> Self {
        BalanceRecord::Pausing
    }
    fn notice(message: String) -> Self {
        BalanceRecord::Notice { message }
    }
}

/// What a run does with a balance that exists already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Existing {
    /// A paused balance without conversion: resume it (`--resume`, or a
    /// run that finds one).
    Resume,
    /// A running balance without conversion: follow it until it ends.
    Follow,
}

/// A member device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Member {
    /// btrfs device id.
    pub devid: u64,
    /// Its path (empty when missing).
    pub path: String,
    /// Size btrfs uses.
    pub size: u64,
    /// Missing (not present).
    pub missing: bool,
}

/// `{"event":"plan","plan":...}`: the spread now, what moves, the spread
/// after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BalancePlan {
    /// Mount point.
    pub mount_point: PathBuf,
    /// The member devices.
    pub devices: Vec<Member>,
    /// A balance that exists and what the run does with it (`null`: it
    /// starts its own).
    pub existing: Option<Existing>,
    /// Each type and profile now (empty when the chunks could not be
    /// read, or while a balance runs).
    pub before: Vec<Spread>,
    /// As the replay of the balance leaves them.
    pub after: Vec<Spread>,
    /// What the balance relocates, one filter a type (empty: nothing to
    /// do).
    pub steps: Vec<Step>,
    /// Chunks relocated.
    pub chunks: u64,
    /// Bytes the kernel copies.
    pub used_bytes: u64,
    /// How long it takes at the rate the last balance on this filesystem
    /// ran at (`null`: none was measured here yet).
    #[serde(default)]
    pub estimate: Option<super::rate::Estimate>,
    /// The btrfs-progs command that does the same.
    pub equivalent_command: Vec<String>,
    /// Why it cannot go ahead (empty: it can).
    pub refused: Vec<Reason>,
}

/// `{"event":"result",...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BalanceResult {
    /// How it ended.
    pub outcome: Outcome,
    /// Each type and profile as the kernel left them (read again).
    pub after: Vec<Spread>,
    /// What a balance planned now would still relocate (empty: even).
    pub left: Vec<Step>,
    /// `paused`: bytes still to move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_remaining: Option<u64>,
    /// Logical bytes moved by this run.
    pub bytes_moved: u64,
    /// Seconds from the start to the end of the run.
    pub seconds: f64,
}

/// `balance MOUNT --status`: the balance that exists, and how even the
/// array is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusReport {
    /// Mount point.
    pub mount_point: PathBuf,
    /// The balance running or paused (`null`: none).
    pub balance: Option<BalanceInfo>,
    /// Each type and profile now (empty when the chunks cannot be read).
    pub spread: Vec<Spread>,
    /// What a balance planned now would relocate (empty: even).
    pub steps: Vec<Step>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_their_types() {
        let r = BalanceRecord::Result(BalanceResult {
            outcome: Outcome::Paused,
            after: vec![],
            left: vec![],
            bytes_remaining: Some(5),
            bytes_moved: 7,
            seconds: 1.5,
        });
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.contains("\"event\":\"result\""), "{s}");
        assert_eq!(serde_json::from_str::<BalanceRecord>(&s).unwrap(), r);
        let p = BalanceRecord::Notice {
            message: "following".into(),
        };
        let s = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<BalanceRecord>(&s).unwrap(), p);
    }
}
