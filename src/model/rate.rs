//! The one place that turns bytes per second into text: binary GiB/s and
//! decimal GB/s side by side (drives and PCIe links are sold in GB/s,
//! memory and files are counted in GiB) as `read-test` and `links` print
//! them, btrfs-progs' compact IEC form (`1.25GiB/s`) of progress lines and
//! `probe-dio`, decimal GB/s of PCIe tables and MB/s of `bench`, and a
//! share of a ceiling. Every report calls these, so one figure reads the
//! same everywhere.

use super::units::{UnitBase, UnitMode, pretty_size};

const GIB: f64 = (1u64 << 30) as f64;
const GB: f64 = 1e9;

/// Bytes per second in GiB/s.
pub fn gib_per_s(bytes_per_sec: f64) -> f64 {
    bytes_per_sec / GIB
}

/// Bytes per second in decimal GB/s.
pub fn gb_per_s(bytes_per_sec: f64) -> f64 {
    bytes_per_sec / GB
}

/// A number of GiB/s or GB/s: two decimals, three below 0.1 (small files,
/// slow disks), `-` when not a finite non-negative number.
pub fn number(v: f64) -> String {
    if !v.is_finite() || v < 0.0 {
        "-".to_owned()
    } else if v < 0.1 {
        format!("{v:.3}")
    } else {
        format!("{v:.2}")
    }
}

/// `1.17 GiB/s (1.26 GB/s)`; `-` for no figure.
pub fn format_both(bytes_per_sec: f64) -> String {
    format_both_noted(bytes_per_sec, "")
}

/// `1.17 GiB/s (1.26 GB/s{note})`: [`format_both`] with more inside the
/// brackets (`, range 1.10–1.20`); `-` for no figure.
pub(crate) fn format_both_noted(bytes_per_sec: f64, note: &str) -> String {
    if !bytes_per_sec.is_finite() || bytes_per_sec < 0.0 {
        return "-".to_owned();
    }
    format!(
        "{} GiB/s ({} GB/s{note})",
        number(gib_per_s(bytes_per_sec)),
        number(gb_per_s(bytes_per_sec))
    )
}

/// btrfs-progs' IEC form with two decimals (`1.25GiB/s`, `512.00KiB/s`);
/// `-` for no figure.
pub fn format_rate(bytes_per_sec: f64) -> String {
    if !bytes_per_sec.is_finite() || bytes_per_sec < 0.0 {
        return "-".to_owned();
    }
    format!(
        "{}/s",
        pretty_size(
            bytes_per_sec.round() as u64,
            UnitMode::Human(UnitBase::Binary)
        )
    )
}

/// Decimal gigabytes with two decimals (`7.88 GB/s`), the unit drive makers
/// and PCIe tables use; `-` for no figure.
pub(crate) fn format_gb(bytes_per_sec: f64) -> String {
    if !bytes_per_sec.is_finite() || bytes_per_sec < 0.0 {
        return "-".to_owned();
    }
    format!("{:.2} GB/s", gb_per_s(bytes_per_sec))
}

/// Decimal megabytes with one decimal (`3550.0 MB/s`), as CrystalDiskMark
/// and `bench` show them.
pub(crate) fn format_mb(bytes_per_sec: f64) -> String {
    format!("{:.1} MB/s", bytes_per_sec / 1e6)
}

/// `rate` as a percentage of `ceiling`; `None` without a positive ceiling.
pub(crate) fn percent_of(rate: f64, ceiling: f64) -> Option<f64> {
    (rate.is_finite() && ceiling.is_finite() && ceiling > 0.0).then(|| 100.0 * rate / ceiling)
}

/// A time left, as progress lines print it: `90` → `1m30s`, `3720` →
/// `1h02m`.
pub fn duration(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        assert_eq!(super::duration(90.0), "1m30s");
        assert_eq!(super::duration(3720.0), "1h02m");
    }

    use super::*;

    #[test]
    fn both_units_and_percentages() {
        assert_eq!(format_both(1.17 * GIB), "1.17 GiB/s (1.26 GB/s)");
        assert_eq!(format_both(18.8e9), "17.51 GiB/s (18.80 GB/s)");
        assert_eq!(format_both(0.05 * GIB), "0.050 GiB/s (0.054 GB/s)");
        assert_eq!(format_both(f64::NAN), "-");
        assert_eq!(
            format_both_noted(1.17 * GIB, ", range 1.10–1.20"),
            "1.17 GiB/s (1.26 GB/s, range 1.10–1.20)"
        );
        assert_eq!(format_both_noted(f64::NAN, "x"), "-");
        assert_eq!(percent_of(5e9, 20e9), Some(25.0));
        assert_eq!(percent_of(5e9, 0.0), None);
    }

    /// The other forms, as they were printed before they moved here
    /// (parse::size::format_rate, bench::members' and parse::pcie's).
    #[test]
    fn compact_decimal_and_mb_forms() {
        assert_eq!(format_rate(1.25 * GIB), "1.25GiB/s");
        assert_eq!(format_rate(512.0 * 1024.0), "512.00KiB/s");
        assert_eq!(format_rate(0.0), "0.00B/s");
        assert_eq!(format_rate(f64::NAN), "-");
        assert_eq!(format_rate(-1.0), "-");
        assert_eq!(format_gb(7.877e9), "7.88 GB/s");
        assert_eq!(format_gb(f64::INFINITY), "-");
        assert_eq!(format_mb(3.55e9), "3550.0 MB/s");
        assert_eq!(format_mb(123_456.0), "0.1 MB/s");
    }
}
