//! The one place that decides a finding's severity from the numbers. Every
//! command that makes a finding whose severity depends on figures (`df`,
//! `usage`, `show`, both `--parse`, `doctor`, `links`, `bench`) calls these
//! functions; the thresholds are the named constants below, and
//! `docs/findings.md` states each rule. A code whose severity never depends
//! on figures has its severity in the catalog alone: `data-no-redundancy`
//! is info everywhere, because a RAID0 made on purpose (scratch and
//! model-loading arrays) must not page, nor keep monitoring yellow.

use super::Severity;

/// Metadata this full (used / allocated, percent) is "nearly full" for
/// `df`/`usage` (which see allocated chunks only).
pub(crate) const METADATA_FULL_PERCENT: f64 = 90.0;
/// Data or metadata used above this fraction of what it can grow to (its
/// chunks plus the unallocated space new chunks can take): warning.
pub(crate) const FULL_WARNING: f64 = 0.90;
/// Data used at or above this fraction of what it can grow to: critical.
pub(crate) const DATA_FULL_CRITICAL: f64 = 0.98;
/// Metadata (with the global reserve) used at or above this fraction of
/// what it can grow to: critical.
pub(crate) const METADATA_FULL_CRITICAL: f64 = 0.95;
/// No room for a new metadata chunk is critical when metadata (with the
/// global reserve) is this full, or a quarter of the reserve is in use.
pub(crate) const NO_ROOM_CRITICAL_FILL: f64 = 0.80;
/// No room for a new metadata chunk is a warning from this fill on; below
/// it the allocated metadata has room for a long while (a filesystem whose
/// data chunks took every byte, as one filled with large files does), and
/// the finding is info.
pub(crate) const NO_ROOM_WARNING_FILL: f64 = 0.50;
/// `scrub --all` skips a filesystem whose last complete scrub is younger
/// than this (seconds: 30 days; `--min-age`).
pub const SCRUB_MIN_AGE: u64 = 30 * 86_400;
/// A last complete scrub older than this is overdue (a warning): the
/// minimum age plus a day, the period of the scrub timer that runs
/// `scrub --all` daily.
pub(crate) const SCRUB_MAX_AGE: u64 = SCRUB_MIN_AGE + 86_400;
/// Leftovers of dead bench runs holding this many bytes or more: warning.
pub(crate) const BENCH_LEFTOVERS_WARN_BYTES: u64 = 1 << 30;

/// What is known about the room for new metadata chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetadataRoom {
    /// Unallocated space is not known (`df`, a `btrfs filesystem df` paste).
    Unknown,
    /// A new metadata chunk of the profile in use fits.
    Fits,
    /// No device set has room for a new metadata chunk.
    NoRoom,
}

/// `metadata-nearly-full` as `df`/`usage` see it: allocated metadata at
/// least [`METADATA_FULL_PERCENT`] used (or the reserve larger than what is
/// free in it). Critical only when no new chunk fits (ENOSPC is near),
/// info when one fits (full chunks are normal then), warning when the
/// unallocated space is not known.
pub(crate) fn metadata_allocated_full(room: MetadataRoom) -> Severity {
    match room {
        MetadataRoom::NoRoom => Severity::Critical,
        MetadataRoom::Unknown => Severity::Warning,
        MetadataRoom::Fits => Severity::Info,
    }
}

/// `data-nearly-full` / `metadata-nearly-full` as `doctor` sees it: the
/// fraction used of what the type can grow to. `None` at or below
/// [`FULL_WARNING`] (no finding).
pub(crate) fn capacity_full(metadata: bool, fill: f64) -> Option<Severity> {
    let critical = if metadata {
        METADATA_FULL_CRITICAL
    } else {
        DATA_FULL_CRITICAL
    };
    if fill <= FULL_WARNING {
        None
    } else if fill >= critical {
        Some(Severity::Critical)
    } else {
        Some(Severity::Warning)
    }
}

/// `metadata-chunk-no-room`: no device set has room for a full-size
/// metadata chunk. `fill` is used metadata (with the global reserve)
/// against what metadata can still grow to, the kernel's smaller chunks
/// counted (`decide_stripe_size_regular` takes what the devices have, down
/// to a 64 KiB stripe). Critical from [`NO_ROOM_CRITICAL_FILL`] or a quarter
/// of the global reserve in use, a warning from [`NO_ROOM_WARNING_FILL`],
/// else info: the allocated metadata has room for a long while (a
/// filesystem whose data chunks took every byte looks like this), and a few
/// KiB of the reserve taken during a commit do not change that.
pub(crate) fn metadata_no_room(fill: f64, reserve_used: u64, reserve_total: u64) -> Severity {
    let reserve_drawn = reserve_total > 0 && reserve_used.saturating_mul(4) >= reserve_total;
    if fill >= NO_ROOM_CRITICAL_FILL || reserve_drawn {
        Severity::Critical
    } else if fill >= NO_ROOM_WARNING_FILL {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// `global-reserve-used`, the same for `df`, `usage` and `doctor`: a few
/// KiB taken during a commit (a scrub, a balance) are normal (info); a
/// quarter of the reserve, or any of it while metadata is tight (nearly
/// full, or no room for a new chunk), is a warning; half of it is critical
/// (the next step is ENOSPC on every write).
pub fn global_reserve_used(used: u64, total: u64, metadata_tight: bool) -> Severity {
    if used.saturating_mul(2) >= total {
        Severity::Critical
    } else if used.saturating_mul(4) >= total || metadata_tight {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// `scrub-errors`: critical when an error could not be repaired (no good
/// copy), else a warning.
pub(crate) fn scrub_errors(uncorrectable: u64) -> Severity {
    if uncorrectable > 0 {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// `checksum-errors-logged`: critical when the log also says a block could
/// not be repaired (no good copy), else a warning.
pub(crate) fn checksum_errors_logged(unrepaired: bool) -> Severity {
    if unrepaired {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// `bench-leftovers`: a warning from [`BENCH_LEFTOVERS_WARN_BYTES`] on.
pub(crate) fn bench_leftovers(bytes: u64) -> Severity {
    if bytes >= BENCH_LEFTOVERS_WARN_BYTES {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// `scrub-speed-limited`: a warning when a btrfs-lab run that is gone left
/// the limit (its record in the settings ledger), else info (a limit set by
/// hand may be meant; a running scrub's is put back at its end).
pub(crate) fn scrub_speed_limited(left_by_a_dead_run: bool) -> Severity {
    if left_by_a_dead_run {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// `hugepages-left`: a warning when the bench that reserved them is gone,
/// info while it runs.
pub(crate) fn hugepages_left(left_by_a_dead_run: bool) -> Severity {
    scrub_speed_limited(left_by_a_dead_run)
}

/// `link-shared-uplink`: a warning when the drives' own links together
/// could move more than the shared link carries, else info.
pub(crate) fn shared_uplink(oversubscribed: bool) -> Severity {
    if oversubscribed {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// Members that are one drive: a warning when the profile's redundancy is
/// thereby gone (its copies or parity on the same drive), else info (a
/// stripe over one drive adds no bandwidth, but loses nothing more).
pub(crate) fn shared_disk(redundant: bool) -> Severity {
    if redundant {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// `bench-compression`: a warning (bench's flag: the figure measures the
/// compressor) when the test file has compressed extents, info (a note)
/// when only the mount option compresses and the file stayed plain.
pub(crate) fn bench_compression(compressed_extents: bool) -> Severity {
    shared_disk(compressed_extents)
}

/// `device-errors-rising`: a warning, but info when the counters rose
/// across an upgrade to Linux 7.1 or later, which counts every failed bio
/// in the device error counters (fc3d53288158): the jump alone is the new
/// counting.
pub(crate) fn errors_rising(across_the_7_1_counting: bool) -> Severity {
    if across_the_7_1_counting {
        Severity::Info
    } else {
        Severity::Warning
    }
}

/// `upgrade-cannot-mount`: critical when the kernel asked about cannot
/// mount the filesystem at all, warning when it mounts it read-only only
/// (compat_ro features it does not know).
pub(crate) fn upgrade_cannot_mount(read_only_possible: bool) -> Severity {
    if read_only_possible {
        Severity::Warning
    } else {
        Severity::Critical
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds() {
        assert_eq!(
            global_reserve_used(96 << 10, 512 << 20, false),
            Severity::Info
        );
        assert_eq!(
            global_reserve_used(96 << 10, 512 << 20, true),
            Severity::Warning
        );
        assert_eq!(
            global_reserve_used(128 << 20, 512 << 20, false),
            Severity::Warning
        );
        assert_eq!(
            global_reserve_used(256 << 20, 512 << 20, false),
            Severity::Critical
        );
        assert_eq!(capacity_full(false, 0.90), None);
        assert_eq!(capacity_full(false, 0.97), Some(Severity::Warning));
        assert_eq!(capacity_full(true, 0.97), Some(Severity::Critical));
        assert_eq!(metadata_no_room(0.06, 16 << 10, 5 << 20), Severity::Info);
        assert_eq!(metadata_no_room(0.5, 0, 5 << 20), Severity::Warning);
        assert_eq!(metadata_no_room(0.8, 0, 5 << 20), Severity::Critical);
        assert_eq!(metadata_no_room(0.1, 2 << 20, 5 << 20), Severity::Critical);
        assert_eq!(bench_leftovers(1 << 30), Severity::Warning);
    }
}
