//! PCIe link attributes as sysfs prints them, and what a link can carry.
//!
//! `current_link_speed` / `max_link_speed` read `16.0 GT/s PCIe` (Linux 5.4
//! and later; `8 GT/s` or `8.0 GT/s` before), or `Unknown` when the link is
//! down; `current_link_width` / `max_link_width` are a plain lane count.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Share of the encoded bandwidth a drive gets after protocol overhead
/// (TLP/DLLP headers, flow control): the reference machine measured 3.55
/// GB/s on Gen4 x2 (0.90 of 3.94) and 6.6 GB/s on Gen4 x4 (0.84 of 7.88).
pub(crate) const PRACTICAL_LOW: f64 = 0.85;
/// Upper end of the practical share, see [`PRACTICAL_LOW`].
pub(crate) const PRACTICAL_HIGH: f64 = 0.90;

/// A PCIe generation: the signalling rate of a link.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Generation(u8);

impl Generation {
    /// The lowest and highest generation btrfs-lab knows.
    pub(crate) const FIRST: u8 = 1;
    /// See [`Generation::FIRST`].
    pub(crate) const LAST: u8 = 7;

    /// Generation `n` (1 to 7).
    pub fn new(n: u8) -> Option<Self> {
        (Self::FIRST..=Self::LAST).contains(&n).then_some(Self(n))
    }

    /// The generation number.
    pub fn number(self) -> u8 {
        self.0
    }

    /// Transfers per second per lane, in GT/s.
    pub fn gts(self) -> f64 {
        match self.0 {
            1 => 2.5,
            2 => 5.0,
            3 => 8.0,
            4 => 16.0,
            5 => 32.0,
            6 => 64.0,
            _ => 128.0,
        }
    }

    /// Bytes per second one lane carries after line encoding: 8b/10b up to
    /// Gen2, 128b/130b for Gen3-5, 256-byte FLITs with 236 payload bytes for
    /// Gen6 (and Gen7, which keeps the FLIT format).
    pub(crate) fn lane_bytes_per_sec(self) -> f64 {
        let bits = self.gts() * 1e9;
        let efficiency = match self.0 {
            1 | 2 => 8.0 / 10.0,
            3..=5 => 128.0 / 130.0,
            _ => 236.0 / 256.0,
        };
        bits * efficiency / 8.0
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gen{}", self.0)
    }
}

/// Bytes per second a link of `width` lanes at `generation` carries after
/// encoding.
pub(crate) fn link_bytes_per_sec(generation: Generation, width: u8) -> f64 {
    generation.lane_bytes_per_sec() * f64::from(width)
}

/// Parses a link speed attribute (`16.0 GT/s PCIe`, `8 GT/s`). `Unknown`,
/// an empty value or a rate that is no PCIe generation give `None`.
pub(crate) fn parse_link_speed(text: &str) -> Option<Generation> {
    let number = text.split_whitespace().next()?;
    let gts: f64 = number.parse().ok()?;
    (Generation::FIRST..=Generation::LAST)
        .filter_map(Generation::new)
        .find(|g| (g.gts() - gts).abs() < 0.01)
}

/// Parses a link width attribute (`4`; `x4` is accepted too). A width of 0
/// (no link trained) and anything above x32 give `None`.
pub(crate) fn parse_link_width(text: &str) -> Option<u8> {
    let t = text.trim();
    let t = t.strip_prefix(['x', 'X']).unwrap_or(t);
    let w: u8 = t.parse().ok()?;
    (1..=32).contains(&w).then_some(w)
}

/// A PCI function address as sysfs names its directory:
/// `DDDD:BB:DD.F` (domain, bus, device, function; VMD domains have five
/// hex digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PciAddress {
    /// PCI domain (segment).
    pub(crate) domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number (0-31).
    pub device: u8,
    /// Function number (0-7).
    pub function: u8,
}

/// Parses a PCI function address (`0000:01:00.0`), or `None` for anything
/// else (`pci0000:00`, `nvme`, ...).
pub(crate) fn parse_pci_address(text: &str) -> Option<PciAddress> {
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str, len: std::ops::RangeInclusive<usize>| {
        (len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let domain = hex(domain, 4..=8)?;
    let bus = u8::try_from(hex(bus, 2..=2)?).ok()?;
    let device = u8::try_from(hex(device, 2..=2)?).ok().filter(|d| *d < 32)?;
    let function = u8::try_from(hex(function, 1..=1)?)
        .ok()
        .filter(|f| *f < 8)?;
    Some(PciAddress {
        domain,
        bus,
        device,
        function,
    })
}

/// Parses a hexadecimal sysfs id (`0x144d`, as in `vendor` and `device`).
pub(crate) fn parse_hex_id(text: &str) -> Option<u32> {
    let t = text.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    if t.is_empty() || t.len() > 8 {
        return None;
    }
    u32::from_str_radix(t, 16).ok()
}

/// Formats bytes per second in decimal gigabytes (`7.88 GB/s`), the unit
/// drive makers and PCIe tables use.
pub fn format_gbps(bytes_per_sec: f64) -> String {
    crate::report::rate::format_gb(bytes_per_sec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn speeds_in_every_kernel_spelling() {
        for (text, generation) in [
            ("2.5 GT/s PCIe", 1),
            ("2.5 GT/s", 1),
            ("5.0 GT/s PCIe", 2),
            ("5 GT/s", 2),
            ("8.0 GT/s PCIe\n", 3),
            ("8 GT/s", 3),
            ("16.0 GT/s PCIe", 4),
            ("32.0 GT/s PCIe", 5),
            ("64.0 GT/s PCIe", 6),
            ("128.0 GT/s PCIe", 7),
        ] {
            assert_eq!(
                parse_link_speed(text).map(Generation::number),
                Some(generation),
                "{text}"
            );
        }
        for bad in [
            "Unknown",
            "Unknown speed",
            "",
            "  ",
            "12.0 GT/s",
            "nan GT/s",
        ] {
            assert_eq!(parse_link_speed(bad), None, "{bad}");
        }
    }

    #[test]
    fn widths() {
        assert_eq!(parse_link_width("4\n"), Some(4));
        assert_eq!(parse_link_width("x16"), Some(16));
        assert_eq!(parse_link_width("0"), None);
        assert_eq!(parse_link_width("255"), None);
        assert_eq!(parse_link_width("four"), None);
    }

    #[test]
    fn per_lane_rates_match_the_published_table() {
        // GB/s per lane after encoding, as the PCI-SIG tables round them.
        let table = [0.25, 0.5, 0.985, 1.969, 3.938, 7.375, 14.75];
        for (i, want) in table.iter().enumerate() {
            let g = Generation::new(u8::try_from(i + 1).unwrap()).unwrap();
            let got = g.lane_bytes_per_sec() / 1e9;
            assert!((got - want).abs() < 0.001, "{g}: {got} vs {want}");
        }
        let x4 = link_bytes_per_sec(Generation::new(4).unwrap(), 4);
        assert_eq!(format_gbps(x4), "7.88 GB/s");
        // The reference measured 3.55 GB/s on Gen4 x2 and 6.6 on Gen4 x4:
        // 0.90 and 0.84 of encoded, the band the estimate uses (to 2%).
        let x2 = link_bytes_per_sec(Generation::new(4).unwrap(), 2);
        for ratio in [3.55e9 / x2, 6.6e9 / x4] {
            assert!(
                (PRACTICAL_LOW - 0.02..=PRACTICAL_HIGH + 0.02).contains(&ratio),
                "{ratio}"
            );
        }
    }

    #[test]
    fn pci_addresses() {
        let a = parse_pci_address("0000:01:00.0").unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 1, 0, 0));
        let vmd = parse_pci_address("10000:e1:1f.7").unwrap();
        assert_eq!(
            (vmd.domain, vmd.bus, vmd.device, vmd.function),
            (0x10000, 0xe1, 0x1f, 7)
        );
        for bad in [
            "pci0000:00",
            "nvme",
            "0000:01:00",
            "0000:01:20.0",
            "0000:01:00.8",
            "000:01:00.0",
            "0000:1:00.0",
            "0000:01:00.0.1",
            "",
        ] {
            assert_eq!(parse_pci_address(bad), None, "{bad}");
        }
        assert_eq!(parse_hex_id("0x144d\n"), Some(0x144d));
        assert_eq!(parse_hex_id("0x"), None);
        assert_eq!(parse_hex_id("zz"), None);
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC*") {
            let _ = parse_link_speed(&s);
            let _ = parse_link_width(&s);
            let _ = parse_pci_address(&s);
            let _ = parse_hex_id(&s);
        }
    }
}
