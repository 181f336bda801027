//! btrfs-progs' record of the last scrub of each filesystem
//! (`/var/lib/btrfs/scrub.status.FSID`), written by `btrfs-lab scrub` too,
//! so that `btrfs scrub status` shows a scrub btrfs-lab ran and
//! `btrfs scrub resume` continues one it left interrupted.
//!
//! The format is btrfs-progs' (cmds/scrub.c, `scrub_write_file`): a first
//! line `scrub status:1`, then one line per device,
//! `FSID:DEVID|key:value|...`, every value a number. Nothing in it comes
//! from the user: the filesystem's UUID and the kernel's counters only.

use std::path::PathBuf;

use super::SavedScrub;
use crate::error::Result;
use crate::sys::fs::outfile::OutputDir;

/// Where btrfs-progs keeps the records.
pub const PROGS_DIR: &str = "/var/lib/btrfs";

/// The record's file name for `fsid`.
pub fn file_name(fsid: &str) -> String {
    format!("scrub.status.{fsid}")
}

/// The record of `saved` as btrfs-progs writes it. `resumed_at` is when
/// this run started when it continued an earlier one (btrfs-progs'
/// `t_resumed`). `running`: the scrub has only started (neither finished
/// nor cancelled yet, as btrfs-progs' record reads while it runs).
pub fn render(saved: &SavedScrub, resumed_at: Option<u64>, running: bool) -> String {
    let mut out = String::from("scrub status:1\n");
    let duration = saved.duration_seconds.max(0.0).round() as u64;
    for d in &saved.devices {
        let finished = !running && d.finished;
        let canceled = !running && !d.finished;
        let fields: [(&str, u64); 19] = [
            ("data_extents_scrubbed", d.data_extents),
            ("tree_extents_scrubbed", d.tree_extents),
            (
                "data_bytes_scrubbed",
                d.bytes_scrubbed.saturating_sub(d.tree_bytes),
            ),
            ("tree_bytes_scrubbed", d.tree_bytes),
            ("read_errors", d.read_errors),
            ("csum_errors", d.csum_errors),
            ("verify_errors", d.verify_errors),
            ("no_csum", d.no_csum),
            ("csum_discards", d.csum_discards),
            ("super_errors", d.super_errors),
            ("malloc_errors", d.malloc_errors),
            ("uncorrectable_errors", d.uncorrectable),
            ("corrected_errors", d.corrected),
            ("last_physical", d.last_physical),
            ("t_start", saved.started_at),
            ("t_resumed", resumed_at.unwrap_or(0)),
            ("duration", duration),
            ("canceled", u64::from(canceled)),
            ("finished", u64::from(finished)),
        ];
        out.push_str(&format!("{}:{}", saved.fsid, d.devid));
        for (k, v) in fields {
            out.push_str(&format!("|{k}:{v}"));
        }
        out.push('\n');
    }
    out
}

/// The devices of btrfs-progs' record of `fsid` (empty: none, or not
/// readable), read by the safe reader from where [`write`] writes.
pub fn read(fsid: &str) -> Vec<crate::doctor::scrub::ScrubDevice> {
    crate::sys::fs::input::read_user_text(&dir().join(file_name(fsid)), 1 << 20)
        .map(|t| crate::doctor::scrub::parse_status(&t, fsid))
        .unwrap_or_default()
}

/// Where the records are: [`PROGS_DIR`] (a test may name another
/// directory through its hook).
fn dir() -> PathBuf {
    crate::hooks::Switch::ScrubProgsDir
        .value()
        .map_or_else(|| PathBuf::from(PROGS_DIR), PathBuf::from)
}

/// Replaces btrfs-progs' record of `saved.fsid` atomically (mode 0600, as
/// btrfs-progs), making its directory when it is missing. Returns the file
/// written.
pub fn write(saved: &SavedScrub, resumed_at: Option<u64>, running: bool) -> Result<PathBuf> {
    write_in(&dir(), saved, resumed_at, running)
}

/// [`write`] in the directory `dir`.
fn write_in(
    dir: &std::path::Path,
    saved: &SavedScrub,
    resumed_at: Option<u64>,
    running: bool,
) -> Result<PathBuf> {
    let dir = OutputDir::create(dir, 0o755)?;
    dir.write(
        file_name(&saved.fsid),
        render(saved, resumed_at, running).as_bytes(),
        0o600,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrub::DeviceScrub;

    fn saved(finished: bool) -> SavedScrub {
        SavedScrub {
            fsid: "5f0c1a8e-1111-2222-3333-444455556666".into(),
            started_at: 1_764_543_000,
            saved_at: 1_764_543_090,
            finished,
            readonly: false,
            duration_seconds: 89.6,
            runs: 2,
            devices: vec![DeviceScrub {
                devid: 1,
                bytes_scrubbed: 1000,
                tree_bytes: 200,
                data_extents: 4,
                tree_extents: 3,
                csum_errors: 2,
                corrected: 2,
                no_csum: 7,
                last_physical: 4096,
                finished,
                ..DeviceScrub::default()
            }],
        }
    }

    #[test]
    fn a_record_is_btrfs_progs_format_with_every_field_in_its_order() {
        let text = render(&saved(true), Some(1_764_543_050), false);
        assert_eq!(
            text,
            "scrub status:1\n\
             5f0c1a8e-1111-2222-3333-444455556666:1|data_extents_scrubbed:4\
             |tree_extents_scrubbed:3|data_bytes_scrubbed:800|tree_bytes_scrubbed:200\
             |read_errors:0|csum_errors:2|verify_errors:0|no_csum:7|csum_discards:0\
             |super_errors:0|malloc_errors:0|uncorrectable_errors:0|corrected_errors:2\
             |last_physical:4096|t_start:1764543000|t_resumed:1764543050|duration:90\
             |canceled:0|finished:1\n"
        );
    }

    #[test]
    fn doctor_reads_back_what_scrub_writes() {
        let fsid = "5f0c1a8e-1111-2222-3333-444455556666";
        let done = crate::doctor::scrub::parse_status(&render(&saved(true), None, false), fsid);
        assert_eq!(done.len(), 1);
        assert!(done[0].finished && !done[0].canceled);
        assert_eq!((done[0].errors_found, done[0].corrected), (2, 2));
        assert_eq!((done[0].started, done[0].duration), (1_764_543_000, 90));
        let cut = crate::doctor::scrub::parse_status(&render(&saved(false), None, false), fsid);
        assert!(
            !cut[0].finished && cut[0].canceled,
            "an interrupted scrub is resumable"
        );
        let running = crate::doctor::scrub::parse_status(&render(&saved(false), None, true), fsid);
        assert!(!running[0].finished && !running[0].canceled);
    }

    #[test]
    fn writes_the_file_btrfs_progs_reads_and_replaces_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("lib/btrfs");
        let path = write_in(&dir, &saved(false), None, true).unwrap();
        assert_eq!(
            path,
            dir.join("scrub.status.5f0c1a8e-1111-2222-3333-444455556666")
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("|finished:0\n")
        );
        write_in(&dir, &saved(true), None, false).unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("|finished:1\n")
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
