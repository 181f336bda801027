//! `bench --compare A B [C...]`: per test, the results of two or more saved
//! runs (`--json` files or history ids), each run's ratio to the first, and
//! whether the difference is beyond the runs' own noise; and what changed in
//! the set-up between them (kernel, mount options, members, profile...).
//! The set-up and the noise rule are also what `bench --history` uses.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profile::Direction;
use super::report::{BenchReport, REPORT_VERSION, Status, TestResult};
use crate::error::{Error, ErrorKind, Result};
use crate::parse::size::format_iec;
use crate::report::text::{escape_control, escape_path};
use crate::sys::fs::beneath::read_input_file;

/// One test in the reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CompareRow {
    /// `SEQ1M Q8T1`.
    pub name: String,
    /// Read or write.
    pub direction: Direction,
    /// The first report's result, bytes per second (null: missing or
    /// flagged).
    pub a_bytes_per_sec: Option<f64>,
    /// The second report's result.
    pub b_bytes_per_sec: Option<f64>,
    /// B / A.
    pub ratio: Option<f64>,
    /// A's IOPS.
    pub(crate) a_iops: Option<f64>,
    /// B's IOPS.
    pub(crate) b_iops: Option<f64>,
    /// Why there is no ratio, if there is none.
    pub note: Option<String>,
    /// Every report's figure, in the order of `reports` (the first two are
    /// also in `a_*`/`b_*`).
    #[serde(default)]
    pub figures: Vec<ComparedFigure>,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The first report's name (its path, or `#ID` from the history).
    pub a: String,
    /// The second report's name.
    pub b: String,
    /// What differs between the first two set-ups (kernel, profile, NOCOW,
    /// ...); `reports[].changes` has it for every report.
    pub differences: Vec<String>,
    /// One row per test of any report.
    pub rows: Vec<CompareRow>,
    /// Every report compared, in the order given; the first is the
    /// baseline the others are compared with.
    #[serde(default)]
    pub reports: Vec<ComparedReport>,
    /// The smallest relative difference ever called beyond the noise
    /// ([`MIN_NOISE`]).
    #[serde(default)]
    pub min_noise: f64,
}

/// One report of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ComparedReport {
    /// Its path, or `#ID` for a run from the history.
    pub name: String,
    /// Its id in the history database, when it came from there.
    pub history_id: Option<i64>,
    /// When it ran (RFC 3339), when known.
    pub time: Option<String>,
    /// Its set-up.
    pub setup: Setup,
    /// What differs from the first report's set-up.
    pub changes: Vec<String>,
}

/// One report's figure in a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ComparedFigure {
    /// Median bandwidth, bytes per second (null: not run or flagged).
    pub bytes_per_sec: Option<f64>,
    /// Best run's bandwidth (CrystalDiskMark's convention).
    pub best_bytes_per_sec: Option<f64>,
    /// Median IOPS.
    pub iops: Option<f64>,
    /// p99 completion latency, microseconds.
    pub clat_p99_us: Option<f64>,
    /// Rounds behind the figure.
    pub rounds: u32,
    /// Its spread over its rounds: (fastest − slowest) / median; null for
    /// a single round.
    pub spread: Option<f64>,
    /// This figure / the first report's (null for the first, or when
    /// either is missing or flagged).
    pub ratio: Option<f64>,
    /// The noise the ratio is judged against: the larger spread of the
    /// two, at least [`MIN_NOISE`].
    pub noise: Option<f64>,
    /// The difference from the first report exceeds the noise of both:
    /// the ranges of their rounds do not overlap and the ratio is further
    /// from 1 than `noise`.
    pub beyond_noise: Option<bool>,
    /// Why there is no figure (`not run`, `flagged`).
    pub note: Option<String>,
}

/// Reads a saved `bench --json` report.
/// Largest report read (a suite report is tens of KiB).
pub(crate) const MAX_REPORT: u64 = 16 << 20;

/// Reads a saved `bench --json` suite report: a regular file of at most
/// [`MAX_REPORT`] bytes (`sys::fs::beneath::read_input_file`: no FIFO, device
/// or other user's link), a UTF-8 byte-order mark allowed. Another kind of
/// document is named ("a bench --sustained report"), not parsed as a suite.
const HINT: &str = "save suite reports with: btrfs-lab bench --json DIR > FILE.json";

/// Reads a saved suite report (bounded, a regular file only) for `--compare`.
pub fn load(path: &Path) -> Result<BenchReport> {
    load_input(path).map(|i| i.report)
}

/// Reads a saved suite report with what its envelope says: when it ran and
/// which btrfs-lab made it.
pub fn load_input(path: &Path) -> Result<Input> {
    let shown = escape_path(path);
    let bytes = read_input_file(path, MAX_REPORT, "a bench report")?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Error::new(
            ErrorKind::Parse,
            format!("{shown} is not a bench --json report: it is not UTF-8 text"),
        )
        .with_hint(HINT)
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!("{shown} is not a bench --json report: not JSON ({e})"),
        )
        .with_hint(HINT)
    })?;
    let document = value
        .get("btrfs_lab")
        .and_then(|e| e.get("document"))
        .and_then(|d| d.as_str())
        .map(str::to_owned);
    let mode = value
        .get("mode")
        .and_then(|m| m.as_str())
        .map(str::to_owned);
    let kind = match (document.as_deref(), mode.as_deref()) {
        (Some("bench"), _) | (None, None) => None,
        (Some("bench-sustained"), _) | (None, Some("sustained")) => {
            Some("a bench --sustained report")
        }
        (Some("bench-metadata"), _) | (None, Some("metadata")) => {
            Some("a bench --small-files report")
        }
        (Some("bench-compare"), _) => Some("a bench --compare result"),
        (Some(d), _) if d.starts_with("bench-profiles") => {
            Some("a bench --compare-profiles report")
        }
        (Some(_), _) | (None, Some(_)) => Some("another btrfs-lab command's output"),
    };
    if let Some(kind) = kind {
        return Err(Error::new(
            ErrorKind::Parse,
            format!("{shown} is {kind}; --compare compares suite reports"),
        )
        .with_hint(HINT));
    }
    let envelope = |key: &str| {
        value
            .get("btrfs_lab")
            .and_then(|e| e.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let (time, version) = (envelope("time"), envelope("version"));
    let r: BenchReport = serde_json::from_value(value).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!(
                "{shown} is not a bench --json report: {}",
                escape_control(&e.to_string())
            ),
        )
        .with_hint(HINT)
    })?;
    if r.report_version != REPORT_VERSION {
        return Err(Error::new(
            ErrorKind::Parse,
            format!(
                "{shown} has report version {}, this btrfs-lab reads version {REPORT_VERSION}",
                r.report_version
            ),
        ));
    }
    Ok(Input {
        name: shown,
        history_id: None,
        time,
        version,
        report: r,
    })
}

/// What a bench ran on and with: the fields two runs are compared by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Setup {
    /// Host name.
    pub hostname: String,
    /// `uname -r`.
    pub kernel: String,
    /// `fio --version`.
    pub fio_version: String,
    /// The btrfs-lab that ran it, when known.
    pub btrfs_lab_version: Option<String>,
    /// The filesystem's UUID.
    pub fs_uuid: Option<String>,
    /// Its mount point.
    pub mount_point: String,
    /// Mount options, each once.
    pub mount_options: Vec<String>,
    /// Data profiles (`raid0`).
    pub data_profiles: Vec<String>,
    /// Member devices.
    pub members: Vec<String>,
    /// Test set (`default`, `nvme`, `custom`).
    pub profile: String,
    /// The test file kept checksums (`--cow`).
    pub cow: bool,
    /// Compression mount option.
    pub compression: Option<String>,
    /// Test file size.
    pub size_bytes: u64,
    /// Rounds per test.
    pub rounds: u32,
}

impl Setup {
    /// The set-up of a report; `version` is the btrfs-lab that made it.
    pub fn of(r: &BenchReport, version: Option<&str>) -> Setup {
        let mut mount_options: Vec<String> = Vec::new();
        for o in &r.target.mount_options {
            if !mount_options.contains(o) {
                mount_options.push(o.clone());
            }
        }
        Setup {
            hostname: r.system.hostname.clone(),
            kernel: r.system.kernel.clone(),
            fio_version: r.system.fio_version.clone(),
            btrfs_lab_version: version.map(str::to_owned),
            fs_uuid: r.target.uuid.clone(),
            mount_point: r.target.mount_point.to_string_lossy().into_owned(),
            mount_options,
            data_profiles: r
                .target
                .data_profiles
                .iter()
                .map(|p| p.to_string())
                .collect(),
            members: r.target.devices.iter().map(|d| d.path.clone()).collect(),
            profile: r.parameters.profile.clone(),
            cow: !r.test_file.nocow,
            compression: r.target.compression_option.clone(),
            size_bytes: r.parameters.size_bytes,
            rounds: r.parameters.runs,
        }
    }
}

/// What changed from `a` to `b`, one phrase each (`kernel: 6.12.9 →
/// 6.18.1`, `mount options: +noatime −relatime`); empty when nothing did.
pub fn setup_changes(a: &Setup, b: &Setup) -> Vec<String> {
    let mut out = Vec::new();
    let mut diff = |what: &str, x: &str, y: &str| {
        if x != y {
            out.push(format!("{what}: {x} → {y}"));
        }
    };
    diff("host", &a.hostname, &b.hostname);
    diff("kernel", &a.kernel, &b.kernel);
    diff("fio", &a.fio_version, &b.fio_version);
    if let (Some(x), Some(y)) = (&a.btrfs_lab_version, &b.btrfs_lab_version) {
        diff("btrfs-lab", x, y);
    }
    let none = || "none".to_owned();
    diff(
        "filesystem",
        &a.fs_uuid.clone().unwrap_or_else(none),
        &b.fs_uuid.clone().unwrap_or_else(none),
    );
    diff(
        "data profile",
        &a.data_profiles.join("+"),
        &b.data_profiles.join("+"),
    );
    diff("tests", &a.profile, &b.profile);
    let file = |cow: bool| if cow { "checksummed" } else { "NOCOW" };
    diff("test file", file(a.cow), file(b.cow));
    diff(
        "compression",
        &a.compression.clone().unwrap_or_else(none),
        &b.compression.clone().unwrap_or_else(none),
    );
    diff(
        "file size",
        &format_iec(a.size_bytes),
        &format_iec(b.size_bytes),
    );
    diff("rounds", &a.rounds.to_string(), &b.rounds.to_string());
    if let Some(d) = set_change(&a.mount_options, &b.mount_options) {
        out.push(format!("mount options: {d}"));
    }
    if let Some(d) = set_change(&a.members, &b.members) {
        out.push(format!("members: {d}"));
    }
    out
}

/// `+added −removed` between two lists, or None when they hold the same.
fn set_change(a: &[String], b: &[String]) -> Option<String> {
    let added = b.iter().filter(|x| !a.contains(x)).map(|x| format!("+{x}"));
    let removed = a.iter().filter(|x| !b.contains(x)).map(|x| format!("−{x}"));
    let all: Vec<String> = added.chain(removed).collect();
    (!all.is_empty()).then(|| all.join(" "))
}

/// The smallest relative difference called beyond the noise, however
/// closely both runs' rounds agreed: fio's own run-to-run variation on an
/// idle device is a few percent.
pub const MIN_NOISE: f64 = 0.05;

/// A figure and the spread of its rounds: what the noise rule needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figure {
    /// The median, bytes per second.
    pub median: f64,
    /// The slowest round.
    pub min: f64,
    /// The fastest round.
    pub max: f64,
    /// Rounds.
    pub rounds: u32,
}

impl Figure {
    /// A checked result's figure; None when flagged or absent.
    pub fn of(t: &TestResult) -> Option<Figure> {
        if t.status == Status::Flagged {
            return None;
        }
        t.bytes_per_sec.filter(|m| *m > 0.0).map(|median| Figure {
            median,
            min: t.bytes_per_sec_min,
            max: t.bytes_per_sec_max,
            rounds: t.runs.len() as u32,
        })
    }

    /// (fastest − slowest) / median; None for one round.
    pub fn spread(&self) -> Option<f64> {
        (self.rounds >= 2 && self.median > 0.0).then(|| (self.max - self.min) / self.median)
    }
}

/// How `b` compares with `a`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// b / a.
    pub ratio: f64,
    /// The noise it is judged against.
    pub noise: f64,
    /// Beyond the noise of both.
    pub beyond: bool,
}

/// The noise rule: a difference is real when the two runs' rounds do not
/// overlap (every round of one is faster than every round of the other)
/// and the ratio is further from 1 than the larger of their spreads and
/// [`MIN_NOISE`]. A single round has no spread of its own: only
/// [`MIN_NOISE`] and the other's spread then apply.
pub fn judge(a: &Figure, b: &Figure) -> Verdict {
    let ratio = b.median / a.median;
    let noise = a
        .spread()
        .into_iter()
        .chain(b.spread())
        .fold(MIN_NOISE, f64::max);
    let apart = b.max < a.min || b.min > a.max;
    Verdict {
        ratio,
        noise,
        beyond: apart && (ratio - 1.0).abs() > noise,
    }
}

/// One report given to [`compare_many`].
#[derive(Debug, Clone)]
pub struct Input {
    /// Its name (path or `#ID`).
    pub name: String,
    /// Its history id.
    pub history_id: Option<i64>,
    /// When it ran (RFC 3339).
    pub time: Option<String>,
    /// The btrfs-lab version that made it.
    pub version: Option<String>,
    /// The report.
    pub report: BenchReport,
}

/// Compares two reports (`a` the baseline).
pub fn compare(a: &BenchReport, b: &BenchReport, a_name: &str, b_name: &str) -> Comparison {
    let input = |r: &BenchReport, name: &str| Input {
        name: name.to_owned(),
        history_id: None,
        time: None,
        version: None,
        report: r.clone(),
    };
    compare_many(&[input(a, a_name), input(b, b_name)])
}

fn result_of<'a>(i: &'a Input, name: &str, d: Direction) -> Option<&'a TestResult> {
    i.report
        .results
        .iter()
        .find(|x| x.name == name && x.direction == d)
}

fn figure_of(t: Option<&TestResult>, base: Option<Figure>, first: bool) -> ComparedFigure {
    let fig = t.and_then(Figure::of);
    let verdict = if first {
        None
    } else {
        base.zip(fig).map(|(a, b)| judge(&a, &b))
    };
    let note = match t {
        None => Some("not run".to_owned()),
        Some(t) if t.status == Status::Flagged => Some("flagged".to_owned()),
        Some(_) => None,
    };
    let ok = t.filter(|t| t.status != Status::Flagged);
    ComparedFigure {
        bytes_per_sec: ok.and_then(|t| t.bytes_per_sec),
        best_bytes_per_sec: ok.and_then(|t| t.best_bytes_per_sec),
        iops: ok.and_then(|t| t.iops),
        clat_p99_us: ok.and_then(|t| t.clat_p99_us),
        rounds: t.map_or(0, |t| t.runs.len() as u32),
        spread: fig.and_then(|f| f.spread()),
        ratio: verdict.map(|v| v.ratio),
        noise: verdict.map(|v| v.noise),
        beyond_noise: verdict.map(|v| v.beyond),
        note,
    }
}

/// Compares two or more reports, the first the baseline.
pub fn compare_many(inputs: &[Input]) -> Comparison {
    let mut keys: Vec<(String, Direction)> = Vec::new();
    for r in inputs.iter().flat_map(|i| i.report.results.iter()) {
        let k = (r.name.clone(), r.direction);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let rows = keys
        .into_iter()
        .map(|(name, d)| {
            let base = inputs
                .first()
                .and_then(|i| result_of(i, &name, d))
                .and_then(Figure::of);
            let figures: Vec<ComparedFigure> = inputs
                .iter()
                .enumerate()
                .map(|(n, i)| figure_of(result_of(i, &name, d), base, n == 0))
                .collect();
            let pick = |n: usize| figures.get(n);
            let note = match (
                pick(0).and_then(|f| f.note.clone()),
                pick(1).and_then(|f| f.note.clone()),
            ) {
                (Some(x), Some(y)) => Some(format!("A: {x}, B: {y}")),
                (Some(x), None) => Some(format!("A: {x}")),
                (None, Some(y)) => Some(format!("B: {y}")),
                (None, None) => None,
            };
            CompareRow {
                a_bytes_per_sec: pick(0).and_then(|f| f.bytes_per_sec),
                b_bytes_per_sec: pick(1).and_then(|f| f.bytes_per_sec),
                ratio: pick(1).and_then(|f| f.ratio),
                a_iops: pick(0).and_then(|f| f.iops),
                b_iops: pick(1).and_then(|f| f.iops),
                name,
                direction: d,
                note,
                figures,
            }
        })
        .collect();
    let setups: Vec<Setup> = inputs
        .iter()
        .map(|i| Setup::of(&i.report, i.version.as_deref()))
        .collect();
    let reports: Vec<ComparedReport> = inputs
        .iter()
        .zip(&setups)
        .map(|(i, s)| ComparedReport {
            name: i.name.clone(),
            history_id: i.history_id,
            time: i.time.clone(),
            setup: s.clone(),
            changes: setups
                .first()
                .map_or(Vec::new(), |base| setup_changes(base, s)),
        })
        .collect();
    Comparison {
        a: inputs.first().map_or(String::new(), |i| i.name.clone()),
        b: inputs.get(1).map_or(String::new(), |i| i.name.clone()),
        differences: reports.get(1).map_or(Vec::new(), |r| r.changes.clone()),
        rows,
        reports,
        min_noise: MIN_NOISE,
    }
}
