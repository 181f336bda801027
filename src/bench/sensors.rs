//! What the kernel saw around each fio run: the members' sector counters
//! (/proc/diskstats, read and written), the test file's page-cache
//! residency (mincore), page cache dirtied (the per-bdi counter probe-dio
//! uses), FIEMAP; and, once for the bench, the PCIe ceiling and the NVMe
//! thermal counters. Behind a trait so the measuring loop runs on mocks.

use crate::sys::fs::beneath::HeldDir;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::report::{CeilingInfo, DirtiedSource, FileLayout, MemberDevice, ThermalInfo};
use crate::error::{Error, Result};
use crate::model::profile::Profile;
use crate::parse::diskstats::SECTOR;
use crate::parse::mountinfo::MountEntry;
use crate::parse::nvme_smart::{SmartThermal, ThermalDelta};
use crate::sys::fs::root::SysRoot;
use crate::sys::proc::counters::{self, CounterChoice, DirtyCounter};
use crate::sys::proc::tracefs::{self, FileCounts, FolioTrace, Watch};
use crate::sys::{kernel::btrfs, kernel::extents, kernel::pagecache, proc::diskstats};

/// The counters the measuring loop reads.
pub(crate) trait Sensors {
    /// Bytes (read, written) by all members so far; `None` when no
    /// device counts this filesystem.
    fn device_bytes(&mut self) -> Result<Option<(u64, u64)>>;
    /// Drops the test file from the page cache.
    fn evict(&mut self) -> Result<()>;
    /// Bytes of the test file in the page cache.
    fn resident(&mut self) -> Result<Option<u64>>;
    /// Page-cache bytes dirtied so far (a running counter).
    fn dirtied(&mut self) -> Result<Option<u64>>;
    /// What [`Sensors::dirtied`] counts (null: nothing).
    fn counter_source(&self) -> Option<DirtiedSource> {
        None
    }
    /// Starts counting the page cache the test file itself dirties (just
    /// before a write run's fio starts).
    fn watch_file(&mut self) -> Result<()> {
        Ok(())
    }
    /// Called while fio runs (about every 20 ms): reads what the trace
    /// recorded so far, so its buffer does not overrun.
    fn poll(&mut self) {}
    /// Bytes of page cache the test file itself dirtied since
    /// [`Sensors::watch_file`]; `None` when that is not known (no trace,
    /// or events were lost: the counter is the evidence then).
    fn file_dirtied(&mut self) -> Result<Option<u64>> {
        Ok(None)
    }
    /// The test file's layout.
    fn layout(&mut self) -> Result<Option<FileLayout>>;
}

/// (read, written) sectors per `major:minor` from /proc/diskstats text
/// (fields 6 and 10, see Documentation/admin-guide/iostats.rst).
pub(crate) fn parse_io_sectors(text: &str) -> Vec<(u32, u32, u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(5)?.parse().ok()?,
                f.get(9)?.parse().ok()?,
            ))
        })
        .collect()
}

/// The block devices of the filesystem under `dir`: every btrfs member
/// (from /sys/fs/btrfs/<fsid>/devices, no root needed), else the mount's
/// own device. The second list names members diskstats does not show.
pub(crate) fn member_devices(
    root: &SysRoot,
    dir: &HeldDir,
    mount: &MountEntry,
) -> Result<(Vec<MemberDevice>, Vec<String>)> {
    let stats = diskstats::read_stats(root)?;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    if mount.fs_type == "btrfs" {
        let fsid = btrfs::fsid_of(dir.fd(), dir.path())?;
        let devdir = root.sys(&format!("fs/btrfs/{fsid}/devices"));
        let mut names: Vec<String> = fs::read_dir(&devdir)
            .map_err(|e| Error::from_io(&e, "cannot read", &devdir))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let path = format!("/dev/{name}");
            match stats.iter().find(|s| s.name == name) {
                Some(s) => found.push(MemberDevice {
                    path,
                    name,
                    major: s.major,
                    minor: s.minor,
                }),
                None => missing.push(path),
            }
        }
        return Ok((found, missing));
    }
    if let Some(d) = diskstats::by_number(&stats, mount.major, mount.minor) {
        found.push(MemberDevice {
            path: format!("/dev/{}", d.name),
            name: d.name,
            major: d.major,
            minor: d.minor,
        });
    }
    Ok((found, missing))
}

/// The real counters.
pub(crate) struct RealSensors {
    root: SysRoot,
    devices: Vec<MemberDevice>,
    counter: Option<DirtyCounter>,
    /// Why the per-device dirtied counter is not used, if it is not.
    pub(crate) counter_note: Option<String>,
    file: Option<(File, PathBuf, u64)>,
    /// The per-file trace of the test file's own dirtied pages.
    trace: Option<FileTrace>,
    /// Why there is no per-file trace, or what went wrong with it.
    pub(crate) trace_notes: Vec<String>,
}

/// The trace instance counting what the test file dirties.
struct FileTrace {
    trace: FolioTrace,
    /// Its backing device as the writeback tracepoint names it, and the
    /// superblock's device.
    bdi: String,
    sb_dev: (u32, u32),
    /// The test file's inode, once it exists.
    ino: Option<u64>,
    /// Counts and lost events when the current write run started.
    start: Option<(FileCounts, u64)>,
    /// A drain failed during this run (its message).
    failed: Option<String>,
}

/// What a write run's own counts come to: the dirtied folios at the page
/// size, or the pages added to the page cache when more (a large folio is
/// many pages, and each is dirtied once it is added for a write), as
/// probe-dio counts them.
pub(crate) fn own_dirtied_bytes(before: FileCounts, after: FileCounts, page: u64) -> u64 {
    let folios = after.dirtied_folios.saturating_sub(before.dirtied_folios);
    let pages = after.cached_pages.saturating_sub(before.cached_pages);
    folios.max(pages).saturating_mul(page)
}

/// Opens the per-file trace for the filesystem (bdi `bdi`, superblock
/// device `sb_dev`), removing instances of killed runs; `Err`: why not.
fn open_file_trace(
    root: &SysRoot,
    bdi: Option<&str>,
    sb_dev: (u32, u32),
    allow_private_mount: bool,
) -> std::result::Result<(FileTrace, Vec<String>), String> {
    let bdi = bdi.ok_or("the backing device of this filesystem is unknown")?;
    if crate::hooks::Switch::ProbeNoTrace.is_on() {
        return Err("the tracepoint was turned off by a test hook".into());
    }
    let (dir, held) = tracefs::locate_held(root, allow_private_mount)?;
    let removed = tracefs::remove_stale(&dir, crate::sys::fs::scratch::pid_alive);
    let mut trace = FolioTrace::create(&dir, &crate::sys::fs::nonce::nonce())
        .map_err(|e| e.message().to_owned())?;
    trace.hold(held);
    Ok((
        FileTrace {
            trace,
            bdi: bdi.to_owned(),
            sb_dev,
            ino: None,
            start: None,
            failed: None,
        },
        removed,
    ))
}

impl RealSensors {
    /// Opens the counters for the filesystem under `dir`.
    pub fn open(
        root: &SysRoot,
        dir: &HeldDir,
        mount: &MountEntry,
        devices: &[MemberDevice],
        allow_private_debugfs: bool,
    ) -> Result<Self> {
        let bdi = if mount.fs_type == "btrfs" {
            btrfs::fsid_of(dir.fd(), dir.path())
                .ok()
                .and_then(|f| counters::btrfs_bdi_name(root, &f))
        } else {
            counters::block_bdi_name(root, mount.major, mount.minor)
        };
        let (counter, counter_note) = match counters::open_counter(
            root,
            CounterChoice::Auto,
            bdi.as_deref(),
            allow_private_debugfs,
        ) {
            Ok((c, note)) => (Some(c), note),
            Err(e) => (None, Some(e.message().to_owned())),
        };
        let mut trace_notes = Vec::new();
        let trace = match open_file_trace(
            root,
            bdi.as_deref(),
            (mount.major, mount.minor),
            allow_private_debugfs,
        ) {
            Ok((t, removed)) => {
                if !removed.is_empty() {
                    trace_notes.push(format!(
                        "removed trace instances of killed runs: {}",
                        removed.join(", ")
                    ));
                }
                Some(t)
            }
            Err(why) => {
                trace_notes.push(format!(
                    "the test file's own dirtied pages are not traced ({why}): the write runs are judged by the {} counter, which other writers and writeback timing move",
                    counter.as_ref().map_or("dirtied", |c| c.label())
                ));
                None
            }
        };
        Ok(Self {
            root: root.clone(),
            devices: devices.to_vec(),
            counter,
            counter_note,
            file: None,
            trace,
            trace_notes,
        })
    }

    /// The test file, once it exists.
    pub(crate) fn set_file(&mut self, file: File, path: &Path, size: u64) {
        if let Some(t) = self.trace.as_mut() {
            t.ino = file
                .metadata()
                .ok()
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        }
        self.file = Some((file, path.to_path_buf(), size));
    }

    /// The trace's label, when the write runs were traced.
    pub(crate) fn trace_label(&self) -> Option<String> {
        self.trace.as_ref().map(|t| t.trace.label())
    }
}

impl Sensors for RealSensors {
    fn device_bytes(&mut self) -> Result<Option<(u64, u64)>> {
        if self.devices.is_empty() {
            return Ok(None);
        }
        let p = self.root.proc("diskstats");
        let text = self
            .root
            .read_table(&p)
            .map_err(|e| Error::from_io(&e, "cannot read", &p))?;
        let io = parse_io_sectors(&text);
        let (mut r, mut w) = (0u64, 0u64);
        for d in &self.devices {
            if let Some(&(_, _, sr, sw)) = io.iter().find(|x| x.0 == d.major && x.1 == d.minor) {
                r += sr * SECTOR;
                w += sw * SECTOR;
            }
        }
        Ok(Some((r, w)))
    }

    fn evict(&mut self) -> Result<()> {
        match &self.file {
            Some((f, p, _)) => pagecache::evict(f, p),
            None => Ok(()),
        }
    }

    fn resident(&mut self) -> Result<Option<u64>> {
        match &self.file {
            Some((f, p, size)) => pagecache::resident_bytes(f, *size, p).map(Some),
            None => Ok(None),
        }
    }

    fn dirtied(&mut self) -> Result<Option<u64>> {
        match self.counter.as_mut() {
            Some(c) => c.read_bytes().map(Some),
            None => Ok(None),
        }
    }

    fn counter_source(&self) -> Option<DirtiedSource> {
        self.counter.as_ref().map(|c| c.kind().into())
    }

    fn watch_file(&mut self) -> Result<()> {
        let Some(t) = self.trace.as_mut() else {
            return Ok(());
        };
        let Some(ino) = t.ino else {
            return Ok(());
        };
        let watch = Watch {
            bdi: t.bdi.clone(),
            dev: t.sb_dev,
            inodes: vec![ino],
        };
        // fio is another process: the filter is the file, not a thread.
        t.trace.watch(&[watch], None)?;
        t.start = Some((t.trace.counts(t.sb_dev, ino), t.trace.lost_events()));
        t.failed = None;
        Ok(())
    }

    fn poll(&mut self) {
        if let Some(t) = self.trace.as_mut()
            && t.start.is_some()
            && t.failed.is_none()
            && let Err(e) = t.trace.drain()
        {
            t.failed = Some(e.message().to_owned());
        }
    }

    fn file_dirtied(&mut self) -> Result<Option<u64>> {
        let Some(t) = self.trace.as_mut() else {
            return Ok(None);
        };
        let (Some(ino), Some((before, lost_before))) = (t.ino, t.start.take()) else {
            return Ok(None);
        };
        if t.failed.is_none()
            && let Err(e) = t.trace.pause()
        {
            t.failed = Some(e.message().to_owned());
        }
        if let Some(why) = t.failed.take() {
            self.trace_notes.push(format!(
                "reading the per-file trace failed during a write run ({why}): that run is judged by the dirtied counter"
            ));
            return Ok(None);
        }
        let lost = t.trace.lost_events().saturating_sub(lost_before);
        if lost > 0 {
            self.trace_notes.push(format!(
                "the per-file trace lost {lost} events during a write run (its buffer overran): that run is judged by the dirtied counter"
            ));
            return Ok(None);
        }
        let after = t.trace.counts(t.sb_dev, ino);
        Ok(Some(own_dirtied_bytes(
            before,
            after,
            counters::page_size(),
        )))
    }

    fn layout(&mut self) -> Result<Option<FileLayout>> {
        let Some((f, _, size)) = &self.file else {
            return Ok(None);
        };
        Ok(extents::layout(f, *size).ok().map(|l| FileLayout {
            extents: l.extents,
            encoded_bytes: l.encoded_bytes,
            unwritten_bytes: l.unwritten_bytes,
            hole_bytes: l.hole_bytes,
            delalloc_bytes: l.delalloc_bytes,
        }))
    }
}

/// The array's ceiling from the members' PCIe links (btrfs only).
pub fn ceiling(
    root: &SysRoot,
    devices: &[MemberDevice],
    profile: Option<Profile>,
) -> Option<CeilingInfo> {
    let profile = profile?;
    let paths: Vec<PathBuf> = devices.iter().map(|d| PathBuf::from(&d.path)).collect();
    let c = crate::hw::array_ceiling_for_block_devices(root, &paths, profile).ok()?;
    Some(CeilingInfo {
        one_reader_bytes_per_sec: c.one_reader.map(|b| b.encoded()),
        many_readers_bytes_per_sec: c.many_readers.map(|b| b.encoded()),
        held_back_by: c.held_back_by,
        without_link_info: c.without_link_info,
        summary: c.summary,
    })
}

/// The NVMe controller of a block device name (`nvme0n1p2` → `nvme0`).
pub(crate) fn nvme_controller(block: &str) -> Option<String> {
    let rest = block.strip_prefix("nvme")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with('n') {
        return None;
    }
    Some(format!("nvme{digits}"))
}

/// Thermal readings of every NVMe member's controller.
pub(crate) fn thermal_read(
    root: &SysRoot,
    devices: &[MemberDevice],
) -> Vec<(String, std::result::Result<SmartThermal, String>)> {
    let mut ctrls: Vec<String> = devices
        .iter()
        .filter_map(|d| nvme_controller(&d.name))
        .collect();
    ctrls.sort();
    ctrls.dedup();
    ctrls
        .into_iter()
        .map(|c| {
            let r = crate::hw::read_thermal(root, &c).map_err(|e| e.message().to_owned());
            (c, r)
        })
        .collect()
}

/// Per drive: what changed between the two readings.
pub(crate) fn thermal_delta(
    before: Vec<(String, std::result::Result<SmartThermal, String>)>,
    after: Vec<(String, std::result::Result<SmartThermal, String>)>,
) -> Vec<ThermalInfo> {
    before
        .into_iter()
        .map(|(c, b)| {
            let a = after.iter().find(|(x, _)| *x == c).map(|(_, r)| r.clone());
            match (b, a) {
                (Ok(b), Some(Ok(a))) => {
                    let d = ThermalDelta::between(&b, &a);
                    ThermalInfo {
                        controller: c,
                        celsius_before: b.temperature_celsius,
                        celsius_after: a.temperature_celsius,
                        tmt1_seconds: d.tmt1.seconds,
                        tmt2_seconds: d.tmt2.seconds,
                        transitions: d.tmt1.transitions.saturating_add(d.tmt2.transitions),
                        error: None,
                    }
                }
                (Err(e), _) | (_, Some(Err(e))) => unread_thermal(c, e),
                (Ok(_), None) => unread_thermal(c, "no reading after the bench".into()),
            }
        })
        .collect()
}

/// A controller whose thermal counters could not be compared, and why.
fn unread_thermal(controller: String, error: String) -> ThermalInfo {
    ThermalInfo {
        controller,
        celsius_before: None,
        celsius_after: None,
        tmt1_seconds: 0,
        tmt2_seconds: 0,
        transitions: 0,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::nvme_smart::{SmartPageBuilder, decode_smart_log};

    #[test]
    fn io_sectors_from_captured_diskstats() {
        // Captured on the dev VM (Linux 6.18).
        let text = "   7       3 loop3 1128 2 38614 124 4118 16501 3130488 6313 0 1804 6538 26 0 41943044 2 318 98\n";
        assert_eq!(parse_io_sectors(text), vec![(7, 3, 38614, 3130488)]);
        assert!(parse_io_sectors("garbage\n7 3\n").is_empty());
    }

    #[test]
    fn own_dirtied_bytes_are_folios_or_added_pages_whichever_is_more() {
        let c = |dirtied_folios, cached_pages| FileCounts {
            dirtied_folios,
            cached_pages,
            ..FileCounts::default()
        };
        // Small folios: one event per 4 KiB page.
        assert_eq!(own_dirtied_bytes(c(10, 0), c(110, 100), 4096), 100 * 4096);
        // A large folio (order 4) dirtied once is 16 pages.
        assert_eq!(own_dirtied_bytes(c(0, 0), c(1, 16), 4096), 16 * 4096);
        // No filemap event on this kernel: the folios.
        assert_eq!(own_dirtied_bytes(c(0, 0), c(3, 0), 4096), 3 * 4096);
        assert_eq!(own_dirtied_bytes(c(5, 5), c(5, 5), 4096), 0);
    }

    #[test]
    fn controllers_of_block_devices() {
        assert_eq!(nvme_controller("nvme0n1").as_deref(), Some("nvme0"));
        assert_eq!(nvme_controller("nvme12n1p2").as_deref(), Some("nvme12"));
        assert_eq!(nvme_controller("loop3"), None);
        assert_eq!(nvme_controller("nvme-fabrics"), None);
    }

    #[test]
    fn throttling_during_the_bench_is_reported_per_drive() {
        let before = decode_smart_log(&SmartPageBuilder::default().build()).unwrap();
        let hot = SmartPageBuilder {
            tmt1_transitions: 2,
            tmt1_seconds: 40,
            ..SmartPageBuilder::default()
        };
        let after = decode_smart_log(&hot.build()).unwrap();
        let t = thermal_delta(
            vec![
                ("nvme0".into(), Ok(before.clone())),
                ("nvme1".into(), Err("no SMART".into())),
            ],
            vec![
                ("nvme0".into(), Ok(after)),
                ("nvme1".into(), Err("no SMART".into())),
            ],
        );
        assert_eq!(t[0].tmt1_seconds, 40);
        assert_eq!(t[0].transitions, 2);
        assert_eq!(t[1].error.as_deref(), Some("no SMART"));
    }
}
