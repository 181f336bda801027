//! `/proc/diskstats` (Documentation/admin-guide/iostats.rst): per block
//! device, the sectors read since boot.

/// The kernel counts diskstats sectors in 512-byte units whatever the
/// device's logical block size.
pub const SECTOR: u64 = 512;

/// One line of `/proc/diskstats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskStat {
    /// Major device number.
    pub major: u32,
    /// Minor device number.
    pub minor: u32,
    /// Kernel name (`nvme0n1p2`, `loop3`, `dm-0`).
    pub name: String,
    /// Sectors read (field 6), in 512-byte units.
    pub sectors_read: u64,
}

impl DiskStat {
    /// Bytes read since boot.
    pub fn bytes_read(&self) -> u64 {
        self.sectors_read.saturating_mul(SECTOR)
    }
}

/// Parses the whole file; lines that do not parse are skipped.
pub fn parse_diskstats(text: &str) -> Vec<DiskStat> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let major = f.next()?.parse().ok()?;
            let minor = f.next()?.parse().ok()?;
            let name = f.next()?.to_owned();
            let _reads = f.next()?;
            let _merged = f.next()?;
            let sectors_read = f.next()?.parse().ok()?;
            Some(DiskStat {
                major,
                minor,
                name,
                sectors_read,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Captured on the dev VM (Linux 6.18): loop devices of a 3-device btrfs
    // sandbox and the virtio disk.
    const SAMPLE: &str = "\
   7       3 loop3 1128 2 38614 124 4118 16501 3130488 6313 0 1804 6538 26 0 41943044 2 318 98
   7       4 loop4 1004 1 36936 139 2488 16226 1930332 2633 0 1084 2857 23 0 38273026 1 262 83
 254       0 vda 81234 1520 9912340 30100 5100 2200 880000 9000 0 41000 39100 0 0 0 0 0 0
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";

    #[test]
    fn parses_sectors_read() {
        let d = parse_diskstats(SAMPLE);
        assert_eq!(d.len(), 4);
        assert_eq!(
            (d[0].major, d[0].minor, d[0].name.as_str()),
            (7, 3, "loop3")
        );
        assert_eq!(d[0].sectors_read, 38614);
        assert_eq!(d[0].bytes_read(), 38614 * 512);
        assert_eq!(d[2].name, "vda");
        assert_eq!(d[3].bytes_read(), 0);
    }

    #[test]
    fn skips_short_or_garbage_lines() {
        assert!(parse_diskstats("7 3 loop3 1\nx y z 1 2 3\n\n").is_empty());
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = parse_diskstats(&s);
        }
    }
}
