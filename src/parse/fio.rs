//! fio's JSON output (`--output-format=json`), the only fio output btrfs-lab
//! reads: fio's human text is never parsed.
//!
//! One fio run of one job section with `group_reporting=1` gives one entry
//! in `jobs` whose figures are the sum over its `numjobs` threads. The
//! fields read here are stable since fio 3.0; the fixtures in
//! tests/fixtures/bench/ were captured from fio 3.33 (Debian 12) on the
//! development VM.

use serde::Deserialize;

use crate::error::{Error, ErrorKind, Result};

/// The figures of one direction (read or write) of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FioDirection {
    /// Bytes moved (`io_bytes`).
    pub(crate) io_bytes: u64,
    /// Bytes per second (`bw_bytes`).
    pub(crate) bw_bytes: f64,
    /// I/O operations per second.
    pub iops: f64,
    /// Runtime of this direction in milliseconds.
    pub(crate) runtime_ms: u64,
    /// Mean total latency (submission to completion) in nanoseconds.
    pub(crate) lat_mean_ns: f64,
    /// Median completion latency in nanoseconds, when fio computed
    /// percentiles.
    pub(crate) clat_p50_ns: Option<f64>,
    /// 99th percentile completion latency in nanoseconds.
    pub(crate) clat_p99_ns: Option<f64>,
    /// 99.9th percentile completion latency in nanoseconds.
    pub(crate) clat_p999_ns: Option<f64>,
}

/// One job entry (all threads of a job section with `group_reporting`).
#[derive(Debug, Clone, PartialEq)]
pub struct FioJob {
    /// The section name.
    pub name: String,
    /// fio's error code for the job (0: fine).
    pub error: i64,
    /// Reads.
    pub read: FioDirection,
    /// Writes.
    pub write: FioDirection,
    /// Reads and writes together (`unified_rw_reporting=both`: a mixed
    /// job's one figure, with percentiles over every I/O); None when fio
    /// did not report it.
    pub mixed: Option<FioDirection>,
    /// User CPU in percent of the job's runtime (per thread, averaged).
    pub(crate) usr_cpu: f64,
    /// System CPU in percent of the job's runtime (per thread, averaged).
    pub(crate) sys_cpu: f64,
    /// Runtime summed over the job's threads, in milliseconds.
    pub(crate) job_runtime_ms: u64,
}

impl FioJob {
    /// CPU seconds the job used, all threads together.
    pub fn cpu_seconds(&self) -> f64 {
        (self.usr_cpu + self.sys_cpu) / 100.0 * self.job_runtime_ms as f64 / 1000.0
    }

    /// CPU use of one thread, in cores (1.0: one core busy all the time).
    pub(crate) fn cores_per_thread(&self) -> f64 {
        (self.usr_cpu + self.sys_cpu) / 100.0
    }
}

/// A whole fio JSON document.
#[derive(Debug, Clone, PartialEq)]
pub struct FioOutput {
    /// `fio version` (`fio-3.33`).
    pub version: String,
    /// The jobs.
    pub jobs: Vec<FioJob>,
}

#[derive(Deserialize)]
struct RawOutput {
    #[serde(rename = "fio version")]
    version: String,
    jobs: Vec<RawJob>,
}

#[derive(Deserialize)]
struct RawJob {
    jobname: String,
    #[serde(default)]
    error: i64,
    read: RawDirection,
    write: RawDirection,
    #[serde(default)]
    mixed: Option<RawDirection>,
    usr_cpu: f64,
    sys_cpu: f64,
    #[serde(default)]
    job_runtime: u64,
}

#[derive(Deserialize)]
struct RawDirection {
    io_bytes: u64,
    bw_bytes: f64,
    iops: f64,
    runtime: u64,
    #[serde(default)]
    lat_ns: Option<RawLat>,
    #[serde(default)]
    clat_ns: Option<RawLat>,
}

#[derive(Deserialize)]
struct RawLat {
    mean: f64,
    #[serde(default)]
    percentile: Option<std::collections::BTreeMap<String, f64>>,
}

fn percentile(lat: Option<&RawLat>, key: &str) -> Option<f64> {
    lat?.percentile.as_ref()?.get(key).copied()
}

impl From<RawDirection> for FioDirection {
    fn from(r: RawDirection) -> Self {
        Self {
            io_bytes: r.io_bytes,
            bw_bytes: r.bw_bytes,
            iops: r.iops,
            runtime_ms: r.runtime,
            lat_mean_ns: r.lat_ns.as_ref().map_or(0.0, |l| l.mean),
            clat_p50_ns: percentile(r.clat_ns.as_ref(), "50.000000"),
            clat_p99_ns: percentile(r.clat_ns.as_ref(), "99.000000"),
            clat_p999_ns: percentile(r.clat_ns.as_ref(), "99.900000"),
        }
    }
}

/// Parses fio's JSON output. fio may print notes before the document
/// (`fio: ...` lines on some versions): the document starts at the first
/// line that is exactly `{`.
pub(crate) fn parse_fio_json(text: &str) -> Result<FioOutput> {
    let start = if text.starts_with('{') {
        0
    } else {
        text.find("\n{\n").map(|i| i + 1).ok_or_else(|| {
            Error::new(
                ErrorKind::Parse,
                "fio printed no JSON document (was --output-format=json given?)",
            )
        })?
    };
    let raw: RawOutput = serde_json::from_str(&text[start..]).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!("cannot read fio's JSON output: {e}"),
        )
    })?;
    Ok(FioOutput {
        version: raw.version,
        jobs: raw
            .jobs
            .into_iter()
            .map(|j| FioJob {
                name: j.jobname,
                error: j.error,
                read: j.read.into(),
                write: j.write.into(),
                mixed: j.mixed.map(Into::into),
                usr_cpu: j.usr_cpu,
                sys_cpu: j.sys_cpu,
                job_runtime_ms: j.job_runtime,
            })
            .collect(),
    })
}

/// One line of fio's per-I/O log (`write_iops_log` without
/// `log_avg_msec`): one completed I/O, `msec, 1, direction, bytes,
/// offset-or-prio`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoLogEntry {
    /// Milliseconds since the job started, when the I/O completed.
    pub(crate) msec: u64,
    /// 0 read, 1 write, 2 trim.
    pub direction: u8,
    /// Bytes the I/O moved.
    pub bytes: u64,
}

/// Parses one line of a fio per-I/O log; `None` for anything else (fio
/// writes nothing else, but a stop may cut the last line).
pub(crate) fn parse_io_log_line(line: &str) -> Option<IoLogEntry> {
    let mut f = line.split(',').map(str::trim);
    let msec = f.next()?.parse().ok()?;
    f.next()?.parse::<u64>().ok()?;
    let direction = f.next()?.parse().ok()?;
    let bytes = f.next()?.parse().ok()?;
    // A whole line has its fifth field; a cut one may not.
    f.next()?;
    Some(IoLogEntry {
        msec,
        direction,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured with fio 3.33 on the development VM (Debian 12, Linux 6.18,
    // virtio disk) from the job files next to them in tests/fixtures/bench/.
    const SEQ: &str = include_str!("../../tests/fixtures/bench/fio-3.33-seq.json");
    const RND: &str = include_str!("../../tests/fixtures/bench/fio-3.33-rnd.json");
    const WR: &str = include_str!("../../tests/fixtures/bench/fio-3.33-wr.json");
    const FILL: &str = include_str!("../../tests/fixtures/bench/fio-3.33-fill.json");
    // Produced with fio 3.33 on the issue 31 build machine from the job
    // files bench writes (with `percentile_list=50:99:99.9`), next to them;
    // how: tests/fixtures/bench/PROVENANCE.md.
    const PCT_READ: &str = include_str!("../../tests/fixtures/bench/fio-3.33-pct-rnd-read.json");
    const PCT_WRITE: &str = include_str!("../../tests/fixtures/bench/fio-3.33-pct-seq-write.json");

    #[test]
    fn completion_latency_percentiles_are_read_from_the_side_that_moved() {
        // fio's own numbers in the files (clat_ns.percentile, ns).
        let r = parse_fio_json(PCT_READ).unwrap();
        let j = &r.jobs[0];
        assert_eq!(j.name, "RND4K-Q32T2-read");
        assert_eq!(j.read.clat_p50_ns, Some(544_768.0));
        assert_eq!(j.read.clat_p99_ns, Some(4_358_144.0));
        assert_eq!(j.read.clat_p999_ns, Some(5_668_864.0));
        // The write side moved nothing: fio gives no percentiles for it.
        assert_eq!(j.write.io_bytes, 0);
        assert_eq!(j.write.clat_p50_ns, None);
        assert_eq!(j.write.clat_p999_ns, None);
        let w = parse_fio_json(PCT_WRITE).unwrap();
        let j = &w.jobs[0];
        assert_eq!(j.name, "SEQ1M-Q1T1-write");
        assert_eq!(j.write.clat_p50_ns, Some(456_704.0));
        assert_eq!(j.write.clat_p99_ns, Some(3_948_544.0));
        assert_eq!(j.write.clat_p999_ns, Some(7_962_624.0));
        assert_eq!(j.read.clat_p50_ns, None);
        // The older captures (fio's default percentile list) carry the same
        // keys among others.
        let s = parse_fio_json(SEQ).unwrap();
        assert!(s.jobs[0].read.clat_p999_ns.is_some());
    }

    #[test]
    fn sequential_read_one_thread() {
        let o = parse_fio_json(SEQ).unwrap();
        assert_eq!(o.version, "fio-3.33");
        assert_eq!(o.jobs.len(), 1);
        let j = &o.jobs[0];
        assert_eq!(j.name, "SEQ1M-Q8T1-read");
        assert_eq!(j.error, 0);
        assert_eq!(j.read.io_bytes, 729_808_896);
        assert_eq!(j.read.bw_bytes, 721_155_035.0);
        assert_eq!(j.read.runtime_ms, 1012);
        assert!((j.read.iops - 687.747036).abs() < 1e-6);
        assert!((j.read.lat_mean_ns - 11_587_043.287356).abs() < 1e-3);
        assert_eq!(j.read.clat_p50_ns, Some(11_599_872.0));
        assert_eq!(j.write.io_bytes, 0);
        assert_eq!(j.job_runtime_ms, 1011);
        // 0.593472 % user + 9.396637 % system of 1.011 s.
        assert!(
            (j.cpu_seconds() - 0.101_000).abs() < 1e-3,
            "{}",
            j.cpu_seconds()
        );
    }

    #[test]
    fn grouped_threads_are_one_entry_with_summed_runtime() {
        let o = parse_fio_json(RND).unwrap();
        assert_eq!(o.jobs.len(), 1);
        let j = &o.jobs[0];
        assert_eq!(j.name, "RND4K-Q32T2-read");
        assert_eq!(j.read.io_bytes, 224_260_096);
        // Two threads of ~1 s each.
        assert_eq!(j.job_runtime_ms, 2004);
        assert!((j.cores_per_thread() - 0.26946107).abs() < 1e-6);
        let w = parse_fio_json(WR).unwrap();
        assert_eq!(w.jobs[0].write.io_bytes, 1_935_671_296);
        assert_eq!(w.jobs[0].read.io_bytes, 0);
        let f = parse_fio_json(FILL).unwrap();
        assert_eq!(f.jobs[0].write.io_bytes, 64 << 20);
    }

    #[test]
    fn leading_notes_are_skipped_and_garbage_is_an_error() {
        let with_note = format!("fio: note: something\n{SEQ}");
        assert_eq!(parse_fio_json(&with_note).unwrap().jobs.len(), 1);
        let e = parse_fio_json("Starting 1 process\nfoo: (groupid=0)\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Parse);
        let e = parse_fio_json("{\n\"jobs\": 3\n}").unwrap_err();
        assert!(e.message().starts_with("cannot read fio's JSON output"));
    }

    #[test]
    fn per_io_logs_give_each_completion_and_its_bytes() {
        // fio 3.33, `write_iops_log=io` without log_avg_msec, a 1 MiB
        // O_DIRECT write at depth 8 (captured on the development VM); the
        // last line cut by a stop.
        let log = "2, 1, 1, 1048576, 0\n3, 1, 1, 1048576, 0\n4, 1, 1, 1048576, 0\n4, 1, 0, 4096, 0\n5, 1, 1, 10";
        let e: Vec<IoLogEntry> = log.lines().filter_map(parse_io_log_line).collect();
        assert_eq!(e.len(), 4);
        assert_eq!(
            e[0],
            IoLogEntry {
                msec: 2,
                direction: 1,
                bytes: 1 << 20
            }
        );
        assert_eq!(e[3].direction, 0);
        assert_eq!(e[3].bytes, 4096);
        assert_eq!(parse_io_log_line("garbage"), None);
    }
}
