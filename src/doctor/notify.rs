//! `doctor --notify`: tells at once when a member's state changed since
//! the last look (missing, vanished, stale, returned) or its error counters
//! rose: one event per such finding, to the systemd journal (with a
//! `MESSAGE_ID` per code, for `journalctl MESSAGE_ID=...` and log
//! alerting) or to a program the administrator installed. A state already
//! told at an earlier look is not told again: a udev-triggered run and the
//! timer's runs after it notify once.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{DoctorReport, FsDiagnosis};
use crate::error::Result;
use crate::model::finding::{Code, Finding, Severity};

/// Where `--notify` sends events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notify {
    /// The systemd journal (`--notify journal`).
    Journal,
    /// A program run with `CODE SEVERITY FSID MOUNT DEVID TITLE` as its
    /// arguments (`--notify /usr/local/sbin/page-me`).
    Program(PathBuf),
}

impl Notify {
    /// `journal`, or the path of a program that root owns and only root
    /// can change (anything else is refused with the reason).
    pub fn parse(s: &str) -> Result<Self> {
        if s == "journal" {
            return Ok(Notify::Journal);
        }
        let p = PathBuf::from(s);
        crate::sys::tools::notify::check_hook(&p)?;
        Ok(Notify::Program(p))
    }
}

/// One event told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Event {
    /// The finding's code.
    pub code: Code,
    /// Its severity.
    pub severity: Severity,
    /// Filesystem UUID.
    pub fsid: String,
    /// Mount point.
    pub mount_point: PathBuf,
    /// The member's device id.
    pub devid: u64,
    /// The finding's title.
    pub title: String,
}

/// The journal's `MESSAGE_ID` of each code told (fixed: match on them).
pub fn message_id(code: Code) -> &'static str {
    match code {
        Code::DeviceMissing => "55e84e10031244d490e9936f3b7e2ac2",
        Code::DeviceVanished => "393a8ca9dd044c5ab3bc6675643e8ba7",
        Code::DeviceStale => "e823ac0de7b34c38b43c0b17bb50f57e",
        Code::DeviceReturned => "f58d2728ddd744edb8d48555265d7917",
        _ => "2a289ef845cf4572bd05e1f77c0afc03",
    }
}

/// The codes told, and whether one is.
const TOLD: [Code; 5] = [
    Code::DeviceMissing,
    Code::DeviceVanished,
    Code::DeviceStale,
    Code::DeviceReturned,
    Code::DeviceErrorsRising,
];

/// The devids a finding is about (its `devid` and `missing devid`
/// evidence).
fn devids(f: &Finding) -> Vec<u64> {
    f.evidence
        .iter()
        .filter(|e| e.name == "devid" || e.name == "missing devid")
        .filter_map(|e| e.value.parse().ok())
        .collect()
}

/// The events of one filesystem: each member finding about a member whose
/// state began at this look, and every rise of error counters.
pub fn events_of(d: &FsDiagnosis) -> Vec<Event> {
    let mut out = Vec::new();
    for f in d.findings.iter().filter(|f| TOLD.contains(&f.code)) {
        for devid in devids(f) {
            let new = f.code == Code::DeviceErrorsRising
                || d.facts
                    .devices
                    .iter()
                    .any(|m| m.devid == devid && m.state_new);
            if new {
                out.push(Event {
                    code: f.code,
                    severity: f.severity,
                    fsid: d.uuid.clone(),
                    mount_point: d.mount_point.clone(),
                    devid,
                    title: f.title.clone(),
                });
            }
        }
    }
    out
}

/// Every event of a report.
pub fn events(r: &DoctorReport) -> Vec<Event> {
    r.filesystems.iter().flat_map(events_of).collect()
}

/// Tells each event; the errors of those that could not be told.
pub fn tell(to: &Notify, events: &[Event]) -> Vec<crate::error::Error> {
    events
        .iter()
        .filter_map(|e| tell_one(to, e).err())
        .collect()
}

fn tell_one(to: &Notify, e: &Event) -> Result<()> {
    let mount = e.mount_point.display().to_string();
    let devid = e.devid.to_string();
    match to {
        Notify::Journal => {
            let priority = match e.severity {
                Severity::Critical => "2",
                Severity::Warning => "4",
                Severity::Info => "6",
            };
            let message = format!("btrfs {mount}: {}", e.title);
            crate::sys::tools::notify::journal_send(&[
                ("MESSAGE", &message),
                ("MESSAGE_ID", message_id(e.code)),
                ("PRIORITY", priority),
                ("SYSLOG_IDENTIFIER", "btrfs-lab"),
                ("BTRFS_LAB_CODE", e.code.as_str()),
                ("BTRFS_LAB_SEVERITY", e.severity.name()),
                ("BTRFS_LAB_FSID", &e.fsid),
                ("BTRFS_LAB_MOUNT", &mount),
                ("BTRFS_LAB_DEVID", &devid),
            ])
        }
        Notify::Program(p) => crate::sys::tools::notify::run_hook(
            p,
            &[
                e.code.as_str().to_owned(),
                e.severity.name().to_owned(),
                e.fsid.clone(),
                mount,
                devid,
                e.title.clone(),
            ],
        ),
    }
}
