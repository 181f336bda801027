//! The scrub history btrfs-progs keeps in `/var/lib/btrfs/scrub.status.<fsid>`
//! (one line per device: `<fsid>:<devid>|key:value|...`), read as text:
//! the kernel keeps no history of finished scrubs.

use serde::{Deserialize, Serialize};

/// The last scrub of one device, as btrfs-progs recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubDevice {
    /// btrfs device id.
    pub devid: u64,
    /// Start, seconds since the epoch (0: unknown).
    pub started: u64,
    /// Seconds it ran.
    pub duration: u64,
    /// It ran to the end.
    pub finished: bool,
    /// It was cancelled (or interrupted).
    pub(crate) canceled: bool,
    /// Read, checksum, verify and superblock errors found.
    pub(crate) errors_found: u64,
    /// Errors repaired from a good copy.
    pub corrected: u64,
    /// Errors that could not be repaired (no good copy).
    pub uncorrectable: u64,
    /// Recorded by `btrfs-lab scrub` (its state file), not btrfs-progs.
    #[serde(default)]
    pub by_btrfs_lab: bool,
    /// A read-only scrub (`btrfs-lab scrub --readonly`): it repaired
    /// nothing (btrfs-progs' record does not say: false).
    #[serde(default)]
    pub readonly: bool,
}

/// The devices of what `btrfs-lab scrub` saved of its last scrub.
pub(crate) fn from_saved(s: &crate::scrub::SavedScrub) -> Vec<ScrubDevice> {
    s.devices
        .iter()
        .map(|d| ScrubDevice {
            devid: d.devid,
            started: s.started_at,
            duration: s.saved_at.saturating_sub(s.started_at),
            finished: d.finished,
            canceled: !d.finished,
            errors_found: d.errors(),
            corrected: d.corrected,
            uncorrectable: d.uncorrectable,
            by_btrfs_lab: true,
            readonly: s.readonly,
        })
        .collect()
}

/// When the last scrub of a record ended (0: none).
fn end(v: &[ScrubDevice]) -> u64 {
    v.iter()
        .filter(|d| d.started > 0)
        .map(|d| d.started + d.duration)
        .max()
        .unwrap_or(0)
}

/// The newer of btrfs-progs' record and btrfs-lab's: one scrub, whole
/// (the devices of two scrubs are not mixed).
pub(crate) fn newest(progs: Vec<ScrubDevice>, lab: Vec<ScrubDevice>) -> Vec<ScrubDevice> {
    if end(&lab) > end(&progs) { lab } else { progs }
}

/// Parses a `scrub.status` file; lines of other filesystems and malformed
/// lines are skipped.
pub(crate) fn parse_status(text: &str, fsid: &str) -> Vec<ScrubDevice> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split('|');
        let Some(head) = fields.next() else { continue };
        let Some((id, devid)) = head.rsplit_once(':') else {
            continue;
        };
        if !id.eq_ignore_ascii_case(fsid) {
            continue;
        }
        let Ok(devid) = devid.trim().parse::<u64>() else {
            continue;
        };
        let mut d = ScrubDevice {
            devid,
            ..ScrubDevice::default()
        };
        for f in fields {
            let Some((k, v)) = f.split_once(':') else {
                continue;
            };
            let n: u64 = v.trim().parse().unwrap_or(0);
            match k {
                "t_start" => d.started = n,
                "duration" => d.duration = n,
                "finished" => d.finished = n != 0,
                "canceled" => d.canceled = n != 0,
                "read_errors" | "csum_errors" | "verify_errors" | "super_errors" => {
                    d.errors_found += n;
                }
                "corrected_errors" => d.corrected = n,
                "uncorrectable_errors" => d.uncorrectable = n,
                _ => {}
            }
        }
        out.push(d);
    }
    out
}

/// The last scrub of each device of `fsid` on record: the newer of
/// btrfs-progs' record and btrfs-lab scrub's own (a file that cannot be
/// parsed is no record).
pub(crate) fn last(
    root: &crate::sys::fs::root::SysRoot,
    scrub_store: &crate::scrub::StateStore,
    fsid: &str,
) -> Vec<ScrubDevice> {
    let scrub_file = root
        .prefix()
        .join(crate::scrub::progs::PROGS_DIR.trim_start_matches('/'))
        .join(crate::scrub::progs::file_name(fsid));
    let progs = root
        .read_text(&scrub_file, 1 << 20)
        .map(|t| parse_status(&t, fsid))
        .unwrap_or_default();
    let lab_file = scrub_store.file(fsid);
    let lab = root
        .read_text(&lab_file, 1 << 20)
        .ok()
        .and_then(|t| crate::scrub::SavedScrub::parse(&t, &lab_file).ok())
        .filter(|s| s.fsid == fsid)
        .map(|s| from_saved(&s))
        .unwrap_or_default();
    newest(progs, lab)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by btrfs-progs 6.2 after `btrfs scrub start -B` on a RAID0
    /// sandbox with 1 MiB of zeroed data on device 1.
    const STATUS: &str = "scrub status:1
5f0c1a8e-1111-2222-3333-444455556666:1|data_extents_scrubbed:40|tree_extents_scrubbed:12|data_bytes_scrubbed:167772160|tree_bytes_scrubbed:196608|read_errors:0|csum_errors:256|verify_errors:0|no_csum:0|csum_discards:0|super_errors:0|malloc_errors:0|uncorrectable_errors:256|corrected_errors:0|last_physical:290455552|t_start:1764543000|t_resumed:0|duration:1|canceled:0|finished:1
5f0c1a8e-1111-2222-3333-444455556666:2|data_extents_scrubbed:40|tree_extents_scrubbed:12|data_bytes_scrubbed:167772160|tree_bytes_scrubbed:196608|read_errors:0|csum_errors:0|verify_errors:0|no_csum:0|csum_discards:0|super_errors:0|malloc_errors:0|uncorrectable_errors:0|corrected_errors:0|last_physical:290455552|t_start:1764543000|t_resumed:0|duration:1|canceled:0|finished:1
other-fs:1|t_start:5|finished:1
";

    #[test]
    fn reads_each_device_of_this_filesystem() {
        let v = parse_status(STATUS, "5f0c1a8e-1111-2222-3333-444455556666");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].devid, 1);
        assert_eq!(v[0].errors_found, 256);
        assert_eq!(v[0].uncorrectable, 256);
        assert!(v[0].finished && !v[0].canceled);
        assert_eq!(v[0].started, 1_764_543_000);
        assert_eq!(v[1].errors_found, 0);
        assert!(parse_status("garbage\n|||\n", "x").is_empty());
    }

    #[test]
    fn the_newer_record_wins_whole() {
        let progs = parse_status(STATUS, "5f0c1a8e-1111-2222-3333-444455556666");
        let saved = crate::scrub::SavedScrub {
            fsid: "5f0c1a8e-1111-2222-3333-444455556666".into(),
            started_at: 1_764_600_000,
            saved_at: 1_764_600_050,
            finished: false,
            readonly: false,
            duration_seconds: 50.0,
            runs: 1,
            devices: vec![crate::scrub::DeviceScrub {
                devid: 1,
                csum_errors: 2,
                corrected: 2,
                ..Default::default()
            }],
        };
        let lab = from_saved(&saved);
        let v = newest(progs.clone(), lab.clone());
        assert_eq!(v, lab);
        assert!(v[0].by_btrfs_lab && v[0].canceled && !v[0].finished);
        assert_eq!((v[0].errors_found, v[0].duration), (2, 50));
        assert_eq!(newest(progs.clone(), Vec::new()), progs);
        let mut old = lab;
        old[0].started = 5;
        assert_eq!(newest(progs.clone(), old), progs);
    }
}
