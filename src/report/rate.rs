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
const MB: f64 = 1e6;

/// The units a rate is written in, as loaders and tools print them, with
/// bytes per second per unit (longest first, so `GiB/s` is not read as
/// `B/s`).
pub(crate) const RATE_UNITS: [(&str, f64); 16] = [
    ("Gbit/s", GB / 8.0),
    ("Mbit/s", MB / 8.0),
    ("TiB/s", GIB * 1024.0),
    ("GiB/s", GIB),
    ("MiB/s", (1u64 << 20) as f64),
    ("KiB/s", 1024.0),
    ("Gbps", GB / 8.0),
    ("Mbps", MB / 8.0),
    ("TB/s", 1e12),
    ("GB/s", GB),
    ("MB/s", MB),
    ("kB/s", 1e3),
    ("KB/s", 1e3),
    ("G/s", GB),
    ("M/s", MB),
    ("B/s", 1.0),
];

/// A rate as a user or a loader writes it (`4GB/s`, `850 MiB/s`,
/// `3.2 GiB/s`, `25 Gbps`), in bytes per second; `/s` may be left out
/// (`4GB`).
pub fn parse_rate(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)?;
    let unit = unit.trim();
    let with_s = if unit.ends_with("/s") || unit.ends_with("ps") {
        unit.to_owned()
    } else {
        format!("{unit}/s")
    };
    RATE_UNITS
        .iter()
        .find(|(u, _)| *u == with_s)
        .map(|(_, m)| v * m)
}

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

/// Bytes per second in decimal MB/s (what `bench` counts in: its tables,
/// charts and axes).
pub fn mb_per_s(bytes_per_sec: f64) -> f64 {
    bytes_per_sec / MB
}

/// A number of MB/s with one decimal, no unit (`3550.0`): the cells of
/// `bench`'s tables.
pub fn mb_number(bytes_per_sec: f64) -> String {
    format!("{:.1}", mb_per_s(bytes_per_sec))
}

/// A number of MB/s with one decimal, more below 0.1 MB/s (`0.042`,
/// `<0.001`), so a rate that moved data never reads "0.0": sustained
/// writes that stall.
pub fn mb_number_fine(bytes_per_sec: f64) -> String {
    let m = mb_per_s(bytes_per_sec);
    if m > 0.0 && m < 0.001 {
        "<0.001".to_owned()
    } else if m > 0.0 && m < 0.1 {
        format!("{m:.3}")
    } else {
        format!("{m:.1}")
    }
}

/// Decimal megabytes with one decimal (`3550.0 MB/s`), as CrystalDiskMark
/// and `bench` show them.
pub fn format_mb(bytes_per_sec: f64) -> String {
    format!("{} MB/s", mb_number(bytes_per_sec))
}

/// [`mb_number_fine`] with its unit (`0.042 MB/s`).
pub fn format_mb_fine(bytes_per_sec: f64) -> String {
    format!("{} MB/s", mb_number_fine(bytes_per_sec))
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
        assert_eq!(mb_number(3.55e9), "3550.0");
        assert_eq!(mb_per_s(2.5e6), 2.5);
    }

    /// bench --sustained's form, as `bench::sustained::format_mb` printed
    /// it before it moved here.
    #[test]
    fn fine_mb_never_reads_zero_for_a_rate_that_moved_data() {
        assert_eq!(mb_number_fine(3.55e9), "3550.0");
        assert_eq!(mb_number_fine(0.0), "0.0");
        assert_eq!(mb_number_fine(42_000.0), "0.042");
        assert_eq!(mb_number_fine(500.0), "<0.001");
        assert_eq!(mb_number_fine(100_000.0), "0.1");
        assert_eq!(format_mb_fine(42_000.0), "0.042 MB/s");
    }
}
