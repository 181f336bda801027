//! Throughput figures as every report prints them: binary GiB/s and
//! decimal GB/s side by side (drives and PCIe links are sold in GB/s,
//! memory and files are counted in GiB), and as a share of a ceiling.
//! `read-test`, `links` (and later `bench`) use these so that one figure
//! reads the same everywhere.

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
    if !bytes_per_sec.is_finite() || bytes_per_sec < 0.0 {
        return "-".to_owned();
    }
    format!(
        "{} GiB/s ({} GB/s)",
        number(gib_per_s(bytes_per_sec)),
        number(gb_per_s(bytes_per_sec))
    )
}

/// `rate` as a percentage of `ceiling`; `None` without a positive ceiling.
pub fn percent_of(rate: f64, ceiling: f64) -> Option<f64> {
    (rate.is_finite() && ceiling.is_finite() && ceiling > 0.0).then(|| 100.0 * rate / ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_units_and_percentages() {
        assert_eq!(format_both(1.17 * GIB), "1.17 GiB/s (1.26 GB/s)");
        assert_eq!(format_both(18.8e9), "17.51 GiB/s (18.80 GB/s)");
        assert_eq!(format_both(0.05 * GIB), "0.050 GiB/s (0.054 GB/s)");
        assert_eq!(format_both(f64::NAN), "-");
        assert_eq!(percent_of(5e9, 20e9), Some(25.0));
        assert_eq!(percent_of(5e9, 0.0), None);
    }
}
