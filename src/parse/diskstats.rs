//! `/proc/diskstats` (Documentation/admin-guide/iostats.rst): per block
//! device, the sectors read since boot.

/// The kernel counts diskstats sectors in 512-byte units whatever the
/// device's logical block size.
pub(crate) const SECTOR: u64 = 512;

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
    pub(crate) sectors_read: u64,
    /// Sectors written (field 10), in 512-byte units.
    pub(crate) sectors_written: u64,
    /// Reads completed (field 4).
    pub(crate) reads: u64,
    /// Milliseconds spent by all reads (field 7): over a window, divided
    /// by its length, the mean number of reads in flight.
    pub(crate) read_ms: u64,
    /// Milliseconds the device had I/O in flight (field 13, io_ticks).
    pub(crate) busy_ms: u64,
}

impl DiskStat {
    /// Bytes read since boot.
    pub fn bytes_read(&self) -> u64 {
        self.sectors_read.saturating_mul(SECTOR)
    }

    /// Bytes written since boot.
    pub fn bytes_written(&self) -> u64 {
        self.sectors_written.saturating_mul(SECTOR)
    }
}

/// Parses the whole file with procfs-core's line parser; lines that do not
/// parse are skipped (one odd line must not hide the other devices).
pub fn parse_diskstats(text: &str) -> Vec<DiskStat> {
    text.lines()
        .filter_map(|line| {
            let d = procfs_core::DiskStat::from_line(line).ok()?;
            Some(DiskStat {
                major: u32::try_from(d.major).ok()?,
                minor: u32::try_from(d.minor).ok()?,
                name: d.name,
                sectors_read: d.sectors_read,
                sectors_written: d.sectors_written,
                reads: d.reads,
                read_ms: d.time_reading,
                busy_ms: d.time_in_progress,
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
        assert_eq!(d[0].sectors_written, 3130488);
        assert_eq!(d[2].bytes_written(), 880000 * 512);
        assert_eq!(d[2].name, "vda");
        assert_eq!(d[3].bytes_read(), 0);
        assert_eq!((d[0].reads, d[0].read_ms, d[0].busy_ms), (1128, 124, 1804));
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
