//! Reports for unit tests (generated, not measured).

use crate::bench::analysis::{CheckContext, Sample, check_run, run_result, summarize};
use crate::bench::profile::{DEFAULT_TESTS, Direction};
use crate::bench::report::{BenchReport, Severity, TestResult, check};
use crate::model::finding::Code;

/// A result of test `DEFAULT_TESTS[test]` in direction `d` at `rates`
/// MB/s per round (latencies 8 ms mean; p50 7 ms, p99 9 ms, p99.9 12.5
/// ms), flagged as buffered when `flag`.
pub(crate) fn figure(test: usize, d: Direction, rates: &[f64], flag: bool) -> TestResult {
    let ctx = CheckContext {
        size_bytes: 1 << 30,
        ..CheckContext::default()
    };
    let t = DEFAULT_TESTS[test];
    let runs = rates
        .iter()
        .enumerate()
        .map(|(i, &mb)| {
            let s = Sample {
                claimed_bytes: (mb * 1e6) as u64,
                seconds: 1.0,
                bytes_per_sec: mb * 1e6,
                iops: mb,
                lat_mean_us: 8000.0,
                clat_p50_us: Some(7000.0 + i as f64),
                clat_p99_us: Some(9000.0),
                clat_p999_us: Some(12_500.0),
                ..Sample::default()
            };
            let mut checks = check_run(&t, d, &s, &ctx);
            if flag {
                checks.push(check(
                    Code::BenchPageCacheWrite,
                    Severity::Warning,
                    "buffered".into(),
                ));
            }
            run_result(i as u32 + 1, &s, checks)
        })
        .collect();
    summarize(t, d, runs, &ctx)
}

/// A report with no results, of a btrfs at /mnt/a b.
pub(crate) fn skeleton() -> BenchReport {
    let json = serde_json::json!({
        "report_version": 1, "exit_code": 3, "summary": "s",
        "system": {"kernel": "6.18", "hostname": "h", "cpus": 2, "fio_version": "fio-3.33", "fio_path": "/usr/bin/fio"},
        "target": {"dir": "/mnt/a b", "mount_point": "/mnt/a \"b\"", "fs_type": "btrfs",
            "uuid": "4a1d7c52-0f3e-4c1b-9b7e-2f7d3c1e9a10", "source": "/dev/loop0",
            "mount_options": [], "data_profiles": [], "devices": [], "devices_missing": [],
            "compression_option": null},
        "parameters": {"profile": "default", "tests": [], "size_bytes": 1, "runs": 3,
            "duration_secs": 1, "interval_secs": 0, "cow": false, "ioengine": "libaio"},
        "test_file": {"path": "/x", "size_bytes": 1, "nocow": true, "fill_seconds": 0.0,
            "fill_device_write_bytes": null, "layout_after_fill": null, "layout_at_end": null,
            "removed": true},
        "results": [], "ceiling": null, "thermal": [], "members_scaling": null,
        "notes": [], "job_file": ""
    });
    serde_json::from_value(json).unwrap()
}

/// A suite report of one test (SEQ1M Q8T1): reads at `read` MB/s per
/// round, writes at `write` (flagged as buffered when `write_flagged`).
pub(crate) fn report(read: &[f64], write: &[f64], write_flagged: bool) -> BenchReport {
    let mut r = skeleton();
    r.results = vec![
        figure(0, Direction::Read, read, false),
        figure(0, Direction::Write, write, write_flagged),
    ];
    r
}
