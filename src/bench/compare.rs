//! `bench --compare A.json B.json`: per test, the two results and their
//! ratio (before/after a conversion, a kernel update, a NOCOW change).

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::profile::Direction;
use super::report::{BenchReport, REPORT_VERSION, Status};
use crate::error::{Error, ErrorKind, Result};

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
    pub a_iops: Option<f64>,
    /// B's IOPS.
    pub b_iops: Option<f64>,
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
pub fn load(path: &Path) -> Result<BenchReport> {
    let text = fs::read_to_string(path).map_err(|e| Error::from_io(&e, "cannot read", path))?;
    let r: BenchReport = serde_json::from_str(&text).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!("{} is not a bench --json report: {e}", path.display()),
        )
        .with_hint("save reports with: btrfs-lab bench --json DIR > FILE.json")
    })?;
    if r.report_version != REPORT_VERSION {
        return Err(Error::new(
            ErrorKind::Parse,
            format!(
                "{} has report version {}, this btrfs-lab reads version {REPORT_VERSION}",
                path.display(),
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
