//! The honesty checks and the statistics: pure functions over what fio
//! claimed and what the kernel counted around each run.

use super::profile::{Direction, Pattern, TestSpec};
use super::report::{
    DirtiedSource, FileLayout, Finding, RunResult, Severity, Status, TestResult, check, is_flag,
};
use crate::model::finding::{Code, rules};
use crate::parse::size::{format_iec, format_rate};

/// fio may claim this much more than the devices moved (counters are taken
/// a little before and after fio's own clock) before a figure is flagged.
pub(crate) const DEVICE_TOLERANCE: f64 = 0.05;
/// And this many bytes on top (a few requests in flight at the edges).
pub(crate) const DEVICE_SLACK_BYTES: u64 = 1 << 20;
/// A thread at this fraction of a core or more is limited by the CPU.
pub(crate) const CPU_BOUND_CORES: f64 = 0.85;
/// A write run that dirtied at least this fraction of what it wrote went
/// through the page cache.
pub(crate) const DIRTIED_FRACTION: f64 = 0.10;
/// A counter that other writers move (the backing device's, the
/// machine's) must also exceed this before a write counts as buffered; the
/// test file's own dirtied pages (inode-trace) need no slack.
pub(crate) const DIRTIED_COUNTER_SLACK_BYTES: u64 = DEVICE_SLACK_BYTES;

/// Whether a write run that wrote `claimed` bytes and dirtied `dirtied`
/// (counted by `source`) went through the page cache.
pub(crate) fn buffered_write(claimed: u64, dirtied: u64, source: Option<DirtiedSource>) -> bool {
    let slack = match source {
        Some(DirtiedSource::InodeTrace) => 0,
        _ => DIRTIED_COUNTER_SLACK_BYTES,
    };
    dirtied > 0 && dirtied as f64 >= claimed as f64 * DIRTIED_FRACTION && dirtied > slack
}
/// A read run with at least this fraction of the file cached beforehand
/// may have read from memory.
pub(crate) const RESIDENT_FRACTION: f64 = 0.01;
/// Compressed extents above this fraction of the file change the figures.
pub(crate) const ENCODED_FRACTION: f64 = 0.01;

const GIB: f64 = (1u64 << 30) as f64;

/// What the checks know about the bench as a whole.
#[derive(Debug, Clone, Default)]
pub(crate) struct CheckContext {
    /// Test file size.
    pub size_bytes: u64,
    /// Every member's counters are visible: the device check can run.
    pub(crate) devices_known: bool,
    /// The test file's layout before the read tests.
    pub layout: Option<FileLayout>,
    /// The test file's layout after the write tests (compression of what
    /// the writes stored).
    pub(crate) layout_after_writes: Option<FileLayout>,
    /// The compression mount option.
    pub compression_option: Option<String>,
    /// The array's ceiling for one reader, bytes per second.
    pub(crate) ceiling_one_reader: Option<f64>,
    /// The array's ceiling for many readers, bytes per second.
    pub(crate) ceiling_many_readers: Option<f64>,
    /// `--cow`.
    pub cow: bool,
    /// The most bytes the members write per byte of data written (the data
    /// profile's copies, `Profile::max_write_factor`; 1 when unknown).
    pub(crate) write_factor: f64,
}

/// What one run measured, before the checks.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// fio's error code.
    pub(crate) fio_error: i64,
    /// Bytes fio claims.
    pub claimed_bytes: u64,
    /// Of a mix: the bytes fio read (None for a read or write run).
    pub claimed_read_bytes: Option<u64>,
    /// Of a mix: the bytes fio wrote.
    pub claimed_write_bytes: Option<u64>,
    /// fio's runtime, seconds.
    pub seconds: f64,
    /// fio's bandwidth.
    pub bytes_per_sec: f64,
    /// fio's IOPS.
    pub iops: f64,
    /// Mean latency, µs.
    pub lat_mean_us: f64,
    /// Median completion latency, µs.
    pub(crate) clat_p50_us: Option<f64>,
    /// p99 completion latency, µs.
    pub(crate) clat_p99_us: Option<f64>,
    /// p99.9 completion latency, µs.
    pub(crate) clat_p999_us: Option<f64>,
    /// Cores per thread.
    pub(crate) cores_per_thread: f64,
    /// CPU seconds, all threads.
    pub cpu_seconds: f64,
    /// Bytes the members read.
    pub device_read_bytes: Option<u64>,
    /// Bytes the members wrote.
    pub device_write_bytes: Option<u64>,
    /// Test file bytes cached before a read run.
    pub resident_before_bytes: Option<u64>,
    /// Page cache dirtied during a write run.
    pub dirtied_bytes: Option<u64>,
    /// What counted `dirtied_bytes`.
    pub dirtied_source: Option<DirtiedSource>,
    /// The counter over the same run, when `dirtied_bytes` is per-inode.
    pub counter_dirtied_bytes: Option<u64>,
}

impl Sample {
    /// The bytes fio moved in direction `part` (read or write): all of them
    /// for a read or write run, its share for a mix.
    pub(crate) fn claimed_in(&self, part: Direction) -> u64 {
        match (part, self.claimed_read_bytes, self.claimed_write_bytes) {
            (Direction::Read, Some(r), _) => r,
            (Direction::Write, _, Some(w)) => w,
            _ => self.claimed_bytes,
        }
    }
}

fn flag(code: Code, message: String) -> Finding {
    check(code, Severity::Warning, message)
}

fn note(code: Code, message: String) -> Finding {
    check(code, Severity::Info, message)
}

fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

/// What the members may move beyond fio's own bytes before the run counts
/// as contaminated by other I/O: a quarter more, and the slack.
pub(crate) const OTHER_IO_FRACTION: f64 = 0.25;

/// Flags a run during which the members moved clearly more than fio's I/O
/// explains: in the run's direction more than fio's bytes (times the
/// profile's copies for writes) plus a quarter, or during a read run writes
/// of more than a quarter of what was read. Two benches on one filesystem,
/// or a scrub or backup beside one, halve the figures without this. A mix
/// is checked per direction, against fio's reads and writes of it.
fn other_io(d: Direction, s: &Sample, ctx: &CheckContext) -> Option<Finding> {
    let slack = DEVICE_SLACK_BYTES as f64 * 4.0;
    let claimed = s.claimed_bytes as f64;
    let read = s.claimed_in(Direction::Read) as f64;
    let written = s.claimed_in(Direction::Write) as f64;
    let limit = |expected: f64| expected * (1.0 + OTHER_IO_FRACTION) + slack;
    let too_much_read = s
        .device_read_bytes
        .filter(|&m| d.reads() && m as f64 > limit(read))
        .map(|m| (m, "read"));
    let too_much_written = s
        .device_write_bytes
        .filter(|&m| d.writes() && m as f64 > limit(written * ctx.write_factor.max(1.0)))
        .map(|m| (m, "wrote"));
    let extra_writes = (d == Direction::Read)
        .then_some(s.device_write_bytes)
        .flatten()
        .filter(|&w| w as f64 > claimed * OTHER_IO_FRACTION + slack)
        .map(|w| (w, "wrote"));
    let (moved, what) = too_much_read.or(too_much_written).or(extra_writes)?;
    Some(flag(
        Code::BenchOtherIo,
        format!(
            "the member devices {what} {} while fio moved {} ({:.2}×): other I/O ran on them during this run (another bench, a scrub, a backup?), so the figure is below what the drives give; measure again at a quiet moment",
            format_iec(moved),
            format_iec(s.claimed_bytes),
            moved as f64 / claimed.max(1.0)
        ),
    ))
}

/// The checks of one run.
pub(crate) fn check_run(
    t: &TestSpec,
    d: Direction,
    s: &Sample,
    ctx: &CheckContext,
) -> Vec<Finding> {
    let mut checks = Vec::new();
    if s.fio_error != 0 {
        checks.push(flag(
            Code::BenchFioError,
            format!("fio reported error {} for this job", s.fio_error),
        ));
    }
    // Each direction the run moved, against the members' own counters (a
    // mix: its reads and its writes apart).
    let parts: &[Direction] = match d {
        Direction::Read => &[Direction::Read],
        Direction::Write => &[Direction::Write],
        Direction::Mix => &[Direction::Read, Direction::Write],
    };
    for &part in parts {
        let moved = match part {
            Direction::Read => s.device_read_bytes,
            _ => s.device_write_bytes,
        };
        let claimed = s.claimed_in(part);
        let Some(moved) = moved.filter(|_| ctx.devices_known) else {
            continue;
        };
        let limit = moved as f64 * (1.0 + DEVICE_TOLERANCE) + DEVICE_SLACK_BYTES as f64;
        if claimed as f64 > limit {
            let reads = part == Direction::Read;
            checks.push(flag(
                Code::BenchDeviceMismatch,
                format!(
                    "fio claims {} {} but the member devices {} only {} ({:.0}%): the rest did not come from the drives",
                    format_iec(claimed),
                    if reads { "read" } else { "written" },
                    if reads { "read" } else { "wrote" },
                    format_iec(moved),
                    pct(moved, claimed)
                ),
            ));
        }
    }
    if ctx.devices_known {
        checks.extend(other_io(d, s, ctx));
    }
    if d.reads()
        && let Some(resident) = s.resident_before_bytes
        && resident as f64 > ctx.size_bytes as f64 * RESIDENT_FRACTION
    {
        checks.push(flag(
            Code::BenchPageCacheRead,
            format!(
                "{} of the test file ({:.0}%) was in the page cache before the run (mincore) and could not be evicted: reads may have come from memory",
                format_iec(resident),
                pct(resident, ctx.size_bytes)
            ),
        ));
    }
    if d.writes()
        && let Some(dirtied) = s.dirtied_bytes
        && buffered_write(s.claimed_in(Direction::Write), dirtied, s.dirtied_source)
    {
        let why = if ctx.cow {
            "the test file has data checksums (--cow), and from Linux 6.15 to 7.2 btrfs turns O_DIRECT writes to such files into buffered writes (7.3 bounces them instead)"
        } else {
            "O_DIRECT was not honoured"
        };
        checks.push(flag(
            Code::BenchPageCacheWrite,
            format!(
                "the write went through the page cache: it dirtied {} of page cache{} for {} written; {why}. This measures buffered writes plus writeback, not direct I/O",
                format_iec(dirtied),
                match s.dirtied_source {
                    Some(DirtiedSource::InodeTrace) => " (the test file's own pages, traced)",
                    _ => "",
                },
                format_iec(s.claimed_in(Direction::Write))
            ),
        ));
    }
    let layout_now = match d {
        Direction::Read => ctx.layout,
        Direction::Write | Direction::Mix => ctx.layout_after_writes.or(ctx.layout),
    };
    if let Some(layout) = layout_now {
        let never = layout.never_written_bytes();
        if d == Direction::Read && never > 0 {
            checks.push(flag(
                Code::BenchNeverWritten,
                format!(
                    "{} of the test file ({:.0}%) was never written (unwritten extents or holes): it reads as zeros without touching the drives",
                    format_iec(never),
                    pct(never, ctx.size_bytes)
                ),
            ));
        }
        if layout.encoded_bytes as f64 > ctx.size_bytes as f64 * ENCODED_FRACTION {
            checks.push(check(
                Code::BenchCompression,
                rules::bench_compression(true),
                format!(
                    "{} of the test file ({:.0}%) is in compressed extents ({}): the drives move fewer bytes than fio counts, reads decompress through the page cache, and the figure measures the compressor, not the drives",
                    format_iec(layout.encoded_bytes),
                    pct(layout.encoded_bytes, ctx.size_bytes),
                    ctx.compression_option.as_deref().unwrap_or("compression attribute")
                ),
            ));
        } else if let Some(opt) = &ctx.compression_option {
            let why = if ctx.cow {
                "the test data is incompressible, so btrfs stored it uncompressed"
            } else {
                "the test file is NOCOW, which btrfs never compresses"
            };
            checks.push(check(
                Code::BenchCompression,
                rules::bench_compression(false),
                format!(
                    "mounted with {opt}, but the test file has no compressed extents: {why}; real, compressible files would behave differently"
                ),
            ));
        }
    }
    if s.cores_per_thread >= CPU_BOUND_CORES {
        checks.push(note(
            Code::BenchCpuBound,
            format!(
                "limited by CPU, not by the drive: each fio thread used {:.0}% of a core",
                100.0 * s.cores_per_thread
            ),
        ));
    }
    let ceiling = if t.threads > 1 {
        ctx.ceiling_many_readers.or(ctx.ceiling_one_reader)
    } else {
        ctx.ceiling_one_reader
    };
    if let Some(c) = ceiling
        && s.bytes_per_sec > c * (1.0 + DEVICE_TOLERANCE)
    {
        checks.push(flag(
            Code::BenchAboveCeiling,
            format!(
                "{} is above the array's PCIe ceiling of {}: physically impossible",
                format_rate(s.bytes_per_sec),
                format_rate(c)
            ),
        ));
    }
    checks
}

/// The median (mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// A run's report entry.
pub(crate) fn run_result(run: u32, s: &Sample, checks: Vec<Finding>) -> RunResult {
    RunResult {
        run,
        claimed_bytes: s.claimed_bytes,
        seconds: s.seconds,
        bytes_per_sec: s.bytes_per_sec,
        iops: s.iops,
        lat_mean_us: s.lat_mean_us,
        clat_p50_us: s.clat_p50_us,
        clat_p99_us: s.clat_p99_us,
        clat_p999_us: s.clat_p999_us,
        cores_per_thread: s.cores_per_thread,
        cpu_seconds_per_gib: (s.claimed_bytes > 0)
            .then(|| s.cpu_seconds / (s.claimed_bytes as f64 / GIB)),
        device_read_bytes: s.device_read_bytes,
        device_write_bytes: s.device_write_bytes,
        resident_before_bytes: s.resident_before_bytes,
        dirtied_bytes: s.dirtied_bytes,
        dirtied_source: s.dirtied_source,
        counter_dirtied_bytes: s.counter_dirtied_bytes,
        checks,
    }
}

/// The median of the runs that have the value (None when none has it).
fn median_of(runs: &[RunResult], f: impl Fn(&RunResult) -> Option<f64>) -> Option<f64> {
    median(&runs.iter().filter_map(f).collect::<Vec<_>>())
}

/// The largest value (None for no values).
fn best(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |acc: Option<f64>, x| {
        Some(acc.map_or(x, |a| a.max(x)))
    })
}

/// One test's result from its runs: medians, the best run (as
/// CrystalDiskMark reports it), spread, findings (each code once, with in
/// how many runs it was seen). A flag in any run flags the figure: it is
/// then not given as a result.
pub(crate) fn summarize(
    t: TestSpec,
    d: Direction,
    runs: Vec<RunResult>,
    ctx: &CheckContext,
) -> TestResult {
    let rates: Vec<f64> = runs.iter().map(|r| r.bytes_per_sec).collect();
    let mut checks: Vec<Finding> = Vec::new();
    for r in &runs {
        for c in &r.checks {
            if !checks
                .iter()
                .any(|x| x.code == c.code && x.severity == c.severity)
            {
                checks.push(c.clone());
            }
        }
    }
    let n = runs.len();
    for c in &mut checks {
        let seen = runs
            .iter()
            .filter(|r| r.checks.iter().any(|x| x.code == c.code))
            .count();
        if n > 1 && seen < n {
            c.title = format!("{} (in {seen} of {n} runs)", c.title);
        }
    }
    checks.sort_by_key(|c| (!is_flag(c.severity), c.code));
    let flagged = checks.iter().any(|c| is_flag(c.severity)) || runs.is_empty();
    let med = median(&rates).unwrap_or(0.0);
    let iops = median(&runs.iter().map(|r| r.iops).collect::<Vec<_>>()).unwrap_or(0.0);
    let lat = median(&runs.iter().map(|r| r.lat_mean_us).collect::<Vec<_>>()).unwrap_or(0.0);
    let cpu: Vec<f64> = runs.iter().filter_map(|r| r.cpu_seconds_per_gib).collect();
    let cores = median(&runs.iter().map(|r| r.cores_per_thread).collect::<Vec<_>>()).unwrap_or(0.0);
    let ceiling_fraction = match (t.pattern, d, ctx.ceiling_one_reader) {
        (Pattern::Seq, _, Some(c)) if c > 0.0 && !flagged => Some(med / c),
        _ => None,
    };
    TestResult {
        test: t,
        direction: d,
        name: t.to_string(),
        status: if flagged { Status::Flagged } else { Status::Ok },
        bytes_per_sec: (!flagged).then_some(med),
        iops: (!flagged).then_some(iops),
        lat_mean_us: (!flagged).then_some(lat),
        best_bytes_per_sec: best(rates.iter().copied()).filter(|_| !flagged),
        best_iops: best(runs.iter().map(|r| r.iops)).filter(|_| !flagged),
        clat_p50_us: median_of(&runs, |r| r.clat_p50_us).filter(|_| !flagged),
        clat_p99_us: median_of(&runs, |r| r.clat_p99_us).filter(|_| !flagged),
        clat_p999_us: median_of(&runs, |r| r.clat_p999_us).filter(|_| !flagged),
        bytes_per_sec_min: rates.iter().copied().fold(f64::INFINITY, f64::min).min(med),
        bytes_per_sec_max: rates.iter().copied().fold(0.0, f64::max),
        claimed_bytes_per_sec: med,
        // Per GiB fio claimed: of a flagged figure, not a cost of anything.
        cpu_seconds_per_gib: median(&cpu).filter(|_| !flagged),
        cores_per_thread: cores,
        ceiling_fraction,
        checks,
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::{DEFAULT_TESTS, NVME_TESTS};

    const MIB: u64 = 1 << 20;

    fn ctx() -> CheckContext {
        CheckContext {
            size_bytes: 1 << 30,
            devices_known: true,
            layout: Some(FileLayout::default()),
            ..CheckContext::default()
        }
    }

    fn honest_read() -> Sample {
        Sample {
            claimed_bytes: 1000 * MIB,
            seconds: 1.0,
            bytes_per_sec: 1000.0 * MIB as f64,
            iops: 1000.0,
            lat_mean_us: 8000.0,
            cores_per_thread: 0.1,
            cpu_seconds: 0.1,
            device_read_bytes: Some(1000 * MIB + 3 * MIB),
            device_write_bytes: Some(0),
            resident_before_bytes: Some(0),
            ..Sample::default()
        }
    }

    fn codes(c: &[Finding]) -> Vec<(Code, Severity)> {
        c.iter().map(|c| (c.code, c.severity)).collect()
    }

    /// A 70/30 mix: 700 MiB read, 300 MiB written, as the devices moved.
    fn honest_mix() -> Sample {
        Sample {
            claimed_bytes: 1000 * MIB,
            claimed_read_bytes: Some(700 * MIB),
            claimed_write_bytes: Some(300 * MIB),
            device_read_bytes: Some(701 * MIB),
            device_write_bytes: Some(302 * MIB),
            dirtied_bytes: Some(0),
            ..honest_read()
        }
    }

    #[test]
    fn a_mix_is_checked_per_direction() {
        let t = DEFAULT_TESTS[2];
        assert_eq!(check_run(&t, Direction::Mix, &honest_mix(), &ctx()), vec![]);
        // Reads that the devices did not serve (from memory).
        let cached = Sample {
            device_read_bytes: Some(100 * MIB),
            ..honest_mix()
        };
        let c = check_run(&t, Direction::Mix, &cached, &ctx());
        assert_eq!(codes(&c), [(Code::BenchDeviceMismatch, Severity::Warning)]);
        assert!(c[0].title.contains("700.00MiB read"), "{}", c[0].title);
        // Writes that never reached them.
        let unwritten = Sample {
            device_write_bytes: Some(10 * MIB),
            ..honest_mix()
        };
        let c = check_run(&t, Direction::Mix, &unwritten, &ctx());
        assert_eq!(codes(&c), [(Code::BenchDeviceMismatch, Severity::Warning)]);
        assert!(c[0].title.contains("300.00MiB written"), "{}", c[0].title);
        // Its writes through the page cache: as much dirtied as it wrote.
        let buffered = Sample {
            dirtied_bytes: Some(300 * MIB),
            ..honest_mix()
        };
        let c = check_run(&t, Direction::Mix, &buffered, &ctx());
        assert_eq!(codes(&c), [(Code::BenchPageCacheWrite, Severity::Warning)]);
        // The writes of a mix are its own, not other I/O; twice its reads
        // on the devices are.
        let busy = Sample {
            device_read_bytes: Some(1400 * MIB),
            ..honest_mix()
        };
        let c = check_run(&t, Direction::Mix, &busy, &ctx());
        assert_eq!(codes(&c), [(Code::BenchOtherIo, Severity::Warning)]);
    }

    #[test]
    fn an_honest_run_has_no_findings() {
        let t = DEFAULT_TESTS[0];
        assert_eq!(
            check_run(&t, Direction::Read, &honest_read(), &ctx()),
            vec![]
        );
        // Within 5 %: fine.
        let s = Sample {
            claimed_bytes: 1040 * MIB,
            ..honest_read()
        };
        assert!(check_run(&t, Direction::Read, &s, &ctx()).is_empty());
    }

    #[test]
    fn claims_above_the_device_counters_are_flagged() {
        let t = DEFAULT_TESTS[0];
        // The fio mmap trap: 8 jobs, 54.8 GB claimed, 6.9 GB read.
        let s = Sample {
            claimed_bytes: 54_800 * MIB,
            device_read_bytes: Some(6_900 * MIB),
            ..honest_read()
        };
        let c = check_run(&t, Direction::Read, &s, &ctx());
        assert_eq!(
            codes(&c),
            vec![(Code::BenchDeviceMismatch, Severity::Warning)]
        );
        assert!(c[0].title.contains("(13%)"), "{}", c[0].title);
        // Without every member's counters the check cannot run.
        let blind = CheckContext {
            devices_known: false,
            ..ctx()
        };
        assert!(check_run(&t, Direction::Read, &s, &blind).is_empty());
        // Writes are checked against the written sectors.
        let w = Sample {
            claimed_bytes: 500 * MIB,
            device_write_bytes: Some(200 * MIB),
            device_read_bytes: Some(10_000 * MIB),
            ..honest_read()
        };
        let c = check_run(&t, Direction::Write, &w, &ctx());
        assert_eq!(
            codes(&c),
            vec![(Code::BenchDeviceMismatch, Severity::Warning)]
        );
    }

    #[test]
    fn other_io_on_the_members_is_flagged() {
        let t = DEFAULT_TESTS[0];
        // Two benches at once: the members read twice what fio did.
        let doubled = Sample {
            device_read_bytes: Some(2_100 * MIB),
            ..honest_read()
        };
        let c = check_run(&t, Direction::Read, &doubled, &ctx());
        assert_eq!(codes(&c), vec![(Code::BenchOtherIo, Severity::Warning)]);
        assert!(c[0].title.contains("2.10×"), "{}", c[0].title);
        assert!(c[0].title.contains("quiet moment"));
        // A backup writing during a read run.
        let backup = Sample {
            device_write_bytes: Some(800 * MIB),
            ..honest_read()
        };
        let c = check_run(&t, Direction::Read, &backup, &ctx());
        assert_eq!(codes(&c), vec![(Code::BenchOtherIo, Severity::Warning)]);
        // Writes on RAID1 move two copies: not other I/O; three times is.
        let w = |dev: u64| Sample {
            claimed_bytes: 1000 * MIB,
            device_write_bytes: Some(dev * MIB),
            device_read_bytes: Some(0),
            ..honest_read()
        };
        let raid1 = CheckContext {
            write_factor: 2.0,
            ..ctx()
        };
        assert!(check_run(&t, Direction::Write, &w(2_010), &raid1).is_empty());
        let c = check_run(&t, Direction::Write, &w(3_000), &raid1);
        assert_eq!(codes(&c), vec![(Code::BenchOtherIo, Severity::Warning)]);
        // Single: a tenth more (metadata) is fine.
        assert!(check_run(&t, Direction::Write, &w(1_100), &ctx()).is_empty());
        // Without the device counters nothing is said.
        let blind = CheckContext {
            devices_known: false,
            ..ctx()
        };
        assert!(check_run(&t, Direction::Read, &doubled, &blind).is_empty());
    }

    #[test]
    fn cache_and_buffered_writes_are_flagged() {
        let t = DEFAULT_TESTS[2];
        let warm = Sample {
            resident_before_bytes: Some(512 * MIB),
            ..honest_read()
        };
        let c = check_run(&t, Direction::Read, &warm, &ctx());
        assert_eq!(
            codes(&c),
            vec![(Code::BenchPageCacheRead, Severity::Warning)]
        );
        assert!(c[0].title.contains("(50%)"));
        let buffered = Sample {
            claimed_bytes: 100 * MIB,
            device_write_bytes: Some(101 * MIB),
            dirtied_bytes: Some(100 * MIB),
            ..honest_read()
        };
        let cow = CheckContext { cow: true, ..ctx() };
        let c = check_run(&t, Direction::Write, &buffered, &cow);
        assert_eq!(
            codes(&c),
            vec![(Code::BenchPageCacheWrite, Severity::Warning)]
        );
        assert!(c[0].title.contains("--cow"));
        // A few dirtied pages (metadata, noise) are not a buffered write.
        let direct = Sample {
            dirtied_bytes: Some(64 << 10),
            ..buffered
        };
        assert!(check_run(&t, Direction::Write, &direct, &cow).is_empty());
    }

    #[test]
    fn the_test_files_own_dirtied_pages_need_no_slack() {
        let t = DEFAULT_TESTS[3];
        let cow = CheckContext { cow: true, ..ctx() };
        // A slow tiny write (0.26 MB/s for a second) that dirtied more than
        // it wrote: under the counter's slack, yet its own pages say buffered.
        let slow = Sample {
            claimed_bytes: 260_000,
            seconds: 1.0,
            device_write_bytes: Some(300_000),
            dirtied_bytes: Some(266_240),
            dirtied_source: Some(DirtiedSource::InodeTrace),
            ..honest_read()
        };
        let c = check_run(&t, Direction::Write, &slow, &cow);
        assert_eq!(
            codes(&c),
            vec![(Code::BenchPageCacheWrite, Severity::Warning)]
        );
        assert!(c[0].title.contains("the test file's own pages"));
        // The same numbers from a counter other writers move stay under
        // its slack.
        for source in [
            Some(DirtiedSource::BdiCounter),
            Some(DirtiedSource::Vmstat),
            None,
        ] {
            let counted = Sample {
                dirtied_source: source,
                ..slow.clone()
            };
            assert!(check_run(&t, Direction::Write, &counted, &cow).is_empty());
        }
        // A NOCOW direct write whose file dirtied nothing is ok, however
        // much the backing device's counter moved meanwhile.
        let direct = Sample {
            claimed_bytes: 100 * MIB,
            device_write_bytes: Some(101 * MIB),
            dirtied_bytes: Some(0),
            dirtied_source: Some(DirtiedSource::InodeTrace),
            counter_dirtied_bytes: Some(80 * MIB),
            ..honest_read()
        };
        assert!(check_run(&t, Direction::Write, &direct, &ctx()).is_empty());
        // Below the fraction is not buffered either (a few pages of 100 MiB).
        let few = Sample {
            dirtied_bytes: Some(64 << 10),
            ..direct.clone()
        };
        assert!(check_run(&t, Direction::Write, &few, &ctx()).is_empty());
        assert!(buffered_write(4096, 4096, Some(DirtiedSource::InodeTrace)));
        assert!(!buffered_write(4096, 0, Some(DirtiedSource::InodeTrace)));
        assert!(!buffered_write(0, 0, Some(DirtiedSource::InodeTrace)));
    }

    #[test]
    fn layout_compression_cpu_and_ceiling() {
        let t = DEFAULT_TESTS[0];
        let fallocated = CheckContext {
            layout: Some(FileLayout {
                unwritten_bytes: 256 * MIB,
                ..FileLayout::default()
            }),
            ..ctx()
        };
        let c = check_run(&t, Direction::Read, &honest_read(), &fallocated);
        assert_eq!(
            codes(&c),
            vec![(Code::BenchNeverWritten, Severity::Warning)]
        );
        // Never-written regions do not matter to writes.
        let w = Sample {
            device_write_bytes: Some(1000 * MIB),
            ..honest_read()
        };
        assert!(check_run(&t, Direction::Write, &w, &fallocated).is_empty());

        let compressed = CheckContext {
            layout: Some(FileLayout {
                encoded_bytes: 900 * MIB,
                ..FileLayout::default()
            }),
            compression_option: Some("compress-force=zstd".into()),
            cow: true,
            ..ctx()
        };
        let c = check_run(&t, Direction::Read, &honest_read(), &compressed);
        assert_eq!(codes(&c), vec![(Code::BenchCompression, Severity::Warning)]);
        assert!(c[0].title.contains("compress-force=zstd"));
        let option_only = CheckContext {
            compression_option: Some("compress=zstd:3".into()),
            ..ctx()
        };
        let c = check_run(&t, Direction::Read, &honest_read(), &option_only);
        assert_eq!(codes(&c), vec![(Code::BenchCompression, Severity::Info)]);
        assert!(c[0].title.contains("NOCOW"));

        let busy = Sample {
            cores_per_thread: 0.97,
            ..honest_read()
        };
        let c = check_run(&t, Direction::Read, &busy, &ctx());
        assert_eq!(codes(&c), vec![(Code::BenchCpuBound, Severity::Info)]);
        assert!(c[0].title.contains("limited by CPU, not by the drive"));

        // 28 GB/s on an 18.8 GB/s array.
        let ceiling = CheckContext {
            ceiling_one_reader: Some(18.8e9),
            ceiling_many_readers: Some(18.8e9),
            ..ctx()
        };
        let fast = Sample {
            bytes_per_sec: 28e9,
            ..honest_read()
        };
        let c = check_run(&NVME_TESTS[2], Direction::Read, &fast, &ceiling);
        assert_eq!(
            codes(&c),
            vec![(Code::BenchAboveCeiling, Severity::Warning)]
        );
    }

    /// A flagged figure has no CPU cost: it would be per GiB fio claimed,
    /// not per GiB the drives moved (issue 52).
    #[test]
    fn a_flagged_figure_has_no_cpu_cost() {
        use crate::bench::testdata::figure;
        let ok = figure(0, Direction::Write, &[900.0, 1000.0], false);
        assert!(ok.cpu_seconds_per_gib.is_some());
        let bad = figure(0, Direction::Write, &[900.0, 1000.0], true);
        assert_eq!(bad.status, Status::Flagged);
        assert_eq!(bad.cpu_seconds_per_gib, None);
        // Each run keeps what fio said, as the report's raw data.
        assert!(bad.runs.iter().all(|r| r.cpu_seconds_per_gib.is_some()));
    }

    #[test]
    fn median_spread_and_flagging() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let t = DEFAULT_TESTS[0];
        let c = CheckContext {
            ceiling_one_reader: Some(4000.0 * MIB as f64),
            ..ctx()
        };
        let runs: Vec<RunResult> = [900.0, 1000.0, 1100.0]
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let s = Sample {
                    bytes_per_sec: r * MIB as f64,
                    ..honest_read()
                };
                run_result(i as u32 + 1, &s, check_run(&t, Direction::Read, &s, &c))
            })
            .collect();
        let r = summarize(t, Direction::Read, runs.clone(), &c);
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.bytes_per_sec, Some(1000.0 * MIB as f64));
        assert_eq!(r.bytes_per_sec_min, 900.0 * MIB as f64);
        assert_eq!(r.bytes_per_sec_max, 1100.0 * MIB as f64);
        assert_eq!(r.ceiling_fraction, Some(0.25));
        assert_eq!(r.name, "SEQ1M Q8T1");
        // One run flagged: no figure, and the finding says in how many runs.
        let mut bad = runs;
        bad[1]
            .checks
            .push(flag(Code::BenchDeviceMismatch, "x".into()));
        let r = summarize(t, Direction::Read, bad, &c);
        assert_eq!(r.status, Status::Flagged);
        assert_eq!(r.bytes_per_sec, None);
        assert_eq!(r.claimed_bytes_per_sec, 1000.0 * MIB as f64);
        assert_eq!(r.checks[0].title, "x (in 1 of 3 runs)");
        assert_eq!(r.ceiling_fraction, None);
    }

    #[test]
    fn best_of_three_runs_and_the_medians_beside_it() {
        let t = DEFAULT_TESTS[2];
        let c = ctx();
        // Three runs whose best bandwidth, best IOPS and latencies are in
        // different runs: the best is each figure's own maximum, the medians
        // each figure's own middle value.
        let figures = [
            (1100.0, 250_000.0, (90.0, 400.0, 900.0)),
            (900.0, 270_000.0, (110.0, 300.0, 1200.0)),
            (1000.0, 260_000.0, (100.0, 500.0, 700.0)),
        ];
        let runs: Vec<RunResult> = figures
            .iter()
            .enumerate()
            .map(|(i, &(mb, iops, (p50, p99, p999)))| {
                let s = Sample {
                    bytes_per_sec: mb * 1e6,
                    iops,
                    clat_p50_us: Some(p50),
                    clat_p99_us: Some(p99),
                    clat_p999_us: Some(p999),
                    ..honest_read()
                };
                run_result(i as u32 + 1, &s, check_run(&t, Direction::Read, &s, &c))
            })
            .collect();
        let r = summarize(t, Direction::Read, runs.clone(), &c);
        assert_eq!(r.status, Status::Ok, "{:?}", r.checks);
        assert_eq!(r.bytes_per_sec, Some(1000e6));
        assert_eq!(r.best_bytes_per_sec, Some(1100e6));
        assert_eq!(r.iops, Some(260_000.0));
        assert_eq!(r.best_iops, Some(270_000.0));
        assert_eq!(r.clat_p50_us, Some(100.0));
        assert_eq!(r.clat_p99_us, Some(400.0));
        assert_eq!(r.clat_p999_us, Some(900.0));
        assert_eq!(r.runs[1].clat_p999_us, Some(1200.0));
        // A run without percentiles (an older fio) does not count; none: null.
        let mut partial = runs.clone();
        partial[0].clat_p99_us = None;
        let r = summarize(t, Direction::Read, partial, &c);
        assert_eq!(r.clat_p99_us, Some(400.0));
        let mut none = runs.clone();
        for x in &mut none {
            x.clat_p50_us = None;
        }
        assert_eq!(summarize(t, Direction::Read, none, &c).clat_p50_us, None);
        // Flagged: no best and no percentiles either, only what was claimed.
        let mut bad = runs;
        bad[0]
            .checks
            .push(flag(Code::BenchPageCacheRead, "x".into()));
        let r = summarize(t, Direction::Read, bad, &c);
        assert_eq!(r.status, Status::Flagged);
        assert_eq!(
            (
                r.best_bytes_per_sec,
                r.best_iops,
                r.clat_p50_us,
                r.clat_p999_us
            ),
            (None, None, None, None)
        );
        assert_eq!(r.bytes_per_sec_max, 1100e6);
    }
}
