//! Findings: something wrong (or worth knowing) about a filesystem or its
//! hardware, with a stable code, a severity, the numbers behind it, why it
//! matters and the exact command that fixes or investigates it. `doctor`
//! ranks them; `df`/`usage` (and their `--parse`) show the same ones, so a
//! finding is computed once, by pure code, and rendered everywhere.
//!
//! Every code is in one catalog ([`catalog`]: its meaning, default severity
//! and emitters; `docs/findings.md` is generated from it), and every
//! severity that depends on figures is decided in one place ([`rules`]).

pub mod catalog;
pub mod rules;
pub mod short;

use serde::{Deserialize, Serialize};

pub use catalog::Code;

/// How bad a finding is. Ordered worst first, so sorting puts the worst on
/// top; the exit status of `doctor` follows the worst (0 ok / 1 warning /
/// 2 critical, as monitoring plugins do).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Data at risk, or about to be (ENOSPC near, corruption without a good
    /// copy, a missing device).
    Critical,
    /// Something to fix (costs throughput or redundancy, or will bite later).
    Warning,
    /// Worth knowing; nothing to do unless it was not intended.
    Info,
}

impl Severity {
    /// The name in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Stable identifier (`metadata-nearly-full`, `device-errors`, ...):
    /// alerting rules and playbooks match on it; never renamed
    /// (docs/findings.md lists them).
    pub code: Code,
    /// How bad.
    pub severity: Severity,
    /// One line: what is wrong.
    pub title: String,
    /// The numbers behind it, as (name, value) in words a person reads.
    pub evidence: Vec<Evidence>,
    /// Why it matters, in a sentence or two.
    pub why: String,
    /// The exact command that fixes or investigates it, when there is one.
    pub command: Option<String>,
}

/// One figure behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evidence {
    /// What was measured or read (`metadata used`).
    pub name: String,
    /// Its value as text (`99.9% of 1.00GiB`).
    pub value: String,
}

impl Finding {
    /// A finding of `code` with its default severity, no evidence and no
    /// command yet.
    pub fn new(code: Code, title: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            code,
            severity: code.default_severity(),
            title: title.into(),
            evidence: Vec::new(),
            why: why.into(),
            command: None,
        }
    }

    /// Sets the severity a rule of [`rules`] decided from the figures.
    pub(crate) fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// Adds a figure.
    pub(crate) fn with_evidence(mut self, name: &str, value: impl Into<String>) -> Self {
        self.evidence.push(Evidence {
            name: name.to_owned(),
            value: value.into(),
        });
        self
    }

    /// Sets the command to run.
    pub(crate) fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }
}

/// Sorts worst first (stable, so equal findings keep their order).
pub(crate) fn rank(findings: &mut [Finding]) {
    findings.sort_by_key(|f| f.severity);
}

/// `device-missing`: `missing` devices (their devids, when listed) of
/// `total` are gone; what each profile in use loses and what to do, for
/// every command that sees it (doctor, usage).
pub(crate) fn device_missing(
    missing: u32,
    devids: &[u64],
    total: u64,
    data: &[crate::model::profile::Profile],
    meta: &[crate::model::profile::Profile],
    mount: &str,
) -> Finding {
    let lossy = data
        .iter()
        .chain(meta)
        .any(|p| p.geometry().tolerated_failures < missing);
    let why = if lossy {
        "a profile in use has no copy of what the missing device held: mount it read-only (mount -o degraded,ro DEVICE MOUNT) and copy out what is intact with btrfs-lab rescue; never put degraded in fstab, and do not convert while a device is missing"
    } else {
        "every byte still has a copy, but one failure more loses data: replace the device (or remove it, when the others have room) now; a degraded mount writes new chunks without redundancy, so never put degraded in fstab, and do not convert while a device is missing (replace or remove it)"
    };
    let mut fi = Finding::new(
        Code::DeviceMissing,
        format!("{missing} device(s) of {total} missing"),
        why,
    )
    .with_evidence(
        "devices",
        format!("{} of {total}", total.saturating_sub(u64::from(missing))),
    );
    for d in devids {
        fi = fi.with_evidence("missing devid", d.to_string());
    }
    for (kind, list) in [("data", data), ("metadata", meta)] {
        for p in list {
            fi = fi.with_evidence(
                &format!("{kind} {}", p.name()),
                p.loss_when_missing(missing),
            );
        }
    }
    let devid = devids.first().map_or("DEVID".to_owned(), u64::to_string);
    use crate::sys::tools::display_argv;
    fi.with_command(if lossy {
        display_argv(&["btrfs-lab", "rescue", mount, "--copy-to", "DIR"])
    } else {
        format!(
            "{}  (or, when the others have room: {})",
            display_argv(&["btrfs-lab", "device", "replace", mount, &devid, "NEW"]),
            display_argv(&["btrfs-lab", "device", "remove", mount, "missing"])
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_commands_quote_the_mount_point() {
        use crate::model::profile::Profile;
        use crate::sys::tools::tests::{HOSTILE, shell_reads_back};
        for m in HOSTILE.iter().filter(|m| !m.is_empty()) {
            let f = device_missing(1, &[2], 2, &[Profile::Single], &[Profile::Dup], m);
            let printed = f.command.clone().unwrap();
            assert_eq!(
                shell_reads_back(&printed),
                ["btrfs-lab", "rescue", m, "--copy-to", "DIR"],
                "{printed}"
            );
            // JSON carries the same text.
            let json = serde_json::to_value(&f).unwrap();
            assert_eq!(json["command"], printed.as_str());
            let f = device_missing(1, &[2], 2, &[Profile::Raid1], &[Profile::Raid1], m);
            let printed = f.command.unwrap();
            let (replace, rest) = printed
                .split_once("  (or, when the others have room: ")
                .unwrap();
            assert_eq!(
                shell_reads_back(replace),
                ["btrfs-lab", "device", "replace", m, "2", "NEW"]
            );
            assert_eq!(
                shell_reads_back(rest.strip_suffix(')').unwrap()),
                ["btrfs-lab", "device", "remove", m, "missing"]
            );
        }
    }

    #[test]
    fn worst_first_and_stable() {
        let mut v = vec![
            Finding::new(Code::ScrubNeverRun, "a", ""),
            Finding::new(Code::DeviceMissing, "b", ""),
            Finding::new(Code::ScrubOld, "c", ""),
            Finding::new(Code::MountDegraded, "d", ""),
        ];
        rank(&mut v);
        let codes: Vec<&str> = v.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(
            codes,
            [
                "device-missing",
                "mount-degraded",
                "scrub-old",
                "scrub-never-run"
            ]
        );
        let json = serde_json::to_string(&v[0]).unwrap();
        assert!(json.contains("\"severity\":\"critical\""), "{json}");
        let back: Finding = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v[0]);
    }
}
