//! fio job files, written by pure code: the fill, each test, and the whole
//! suite as one file a user can re-run by hand.
//!
//! What keeps fio honest here:
//! - `allow_file_create=0` and `fallocate=none`: fio never makes or
//!   preallocates the file itself; btrfs-lab creates it (NOCOW) and the fill
//!   writes every byte before any read.
//! - threads never share a range: a test with T threads gives each
//!   `size = file/T` at `offset_increment = file/T` (the fio mmap trap of
//!   the seed article: 8 jobs reading the same range from the page cache).
//! - incompressible data without a per-write CPU cost: fio fills its
//!   buffers with random bytes once (`refill_buffers=0`), so a fast array
//!   is not held back by the random generator as with `refill_buffers`,
//!   and does not scramble them (`scramble_buffers=0`): fio's default
//!   scrambling writes a compressible header into every 512 bytes, which
//!   made the data 4.6% compressible and every extent compressed under
//!   `compress-force=zstd` on the development VM (filefrag: 256 of 256
//!   extents encoded; 0 of 1 with `scramble_buffers=0`). Even unscrambled,
//!   fio's random buffers are a multiplicative hash chain whose low bits
//!   repeat (zlib saves ~1.4% per 128 KiB): the fill before the reads is
//!   therefore written by btrfs-lab itself with BLAKE3 output
//!   ([`super::suite::fill_incompressible`]); the suite file's `[fill]` section
//!   stands in for it when the jobs are re-run by hand.
//! - the completion-latency percentiles the report gives (p50, p99,
//!   p99.9) are asked for by name (`percentile_list`, [`PERCENTILES`]):
//!   fio's JSON then carries exactly those keys in `clat_ns.percentile`.

//!
//! What keeps root safe: a job file holds no byte a user chose. The test
//! file is named relative to fio's working directory, which is the held
//! work directory (`sys::tools::fio`), so no path is written at all; every job
//! runs as a thread of one fio process (`thread`), so stopping fio's
//! process group stops all its I/O.

use std::fmt::Write as _;

use super::profile::{Direction, MIX_READ_PERCENT, Pattern, TestSpec};

/// The I/O engine.
pub(crate) const IOENGINE: &str = "libaio";

/// The completion-latency percentiles fio reports (`percentile_list`).
pub(crate) const PERCENTILES: &str = "50:99:99.9";

/// What a job file needs to know.
#[derive(Debug, Clone)]
pub struct JobSettings<'a> {
    /// The test file, relative to fio's working directory (a name
    /// btrfs-lab chose: [`crate::sys::tools::fio::check_name`]).
    pub file: &'a str,
    /// Its size (a multiple of 1 MiB).
    pub size_bytes: u64,
    /// Seconds per run.
    pub duration_secs: u64,
    /// O_DIRECT (always, unless a test hook turns it off).
    pub direct: bool,
    /// Data fio writes: percent compressible (0: incompressible; a test
    /// hook may raise it).
    pub compress_percentage: u32,
    /// Sequential jobs' I/O buffers in huge pages of this size
    /// (`iomem=mmaphuge`), when there are enough; None: ordinary pages.
    pub huge_page_bytes: Option<u64>,
}

/// Huge pages of `page_bytes` the sequential tests of `tests` need at once
/// (they run one after the other): per fio thread a buffer of one block
/// more than its queue depth, rounded up to whole pages, and two more for
/// fio's alignment (measured with fio 3.33: SEQ1M Q8T1 fails with 5 pages
/// of 2 MiB, runs with 6).
pub fn huge_pages_needed(tests: &[TestSpec], page_bytes: u64) -> u64 {
    tests
        .iter()
        .filter(|t| t.pattern == Pattern::Seq)
        .map(|t| {
            let buffer = t.block_bytes * (u64::from(t.queue_depth) + 1);
            let per_thread = buffer.div_ceil(page_bytes.max(1)) + 2;
            per_thread * u64::from(t.threads)
        })
        .max()
        .unwrap_or(0)
}

fn global(s: &JobSettings<'_>) -> String {
    let mut g = String::new();
    let _ = writeln!(g, "[global]");
    let _ = writeln!(g, "filename={}", s.file);
    let _ = writeln!(g, "thread");
    let _ = writeln!(g, "ioengine={IOENGINE}");
    let _ = writeln!(g, "direct={}", u8::from(s.direct));
    let _ = writeln!(g, "allow_file_create=0");
    let _ = writeln!(g, "fallocate=none");
    let _ = writeln!(g, "group_reporting=1");
    let _ = writeln!(g, "randrepeat=0");
    let _ = writeln!(g, "norandommap=1");
    let _ = writeln!(g, "refill_buffers=0");
    let _ = writeln!(g, "scramble_buffers=0");
    let _ = writeln!(g, "percentile_list={PERCENTILES}");
    if s.compress_percentage > 0 {
        let _ = writeln!(g, "buffer_compress_percentage={}", s.compress_percentage);
    }
    g
}

/// Bytes each thread of `t` covers: the file split evenly, whole blocks.
pub(crate) fn range_per_thread(t: &TestSpec, size_bytes: u64) -> u64 {
    (size_bytes / u64::from(t.threads.max(1))) / t.block_bytes * t.block_bytes
}

/// The section of one test in one direction.
pub(crate) fn test_section(t: &TestSpec, d: Direction, s: &JobSettings<'_>) -> String {
    let rw = match (t.pattern, d) {
        (Pattern::Seq, Direction::Read) => "read",
        (Pattern::Seq, Direction::Write) => "write",
        (Pattern::Seq, Direction::Mix) => "rw",
        (Pattern::Rnd, Direction::Read) => "randread",
        (Pattern::Rnd, Direction::Write) => "randwrite",
        (Pattern::Rnd, Direction::Mix) => "randrw",
    };
    let range = range_per_thread(t, s.size_bytes);
    let mut j = String::new();
    let _ = writeln!(j, "[{}]", t.section(d));
    let _ = writeln!(j, "rw={rw}");
    if d == Direction::Mix {
        // One figure for the mix, with percentiles over all its I/Os, and
        // the reads and writes apart for the device cross-check.
        let _ = writeln!(j, "rwmixread={MIX_READ_PERCENT}");
        let _ = writeln!(j, "unified_rw_reporting=both");
    }
    if let Some(h) = s.huge_page_bytes.filter(|_| t.pattern == Pattern::Seq) {
        // The true ceiling of large sequential I/O: buffers without a TLB
        // miss every 4 KiB. An anonymous MAP_HUGETLB mapping (no file after
        // the type), freed with fio even when it is killed: `shmhuge`'s
        // SysV segments outlive a killed fio and keep their pages.
        let _ = writeln!(j, "iomem=mmaphuge");
        let _ = writeln!(j, "hugepage-size={h}");
    }
    let _ = writeln!(j, "bs={}", t.block_bytes);
    let _ = writeln!(j, "iodepth={}", t.queue_depth);
    let _ = writeln!(j, "numjobs={}", t.threads);
    let _ = writeln!(j, "size={range}");
    if t.threads > 1 {
        let _ = writeln!(j, "offset_increment={range}");
    }
    let _ = writeln!(j, "time_based=1");
    let _ = writeln!(j, "runtime={}", s.duration_secs);
    j
}

/// The fill: every byte of the file written once, sequentially, synced.
pub(crate) fn fill_section(s: &JobSettings<'_>) -> String {
    format!(
        "[fill]\nrw=write\nbs=1048576\niodepth=8\nnumjobs=1\nsize={}\nend_fsync=1\n",
        s.size_bytes
    )
}

/// The job file's comment: what it is and how to run it, in lines of 80
/// columns at most.
fn header(what: &str) -> String {
    use crate::report::text::fill;
    let mut s = fill(&format!("btrfs-lab bench: {what}"), 80, "; ", "; ");
    // The command on a line of its own, whole.
    s.push_str(
        "; run it by hand, in a directory that holds the test file:\n; fio --output-format=json THIS_FILE\n",
    );
    s
}

/// The job file of one run of one test.
pub(crate) fn test_job(t: &TestSpec, d: Direction, s: &JobSettings<'_>) -> String {
    format!(
        "{}{}\n{}",
        header(&format!("{t} {}", d.as_str())),
        global(s),
        test_section(t, d, s)
    )
}

/// The job file of the fill.
pub(crate) fn fill_job(s: &JobSettings<'_>) -> String {
    format!("{}{}\n{}", header("fill"), global(s), fill_section(s))
}

/// The whole suite in one file: the fill, then each test once, reads
/// before writes (then the mixes), one after the other (`stonewall`).
pub fn suite_job(tests: &[TestSpec], mix: bool, s: &JobSettings<'_>) -> String {
    let mut out = header(
        "the whole suite (one run of each test); btrfs-lab fills the file itself with BLAKE3 data, [fill] stands in for that",
    );
    out.push_str(&global(s));
    out.push('\n');
    out.push_str(&fill_section(s));
    for (t, d) in order(tests, mix) {
        out.push('\n');
        out.push_str(&test_section(&t, d, s).replacen('\n', "\nstonewall\n", 1));
    }
    out
}

/// The order the tests run in: every read test first (btrfs CoW writes
/// fragment the file and would change later reads), then the writes, then
/// (`mix`) the 70/30 mixes, as CrystalDiskMark runs them.
pub fn order(tests: &[TestSpec], mix: bool) -> Vec<(TestSpec, Direction)> {
    let directions: &[Direction] = if mix {
        &[Direction::Read, Direction::Write, Direction::Mix]
    } else {
        &[Direction::Read, Direction::Write]
    };
    directions
        .iter()
        .flat_map(|&d| tests.iter().map(move |&t| (t, d)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::{DEFAULT_TESTS, NVME_TESTS};

    fn settings(p: &str) -> JobSettings<'_> {
        JobSettings {
            file: p,
            size_bytes: 1 << 30,
            duration_secs: 5,
            direct: true,
            compress_percentage: 0,
            huge_page_bytes: None,
        }
    }

    fn value<'a>(section: &'a str, key: &str) -> Option<&'a str> {
        section
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }

    #[test]
    fn threads_never_share_a_range() {
        let p = "bench.dat";
        let s = settings(p);
        for t in NVME_TESTS.iter().chain(DEFAULT_TESTS.iter()) {
            for d in [Direction::Read, Direction::Write] {
                let j = test_section(t, d, &s);
                let size: u64 = value(&j, "size").unwrap().parse().unwrap();
                let n: u64 = value(&j, "numjobs").unwrap().parse().unwrap();
                assert!(size * n <= s.size_bytes, "{j}");
                assert_eq!(size % t.block_bytes, 0);
                if n > 1 {
                    let inc: u64 = value(&j, "offset_increment").unwrap().parse().unwrap();
                    assert!(inc >= size, "threads overlap: {j}");
                } else {
                    assert_eq!(value(&j, "offset_increment"), None);
                }
            }
        }
        // RND4K Q32T16 on 1 GiB: 64 MiB each.
        assert_eq!(range_per_thread(&NVME_TESTS[2], 1 << 30), 64 << 20);
    }

    #[test]
    fn jobs_never_create_the_file_and_keep_data_incompressible() {
        let s = settings("bench.dat");
        let j = test_job(&DEFAULT_TESTS[0], Direction::Write, &s);
        // A relative name: fio runs in the held work directory.
        assert_eq!(value(&j, "filename"), Some("bench.dat"));
        assert!(j.lines().any(|l| l == "thread"), "{j}");
        assert_eq!(value(&j, "allow_file_create"), Some("0"));
        assert_eq!(value(&j, "fallocate"), Some("none"));
        assert_eq!(value(&j, "refill_buffers"), Some("0"));
        assert_eq!(value(&j, "scramble_buffers"), Some("0"));
        assert_eq!(value(&j, "direct"), Some("1"));
        assert_eq!(value(&j, "rw"), Some("write"));
        assert_eq!(value(&j, "buffer_compress_percentage"), None);
        assert_eq!(value(&j, "percentile_list"), Some("50:99:99.9"));
        let f = fill_job(&s);
        assert_eq!(value(&f, "size"), Some("1073741824"));
        assert_eq!(value(&f, "end_fsync"), Some("1"));
    }

    #[test]
    fn suite_runs_reads_first_one_after_another() {
        let p = "bench.dat";
        let suite = suite_job(&DEFAULT_TESTS, false, &settings(p));
        let sections: Vec<&str> = suite
            .lines()
            .filter(|l| l.starts_with('[') && *l != "[global]")
            .collect();
        assert_eq!(sections[0], "[fill]");
        assert_eq!(sections.len(), 9);
        assert!(sections[1..5].iter().all(|s| s.ends_with("-read]")));
        assert!(sections[5..].iter().all(|s| s.ends_with("-write]")));
        assert_eq!(suite.matches("stonewall").count(), 8);
    }

    #[test]
    fn the_percentile_fixtures_were_made_from_these_job_files() {
        // tests/fixtures/bench/PROVENANCE.md: fio ran exactly what bench writes.
        let s = JobSettings {
            size_bytes: 64 << 20,
            duration_secs: 2,
            ..settings("bench.dat")
        };
        let rnd = TestSpec::parse("RND4K-Q32T2").unwrap();
        let seq = TestSpec::parse("SEQ1M-Q1T1").unwrap();
        assert_eq!(
            test_job(&rnd, Direction::Read, &s),
            include_str!("../../tests/fixtures/bench/pct-rnd-read.fio")
        );
        assert_eq!(
            test_job(&seq, Direction::Write, &s),
            include_str!("../../tests/fixtures/bench/pct-seq-write.fio")
        );
        assert_eq!(
            test_job(&rnd, Direction::Mix, &s),
            include_str!("../../tests/fixtures/bench/mix-rnd.fio")
        );
    }

    #[test]
    fn huge_page_buffers_for_the_sequential_tests_only() {
        let h = 2 << 20;
        // SEQ1M Q8T1: 9 MiB in 2 MiB pages, and two more; SEQ128K Q32T1:
        // 4.1 MiB, 3 pages and two.
        assert_eq!(huge_pages_needed(&DEFAULT_TESTS, h), 7);
        assert_eq!(huge_pages_needed(&NVME_TESTS, h), 7);
        assert_eq!(huge_pages_needed(&NVME_TESTS[1..], h), 5);
        assert_eq!(huge_pages_needed(&DEFAULT_TESTS[2..], h), 0);
        let s = JobSettings {
            huge_page_bytes: Some(h),
            ..settings("bench.dat")
        };
        let seq = test_section(&DEFAULT_TESTS[0], Direction::Read, &s);
        assert_eq!(value(&seq, "iomem"), Some("mmaphuge"));
        assert_eq!(value(&seq, "hugepage-size"), Some("2097152"));
        let rnd = test_section(&DEFAULT_TESTS[2], Direction::Read, &s);
        assert_eq!(value(&rnd, "iomem"), None);
    }

    #[test]
    fn mixes_run_after_the_writes_when_asked() {
        let tests = &DEFAULT_TESTS[..2];
        assert_eq!(order(tests, false).len(), 4);
        let o = order(tests, true);
        let ds: Vec<Direction> = o.iter().map(|(_, d)| *d).collect();
        assert_eq!(
            ds,
            [
                Direction::Read,
                Direction::Read,
                Direction::Write,
                Direction::Write,
                Direction::Mix,
                Direction::Mix
            ]
        );
        let j = test_section(&DEFAULT_TESTS[0], Direction::Mix, &settings("bench.dat"));
        assert_eq!(value(&j, "rw"), Some("rw"));
        assert_eq!(value(&j, "rwmixread"), Some("70"));
        assert_eq!(value(&j, "unified_rw_reporting"), Some("both"));
        assert!(suite_job(tests, true, &settings("bench.dat")).contains("[SEQ1M-Q1T1-mix]"));
    }
}
