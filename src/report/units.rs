//! Sizes printed the way btrfs-progs prints them (`pretty_size_mode` in
//! common/units.c), so text output can be compared with `btrfs` line by
//! line, and the precision of such text when it is read back.

/// 1024 or 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitBase {
    /// KiB, MiB, ... (`--iec`, the default).
    Binary,
    /// kB, MB, ... (`--si`).
    Decimal,
}

/// How sizes are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitMode {
    /// Plain bytes (`-b`, `--raw`).
    Raw,
    /// The largest unit that keeps the number at least 1 (`--human-readable`).
    Human(UnitBase),
    /// A fixed unit: 1 = kilo, 2 = mega, 3 = giga, 4 = tera (`-k/-m/-g/-t`).
    Fixed(UnitBase, u32),
}

impl Default for UnitMode {
    fn default() -> Self {
        UnitMode::Human(UnitBase::Binary)
    }
}

const BINARY_SUFFIX: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
const DECIMAL_SUFFIX: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];

impl UnitBase {
    fn multiplier(self) -> u64 {
        match self {
            UnitBase::Binary => 1024,
            UnitBase::Decimal => 1000,
        }
    }

    fn suffixes(self) -> &'static [&'static str; 7] {
        match self {
            UnitBase::Binary => &BINARY_SUFFIX,
            UnitBase::Decimal => &DECIMAL_SUFFIX,
        }
    }
}

/// Bytes in decimal gigabytes, two decimals (`1.07 GB`): how `bench
/// --sustained` states amounts written next to MB/s rates.
pub fn decimal_gb(bytes: f64) -> String {
    format!("{:.2} GB", bytes / 1e9)
}

/// Bytes in decimal megabytes, one decimal (`268.4 MB`).
pub fn decimal_mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

/// Formats `size` exactly as btrfs-progs does, including its use of a
/// single-precision float and `%.2f` (which rounds half to even, as Rust's
/// formatting does).
pub fn pretty_size(size: u64, mode: UnitMode) -> String {
    let (base, fixed) = match mode {
        UnitMode::Raw => return size.to_string(),
        UnitMode::Human(b) => (b, None),
        UnitMode::Fixed(b, n) => (b, Some(n.min(4))),
    };
    let mult = base.multiplier();
    let (last_size, divisor, divs) = match fixed {
        Some(n) => (size, mult.pow(n), n as usize),
        None => {
            let mut s = size;
            let mut last = size;
            let mut divs = 0;
            while s >= mult {
                last = s;
                s /= mult;
                divs += 1;
            }
            (last, if divs == 0 { 1 } else { mult }, divs)
        }
    };
    let fraction = last_size as f32 / divisor as f32;
    format!("{}{}", two_decimals(fraction), base.suffixes()[divs])
}

/// `format!("{x:.2}")` of a non-negative f32, without the float formatter
/// (its exact path is the cost of a long listing): the f32 times 100 is
/// exact in an f64 (24 + 7 bits), and rounding it half to even is what the
/// formatter does with the exact decimal value.
fn two_decimals(x: f32) -> String {
    let y = f64::from(x) * 100.0;
    if !(0.0..1e18).contains(&y) {
        return format!("{x:.2}");
    }
    let n = y.round_ties_even() as u64;
    format!("{}.{:02}", n / 100, n % 100)
}

/// Like [`pretty_size`] for a value that may be negative (btrfs-progs'
/// `UNITS_NEGATIVE`, used for unallocated space on a shrunk device).
pub fn pretty_size_signed(size: i64, mode: UnitMode) -> String {
    if size >= 0 {
        return pretty_size(size as u64, mode);
    }
    match mode {
        UnitMode::Raw => size.to_string(),
        _ => format!("-{}", pretty_size(size.unsigned_abs(), mode)),
    }
}

/// Bytes per unit for a btrfs-progs suffix (`KiB` → 1024, `kB` → 1000),
/// `None` for an unknown suffix.
pub fn unit_bytes(suffix: &str) -> Option<u64> {
    for (i, s) in BINARY_SUFFIX.iter().enumerate() {
        if *s == suffix {
            return Some(1024u64.pow(i as u32));
        }
    }
    for (i, s) in DECIMAL_SUFFIX.iter().enumerate() {
        if *s == suffix {
            return Some(1000u64.pow(i as u32));
        }
    }
    None
}

/// The largest difference between the true size and `value × unit` for a
/// number btrfs-progs printed with two decimals in `unit`: half of the last
/// digit, what the human mode truncated before dividing (one unit/1000 or
/// /1024), and the float's relative error (2^-23, to be safe).
pub(crate) fn rounding_error(value: f64, unit: u64) -> u64 {
    if unit == 1 {
        return 0;
    }
    let u = unit as f64;
    let bound = 0.005 * u + u / 1000.0 + value.abs() * u / 8_388_608.0;
    bound.ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bench --sustained's amounts, as it printed them before they moved here.
    #[test]
    fn decimal_amounts() {
        assert_eq!(decimal_gb(1_073_741_824.0), "1.07 GB");
        assert_eq!(decimal_mb(268_435_456.0), "268.4 MB");
        assert_eq!(decimal_gb(0.0), "0.00 GB");
    }

    #[test]
    fn two_decimals_is_the_float_formatter() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut values: Vec<f32> = vec![
            0.0, 0.005, 0.015, 0.125, 0.375, 1.005, 2.675, 1023.995, 1e9, 1.5e17,
        ];
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = x >> (x % 60);
            let div = 1u64 << (10 * (x % 5));
            values.push(size as f32 / div as f32);
        }
        for v in values {
            assert_eq!(two_decimals(v), format!("{v:.2}"), "{v:e}");
        }
    }

    #[test]
    fn matches_btrfs_progs_output() {
        // Figures from `btrfs filesystem df` (btrfs-progs 6.2) on a sandbox.
        let h = UnitMode::Human(UnitBase::Binary);
        assert_eq!(pretty_size(322_043_904, h), "307.12MiB");
        assert_eq!(pretty_size(16_384, h), "16.00KiB");
        assert_eq!(pretty_size(0, h), "0.00B");
        assert_eq!(pretty_size(5_767_168, h), "5.50MiB");
        let si = UnitMode::Human(UnitBase::Decimal);
        assert_eq!(pretty_size(322_043_904, si), "322.04MB");
        assert_eq!(pretty_size(16_384, si), "16.38kB");
        let k = UnitMode::Fixed(UnitBase::Binary, 1);
        assert_eq!(pretty_size(322_043_904, k), "314496.00KiB");
        assert_eq!(pretty_size(0, k), "0.00KiB");
        assert_eq!(pretty_size(104_857_600, UnitMode::Raw), "104857600");
        assert_eq!(pretty_size_signed(-16_384, h), "-16.00KiB");
        assert_eq!(pretty_size_signed(-5, UnitMode::Raw), "-5");
    }

    #[test]
    fn units_and_errors() {
        assert_eq!(unit_bytes("GiB"), Some(1 << 30));
        assert_eq!(unit_bytes("kB"), Some(1000));
        assert_eq!(unit_bytes("B"), Some(1));
        assert_eq!(unit_bytes("KB"), None);
        assert_eq!(rounding_error(12.0, 1), 0);
        // Every human rendering is within the bound of its true value.
        for size in [
            1_023u64,
            1_024,
            1_536,
            322_043_904,
            5_767_168,
            u64::MAX / 3,
            999_999_999_999,
        ] {
            for mode in [
                UnitMode::Human(UnitBase::Binary),
                UnitMode::Human(UnitBase::Decimal),
            ] {
                let text = pretty_size(size, mode);
                let split = text.find(|c: char| c.is_ascii_alphabetic()).unwrap();
                let value: f64 = text[..split].parse().unwrap();
                let unit = unit_bytes(&text[split..]).unwrap();
                let approx = value * unit as f64;
                let err = rounding_error(value, unit) as f64;
                assert!((approx - size as f64).abs() <= err, "{size} {text}");
            }
        }
    }
}
