//! `device remove`'s documents: its progress, what was removed, its report.

use serde::{Deserialize, Serialize};

use super::plan::RemovePlan;
use crate::device::redundancy::RedundancyCheck;

/// Where a remove is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemoveProgress {
    /// The device being removed.
    pub devid: u64,
    /// Its place in the plan (1-based) and the count.
    pub step: usize,
    /// Steps.
    pub steps: usize,
    /// Bytes on it when its removal began.
    pub bytes_start: u64,
    /// Bytes still on it.
    pub bytes_left: u64,
    /// Bytes per second over the last moves (20 s window); 0 while the
    /// rate is measured, stalled or stopping.
    pub rate_bytes_per_sec: f64,
    /// Seconds left for this device; `null` until the estimate is stable.
    pub eta_seconds: Option<f64>,
    /// What the relocation is doing, as far as the counts tell.
    #[serde(default = "crate::report::progress::running")]
    pub pace: crate::report::progress::Pace,
}

impl RemoveProgress {
    /// As the one progress renderer reads it: bytes moved off the device.
    pub fn reading(&self) -> crate::report::progress::Reading {
        crate::report::progress::Reading {
            done_bytes: self.bytes_start.saturating_sub(self.bytes_left),
            total_bytes: self.bytes_start,
            rate_bytes_per_sec: (self.rate_bytes_per_sec > 0.0).then_some(self.rate_bytes_per_sec),
            eta_seconds: self.eta_seconds,
            pace: self.pace,
            idle_seconds: 0.0,
        }
    }

    /// Which device of the plan: `device 3, 1 of 2`.
    pub fn step(&self) -> String {
        format!("device {}, {} of {}", self.devid, self.step, self.steps)
    }
}

/// One device removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Removed {
    /// Its devid.
    pub devid: u64,
    /// Its path.
    pub path: String,
    /// Bytes moved off it.
    pub bytes_moved: u64,
    /// Seconds.
    pub seconds: f64,
}

/// What the remove did, verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemoveResult {
    /// The devices removed, in order.
    pub removed: Vec<Removed>,
    /// The devices now, by devid.
    pub devices: Vec<crate::operation::state::MemberDevice>,
    /// Every chunk's redundancy after it.
    pub redundancy: RedundancyCheck,
    /// What to do next, read from the filesystem after it (`btrfs-lab
    /// balance` when chunks are narrower than the array or unevenly
    /// spread; absent: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Where the time went: the kernel's relocation beside btrfs-lab's
    /// own work before and after it.
    #[serde(default)]
    pub phases: crate::operation::state::Phases,
}

/// `device remove --json`: the plan, and what was done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemoveReport {
    /// The plan.
    pub plan: RemovePlan,
    /// What was done and verified (absent with `--dry-run`, a refusal, or
    /// when a signal stopped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RemoveResult>,
    /// A signal stopped it: the device in progress is still a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<RemoveStopped>,
}

impl RemoveReport {
    /// The plan alone: its record before anything is done.
    pub fn planned(plan: &RemovePlan) -> Self {
        RemoveReport {
            plan: plan.clone(),
            result: None,
            stopped: None,
        }
    }

    /// How a run ended: done and verified.
    pub(crate) fn done(plan: &RemovePlan, result: RemoveResult) -> Self {
        RemoveReport {
            result: Some(result),
            ..Self::planned(plan)
        }
    }

    /// How a run ended: a signal stopped it (the device in progress is
    /// still a member).
    pub(crate) fn stopped(plan: &RemovePlan, stopped: RemoveStopped) -> Self {
        RemoveReport {
            stopped: Some(stopped),
            ..Self::planned(plan)
        }
    }
}

/// A remove a signal stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemoveStopped {
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub signal: String,
    /// Removed before it.
    pub removed: Vec<Removed>,
    /// The device that is still a member.
    pub devid: u64,
    /// Bytes still on it.
    pub bytes_left: u64,
}
