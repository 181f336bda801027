//! The output of `btrfs filesystem usage`, captured anywhere: every version
//! since 3.18 (tab or space separated, with or without `Device slack`,
//! `Free (statfs, df)` and `Multiple profiles`), `-b` raw bytes, human IEC or
//! `--si` units, the `-T` table (with the newer Total/Slack columns), zoned,
//! the non-root WARNING, RAID5/6 "not implemented", and unallocated below
//! zero or shown as the 16.00EiB of an unsigned underflow. Lenient like
//! [`super::fi_df`]: quote marks, prompts and fences are taken off and every
//! skipped line is named. Never panics.

use serde::{Deserialize, Serialize};

use super::fi_df::{SkippedLine, UnitBasis, UnitReading, classify_noise, excerpt, strip_quotes};
use crate::model::space::{BgProfile, BgType};
use crate::model::usage::{BlockGroupUsage, DeviceShare, Overall, UsageReport};
use crate::report::units::rounding_error;

/// A parsed `btrfs filesystem usage` capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ParsedUsage {
    /// The figures, as `usage --json` has them where the paste has them.
    pub report: UsageReport,
    /// True when every figure was printed in bytes (`-b`).
    pub exact: bool,
    /// The largest rounding error of any size read (0 when exact).
    pub max_error_bytes: u64,
    /// Lines not read, with why.
    pub skipped: Vec<SkippedLine>,
    /// How the sizes were read.
    pub units: UnitReading,
    /// Overall fields the paste does not have (older btrfs-progs), shown
    /// as 0 in `overall`.
    pub missing_fields: Vec<String>,
    /// Device paths seen.
    pub devices: Vec<String>,
}

/// Sizes at or above 8EiB in an unallocated figure are an unsigned
/// underflow of btrfs-progs (negative unallocated printed as ~16EiB).
const UNDERFLOW: u64 = 8 << 60;

#[derive(Default)]
struct Sizes {
    max_error: u64,
    any_rounded: bool,
    si: bool,
}

impl Sizes {
    /// A size token: `512.00MiB`, `-16.00KiB`, `1073741824`, `0.00B`.
    fn read(&mut self, token: &str) -> Option<i128> {
        let t = token.trim().trim_end_matches(',');
        let (neg, t) = match t.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, t),
        };
        if t.is_empty() {
            return None;
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        if num.is_empty()
            || num.starts_with('.')
            || num.ends_with('.')
            || num.matches('.').count() > 1
        {
            return None;
        }
        let unit: u64 = match suffix {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "TiB" => 1 << 40,
            "PiB" => 1 << 50,
            "EiB" => 1 << 60,
            "kB" => {
                self.si = true;
                1_000
            }
            "MB" => {
                self.si = true;
                1_000_000
            }
            "GB" => {
                self.si = true;
                1_000_000_000
            }
            "TB" => {
                self.si = true;
                1_000_000_000_000
            }
            "PB" => {
                self.si = true;
                1_000_000_000_000_000
            }
            "EB" => {
                self.si = true;
                1_000_000_000_000_000_000
            }
            _ => return None,
        };
        let value: i128 = if unit == 1 && !num.contains('.') {
            num.parse::<u64>().ok()? as i128
        } else {
            let v: f64 = num.parse().ok()?;
            let bytes = v * unit as f64;
            if !bytes.is_finite() || bytes >= 2f64.powi(65) {
                return None;
            }
            let e = rounding_error(v, unit);
            if e > 0 {
                self.any_rounded = true;
                self.max_error = self.max_error.max(e);
            }
            bytes.round() as i128
        };
        Some(if neg { -value } else { value })
    }
}

fn to_u64(v: i128) -> u64 {
    v.clamp(0, u64::MAX as i128) as u64
}

/// Unallocated: negative as printed, or an underflow shown as ~16EiB.
fn to_signed(v: i128, notes: &mut Vec<String>, what: &str) -> i64 {
    if v >= UNDERFLOW as i128 {
        let wrapped = (v - (1i128 << 64)).clamp(i64::MIN as i128, 0) as i64;
        notes.push(format!(
            "{what} is shown as ~16EiB: btrfs-progs' unsigned underflow of a negative figure (the devices hold more allocated than their size); read as {wrapped}"
        ));
        wrapped
    } else {
        v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

/// `Data,single: Size:500.01GiB, Used:414.29GiB (82.86%)`.
fn bg_header(line: &str, sizes: &mut Sizes) -> Option<BlockGroupUsage> {
    let (head, rest) = line.split_once(':')?;
    let (t, p) = head.split_once(',')?;
    let bg_type = BgType::from_progs_name(t.trim())?;
    let profile = BgProfile::from_progs_name(p.trim())?;
    let rest = rest.trim();
    let size_tok = rest.strip_prefix("Size:")?.split(',').next()?;
    let used_part = rest.split_once("Used:")?.1;
    let used_tok = used_part.split_whitespace().next()?;
    let size = to_u64(sizes.read(size_tok)?);
    let used = to_u64(sizes.read(used_tok)?);
    let used_percent = used_part
        .split_once('(')
        .and_then(|(_, r)| r.split_once('%'))
        .and_then(|(n, _)| n.trim().parse::<f64>().ok())
        .unwrap_or(if size == 0 {
            0.0
        } else {
            used as f64 * 100.0 / size as f64
        });
    Some(BlockGroupUsage {
        bg_type,
        profile,
        size_bytes: size,
        used_bytes: used,
        used_percent,
        devices: None,
    })
}

/// `   /dev/vdb1     500.01GiB` (tab or spaces); `None` for anything else.
fn device_line(line: &str, sizes: &mut Sizes) -> Option<(String, Option<i128>)> {
    let mut words = line.split_whitespace();
    let path = words.next()?;
    if !(path.starts_with('/') || path == "missing" || path.starts_with("<missing")) {
        return None;
    }
    match words.next() {
        None => Some((path.to_owned(), None)),
        Some(v) => {
            let value = sizes.read(v)?;
            words
                .next()
                .is_none()
                .then(|| (path.to_owned(), Some(value)))
        }
    }
}

const OVERALL_KEYS: [&str; 12] = [
    "Device size",
    "Device allocated",
    "Device unallocated",
    "Device missing",
    "Device slack",
    "Used",
    "Free (estimated)",
    "Free (statfs, df)",
    "Data ratio",
    "Metadata ratio",
    "Global reserve",
    "Multiple profiles",
];

/// The part of the capture a line belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Section {
    None,
    Overall,
    Bg,
    Unalloc,
}

/// Device ids in the order the paths first appear: a map beside the list,
/// so that a paste with many device lines stays linear.
#[derive(Default)]
struct DeviceIds {
    ids: std::collections::HashMap<String, u64>,
    paths: Vec<String>,
}

impl DeviceIds {
    fn id(&mut self, path: &str) -> u64 {
        if let Some(id) = self.ids.get(path) {
            return *id;
        }
        self.paths.push(path.to_owned());
        let id = self.paths.len() as u64;
        self.ids.insert(path.to_owned(), id);
        id
    }
}

/// The `-T` table as read: type names (the line above the header),
/// profile columns, one row per device, and the Total and Used rows.
#[derive(Default)]
struct Table {
    types: Vec<String>,
    cols: Vec<String>,
    rows: Vec<(String, Vec<String>)>,
    total: Vec<String>,
    used: Vec<String>,
    used_line: usize,
}

/// What the lines of a capture gave, as they are read.
struct Scan {
    sizes: Sizes,
    skipped: Vec<SkippedLine>,
    notes: Vec<String>,
    /// `Overall:` lines: their line and `key\0value`.
    values: Vec<(usize, String)>,
    block_groups: Vec<BlockGroupUsage>,
    unallocated: Option<Vec<DeviceShare>>,
    devices: DeviceIds,
    chunk_tree: bool,
    sec: Section,
    table: Table,
    overall_seen: bool,
}

impl Scan {
    fn new() -> Self {
        Scan {
            sizes: Sizes::default(),
            skipped: Vec::new(),
            notes: Vec::new(),
            values: Vec::new(),
            block_groups: Vec::new(),
            unallocated: None,
            devices: DeviceIds::default(),
            chunk_tree: true,
            sec: Section::None,
            table: Table::default(),
            overall_seen: false,
        }
    }

    fn skip(&mut self, n: usize, t: &str, reason: String, damaged: bool) {
        self.skipped.push(SkippedLine {
            line: n,
            text: excerpt(t),
            reason,
            damaged,
        });
    }

    /// Reads line `idx` (number `n`, trimmed `t`) of `lines`.
    fn line(&mut self, lines: &[(usize, String)], idx: usize, n: usize, t: &str) {
        if t.is_empty() || self.header(n, t) {
            return;
        }
        if let Some(bg) = bg_header(t, &mut self.sizes) {
            self.block_groups.push(bg);
            self.sec = Section::Bg;
            return;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        if self.table_line(lines, idx, n, &words) {
            return;
        }
        if t.split_whitespace()
            .all(|w| BgType::from_progs_name(w).is_some())
            && lines
                .get(idx + 1)
                .is_some_and(|(_, next)| next.trim_start().starts_with("Id"))
        {
            // The type line above a -T header.
            return;
        }
        if matches!(self.sec, Section::Bg | Section::Unalloc)
            && let Some((path, value)) = device_line(t, &mut self.sizes)
        {
            self.device_share(n, t, path, value);
            return;
        }
        let damaged = t.contains("Size:") || t.contains("Used:");
        self.skip(
            n,
            t,
            if damaged {
                "looks like a block group line but does not parse: not read".to_owned()
            } else {
                classify_noise(t).replace("btrfs filesystem df", "btrfs filesystem usage")
            },
            damaged,
        );
    }

    /// A warning of btrfs-progs, a section header or an `Overall:` line:
    /// true when the line was one.
    fn header(&mut self, n: usize, t: &str) -> bool {
        if let Some(w) = t.strip_prefix("WARNING:") {
            let w = w.trim();
            if w.contains("cannot read detailed chunk info") {
                self.chunk_tree = false;
            }
            self.notes
                .push(format!("btrfs-progs warned: {}", excerpt(w)));
            return true;
        }
        if t == "Overall:" {
            self.sec = Section::Overall;
            self.overall_seen = true;
            return true;
        }
        if t == "Unallocated:" {
            self.sec = Section::Unalloc;
            self.unallocated.get_or_insert_with(Vec::new);
            return true;
        }
        if self.sec != Section::Bg
            && let Some((key, rest)) = t.split_once(':')
            && let Some(k) = OVERALL_KEYS.iter().find(|k| **k == key.trim())
        {
            self.values.push((n, format!("{k}\u{0}{}", rest.trim())));
            // Some pastes lose the `Overall:` line.
            self.overall_seen = true;
            self.sec = Section::Overall;
            return true;
        }
        false
    }

    /// A line of the -T table: true when the line was one.
    fn table_line(
        &mut self,
        lines: &[(usize, String)],
        idx: usize,
        n: usize,
        words: &[&str],
    ) -> bool {
        let owned = |w: &[&str]| -> Vec<String> { w.iter().map(|w| (*w).to_owned()).collect() };
        if words.len() >= 3 && words[0] == "Id" && words[1] == "Path" {
            self.table.cols = owned(&words[2..]);
            // The type names are on the line above.
            if let Some((_, above)) = idx.checked_sub(1).and_then(|i| lines.get(i)) {
                self.table.types = above.split_whitespace().map(str::to_owned).collect();
            }
            return true;
        }
        if self.table.cols.is_empty() {
            return false;
        }
        if words.iter().all(|w| w.chars().all(|c| c == '-')) {
            return true;
        }
        if words.len() >= 2 && words[0].chars().all(|c| c.is_ascii_digit()) {
            self.table
                .rows
                .push((words[1].to_owned(), owned(&words[2..])));
            return true;
        }
        if words[0] == "Total" {
            self.table.total = owned(&words[1..]);
            return true;
        }
        if words[0] == "Used" {
            self.table.used = owned(&words[1..]);
            self.table.used_line = n;
            return true;
        }
        false
    }

    /// A device's share under a block group or `Unallocated:`.
    fn device_share(&mut self, n: usize, t: &str, path: String, value: Option<i128>) {
        let id = self.devices.id(&path);
        match value {
            None => self.skip(
                n,
                t,
                format!(
                    "the size of {} is missing (the paste is cut here)",
                    excerpt(&path)
                ),
                true,
            ),
            Some(v) => {
                let what = format!("unallocated on {}", excerpt(&path));
                let share = DeviceShare {
                    devid: id,
                    bytes: to_signed(v, &mut self.notes, &what),
                    path,
                };
                if self.sec == Section::Unalloc {
                    self.unallocated.get_or_insert_with(Vec::new).push(share);
                } else if let Some(bg) = self.block_groups.last_mut() {
                    bg.devices.get_or_insert_with(Vec::new).push(share);
                }
            }
        }
    }

    /// The -T table: pair types (line above) with profile columns.
    fn table_block_groups(&mut self) {
        if self.table.cols.is_empty() {
            return;
        }
        let table = std::mem::take(&mut self.table);
        let ncols = table.types.len().min(table.cols.len());
        for c in 0..ncols {
            let (Some(bg_type), Some(profile)) = (
                BgType::from_progs_name(&table.types[c]),
                BgProfile::from_progs_name(&table.cols[c]),
            ) else {
                continue;
            };
            let size = table
                .total
                .get(c)
                .and_then(|v| self.sizes.read(v))
                .map(to_u64);
            let used = table
                .used
                .get(c)
                .and_then(|v| self.sizes.read(v))
                .map(to_u64);
            let mut shares = Vec::new();
            for (path, vals) in &table.rows {
                if let Some(v) = vals.get(c).and_then(|v| self.sizes.read(v)) {
                    shares.push(DeviceShare {
                        devid: self.devices.id(path),
                        path: path.clone(),
                        bytes: v.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                    });
                }
            }
            let (Some(size), Some(used)) = (size, used) else {
                self.skipped.push(SkippedLine {
                    line: table.used_line,
                    text: excerpt(&format!("{},{}", table.types[c], table.cols[c])),
                    reason: "the -T table has no Total or Used figure for this column (the paste is cut?): not read".to_owned(),
                    damaged: true,
                });
                continue;
            };
            self.block_groups.push(BlockGroupUsage {
                bg_type,
                profile,
                size_bytes: size,
                used_bytes: used,
                used_percent: if size == 0 {
                    0.0
                } else {
                    used as f64 * 100.0 / size as f64
                },
                devices: Some(shares),
            });
        }
        if let Some(ucol) = table.cols.iter().position(|c| c == "Unallocated") {
            let mut list = Vec::new();
            for (path, vals) in &table.rows {
                if let Some(v) = vals.get(ucol).and_then(|v| self.sizes.read(v)) {
                    let what = format!("unallocated on {}", excerpt(path));
                    list.push(DeviceShare {
                        devid: self.devices.id(path),
                        path: path.clone(),
                        bytes: to_signed(v, &mut self.notes, &what),
                    });
                }
            }
            self.unallocated = Some(list);
        }
    }

    /// The `Overall:` block, from its lines; the keys it lacks go to
    /// `missing` (shown as 0).
    fn overall(&mut self, missing: &mut Vec<String>) -> Overall {
        let mut o = OverallLines {
            values: &self.values,
            sizes: &mut self.sizes,
            missing,
        };
        let device_size = to_u64(o.size("Device size"));
        let device_allocated = to_u64(o.size("Device allocated"));
        let unalloc_raw = o.size("Device unallocated");
        let device_unallocated = to_signed(unalloc_raw, &mut self.notes, "Device unallocated");
        let device_missing = to_u64(o.size("Device missing"));
        let device_slack = to_u64(o.size("Device slack"));
        let used = to_u64(o.size("Used"));
        let free_estimated = to_u64(o.size("Free (estimated)"));
        let free_statfs = to_u64(o.size("Free (statfs, df)"));
        let free_estimated_min = o
            .paren_size("Free (estimated)", "min")
            .map_or(free_estimated, to_u64);
        let data_ratio = o.ratio("Data ratio");
        let metadata_ratio = o.ratio("Metadata ratio");
        let global_reserve = to_u64(o.size("Global reserve"));
        let global_reserve_used = o.paren_size("Global reserve", "used").map_or(0, to_u64);
        let multi = o.get("Multiple profiles").map(str::to_owned);
        if multi.is_none() {
            o.missing.push("Multiple profiles".to_owned());
        }
        Overall {
            device_size,
            device_allocated,
            device_unallocated,
            device_missing,
            device_slack,
            used,
            free_estimated,
            free_estimated_min,
            free_statfs,
            data_ratio,
            metadata_ratio,
            global_reserve,
            global_reserve_used,
            multiple_profiles: multi.as_deref().is_some_and(|m| m.starts_with("yes")),
            multiple_profile_types: multi
                .as_deref()
                .map(multiple_profile_types)
                .unwrap_or_default(),
        }
    }

    /// How the sizes were read.
    fn units(&self) -> UnitReading {
        if self.sizes.si {
            UnitReading {
                basis: UnitBasis::Si,
                rule: "kB/MB/GB read as powers of 1000 (`usage --si`; `usage` never printed old binary GB)".to_owned(),
            }
        } else if self.sizes.any_rounded {
            UnitReading {
                basis: UnitBasis::Iec,
                rule: "IEC units (KiB, MiB, GiB: powers of 1024, as printed)".to_owned(),
            }
        } else {
            UnitReading {
                basis: UnitBasis::Bytes,
                rule: "bytes (-b): exact".to_owned(),
            }
        }
    }
}

/// `Multiple profiles: yes (data, metadata)`: the types named.
fn multiple_profile_types(m: &str) -> Vec<BgType> {
    m.split_once('(')
        .map(|(_, r)| {
            r.trim_end_matches(')')
                .split(',')
                .filter_map(|w| match w.trim() {
                    "globalreserve" => Some(BgType::GlobalReserve),
                    o => BgType::from_progs_name(o),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `Overall:` values by key, and the keys not found.
struct OverallLines<'a> {
    values: &'a [(usize, String)],
    sizes: &'a mut Sizes,
    missing: &'a mut Vec<String>,
}

impl OverallLines<'_> {
    /// The value after `key:`, as printed.
    fn get(&self, k: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(_, v)| v.split('\u{0}').next() == Some(k))
            .and_then(|(_, v)| v.split('\u{0}').nth(1))
    }

    /// The size first on the line (0, noted missing, when absent).
    fn size(&mut self, k: &str) -> i128 {
        match self
            .get(k)
            .and_then(|v| v.split_whitespace().next().map(str::to_owned))
        {
            Some(tok) => self.sizes.read(&tok).unwrap_or_else(|| {
                self.missing.push(format!("{k} (unreadable)"));
                0
            }),
            None => {
                self.missing.push(k.to_owned());
                0
            }
        }
    }

    /// The size in `(label: SIZE)` after the value, when there.
    fn paren_size(&mut self, k: &str, label: &str) -> Option<i128> {
        let rest = self.get(k)?;
        let inner = rest.split_once(&format!("({label}"))?.1;
        let token = inner
            .trim_start_matches(':')
            .trim()
            .trim_end_matches(')')
            .trim()
            .to_owned();
        self.sizes.read(&token)
    }

    /// A ratio (0, noted missing, when absent).
    fn ratio(&mut self, k: &str) -> f64 {
        match self.get(k).and_then(|v| v.trim().parse().ok()) {
            Some(r) => r,
            None => {
                self.missing.push(k.to_owned());
                0.0
            }
        }
    }
}

/// Parses a capture of `btrfs filesystem usage` (any version, `-T` too).
pub(crate) fn parse_fi_usage(input: &str) -> Result<ParsedUsage, String> {
    let lines: Vec<(usize, String)> = input
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, strip_quotes(l.trim_end_matches('\r')).0.to_owned()))
        .collect();
    let mut scan = Scan::new();
    for (idx, (n, line)) in lines.iter().enumerate() {
        scan.line(&lines, idx, *n, line.trim());
    }
    scan.table_block_groups();
    let mut missing = Vec::new();
    let overall = scan.overall_seen.then(|| scan.overall(&mut missing));
    if overall.is_none() && scan.block_groups.is_empty() {
        let why = scan
            .skipped
            .iter()
            .find(|s| s.damaged)
            .map(|s| format!(" (line {}: {})", s.line, s.reason))
            .unwrap_or_default();
        return Err(format!(
            "no 'btrfs filesystem usage' output found (expected an 'Overall:' block or 'Data,PROFILE: Size:..., Used:...' lines){why}"
        ));
    }
    if !missing.is_empty() {
        scan.notes.push(format!(
            "not in this paste (older btrfs-progs, or cut), shown as 0: {}",
            missing.join(", ")
        ));
    }
    let units = scan.units();
    Ok(ParsedUsage {
        report: UsageReport {
            overall,
            block_groups: scan.block_groups,
            unallocated: scan.unallocated,
            chunk_tree_readable: scan.chunk_tree,
            notes: scan.notes,
            devices: Vec::new(),
        },
        exact: !scan.sizes.any_rounded,
        max_error_bytes: scan.sizes.max_error,
        skipped: scan.skipped,
        units,
        missing_fields: missing,
        devices: scan.devices.paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RAW: &str = "Overall:\n    Device size:\t\t   3221225472\n    Device allocated:\t\t    845152256\n    Device unallocated:\t\t   2376073216\n    Device missing:\t\t            0\n    Device slack:\t\t            0\n    Used:\t\t\t       819200\n    Free (estimated):\t\t   2696544256\t(min: 1508507648)\n    Free (statfs, df):\t\t   2695495680\n    Data ratio:\t\t\t         1.00\n    Metadata ratio:\t\t         2.00\n    Global reserve:\t\t      5767168\t(used: 16384)\n    Multiple profiles:\t\t           no\n\nData,single: Size:322961408, Used:524288 (0.16%)\n   /dev/loop0\t  322961408\n\nMetadata,RAID1: Size:260046848, Used:131072 (0.05%)\n   /dev/loop0\t  260046848\n   /dev/loop1\t  260046848\n\nSystem,RAID1: Size:8388608, Used:16384 (0.20%)\n   /dev/loop0\t    8388608\n   /dev/loop1\t    8388608\n\nUnallocated:\n   /dev/loop0\t  490733568\n   /dev/loop1\t  -16384\n";

    #[test]
    fn raw_usage_is_exact() {
        let p = parse_fi_usage(RAW).unwrap();
        assert!(p.exact);
        let o = p.report.overall.as_ref().unwrap();
        assert_eq!(o.device_size, 3_221_225_472);
        assert_eq!(o.free_estimated_min, 1_508_507_648);
        assert_eq!(o.global_reserve_used, 16_384);
        assert_eq!(o.metadata_ratio, 2.0);
        assert_eq!(p.report.block_groups.len(), 3);
        assert_eq!(p.report.block_groups[1].devices.as_ref().unwrap().len(), 2);
        let u = p.report.unallocated.as_ref().unwrap();
        assert_eq!(u[1].bytes, -16_384, "negative unallocated kept");
        assert!(p.missing_fields.is_empty(), "{:?}", p.missing_fields);
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
    }

    #[test]
    fn underflow_is_shown_as_what_it_is() {
        let text = "Overall:\n    Device size:      1.00GiB\n    Device unallocated:   16.00EiB\nData,single: Size:1.00GiB, Used:0.00B (0.00%)\n";
        let p = parse_fi_usage(text).unwrap();
        let o = p.report.overall.unwrap();
        assert!(o.device_unallocated <= 0, "{}", o.device_unallocated);
        assert!(p.report.notes.iter().any(|n| n.contains("underflow")));
        assert!(p.missing_fields.contains(&"Device slack".to_owned()));
    }

    /// Skipped lines and notes quote at most a short, escaped excerpt.
    #[test]
    fn skipped_lines_are_short_and_escaped() {
        let noise = format!("\u{1b}[2J\u{1b}]0;t\u{7}{}", "s".repeat(300));
        let text = format!("{noise}\nWARNING: {noise}\n{RAW}");
        let p = parse_fi_usage(&text).unwrap();
        let s = &p.skipped[0];
        assert!(s.text.starts_with("\\e[2J\\e]0;t\\x07"), "{}", s.text);
        assert!(
            s.text.ends_with("...") && !s.text.contains(&"s".repeat(100)),
            "{}",
            s.text
        );
        let warned = p
            .report
            .notes
            .iter()
            .find(|n| n.contains("warned"))
            .unwrap();
        assert!(!warned.chars().any(char::is_control), "{warned:?}");
        assert!(!warned.contains(&"s".repeat(100)), "{warned}");
    }

    #[test]
    fn nothing_usable_is_an_error() {
        assert!(parse_fi_usage("hello\nworld\n").is_err());
        assert!(parse_fi_usage("").is_err());
    }

    /// A paste with `n` device lines: half under a block group, half under
    /// Unallocated, every device a different path.
    fn many_devices(n: usize) -> String {
        let mut t = String::from(
            "Overall:\n    Device size:\t\t   3221225472\n    Used:\t\t\t       819200\n\nData,single: Size:322961408, Used:524288 (0.16%)\n",
        );
        for i in 0..n / 2 {
            t.push_str(&format!("   /dev/loop{i}\t  1048576\n"));
        }
        t.push_str("\nUnallocated:\n");
        for i in 0..n / 2 {
            t.push_str(&format!("   /dev/loop{i}\t  1048576\n"));
        }
        t
    }

    /// The quickest of `runs` parses (and interpretations) of `text`.
    fn quickest(text: &str, runs: usize) -> std::time::Duration {
        (0..runs)
            .map(|_| {
                let start = std::time::Instant::now();
                let doc = crate::space::usage_from_text(text, "-").unwrap();
                let took = start.elapsed();
                assert!(!doc.report.block_groups.is_empty());
                took
            })
            .min()
            .unwrap()
    }

    /// 128 times the device lines take about 128 times as long (a
    /// quadratic reader took 16384 times as long: 23 s for 128k lines).
    /// The ratio of two timings on the same machine, never a threshold.
    #[test]
    fn many_device_lines_parse_in_linear_time() {
        let small = many_devices(1_000);
        let large = many_devices(128_000);
        let p = parse_fi_usage(&large).unwrap();
        assert_eq!(p.devices.len(), 64_000);
        assert_eq!(p.report.unallocated.as_ref().unwrap().len(), 64_000);
        assert_eq!(p.report.unallocated.as_ref().unwrap()[63_999].devid, 64_000);
        let t_small = quickest(&small, 25);
        let t_large = quickest(&large, 2);
        let ratio = t_large.as_secs_f64() / t_small.as_secs_f64().max(1e-9);
        eprintln!("1k lines: {t_small:?}, 128k lines: {t_large:?}, ratio {ratio:.0}");
        assert!(
            ratio < 128.0 * 8.0,
            "128x the lines took {ratio:.0}x as long ({t_small:?} vs {t_large:?}): not linear"
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse_fi_usage(&s);
        }

        #[test]
        fn never_panics_on_damaged_usage(cut in 0usize..900, junk in "\\PC{0,8}") {
            let mut text = RAW.to_owned();
            let at = text.char_indices().map(|(i, _)| i).nth(cut % text.chars().count()).unwrap_or(0);
            text.insert_str(at, &junk);
            let _ = parse_fi_usage(&text);
        }
    }
}
