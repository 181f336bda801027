//! `bench --textfile FILE`: the suite's figures as Prometheus metrics for
//! node_exporter's textfile collector (docs/fleet.md), through the one
//! builder ([`crate::report::metrics::Metrics`]). Every series is labelled
//! `mountpoint`, `uuid` (the filesystem's) and `test` (`SEQ1M Q8T1 read`);
//! the value is always the figure, in base units (bytes per second,
//! seconds). A flagged figure has only `btrfs_lab_bench_flagged 1`: it is
//! not a result, so no rate or latency is written for it.

use super::report::{BenchReport, Status, TestResult};
use crate::report::metrics::Metrics;

/// A metric of one figure: name, help, and the figure (None: no series).
type Gauge = (&'static str, &'static str, fn(&TestResult) -> Option<f64>);

/// The report as Prometheus text.
pub fn render(r: &BenchReport) -> String {
    let mp = r.target.mount_point.display().to_string();
    let uuid = r.target.uuid.clone().unwrap_or_default();
    let mut m = Metrics::default();
    let gauges: [Gauge; 7] = [
        (
            "btrfs_lab_bench_bytes_per_second",
            "Bandwidth of a btrfs-lab bench test, the median of its runs (bytes per second).",
            |t| t.bytes_per_sec,
        ),
        (
            "btrfs_lab_bench_best_bytes_per_second",
            "Bandwidth of the fastest run of a btrfs-lab bench test, as CrystalDiskMark reports the best of N (bytes per second).",
            |t| t.best_bytes_per_sec,
        ),
        (
            "btrfs_lab_bench_io_operations_per_second",
            "I/O operations per second of a btrfs-lab bench test, the median of its runs.",
            |t| t.iops,
        ),
        (
            "btrfs_lab_bench_best_io_operations_per_second",
            "I/O operations per second of the best run of a btrfs-lab bench test (CrystalDiskMark's best of N).",
            |t| t.best_iops,
        ),
        (
            "btrfs_lab_bench_completion_latency_p50_seconds",
            "Median completion latency of a btrfs-lab bench test (fio clat p50, the median of its runs).",
            |t| t.clat_p50_us.map(|us| us / 1e6),
        ),
        (
            "btrfs_lab_bench_completion_latency_p99_seconds",
            "99th percentile completion latency of a btrfs-lab bench test (fio clat p99, the median of its runs).",
            |t| t.clat_p99_us.map(|us| us / 1e6),
        ),
        (
            "btrfs_lab_bench_completion_latency_p99_9_seconds",
            "99.9th percentile completion latency of a btrfs-lab bench test (fio clat p99.9, the median of its runs).",
            |t| t.clat_p999_us.map(|us| us / 1e6),
        ),
    ];
    for t in &r.results {
        let test = format!("{} {}", t.name, t.direction.as_str());
        let labels: [(&str, &str); 3] = [("mountpoint", &mp), ("uuid", &uuid), ("test", &test)];
        m.add(
            "btrfs_lab_bench_flagged",
            "gauge",
            "Whether a btrfs-lab bench figure failed a check (1: not a result, no other series for it) or checked out (0).",
            &labels,
            f64::from(u8::from(t.status == Status::Flagged)),
        );
        for (name, help, value) in &gauges {
            if let Some(v) = value(t) {
                m.add(name, "gauge", help, &labels, v);
            }
        }
    }
    m.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> BenchReport {
        crate::bench::testdata::report(&[2100.0, 2000.0, 2300.0], &[900.0, 1000.0, 950.0], true)
    }

    #[test]
    fn figures_are_values_in_base_units_labelled_by_filesystem_and_test() {
        let text = render(&report());
        let l = r#"{mountpoint="/mnt/a \"b\"",uuid="4a1d7c52-0f3e-4c1b-9b7e-2f7d3c1e9a10",test="SEQ1M Q8T1 read"}"#;
        let w = r#"{mountpoint="/mnt/a \"b\"",uuid="4a1d7c52-0f3e-4c1b-9b7e-2f7d3c1e9a10",test="SEQ1M Q8T1 write"}"#;
        for line in [
            format!("btrfs_lab_bench_flagged{l} 0"),
            format!("btrfs_lab_bench_bytes_per_second{l} 2100000000"),
            format!("btrfs_lab_bench_best_bytes_per_second{l} 2300000000"),
            format!("btrfs_lab_bench_io_operations_per_second{l} 2100"),
            format!("btrfs_lab_bench_best_io_operations_per_second{l} 2300"),
            format!("btrfs_lab_bench_completion_latency_p50_seconds{l} 0.007001"),
            format!("btrfs_lab_bench_completion_latency_p99_seconds{l} 0.009"),
            format!("btrfs_lab_bench_completion_latency_p99_9_seconds{l} 0.0125"),
            // The flagged write: the flag, and no figure.
            format!("btrfs_lab_bench_flagged{w} 1"),
        ] {
            assert!(text.lines().any(|x| x == line), "missing {line} in\n{text}");
        }
        assert!(!text.contains(&format!("per_second{w}")), "{text}");
        assert!(!text.contains(&format!("seconds{w}")), "{text}");
        // One HELP and TYPE per family, every family a gauge.
        assert_eq!(text.matches("# TYPE ").count(), 8, "{text}");
        assert_eq!(text.matches(" gauge\n").count(), 8);
        assert!(
            text.lines()
                .filter(|x| !x.starts_with('#'))
                .all(|x| x.starts_with("btrfs_lab_bench_"))
        );
        // promtool, when installed, accepts it with no lint.
        if let Ok((ok, said)) = crate::sys::tools::promtool_check_metrics(&text) {
            assert!(ok, "promtool: {said}\n{text}");
            assert!(said.trim().is_empty(), "promtool lint: {said}\n{text}");
        }
    }

    #[test]
    fn a_filesystem_without_uuid_has_an_empty_label() {
        let mut r = report();
        r.target.uuid = None;
        assert!(render(&r).contains(",uuid=\"\",test="));
    }
}
