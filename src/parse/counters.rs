//! Dirtied-page counters: `/proc/vmstat` and debugfs `bdi/<name>/stats`.

/// `nr_dirtied` from `/proc/vmstat`: pages dirtied since boot, machine-wide.
pub(crate) fn vmstat_nr_dirtied(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == "nr_dirtied").then(|| value.trim().parse().ok())?
    })
}

/// `BdiDirtied` from debugfs `bdi/<name>/stats`, in bytes (the kernel prints
/// kB): data dirtied on this backing device since it was registered.
pub(crate) fn bdi_dirtied_bytes(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("BdiDirtied:")?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        kb.checked_mul(1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from Linux 6.18 (debugfs bdi/btrfs-1/stats) on the dev VM.
    const BDI: &str = "\
BdiWriteback:                0 kB
BdiReclaimable:              0 kB
BdiDirtyThresh:         572124 kB
DirtyThresh:           4854512 kB
BackgroundThresh:      2424292 kB
BdiDirtied:             131456 kB
BdiWritten:             131264 kB
BdiWriteBandwidth:           0 kBps
b_dirty:                     0
";

    #[test]
    fn reads_bdi_dirtied() {
        assert_eq!(bdi_dirtied_bytes(BDI), Some(131_456 * 1024));
        assert_eq!(bdi_dirtied_bytes("BdiDirtied: x kB"), None);
        assert_eq!(bdi_dirtied_bytes(""), None);
    }

    #[test]
    fn reads_vmstat() {
        let text = "nr_free_pages 5\nnr_dirtied 32906\nnr_written 32000\n";
        assert_eq!(vmstat_nr_dirtied(text), Some(32906));
        assert_eq!(vmstat_nr_dirtied("nr_dirtied_x 1\n"), None);
    }
}
