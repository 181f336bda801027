//! From the raw runs to what is reported: medians and spread per method, the
//! device cross-check that flags impossible figures, the winner, and whether
//! every method read the same bytes. Pure: runs in, values out.

use serde::{Deserialize, Serialize};

use super::method::Method;
use crate::parse::size::format_iec;

const GIB: f64 = (1u64 << 30) as f64;

/// The state of the page cache for the file when a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Evicted, and cachestat (or mincore) found no page of the file resident.
    Cold,
    /// Pages stayed resident after eviction (another process maps them?).
    Warm,
    /// The file lives in memory (tmpfs): there is nothing to evict.
    Memory,
    /// Eviction and its check were skipped (test hook).
    Unverified,
    /// A warm run: cachestat (or mincore) found every page of the file in the page cache.
    Resident,
    /// A warm run whose file was not wholly in the page cache even after
    /// it was read in (memory pressure): flagged.
    Partial,
}

/// The cache situation a set of runs measures.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Situation {
    /// The file's pages evicted before every run (a first load after boot).
    Cold,
    /// The whole file in the page cache before every run (a restart of a
    /// program whose file was loaded recently).
    Warm,
}

impl Situation {
    /// The name used in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Situation::Cold => "cold",
            Situation::Warm => "warm",
        }
    }
}

/// One run of one method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    pub(crate) fn cpu_per_gib(&self) -> Option<f64> {
        (self.bytes_read > 0).then(|| self.cpu_seconds / (self.bytes_read as f64 / GIB))
    }
}

/// What the cross-check knows besides the devices' counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckContext {
    /// Some device counts this filesystem's reads.
    pub(crate) devices_known: bool,
    /// Bytes a complete read gets without the device moving as many:
    /// holes, unwritten and inline extents, compressed extents.
    pub(crate) layout_allowance: u64,
}

/// Bytes a run may read beyond what is explained before it is flagged:
/// 1 % or 1 MiB, whichever is more.
pub fn slack(bytes: u64) -> u64 {
    (bytes / 100).max(1 << 20)
}

/// Why a run's figure is not a result, if it is not.
pub(crate) fn flag_run(run: &Run, ctx: &CheckContext) -> Option<String> {
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
    if run.cache == CacheState::Partial {
        return Some(format!(
            "the warm run started with only {} of the file in the page cache (memory pressure?), so it measured neither a warm nor a cold cache",
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The cache situation these runs measured.
    #[serde(default = "cold")]
    pub cache: Situation,
    /// Threads of these runs (direct, direct-copy; null for the
    /// single-threaded methods). In the method list it is the knee of the
    /// sweep (see `sweep`).
    #[serde(default)]
    pub threads: Option<u32>,
    /// The median as a percentage of the ceiling `links` computes for the
    /// file's devices (`ceiling`); null when unknown.
    #[serde(default)]
    pub percent_of_ceiling: Option<f64>,
}

fn cold() -> Situation {
    Situation::Cold
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
pub(crate) fn summarize(
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
        cache: Situation::Cold,
        threads: None,
        percent_of_ceiling: None,
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
        cache: Situation::Cold,
        threads: None,
        percent_of_ceiling: None,
    }
}

/// Another method, and how many times slower it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The other method.
    pub method: Method,
    /// Winner's median rate divided by this method's.
    pub ratio: f64,
}

/// The fastest method with a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

/// How the verdict of one cache situation came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    /// The fastest method's slowest round beat the next method's fastest
    /// round: the ranges do not overlap.
    Win,
    /// The fastest method's range overlaps another's: a tie, broken by
    /// CPU seconds per GiB.
    Tie,
    /// One round (of the fastest method or the next): a point, not a
    /// range, so neither a win nor a tie can be told; the fastest is named.
    Undecided,
    /// Only one method has a result: nothing to compare.
    Only,
    /// No method has a result.
    None,
}

/// Which method to use in one cache situation, and how sure that is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    /// The cache situation.
    pub cache: Situation,
    /// win, tie, only or none.
    pub kind: VerdictKind,
    /// The method to use: the winner, the tie's pick, the only one.
    pub method: Option<Method>,
    /// Its threads (direct, direct-copy).
    pub threads: Option<u32>,
    /// Its median bytes per second.
    pub rate_bytes_per_sec: Option<f64>,
    /// In a tie, the other methods whose range overlaps the fastest one's.
    pub(crate) tied_with: Vec<Method>,
    /// In a tie, the pick has the least CPU seconds per GiB of the tied
    /// methods (else the fastest median).
    pub(crate) tie_broken_by_cpu: bool,
    /// One sentence.
    pub text: String,
}

fn rate_word(m: &MethodSummary) -> String {
    let med = m.rate_bytes_per_sec_median.unwrap_or(0.0);
    use crate::report::rate::{format_both_noted, gib_per_s, number};
    let range = match (m.rate_bytes_per_sec_min, m.rate_bytes_per_sec_max) {
        (Some(a), Some(b)) if a < b => {
            format!(", range {}–{}", number(gib_per_s(a)), number(gib_per_s(b)))
        }
        _ => String::new(),
    };
    format_both_noted(med, &range)
}

fn with_threads(m: &MethodSummary) -> String {
    match m.threads {
        Some(t) => format!("{} ({t} thread{})", m.method, if t == 1 { "" } else { "s" }),
        None => m.method.to_string(),
    }
}

fn cpu_word(m: &MethodSummary) -> String {
    m.cpu_seconds_per_gib_median
        .map_or_else(|| "unknown".to_owned(), |c| format!("{c:.3}"))
}

/// The noise rule: medians closer than this share of the faster one are
/// the same speed (a tie needs that *and* overlapping ranges).
pub const NOISE: f64 = 0.10;

/// Whether `m`'s median is within the noise of `first`'s.
fn within_noise(m: &MethodSummary, first: &MethodSummary) -> bool {
    let a = first.rate_bytes_per_sec_median.unwrap_or(0.0);
    let b = m.rate_bytes_per_sec_median.unwrap_or(0.0);
    a <= 0.0 || b >= a * (1.0 - NOISE)
}

/// The fair verdict among `methods` (all of one cache situation), from the
/// rounds' medians: a method wins when its slowest round beats the
/// runner-up's fastest, or when the medians differ by more than the noise
/// ([`NOISE`]: one slow round widens a range, it does not make a tie); a
/// tie needs both the ranges to overlap and the medians within the noise,
/// and of the tied methods the one that costs the least CPU per GiB is
/// picked, and the text says so. One method with a result is not a winner.
pub fn verdict(cache: Situation, methods: &[MethodSummary]) -> Verdict {
    let mut ranked: Vec<&MethodSummary> = methods
        .iter()
        .filter(|m| m.status == Status::Ok)
        .filter(|m| m.rate_bytes_per_sec_median.is_some_and(|r| r > 0.0))
        .collect();
    ranked.sort_by(|a, b| {
        b.rate_bytes_per_sec_median
            .unwrap_or(0.0)
            .total_cmp(&a.rate_bytes_per_sec_median.unwrap_or(0.0))
    });
    let mut v = Verdict {
        cache,
        kind: VerdictKind::None,
        method: None,
        threads: None,
        rate_bytes_per_sec: None,
        tied_with: Vec::new(),
        tie_broken_by_cpu: false,
        text: format!("{}: no method has a result", cache.name()),
    };
    let Some(first) = ranked.first().copied() else {
        return v;
    };
    let Some(second) = ranked.get(1).copied() else {
        pick(&mut v, first);
        v.kind = VerdictKind::Only;
        v.text = format!(
            "{}: only {} has a result, {}: nothing to compare it with",
            cache.name(),
            with_threads(first),
            rate_word(first)
        );
        return v;
    };
    // One round is a point, not a range: neither a win nor a tie can be
    // called from it, however far apart the two points are.
    if first.runs.len() < 2 || second.runs.len() < 2 {
        pick(&mut v, first);
        v.kind = VerdictKind::Undecided;
        v.text = format!(
            "{}: cannot tell from one round: {} read at {}, {:.2}× {} {}, but one round gives no range to tell a win from a tie (use --rounds 3 or more)",
            cache.name(),
            with_threads(first),
            rate_word(first),
            first.rate_bytes_per_sec_median.unwrap_or(0.0)
                / second.rate_bytes_per_sec_median.unwrap_or(1.0),
            with_threads(second),
            rate_word(second)
        );
        return v;
    }
    let why = if low(first) > high(second) {
        Some("their ranges do not overlap".to_owned())
    } else if !within_noise(second, first) {
        Some(format!(
            "the ranges overlap, but the medians differ by more than the {:.0}% noise",
            NOISE * 100.0
        ))
    } else {
        None
    };
    if let Some(why) = why {
        pick(&mut v, first);
        v.kind = VerdictKind::Win;
        v.text = format!(
            "{}: {} wins at {}, {:.2}× {} {}; {why}",
            cache.name(),
            with_threads(first),
            rate_word(first),
            first.rate_bytes_per_sec_median.unwrap_or(0.0)
                / second.rate_bytes_per_sec_median.unwrap_or(1.0),
            with_threads(second),
            rate_word(second)
        );
        return v;
    }
    tie(v, &ranked)
}

/// A method's slowest round (its median with one round).
fn low(m: &MethodSummary) -> f64 {
    m.rate_bytes_per_sec_min
        .or(m.rate_bytes_per_sec_median)
        .unwrap_or(0.0)
}

/// A method's fastest round (its median with one round).
fn high(m: &MethodSummary) -> f64 {
    m.rate_bytes_per_sec_max
        .or(m.rate_bytes_per_sec_median)
        .unwrap_or(0.0)
}

/// `v` names `m` as the verdict's method.
fn pick(v: &mut Verdict, m: &MethodSummary) {
    v.method = Some(m.method);
    v.threads = m.threads;
    v.rate_bytes_per_sec = m.rate_bytes_per_sec_median;
}

/// The verdict when the fastest of `ranked` (fastest first, two at least)
/// does not clearly win: a tie among every method whose range reaches its
/// slowest round, broken by CPU per GiB when every tied method has it.
fn tie(mut v: Verdict, ranked: &[&MethodSummary]) -> Verdict {
    let cache = v.cache;
    let first = ranked[0];
    // Every method whose range reaches the fastest one's slowest round and
    // whose median is within the noise of the fastest one's.
    let tied: Vec<&MethodSummary> = ranked
        .iter()
        .copied()
        .filter(|m| high(m) >= low(first) && within_noise(m, first))
        .collect();
    let by_cpu = tied.iter().all(|m| m.cpu_seconds_per_gib_median.is_some());
    let chosen = if by_cpu {
        tied.iter()
            .copied()
            .min_by(|a, b| {
                a.cpu_seconds_per_gib_median
                    .unwrap_or(f64::MAX)
                    .total_cmp(&b.cpu_seconds_per_gib_median.unwrap_or(f64::MAX))
            })
            .unwrap_or(first)
    } else {
        first
    };
    pick(&mut v, chosen);
    v.kind = VerdictKind::Tie;
    v.tie_broken_by_cpu = by_cpu;
    v.tied_with = tied
        .iter()
        .filter(|m| m.method != chosen.method)
        .map(|m| m.method)
        .collect();
    let list: Vec<String> = tied
        .iter()
        .map(|m| format!("{} {}", with_threads(m), rate_word(m)))
        .collect();
    let why = if by_cpu {
        let others: Vec<String> = tied
            .iter()
            .filter(|m| m.method != chosen.method)
            .map(|m| format!("{} for {}", cpu_word(m), m.method))
            .collect();
        format!(
            "{} is picked because it needs the least CPU: {} CPU s/GiB against {}",
            chosen.method,
            cpu_word(chosen),
            others.join(", ")
        )
    } else {
        format!("{} has the fastest median", chosen.method)
    };
    v.text = format!(
        "{}: a tie, the ranges overlap and the medians are within {:.0}% ({}); {why}",
        cache.name(),
        NOISE * 100.0,
        list.join(" and ")
    );
    v
}

/// The knee of a thread sweep: the fewest threads whose median is within
/// 5 % of the best median. `rows` are (threads, median bytes per second).
pub fn knee(rows: &[(u32, f64)]) -> Option<u32> {
    let best = rows
        .iter()
        .map(|(_, r)| *r)
        .filter(|r| r.is_finite())
        .fold(f64::NAN, f64::max);
    if best.is_nan() || best <= 0.0 {
        return None;
    }
    rows.iter()
        .filter(|(_, r)| *r >= 0.95 * best)
        .map(|(t, _)| *t)
        .min()
}

/// What to use when the cache situation is not known in advance: the
/// method whose worst shortfall from the best of each situation is the
/// smallest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Hedge {
    /// The method.
    pub method: Method,
    /// Its threads.
    pub threads: Option<u32>,
    /// Its worst shortfall, percent below the best of a situation.
    pub(crate) worst_loss_percent: f64,
    /// The situation where it loses that much.
    pub(crate) worst_in: Situation,
}

/// The hedge over the situations measured (`None` unless a method has a
/// result in every situation and there are two situations).
pub fn hedge(situations: &[(Situation, &[MethodSummary])]) -> Option<Hedge> {
    if situations.len() < 2 {
        return None;
    }
    let rate = |list: &[MethodSummary], m: Method| {
        list.iter()
            .find(|s| s.method == m && s.status == Status::Ok)
            .and_then(|s| s.rate_bytes_per_sec_median)
            .filter(|r| *r > 0.0)
    };
    let best = |list: &[MethodSummary]| {
        list.iter()
            .filter(|s| s.status == Status::Ok)
            .filter_map(|s| s.rate_bytes_per_sec_median)
            .fold(0.0, f64::max)
    };
    let (_, first) = situations[0];
    let mut out: Option<Hedge> = None;
    for s in first {
        let mut worst = (0.0f64, situations[0].0);
        let mut complete = true;
        for (sit, list) in situations {
            let (Some(r), b) = (rate(list, s.method), best(list)) else {
                complete = false;
                break;
            };
            let loss = 100.0 * (1.0 - r / b).max(0.0);
            if loss > worst.0 || (loss == worst.0 && *sit == situations[0].0) {
                worst = (loss, *sit);
            }
        }
        if !complete {
            continue;
        }
        if out.as_ref().is_none_or(|h| worst.0 < h.worst_loss_percent) {
            out = Some(Hedge {
                method: s.method,
                threads: s.threads,
                worst_loss_percent: worst.0,
                worst_in: worst.1,
            });
        }
    }
    out
}

/// The advice sentence: `cold: use direct (4 threads); warm: use mmap; if
/// you cannot know, direct loses least (at most 12% below the best, warm)`.
pub fn advice(verdicts: &[Verdict], hedge: Option<&Hedge>) -> String {
    let mut parts: Vec<String> = verdicts
        .iter()
        .map(|v| {
            let Some(m) = v.method else {
                return format!("{}: no method has a result", v.cache.name());
            };
            let who = match v.threads {
                Some(t) => format!("{m} ({t} thread{})", if t == 1 { "" } else { "s" }),
                None => m.to_string(),
            };
            match v.kind {
                VerdictKind::Win => format!("{}: use {who}", v.cache.name()),
                VerdictKind::Tie if v.tie_broken_by_cpu => {
                    format!("{}: use {who}, tied on speed, least CPU", v.cache.name())
                }
                VerdictKind::Tie => format!("{}: use {who}, tied on speed", v.cache.name()),
                VerdictKind::Undecided => format!(
                    "{}: {who} was fastest in one round (cannot tell: --rounds 3)",
                    v.cache.name()
                ),
                _ => format!("{}: only {who} was measured", v.cache.name()),
            }
        })
        .collect();
    if let Some(h) = hedge {
        let who = match h.threads {
            Some(t) => format!("{} ({t} thread{})", h.method, if t == 1 { "" } else { "s" }),
            None => h.method.to_string(),
        };
        parts.push(if h.worst_loss_percent < 0.5 {
            format!("if you cannot know, {who} loses least (it is the best in both)")
        } else {
            format!(
                "if you cannot know, {who} loses least (at most {:.0}% below the best, {})",
                h.worst_loss_percent,
                h.worst_in.name()
            )
        });
    }
    parts.join("; ")
}

/// Whether every run read the same bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
pub(crate) fn check_checksums(
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
        let why = flag_run(&r, &DEVICES).expect("124MiB moved for 1GiB claimed is flagged");
        assert!(
            why.contains("1.00GiB") && why.contains("124.00MiB"),
            "{why}"
        );
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

    /// Runs of 1 GiB at the given GiB/s, each costing `cpu` CPU seconds.
    fn recorded(method: Method, gib_s: &[f64], cpu: f64) -> MethodSummary {
        let runs = gib_s
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mut r = run(i as u32 + 1, 1024 * MIB, 1.0 / g, None, CacheState::Cold);
                r.cpu_seconds = cpu;
                r
            })
            .collect();
        summarize(method, runs, None, None, &DEVICES)
    }

    #[test]
    fn overlapping_ranges_are_a_tie_broken_by_cpu() {
        // The runs the issue reports: direct-copy's median is higher, but
        // its range 0.93–1.42 overlaps direct's 1.00–1.43, and direct
        // costs 0.038 CPU s/GiB against 0.230.
        let methods = [
            recorded(Method::DirectCopy, &[0.93, 1.17, 1.42], 0.230),
            recorded(Method::Direct, &[1.00, 1.10, 1.43], 0.038),
            recorded(Method::Buffered, &[0.50, 0.52, 0.55], 0.400),
        ];
        // The old fastest-median "winner" is direct-copy...
        assert_eq!(winner(&methods).unwrap().method, Method::DirectCopy);
        // ...the fair verdict is a tie that direct takes on CPU.
        let v = verdict(Situation::Cold, &methods);
        assert_eq!(v.kind, VerdictKind::Tie, "{v:?}");
        assert_eq!(v.method, Some(Method::Direct));
        assert_eq!(v.tied_with, vec![Method::DirectCopy]);
        assert!(v.tie_broken_by_cpu);
        assert!(!v.text.contains("wins"), "{}", v.text);
        assert!(v.text.contains("a tie"), "{}", v.text);
        assert!(
            v.text.contains("0.038 CPU s/GiB against 0.230"),
            "{}",
            v.text
        );
        assert!(v.text.contains("range 0.93–1.42"), "{}", v.text);
        // Buffered's range does not reach direct-copy's slowest round.
        assert!(!v.tied_with.contains(&Method::Buffered));
    }

    #[test]
    fn one_slow_round_does_not_make_a_tie_of_medians_twice_apart() {
        // The warm-cache runs of issue 26: buffered 3.39 GiB/s with one
        // slow round whose range reaches direct's 1.70.
        let methods = [
            recorded(Method::Buffered, &[3.39, 1.65, 3.41], 0.30),
            recorded(Method::Direct, &[1.68, 1.70, 1.72], 0.04),
        ];
        let v = verdict(Situation::Warm, &methods);
        assert_eq!(v.kind, VerdictKind::Win, "{v:?}");
        assert_eq!(v.method, Some(Method::Buffered));
        assert!(
            v.text
                .contains("the ranges overlap, but the medians differ by more than the 10% noise"),
            "{}",
            v.text
        );
    }

    #[test]
    fn a_tie_needs_overlapping_ranges_and_medians_within_the_noise() {
        // Overlapping, medians 5% apart: a tie, taken on CPU.
        let methods = [
            recorded(Method::Buffered, &[2.00, 2.10, 2.30], 0.30),
            recorded(Method::Direct, &[1.90, 2.00, 2.05], 0.04),
        ];
        let v = verdict(Situation::Cold, &methods);
        assert_eq!(v.kind, VerdictKind::Tie, "{v:?}");
        assert_eq!(v.method, Some(Method::Direct));
        assert!(v.text.contains("the medians are within 10%"), "{}", v.text);
        // Medians 5% apart but ranges apart: a win.
        let methods = [
            recorded(Method::Buffered, &[2.10, 2.10, 2.11], 0.30),
            recorded(Method::Direct, &[1.99, 2.00, 2.01], 0.04),
        ];
        assert_eq!(verdict(Situation::Cold, &methods).kind, VerdictKind::Win);
        // Three methods: the one within the noise is tied, the other not.
        let methods = [
            recorded(Method::Buffered, &[1.00, 2.00, 2.10], 0.30),
            recorded(Method::Direct, &[1.90, 1.95, 2.05], 0.04),
            recorded(Method::Mmap, &[1.10, 1.20, 1.95], 0.20),
        ];
        let v = verdict(Situation::Cold, &methods);
        assert_eq!(v.kind, VerdictKind::Tie, "{v:?}");
        assert_eq!(v.method, Some(Method::Direct), "{v:?}");
        assert_eq!(
            v.tied_with,
            vec![Method::Buffered],
            "mmap's median is 40% below: {v:?}"
        );
    }

    #[test]
    fn separated_ranges_win_and_one_method_is_not_a_winner() {
        let methods = [
            recorded(Method::Direct, &[2.0, 2.1, 2.2], 0.04),
            recorded(Method::Buffered, &[1.0, 1.1, 1.9], 0.40),
        ];
        let v = verdict(Situation::Cold, &methods);
        assert_eq!(v.kind, VerdictKind::Win);
        assert_eq!(v.method, Some(Method::Direct));
        assert!(
            v.text.starts_with("cold: direct wins at 2.10 GiB/s"),
            "{}",
            v.text
        );
        assert!(v.text.contains("do not overlap"), "{}", v.text);
        // One round each: points, not ranges, so neither a win nor a tie,
        // however far apart (issue 52: 6.6× was called "a tie").
        let single = [
            recorded(Method::Direct, &[6.6], 0.04),
            recorded(Method::Buffered, &[1.0], 0.40),
        ];
        let v = verdict(Situation::Cold, &single);
        assert_eq!(
            (v.kind, v.method),
            (VerdictKind::Undecided, Some(Method::Direct))
        );
        assert!(!v.text.contains("tie,"), "{}", v.text);
        assert!(
            v.text
                .starts_with("cold: cannot tell from one round: direct read at 6.60 GiB/s"),
            "{}",
            v.text
        );
        assert!(v.text.contains("6.60× buffered"), "{}", v.text);
        assert!(v.text.contains("--rounds 3"), "{}", v.text);
        assert!(v.tied_with.is_empty());
        assert_eq!(
            advice(&[v], None),
            "cold: direct was fastest in one round (cannot tell: --rounds 3)"
        );
        // Nor when the two points are close.
        let close = [
            recorded(Method::Direct, &[2.0], 0.04),
            recorded(Method::Buffered, &[1.98], 0.40),
        ];
        assert_eq!(
            verdict(Situation::Cold, &close).kind,
            VerdictKind::Undecided
        );
        let only = verdict(Situation::Warm, &methods[..1]);
        assert_eq!(only.kind, VerdictKind::Only);
        assert!(!only.text.contains("win"), "{}", only.text);
        assert_eq!(verdict(Situation::Cold, &[]).kind, VerdictKind::None);
    }

    #[test]
    fn the_knee_is_the_fewest_threads_within_five_percent() {
        // The hand-run sweep: 1 → 1.19, 2 → 1.32, 8 → 1.47.
        assert_eq!(knee(&[(1, 1.19), (2, 1.32), (8, 1.47)]), Some(8));
        assert_eq!(knee(&[(1, 1.19), (2, 1.42), (4, 1.47), (8, 1.46)]), Some(2));
        assert_eq!(knee(&[(4, 3.0)]), Some(4));
        assert_eq!(knee(&[]), None);
        assert_eq!(knee(&[(1, 0.0)]), None);
    }

    #[test]
    fn the_hedge_is_the_smallest_worst_loss() {
        // The seed's model-loading table: cold 15.0 s direct vs 17.9 s
        // mmap; warm 14.4 s direct vs 10.1 s mmap (83.6 GB).
        let gb = 83.6e9 / (1u64 << 30) as f64;
        let three = |x: f64| [x * 0.99, x, x * 1.01];
        let cold = [
            recorded(Method::Direct, &three(gb / 15.0), 0.04),
            recorded(Method::Mmap, &three(gb / 17.9), 0.3),
        ];
        let warm = [
            recorded(Method::Direct, &three(gb / 14.4), 0.04),
            recorded(Method::Mmap, &three(gb / 10.1), 0.3),
        ];
        let h = hedge(&[(Situation::Cold, &cold[..]), (Situation::Warm, &warm[..])]).unwrap();
        // direct loses 30% warm (10.1/14.4), mmap 16% cold (15.0/17.9).
        assert_eq!(h.method, Method::Mmap);
        assert!((h.worst_loss_percent - 100.0 * (1.0 - 15.0 / 17.9)).abs() < 0.01);
        assert_eq!(h.worst_in, Situation::Cold);
        let v = [
            verdict(Situation::Cold, &cold),
            verdict(Situation::Warm, &warm),
        ];
        assert_eq!(
            advice(&v, Some(&h)),
            "cold: use direct; warm: use mmap; if you cannot know, mmap loses least (at most 16% below the best, cold)"
        );
        assert!(hedge(&[(Situation::Cold, &cold[..])]).is_none());
    }
}
