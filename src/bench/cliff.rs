//! The cliff of a sustained write, pure: where the sampled rate drops
//! and stays down (an SLC cache filling), told apart from one slow second
//! (noise) and from a gradual decline (a drive heating up).
//!
//! The series is sampled every 100 to 250 ms (fio's `log_avg_msec`), or
//! every second (older reports); the windows below are in seconds and
//! become samples by the series' own period (the median sample length),
//! never fewer than the counts named:
//!
//! 1. a running median over about a second ([`SMOOTH_SECS`] each side, at
//!    least 2 samples each side) takes out isolated slow (or fast)
//!    samples;
//! 2. the split of the smoothed series into two constant levels with the
//!    least squared error (prefix sums, O(n)) is the candidate step; a
//!    straight line is fitted as well;
//! 3. the levels are the *medians* of the raw samples on each side; a step
//!    is a cliff when the rate after is at most [`CLIFF_RATIO`] of the rate
//!    before, each side has at least [`MIN_SIDE_SECS`] of samples (and
//!    [`MIN_SIDE`] samples), at least 80% of
//!    the samples on each side are on their side of the midpoint ("stays
//!    down"), and the two levels fit the series clearly better than the
//!    line (else it is a decline);
//! 4. the bytes before the cliff are the bytes of the samples before it,
//!    plus the fast part of a sample that straddles it (interpolated from
//!    its rate between the two levels).

use serde::{Deserialize, Serialize};

/// A cliff: the rate after is at most this fraction of the rate before.
pub(crate) const CLIFF_RATIO: f64 = 0.8;
/// Samples needed on each side of a cliff, at least.
pub(crate) const MIN_SIDE: usize = 3;
/// Seconds of samples needed on each side of a cliff: the last samples of
/// a write (fio's end_fsync) or one slow stretch are not a cliff.
pub(crate) const MIN_SIDE_SECS: f64 = 1.5;
/// Seconds each side of the running median.
pub(crate) const SMOOTH_SECS: f64 = 0.5;
/// Samples needed for any verdict, at least.
pub(crate) const MIN_SAMPLES: usize = 2 * MIN_SIDE;

/// The windows, in samples, for a series sampled every `period` seconds:
/// (half-width of the running median, samples each side of a cliff).
pub(crate) fn windows(period: f64) -> (usize, usize) {
    let p = if period > 0.0 { period } else { 1.0 };
    let half = ((SMOOTH_SECS / p).round() as usize).max(2);
    let side = ((MIN_SIDE_SECS / p).ceil() as usize).max(MIN_SIDE);
    (half, side)
}
/// A decline: the rate at the end is at most this fraction of the rate
/// at the start (each the median of the smoothed samples there), and the
/// fitted line falls.
pub(crate) const DECLINE_RATIO: f64 = 0.8;
/// A stall: samples below this share of the series' median, that the rate
/// recovers from (writeback, another process's I/O, a drive folding its
/// cache): a gap for the detector, not a level.
pub(crate) const STALL_SHARE: f64 = 0.1;

/// One sample of the series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Point {
    /// Seconds from the start, at the end of the interval.
    pub(crate) t_secs: f64,
    /// Bytes per second over the interval.
    pub bytes_per_sec: f64,
}

/// What the series shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// The rate held (within the noise).
    Steady,
    /// The rate dropped at one point and stayed down.
    Cliff,
    /// The rate sank gradually (e.g. thermal throttling), no single step.
    Decline,
    /// Too few samples to tell.
    TooShort,
}

impl Shape {
    /// In words, for the reports.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Steady => "steady",
            Shape::Cliff => "a cliff",
            Shape::Decline => "a gradual decline",
            Shape::TooShort => "too short a series to tell",
        }
    }
}

/// The verdict on a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CliffAnalysis {
    /// What it shows.
    pub shape: Shape,
    /// Samples analysed.
    pub samples: usize,
    /// Bytes the series accounts for.
    pub total_bytes: u64,
    /// Median rate over the whole series.
    pub(crate) median_bytes_per_sec: f64,
    /// Cliff: seconds from the start when the rate dropped.
    pub(crate) at_secs: Option<f64>,
    /// Cliff: bytes written before it.
    pub bytes_before: Option<u64>,
    /// Cliff: median rate before it; decline: the fitted start.
    pub rate_before: Option<f64>,
    /// Cliff: median rate after it; decline: the fitted end.
    pub rate_after: Option<f64>,
    /// `rate_after / rate_before`.
    pub ratio: Option<f64>,
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Running median over `2 * half + 1` samples (shorter at the ends).
pub(crate) fn running_median(v: &[f64], half: usize) -> Vec<f64> {
    (0..v.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + half + 1).min(v.len());
            median(&v[lo..hi])
        })
        .collect()
}

/// The split `k` (first sample of the second level) with the least
/// squared error of two constant levels, with `min_side` samples each
/// side; and that error.
fn best_split(v: &[f64], min_side: usize) -> Option<(usize, f64)> {
    let n = v.len();
    if n < 2 * min_side {
        return None;
    }
    let mut s = vec![0.0; n + 1];
    let mut q = vec![0.0; n + 1];
    for (i, x) in v.iter().enumerate() {
        s[i + 1] = s[i] + x;
        q[i + 1] = q[i] + x * x;
    }
    let sse = |a: usize, b: usize| {
        let m = (b - a) as f64;
        let sum = s[b] - s[a];
        (q[b] - q[a]) - sum * sum / m
    };
    (min_side..=n - min_side)
        .map(|k| (k, sse(0, k) + sse(k, n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Least-squares line through `v` (x = index): intercept, slope, error.
fn line_fit(v: &[f64]) -> (f64, f64, f64) {
    let n = v.len() as f64;
    let mx = (n - 1.0) / 2.0;
    let my = v.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, y) in v.iter().enumerate() {
        let dx = i as f64 - mx;
        sxy += dx * (y - my);
        sxx += dx * dx;
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let icpt = my - slope * mx;
    let sse = v
        .iter()
        .enumerate()
        .map(|(i, y)| (y - icpt - slope * i as f64).powi(2))
        .sum();
    (icpt, slope, sse)
}

/// Seconds each sample covers.
fn durations(series: &[Point]) -> Vec<f64> {
    let mut prev = 0.0;
    series
        .iter()
        .map(|p| {
            let d = (p.t_secs - prev).max(0.0);
            prev = p.t_secs;
            if d > 0.0 { d } else { 1.0 }
        })
        .collect()
}

/// Samples of a stall: maximal runs below [`STALL_SHARE`] of the series'
/// median that the rate recovers from (a sample at or above it follows).
/// A run that lasts to the end is a level, not a stall.
fn stalls(raw: &[f64]) -> Vec<bool> {
    let floor = STALL_SHARE * median(raw);
    let mut out = vec![false; raw.len()];
    let mut run_start = None;
    for (i, &x) in raw.iter().enumerate() {
        if x < floor {
            run_start.get_or_insert(i);
        } else if let Some(s) = run_start.take() {
            out[s..i].iter_mut().for_each(|m| *m = true);
        }
    }
    out
}

/// Finds the cliff (see the module documentation).
pub(crate) fn analyse(series: &[Point]) -> CliffAnalysis {
    let all: Vec<f64> = series.iter().map(|p| p.bytes_per_sec.max(0.0)).collect();
    let dt = durations(series);
    let bytes: Vec<f64> = all.iter().zip(&dt).map(|(r, d)| r * d).collect();
    let mut a = CliffAnalysis {
        shape: Shape::TooShort,
        samples: all.len(),
        total_bytes: bytes.iter().sum::<f64>().round() as u64,
        median_bytes_per_sec: median(&all),
        at_secs: None,
        bytes_before: None,
        rate_before: None,
        rate_after: None,
        ratio: None,
    };
    let (half, side) = windows(median(&dt));
    // The levels are judged without the stalls; `idx` maps back.
    let stalled = stalls(&all);
    let idx: Vec<usize> = (0..all.len()).filter(|&i| !stalled[i]).collect();
    let raw: Vec<f64> = idx.iter().map(|&i| all[i]).collect();
    if raw.len() < MIN_SAMPLES.max(2 * side) {
        return a;
    }
    a.shape = Shape::Steady;
    let smooth = running_median(&raw, half);
    let (_, slope, line_sse) = line_fit(&smooth);
    let Some((k, step_sse)) = best_split(&smooth, side) else {
        return a;
    };
    let before = median(&raw[..k]);
    let after = median(&raw[k..]);
    let mid = (before + after) / 2.0;
    let share = |v: &[f64], high: bool| {
        v.iter().filter(|x| (**x >= mid) == high).count() as f64 / v.len() as f64
    };
    let stays = share(&raw[..k], true) >= 0.8 && share(&raw[k..], false) >= 0.8;
    let is_step =
        before > 0.0 && after <= CLIFF_RATIO * before && stays && step_sse < 0.5 * line_sse;
    if is_step {
        // A sample that straddles the step: its fast part counts before.
        let band = 0.15 * (before - after);
        let mixed = |j: usize| raw[j] > after + band && raw[j] < before - band;
        let (whole, part) = if mixed(k) {
            (k, Some(k))
        } else if mixed(k - 1) {
            (k - 1, Some(k - 1))
        } else {
            (k, None)
        };
        // Up to the end of the last whole sample before the step, in the
        // series' own samples (a stall on the way included).
        let end = if whole == 0 { 0 } else { idx[whole - 1] + 1 };
        let mut b: f64 = bytes[..end].iter().sum();
        let mut at = if end == 0 {
            0.0
        } else {
            series[end - 1].t_secs
        };
        if let Some(j) = part {
            let j = idx[j];
            let f = ((all[j] - after) / (before - after)).clamp(0.0, 1.0);
            b += f * before * dt[j];
            at = series[j].t_secs - dt[j] + f * dt[j];
        }
        a.shape = Shape::Cliff;
        a.at_secs = Some(at);
        a.bytes_before = Some(b as u64);
        a.rate_before = Some(before);
        a.rate_after = Some(after);
        a.ratio = Some(after / before);
        return a;
    }
    // A decline: the line falls, and the rates at its two ends, read from
    // the smoothed samples there (never the line's own ends, which no
    // sample may have shown), fall by DECLINE_RATIO.
    let start = median(&smooth[..side]);
    let end = median(&smooth[smooth.len() - side..]);
    if start > 0.0 && slope < 0.0 && end <= DECLINE_RATIO * start {
        a.shape = Shape::Decline;
        a.rate_before = Some(start);
        a.rate_after = Some(end);
        a.ratio = Some(end / start);
    }
    a
}

/// Eight-level sparkline of the rates.
pub fn sparkline(rates: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if rates.is_empty() || width == 0 {
        return String::new();
    }
    // Bucket into at most `width` columns (mean of each bucket).
    let cols = rates.len().min(width);
    let vals: Vec<f64> = (0..cols)
        .map(|c| {
            let lo = c * rates.len() / cols;
            let hi = ((c + 1) * rates.len() / cols).max(lo + 1);
            rates[lo..hi].iter().sum::<f64>() / (hi - lo) as f64
        })
        .collect();
    let max = vals.iter().copied().fold(0.0, f64::max);
    vals.iter()
        .map(|v| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn series(rates: &[f64]) -> Vec<Point> {
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| Point {
                t_secs: (i + 1) as f64,
                bytes_per_sec: *r,
            })
            .collect()
    }

    /// Deterministic noise in [-amp, amp] (a small LCG).
    fn noisy(base: &[f64], amp: f64, seed: u64) -> Vec<f64> {
        let mut x = seed;
        base.iter()
            .map(|b| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                b * (1.0 + amp * (2.0 * u - 1.0))
            })
            .collect()
    }

    fn step(n1: usize, r1: f64, n2: usize, r2: f64) -> Vec<f64> {
        let mut v = vec![r1; n1];
        v.extend(vec![r2; n2]);
        v
    }

    #[test]
    fn a_clean_step_is_a_cliff_with_its_bytes_and_rates() {
        let a = analyse(&series(&step(20, 1000.0 * MB, 15, 500.0 * MB)));
        assert_eq!(a.shape, Shape::Cliff);
        assert_eq!(a.bytes_before, Some(20_000_000_000));
        assert_eq!(a.rate_before, Some(1000.0 * MB));
        assert_eq!(a.rate_after, Some(500.0 * MB));
        assert_eq!(a.ratio, Some(0.5));
        assert_eq!(a.at_secs, Some(20.0));
    }

    #[test]
    fn a_sample_straddling_the_step_is_split_by_its_rate() {
        // 12 s at 30 MB/s, then one second 40% fast / 60% slow, then 8 MB/s.
        let mut v = step(12, 30.0 * MB, 0, 0.0);
        v.push(0.4 * 30.0 * MB + 0.6 * 8.0 * MB);
        v.extend(vec![8.0 * MB; 10]);
        let a = analyse(&series(&v));
        assert_eq!(a.shape, Shape::Cliff);
        let b = a.bytes_before.unwrap() as f64;
        assert!((b - 372.0 * MB).abs() < 1.0 * MB, "{b}");
        assert!((a.at_secs.unwrap() - 12.4).abs() < 0.01);
    }

    #[test]
    fn one_slow_second_is_not_a_cliff() {
        for at in [0, 5, 17, 29] {
            let mut v = noisy(&vec![800.0 * MB; 30], 0.05, at as u64 + 1);
            v[at] = 100.0 * MB;
            let a = analyse(&series(&v));
            assert_eq!(a.shape, Shape::Steady, "slow second at {at}: {a:?}");
            assert_eq!(a.bytes_before, None);
        }
        // Two slow seconds apart: still steady.
        let mut v = noisy(&vec![800.0 * MB; 30], 0.05, 9);
        v[8] = 50.0 * MB;
        v[20] = 50.0 * MB;
        assert_eq!(analyse(&series(&v)).shape, Shape::Steady);
    }

    #[test]
    fn noise_alone_is_steady() {
        for seed in 1..20 {
            let v = noisy(&vec![500.0 * MB; 60], 0.15, seed);
            let a = analyse(&series(&v));
            assert_eq!(a.shape, Shape::Steady, "seed {seed}: {a:?}");
        }
    }

    #[test]
    fn a_noisy_step_is_found_near_its_place() {
        for seed in 1..20 {
            let v = noisy(&step(40, 1000.0 * MB, 30, 450.0 * MB), 0.1, seed);
            let mut v = v;
            v[10] = 100.0 * MB; // and a slow second before it
            let a = analyse(&series(&v));
            assert_eq!(a.shape, Shape::Cliff, "seed {seed}: {a:?}");
            let b = a.bytes_before.unwrap() as f64;
            assert!(
                (b / 40e9 - 1.0).abs() < 0.05,
                "seed {seed}: bytes before {b}"
            );
            let r = a.ratio.unwrap();
            assert!((0.4..0.5).contains(&r), "seed {seed}: ratio {r}");
        }
    }

    #[test]
    fn one_burst_second_does_not_hide_or_move_a_cliff() {
        // The last second (a flush, a cache freed) reads 5× the first rate:
        // a least-squares split on the raw series would put the step just
        // before it; the running median keeps it where the rate fell.
        let mut v = step(20, 1000.0 * MB, 15, 500.0 * MB);
        v.push(5000.0 * MB);
        let a = analyse(&series(&v));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert_eq!(a.bytes_before, Some(20_000_000_000));
    }

    #[test]
    fn a_gradual_decline_is_not_a_step() {
        // 1000 → 550 MB/s over 60 s, as a drive heating up.
        let lin: Vec<f64> = (0..60).map(|i| (1000.0 - 7.5 * i as f64) * MB).collect();
        for (amp, seed) in [(0.0, 1), (0.05, 2), (0.05, 3), (0.1, 4)] {
            let a = analyse(&series(&noisy(&lin, amp, seed)));
            assert_eq!(a.shape, Shape::Decline, "noise {amp}: {a:?}");
            assert_eq!(a.bytes_before, None);
            let r = a.ratio.unwrap();
            assert!((0.45..0.65).contains(&r), "{r}");
        }
        // A slight drift is steady.
        let drift: Vec<f64> = (0..60).map(|i| (1000.0 - 1.0 * i as f64) * MB).collect();
        assert_eq!(analyse(&series(&drift)).shape, Shape::Steady);
    }

    #[test]
    fn a_dip_that_recovers_is_not_a_cliff() {
        let mut v = step(20, 900.0 * MB, 6, 300.0 * MB);
        v.extend(vec![900.0 * MB; 20]);
        assert_ne!(analyse(&series(&v)).shape, Shape::Cliff);
    }

    #[test]
    fn a_small_drop_is_steady_and_short_series_are_too_short() {
        let a = analyse(&series(&step(20, 1000.0 * MB, 20, 900.0 * MB)));
        assert_eq!(a.shape, Shape::Steady);
        let a = analyse(&series(&[1.0, 2.0, 3.0]));
        assert_eq!(a.shape, Shape::TooShort);
        assert_eq!(a.total_bytes, 6);
    }

    fn series_at(rates: &[f64], period: f64) -> Vec<Point> {
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| Point {
                t_secs: (i + 1) as f64 * period,
                bytes_per_sec: *r,
            })
            .collect()
    }

    #[test]
    fn the_windows_are_seconds_made_samples() {
        assert_eq!(windows(1.0), (2, 3), "one-second series: as before");
        assert_eq!(windows(0.1), (5, 15));
        assert_eq!(windows(0.25), (2, 6));
        assert_eq!(windows(0.0), (2, 3));
    }

    #[test]
    fn sub_second_samples_find_the_cliff_of_a_short_fast_run() {
        // 2.5 s at 3000 MB/s, then 2 s at 1000 MB/s, every 100 ms: 45
        // samples of a run a one-second series would call too short.
        let v = noisy(&step(25, 3000.0 * MB, 20, 1000.0 * MB), 0.05, 3);
        let a = analyse(&series_at(&v, 0.1));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert_eq!(a.samples, 45);
        let b = a.bytes_before.unwrap() as f64;
        assert!((b / 7.5e9 - 1.0).abs() < 0.05, "bytes before {b}");
        assert!((a.at_secs.unwrap() - 2.5).abs() < 0.15, "{a:?}");
        // At 250 ms.
        let v = noisy(&step(24, 2000.0 * MB, 16, 700.0 * MB), 0.05, 4);
        let a = analyse(&series_at(&v, 0.25));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert!((a.at_secs.unwrap() - 6.0).abs() < 0.3, "{a:?}");
    }

    #[test]
    fn a_slow_second_of_100ms_samples_is_not_a_cliff() {
        // Ten slow samples in a row (one second), anywhere, the end too (a
        // flush): no cliff.
        for at in [0, 20, 45, 50] {
            let mut v = noisy(&vec![800.0 * MB; 60], 0.05, at as u64 + 1);
            for x in &mut v[at..at + 10] {
                *x = 100.0 * MB;
            }
            let a = analyse(&series_at(&v, 0.1));
            assert_ne!(a.shape, Shape::Cliff, "slow second at {at}: {a:?}");
        }
        // A second of samples is too short; three seconds are enough.
        let a = analyse(&series_at(&[800.0 * MB; 10], 0.1));
        assert_eq!(a.shape, Shape::TooShort);
        let a = analyse(&series_at(&[800.0 * MB; 30], 0.1));
        assert_eq!(a.shape, Shape::Steady);
    }

    #[test]
    fn a_stall_before_a_step_is_a_gap_not_a_decline() {
        // 3 s at 142.5 MB/s, a 2-second stall (writeback, another
        // process's I/O), 2 s more at 142.5, then 40 MB/s for 10 s: every
        // 100 ms. Judged on the raw samples this was "a gradual decline
        // from 113 to 17.8 MB/s".
        let mut v = vec![142.5 * MB; 30];
        v.extend(vec![0.3 * MB; 20]);
        v.extend(vec![142.5 * MB; 20]);
        v.extend(vec![40.0 * MB; 100]);
        let a = analyse(&series_at(&v, 0.1));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert_eq!(a.rate_before, Some(142.5 * MB));
        assert_eq!(a.rate_after, Some(40.0 * MB));
        // The step is at 7.0 s; the bytes before it include the stall's.
        assert!((a.at_secs.unwrap() - 7.0).abs() < 0.05, "{a:?}");
        let want = 50.0 * 0.1 * 142.5 * MB + 20.0 * 0.1 * 0.3 * MB;
        let b = a.bytes_before.unwrap() as f64;
        assert!(
            (b / want - 1.0).abs() < 0.01,
            "bytes before {b}, want {want}"
        );
        // A stall of nothing at all (no completions in 3 s) in the same place.
        let mut v = vec![142.5 * MB; 40];
        v.extend(vec![0.0; 30]);
        v.extend(vec![142.5 * MB; 10]);
        v.extend(vec![40.0 * MB; 100]);
        let a = analyse(&series_at(&v, 0.1));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert!((a.at_secs.unwrap() - 8.0).abs() < 0.05, "{a:?}");
        let b = a.bytes_before.unwrap() as f64;
        assert!((b / (5.0 * 142.5 * MB) - 1.0).abs() < 0.01, "{b}");
    }

    #[test]
    fn a_burst_after_a_stall_moves_nothing() {
        // The completions a stall held back land at once: a burst of 5x
        // right after it. Still the step at 20 s, its rates the levels.
        let mut v = vec![1000.0 * MB; 10];
        v.extend(vec![0.0; 3]);
        v.push(4000.0 * MB);
        v.extend(vec![1000.0 * MB; 6]);
        v.extend(vec![500.0 * MB; 15]);
        let a = analyse(&series(&v));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert_eq!(a.at_secs, Some(20.0));
        assert_eq!(a.rate_before, Some(1000.0 * MB));
        assert_eq!(a.rate_after, Some(500.0 * MB));
    }

    #[test]
    fn a_stall_that_lasts_to_the_end_is_a_level() {
        // The drive stops for good: the step is to (almost) nothing.
        let v = step(20, 900.0 * MB, 15, 0.5 * MB);
        let a = analyse(&series(&v));
        assert_eq!(a.shape, Shape::Cliff, "{a:?}");
        assert_eq!(a.at_secs, Some(20.0));
    }

    #[test]
    fn a_decline_reports_rates_its_samples_showed() {
        // A decline with stalls on the way: the rates at its ends lie
        // within what the samples showed, never a fitted line's ends.
        let mut lin: Vec<f64> = (0..60).map(|i| (1000.0 - 7.5 * i as f64) * MB).collect();
        lin[10] = 0.0;
        lin[11] = 0.0;
        lin[40] = 1.0 * MB;
        let a = analyse(&series(&lin));
        assert_eq!(a.shape, Shape::Decline, "{a:?}");
        let shown = |r: f64| lin.iter().any(|&x| x >= r) && lin.iter().any(|&x| x <= r);
        let (b, e) = (a.rate_before.unwrap(), a.rate_after.unwrap());
        assert!(shown(b) && shown(e), "{a:?}");
        assert!(b > 900.0 * MB && e < 650.0 * MB && e > 557.0 * MB, "{a:?}");
    }

    #[test]
    fn sparkline_scales_to_the_peak() {
        assert_eq!(sparkline(&[1.0, 1.0, 0.5, 0.0], 10), "██▅▁");
        assert_eq!(sparkline(&step(10, 2.0, 10, 1.0), 4).chars().count(), 4);
        assert_eq!(sparkline(&[], 10), "");
    }
}
