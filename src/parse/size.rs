//! Sizes on the command line ("256M", "2GiB", "1.5G") and in output.

use crate::error::{Error, Result};
use crate::report::units::{UnitBase, UnitMode, pretty_size};

/// Parses a size the way coreutils does: a number (decimals allowed) and an
/// optional suffix. K/M/G/T/P and KiB/MiB/... are powers of 1024; KB/MB/... are
/// powers of 1000; no suffix or B means bytes. Case does not matter.
pub fn parse_size(text: &str) -> Result<u64> {
    let s = text.trim();
    let bad = || {
        Error::usage(format!("invalid size '{text}'"))
            .with_hint("write a number with an optional unit, for example 512M, 2G or 4096")
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() || number.chars().filter(|&c| c == '.').count() > 1 {
        return Err(bad());
    }
    let unit = unit.trim().to_ascii_lowercase();
    let (letter, rest) = match unit.chars().next() {
        Some(c) if "kmgtpe".contains(c) => (Some(c), &unit[1..]),
        _ => (None, unit.as_str()),
    };
    let base: u64 = match (letter, rest) {
        (None, "" | "b") => 1,
        (Some(_), "" | "ib") => 1024,
        (Some(_), "b") => 1000,
        _ => return Err(bad()),
    };
    let power = letter.map_or(0, |c| "kmgtpe".find(c).unwrap_or(0) as u32 + 1);
    let multiplier = base
        .checked_pow(power)
        .ok_or_else(|| Error::usage(format!("size '{text}' is too large")))?;
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| Error::usage(format!("size '{text}' is too large")))?
    };
    let too_large = || Error::usage(format!("size '{text}' is too large"));
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    if !frac.is_empty() {
        // Exact decimal fraction: frac / 10^len * multiplier, rounded down.
        let digits = frac.len().min(18) as u32;
        let frac_value: u128 = frac[..digits as usize].parse().map_err(|_| bad())?;
        let part = frac_value * u128::from(multiplier) / 10u128.pow(digits);
        bytes = bytes
            .checked_add(u64::try_from(part).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
    }
    Ok(bytes)
}

/// Formats bytes with IEC units and two decimals, as btrfs-progs does
/// (`256.00MiB`, `1.50GiB`, `0.00B`): the one formatter, btrfs-progs' own
/// algorithm ([`pretty_size`]).
pub(crate) fn format_iec(bytes: u64) -> String {
    pretty_size(bytes, UnitMode::Human(UnitBase::Binary))
}

/// The rate formatter lives in [`crate::report::rate`]; re-exported here for
/// the callers that import it from this module.
pub use crate::report::rate::format_rate;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("512b").unwrap(), 512);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("1KB").unwrap(), 1000);
        assert_eq!(parse_size(" 3 T ").unwrap(), 3 << 40);
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        for bad in [
            "",
            "M",
            "1.2.3G",
            "12X",
            "-1",
            "1Mx",
            "99999999999999999999",
            "20E",
            "1GiBB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn formats_like_btrfs_progs() {
        assert_eq!(format_iec(0), "0.00B");
        assert_eq!(format_iec(1023), "1023.00B");
        assert_eq!(format_iec(256 << 20), "256.00MiB");
        assert_eq!(format_iec(3 << 29), "1.50GiB");
        // btrfs-progs divides in single precision after truncating to the
        // unit below: 1662088 bytes are 1.58MiB there, not 1.59MiB.
        assert_eq!(format_iec(1_662_088), "1.58MiB");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = parse_size(&s);
        }

        #[test]
        fn integers_with_binary_units_round_trip(n in 0u64..1_000_000, unit in 0usize..4) {
            let suffix = ["", "K", "M", "G"][unit];
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")).unwrap(), n << (10 * unit));
        }
    }
}
