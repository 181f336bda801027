//! The typed documents `convert` and `device add` print with `--json`
//! (docs/json.md): every one derives `Serialize + Deserialize`, so the CLI
//! prints them and tests read them back as these types.
//!
//! Sub-documents of other jobs (a `df` record, a `links` array ceiling) are
//! mirrored here with the same JSON shape, converted from the other job's
//! type; a unit test checks that the shapes stay equal.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::add::{AddPlan, AddResult};
use super::convert::{ConvertPlan, Outcome, Progress};
use crate::model::profile::Profile;

/// One JSON Lines record of `convert --json` (and of `device add --json
/// --then-convert`), tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ConvertRecord {
    /// The plan: a conversion's or an add's, or a resume's.
    Plan {
        /// A new conversion, or `device add --then-convert`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<PlanDoc>,
        /// `convert --resume`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<ResumePlan>,
    },
    /// `device add --then-convert`: the add is done.
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

/// The `plan` of a plan record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PlanDoc {
    /// `device add --then-convert` (its `then_convert` holds the conversion).
    Add(Box<AddPlan>),
    /// `convert`.
    Convert(Box<ConvertPlan>),
}

/// `{"event": "plan", "resume": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePlan {
    /// Data target of the paused balance.
    pub data: Option<Profile>,
    /// Metadata target.
    pub metadata: Option<Profile>,
    /// Bytes still outside the targets.
    pub bytes_remaining: u64,
}

/// `{"event": "result", ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultRecord {
    /// How it ended.
    pub outcome: Outcome,
    /// `completed`: the new `df` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<Vec<DfRecord>>,
    /// `paused`: bytes left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_remaining: Option<u64>,
}

/// A `df --json` record, as the completed conversion shows it (same shape
/// as `space`'s record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DfRecord {
    /// Block-group type (`data`, ...).
    #[serde(rename = "type")]
    pub bg_type: String,
    /// Profile (`raid1`, ...).
    pub profile: String,
    /// Allocated bytes (logical).
    pub total_bytes: u64,
    /// Used bytes.
    pub used_bytes: u64,
    /// Zoned filesystems: unusable until a zone reset.
    pub zone_unusable_bytes: Option<u64>,
    /// Exact (from the kernel).
    pub exact: bool,
    /// Error bounds (0 when exact).
    pub total_error_bytes: u64,
    /// Error bounds.
    pub used_error_bytes: u64,
    /// Error bounds.
    pub zone_unusable_error_bytes: Option<u64>,
}

impl From<&crate::model::space::SpaceRecord> for DfRecord {
    fn from(r: &crate::model::space::SpaceRecord) -> Self {
        Self {
            bg_type: r.bg_type.json_name().to_owned(),
            profile: r.profile.to_string(),
            total_bytes: r.total_bytes,
            used_bytes: r.used_bytes,
            zone_unusable_bytes: r.zone_unusable_bytes,
            exact: r.exact,
            total_error_bytes: r.total_error_bytes,
            used_error_bytes: r.used_error_bytes,
            zone_unusable_error_bytes: r.zone_unusable_error_bytes,
        }
    }
}

/// Whether a balance exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    pub device_errors: Vec<crate::admin::state::DeviceErrors>,
}

/// `convert --pause --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseReport {
    /// Always true on success (also when it was paused already).
    pub paused: bool,
}

/// `convert --cancel --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelReport {
    /// Always true on success.
    pub cancelled: bool,
}

/// `device add --json` without `--then-convert`: one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddReport {
    /// The plan.
    pub plan: AddPlan,
    /// What was done (absent with `--dry-run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<AddResult>,
}

/// A throughput figure (same shape as `links`' bandwidth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    /// After line encoding, bytes per second.
    pub encoded_bytes_per_sec: u64,
    /// Practical, low end.
    pub practical_low_bytes_per_sec: u64,
    /// Practical, high end.
    pub practical_high_bytes_per_sec: u64,
}

impl From<&crate::links::model::Bandwidth> for Rate {
    fn from(b: &crate::links::model::Bandwidth) -> Self {
        Self {
            encoded_bytes_per_sec: b.encoded_bytes_per_sec,
            practical_low_bytes_per_sec: b.practical_low_bytes_per_sec,
            practical_high_bytes_per_sec: b.practical_high_bytes_per_sec,
        }
    }
}

/// The read ceiling of the array for one data profile (same shape as
/// `links`' array ceiling).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceiling {
    /// Data profile.
    pub profile: Profile,
    /// Members.
    pub members: usize,
    /// One reader.
    pub one_reader: Option<Rate>,
    /// One reader at worst.
    pub one_reader_low: Option<Rate>,
    /// Many readers.
    pub many_readers: Option<Rate>,
    /// Load balanced to the members' speeds.
    pub balanced: Option<Rate>,
    /// With every drive on the link it was built for.
    pub potential: Option<Rate>,
    /// What holds it back.
    pub held_back_by: Vec<String>,
    /// Members without link information.
    pub without_link_info: Vec<String>,
    /// One or two sentences.
    pub summary: String,
}

impl From<&crate::links::model::ArrayCeiling> for Ceiling {
    fn from(c: &crate::links::model::ArrayCeiling) -> Self {
        let r = |b: &Option<crate::links::model::Bandwidth>| b.as_ref().map(Rate::from);
        Self {
            profile: c.profile,
            members: c.members,
            one_reader: r(&c.one_reader),
            one_reader_low: r(&c.one_reader_low),
            many_readers: r(&c.many_readers),
            balanced: r(&c.balanced),
            potential: r(&c.potential),
            held_back_by: c.held_back_by.clone(),
            without_link_info: c.without_link_info.clone(),
            summary: c.summary.clone(),
        }
    }
}

/// The array's read ceiling before and after a `device add`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throughput {
    /// Now.
    pub before: Ceiling,
    /// After the add (and the conversion, with `--then-convert`).
    pub after: Ceiling,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::links::model::{ArrayCeiling, Bandwidth};
    use crate::model::space::{BgProfile, BgType, SpaceRecord};

    #[test]
    fn mirrors_have_the_shape_of_the_originals() {
        let r = SpaceRecord::exact(
            BgType::Data,
            BgProfile::from_progs_name("RAID1").unwrap(),
            1 << 30,
            1 << 20,
            None,
        );
        assert_eq!(
            serde_json::to_value(DfRecord::from(&r)).unwrap(),
            serde_json::to_value(&r).unwrap()
        );
        let c = ArrayCeiling {
            profile: Profile::Raid0,
            members: 3,
            one_reader: Some(Bandwidth::from_encoded(7.8e9)),
            one_reader_low: None,
            many_readers: Some(Bandwidth::from_encoded(3.9e9)),
            balanced: None,
            potential: None,
            held_back_by: vec!["nvme2".into()],
            without_link_info: vec![],
            summary: "x".into(),
        };
        assert_eq!(
            serde_json::to_value(Ceiling::from(&c)).unwrap(),
            serde_json::to_value(&c).unwrap()
        );
    }

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
