//! `doctor --deep`: what costs time or writes a little, through the other
//! jobs' public entry points: probe-dio on the filesystem (its scratch files
//! are removed on every path), and the PCIe links of the member drives with
//! their NVMe SMART thermal counters.

use serde::{Deserialize, Serialize};

use crate::links::{self, LinksOptions};
use crate::model::finding::{Finding, Severity};
use crate::probe::verdict::Verdict;
use crate::probe::{self, ProbeOptions};
use crate::sys::root::SysRoot;
use crate::sys::tools::display_argv;

use super::facts::FsFacts;

/// Bytes per file per round of the deep probe (probe-dio's default is
/// 256 MiB; a quarter keeps doctor quick and still far above noise).
pub const PROBE_BYTES: u64 = 64 << 20;

/// What the deep checks found out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeepFacts {
    /// probe-dio's verdict (`direct`, `buffered-fallback`, `profile-forced`,
    /// `inconclusive`), absent when the probe could not run.
    pub probe_verdict: Option<String>,
    /// Why the probe could not run.
    pub probe_error: Option<String>,
    /// Why the links could not be read (not NVMe, ...).
    pub links_error: Option<String>,
}

/// Runs the deep checks on one filesystem: findings, and the facts.
pub fn deep(root: &SysRoot, f: &FsFacts) -> (Vec<Finding>, DeepFacts) {
    let mut out = Vec::new();
    let mut facts = DeepFacts::default();
    let m = f.mount_point.display().to_string();

    let mut opts = ProbeOptions::new(&f.mount_point);
    opts.size_bytes = PROBE_BYTES;
    opts.sysroot = root.clone();
    match probe::run(&opts, &mut |_, _| {}) {
        Ok(r) => {
            facts.probe_verdict = Some(r.verdict.name().to_owned());
            let (code, severity) = match r.verdict {
                Verdict::Direct => ("", Severity::Info),
                Verdict::BufferedFallback => ("odirect-buffered-fallback", Severity::Warning),
                Verdict::ProfileForced => ("odirect-profile-forced", Severity::Warning),
                Verdict::Inconclusive => ("odirect-inconclusive", Severity::Info),
            };
            if !code.is_empty() {
                let mut fi = Finding::new(code, severity, r.summary.clone(), r.explanation.clone())
                    .with_evidence("probe-dio verdict", r.verdict.name());
                for reason in &r.reasons {
                    fi = fi.with_evidence("reason", reason.clone());
                }
                if let Some(fix) = &r.fix {
                    fi = fi.with_evidence("what to do", fix.clone());
                }
                out.push(fi.with_command(display_argv(&["btrfs-lab", "probe-dio", &m])));
            }
        }
        Err(e) => {
            facts.probe_error = Some(e.to_string());
            out.push(
                Finding::new(
                    "deep-probe-failed",
                    Severity::Info,
                    "the O_DIRECT probe could not run",
                    "doctor --deep writes two small test files to find out whether O_DIRECT writes are direct",
                )
                .with_evidence("error", e.to_string())
                .with_command(display_argv(&["btrfs-lab", "probe-dio", &m])),
            );
        }
    }

    let lopts = LinksOptions {
        sysroot: root.clone(),
        targets: vec![m.clone()],
        thermal: true,
    };
    match links::run(&lopts) {
        Ok(r) => {
            for l in r.all_findings() {
                let kind = serde_json::to_value(l.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "finding".to_owned());
                let severity = match l.severity {
                    links::model::Severity::Warning => Severity::Warning,
                    links::model::Severity::Info => Severity::Info,
                };
                let mut fi = Finding::new(
                    &format!("link-{kind}"),
                    severity,
                    l.message.clone(),
                    "a PCIe link below what the drive can do, or a drive that throttles, caps the array's throughput",
                )
                .with_evidence("devices", l.devices.join(", "));
                fi = fi.with_command(
                    l.hint
                        .clone()
                        .unwrap_or_else(|| display_argv(&["btrfs-lab", "links", "--thermal", &m])),
                );
                out.push(fi);
            }
        }
        Err(e) => facts.links_error = Some(e.to_string()),
    }
    (out, facts)
}
