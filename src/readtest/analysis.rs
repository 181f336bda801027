//! From the raw runs to what is reported: medians and spread per method, the
//! device cross-check that flags impossible figures, the winner, and whether
//! every method read the same bytes. Pure: runs in, values out.

use serde::Serialize;

use super::method::Method;
use crate::parse::size::format_iec;

const GIB: f64 = (1u64 << 30) as f64;

/// The state of the page cache for the file when a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Evicted, and mincore found no page of the file resident.
    Cold,
    /// Pages stayed resident after eviction (another process maps them?).
    Warm,
    /// The file lives in memory (tmpfs): there is nothing to evict.
    Memory,
    /// Eviction and its check were skipped (test hook).
    Unverified,
}

/// One run of one method.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    /// Round, from 1.
    pub round: u32,
    /// Position among all runs of the test, from 1 (shows the interleaving).
    pub sequence: u32,
    /// Bytes the method says it read.
    pub bytes_read: u64,
    /// Wall time of the read.
    pub seconds: f64,
    /// CPU time (user + system, all threads) of the read.
    pub cpu_seconds: f64,
    /// Bytes the file's devices read meanwhile; null when no device counts
    /// this filesystem's reads.
    pub device_read_bytes: Option<u64>,
    /// Bytes of the file in the page cache before the run (mincore); null
    /// when not checked.
    pub resident_before_bytes: Option<u64>,
    /// The cache state before the run.
    pub cache: CacheState,
    /// Checksum of what was read (see `checksum`).
    pub digest: String,
    /// Blocks that went into the checksum.
    pub digest_blocks: u64,
    /// Every block that should be in the checksum was, once.
    pub complete: bool,
    /// Why this run's figure cannot be a result; null when it can.
    pub flag: Option<String>,
}

impl Run {
    /// Bytes per second.
    pub fn rate(&self) -> Option<f64> {
        (self.bytes_read > 0 && self.seconds > 0.0).then(|| self.bytes_read as f64 / self.seconds)
    }

    /// CPU seconds per GiB read.
    pub fn cpu_per_gib(&self) -> Option<f64> {
        (self.bytes_read > 0).then(|| self.cpu_seconds / (self.bytes_read as f64 / GIB))
    }
}

/// What the cross-check knows besides the devices' counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckContext {
    /// Some device counts this filesystem's reads.
    pub devices_known: bool,
    /// Bytes a complete read gets without the device moving as many:
    /// holes, unwritten and inline extents, compressed extents.
    pub layout_allowance: u64,
}

/// Bytes a run may read beyond what is explained before it is flagged:
/// 1 % or 1 MiB, whichever is more.
pub fn slack(bytes: u64) -> u64 {
    (bytes / 100).max(1 << 20)
}

/// Why a run's figure is not a result, if it is not.
pub fn flag_run(run: &Run, ctx: &CheckContext) -> Option<String> {
    if !run.complete {
        return Some(format!(
            "the read was incomplete: {} checksum blocks instead of the whole file",
            run.digest_blocks
        ));
    }
    if run.cache == CacheState::Warm {
        return Some(format!(
            "{} of the file was still in the page cache when the run started (pages another process maps cannot be evicted), so its speed is partly the cache's",
            format_iec(run.resident_before_bytes.unwrap_or(0))
        ));
    }
    let moved = run.device_read_bytes?;
    if !ctx.devices_known || run.cache == CacheState::Memory {
        return None;
    }
    let cached = run.resident_before_bytes.unwrap_or(0);
    let explained = moved
        .saturating_add(cached)
        .saturating_add(ctx.layout_allowance);
    if run.bytes_read > explained.saturating_add(slack(run.bytes_read)) {
        let cache_part = if run.resident_before_bytes.is_some() {
            format!(", the page cache held {}", format_iec(cached))
        } else {
            ", the page cache was not checked".to_owned()
        };
        let layout_part = if ctx.layout_allowance > 0 {
            format!(
                " and {} is holes, inline or compressed",
                format_iec(ctx.layout_allowance)
            )
        } else {
            String::new()
        };
        return Some(format!(
            "it claims {} but the file's devices moved only {}{cache_part}{layout_part}: the rest came from memory, not the devices",
            format_iec(run.bytes_read),
            format_iec(moved)
        ));
    }
    None
}

/// How a method came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured and checked: the figures are results.
    Ok,
    /// A run failed a check: no figure is reported as a result.
    Flagged,
    /// The method cannot run here.
    Unsupported,
}

/// One method over all rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodSummary {
    /// The method.
    pub method: Method,
    /// ok, flagged or unsupported.
    pub status: Status,
    /// Why it is flagged or unsupported.
    pub reason: Option<String>,
    /// Something to know about how it ran (a fallback).
    pub note: Option<String>,
    /// Whether it read with O_DIRECT (direct, direct-copy; null otherwise).
    pub o_direct: Option<bool>,
    /// Median bytes per second over the rounds (null unless ok).
    pub rate_bytes_per_sec_median: Option<f64>,
    /// Slowest round.
    pub rate_bytes_per_sec_min: Option<f64>,
    /// Fastest round.
    pub rate_bytes_per_sec_max: Option<f64>,
    /// Median CPU seconds per GiB read (null unless ok).
    pub cpu_seconds_per_gib_median: Option<f64>,
    /// Median bytes the devices read per round.
    pub device_read_bytes_median: Option<u64>,
    /// Every run, raw.
    pub runs: Vec<Run>,
}

/// The median of `values` (sorted in place); `None` when empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// Summarises a method's runs, flagging them first.
pub fn summarize(
    method: Method,
    mut runs: Vec<Run>,
    o_direct: Option<bool>,
    note: Option<String>,
    ctx: &CheckContext,
) -> MethodSummary {
    for r in &mut runs {
        r.flag = flag_run(r, ctx);
    }
    let first_flag = runs
        .iter()
        .find_map(|r| r.flag.as_ref().map(|f| format!("round {}: {f}", r.round)));
    let mut moved: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.device_read_bytes.map(|b| b as f64))
        .collect();
    let device_read_bytes_median = median(&mut moved).map(|m| m.round() as u64);
    let status = if first_flag.is_some() {
        Status::Flagged
    } else {
        Status::Ok
    };
    let ok = status == Status::Ok;
    let mut rates: Vec<f64> = runs.iter().filter_map(Run::rate).collect();
    let mut cpu: Vec<f64> = runs.iter().filter_map(Run::cpu_per_gib).collect();
    let rate_median = median(&mut rates).filter(|_| ok);
    MethodSummary {
        method,
        status,
        reason: first_flag,
        note,
        o_direct,
        rate_bytes_per_sec_median: rate_median,
        rate_bytes_per_sec_min: rates.first().copied().filter(|_| ok),
        rate_bytes_per_sec_max: rates.last().copied().filter(|_| ok),
        cpu_seconds_per_gib_median: median(&mut cpu).filter(|_| ok),
        device_read_bytes_median,
        runs,
    }
}

/// A method that could not run.
pub fn unsupported(method: Method, reason: String) -> MethodSummary {
    MethodSummary {
        method,
        status: Status::Unsupported,
        reason: Some(reason),
        note: None,
        o_direct: None,
        rate_bytes_per_sec_median: None,
        rate_bytes_per_sec_min: None,
        rate_bytes_per_sec_max: None,
        cpu_seconds_per_gib_median: None,
        device_read_bytes_median: None,
        runs: Vec::new(),
    }
}

/// Another method, and how many times slower it was.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The other method.
    pub method: Method,
    /// Winner's median rate divided by this method's.
    pub ratio: f64,
}

/// The fastest method with a result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Winner {
    /// The method.
    pub method: Method,
    /// Its median bytes per second.
    pub rate_bytes_per_sec: f64,
    /// The next fastest, if any.
    pub runner_up: Option<Comparison>,
    /// Buffered, when it has a result and did not win.
    pub vs_buffered: Option<Comparison>,
}

/// The winner among the methods with a result.
pub fn winner(methods: &[MethodSummary]) -> Option<Winner> {
    let mut ranked: Vec<(Method, f64)> = methods
        .iter()
        .filter(|m| m.status == Status::Ok)
        .filter_map(|m| m.rate_bytes_per_sec_median.map(|r| (m.method, r)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (method, rate) = *ranked.first()?;
    let compare = |(m, r): (Method, f64)| Comparison {
        method: m,
        ratio: rate / r,
    };
    Some(Winner {
        method,
        rate_bytes_per_sec: rate,
        runner_up: ranked.get(1).copied().map(compare),
        vs_buffered: ranked
            .iter()
            .copied()
            .find(|(m, _)| *m == Method::Buffered && method != Method::Buffered)
            .map(compare),
    })
}

/// Whether every run read the same bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChecksumCheck {
    /// `sampled` or `full`.
    pub mode: super::digest::VerifyMode,
    /// Bytes per checksum block.
    pub block_bytes: u64,
    /// Blocks per run.
    pub blocks: u64,
    /// The method the others are compared with (buffered when it ran).
    pub reference: Option<Method>,
    /// The reference's checksum.
    pub digest: Option<String>,
    /// Every run of every method matched the reference.
    pub agree: bool,
    /// Whether direct read what buffered read (null unless both ran).
    pub direct_matches_buffered: Option<bool>,
    /// Runs that differ: `direct round 2`.
    pub mismatches: Vec<String>,
}

/// Compares every run's checksum with the reference's.
pub fn check_checksums(
    mode: super::digest::VerifyMode,
    blocks: u64,
    methods: &[MethodSummary],
) -> ChecksumCheck {
    let all: Vec<(Method, &Run)> = methods
        .iter()
        .flat_map(|m| m.runs.iter().map(move |r| (m.method, r)))
        .collect();
    let reference = all
        .iter()
        .find(|(m, _)| *m == Method::Buffered)
        .or_else(|| all.first())
        .copied();
    let mismatches: Vec<String> = match reference {
        Some((_, refr)) => all
            .iter()
            .filter(|(_, r)| r.digest != refr.digest)
            .map(|(m, r)| format!("{m} round {}", r.round))
            .collect(),
        None => Vec::new(),
    };
    let matches = |method: Method| {
        let mut runs = all.iter().filter(|(m, _)| *m == method).peekable();
        runs.peek()?;
        Some(runs.all(|(_, r)| reference.is_some_and(|(_, refr)| r.digest == refr.digest)))
    };
    let direct_matches_buffered = match (matches(Method::Direct), matches(Method::Buffered)) {
        (Some(d), Some(b)) => Some(d && b),
        _ => None,
    };
    ChecksumCheck {
        mode,
        block_bytes: super::digest::BLOCK,
        blocks,
        reference: reference.map(|(m, _)| m),
        digest: reference.map(|(_, r)| r.digest.clone()),
        agree: mismatches.is_empty(),
        direct_matches_buffered,
        mismatches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readtest::digest::VerifyMode;

    const MIB: u64 = 1 << 20;

    fn run(round: u32, bytes: u64, seconds: f64, moved: Option<u64>, cache: CacheState) -> Run {
        Run {
            round,
            sequence: round,
            bytes_read: bytes,
            seconds,
            cpu_seconds: seconds / 10.0,
            device_read_bytes: moved,
            resident_before_bytes: match cache {
                CacheState::Cold => Some(0),
                CacheState::Memory => Some(bytes),
                _ => None,
            },
            cache,
            digest: "aa".into(),
            digest_blocks: 1,
            complete: true,
            flag: None,
        }
    }

    const DEVICES: CheckContext = CheckContext {
        devices_known: true,
        layout_allowance: 0,
    };

    #[test]
    fn cold_runs_that_the_devices_explain_are_results() {
        let runs = vec![
            run(1, 1024 * MIB, 1.0, Some(1030 * MIB), CacheState::Cold),
            run(2, 1024 * MIB, 0.5, Some(1024 * MIB), CacheState::Cold),
            run(3, 1024 * MIB, 0.8, Some(1025 * MIB), CacheState::Cold),
        ];
        let s = summarize(Method::Direct, runs, Some(true), None, &DEVICES);
        assert_eq!(s.status, Status::Ok, "{s:?}");
        let gib = (1u64 << 30) as f64;
        assert_eq!(s.rate_bytes_per_sec_median, Some(gib / 0.8));
        assert_eq!(s.rate_bytes_per_sec_min, Some(gib));
        assert_eq!(s.rate_bytes_per_sec_max, Some(gib / 0.5));
        assert!((s.cpu_seconds_per_gib_median.unwrap() - 0.08).abs() < 1e-9);
        assert_eq!(s.device_read_bytes_median, Some(1025 * MIB));
    }

    #[test]
    fn a_warm_cache_the_devices_did_not_see_is_flagged() {
        // Eviction skipped (unverified): 1 GiB claimed, devices moved 3 MiB.
        let runs = vec![
            run(1, 1024 * MIB, 0.1, Some(3 * MIB), CacheState::Unverified),
            run(2, 1024 * MIB, 1.0, Some(1024 * MIB), CacheState::Unverified),
        ];
        let s = summarize(Method::Buffered, runs, None, None, &DEVICES);
        assert_eq!(s.status, Status::Flagged);
        assert_eq!(s.rate_bytes_per_sec_median, None, "flagged: no result");
        let why = s.reason.unwrap();
        assert!(
            why.starts_with("round 1: it claims 1.00GiB but the file's devices moved only 3.00MiB"),
            "{why}"
        );
        assert!(why.contains("not checked"), "{why}");
        assert!(s.runs[1].flag.is_none());
    }

    #[test]
    fn holes_compression_and_resident_pages_explain_missing_device_bytes() {
        let sparse = CheckContext {
            devices_known: true,
            layout_allowance: 900 * MIB,
        };
        let r = run(1, 1024 * MIB, 1.0, Some(124 * MIB), CacheState::Cold);
        assert_eq!(flag_run(&r, &sparse), None);
        assert!(flag_run(&r, &DEVICES).is_some());
        // A page cache that could not be emptied flags the run outright.
        let mut warm = run(1, 1024 * MIB, 1.0, Some(0), CacheState::Warm);
        warm.resident_before_bytes = Some(1024 * MIB);
        assert!(
            flag_run(&warm, &DEVICES)
                .unwrap()
                .contains("still in the page cache")
        );
        // Slack: metadata and rounding are not impossibilities.
        let r = run(
            1,
            100 * MIB,
            1.0,
            Some(99 * MIB + MIB / 2),
            CacheState::Cold,
        );
        assert_eq!(flag_run(&r, &DEVICES), None);
    }

    #[test]
    fn memory_and_unknown_devices_are_not_flagged_but_incomplete_reads_are() {
        let r = run(1, 1024 * MIB, 0.1, None, CacheState::Memory);
        assert_eq!(flag_run(&r, &DEVICES), None);
        let none = CheckContext {
            devices_known: false,
            layout_allowance: 0,
        };
        let r = run(1, 1024 * MIB, 0.1, Some(0), CacheState::Cold);
        assert_eq!(flag_run(&r, &none), None);
        let mut r = run(1, 1024 * MIB, 0.1, Some(1024 * MIB), CacheState::Cold);
        r.complete = false;
        assert!(flag_run(&r, &DEVICES).unwrap().contains("incomplete"));
    }

    fn ok(method: Method, rate: f64) -> MethodSummary {
        let mut s = summarize(method, vec![], None, None, &DEVICES);
        s.rate_bytes_per_sec_median = Some(rate);
        s
    }

    #[test]
    fn winner_and_margins() {
        let mut flagged = ok(Method::Mmap, 99.0);
        flagged.status = Status::Flagged;
        let methods = vec![
            ok(Method::Buffered, 2.0),
            ok(Method::Direct, 8.0),
            ok(Method::DirectCopy, 6.0),
            flagged,
            unsupported(Method::Dontcache, "no".into()),
        ];
        let w = winner(&methods).unwrap();
        assert_eq!(w.method, Method::Direct);
        assert_eq!(w.runner_up.as_ref().unwrap().method, Method::DirectCopy);
        assert!((w.runner_up.unwrap().ratio - 8.0 / 6.0).abs() < 1e-12);
        assert_eq!(w.vs_buffered.unwrap().ratio, 4.0);
        let only = winner(&[ok(Method::Buffered, 2.0)]).unwrap();
        assert_eq!((only.runner_up, only.vs_buffered), (None, None));
        assert!(winner(&[unsupported(Method::Dontcache, "x".into())]).is_none());
    }

    #[test]
    fn checksums_are_compared_with_buffered() {
        let mut direct = summarize(
            Method::Direct,
            vec![
                run(1, MIB, 1.0, None, CacheState::Cold),
                run(2, MIB, 1.0, None, CacheState::Cold),
            ],
            Some(true),
            None,
            &DEVICES,
        );
        let buffered = summarize(
            Method::Buffered,
            vec![run(1, MIB, 1.0, None, CacheState::Cold)],
            None,
            None,
            &DEVICES,
        );
        let c = check_checksums(VerifyMode::Sampled, 1, &[direct.clone(), buffered.clone()]);
        assert!(c.agree);
        assert_eq!(c.reference, Some(Method::Buffered));
        assert_eq!(c.direct_matches_buffered, Some(true));
        direct.runs[1].digest = "bb".into();
        let c = check_checksums(VerifyMode::Sampled, 1, &[direct.clone(), buffered]);
        assert!(!c.agree);
        assert_eq!(c.mismatches, vec!["direct round 2"]);
        assert_eq!(c.direct_matches_buffered, Some(false));
        let c = check_checksums(VerifyMode::Full, 1, &[direct]);
        assert_eq!(c.reference, Some(Method::Direct));
        assert_eq!(c.direct_matches_buffered, None);
    }
}
