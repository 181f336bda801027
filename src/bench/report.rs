//! The `bench` report: one typed tree (the JSON contract in docs/json.md),
//! read back by `--compare` and rendered as text and HTML.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::profile::{Direction, TestSpec};
use crate::model::profile::Profile;

/// Exit status when at least one figure was flagged.
pub(crate) const EXIT_FLAGGED: u8 = crate::model::exit::FLAGGED.code;

/// Version of this report's layout; `--compare` refuses other versions.
pub(crate) const REPORT_VERSION: u32 = 1;

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BenchReport {
    /// Layout version ([`REPORT_VERSION`]).
    pub(crate) report_version: u32,
    /// 0: every figure checked out; 3: some figure is flagged.
    pub exit_code: u8,
    /// One sentence.
    pub summary: String,
    /// When the bench started: RFC 3339, UTC, whole seconds
    /// (`2026-12-04T21:40:12Z`); null in reports written before it was
    /// recorded.
    #[serde(default)]
    pub started_at: Option<String>,
    /// The machine.
    pub system: SystemInfo,
    /// Where the test ran.
    pub target: TargetInfo,
    /// What was asked for.
    pub parameters: Parameters,
    /// The test file.
    pub test_file: TestFileInfo,
    /// One entry per test and direction, in the order they ran.
    pub results: Vec<TestResult>,
    /// The array's read ceiling from the PCIe links, when known.
    pub ceiling: Option<CeilingInfo>,
    /// NVMe thermal counters before and after, per drive.
    pub thermal: Vec<ThermalInfo>,
    /// `--members`: each member alone and all together.
    pub members_scaling: Option<MemberScaling>,
    /// Remarks that concern the whole bench.
    pub notes: Vec<String>,
    /// The fio job file (fill and every test once), as saved.
    pub job_file: String,
    /// Where the run was saved in the bench history (null: not saved,
    /// `--no-history`, or a report read back from the history itself).
    #[serde(default)]
    pub history: Option<HistoryEntry>,
    /// When the sequential tests' buffers were ordinary 4 KiB pages: what
    /// that costs here, measured once on the test file (null: huge-page
    /// buffers, no sequential test, or not measurable; the notes say why).
    #[serde(default)]
    pub buffer_cost: Option<super::buffers::BufferCost>,
}

/// A run's place in the bench history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryEntry {
    /// The database.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub db: PathBuf,
    /// The run's id (`bench --compare ID ...`).
    pub id: i64,
}

/// The machine and its software.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SystemInfo {
    /// `uname -r`.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// Online CPUs.
    pub(crate) cpus: u32,
    /// `fio --version`.
    pub fio_version: String,
    /// The fio binary used.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub fio_path: PathBuf,
}

/// One block device of the filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberDevice {
    /// As the filesystem knows it (`/dev/nvme0n1p2`).
    pub path: String,
    /// Kernel name in /proc/diskstats (`nvme0n1p2`).
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// The filesystem under DIR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TargetInfo {
    /// DIR, canonical (U+FFFD in place of bytes that are not UTF-8; the
    /// exact bytes are then in `dir_bytes`).
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub dir: PathBuf,
    /// The exact bytes of `dir` (an array of 0-255), present only when they
    /// are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir_bytes: Option<Vec<u8>>,
    /// Its mount point.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub mount_point: PathBuf,
    /// Filesystem type.
    pub fs_type: String,
    /// The filesystem's UUID (btrfs: its fsid); null for other
    /// filesystems or when it could not be read.
    #[serde(default)]
    pub uuid: Option<String>,
    /// The mount's source.
    pub source: String,
    /// Mount options (superblock and mount point).
    pub mount_options: Vec<String>,
    /// btrfs data profiles.
    pub data_profiles: Vec<Profile>,
    /// The devices whose counters are read (every btrfs member).
    pub devices: Vec<MemberDevice>,
    /// btrfs members that /proc/diskstats does not show (the cross-check
    /// is then off).
    pub devices_missing: Vec<String>,
    /// The compression mount option (`compress=zstd:3`,
    /// `compress-force=zstd`), if any.
    pub compression_option: Option<String>,
}

/// What was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Parameters {
    /// `default`, `nvme` or `custom` (`--tests`).
    pub profile: String,
    /// The tests.
    pub tests: Vec<TestSpec>,
    /// Test file size.
    pub size_bytes: u64,
    /// Runs per test; the median is the result.
    pub runs: u32,
    /// Seconds per run.
    pub duration_secs: u64,
    /// Seconds between runs.
    pub interval_secs: u64,
    /// `--cow`: the test file has data checksums (O_DIRECT writes may be
    /// buffered by the kernel).
    pub cow: bool,
    /// fio's I/O engine.
    pub ioengine: String,
    /// `--mix`: every test also ran as a read/write mix with this percent
    /// of reads (null: no mix).
    #[serde(default)]
    pub mix_read_percent: Option<u32>,
    /// The sequential tests' fio buffers were huge pages (`iomem=mmaphuge`),
    /// the true ceiling of large I/O; false: ordinary pages (the notes say
    /// what that may cost).
    #[serde(default)]
    pub huge_page_buffers: bool,
}

/// Bytes by how a file stores them (FIEMAP).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct FileLayout {
    /// Extents.
    pub extents: u64,
    /// Bytes in compressed (encoded) extents.
    pub encoded_bytes: u64,
    /// Bytes in preallocated, never-written extents.
    pub unwritten_bytes: u64,
    /// Bytes in holes.
    pub hole_bytes: u64,
    /// Bytes not yet allocated (dirty).
    pub(crate) delalloc_bytes: u64,
}

impl FileLayout {
    /// Bytes that read as zeros without the device: never written.
    pub fn never_written_bytes(&self) -> u64 {
        self.unwritten_bytes + self.hole_bytes
    }
}

/// The test file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestFileInfo {
    /// Where it was (removed at the end).
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// Bytes.
    pub size_bytes: u64,
    /// The file carried the NOCOW attribute (no checksums: O_DIRECT is direct).
    pub nocow: bool,
    /// Seconds the fill took.
    pub(crate) fill_seconds: f64,
    /// Bytes the members wrote during the fill.
    pub fill_device_write_bytes: Option<u64>,
    /// Layout after the fill, before the first read test.
    pub layout_after_fill: Option<FileLayout>,
    /// Layout after the last test.
    pub(crate) layout_at_end: Option<FileLayout>,
    /// The file was removed at the end.
    pub removed: bool,
}

/// Whether a figure can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked and fine (there may be notes).
    Ok,
    /// A check failed: the figure is not a result.
    Flagged,
}

/// What a write run's dirtied bytes counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DirtiedSource {
    /// The test file's own dirtied folios (tracepoint
    /// writeback:writeback_dirty_folio, with filemap's folios added to the
    /// page cache when the kernel has it, filtered on the file's inode in
    /// a private trace instance): nothing else on the machine counts.
    InodeTrace,
    /// The filesystem's backing device counter (debugfs BdiDirtied): other
    /// writers on the filesystem and writeback timing move it.
    BdiCounter,
    /// The machine-wide counter (/proc/vmstat nr_dirtied).
    Vmstat,
}

impl From<crate::sys::proc::counters::CounterKind> for DirtiedSource {
    fn from(k: crate::sys::proc::counters::CounterKind) -> Self {
        match k {
            crate::sys::proc::counters::CounterKind::Bdi => DirtiedSource::BdiCounter,
            crate::sys::proc::counters::CounterKind::Vmstat => DirtiedSource::Vmstat,
        }
    }
}

use crate::model::finding::{Code, short};
pub use crate::model::finding::{Finding, Severity};

/// The `bench --json` family of short names: a check's `code`.
#[derive(Debug)]
pub struct CheckCodes;

impl short::Family for CheckCodes {
    const COMMAND: &'static str = "bench";
    const SCHEMA_NAME: &'static str = "CheckCode";
    const ABOUT: &'static str = "Stable codes of the checks.";
}

/// A check's severity as `bench --json` spells it: warning is `flag` (the
/// figure is not a result), info is `note`.
#[derive(Debug, Clone, Copy)]
struct Spelled(Severity);

impl Serialize for Spelled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if is_flag(self.0) { "flag" } else { "note" })
    }
}

impl<'de> Deserialize<'de> for Spelled {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "flag" => Ok(Spelled(Severity::Warning)),
            "note" => Ok(Spelled(Severity::Info)),
            other => Err(serde::de::Error::custom(format!(
                "unknown check severity {other:?}"
            ))),
        }
    }
}

impl schemars::JsonSchema for Spelled {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Severity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "oneOf": [
                {"type": "string", "const": "flag",
                 "description": "The figure is not a measurement of the devices."},
                {"type": "string", "const": "note",
                 "description": "Something to know about the figure."},
            ],
            "description": "How bad a finding is.",
        })
    }
}

/// What a suite run is, known once its test file is made: the heading of
/// its report, said before the figures come.
#[derive(Debug, Clone, Copy)]
pub struct Heading<'a> {
    /// Where, on what.
    pub target: &'a TargetInfo,
    /// With what.
    pub parameters: &'a Parameters,
    /// The test file is NOCOW.
    pub nocow: bool,
    /// The machine, its kernel and fio.
    pub system: &'a SystemInfo,
}

impl BenchReport {
    /// The heading of this report.
    pub fn heading(&self) -> Heading<'_> {
        Heading {
            target: &self.target,
            parameters: &self.parameters,
            nocow: self.test_file.nocow,
            system: &self.system,
        }
    }
}

/// What a figure of `runs` runs is, in words: the median of an odd count,
/// said as the mean it is for two (`the mean of 2 runs`) and as the mean of
/// the middle two for a larger even count.
pub fn statistic(runs: u32) -> String {
    match runs {
        0 | 1 => "a single run".to_owned(),
        2 => "the mean of 2 runs".to_owned(),
        n if n % 2 == 1 => format!("the median of {n} runs"),
        n => format!("the median of {n} runs (the mean of the middle two)"),
    }
}

/// A check flags its figure (it is then not a result): a warning or worse.
pub fn is_flag(s: Severity) -> bool {
    s != Severity::Info
}

/// A check of a figure as `bench --json` writes it: a catalog finding
/// (`bench-*`) under its short code, its title the message.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(description = "One finding about a figure.")]
struct Check {
    /// Stable code.
    code: short::Short<CheckCodes>,
    /// Flag or note.
    severity: Spelled,
    /// What was seen and what it means.
    message: String,
}

/// A check of a figure: the catalog finding `code` (a `bench-*` code) as a
/// flag (warning) or a note (info).
pub(crate) fn check(code: Code, severity: Severity, message: String) -> Finding {
    Finding::new(code, message, code.meaning()).with_severity(severity)
}

/// Serde for the checks of a run or a result (`#[serde(with)]`).
mod checks {
    use super::*;

    pub(super) fn serialize<S: serde::Serializer>(v: &[Finding], s: S) -> Result<S::Ok, S::Error> {
        let view: Vec<Check> = v
            .iter()
            .map(|f| Check {
                code: short::Short::new(f.code),
                severity: Spelled(f.severity),
                message: f.title.clone(),
            })
            .collect();
        view.serialize(s)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Finding>, D::Error> {
        let view = Vec::<Check>::deserialize(d)?;
        Ok(view
            .into_iter()
            .map(|c| check(c.code.0, c.severity.0, c.message))
            .collect())
    }
}

/// One fio run of one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunResult {
    /// From 1.
    pub run: u32,
    /// Bytes fio says it moved.
    pub claimed_bytes: u64,
    /// fio's runtime in seconds.
    pub seconds: f64,
    /// fio's bandwidth, bytes per second.
    pub bytes_per_sec: f64,
    /// fio's IOPS.
    pub iops: f64,
    /// Mean latency, microseconds.
    pub lat_mean_us: f64,
    /// Median completion latency, microseconds.
    pub(crate) clat_p50_us: Option<f64>,
    /// 99th percentile completion latency, microseconds.
    pub(crate) clat_p99_us: Option<f64>,
    /// 99.9th percentile completion latency, microseconds.
    pub(crate) clat_p999_us: Option<f64>,
    /// CPU use per fio thread, in cores (usr + sys).
    pub(crate) cores_per_thread: f64,
    /// CPU seconds per GiB moved (all threads).
    pub(crate) cpu_seconds_per_gib: Option<f64>,
    /// Bytes the members read during the run.
    pub device_read_bytes: Option<u64>,
    /// Bytes the members wrote during the run.
    pub device_write_bytes: Option<u64>,
    /// Bytes of the test file in the page cache before a read run.
    pub resident_before_bytes: Option<u64>,
    /// Bytes of page cache dirtied during a write run (what the
    /// page_cache_write check judges; where from: `dirtied_source`).
    pub dirtied_bytes: Option<u64>,
    /// What `dirtied_bytes` counted (null: not a write run, or nothing
    /// counted; older reports: not recorded).
    #[serde(default)]
    pub dirtied_source: Option<DirtiedSource>,
    /// The backing device's (or the machine's) dirtied counter over the
    /// same run, when `dirtied_bytes` is the test file's own (inode-trace):
    /// shown for comparison, not judged (other writers and writeback
    /// timing move it).
    #[serde(default)]
    pub counter_dirtied_bytes: Option<u64>,
    /// Checks that failed or noted something for this run.
    #[serde(with = "checks")]
    #[schemars(with = "Vec<Check>")]
    pub checks: Vec<Finding>,
}

/// One test in one direction, all runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestResult {
    /// The test.
    pub test: TestSpec,
    /// Read or write.
    pub direction: Direction,
    /// `SEQ1M Q8T1`.
    pub name: String,
    /// ok or flagged.
    pub status: Status,
    /// Median bandwidth (the result), bytes per second; null when flagged.
    pub bytes_per_sec: Option<f64>,
    /// Median IOPS; null when flagged.
    pub iops: Option<f64>,
    /// Median mean latency, microseconds; null when flagged.
    pub lat_mean_us: Option<f64>,
    /// Best of the runs: the fastest run's bandwidth, bytes per second, as
    /// CrystalDiskMark reports it (the best of N); null when flagged.
    pub best_bytes_per_sec: Option<f64>,
    /// Best of the runs: the highest IOPS of a run (CrystalDiskMark's
    /// convention); null when flagged.
    pub best_iops: Option<f64>,
    /// Median over the runs of fio's median completion latency (p50),
    /// microseconds; null when flagged or fio gave no percentiles.
    pub clat_p50_us: Option<f64>,
    /// Median over the runs of fio's p99 completion latency, microseconds;
    /// null when flagged or fio gave no percentiles.
    pub clat_p99_us: Option<f64>,
    /// Median over the runs of fio's p99.9 completion latency,
    /// microseconds; null when flagged or fio gave no percentiles.
    pub clat_p999_us: Option<f64>,
    /// Slowest run, bytes per second.
    pub bytes_per_sec_min: f64,
    /// Fastest run, bytes per second.
    pub bytes_per_sec_max: f64,
    /// The same median, checked or not (to show what was claimed).
    pub claimed_bytes_per_sec: f64,
    /// Median CPU seconds per GiB; null when flagged (per GiB fio
    /// claimed, which is then not what moved).
    pub(crate) cpu_seconds_per_gib: Option<f64>,
    /// Median cores per thread.
    pub(crate) cores_per_thread: f64,
    /// The result as a fraction of the array's one-reader ceiling
    /// (sequential reads, when known).
    pub ceiling_fraction: Option<f64>,
    /// Findings (each once, over all runs).
    #[serde(with = "checks")]
    #[schemars(with = "Vec<Check>")]
    pub checks: Vec<Finding>,
    /// The runs.
    pub runs: Vec<RunResult>,
}

/// The array's ceiling from `links`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CeilingInfo {
    /// One reader, one large sequential read, encoded rate (bytes/s).
    pub one_reader_bytes_per_sec: Option<f64>,
    /// Many readers at once (bytes/s).
    pub(crate) many_readers_bytes_per_sec: Option<f64>,
    /// Members that hold the array back.
    pub held_back_by: Vec<String>,
    /// Members without PCIe information.
    pub without_link_info: Vec<String>,
    /// links' sentence.
    pub summary: String,
}

/// One NVMe drive's thermal counters around the bench.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThermalInfo {
    /// Controller (`nvme0`).
    pub controller: String,
    /// Temperature before, °C.
    pub celsius_before: Option<i32>,
    /// Temperature after, °C.
    pub celsius_after: Option<i32>,
    /// Seconds of light throttling during the bench.
    pub tmt1_seconds: u32,
    /// Seconds of heavy throttling during the bench.
    pub tmt2_seconds: u32,
    /// Transitions into throttling during the bench.
    pub transitions: u32,
    /// Why the counters could not be read.
    pub error: Option<String>,
}

/// `--members`: sequential O_DIRECT reads of the member devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberScaling {
    /// Each member alone.
    pub alone: Vec<MemberRate>,
    /// Each member while all are read at once.
    pub together: Vec<MemberRate>,
    /// Sum of the members alone.
    pub sum_alone_bytes_per_sec: f64,
    /// All at once, total.
    pub together_bytes_per_sec: f64,
    /// Slowest member alone × members.
    pub slowest_times_n_bytes_per_sec: f64,
    /// The member that holds the array back (slowest alone).
    pub slowest: String,
    /// The array's SEQ read result, if one ran.
    pub array_bytes_per_sec: Option<f64>,
    /// One sentence.
    pub summary: String,
}

/// One member's read rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberRate {
    /// Device path.
    pub device: String,
    /// Bytes per second (fio).
    pub bytes_per_sec: f64,
    /// Bytes the device's counters moved.
    pub device_read_bytes: Option<u64>,
}

impl BenchReport {
    /// All flags of all results.
    pub fn flagged(&self) -> impl Iterator<Item = (&TestResult, &Finding)> {
        self.results.iter().flat_map(|r| {
            r.checks
                .iter()
                .filter(|c| is_flag(c.severity))
                .map(move |c| (r, c))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words say which statistic the figure is (issue 52: "the middle
    /// run of 2 runs" was a mean).
    #[test]
    fn the_statistic_is_named_for_what_it_is() {
        assert_eq!(statistic(1), "a single run");
        assert_eq!(statistic(2), "the mean of 2 runs");
        assert_eq!(statistic(5), "the median of 5 runs");
        assert_eq!(
            statistic(4),
            "the median of 4 runs (the mean of the middle two)"
        );
        // What the words say is what the figures are.
        let m = crate::bench::analysis::median;
        assert_eq!(m(&[100.0, 300.0]), Some(200.0));
        assert_eq!(m(&[1.0, 2.0, 4.0, 8.0]), Some(3.0));
    }

    /// A check reads and writes as `bench --json` always wrote it: the
    /// short code, `flag`/`note`, the message; the catalog code behind it.
    #[test]
    fn checks_keep_their_document_shape() {
        #[derive(Serialize, Deserialize)]
        struct Holder {
            #[serde(with = "checks")]
            checks: Vec<Finding>,
        }
        let old = r#"{"checks":[{"code":"device_mismatch","severity":"flag","message":"fio claims 2x"},{"code":"compression","severity":"note","message":"mounted with compress"}]}"#;
        let h: Holder = serde_json::from_str(old).unwrap();
        assert_eq!(h.checks[0].code, Code::BenchDeviceMismatch);
        assert_eq!(h.checks[0].severity, Severity::Warning);
        assert_eq!(h.checks[0].title, "fio claims 2x");
        assert_eq!(h.checks[1].code, Code::BenchCompression);
        assert!(!is_flag(h.checks[1].severity));
        assert_eq!(serde_json::to_string(&h).unwrap(), old);
        // A link kind is not a check code.
        let bad = r#"{"checks":[{"code":"degraded","severity":"flag","message":"x"}]}"#;
        assert!(serde_json::from_str::<Holder>(bad).is_err());
    }
}
