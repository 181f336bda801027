//! The report as Prometheus metrics, in the text format node_exporter's
//! textfile collector reads (`--format prometheus`): one family per metric,
//! HELP and TYPE first, base units (bytes, seconds) in the names, counters
//! ending in `_total`.

use std::collections::BTreeMap;

use crate::model::finding::Severity;
use crate::report::metrics::Metrics;

use super::{DoctorReport, FsDiagnosis};

fn severity_value(s: Option<Severity>) -> f64 {
    f64::from(super::exit_status(s))
}

/// The metrics of a report.
pub fn render(r: &DoctorReport) -> String {
    let mut m = Metrics::default();
    m.add(
        "btrfs_lab_doctor_success",
        "gauge",
        "Whether btrfs-lab doctor could examine the filesystems (1) or failed (0).",
        &[],
        // A filesystem that could not be examined fails the run for
        // alerting, though the others' figures follow.
        if r.not_examined.is_empty() { 1.0 } else { 0.0 },
    );
    m.add(
        "btrfs_lab_doctor_last_run_timestamp_seconds",
        "gauge",
        "When btrfs-lab doctor ran, seconds since the epoch.",
        &[],
        r.timestamp_unix as f64,
    );
    m.add(
        "btrfs_lab_doctor_info",
        "gauge",
        "The btrfs-lab version that wrote these metrics (always 1).",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    m.add(
        "btrfs_lab_doctor_status",
        "gauge",
        "The worst finding over all filesystems: 0 ok or info, 1 warning, 2 critical (the exit status).",
        &[],
        severity_value(r.worst),
    );
    // The running kernel's counting of device errors (the same for every
    // filesystem): an upgrade across 7.1 flips it, and the alert on rising
    // counters waits out the jump that alone brings.
    if let Some(f) = r.filesystems.first() {
        use crate::model::kernel::{COUNTS_EVERY_BIO_ERROR, KernelVersion};
        m.add(
            "btrfs_lab_kernel_counts_every_bio_error",
            "gauge",
            "1 when the running kernel (7.1 and later) counts every failed bio in the device error counters, else 0.",
            &[],
            match KernelVersion::parse(&f.facts.kernel) {
                Some(k) if k >= COUNTS_EVERY_BIO_ERROR => 1.0,
                _ => 0.0,
            },
        );
    }
    for f in &r.filesystems {
        filesystem(&mut m, f);
    }
    m.render()
}

/// The metrics written when doctor could not look at all: alerting sees
/// `btrfs_lab_doctor_success 0` instead of stale figures.
pub(crate) fn render_failure(now: u64) -> String {
    let mut m = Metrics::default();
    m.add(
        "btrfs_lab_doctor_success",
        "gauge",
        "Whether btrfs-lab doctor could examine the filesystems (1) or failed (0).",
        &[],
        0.0,
    );
    m.add(
        "btrfs_lab_doctor_last_run_timestamp_seconds",
        "gauge",
        "When btrfs-lab doctor ran, seconds since the epoch.",
        &[],
        now as f64,
    );
    m.render()
}

/// The labels that name a filesystem: its mount point and uuid.
type FsLabels<'a> = [(&'a str, &'a str); 2];

fn filesystem(m: &mut Metrics, d: &FsDiagnosis) {
    let mp = d.mount_point.display().to_string();
    let fs: FsLabels<'_> = [("mountpoint", &mp), ("uuid", &d.uuid)];
    findings(m, d, &fs);
    devices(m, &d.facts, &fs);
    spaces(m, &d.facts, &fs);
    operations(m, &d.facts, &fs);
    scrub_and_probe(m, d, &fs);
}

/// The findings: the worst, counts by severity, by code.
fn findings(m: &mut Metrics, d: &FsDiagnosis, fs: &FsLabels<'_>) {
    m.add(
        "btrfs_lab_doctor_filesystem_status",
        "gauge",
        "The worst finding of a filesystem: 0 ok or info, 1 warning, 2 critical.",
        fs,
        severity_value(d.worst),
    );
    for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
        let n = d.findings.iter().filter(|f| f.severity == sev).count();
        m.add(
            "btrfs_lab_doctor_findings",
            "gauge",
            "Findings of a filesystem by severity.",
            &[fs[0], fs[1], ("severity", sev.name())],
            n as f64,
        );
    }
    let mut by_code: BTreeMap<(&str, Severity), usize> = BTreeMap::new();
    for f in &d.findings {
        *by_code.entry((f.code.as_str(), f.severity)).or_default() += 1;
    }
    let mut worst_by_code: BTreeMap<&str, Severity> = BTreeMap::new();
    for ((code, sev), n) in by_code {
        m.add(
            "btrfs_lab_doctor_finding",
            "gauge",
            "Findings of a filesystem by stable code and severity (how many).",
            &[fs[0], fs[1], ("code", code), ("severity", sev.name())],
            n as f64,
        );
        let w = worst_by_code.entry(code).or_insert(sev);
        *w = (*w).min(sev);
    }
    // The severity as the value: a finding whose severity changes (info to
    // warning as metadata fills) stays one series, so a graph and an alert
    // rule (`> 0`) follow it.
    for (code, sev) in worst_by_code {
        m.add(
            "btrfs_lab_doctor_finding_severity",
            "gauge",
            "Each finding code present on a filesystem, its worst severity as the value: 0 info, 1 warning, 2 critical.",
            &[fs[0], fs[1], ("code", code)],
            severity_value(Some(sev)),
        );
    }
}

/// The member devices: missing, sizes, error counters.
fn devices(m: &mut Metrics, facts: &super::FsFacts, fs: &FsLabels<'_>) {
    use super::members::MemberState;
    let vanished = facts
        .devices
        .iter()
        .filter(|d| d.state == MemberState::Vanished)
        .count();
    m.add(
        "btrfs_lab_devices_missing",
        "gauge",
        "Member devices missing: the kernel's missing ones and those whose block device is gone while the kernel still counts them (vanished).",
        fs,
        (facts.missing_count() + vanished as u64) as f64,
    );
    m.add(
        "btrfs_lab_devices_stale",
        "gauge",
        "Member devices back after they were gone (stale or returned) that no scrub of them has resynced since.",
        fs,
        facts
            .devices
            .iter()
            .filter(|d| matches!(d.state, MemberState::Stale | MemberState::Returned))
            .count() as f64,
    );
    for dev in &facts.devices {
        let devid = dev.devid.to_string();
        // node_exporter's btrfs collector names a member `btrfs_dev_uuid`
        // (and `device`, the basename): both are given so that its series
        // and these join.
        let dev_uuid = dev.dev_uuid.as_deref().unwrap_or("");
        let labels = [
            fs[0],
            fs[1],
            ("devid", devid.as_str()),
            ("device", dev.path.as_str()),
            ("btrfs_dev_uuid", dev_uuid),
        ];
        for state in [
            MemberState::Present,
            MemberState::Missing,
            MemberState::Vanished,
            MemberState::Stale,
            MemberState::Returned,
        ] {
            let [a, b, c, d, u] = labels;
            m.add(
                "btrfs_lab_device_state",
                "gauge",
                "1 for a member device's state (present, missing, vanished, stale, returned), 0 for the others.",
                &[a, b, c, d, u, ("state", state.as_str())],
                if dev.state == state { 1.0 } else { 0.0 },
            );
        }
        let rising: u64 = super::members::rising(dev.errors, dev.errors_before)
            .iter()
            .map(|(_, n)| n)
            .fold(0, |s, n| s.saturating_add(*n));
        m.add(
            "btrfs_lab_device_errors_rising",
            "gauge",
            "Errors a member device's counters gained since doctor's previous look (UINT64_MAX counters left out; 0 after a reset).",
            &labels,
            rising as f64,
        );
        m.add(
            "btrfs_lab_device_size_bytes",
            "gauge",
            "Bytes btrfs uses on a member device.",
            &labels,
            dev.size_bytes as f64,
        );
        m.add(
            "btrfs_lab_device_unallocated_bytes",
            "gauge",
            "Bytes of a member device not allocated to any chunk.",
            &labels,
            dev.unallocated_bytes() as f64,
        );
        if let Some(e) = dev.errors {
            // `kind` is btrfs-lab's name, `type` node_exporter's: both.
            let [a, b, c, d, u] = labels;
            for (kind, n) in e.valid_kinds() {
                m.add(
                    "btrfs_lab_device_errors_total",
                    "counter",
                    "Error counters of a member device (btrfs device stats), by kind; a counter at UINT64_MAX is left out (btrfs_lab_device_errors_invalid).",
                    &[a, b, c, d, u, ("kind", kind), ("type", kind)],
                    n as f64,
                );
            }
            for kind in e.invalid_kinds() {
                m.add(
                    "btrfs_lab_device_errors_invalid",
                    "gauge",
                    "1 for an error counter of a member device that reads UINT64_MAX: invalid, not a count.",
                    &[a, b, c, d, u, ("kind", kind), ("type", kind)],
                    1.0,
                );
            }
        }
    }
}

/// Allocated and used bytes by type and profile.
fn spaces(m: &mut Metrics, facts: &super::FsFacts, fs: &FsLabels<'_>) {
    for s in &facts.spaces {
        let t = s.bg_type.json_name();
        let p = s.profile.name();
        // node_exporter names these `block_group_type` and `mode`: both.
        let labels = [
            fs[0],
            fs[1],
            ("type", t),
            ("profile", p),
            ("block_group_type", t),
            ("mode", p),
        ];
        m.add(
            "btrfs_lab_space_allocated_bytes",
            "gauge",
            "Logical bytes allocated to block groups, by type and profile.",
            &labels,
            s.total_bytes as f64,
        );
        m.add(
            "btrfs_lab_space_used_bytes",
            "gauge",
            "Logical bytes used in block groups, by type and profile.",
            &labels,
            s.used_bytes as f64,
        );
    }
}

/// A balance, and the kernel's exclusive operation.
fn operations(m: &mut Metrics, facts: &super::FsFacts, fs: &FsLabels<'_>) {
    let (running, paused) = match facts.balance {
        Some(b) => (b.running, !b.running),
        None => (false, false),
    };
    m.add(
        "btrfs_lab_balance_running",
        "gauge",
        "A balance or conversion is running (1) or not (0).",
        fs,
        f64::from(u8::from(running)),
    );
    m.add(
        "btrfs_lab_balance_paused",
        "gauge",
        "A balance or conversion is paused (1) or not (0).",
        fs,
        f64::from(u8::from(paused)),
    );
    // One series per operation the kernel names, 0 or 1: which one runs
    // is the value, never a label that changes (sysfs, 5.10 and later).
    if let Some(op) = facts.exclusive_operation.as_deref() {
        for name in [
            "device add",
            "device remove",
            "device replace",
            "resize",
            "swap activate",
        ] {
            m.add(
                "btrfs_lab_exclusive_operation_running",
                "gauge",
                "The kernel's exclusive operation (sysfs exclusive_operation) running on a filesystem: 1 for the one that runs, 0 for the others (balances: btrfs_lab_balance_running).",
                &[fs[0], fs[1], ("operation", name)],
                f64::from(u8::from(op.trim() == name)),
            );
        }
    }
}

/// The last scrub (its end, its errors) and probe-dio's verdict.
fn scrub_and_probe(m: &mut Metrics, d: &FsDiagnosis, fs: &FsLabels<'_>) {
    let facts = &d.facts;
    if let Some(last) = facts
        .scrub
        .iter()
        .filter(|s| s.started > 0)
        .map(|s| s.started + s.duration)
        .max()
    {
        m.add(
            "btrfs_lab_scrub_last_end_timestamp_seconds",
            "gauge",
            "When the last recorded scrub ended, seconds since the epoch (absent: never).",
            fs,
            last as f64,
        );
    }
    // The last complete scrub (every device read to its end): its age in
    // PromQL is time() - this; scrub --all's timer keeps it under 30 days.
    let complete = !facts.scrub.is_empty() && facts.scrub.iter().all(|s| s.finished);
    if let Some(end) = facts
        .scrub
        .iter()
        .filter(|s| s.started > 0 && complete)
        .map(|s| s.started + s.duration)
        .max()
    {
        m.add(
            "btrfs_lab_scrub_last_complete_timestamp_seconds",
            "gauge",
            "When the last complete scrub (every device read to its end) ended, seconds since the epoch (absent: none on record).",
            fs,
            end as f64,
        );
    }
    if let Some(took) = facts
        .scrub
        .iter()
        .map(|s| s.duration)
        .max()
        .filter(|_| !facts.scrub.is_empty())
    {
        m.add(
            "btrfs_lab_scrub_last_recorded_duration_seconds",
            "gauge",
            "How long the last recorded scrub ran (its longest device), seconds.",
            fs,
            took as f64,
        );
    }
    m.add(
        "btrfs_lab_scrub_in_progress",
        "gauge",
        "1 while a scrub (btrfs-lab's or btrfs-progs') runs on the filesystem, as the kernel says.",
        fs,
        if facts.scrub_running.is_some() {
            1.0
        } else {
            0.0
        },
    );
    if let Some((done, total)) = facts.scrub_running {
        m.add(
            "btrfs_lab_scrub_in_progress_bytes_scrubbed",
            "gauge",
            "Bytes the running scrub read so far (this run).",
            fs,
            done as f64,
        );
        m.add(
            "btrfs_lab_scrub_in_progress_bytes_to_read",
            "gauge",
            "Bytes the running scrub reads in all (this run).",
            fs,
            total as f64,
        );
    }
    if let Some(v) = d.deep.as_ref().and_then(|x| x.probe_verdict.as_deref()) {
        m.add(
            "btrfs_lab_probe_dio_verdict",
            "gauge",
            "probe-dio's verdict on the filesystem (doctor --deep): 1 for the verdict found.",
            &[fs[0], fs[1], ("verdict", v)],
            1.0,
        );
    }
    let sum = |f: fn(&super::scrub::ScrubDevice) -> u64| -> f64 {
        facts.scrub.iter().map(f).sum::<u64>() as f64
    };
    for (kind, v) in [
        ("found", sum(|s| s.errors_found)),
        ("corrected", sum(|s| s.corrected)),
        ("uncorrectable", sum(|s| s.uncorrectable)),
    ] {
        m.add(
            "btrfs_lab_scrub_errors",
            "gauge",
            "Errors of the last recorded scrub, by outcome.",
            &[fs[0], fs[1], ("kind", kind)],
            v,
        );
    }
}
