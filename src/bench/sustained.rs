//! `bench --sustained`: one long sequential O_DIRECT write, its rate over
//! time, and the cliff where it drops and stays down ([`super::cliff`]).
//!
//! The rate series is built from cumulative bytes at real timestamps, so
//! that it cannot count a byte twice: fio logs every completed I/O with
//! its completion time and size (`write_iops_log` without averaging), the
//! cumulative bytes are interpolated between completions at each sampling
//! boundary, and each sample is the difference of two of them. Its
//! integral is the bytes fio wrote by construction; a stall is a stretch of
//! low samples, never hidden under the next window's rate. (fio's averaged
//! bandwidth log, used before, writes an entry only for a window in which
//! I/O completed, averaged over that window alone: read as covering the
//! time since the entry before, a burst after a stall counted as if it
//! had lasted the stall, up to 1.9× the bytes written.) Each member's
//! series comes from its `/proc/diskstats` counters, sampled by btrfs-lab
//! at real timestamps too. The report reconciles the series with fio's
//! byte count and the members' counters ([`SeriesCheck`]); a series that
//! does not add up is flagged and its cliff not called.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::finding::{Code, Finding};
use crate::model::profile::Profile;
use crate::parse::size::format_iec;
use crate::report::rate::format_mb_fine;
use crate::report::units::{decimal_gb, decimal_mb};
use crate::sys::fs::beneath::TrustedDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::proc::diskstats;
use crate::sys::tools::fio::FioRunner;
use crate::ui::Ui;

use super::cliff::{self, CliffAnalysis, Point, Shape};
use super::jobs::IOENGINE;
use super::kit::{self, WorkDir, check_stop};
use super::report::{MemberDevice, SystemInfo, TargetInfo};

/// Smallest sustained write worth running.
pub(crate) const MIN_SIZE: u64 = 256 << 20;
/// Without SIZE or --fill: this percent of the free space.
pub(crate) const DEFAULT_FILL_PERCENT: u32 = 80;
/// The test file's name.
pub const TEST_FILE: &str = "sustained.dat";

/// fio's per-I/O log prefix (fio writes `io_iops.1.log`).
const LOG_PREFIX: &str = "io";
/// The series must account for the bytes written within this share.
pub(crate) const RECONCILE_TOLERANCE: f64 = 0.02;

/// Seconds without the test file growing before the write counts as stuck.
const STALL_SECS: f64 = 120.0;
/// Report version.
/// 2: the series from completed I/Os (was fio's averaged bandwidth log),
/// `series_check`.
pub(crate) const REPORT_VERSION: u32 = 2;
/// Exit status when a signal stopped the write (the report is still given).
pub(crate) const EXIT_STOPPED: u8 = crate::model::exit::INTERRUPTED.code;

/// What to run.
#[derive(Debug, Clone)]
pub struct SustainedOptions {
    /// DIR.
    pub dir: PathBuf,
    /// Bytes to write; `None`: `fill_percent` of the free space.
    pub size: Option<u64>,
    /// Percent of the free space to write (1-95).
    pub fill_percent: Option<u32>,
    /// Stop after this many seconds.
    pub time_limit_secs: Option<u64>,
    /// Where /proc and /sys are read.
    pub sysroot: SysRoot,
}

impl SustainedOptions {
    /// Defaults for DIR.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            size: None,
            fill_percent: None,
            time_limit_secs: None,
            sysroot: SysRoot::host(),
        }
    }

    /// Checks the numbers that do not depend on the filesystem.
    pub fn validate(&self) -> Result<()> {
        if let Some(s) = self.size
            && s < MIN_SIZE
        {
            return Err(Error::usage(format!(
                "--sustained {} is too small to show a sustained rate: use {} or more",
                format_iec(s),
                format_iec(MIN_SIZE)
            )));
        }
        if let Some(p) = self.fill_percent
            && !(1..=95).contains(&p)
        {
            return Err(Error::usage(
                "--fill must be between 1 and 95 (percent of the free space)",
            ));
        }
        if let Some(t) = self.time_limit_secs
            && t < 5
        {
            return Err(Error::usage("--time must be at least 5 seconds"));
        }
        Ok(())
    }
}

/// Free space left alone whatever is asked.
pub fn margin(available: u64) -> u64 {
    (available / 20).max(64 << 20)
}

/// The bytes to write given the free space, or a refusal that says how
/// much is needed.
pub(crate) fn plan_size(opts: &SustainedOptions, available: u64, dir: &Path) -> Result<u64> {
    let mib = |x: u64| x / (1 << 20) * (1 << 20);
    let room = available.saturating_sub(margin(available));
    let size = match opts.size {
        Some(s) => mib(s),
        None => mib((available / 100
            * u64::from(opts.fill_percent.unwrap_or(DEFAULT_FILL_PERCENT)))
        .min(room)),
    };
    if size < MIN_SIZE || size > room {
        let need = size.max(MIN_SIZE) + margin(available);
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough free space in {} for a sustained write: it needs {} ({} written + {} left free), {} is free",
                dir.display(),
                format_iec(need),
                format_iec(size.max(MIN_SIZE)),
                format_iec(margin(available)),
                format_iec(available)
            ),
        )
        .with_hint("free some space, or give a smaller SIZE or --fill"));
    }
    Ok(size)
}

/// The warning shown before the write: how much, the wear, how long.
pub fn warning(size: u64, time_limit_secs: Option<u64>, dir: &Path) -> String {
    let at = |mbps: f64| {
        let s = (size as f64 / (mbps * 1e6)).ceil() as u64;
        let s = time_limit_secs.map_or(s, |t| s.min(t));
        format!("{}m{:02}s", s / 60, s % 60)
    };
    format!(
        "bench --sustained writes {} of incompressible data under {} in one go: on an SSD that is {} of its rated write endurance (TBW). It takes about {} at 2000 MB/s, {} at 500 MB/s, {} at 100 MB/s{}. Ctrl-C stops it early and still reports.",
        format_iec(size),
        dir.display(),
        format_iec(size),
        at(2000.0),
        at(500.0),
        at(100.0),
        time_limit_secs.map_or(String::new(), |t| format!(" (at most {t} s: --time)")),
    )
}

/// What the progress display shows, once each sampling period.
#[derive(Debug, Clone)]
pub struct SustainedProgress {
    /// Bytes written so far.
    pub bytes_written: u64,
    /// Of.
    pub size_bytes: u64,
    /// Rate over the last sampling period.
    pub bytes_per_sec: f64,
    /// Seconds left, estimated.
    pub eta_secs: u64,
}

/// One member device's write rate, sample by sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberSeries {
    /// Kernel name.
    pub device: String,
    /// Bytes the device wrote during the run (diskstats).
    pub write_bytes: u64,
    /// Its series.
    pub series: Vec<Point>,
    /// Its cliff.
    pub analysis: CliffAnalysis,
}

/// The report of `bench --sustained`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SustainedReport {
    /// Format version.
    pub(crate) report_version: u32,
    /// Always `sustained`.
    pub mode: String,
    /// The exit status the CLI gives (0, or 130 when stopped early).
    pub exit_code: u8,
    /// One sentence.
    pub summary: String,
    /// Machine and fio.
    pub system: SystemInfo,
    /// The filesystem.
    pub target: TargetInfo,
    /// Bytes planned.
    pub size_bytes: u64,
    /// `--time`.
    pub time_limit_secs: Option<u64>,
    /// Bytes fio wrote.
    pub bytes_written: u64,
    /// Seconds the write ran.
    pub seconds: f64,
    /// A signal stopped it before SIZE or the time limit.
    pub stopped_early: bool,
    /// The test file and its directory were removed.
    pub test_file_removed: bool,
    /// The sampling period of the series, ms (the test file's and the
    /// members'): 100 to 250, scaled to the run.
    pub sample_period_msec: u64,
    /// The test file's write rate, one point each sampling period: from
    /// fio's per-I/O completion log (cumulative bytes at real timestamps).
    pub series: Vec<Point>,
    /// The series reconciled with the bytes written and the members'
    /// counters.
    pub series_check: SeriesCheck,
    /// The cliff on it.
    pub analysis: CliffAnalysis,
    /// Each member's series (diskstats).
    pub members: Vec<MemberSeries>,
    /// What the run shows, as findings.
    pub findings: Vec<Finding>,
    /// Notes.
    pub notes: Vec<String>,
    /// The fio job file.
    pub job_file: String,
}

/// The series against what else counted the bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SeriesCheck {
    /// Bytes the series accounts for (Σ rate × its interval).
    pub series_bytes: u64,
    /// Bytes fio wrote (its JSON `io_bytes`).
    pub bytes_written: u64,
    /// Bytes the member devices wrote during the run (`/proc/diskstats`),
    /// when every member was seen; metadata and other writers to the same
    /// devices included.
    pub device_bytes: Option<u64>,
    /// The least the members must have written for `bytes_written`: the
    /// data profile's copies (RAID1: 2, RAID1C3: 3, ...; 1 off btrfs).
    pub device_bytes_expected: Option<u64>,
    /// The series adds up (within 2%) and the members wrote at least what
    /// was expected: its shape can be trusted.
    pub reconciled: bool,
    /// Why not, when not.
    pub reason: Option<String>,
}

/// The least bytes the devices write for `bytes` of data in `profiles`
/// (the smallest copy count among them; 1 without a btrfs profile).
pub(crate) fn least_device_bytes(bytes: u64, profiles: &[Profile]) -> u64 {
    let copies = profiles
        .iter()
        .map(|p| p.geometry().ncopies)
        .min()
        .unwrap_or(1)
        .max(1);
    bytes.saturating_mul(u64::from(copies))
}

/// Reconciles the series (its total `series_bytes`) with fio's count and
/// the members' counters.
pub(crate) fn check_series(
    series_bytes: u64,
    bytes_written: u64,
    device_bytes: Option<u64>,
    profiles: &[Profile],
) -> SeriesCheck {
    let expected = device_bytes.map(|_| least_device_bytes(bytes_written, profiles));
    let off = |a: u64, b: u64| (a as f64 - b as f64).abs() / (b.max(1)) as f64;
    let mb = |b: u64| decimal_mb(b as f64);
    let reason = if bytes_written == 0 {
        None
    } else if series_bytes == 0 {
        Some("fio logged no completed write: there is no series".to_owned())
    } else if off(series_bytes, bytes_written) > RECONCILE_TOLERANCE {
        Some(format!(
            "the series accounts for {} but fio wrote {} ({:+.1}%)",
            mb(series_bytes),
            mb(bytes_written),
            100.0 * (series_bytes as f64 / bytes_written as f64 - 1.0)
        ))
    } else {
        match (device_bytes, expected) {
            (Some(d), Some(e)) if (d as f64) < (1.0 - RECONCILE_TOLERANCE) * e as f64 => {
                Some(format!(
                    "the member devices wrote {} where the {} written needed at least {}: the write did not reach the drives as measured",
                    mb(d),
                    mb(bytes_written),
                    mb(e)
                ))
            }
            _ => None,
        }
    };
    SeriesCheck {
        series_bytes,
        bytes_written,
        device_bytes,
        device_bytes_expected: expected,
        reconciled: reason.is_none(),
        reason,
    }
}

/// The write-rate series of completed I/Os (see the module
/// documentation): `completions` are (milliseconds since the start,
/// bytes) in completion order; one point every `period_ms`, the last one
/// at the last completion. Returns the series and the bytes it accounts
/// for.
pub(crate) fn series_of_completions(
    completions: impl IntoIterator<Item = (u64, u64)>,
    period_ms: u64,
) -> (Vec<Point>, u64) {
    /// The series so far: its points, and the last boundary (ms) with
    /// the cumulative bytes there.
    struct Acc {
        points: Vec<Point>,
        at: f64,
        bytes: f64,
    }
    impl Acc {
        fn push(&mut self, b: f64, c: f64) {
            let dt = (b - self.at) / 1000.0;
            if dt > 0.0 {
                self.points.push(Point {
                    t_secs: b / 1000.0,
                    bytes_per_sec: ((c - self.bytes) / dt).max(0.0),
                });
            }
            self.at = b;
            self.bytes = c;
        }
    }
    let period = period_ms.max(1) as f64;
    let mut acc = Acc {
        points: Vec::new(),
        at: 0.0,
        bytes: 0.0,
    };
    // The last completion seen: ms, cumulative bytes.
    let (mut tp, mut cp) = (0.0f64, 0u64);
    for (msec, bytes) in completions {
        // fio's clock is monotonic; a line out of order counts at the
        // time already reached.
        let t = (msec as f64).max(tp);
        let c = cp.saturating_add(bytes);
        let mut b = acc.at + period;
        while b <= t {
            // t > tp here, as b > acc.at >= tp.
            acc.push(b, cp as f64 + (c - cp) as f64 * (b - tp) / (t - tp));
            b += period;
        }
        tp = t;
        cp = c;
    }
    if (cp as f64) > acc.bytes {
        if tp > acc.at {
            acc.push(tp, cp as f64);
        } else if let Some(last) = acc.points.last_mut() {
            // Completions in the millisecond of the last boundary, after
            // it was reached: they belong to that sample.
            last.bytes_per_sec += (cp as f64 - acc.bytes) / (period / 1000.0);
        } else {
            // Everything completed in the first millisecond.
            acc.push(1.0, cp as f64);
        }
    }
    (acc.points, cp)
}

/// The write series of fio's per-I/O log, read line by line (memory in
/// the number of samples, not of I/Os).
pub(crate) fn series_of_log(log: impl std::io::BufRead, period_ms: u64) -> (Vec<Point>, u64) {
    let completions = log
        .lines()
        .map_while(std::result::Result::ok)
        .filter_map(|l| crate::parse::fio::parse_io_log_line(&l))
        .filter(|e| e.direction == 1)
        .map(|e| (e.msec, e.bytes));
    series_of_completions(completions, period_ms)
}

/// Shortest sampling period, ms: a short run of a fast device still makes
/// a series.
pub const MIN_SAMPLE_MSEC: u64 = 100;
/// Longest, ms (long runs: fewer points).
pub const MAX_SAMPLE_MSEC: u64 = 250;

/// The sampling period of fio's bandwidth log and of the member counters,
/// scaled to the run: [`MIN_SAMPLE_MSEC`] for a run of up to two minutes,
/// [`MAX_SAMPLE_MSEC`] from ten minutes on, in 50 ms steps between. The
/// run's length is not known before it: the longest it can be at a fast
/// drive's 2000 MB/s (a slower drive writes longer, so has more samples),
/// or `--time`.
pub fn sample_period_msec(size: u64, time_limit_secs: Option<u64>) -> u64 {
    let est = size as f64 / 2e9;
    let est = time_limit_secs.map_or(est, |t| est.min(t as f64));
    let (lo, hi) = (120.0, 600.0);
    let f = ((est - lo) / (hi - lo)).clamp(0.0, 1.0);
    let ms = MIN_SAMPLE_MSEC as f64 + f * (MAX_SAMPLE_MSEC - MIN_SAMPLE_MSEC) as f64;
    ((ms / 50.0).round() as u64 * 50).clamp(MIN_SAMPLE_MSEC, MAX_SAMPLE_MSEC)
}

/// The fio job of the sustained write.
/// The job file. `file` and `log_prefix` are names relative to fio's
/// working directory (the held work directory), chosen by btrfs-lab.
pub fn job_file(file: &str, size: u64, time_limit_secs: Option<u64>, log_prefix: &str) -> String {
    let mut j = String::from(
        "; btrfs-lab bench --sustained: one sequential O_DIRECT write\n; run it by hand, in an empty directory on the filesystem to test:\n; fio THIS_FILE\n[sustained]\n",
    );
    j.push_str(&format!("filename={file}\nthread\n"));
    j.push_str(&format!(
        "ioengine={IOENGINE}\ndirect=1\nfallocate=none\nrw=write\nbs=1048576\niodepth=8\nnumjobs=1\nsize={size}\nrefill_buffers=0\nscramble_buffers=0\nend_fsync=1\n"
    ));
    if let Some(t) = time_limit_secs {
        j.push_str(&format!("runtime={t}\n"));
    }
    // Every completed I/O with its time and size (no log_avg_msec): the
    // series is built from them.
    j.push_str(&format!("write_iops_log={log_prefix}\n"));
    j
}

/// Seconds as the reports show them: one decimal, two below 0.1 s, so a
/// run that took time never reads "0.0 s".
pub fn format_secs(s: f64) -> String {
    if s > 0.0 && s < 0.1 {
        format!("{s:.2} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The findings and the sentence for an analysis.
pub fn verdict(
    a: &CliffAnalysis,
    check: &SeriesCheck,
    members: &[MemberSeries],
    data_profiles: &[Profile],
    bytes_written: u64,
    seconds: f64,
) -> (String, Vec<Finding>) {
    let mut findings = Vec::new();
    let average = format_mb_fine(if seconds > 0.0 {
        bytes_written as f64 / seconds
    } else {
        0.0
    });
    if let Some(reason) = check.reason.as_deref() {
        let mut f = Finding::new(
            Code::SustainedSeriesMismatch,
            format!("the write-rate series does not add up: {reason}"),
            "a curve that counts bytes the drives did not write (or misses bytes they did) puts a cliff where there is none: no cliff, decline or steady rate is called from it",
        )
        .with_evidence("series", decimal_gb(check.series_bytes as f64))
        .with_evidence("written (fio)", decimal_gb(check.bytes_written as f64));
        if let (Some(d), Some(e)) = (check.device_bytes, check.device_bytes_expected) {
            f = f
                .with_evidence("members wrote", decimal_gb(d as f64))
                .with_evidence("members needed at least", decimal_gb(e as f64));
        }
        findings.push(f);
        let summary = format!(
            "{} written in {} ({} on average); the rate series is flagged, no cliff is called: {reason}",
            decimal_gb(bytes_written as f64),
            format_secs(seconds),
            average
        );
        return (summary, findings);
    }
    let summary = match a.shape {
        Shape::Cliff => {
            let before = a.bytes_before.unwrap_or(0) as f64;
            let (rb, ra) = (a.rate_before.unwrap_or(0.0), a.rate_after.unwrap_or(0.0));
            let mut f = Finding::new(
                Code::SustainedWriteCliff,
                format!(
                    "the write rate dropped from {} to {} after {}",
                    format_mb_fine(rb),
                    format_mb_fine(ra),
                    decimal_gb(before)
                ),
                "a burst of this size runs at the first rate, anything longer at the second: the drives' write cache (SLC on consumer SSDs) filled",
            )
            .with_evidence("bytes before the cliff", decimal_gb(before))
            .with_evidence("rate before", format_mb_fine(rb))
            .with_evidence("rate after", format_mb_fine(ra))
            .with_evidence("after / before", format!("{:.2}", a.ratio.unwrap_or(0.0)));
            let cliffs: Vec<&MemberSeries> = members
                .iter()
                .filter(|m| m.analysis.shape == Shape::Cliff)
                .collect();
            let raid0 = data_profiles.contains(&Profile::Raid0) && members.len() > 1;
            let mut s = format!(
                "cliff after {}: {} before, {} after (×{:.2})",
                decimal_gb(before),
                format_mb_fine(rb),
                format_mb_fine(ra),
                a.ratio.unwrap_or(0.0)
            );
            if raid0 && cliffs.len() == members.len() {
                let per = before / members.len() as f64;
                f = f.with_evidence(
                    "per drive",
                    format!("{} × {}", members.len(), decimal_gb(per)),
                );
                s.push_str(&format!(
                    "; on this RAID0 of {} drives that is {} × {} per drive: each drive's write cache filled",
                    members.len(),
                    members.len(),
                    decimal_gb(per)
                ));
            }
            findings.push(f);
            s
        }
        Shape::Decline => {
            let (rb, ra) = (a.rate_before.unwrap_or(0.0), a.rate_after.unwrap_or(0.0));
            findings.push(
                Finding::new(
                    Code::SustainedWriteDecline,
                    format!("the write rate sank gradually from {} to {}", format_mb_fine(rb), format_mb_fine(ra)),
                    "no single step: a gradual decline is more often heat (thermal throttling) than a cache filling",
                )
                .with_evidence("start (smoothed)", format_mb_fine(rb))
                .with_evidence("end (smoothed)", format_mb_fine(ra)),
            );
            format!(
                "no cliff within {}, but a gradual decline from {} to {} (heat?)",
                decimal_gb(bytes_written as f64),
                format_mb_fine(rb),
                format_mb_fine(ra)
            )
        }
        Shape::Steady => format!(
            "no cliff within {}: {} sustained (median)",
            decimal_gb(bytes_written as f64),
            format_mb_fine(a.median_bytes_per_sec)
        ),
        Shape::TooShort => format!(
            "{} written in {} ({} on average): too short a series ({} sample{}) to tell a cliff; a larger SIZE writes for longer",
            decimal_gb(bytes_written as f64),
            format_secs(seconds),
            average,
            a.samples,
            if a.samples == 1 { "" } else { "s" }
        ),
    };
    (summary, findings)
}

fn member_series(names: &[String], samples: &[(f64, Vec<u64>)]) -> Vec<MemberSeries> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut series = Vec::new();
            for w in samples.windows(2) {
                let dt = w[1].0 - w[0].0;
                if dt <= 0.0 {
                    continue;
                }
                let d = w[1].1[i].saturating_sub(w[0].1[i]);
                series.push(Point {
                    t_secs: w[1].0,
                    bytes_per_sec: d as f64 / dt,
                });
            }
            let write_bytes = match (samples.first(), samples.last()) {
                (Some(a), Some(b)) => b.1[i].saturating_sub(a.1[i]),
                _ => 0,
            };
            let analysis = cliff::analyse(&series);
            MemberSeries {
                device: name.clone(),
                write_bytes,
                series,
                analysis,
            }
        })
        .collect()
}

fn written_by(devs: &[MemberDevice], root: &SysRoot) -> Vec<u64> {
    let stats = diskstats::read_stats(root).unwrap_or_default();
    devs.iter()
        .map(|d| {
            stats
                .iter()
                .find(|s| s.major == d.major && s.minor == d.minor)
                .map_or(0, |s| s.bytes_written())
        })
        .collect()
}

/// A sustained write planned once, on the target held: how much, and the
/// warning to confirm. [`run`] writes exactly this.
#[derive(Debug)]
pub struct SustainedPlan {
    /// DIR, held, and what was read of it.
    pub target: kit::Target,
    /// Bytes to write ([`plan_size`] on the target's free space).
    pub size: u64,
    /// What the write costs, for the confirmation ([`warning`]).
    pub warning: String,
}

/// Plans the write on `target`: its size from the free space (or a
/// refusal that says how much is needed) and the warning.
pub fn plan(opts: &SustainedOptions, target: kit::Target) -> Result<SustainedPlan> {
    let size = plan_size(opts, target.info.available_bytes, &target.info.dir)?;
    let warning = warning(size, opts.time_limit_secs, &target.info.dir);
    Ok(SustainedPlan {
        target,
        size,
        warning,
    })
}

impl SustainedPlan {
    /// The write wears the drives: asks through `ui` before it, or, with
    /// `yes`, says what it will cost as a note.
    pub fn confirm(&self, yes: bool, ui: &dyn Ui) -> Result<()> {
        if yes {
            ui.note(&self.warning);
            Ok(())
        } else {
            ui.confirm(&format!("{}\nStart the write?", self.warning), false)
        }
    }
}

/// Runs the planned sustained write (see the module documentation).
/// `progress` is called once each sampling period (100-250 ms) while fio writes; `started`
/// just before the test directory is made.
pub fn run(
    opts: &SustainedOptions,
    plan: SustainedPlan,
    fio: &mut dyn FioRunner,
    fio_path: &Path,
    started: &mut dyn FnMut(),
    progress: &mut dyn FnMut(&SustainedProgress),
) -> Result<SustainedReport> {
    let SustainedPlan { target, size, .. } = plan;
    let is_btrfs = target.is_btrfs;
    let (held, target) = target.into_held();
    kit::install_signals()?;
    check_stop()?;
    if let Some(cg) = crate::hooks::Switch::BenchCgroup.value() {
        crate::sys::proc::cgroup::join(Path::new(&cg))?;
    }

    started();
    let mut notes = kit::sweep_stale(&held);
    let work = WorkDir::create(held)?;
    kit::set_dir_mode(&work, false, is_btrfs)?;
    let file = work.dir().create_file(TEST_FILE, 0o600)?;
    let period_msec = sample_period_msec(size, opts.time_limit_secs);
    let job = job_file(TEST_FILE, size, opts.time_limit_secs, LOG_PREFIX);
    let names: Vec<String> = target.devices.iter().map(|d| d.name.clone()).collect();

    // fio may replace the (empty) file it is given by its own: the size is
    // read by name, in the held work directory.
    let size_now = || {
        work.dir()
            .stat(TEST_FILE)
            .ok()
            .flatten()
            .map_or(0, |st| st.st_size as u64)
    };
    let mut watch = Watch::new(opts, size, period_msec, &target.devices);
    let watched = fio.run_watched(work.dir(), "sustained.fio", &job, &mut || {
        watch.tick(&size_now, progress)
    })?;
    let seconds = watch.finish();
    let (series, series_bytes, logged) = read_series(work.dir(), period_msec);
    let first_job = watched.output.as_ref().and_then(|o| o.jobs.first());
    let bytes_written = first_job.map(|j| j.write.io_bytes).unwrap_or_else(size_now);
    let fio_error = first_job.map_or(0, |j| j.error);
    drop(file);
    notes.extend(work.remove()?);
    refuse_failed_write(watch.stalled, bytes_written, fio_error, watched.stopped)?;

    let members = member_series(&names, &watch.samples);
    let device_bytes = (target.devices_missing.is_empty() && !members.is_empty())
        .then(|| members.iter().map(|m| m.write_bytes).sum());
    let series_check = check_series(
        series_bytes,
        bytes_written,
        device_bytes,
        &target.data_profiles,
    );
    let analysis = cliff::analyse(&series);
    let (mut summary, findings) = verdict(
        &analysis,
        &series_check,
        &members,
        &target.data_profiles,
        bytes_written,
        seconds,
    );
    if watched.stopped {
        summary = format!(
            "stopped early after {}: {summary}",
            format_iec(bytes_written)
        );
    }
    if !logged {
        notes.push("fio left no per-I/O log: no series to analyse".to_owned());
    }
    if !target.devices_missing.is_empty() {
        notes.push(format!(
            "/proc/diskstats does not show {}: no per-member series for them",
            target.devices_missing.join(", ")
        ));
    }
    Ok(SustainedReport {
        report_version: REPORT_VERSION,
        mode: "sustained".into(),
        exit_code: if watched.stopped {
            EXIT_STOPPED
        } else if !series_check.reconciled {
            crate::model::exit::FLAGGED.code
        } else {
            0
        },
        summary,
        system: kit::system_info(fio, fio_path),
        target,
        size_bytes: size,
        time_limit_secs: opts.time_limit_secs,
        sample_period_msec: period_msec,
        series_check,
        bytes_written,
        seconds,
        stopped_early: watched.stopped,
        test_file_removed: true,
        series,
        analysis,
        members,
        findings,
        notes,
        job_file: job,
    })
}

/// Runs [`run`] with the bytes written, the rate and the ETA on the `ui`'s
/// progress bar.
pub fn measure(
    opts: &SustainedOptions,
    plan: SustainedPlan,
    fio: &mut dyn FioRunner,
    fio_path: &Path,
    ui: &dyn Ui,
) -> Result<SustainedReport> {
    let bar = ui.progress("bench --sustained {msg}");
    let result = run(opts, plan, fio, fio_path, &mut || {}, &mut |p| {
        bar.set_message(format!(
            "{} of {}  {} MB/s  ETA {}m{:02}s",
            ui.size(p.bytes_written),
            ui.size(p.size_bytes),
            crate::report::rate::mb_number(p.bytes_per_sec),
            p.eta_secs / 60,
            p.eta_secs % 60
        ))
    });
    bar.finish();
    result
}

/// The write watched while fio runs: the members' written bytes sampled
/// every period, the progress, and the watchdog.
struct Watch<'a> {
    start: Instant,
    period: f64,
    size: u64,
    time_limit_secs: Option<u64>,
    devices: &'a [MemberDevice],
    sysroot: &'a SysRoot,
    /// Seconds since the start, and each member's written bytes then.
    samples: Vec<(f64, Vec<u64>)>,
    /// The last sample's time and file size.
    last: (f64, u64),
    last_growth: f64,
    /// The file did not grow for [`STALL_SECS`].
    stalled: bool,
}

impl<'a> Watch<'a> {
    fn new(
        opts: &'a SustainedOptions,
        size: u64,
        period_msec: u64,
        devices: &'a [MemberDevice],
    ) -> Self {
        Self {
            start: Instant::now(),
            period: period_msec as f64 / 1000.0,
            size,
            time_limit_secs: opts.time_limit_secs,
            devices,
            sysroot: &opts.sysroot,
            samples: vec![(0.0, written_by(devices, &opts.sysroot))],
            last: (0.0, 0),
            last_growth: 0.0,
            stalled: false,
        }
    }

    /// Called while fio runs: samples once a period passed, reports the
    /// progress; true to stop fio (stalled, or a signal).
    fn tick(
        &mut self,
        size_now: &dyn Fn() -> u64,
        progress: &mut dyn FnMut(&SustainedProgress),
    ) -> bool {
        let t = self.start.elapsed().as_secs_f64();
        if t - self.samples.last().map_or(0.0, |s| s.0) >= self.period {
            self.samples
                .push((t, written_by(self.devices, self.sysroot)));
            let done = size_now();
            if done > self.last.1 {
                self.last_growth = t;
            }
            let rate = (done.saturating_sub(self.last.1)) as f64 / (t - self.last.0).max(1e-3);
            self.last = (t, done);
            let left_bytes = self.size.saturating_sub(done) as f64;
            let mut eta = if rate > 0.0 {
                (left_bytes / rate) as u64
            } else {
                0
            };
            if let Some(l) = self.time_limit_secs {
                eta = eta.min(l.saturating_sub(t as u64));
            }
            progress(&SustainedProgress {
                bytes_written: done,
                size_bytes: self.size,
                bytes_per_sec: rate,
                eta_secs: eta,
            });
            // The watchdog: a write that has not grown the file for
            // STALL_SECS (fio's start-up included) is stuck.
            if done < self.size && t - self.last_growth > STALL_SECS {
                self.stalled = true;
            }
        }
        self.stalled || check_stop().is_err()
    }

    /// The last sample, once fio ended; the seconds the write took.
    fn finish(&mut self) -> f64 {
        let seconds = self.start.elapsed().as_secs_f64();
        self.samples
            .push((seconds, written_by(self.devices, self.sysroot)));
        seconds
    }
}

/// fio's per-I/O log (PREFIX_iops.1.log, in its working directory) as a
/// series, read line by line (a line per I/O: 30 MB per TB written): the
/// series, the bytes it holds, and whether there was a log.
fn read_series(dir: &TrustedDir, period_msec: u64) -> (Vec<Point>, u64, bool) {
    let mut series = Vec::new();
    let mut series_bytes = 0;
    let mut logged = false;
    for n in dir.names().unwrap_or_default() {
        let n = n.to_string_lossy().into_owned();
        if n.starts_with(&format!("{LOG_PREFIX}_iops"))
            && n.ends_with(".log")
            && let Ok(f) = dir.open_file(&n, false)
        {
            (series, series_bytes) =
                series_of_log(std::io::BufReader::with_capacity(1 << 20, f), period_msec);
            logged = true;
        }
    }
    (series, series_bytes, logged)
}

/// A write that stalled, or that fio failed (not stopped by the user),
/// gives no report.
fn refuse_failed_write(
    stalled: bool,
    bytes_written: u64,
    fio_error: i64,
    stopped: bool,
) -> Result<()> {
    if stalled {
        return Err(Error::new(
            ErrorKind::Tool,
            format!(
                "the write made no progress for {STALL_SECS:.0} s after {}: stopped fio and removed the test file",
                format_iec(bytes_written)
            ),
        )
        .with_hint("a device may be stuck: look at dmesg and the drives' health before measuring again"));
    }
    if fio_error != 0 && !stopped {
        return Err(Error::new(
            ErrorKind::Tool,
            format!("fio's sustained write failed (error {fio_error})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_size_follows_the_free_space_and_refusals_say_what_is_needed() {
        let dir = Path::new("/d");
        let mut o = SustainedOptions::new(dir);
        // Default: 80% of 100 GiB.
        assert_eq!(plan_size(&o, 100 * GIB, dir).unwrap(), 80 * GIB);
        o.fill_percent = Some(50);
        assert_eq!(plan_size(&o, 100 * GIB, dir).unwrap(), 50 * GIB);
        o.size = Some(10 * GIB);
        assert_eq!(plan_size(&o, 100 * GIB, dir).unwrap(), 10 * GIB);
        // SIZE beyond the free space minus the margin: refused, with the need.
        o.size = Some(99 * GIB);
        let e = plan_size(&o, 100 * GIB, dir).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        assert!(
            e.message().contains("it needs 104.00GiB"),
            "{}",
            e.message()
        );
        // Too little free space for the default.
        let o = SustainedOptions::new(dir);
        let e = plan_size(&o, 200 << 20, dir).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        assert!(e.message().contains("needs 320.00MiB"), "{}", e.message());
    }

    #[test]
    fn options_are_validated() {
        let mut o = SustainedOptions::new("/d");
        assert!(o.validate().is_ok());
        o.size = Some(1 << 20);
        assert_eq!(o.validate().unwrap_err().exit_code(), 2);
        o.size = None;
        o.fill_percent = Some(99);
        assert_eq!(o.validate().unwrap_err().exit_code(), 2);
        o.fill_percent = None;
        o.time_limit_secs = Some(1);
        assert_eq!(o.validate().unwrap_err().exit_code(), 2);
    }

    #[test]
    fn the_job_logs_every_completed_io_and_the_log_becomes_the_series() {
        let j = job_file("f", 1 << 30, Some(60), "io");
        for l in [
            "filename=f",
            "thread",
            "direct=1",
            "rw=write",
            "size=1073741824",
            "runtime=60",
            "write_iops_log=io",
        ] {
            assert!(j.lines().any(|x| x == l), "{l} missing in\n{j}");
        }
        // No averaging: one line per I/O, at its completion.
        assert!(!j.contains("log_avg_msec") && !j.contains("bw_log"), "{j}");
        assert!(!j.contains("time_based"));
        // fio 3.33's per-I/O log: msec, 1, direction, bytes, prio; a read
        // line and a cut line are left out.
        let log = "50, 1, 1, 1048576, 0\n100, 1, 1, 1048576, 0\n120, 1, 0, 4096, 0\n200, 1, 1, 2097152, 0\n210, 1, 1, 10";
        let (s, total) = series_of_log(log.as_bytes(), 100);
        assert_eq!(total, 4 << 20);
        assert_eq!(s.len(), 2);
        assert!((s[0].t_secs - 0.1).abs() < 1e-9 && (s[1].t_secs - 0.2).abs() < 1e-9);
        assert!((s[0].bytes_per_sec - 2.0 * 1048576.0 / 0.1).abs() < 1e-3);
        assert!((s[1].bytes_per_sec - 2.0 * 1048576.0 / 0.1).abs() < 1e-3);
    }

    #[test]
    fn the_period_is_scaled_to_the_run() {
        // Up to two minutes at 2000 MB/s: 100 ms; ten minutes and more: 250.
        assert_eq!(sample_period_msec(1 << 30, None), 100);
        assert_eq!(sample_period_msec(240_000_000_000, None), 100);
        // Six minutes: between (175 ms, in 50 ms steps).
        assert_eq!(sample_period_msec(720_000_000_000, None), 200);
        assert_eq!(sample_period_msec(1_200_000_000_000, None), 250);
        assert_eq!(sample_period_msec(8_000_000_000_000, None), 250);
        // --time bounds the run.
        assert_eq!(sample_period_msec(8_000_000_000_000, Some(60)), 100);
        for size in [1u64 << 20, 1 << 36, 1 << 40, 1 << 44] {
            let p = sample_period_msec(size, None);
            assert!((MIN_SAMPLE_MSEC..=MAX_SAMPLE_MSEC).contains(&p) && p.is_multiple_of(50));
        }
    }

    /// Σ rate × interval of a series, as the analysis counts it.
    fn integral(s: &[Point]) -> f64 {
        let mut prev = 0.0;
        s.iter()
            .map(|p| {
                let b = p.bytes_per_sec * (p.t_secs - prev);
                prev = p.t_secs;
                b
            })
            .sum()
    }

    #[test]
    fn the_series_adds_up_to_the_bytes_written_whatever_the_stalls() {
        // 1 MiB completions: 40 a second for 3 s, a 2 s stall, a burst of
        // 16 in 10 ms, then 10 a second for 3 s; irregular milliseconds.
        let mut c = Vec::new();
        let mut t = 0u64;
        for i in 0..120 {
            t += 25 + (i % 3) as u64 - 1;
            c.push((t, 1u64 << 20));
        }
        t += 2000;
        for _ in 0..16 {
            c.push((t, 1 << 20));
        }
        t += 10;
        for i in 0..30 {
            t += 100 + (i % 5) as u64;
            c.push((t, 1 << 20));
        }
        let written: u64 = c.iter().map(|x| x.1).sum();
        for period in [100, 150, 250] {
            let (s, total) = series_of_completions(c.iter().copied(), period);
            assert_eq!(total, written);
            let i = integral(&s);
            assert!(
                (i - written as f64).abs() < 1.0,
                "{period}: {i} of {written}"
            );
            // No gap: one sample per period, the last at the last completion.
            assert!((s.last().unwrap().t_secs - t as f64 / 1000.0).abs() < 1e-9);
            for w in s.windows(2) {
                assert!(w[1].t_secs - w[0].t_secs <= period as f64 / 1000.0 + 1e-9);
            }
            // The stall is low samples, not the burst's rate spread over it.
            let stalled: Vec<&Point> = s
                .iter()
                .filter(|p| p.t_secs > 3.2 && p.t_secs < 4.8)
                .collect();
            assert!(!stalled.is_empty());
            assert!(
                stalled.iter().all(|p| p.bytes_per_sec < 2e6),
                "{period}: {stalled:?}"
            );
            assert_eq!(cliff::analyse(&s).total_bytes, written);
        }
        // Completions in one millisecond, and none at all.
        let (s, total) = series_of_completions([(0, 5), (0, 5)], 100);
        assert_eq!((s.len(), total), (1, 10));
        assert!((integral(&s) - 10.0).abs() < 1e-9);
        let (s, total) = series_of_completions([(100, 5), (100, 5)], 100);
        assert_eq!((s.len(), total), (1, 10));
        assert!((integral(&s) - 10.0).abs() < 1e-9);
        assert_eq!(series_of_completions([], 100), (vec![], 0));
    }

    #[test]
    fn a_series_that_does_not_add_up_is_flagged_and_no_cliff_is_called() {
        let mb = 1_000_000u64;
        // Within 2%, the members at least the copies: reconciled.
        let c = check_series(400 * mb, 401 * mb, Some(802 * mb), &[Profile::Raid1]);
        assert!(c.reconciled, "{c:?}");
        assert_eq!(c.device_bytes_expected, Some(802 * mb));
        let c = check_series(400 * mb, 400 * mb, None, &[]);
        assert!(c.reconciled && c.device_bytes_expected.is_none());
        // The old bandwidth log's 1.70×.
        let c = check_series(680 * mb, 400 * mb, Some(401 * mb), &[Profile::Raid0]);
        assert!(!c.reconciled);
        assert!(
            c.reason.as_deref().unwrap().contains("+70.0%"),
            "{:?}",
            c.reason
        );
        // Members that wrote less than the copies need: the bytes did not
        // reach the drives.
        let c = check_series(400 * mb, 400 * mb, Some(500 * mb), &[Profile::Raid1c3]);
        assert!(!c.reconciled);
        assert!(c.reason.as_deref().unwrap().contains("at least 1200.0 MB"));
        assert!(!check_series(0, 400 * mb, None, &[]).reconciled);
        // The verdict: a mismatch finding, no cliff, whatever the shape.
        let cliffy: Vec<Point> = (0..40)
            .map(|i| Point {
                t_secs: (i + 1) as f64,
                bytes_per_sec: if i < 20 { 40e6 } else { 10e6 },
            })
            .collect();
        let a = cliff::analyse(&cliffy);
        assert_eq!(a.shape, Shape::Cliff);
        let bad = check_series(680 * mb, 400 * mb, None, &[]);
        let (s, f) = verdict(&a, &bad, &[], &[Profile::Raid0], 400 * mb, 20.0);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].code, "sustained-series-mismatch");
        assert!(!s.contains("cliff after"), "{s}");
        assert!(s.contains("no cliff is called"), "{s}");
    }

    #[test]
    fn raid0_cliffs_are_named_per_drive() {
        let mk = |r1: f64, r2: f64| -> Vec<Point> {
            (0..20)
                .map(|i| Point {
                    t_secs: (i + 1) as f64,
                    bytes_per_sec: if i < 10 { r1 } else { r2 },
                })
                .collect()
        };
        let a = cliff::analyse(&mk(800e6, 400e6));
        let m = |d: &str| MemberSeries {
            device: d.into(),
            write_bytes: 0,
            series: mk(400e6, 200e6),
            analysis: cliff::analyse(&mk(400e6, 200e6)),
        };
        let ok = check_series(12_000_000_000, 12_000_000_000, None, &[]);
        let (s, f) = verdict(
            &a,
            &ok,
            &[m("nvme0n1"), m("nvme1n1")],
            &[Profile::Raid0],
            12_000_000_000,
            30.0,
        );
        assert!(s.contains("2 × 4.00 GB per drive"), "{s}");
        assert_eq!(f[0].code, "sustained-write-cliff");
        let (s, f) = verdict(&a, &ok, &[], &[Profile::Single], 12_000_000_000, 30.0);
        assert!(s.starts_with("cliff after 8.00 GB"), "{s}");
        assert!(!s.contains("per drive"));
        assert_eq!(f.len(), 1);
        let steady = cliff::analyse(&mk(800e6, 800e6));
        let (s, f) = verdict(&steady, &ok, &[], &[], 16_000_000_000, 20.0);
        assert_eq!(s, "no cliff within 16.00 GB: 800.0 MB/s sustained (median)");
        assert!(f.is_empty());
        // Too short: the seconds of the run and its average, never "0 s".
        let short = cliff::analyse(&[]);
        let (s, _) = verdict(&short, &ok, &[], &[], 1_000_000_000, 1.25);
        assert_eq!(
            s,
            "1.00 GB written in 1.2 s (800.0 MB/s on average): too short a series (0 samples) to tell a cliff; a larger SIZE writes for longer"
        );
    }
}
