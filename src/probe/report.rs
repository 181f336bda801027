//! The `probe-dio` report: the JSON contract (docs/json.md) and the words
//! that explain each verdict.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ProbeOptions;
use super::expect::{Expectation, expect};
use super::verdict::{Analysis, Behaviour, CostSummary, FileSummary, NoiseSummary, Round, Verdict};
use crate::model::profile::Profile;
use crate::model::profile::profile_list;
use crate::sys::proc::counters::CounterKind;

/// The filesystem around the probed directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsContext {
    /// The probed directory, canonical.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub dir: PathBuf,
    /// Filesystem type (`btrfs`, `ext4`).
    pub fs_type: String,
    /// Its mount point.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub mount_point: PathBuf,
    /// Its source device.
    pub source: String,
    /// Data profiles (btrfs; empty elsewhere).
    pub data_profiles: Vec<Profile>,
    /// Mount options that change data writes: nodatasum, nodatacow,
    /// compress, compress-force.
    pub mount_options: Vec<String>,
    /// Whether the directory carries NOCOW (btrfs; null elsewhere).
    pub target_nocow: Option<bool>,
    /// Whether the directory carries the compression attribute.
    pub target_compressed: Option<bool>,
    /// The directory that was written in, opened once: its device
    /// (`major:minor`) ...
    pub dir_device: String,
    /// ... and inode.
    pub dir_inode: u64,
}

/// The counter the figures come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CounterInfo {
    /// `bdi` (this filesystem's backing device) or `vmstat` (machine-wide).
    pub source: CounterKind,
    /// `bdi btrfs-1` or `/proc/vmstat nr_dirtied`.
    pub label: String,
    /// Why the per-device counter was not used, if it was not.
    pub note: Option<String>,
}

/// Which evidence decided the verdict, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EvidenceKind {
    /// Folios dirtied per file (tracepoint writeback:writeback_dirty_folio in
    /// a private trace instance): exact under any load.
    Tracepoint,
    /// This filesystem's dirtied counter (debugfs BdiDirtied): other writers
    /// of the same filesystem disturb it.
    Bdi,
    /// The machine-wide nr_dirtied: every writer disturbs it.
    Vmstat,
}

impl From<CounterKind> for EvidenceKind {
    fn from(k: CounterKind) -> Self {
        match k {
            CounterKind::Bdi => EvidenceKind::Bdi,
            CounterKind::Vmstat => EvidenceKind::Vmstat,
        }
    }
}

/// What the counter said when the tracepoint decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrossCheck {
    /// `bdi` or `vmstat`.
    pub source: CounterKind,
    /// The verdict from the counter alone.
    pub verdict: Verdict,
    /// Whether it is the verdict given.
    pub agrees: bool,
}

/// The evidence behind the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvidenceInfo {
    /// `tracepoint`, `bdi` or `vmstat`.
    pub source: EvidenceKind,
    /// What was read (`tracepoint writeback:writeback_dirty_folio, instance
    /// btrfs-lab-123-abcdef` or the counter's label).
    pub label: String,
    /// Why the per-file tracepoint did not decide, when it did not.
    pub note: Option<String>,
    /// The counter's own verdict, when the tracepoint decided.
    pub cross_check: Option<CrossCheck>,
}

/// The probe's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Parameters {
    /// Bytes per file per round.
    pub size_bytes: u64,
    /// Bytes per write call.
    pub block_size: u64,
    /// Rounds.
    pub rounds: u32,
}

/// What the probe spent to reach its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Effort {
    /// Wall time of the whole probe, seconds (opening to verdict).
    pub seconds: f64,
    /// Bytes written, test and control files of every round.
    pub bytes_written: u64,
}

/// Everything `probe-dio` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeReport {
    /// The directory as given.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The verdict.
    pub verdict: Verdict,
    /// The exit status that goes with it.
    pub exit_code: u8,
    /// One sentence.
    pub summary: String,
    /// Why, in a few sentences.
    pub explanation: String,
    /// What to do, when something should be done.
    pub fix: Option<String>,
    /// Reasons behind an inconclusive verdict (and what else the verdict
    /// needs said: a bounced control).
    pub reasons: Vec<String>,
    /// The test file's median O_DIRECT throughput over the NOCOW control's,
    /// in the same run (null: no control); `cost` says whether the rounds
    /// agree on it.
    #[serde(default)]
    pub nocow_ratio: Option<f64>,
    /// What checksummed O_DIRECT costs against NOCOW, round by round: the
    /// per-round ratios, their median and range, and whether they agree
    /// (null: no control).
    #[serde(default)]
    pub cost: Option<CostSummary>,
    /// Kernel release.
    pub kernel: String,
    /// What the kernel version would lead one to expect (never what
    /// decided the verdict).
    pub expected: Expectation,
    /// Time and bytes to the verdict.
    #[serde(default)]
    pub effort: Effort,
    /// The filesystem.
    pub filesystem: FsContext,
    /// The evidence that decided the verdict, and the cross-check.
    pub evidence: EvidenceInfo,
    /// The counter used (the decider when the tracepoint was not used).
    pub counter: CounterInfo,
    /// Parameters.
    pub parameters: Parameters,
    /// The test file in the directory.
    pub test: FileSummary,
    /// The NOCOW control file (btrfs).
    pub control: Option<FileSummary>,
    /// Why there is no control, when there is none.
    pub control_note: Option<String>,
    /// Background dirtying seen while idle.
    pub noise: NoiseSummary,
    /// Every round's raw figures.
    pub rounds: Vec<Round>,
    /// Scratch entries of killed probes (dead pids) that were removed.
    pub removed_leftovers: Vec<String>,
    /// Trace instances of killed probes (dead pids) that were removed.
    pub removed_trace_instances: Vec<String>,
}

impl ProbeReport {
    pub(super) fn new(
        opts: &ProbeOptions,
        fs: FsContext,
        kernel: String,
        (counter, evidence): (CounterInfo, EvidenceInfo),
        control_note: Option<String>,
        analysis: Analysis,
        rounds: Vec<Round>,
    ) -> Self {
        let words = explain(analysis.verdict, &fs, &analysis);
        let expected = expect(
            &kernel,
            &fs.fs_type,
            &fs.data_profiles,
            fs.target_nocow == Some(true),
            analysis.verdict,
        );
        Self {
            path: opts.path.clone(),
            verdict: analysis.verdict,
            exit_code: analysis.verdict.exit_code(),
            summary: words.summary,
            explanation: words.explanation,
            fix: words.fix,
            reasons: analysis.reasons,
            nocow_ratio: analysis.nocow_ratio,
            cost: analysis.cost,
            kernel,
            expected,
            effort: Effort::default(),
            filesystem: fs,
            evidence,
            counter,
            parameters: Parameters {
                size_bytes: opts.size_for(analysis.test.bytes_written > 0),
                block_size: opts.block_size,
                rounds: opts.rounds,
            },
            test: analysis.test,
            control: analysis.control,
            control_note,
            noise: analysis.noise,
            rounds,
            removed_leftovers: Vec::new(),
            removed_trace_instances: Vec::new(),
        }
    }
}

impl ProbeReport {
    /// "checksummed O_DIRECT runs at 62% of NOCOW here (58–66% in 3
    /// rounds)" when the rounds agree ([`CostSummary::agrees`]), "the cost
    /// varies here: 25–62% of NOCOW in 3 rounds" when they do not; nothing
    /// without a NOCOW control or when the directory is NOCOW itself (it
    /// would compare NOCOW with NOCOW).
    pub fn cost_sentence(&self) -> Option<String> {
        cost_words(
            self.cost.as_ref(),
            self.filesystem.target_nocow,
            self.verdict,
        )
    }

    /// "7.3.4 expects direct-bounced" with the agreement, for the text.
    pub fn expectation_sentence(&self) -> String {
        let x = &self.expected;
        match (x.verdict, x.agrees) {
            (Some(_), Some(true)) => {
                format!("as the kernel version leads one to expect ({})", x.basis)
            }
            (Some(v), Some(false)) => format!(
                "NOT what the kernel version leads one to expect ({}: {}): a backport or a distribution patch?",
                v.name(),
                x.basis
            ),
            (Some(v), None) => format!(
                "the kernel version leads one to expect {} ({})",
                v.name(),
                x.basis
            ),
            (None, _) => format!("the kernel version does not tell ({})", x.basis),
        }
    }
}

struct Words {
    summary: String,
    explanation: String,
    fix: Option<String>,
}

const NOCOW_FIX: &str = "For O_DIRECT writers (databases, VM images) create the files in a NOCOW directory: \
make a new empty directory and run `chattr +C` on it before any file is created there (NOCOW files have no \
data checksums and no compression). A benchmark with O_DIRECT on checksummed files measures the page cache, \
not the drive.";

fn explain(verdict: Verdict, fs: &FsContext, analysis: &Analysis) -> Words {
    let btrfs = fs.fs_type == "btrfs";
    let profiles = profile_list(&fs.data_profiles);
    match verdict {
        Verdict::Direct => {
            let why = if !btrfs {
                format!("{} honours O_DIRECT: the writes dirtied no page cache.", fs.fs_type)
            } else if fs.target_nocow == Some(true) {
                "The directory is NOCOW, so its files carry no data checksums and btrfs writes them directly.".to_owned()
            } else if fs.mount_options.iter().any(|o| o == "nodatasum" || o == "nodatacow") {
                "The filesystem is mounted without data checksums, so btrfs writes directly.".to_owned()
            } else {
                "btrfs wrote checksummed files directly: this kernel neither falls back to buffered writes \
                 (Linux 6.15 and later do) nor dirties pages for them (bounce buffers)."
                    .to_owned()
            };
            Words {
                summary: "O_DIRECT writes here are direct: they bypass the page cache.".to_owned(),
                explanation: why,
                fix: None,
            }
        }
        Verdict::DirectBounced => {
            let nocow_too = analysis
                .control
                .is_some_and(|c| c.behaviour == Behaviour::Bounced);
            let mut explanation = "This kernel (7.3 and later) keeps O_DIRECT writes out of the page cache but \
                 copies each one into a bounce buffer of its own before it computes the checksums \
                 (IOMAP_DIO_BOUNCE), so a buffer changed during the write cannot leave a wrong checksum. \
                 Nothing was dirtied; the copy costs CPU and memory bandwidth."
                .to_owned();
            if nocow_too {
                explanation.push_str(&format!(
                    " The NOCOW control was bounced too: with the {profiles} data profile the copies must not \
                     differ, so every O_DIRECT write is bounced, NOCOW included."
                ));
            } else if analysis.control.is_some() {
                explanation.push_str(" The NOCOW control was written without a copy.");
            }
            Words {
                summary: "O_DIRECT writes here bypass the page cache, copied through a bounce buffer."
                    .to_owned(),
                explanation,
                fix: (!nocow_too && btrfs).then(|| {
                    "Usually nothing: checksums are kept and the page cache is not used. If the copy's cost \
                     (the ratio to NOCOW above) matters more than data checksums, create the files in a NOCOW \
                     directory (a new empty directory with `chattr +C`)."
                        .to_owned()
                }),
            }
        }
        Verdict::BufferedFallback if btrfs => {
            let mut explanation = "Since Linux 6.15 (commit 968f19c5b1b7, also in 6.6 and 6.12 stable) btrfs writes \
                 files that carry data checksums through the page cache even when they are opened with O_DIRECT, \
                 so a buffer changed during the write cannot leave a wrong checksum. The NOCOW control in the \
                 same filesystem was direct, so the checksums are the cause."
                .to_owned();
            let compression: Vec<String> = fs
                .mount_options
                .iter()
                .filter(|o| o.starts_with("compress"))
                .map(|o| format!("the mount option {o}"))
                .chain((fs.target_compressed == Some(true)).then(|| "the directory's compression attribute".to_owned()))
                .collect();
            if !compression.is_empty() {
                explanation.push_str(&format!(
                    " Compression ({}) is a second reason: btrfs builds compressed extents in the page cache, \
                     so it buffers O_DIRECT writes to files it may compress; NOCOW files are never compressed.",
                    compression.join(", ")
                ));
            }
            Words {
                summary: "O_DIRECT writes here are silently turned into buffered writes.".to_owned(),
                explanation,
                fix: Some(NOCOW_FIX.to_owned()),
            }
        }
        Verdict::BufferedFallback => Words {
            summary: "O_DIRECT writes here are silently turned into buffered writes.".to_owned(),
            explanation: format!(
                "{} dirtied about as much page cache as the probe wrote with O_DIRECT.",
                fs.fs_type
            ),
            fix: Some(format!(
                "Check how {} handles O_DIRECT (mount options, file attributes); benchmarks with O_DIRECT \
                 here measure the page cache.",
                fs.fs_type
            )),
        },
        Verdict::ProfileForced => Words {
            summary: format!(
                "Every O_DIRECT write on this filesystem is buffered, NOCOW files included: the data profile is {profiles}."
            ),
            explanation: "With data profiles that keep several copies (DUP, RAID1, RAID1C3/4, RAID10, RAID5/6) \
                 current kernels write O_DIRECT through the page cache, so the copies cannot differ when the \
                 buffer changes during the write. The NOCOW control was buffered as well."
                .to_owned(),
            fix: Some(
                "If O_DIRECT throughput matters more than redundancy of data, use a single or raid0 data profile \
                 (raid0 loses all data when one device fails); otherwise benchmark this filesystem without O_DIRECT."
                    .to_owned(),
            ),
        },
        Verdict::Inconclusive => Words {
            summary: "The probe could not tell whether O_DIRECT writes are direct here.".to_owned(),
            explanation: analysis.reasons.join("; "),
            fix: Some(
                "Run as root so the per-file tracepoint (tracefs) or the per-filesystem counter (debugfs) \
                 is used; stop other writers on this machine and try again; raise --rounds or --file-size."
                    .to_owned(),
            ),
        },
    }
}

/// [`ProbeReport::cost_sentence`], from its parts.
fn cost_words(
    cost: Option<&CostSummary>,
    target_nocow: Option<bool>,
    verdict: Verdict,
) -> Option<String> {
    if target_nocow == Some(true) {
        return None;
    }
    let cost = cost?;
    let pct = |x: f64| format!("{:.0}", (x * 100.0).round());
    let how = match verdict {
        Verdict::DirectBounced => ", the bounce copy",
        Verdict::BufferedFallback => ", through the page cache",
        Verdict::ProfileForced => ", NOCOW is buffered too on this profile",
        _ => "",
    };
    let n = cost.rounds.len();
    Some(if cost.agrees {
        format!(
            "checksummed O_DIRECT runs at {}% of NOCOW here ({}–{}% in {n} rounds{how})",
            pct(cost.median),
            pct(cost.min),
            pct(cost.max)
        )
    } else if n < 2 {
        format!(
            "one round cannot tell the cost: it ran at {}% of NOCOW (use --rounds 3)",
            pct(cost.median)
        )
    } else {
        format!(
            "the cost varies here: {}–{}% of NOCOW in {n} rounds",
            pct(cost.min),
            pct(cost.max)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(rounds: &[f64]) -> CostSummary {
        let sample = |mib_per_s: f64| super::super::verdict::WriteSample {
            bytes_written: 4 << 20,
            dirtied_bytes: 0,
            dirtied_folios: None,
            cached_bytes: None,
            write_calls: 4,
            direct_calls: None,
            bounced_calls: None,
            seconds: 4.0 / mib_per_s,
        };
        let rounds: Vec<Round> = rounds
            .iter()
            .map(|&ratio| Round {
                test: sample(1000.0 * ratio),
                control: Some(sample(1000.0)),
                idle: super::super::verdict::IdleSample {
                    dirtied_bytes: 0,
                    seconds: 0.01,
                },
            })
            .collect();
        super::super::verdict::cost_of(&rounds).unwrap()
    }

    #[test]
    fn probe_cost_is_a_figure_only_when_the_rounds_agree() {
        // Rounds as issue 52 saw them from run to run: a range, no figure.
        let varies = cost(&[0.60, 0.25, 0.62]);
        assert!(!varies.agrees);
        let s = cost_words(Some(&varies), Some(false), Verdict::BufferedFallback).unwrap();
        assert_eq!(s, "the cost varies here: 25–62% of NOCOW in 3 rounds");
        assert!(!s.contains("runs at"), "{s}");
        // Rounds within 25% of each other: the median, with its range.
        let steady = cost(&[0.60, 0.55, 0.62]);
        assert!(steady.agrees);
        let s = cost_words(Some(&steady), Some(false), Verdict::BufferedFallback).unwrap();
        assert_eq!(
            s,
            "checksummed O_DIRECT runs at 60% of NOCOW here (55–62% in 3 rounds, through the page cache)"
        );
        // One round cannot agree with anything.
        let one = cost(&[0.6]);
        assert!(!one.agrees);
        let s = cost_words(Some(&one), Some(false), Verdict::Direct).unwrap();
        assert!(s.starts_with("one round cannot tell the cost"), "{s}");
        // No control, no cost.
        assert_eq!(cost_words(None, None, Verdict::Direct), None);
    }

    #[test]
    fn probe_cost_of_a_nocow_directory_is_not_compared_with_nocow() {
        // A NOCOW directory against the NOCOW control is NOCOW against
        // itself: whatever the rounds say, no "of NOCOW" sentence.
        for rounds in [[0.56, 0.58, 0.57], [0.56, 1.22, 0.9]] {
            let c = cost(&rounds);
            assert_eq!(cost_words(Some(&c), Some(true), Verdict::Direct), None);
        }
    }
}
