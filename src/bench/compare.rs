//! `bench --compare A.json B.json`: per test, the two results and their
//! ratio (before/after a conversion, a kernel update, a NOCOW change).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profile::Direction;
use super::report::{BenchReport, REPORT_VERSION, Status};
use crate::error::{Error, ErrorKind, Result};
use crate::model::text::{escape_control, escape_path};
use crate::sys::fs::beneath::read_input_file;

/// One test in both reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CompareRow {
    /// `SEQ1M Q8T1`.
    pub name: String,
    /// Read or write.
    pub direction: Direction,
    /// A's result, bytes per second (null: missing or flagged).
    pub a_bytes_per_sec: Option<f64>,
    /// B's result.
    pub b_bytes_per_sec: Option<f64>,
    /// B / A.
    pub ratio: Option<f64>,
    /// A's IOPS.
    pub(crate) a_iops: Option<f64>,
    /// B's IOPS.
    pub(crate) b_iops: Option<f64>,
    /// Why there is no ratio, if there is none.
    pub note: Option<String>,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// A's path.
    pub a: String,
    /// B's path.
    pub b: String,
    /// What differs between the set-ups (kernel, profile, NOCOW, ...).
    pub differences: Vec<String>,
    /// One row per test of either report.
    pub rows: Vec<CompareRow>,
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
            format!("{shown} is {kind}; --compare compares two suite reports"),
        )
        .with_hint(HINT));
    }
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
    Ok(r)
}

fn figure(
    r: &BenchReport,
    name: &str,
    d: Direction,
) -> (Option<f64>, Option<f64>, Option<&'static str>) {
    match r
        .results
        .iter()
        .find(|x| x.name == name && x.direction == d)
    {
        None => (None, None, Some("not run")),
        Some(x) if x.status == Status::Flagged => (None, None, Some("flagged")),
        Some(x) => (x.bytes_per_sec, x.iops, None),
    }
}

/// Compares two reports.
pub fn compare(a: &BenchReport, b: &BenchReport, a_name: &str, b_name: &str) -> Comparison {
    let mut keys: Vec<(String, Direction)> = Vec::new();
    for r in a.results.iter().chain(b.results.iter()) {
        let k = (r.name.clone(), r.direction);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let rows = keys
        .into_iter()
        .map(|(name, d)| {
            let (ab, ai, an) = figure(a, &name, d);
            let (bb, bi, bn) = figure(b, &name, d);
            let ratio = ab.zip(bb).filter(|(x, _)| *x > 0.0).map(|(x, y)| y / x);
            let note = match (an, bn) {
                (Some(x), Some(y)) => Some(format!("A: {x}, B: {y}")),
                (Some(x), None) => Some(format!("A: {x}")),
                (None, Some(y)) => Some(format!("B: {y}")),
                (None, None) => None,
            };
            CompareRow {
                name,
                direction: d,
                a_bytes_per_sec: ab,
                b_bytes_per_sec: bb,
                ratio,
                a_iops: ai,
                b_iops: bi,
                note,
            }
        })
        .collect();
    let mut differences = Vec::new();
    let mut diff = |what: &str, x: String, y: String| {
        if x != y {
            differences.push(format!("{what}: {x} → {y}"));
        }
    };
    diff("kernel", a.system.kernel.clone(), b.system.kernel.clone());
    diff(
        "fio",
        a.system.fio_version.clone(),
        b.system.fio_version.clone(),
    );
    diff(
        "data profile",
        format!("{:?}", a.target.data_profiles),
        format!("{:?}", b.target.data_profiles),
    );
    diff(
        "devices",
        a.target.devices.len().to_string(),
        b.target.devices.len().to_string(),
    );
    diff(
        "test file",
        if a.test_file.nocow {
            "NOCOW"
        } else {
            "checksummed"
        }
        .into(),
        if b.test_file.nocow {
            "NOCOW"
        } else {
            "checksummed"
        }
        .into(),
    );
    diff(
        "compression",
        a.target
            .compression_option
            .clone()
            .unwrap_or_else(|| "none".into()),
        b.target
            .compression_option
            .clone()
            .unwrap_or_else(|| "none".into()),
    );
    diff(
        "size",
        a.parameters.size_bytes.to_string(),
        b.parameters.size_bytes.to_string(),
    );
    Comparison {
        a: a_name.to_owned(),
        b: b_name.to_owned(),
        differences,
        rows,
    }
}
