//! The records of `device add --then-convert --json`: a conversion's
//! ([`ConvertRecord`], which they include) and the add's own (its plan with
//! the conversion's inside, and "added"). Their type is the
//! `convert-record` document's schema.

use serde::{Deserialize, Serialize};

use super::{AddPlan, AddResult};
use crate::convert::ConvertPlan;
use crate::convert::Progress;
use crate::convert::report::{ResultRecord, ResumePlan};

/// One JSON Lines record of `convert --json` (and of `device add --json
/// --then-convert`), tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum AddConvertRecord {
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum PlanDoc {
    /// `device add --then-convert` (its `then_convert` holds the conversion).
    Add(Box<AddPlan>),
    /// `convert`.
    Convert(Box<ConvertPlan>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::report::ConvertRecord;

    /// Every record `convert` sends reads back as the same record of the
    /// document's type, byte for byte.
    #[test]
    fn convert_records_are_records_of_the_document() {
        for line in [
            r#"{"event":"result","outcome":"paused","bytes_remaining":5}"#,
            r#"{"event":"pausing"}"#,
            r#"{"event":"background","pid":42}"#,
            r#"{"event":"notice","message":"resuming"}"#,
            r#"{"event":"plan","resume":{"data":"raid1","metadata":null,"bytes_remaining":7}}"#,
        ] {
            let own: ConvertRecord = serde_json::from_str(line).unwrap();
            let doc: AddConvertRecord = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&own).unwrap(), line);
            assert_eq!(serde_json::to_string(&doc).unwrap(), line);
        }
    }
}
