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
    /// Why the verdict is what it is when that needs saying (inconclusive).
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
    FileSummary {
        bytes_written: samples.first().map_or(0, |(s, _)| s.bytes_written),
        dirtied_bytes_median: median(&mut dirtied).round() as u64,
        raw_ratio_median: median(&mut raw),
        ratio_median,
        ratio_min: corrected.first().copied().unwrap_or(0.0),
        ratio_max: corrected.last().copied().unwrap_or(0.0),
        throughput_bytes_per_sec: median(&mut speed),
        behaviour: behaviour_of(ratio_median),
    }
}

/// Analyses the rounds from the per-file tracepoint counts: each file's
/// own dirtied folios (times the page size), with no background to
/// subtract. `None` unless every sample was traced.
pub fn analyze_per_file(rounds: &[Round], ctx: &Context, page_size: u64) -> Option<Analysis> {
    let exact = |s: &WriteSample| -> Option<WriteSample> {
        Some(WriteSample {
            dirtied_bytes: s.dirtied_folios?.saturating_mul(page_size),
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
    Analysis {
        verdict,
        test,
        control,
        noise,
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
            _ => Verdict::BufferedFallback,
        };
    };
    match (test.behaviour, control.behaviour) {
        (_, Behaviour::Unclear) => {
            reasons.push(format!(
                "the NOCOW control dirtied {:.2} of what it wrote, which is neither direct nor buffered",
                control.ratio_median
            ));
            Verdict::Inconclusive
        }
        (Behaviour::Direct, Behaviour::Direct) => Verdict::Direct,
        (Behaviour::Buffered, Behaviour::Direct) => Verdict::BufferedFallback,
        (Behaviour::Buffered, Behaviour::Buffered) => {
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
        (Behaviour::Direct, Behaviour::Buffered) => {
            reasons.push(
                "the NOCOW control looked buffered while the test file did not: another writer on this filesystem?"
                    .to_owned(),
            );
            Verdict::Inconclusive
        }
        (Behaviour::Unclear, _) => Verdict::Inconclusive,
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
        ]
        .map(Verdict::exit_code);
        assert_eq!(codes, [0, 3, 4, 5]);
    }
}
