//! From dirtied-page measurements to a verdict: pure code.
//!
//! Each round writes a test file (in the directory under test) and, on
//! btrfs, a control file (in a fresh NOCOW directory) with O_DIRECT, and
//! watches an idle window of similar length. The idle window measures the
//! background dirtying rate of other writers; it is subtracted from each
//! write's count. A true direct write dirties ~0 pages; a write the kernel
//! turned buffered dirties about as many bytes as it wrote.

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;

/// Below this corrected dirtied/written ratio a write was direct.
pub(crate) const DIRECT_MAX: f64 = 0.25;
/// Above this ratio a write went through the page cache.
pub(crate) const BUFFERED_MIN: f64 = 0.6;
/// If the background noise, expressed as a ratio of what the probe wrote,
/// varies between rounds by more than this, the subtraction is unreliable.
pub(crate) const NOISE_SPREAD_MAX: f64 = BUFFERED_MIN - DIRECT_MAX;
/// Above this median noise ratio other writers drown the measurement.
pub(crate) const NOISE_RATIO_MAX: f64 = 2.0;
/// The rounds agree on the cost against NOCOW when the largest per-round
/// ratio is at most this many times the smallest (and there are at least
/// two rounds): each round within 25% of every other. Otherwise the cost is
/// given as its range, never as one figure.
pub const COST_AGREE_MAX: f64 = 1.25;

/// One O_DIRECT write of a file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WriteSample {
    /// Bytes written with O_DIRECT.
    pub bytes_written: u64,
    /// Growth of the dirtied counter during the write (and fsync).
    pub dirtied_bytes: u64,
    /// Folios of this very file dirtied during the write (and fsync), from
    /// the writeback_dirty_folio tracepoint; null when it was not traced.
    pub dirtied_folios: Option<u64>,
    /// Bytes of the folios this file's write added to the page cache, each
    /// at its own size (filemap tracepoint: right with large folios, where
    /// one dirtied folio is many pages); null when it was not traced.
    #[serde(default)]
    pub cached_bytes: Option<u64>,
    /// O_DIRECT write calls made.
    #[serde(default)]
    pub write_calls: u64,
    /// Of those, calls that entered the kernel's direct-I/O path (iomap
    /// tracepoint, 6.2 and later); null when it was not traced.
    #[serde(default)]
    pub direct_calls: Option<u64>,
    /// Of those, calls the kernel bounced: copied into its own pages so the
    /// checksums (or the copies) stay true; null when it was not traced.
    #[serde(default)]
    pub bounced_calls: Option<u64>,
    /// Wall time of the write and fsync.
    pub seconds: f64,
}

/// A window with no probe writes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IdleSample {
    /// Growth of the dirtied counter.
    pub dirtied_bytes: u64,
    /// Length of the window.
    pub seconds: f64,
}

/// One round of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Round {
    /// The file in the directory under test.
    pub test: WriteSample,
    /// The NOCOW control file (btrfs only).
    pub control: Option<WriteSample>,
    /// The idle window.
    pub idle: IdleSample,
}

/// How one file's writes behaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Behaviour {
    /// Dirtied (almost) nothing.
    Direct,
    /// Dirtied (almost) nothing, but the kernel copied the data into a
    /// bounce buffer on the way (checksums kept, one copy paid).
    Bounced,
    /// Dirtied about what it wrote.
    Buffered,
    /// In between.
    Unclear,
}

/// The probe's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// O_DIRECT writes are direct.
    Direct,
    /// O_DIRECT writes bypass the page cache, but the kernel copies them
    /// through a bounce buffer (7.3 and later, for checksummed files and for
    /// profiles with copies): checksums kept, a copy paid.
    DirectBounced,
    /// The kernel turns O_DIRECT writes to these (checksummed) files into
    /// buffered writes; NOCOW files are not affected.
    BufferedFallback,
    /// The data profile makes every O_DIRECT write buffered, NOCOW included.
    ProfileForced,
    /// The measurement cannot tell.
    Inconclusive,
}

impl Verdict {
    /// The verdict's exit status (docs/exit-codes.md).
    pub fn exit_code(self) -> u8 {
        use crate::model::exit;
        match self {
            Verdict::Direct => exit::DIRECT,
            Verdict::DirectBounced => exit::DIRECT_BOUNCED,
            Verdict::BufferedFallback => exit::BUFFERED_FALLBACK,
            Verdict::ProfileForced => exit::PROFILE_FORCED,
            Verdict::Inconclusive => exit::INCONCLUSIVE,
        }
        .code
    }

    /// The name used in text and JSON (`buffered-fallback`).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Direct => "direct",
            Verdict::DirectBounced => "direct-bounced",
            Verdict::BufferedFallback => "buffered-fallback",
            Verdict::ProfileForced => "profile-forced",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// What is known about the place being probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The data profiles (btrfs; empty elsewhere).
    pub data_profiles: Vec<Profile>,
}

/// Statistics of one file's writes over the rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileSummary {
    /// Bytes written per round.
    pub bytes_written: u64,
    /// Median dirtied bytes per round, as counted.
    pub dirtied_bytes_median: u64,
    /// Median dirtied/written, as counted.
    pub raw_ratio_median: f64,
    /// Median dirtied/written after subtracting background noise.
    pub ratio_median: f64,
    /// Smallest corrected ratio of a round.
    pub ratio_min: f64,
    /// Largest corrected ratio of a round.
    pub ratio_max: f64,
    /// Median write throughput, bytes per second (fsync included).
    pub throughput_bytes_per_sec: f64,
    /// Share of the O_DIRECT write calls that entered the kernel's
    /// direct-I/O path, over all rounds (null: not traced).
    #[serde(default)]
    pub direct_share: Option<f64>,
    /// Share of those the kernel bounced (null: not traced, or none
    /// entered the direct path).
    #[serde(default)]
    pub bounced_share: Option<f64>,
    /// What the median says.
    pub behaviour: Behaviour,
}

/// Background dirtying seen in the idle windows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoiseSummary {
    /// Median background rate, bytes per second.
    pub dirtied_bytes_per_sec: f64,
    /// Median noise expected during a test write, as a ratio of its size.
    pub ratio_median: f64,
    /// Largest minus smallest noise ratio over the rounds.
    pub ratio_spread: f64,
}

/// What checksummed O_DIRECT costs against the NOCOW control, measured
/// round by round: each round writes both files, one right after the other
/// (alternating which goes first), so a round's ratio compares writes made
/// under the same conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostSummary {
    /// Per round, in round order: the test file's throughput over the
    /// control's in that round (rounds where a write took no measurable
    /// time are left out).
    pub rounds: Vec<f64>,
    /// Median of the per-round ratios.
    pub median: f64,
    /// Smallest per-round ratio.
    pub min: f64,
    /// Largest per-round ratio.
    pub max: f64,
    /// Whether the rounds agree: at least two, and the largest at most
    /// 1.25 times the smallest. Only then is the median a figure to quote.
    pub agrees: bool,
}

/// The per-round costs against the control; `None` without a control.
pub(crate) fn cost_of(rounds: &[Round]) -> Option<CostSummary> {
    let speed = |s: &WriteSample| (s.seconds > 0.0).then(|| s.bytes_written as f64 / s.seconds);
    let ratios: Vec<f64> = rounds
        .iter()
        .filter_map(|r| {
            let control = speed(r.control.as_ref()?)?;
            Some(speed(&r.test)? / control).filter(|_| control > 0.0)
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let mut sorted = ratios.clone();
    let median = median(&mut sorted);
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    Some(CostSummary {
        agrees: ratios.len() >= 2 && min > 0.0 && max <= min * COST_AGREE_MAX,
        rounds: ratios,
        median,
        min,
        max,
    })
}

/// The analysis of all rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Analysis {
    /// The verdict.
    pub verdict: Verdict,
    /// The test file.
    pub test: FileSummary,
    /// The control file, if there was one.
    pub control: Option<FileSummary>,
    /// Background noise.
    pub noise: NoiseSummary,
    /// The test file's median throughput over the NOCOW control's, in the
    /// same run (null: no control); [`Analysis::cost`] says whether the
    /// rounds agree on it.
    #[serde(default)]
    pub nocow_ratio: Option<f64>,
    /// The cost against NOCOW round by round (null: no control).
    #[serde(default)]
    pub cost: Option<CostSummary>,
    /// Why the verdict is what it is when that needs saying (inconclusive,
    /// a bounced control).
    pub reasons: Vec<String>,
}

/// Classifies a corrected ratio.
pub(crate) fn behaviour_of(ratio: f64) -> Behaviour {
    if ratio < DIRECT_MAX {
        Behaviour::Direct
    } else if ratio > BUFFERED_MIN {
        Behaviour::Buffered
    } else {
        Behaviour::Unclear
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn noise_rate(idle: &IdleSample) -> f64 {
    if idle.seconds > 0.0 {
        idle.dirtied_bytes as f64 / idle.seconds
    } else {
        0.0
    }
}

/// Dirtied/written of one sample after removing the background expected
/// over its duration.
pub(crate) fn corrected_ratio(sample: &WriteSample, idle: &IdleSample) -> f64 {
    if sample.bytes_written == 0 {
        return 0.0;
    }
    let expected_noise = noise_rate(idle) * sample.seconds;
    ((sample.dirtied_bytes as f64 - expected_noise).max(0.0)) / sample.bytes_written as f64
}

fn summarize(samples: &[(WriteSample, IdleSample)]) -> FileSummary {
    let mut corrected: Vec<f64> = samples.iter().map(|(s, i)| corrected_ratio(s, i)).collect();
    let mut raw: Vec<f64> = samples
        .iter()
        .map(|(s, _)| s.dirtied_bytes as f64 / s.bytes_written.max(1) as f64)
        .collect();
    let mut dirtied: Vec<f64> = samples
        .iter()
        .map(|(s, _)| s.dirtied_bytes as f64)
        .collect();
    let mut speed: Vec<f64> = samples
        .iter()
        .map(|(s, _)| {
            if s.seconds > 0.0 {
                s.bytes_written as f64 / s.seconds
            } else {
                0.0
            }
        })
        .collect();
    let ratio_median = median(&mut corrected);
    let sum = |f: fn(&WriteSample) -> Option<u64>| -> Option<u64> {
        samples.iter().map(|(s, _)| f(s)).sum()
    };
    let calls: u64 = samples.iter().map(|(s, _)| s.write_calls).sum();
    let direct = sum(|s| s.direct_calls);
    let bounced = sum(|s| s.bounced_calls);
    let direct_share = direct
        .filter(|_| calls > 0)
        .map(|d| d as f64 / calls as f64);
    let bounced_share = match (direct, bounced) {
        (Some(d), Some(b)) if d > 0 => Some(b as f64 / d as f64),
        _ => None,
    };
    let mut behaviour = behaviour_of(ratio_median);
    if behaviour == Behaviour::Direct && bounced_share.is_some_and(|b| b >= 0.5) {
        behaviour = Behaviour::Bounced;
    }
    FileSummary {
        bytes_written: samples.first().map_or(0, |(s, _)| s.bytes_written),
        dirtied_bytes_median: median(&mut dirtied).round() as u64,
        raw_ratio_median: median(&mut raw),
        ratio_median,
        ratio_min: corrected.first().copied().unwrap_or(0.0),
        ratio_max: corrected.last().copied().unwrap_or(0.0),
        throughput_bytes_per_sec: median(&mut speed),
        direct_share,
        bounced_share,
        behaviour,
    }
}

/// Analyses the rounds from the per-file tracepoint counts: each file's
/// own page-cache bytes, with no background to subtract: the folios its
/// write added to the page cache at their sizes, or its dirtied folios
/// times the page size, whichever is more (with large folios the second
/// undercounts; a kernel without the filemap event has only it). `None`
/// unless every sample was traced.
pub fn analyze_per_file(rounds: &[Round], ctx: &Context, page_size: u64) -> Option<Analysis> {
    let exact = |s: &WriteSample| -> Option<WriteSample> {
        let folios = s.dirtied_folios?.saturating_mul(page_size);
        Some(WriteSample {
            dirtied_bytes: folios.max(s.cached_bytes.unwrap_or(0)),
            ..*s
        })
    };
    let traced: Option<Vec<Round>> = rounds
        .iter()
        .map(|r| {
            Some(Round {
                test: exact(&r.test)?,
                control: match &r.control {
                    Some(c) => Some(exact(c)?),
                    None => None,
                },
                idle: IdleSample {
                    dirtied_bytes: 0,
                    seconds: r.idle.seconds,
                },
            })
        })
        .collect();
    traced.map(|t| analyze(&t, ctx))
}

/// Analyses the rounds. `rounds` must not be empty.
pub(crate) fn analyze(rounds: &[Round], ctx: &Context) -> Analysis {
    let test_samples: Vec<(WriteSample, IdleSample)> =
        rounds.iter().map(|r| (r.test, r.idle)).collect();
    let control_samples: Vec<(WriteSample, IdleSample)> = rounds
        .iter()
        .filter_map(|r| r.control.map(|c| (c, r.idle)))
        .collect();
    let test = summarize(&test_samples);
    let control = (!control_samples.is_empty()).then(|| summarize(&control_samples));

    let mut noise_ratios: Vec<f64> = rounds
        .iter()
        .map(|r| noise_rate(&r.idle) * r.test.seconds / r.test.bytes_written.max(1) as f64)
        .collect();
    let mut rates: Vec<f64> = rounds.iter().map(|r| noise_rate(&r.idle)).collect();
    let noise_ratio_median = median(&mut noise_ratios);
    let noise = NoiseSummary {
        dirtied_bytes_per_sec: median(&mut rates),
        ratio_median: noise_ratio_median,
        ratio_spread: noise_ratios.last().copied().unwrap_or(0.0)
            - noise_ratios.first().copied().unwrap_or(0.0),
    };

    let mut reasons = Vec::new();
    let noisy = if noise.ratio_median > NOISE_RATIO_MAX {
        reasons.push(format!(
            "other writers dirtied {:.1}x as much as the probe wrote while it ran",
            noise.ratio_median
        ));
        true
    } else if rounds.len() > 1 && noise.ratio_spread > NOISE_SPREAD_MAX {
        reasons.push(format!(
            "background writes varied too much between rounds (noise {:.2} to {:.2} of the written size)",
            noise_ratios.first().copied().unwrap_or(0.0),
            noise_ratios.last().copied().unwrap_or(0.0)
        ));
        true
    } else {
        false
    };

    let verdict = if noisy {
        Verdict::Inconclusive
    } else {
        decide(&test, control.as_ref(), ctx, &mut reasons)
    };
    let nocow_ratio = control
        .as_ref()
        .filter(|c| c.throughput_bytes_per_sec > 0.0)
        .map(|c| test.throughput_bytes_per_sec / c.throughput_bytes_per_sec);
    Analysis {
        verdict,
        test,
        control,
        noise,
        nocow_ratio,
        cost: cost_of(rounds),
        reasons,
    }
}

fn decide(
    test: &FileSummary,
    control: Option<&FileSummary>,
    ctx: &Context,
    reasons: &mut Vec<String>,
) -> Verdict {
    if test.behaviour == Behaviour::Unclear {
        reasons.push(format!(
            "the test file dirtied {:.2} of what it wrote: neither direct (below {DIRECT_MAX}) nor buffered (above {BUFFERED_MIN})",
            test.ratio_median
        ));
        return Verdict::Inconclusive;
    }
    let Some(control) = control else {
        return match test.behaviour {
            Behaviour::Direct => Verdict::Direct,
            Behaviour::Bounced => Verdict::DirectBounced,
            _ => Verdict::BufferedFallback,
        };
    };
    use Behaviour::{Bounced, Buffered, Direct, Unclear};
    match (test.behaviour, control.behaviour) {
        (_, Unclear) => {
            reasons.push(format!(
                "the NOCOW control dirtied {:.2} of what it wrote, which is neither direct nor buffered",
                control.ratio_median
            ));
            Verdict::Inconclusive
        }
        (Direct, Direct) => Verdict::Direct,
        (Bounced, Direct) => Verdict::DirectBounced,
        (Bounced, Bounced) => {
            reasons.push(format!(
                "the NOCOW control was bounced too: the data profile ({}) keeps its copies stable the same way",
                crate::model::profile::profile_list(&ctx.data_profiles)
            ));
            Verdict::DirectBounced
        }
        (Direct, Bounced) => {
            reasons.push(
                "the NOCOW control was bounced while the test file was written directly, which no kernel \
                 known here does"
                    .to_owned(),
            );
            Verdict::Inconclusive
        }
        (Buffered, Direct | Bounced) => Verdict::BufferedFallback,
        (Buffered, Buffered) => {
            if ctx.data_profiles.iter().any(|p| p.duplicates_data()) {
                Verdict::ProfileForced
            } else {
                reasons.push(format!(
                    "the NOCOW control was buffered too, and the data profile ({}) does not explain it",
                    crate::model::profile::profile_list(&ctx.data_profiles)
                ));
                Verdict::Inconclusive
            }
        }
        (Direct | Bounced, Buffered) => {
            reasons.push(
                "the NOCOW control looked buffered while the test file did not: another writer on this filesystem?"
                    .to_owned(),
            );
            Verdict::Inconclusive
        }
        (Unclear, _) => Verdict::Inconclusive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn w(written_mib: u64, dirtied_mib: f64, seconds: f64) -> WriteSample {
        WriteSample {
            bytes_written: written_mib * MIB,
            dirtied_bytes: (dirtied_mib * MIB as f64) as u64,
            dirtied_folios: None,
            cached_bytes: None,
            write_calls: written_mib,
            direct_calls: None,
            bounced_calls: None,
            seconds,
        }
    }

    fn idle(dirtied_mib: f64, seconds: f64) -> IdleSample {
        IdleSample {
            dirtied_bytes: (dirtied_mib * MIB as f64) as u64,
            seconds,
        }
    }

    fn btrfs(p: Profile) -> Context {
        Context {
            data_profiles: vec![p],
        }
    }

    fn rounds(test: f64, control: Option<f64>, noise_mib_per_s: &[f64]) -> Vec<Round> {
        noise_mib_per_s
            .iter()
            .map(|&n| Round {
                // 256 MiB in 1 s; the counters see the write plus the noise.
                test: w(256, test * 256.0 + n, 1.0),
                control: control.map(|c| w(256, c * 256.0 + n, 1.0)),
                idle: idle(n, 1.0),
            })
            .collect()
    }

    #[test]
    fn quiet_machine_verdicts() {
        let quiet = [0.0, 0.1, 0.0];
        let a = analyze(&rounds(1.0, Some(0.0), &quiet), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::BufferedFallback);
        assert_eq!(a.test.behaviour, Behaviour::Buffered);
        let a = analyze(&rounds(0.0, Some(0.0), &quiet), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::Direct);
        let a = analyze(&rounds(1.0, Some(1.0), &quiet), &btrfs(Profile::Dup));
        assert_eq!(a.verdict, Verdict::ProfileForced);
        let a = analyze(
            &rounds(0.0, None, &quiet),
            &Context {
                data_profiles: vec![],
            },
        );
        assert_eq!(a.verdict, Verdict::Direct);
        let a = analyze(
            &rounds(1.0, None, &quiet),
            &Context {
                data_profiles: vec![],
            },
        );
        assert_eq!(a.verdict, Verdict::BufferedFallback);
    }

    #[test]
    fn steady_background_writer_is_subtracted() {
        // Another writer dirties 180 MiB/s: the NOCOW file looks 0.7x
        // dirtied on the raw counter, yet it is direct.
        let steady = [180.0, 185.0, 175.0];
        let a = analyze(&rounds(0.0, Some(0.0), &steady), &btrfs(Profile::Single));
        assert!(a.test.raw_ratio_median > 0.6);
        assert_eq!(a.verdict, Verdict::Direct, "{a:?}");
        let a = analyze(&rounds(1.0, Some(0.0), &steady), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::BufferedFallback);
    }

    #[test]
    fn bursty_or_overwhelming_noise_is_inconclusive() {
        let bursty = [0.0, 200.0, 20.0];
        let a = analyze(&rounds(0.0, Some(0.0), &bursty), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::Inconclusive);
        assert!(a.reasons[0].contains("varied"), "{:?}", a.reasons);
        let loud = [1000.0, 1010.0, 1005.0];
        let a = analyze(&rounds(0.0, Some(0.0), &loud), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::Inconclusive);
    }

    #[test]
    fn half_buffered_or_odd_control_is_inconclusive() {
        let quiet = [0.0, 0.0, 0.0];
        let a = analyze(&rounds(0.45, Some(0.0), &quiet), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::Inconclusive);
        let a = analyze(&rounds(0.0, Some(1.0), &quiet), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::Inconclusive);
        // Both buffered on a single profile: not explained by the profile.
        let a = analyze(&rounds(1.0, Some(1.0), &quiet), &btrfs(Profile::Single));
        assert_eq!(a.verdict, Verdict::Inconclusive);
        assert!(a.reasons[0].contains("single"));
    }

    #[test]
    fn median_tolerates_one_bad_round() {
        let mut r = rounds(1.0, Some(0.0), &[0.0, 0.0, 0.0]);
        r[1].test.dirtied_bytes = 0; // one odd round
        let a = analyze(&r, &btrfs(Profile::Raid0));
        assert_eq!(a.verdict, Verdict::BufferedFallback);
        assert_eq!(a.test.ratio_min, 0.0);
    }

    #[test]
    fn per_file_counts_ignore_the_filesystems_other_writers() {
        // A writer on the same filesystem: the counter sees 900 MiB/s of
        // noise in bursts, the tracepoint sees each file's own folios only.
        let mut r = rounds(0.0, Some(0.0), &[900.0, 20.0, 600.0]);
        assert_eq!(
            analyze(&r, &btrfs(Profile::Single)).verdict,
            Verdict::Inconclusive
        );
        assert_eq!(analyze_per_file(&r, &btrfs(Profile::Single), 4096), None);
        for round in &mut r {
            round.test.dirtied_folios = Some(256 * MIB / 4096);
            round.control.as_mut().unwrap().dirtied_folios = Some(0);
        }
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::BufferedFallback, "{a:?}");
        assert_eq!(a.test.ratio_median, 1.0);
        assert_eq!(a.control.unwrap().dirtied_bytes_median, 0);
        assert_eq!(a.noise.dirtied_bytes_per_sec, 0.0);
        for round in &mut r {
            round.test.dirtied_folios = Some(0);
        }
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::Direct);
    }

    #[test]
    fn exit_codes_are_distinct() {
        let codes = [
            Verdict::Direct,
            Verdict::BufferedFallback,
            Verdict::ProfileForced,
            Verdict::Inconclusive,
            Verdict::DirectBounced,
        ]
        .map(Verdict::exit_code);
        assert_eq!(codes, [0, 3, 4, 5, 6]);
    }

    /// Rounds as the tracepoints see them: per file, dirtied folios, bytes
    /// added to the page cache, calls that entered the direct path and
    /// calls bounced; 32 MiB in 1 MiB calls.
    fn traced(
        test: (u64, u64, u64, u64),
        control: (u64, u64, u64, u64),
        secs: (f64, f64),
    ) -> Vec<Round> {
        let s = |(folios, cached, direct, bounced): (u64, u64, u64, u64), seconds| WriteSample {
            bytes_written: 32 * MIB,
            dirtied_bytes: 0,
            dirtied_folios: Some(folios),
            cached_bytes: Some(cached),
            write_calls: 32,
            direct_calls: Some(direct),
            bounced_calls: Some(bounced),
            seconds,
        };
        (0..3)
            .map(|_| Round {
                test: s(test, secs.0),
                control: Some(s(control, secs.1)),
                idle: idle(0.0, 0.05),
            })
            .collect()
    }

    #[test]
    fn large_folios_count_by_their_size_not_their_number() {
        // 7.2 dirties 2 MiB folios: 16 dirtied-folio events for 32 MiB,
        // which at the page size look direct; the page cache got 32 MiB.
        let r = traced((16, 32 * MIB, 0, 0), (0, 0, 32, 0), (0.2, 0.1));
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::BufferedFallback, "{a:?}");
        assert_eq!(a.test.ratio_median, 1.0);
        assert_eq!(a.test.direct_share, Some(0.0));
        assert_eq!(a.control.unwrap().direct_share, Some(1.0));
        // A kernel without the filemap event: the folio count is all there is.
        let mut old = traced((8192, 0, 32, 0), (0, 0, 32, 0), (0.2, 0.1));
        for round in &mut old {
            round.test.cached_bytes = None;
        }
        let a = analyze_per_file(&old, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::BufferedFallback);
    }

    #[test]
    fn bounced_writes_are_their_own_verdict_with_their_cost() {
        // 7.3: the checksummed file bounced, the NOCOW one direct, at half
        // its speed.
        let r = traced((0, 0, 32, 32), (0, 0, 32, 0), (0.2, 0.1));
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::DirectBounced, "{a:?}");
        assert_eq!(a.test.behaviour, Behaviour::Bounced);
        assert_eq!(a.control.unwrap().behaviour, Behaviour::Direct);
        assert!((a.nocow_ratio.unwrap() - 0.5).abs() < 1e-9);
        let cost = a.cost.unwrap();
        assert_eq!(cost.rounds.len(), 3);
        assert!((cost.median - 0.5).abs() < 1e-9);
        assert!(cost.agrees);
        assert!(a.reasons.is_empty());
        // DUP on 7.3: NOCOW bounced too, and it is said why.
        let r = traced((0, 0, 32, 32), (0, 0, 32, 32), (0.2, 0.2));
        let a = analyze_per_file(&r, &btrfs(Profile::Dup), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::DirectBounced);
        assert!(a.reasons[0].contains("dup"), "{:?}", a.reasons);
        // Bounced NOCOW next to a direct checksummed file: no kernel does it.
        let r = traced((0, 0, 32, 0), (0, 0, 32, 32), (0.1, 0.1));
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::Inconclusive);
        // A few bounced calls among direct ones do not make it bounced.
        let r = traced((0, 0, 32, 3), (0, 0, 32, 0), (0.1, 0.1));
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::Direct);
        // Without the dio event, a bounce cannot be told from direct.
        let mut r = traced((0, 0, 32, 32), (0, 0, 32, 0), (0.2, 0.1));
        for round in &mut r {
            round.test.direct_calls = None;
            round.test.bounced_calls = None;
        }
        let a = analyze_per_file(&r, &btrfs(Profile::Single), 4096).unwrap();
        assert_eq!(a.verdict, Verdict::Direct);
        assert_eq!(a.test.bounced_share, None);
    }

    #[test]
    fn cost_is_per_round_and_agrees_only_within_the_bound() {
        // The test file at 40%, 80%, 50% of the control's speed, round by
        // round: the median is 50%, the range 40-80%, and 2x apart is no
        // agreement.
        let mut r = rounds(0.0, Some(0.0), &[0.0, 0.0, 0.0]);
        for (round, secs) in r.iter_mut().zip([2.5, 1.25, 2.0]) {
            round.test.seconds = secs;
        }
        let cost = analyze(&r, &btrfs(Profile::Single)).cost.unwrap();
        assert_eq!(cost.rounds, [0.4, 0.8, 0.5]);
        assert_eq!((cost.median, cost.min, cost.max), (0.5, 0.4, 0.8));
        assert!(!cost.agrees);
        // Within 25% of each other: they agree.
        r[1].test.seconds = 2.2;
        assert!(analyze(&r, &btrfs(Profile::Single)).cost.unwrap().agrees);
        // Without a control there is no cost.
        let r = rounds(0.0, None, &[0.0, 0.0]);
        let ctx = Context {
            data_profiles: vec![],
        };
        assert_eq!(analyze(&r, &ctx).cost, None);
    }
}
