//! The typed documents `convert` and `device add` print with `--json`
//! (docs/json.md): every one derives `Serialize + Deserialize`, so the CLI
//! prints them and tests read them back as these types.
//!
//! Sub-documents use the shared types: a `df` record is
//! [`crate::model::space::SpaceRecord`], an array ceiling
//! [`crate::hw::model::ArrayCeiling`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConvertPlan, Outcome, Progress};
use crate::model::profile::Profile;
use crate::report::envelope::Document;

/// One JSON Lines record of `convert --json`, tagged by `event`: the
/// `convert-record` document, whose schema is that of
/// `device::add::record::AddConvertRecord` (the same records, and the add's
/// own of `device add --then-convert`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ConvertRecord {
    /// The plan: a conversion's, or a resume's.
    Plan {
        /// A new conversion.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<Box<ConvertPlan>>,
        /// `convert --resume`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<ResumePlan>,
    },
    /// About twice a second.
    Progress {
        /// The counters.
        progress: Progress,
    },
    /// A signal arrived: pausing after the current chunk.
    Pausing,
    /// Resuming, following or waiting for an existing balance.
    Notice {
        /// One sentence.
        message: String,
    },
    /// `--background`: the conversion runs in this process.
    Background {
        /// Its process id.
        pid: i32,
    },
    /// The last record.
    Result(ResultRecord),
}

impl Document for ConvertRecord {
    const NAME: &'static str = "convert-record";
}

/// `{"event": "plan", "resume": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResumePlan {
    /// Data target of the paused balance.
    pub data: Option<Profile>,
    /// Metadata target.
    pub metadata: Option<Profile>,
    /// Bytes still outside the targets.
    pub bytes_remaining: u64,
}

/// `{"event": "result", ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResultRecord {
    /// How it ended.
    pub outcome: Outcome,
    /// `completed`: the new `df` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<Vec<crate::model::space::SpaceRecord>>,
    /// `paused`: bytes left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_remaining: Option<u64>,
}

/// Whether a balance exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BalanceKind {
    /// Running now.
    Running,
    /// Paused.
    Paused,
    /// None.
    None,
}

/// `convert --status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusReport {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Running, paused or none.
    pub balance: BalanceKind,
    /// Data target of the balance.
    pub data_target: Option<Profile>,
    /// Metadata target.
    pub metadata_target: Option<Profile>,
    /// Chunks expected (`null` without a balance).
    pub chunks_expected: Option<u64>,
    /// Chunks relocated.
    pub chunks_done: Option<u64>,
    /// Paused and remounted: the counters are 0.
    pub counters_reset: bool,
    /// Bytes still outside the targets (`null` without a balance).
    pub bytes_remaining: Option<u64>,
    /// Data profiles in use.
    pub data_profiles: Vec<Profile>,
    /// Metadata profiles in use.
    pub metadata_profiles: Vec<Profile>,
    /// Devices with recorded read or corruption errors (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_errors: Vec<crate::operation::state::DeviceErrors>,
}

/// `convert --pause --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PauseReport {
    /// Always true on success (also when it was paused already).
    pub paused: bool,
}

/// `convert --cancel --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CancelReport {
    /// Always true on success.
    pub cancelled: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_with_the_documented_keys() {
        let line = r#"{"event":"result","outcome":"paused","bytes_remaining":5}"#;
        let r: ConvertRecord = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), line);
        let line = r#"{"event":"pausing"}"#;
        let r: ConvertRecord = serde_json::from_str(line).unwrap();
        assert_eq!(r, ConvertRecord::Pausing);
        assert_eq!(serde_json::to_string(&r).unwrap(), line);
        let line =
            r#"{"event":"plan","resume":{"data":"raid1","metadata":null,"bytes_remaining":7}}"#;
        let r: ConvertRecord = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), line);
    }
}
