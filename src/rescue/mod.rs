//! `rescue MOUNT`: on a degraded, read-only btrfs whose data is RAID0 or
//! single and a device of which is missing, which files are intact (no byte
//! on a missing device), which are damaged (which ranges), and, with
//! `--copy-to DIR`, a verified copy of the intact ones (and with
//! `--partial` the readable parts of the damaged ones), resumable.
//!
//! inspect (root, read-only btrfs, devices, chunk tree, target) → walk
//! (classify each file: [`classify`]) → copy ([`copy`]) → report
//! ([`report`]); the manifest ([`manifest`]) makes a copy resumable.

pub mod classify;
mod copy;
pub use copy::{ContentHash, content_hash};
pub mod manifest;
pub mod operation;
pub mod report;
mod verify;
mod walk;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::model::stripes::ChunkMap;
use crate::sys::fs::beneath::{HeldDir, Leaf, TrustedDir};
use crate::sys::fs::rescue::{self as fsr, Kind, Stat};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs;
use crate::sys::kernel::extents;
use crate::sys::kernel::signals;
use crate::ui::{Progress, Ui};

use classify::Classifier;
use copy::Sink;
use fsr::NewFile;
use manifest::{Header, MANIFEST, Manifest};
use report::{
    Bytes, CopySummary, FileRecord, FileState, RescueDevice, RescueReport, Saved, StateCounts,
    Walked,
};
use walk::Event;

/// What to rescue.
#[derive(Debug, Clone)]
pub struct RescueRequest {
    /// A directory of the read-only btrfs (its mount point, usually).
    pub mount: PathBuf,
    /// `--copy-to DIR`.
    pub copy_to: Option<PathBuf>,
    /// `--partial`: damaged files' readable parts as `NAME.partial`.
    pub partial: bool,
    /// How many files that are not intact the report lists.
    pub listed_limit: usize,
    /// btrfs-lab's state directory: the manifest of a copy lives in its
    /// `rescue/` (root's alone), never among the copied files.
    pub state_dir: PathBuf,
    /// `--allow-untrusted-target`: copy into a directory another user owns
    /// or can write (refused otherwise).
    pub allow_untrusted_target: bool,
}

/// How to get a read-only mount where there is none (MOUNT is not on a
/// btrfs: the filesystem is not mounted there yet).
fn mount_ro_hint(mount: &Path) -> String {
    format!(
        "mount it read-only first: mount -o degraded,ro DEVICE {} (never put degraded in /etc/fstab)",
        mount.display()
    )
}

/// How to make a read-write mount read-only: `mount -o remount,ro` on its
/// mount point (the device form fails on a mounted filesystem). The mount
/// point as the user wrote it when MOUNT is it, else the one mountinfo
/// gives.
fn remount_ro_hint(mount: &Path) -> String {
    let point = std::path::absolute(mount)
        .ok()
        .and_then(|abs| {
            let m = crate::sys::proc::mountinfo::containing(&SysRoot::host(), &abs).ok()?;
            (m.mount_point != abs).then_some(m.mount_point)
        })
        .unwrap_or_else(|| mount.to_path_buf());
    format!(
        "remount it read-only first: mount -o remount,ro {} (rescue never writes to it)",
        point.display()
    )
}

/// The mount, held and checked (root, a directory on btrfs, mounted
/// read-only), with its status and fsid.
fn open_mount(req: &RescueRequest) -> Result<(HeldDir, Stat, String)> {
    if !crate::sys::is_root() {
        return Err(Error::new(
            ErrorKind::Permission,
            "rescue needs root: it reads the chunk tree (TREE_SEARCH) to map every file to its devices",
        )
        .with_hint(format!(
            "run it as root: sudo btrfs-lab rescue {}",
            req.mount.display()
        )));
    }
    let src = HeldDir::open(&req.mount)?;
    let st = src.fstat()?;
    if fsr::kind(&st) != Kind::Directory {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a directory", req.mount.display()),
        ));
    }
    let fsid = btrfs::fsid_of(src.fd(), &req.mount).map_err(|e| {
        if e.kind() == ErrorKind::WrongTarget {
            Error::new(
                ErrorKind::WrongTarget,
                format!("{} is not on a btrfs filesystem", req.mount.display()),
            )
            .with_hint(mount_ro_hint(&req.mount))
        } else {
            e
        }
    })?;
    if !fsr::mounted_read_only(src.fd(), &req.mount)? {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "{} is mounted read-write; rescue reads only a read-only mount",
                req.mount.display()
            ),
        )
        .with_hint(remount_ro_hint(&req.mount)));
    }
    Ok((src, st, fsid))
}

/// The profiles of the data (or metadata) chunks.
fn chunk_profiles(records: &[btrfs::ChunkRecord], data: bool) -> Vec<Profile> {
    let mut v: Vec<Profile> = records
        .iter()
        .filter(|c| {
            if data {
                c.is_data()
            } else {
                c.flags
                    .contains(btrfs_uapi::space::BlockGroupFlags::METADATA)
            }
        })
        .map(|c| btrfs::profile_of(c.flags))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// `--copy-to`: the target, opened and checked, with btrfs' checksums for
/// rescue's own check when they can be read (else why not, in `notes`).
fn open_copy(
    req: &RescueRequest,
    src: &HeldDir,
    st: &Stat,
    fsid: &str,
    notes: &mut Vec<String>,
) -> Result<Option<CopyState>> {
    let Some(dir) = &req.copy_to else {
        return Ok(None);
    };
    let mut c = open_target(dir, st, fsid, req)?;
    match verify::Csums::open(&src.fd(), &req.mount, fsid) {
        Ok(sums) if sums.sector() == copy::SECTOR => c.csums = Some(sums),
        Ok(sums) => notes.push(format!(
            "the bytes copied are checked by the kernel only: rescue checks {}-byte sectors, this filesystem's are {}",
            copy::SECTOR,
            sums.sector()
        )),
        Err(why) => notes.push(format!(
            "the bytes copied are checked by the kernel only, not again by rescue: {why}"
        )),
    }
    Ok(Some(c))
}

/// The bytes of every file (one walk over the metadata): the total for the
/// copy's rate and ETA.
fn total_bytes(src: &HeldDir, fsid: &str) -> Result<u64> {
    let mut total = 0u64;
    walk::walk(src, fsid, &mut |e| {
        if let Event::File { st, .. } = e {
            total += st.st_size as u64;
        }
        signals::check()
    })?;
    Ok(total)
}

/// Runs the rescue; `each` sees every file's record in walk order (for
/// `--list`).
pub fn run(
    req: &RescueRequest,
    ui: &dyn Ui,
    each: &mut dyn FnMut(&FileRecord),
) -> Result<RescueReport> {
    signals::install()?;
    let (mut opened, report) = open(req)?;
    walk_and_copy(&mut opened, report, req, ui, each)
}

/// A block group whose extents the remap tree maps elsewhere, and the
/// block group that holds the remap tree (Linux 7.0, 8912c2fd5830; the
/// values of btrfs-progs' `kernel-shared/uapi/btrfs_tree.h` at 10717dd7,
/// where `remap-tree` is the experimental feature `remap_tree` in sysfs).
const REMAPPED: u64 = 1 << 11;
const METADATA_REMAP: u64 = 1 << 12;

/// Why the remap tree (Linux 7.0, experimental) is in use, when it is:
/// the `remap_tree` feature (sysfs), or a chunk without stripes (a
/// remapped block group keeps its item, its stripes move to the remap
/// tree: the kernel's tree-checker allows `num_stripes` 0 only then).
pub(crate) fn remap_in_use(features: &[String], records: &[btrfs::ChunkRecord]) -> Option<String> {
    if features.iter().any(|f| f == "remap_tree") {
        return Some("has the remap tree feature (remap_tree, Linux 7.0)".to_owned());
    }
    let remapped = records
        .iter()
        .filter(|r| r.num_stripes == 0 || r.flags.bits() & (REMAPPED | METADATA_REMAP) != 0)
        .count();
    (remapped > 0).then(|| format!("has {remapped} remapped block group(s) (chunks without stripes: the remap tree, Linux 7.0)"))
}

/// The mount of a rescue, held and mapped, with the target of its copy.
pub(crate) struct Opened {
    src: HeldDir,
    fsid: String,
    map: ChunkMap,
    missing: BTreeSet<u64>,
    copy: Option<CopyState>,
}

/// Opens and checks the mount (root, a read-only btrfs), maps its chunks
/// and devices and, with `--copy-to`, opens the target: the report as it
/// stands before any file is walked.
pub(crate) fn open(req: &RescueRequest) -> Result<(Opened, RescueReport)> {
    let (src, st, fsid) = open_mount(req)?;
    let records = btrfs::chunk_records_of(src.fd(), &req.mount)?.ok_or_else(|| {
        Error::new(
            ErrorKind::Permission,
            format!("cannot read the chunk tree of {}", req.mount.display()),
        )
    })?;
    let features = crate::sys::fs::target::features(&SysRoot::host(), &fsid);
    if let Some(why) = remap_in_use(&features, &records) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("{} {why}: rescue maps file extents through the chunk tree only and would read the wrong place for remapped block groups", req.mount.display()),
        )
        .with_hint("nothing was read or copied; copy what reads back from the read-only mount with cp or rsync (the kernel maps remapped block groups itself)"));
    }
    let map = btrfs::data_chunk_map(&records);
    let devices = find_devices(&src, &fsid, &map)?;
    let missing: BTreeSet<u64> = devices
        .iter()
        .filter(|d| d.missing)
        .map(|d| d.devid)
        .collect();
    let mut notes = Vec::new();
    if missing.is_empty() {
        notes.push(
            "no device is missing: every file should be intact (each is still mapped, and read with --copy-to)"
                .to_owned(),
        );
    }
    notes.extend(scope_notes(&req.mount, &st));
    let copy = open_copy(req, &src, &st, &fsid, &mut notes)?;
    let report = RescueReport {
        mount: req.mount.display().to_string(),
        fsid: fsid.clone(),
        data_profiles: chunk_profiles(&records, true),
        metadata_profiles: chunk_profiles(&records, false),
        devices,
        missing_devids: missing.iter().copied().collect(),
        walked: Walked::default(),
        files: StateCounts::default(),
        bytes: Bytes::default(),
        listed: Vec::new(),
        not_listed: 0,
        notes,
        copy: None,
    };
    let opened = Opened {
        src,
        fsid,
        map,
        missing,
        copy,
    };
    Ok((opened, report))
}

/// Walks every file below the mount, judging each (and copying it with
/// `--copy-to`) with progress; a copy that stops early closes its manifest
/// and says what was saved and how to resume.
pub(crate) fn walk_files(
    opened: &mut Opened,
    mut report: RescueReport,
    req: &RescueRequest,
    ui: &dyn Ui,
    each: &mut dyn FnMut(&FileRecord),
) -> Result<RescueReport> {
    ui.started();
    let copying = opened.copy.is_some();
    let bar: Box<dyn Progress + '_> = if copying {
        Box::new(crate::ui::TrackedBar::new(ui, "rescue", "rescuing"))
    } else {
        ui.progress("rescue {pos} files {msg}")
    };
    if copying {
        bar.set_length(total_bytes(&opened.src, &opened.fsid)?);
    }
    let mut job = Job {
        classifier: Classifier::new(&opened.map, &opened.missing),
        ui,
        each,
        report: &mut report,
        limit: req.listed_limit,
        copy: opened.copy.take(),
        bar: &*bar,
        done: 0,
        as_root: true,
        exts: Vec::new(),
    };
    let mut result = walk::walk(&opened.src, &opened.fsid, &mut |e| job.event(e));
    bar.finish();
    let mut copy = job.copy.take();
    if let Some(c) = &mut copy {
        // The batch in progress: synced and claimed (after the last file, or
        // when the copy stopped: Ctrl-C, a full target); abandoned when that
        // fails (its files are not claimed, a re-run copies them again).
        let ended = c.end_batch(&mut report.bytes.saved);
        if result.is_ok() {
            result = ended;
        }
    }
    match (result, copy) {
        (Ok(()), copy) => {
            opened.copy = copy;
            Ok(report)
        }
        (Err(e), Some(c)) => {
            let summary = c.summary(false);
            let dir = c.dir_shown.clone();
            c.manifest.finish(false)?;
            Err(stopped(e, &summary, &report, &dir, req))
        }
        (Err(e), None) => Err(e),
    }
}

/// [`walk_files`], then a copy that visited every file: its summary in the
/// report, its manifest closed as complete.
pub(crate) fn walk_and_copy(
    opened: &mut Opened,
    report: RescueReport,
    req: &RescueRequest,
    ui: &dyn Ui,
    each: &mut dyn FnMut(&FileRecord),
) -> Result<RescueReport> {
    let mut report = walk_files(opened, report, req, ui, each)?;
    if let Some(c) = opened.copy.take() {
        report.copy = Some(c.summary(true));
        c.manifest.finish(true)?;
    }
    Ok(report)
}

/// The state of a file once read back: the map's judgement corrected by
/// what reading found (EIO, checksum mismatches), with the reason added to
/// `judged`.
fn read_back_state(
    map_state: FileState,
    read: &copy::ReadOutcome,
    judged: &mut Vec<String>,
) -> FileState {
    match (map_state, !read.bad.is_empty()) {
        (FileState::Intact, true) => {
            if read.bad.bytes() > read.mismatched {
                judged.push(
                    "read back: EIO on a range the map puts on a present device (is another device failing?)"
                        .to_owned(),
                );
            }
            if read.mismatched > 0 {
                judged.push(mismatch_note(read.mismatched));
            }
            FileState::Failed
        }
        (FileState::Unknown, true) => {
            judged.push(if read.mismatched > 0 {
                mismatch_note(read.mismatched)
            } else {
                "read back: EIO (checksum or device error)".to_owned()
            });
            FileState::Damaged
        }
        (FileState::Unknown, false) | (FileState::Intact, false) => {
            judged.push(if read.unchecked == 0 {
                "read back: every byte matches btrfs' checksums (checked by the kernel, and again by rescue against the checksum tree)".to_owned()
            } else if read.verified == 0 {
                "read back: no read error; its bytes (compressed, inline, or without checksums) are checked by the kernel only".to_owned()
            } else {
                format!(
                    "read back: no read error; {} bytes checked again by rescue against the checksum tree, {} (compressed, inline, or without checksums) by the kernel only",
                    read.verified, read.unchecked
                )
            });
            FileState::Intact
        }
        (s, _) => s,
    }
}

/// The judgement of bytes the kernel returned that btrfs' checksums reject.
fn mismatch_note(bytes: u64) -> String {
    format!(
        "read back: {bytes} bytes the kernel returned without an error do not match btrfs' checksums (rescue checks every sector against the checksum tree): not copied as good"
    )
}

/// The error of a copy that stopped early: what was saved, how to resume.
fn stopped(e: Error, c: &CopySummary, r: &RescueReport, dir: &Path, req: &RescueRequest) -> Error {
    let saved = format!(
        "{} saved so far ({} bytes), listed in {}",
        crate::report::text::count(c.copied + c.resumed, "file", "files"),
        r.bytes.saved,
        c.manifest
    );
    let resume = format!(
        "run the same command again to resume: btrfs-lab rescue {} --copy-to {}{}",
        req.mount.display(),
        dir.display(),
        if req.partial { " --partial" } else { "" }
    );
    match e.kind() {
        ErrorKind::NoSpace => Error::new(
            ErrorKind::NoSpace,
            format!("{} is full: the copy stopped; {saved}", dir.display()),
        )
        .with_hint(format!(
            "free space there (or copy it elsewhere), then {resume}"
        )),
        ErrorKind::Interrupted => Error::new(
            ErrorKind::Interrupted,
            format!("interrupted: the copy stopped after the current file; {saved}"),
        )
        .with_hint(resume),
        _ => Error::new(e.kind(), format!("{}; {saved}", e.message())).with_hint(resume),
    }
}

/// Every device (DEV_INFO), and which are missing: no path in DEV_INFO,
/// sysfs `devinfo/N/missing`, or named by the chunk tree and unknown to
/// DEV_INFO.
fn find_devices(src: &HeldDir, fsid: &str, map: &ChunkMap) -> Result<Vec<RescueDevice>> {
    let sys = SysRoot::host();
    let mut out: Vec<RescueDevice> = src
        .btrfs_devices()?
        .into_iter()
        .map(|d| {
            let flag = sys
                .read_attr(&sys.sys(&format!("fs/btrfs/{fsid}/devinfo/{}/missing", d.devid)))
                .is_ok_and(|v| v.trim() == "1");
            let why = if d.path.is_empty() {
                Some("DEV_INFO has no path for it".to_owned())
            } else if flag {
                Some(format!(
                    "sysfs fs/btrfs/{fsid}/devinfo/{}/missing is 1",
                    d.devid
                ))
            } else {
                None
            };
            RescueDevice {
                devid: d.devid,
                path: d.path,
                missing: why.is_some(),
                why_missing: why,
            }
        })
        .collect();
    for devid in map.devids() {
        if !out.iter().any(|d| d.devid == devid) {
            out.push(RescueDevice {
                devid,
                path: String::new(),
                missing: true,
                why_missing: Some(
                    "the chunk tree has stripes on it and DEV_INFO does not know it".to_owned(),
                ),
            });
        }
    }
    out.sort_by_key(|d| d.devid);
    Ok(out)
}

/// What is out of the walk's reach: subvolumes not below MOUNT.
fn scope_notes(mount: &Path, st: &Stat) -> Vec<String> {
    let mut notes = Vec::new();
    let sys = SysRoot::host();
    if let Ok(m) = crate::sys::proc::mountinfo::containing(&sys, mount) {
        let subvolid = m
            .options()
            .find_map(|o| o.strip_prefix("subvolid="))
            .and_then(|v| v.parse::<u64>().ok());
        let at_root = std::path::absolute(mount).is_ok_and(|p| p == m.mount_point);
        if subvolid.is_some_and(|id| id != 5) || !at_root || st.st_ino != 256 {
            notes.push(format!(
                "only what is below {} is walked (mount root {}{}); subvolumes not reachable there are out of scope: mount the top level (-o subvolid=5) to rescue them",
                mount.display(),
                m.root.display(),
                subvolid.map_or(String::new(), |id| format!(", subvolid={id}"))
            ));
        }
    }
    notes
}

/// Whether the copy `name` in `dst` an earlier run saved is still what it
/// saved: a regular file (never through a link) of its size whose content
/// hash is the manifest's (read again, holes skipped).
fn same_copy(dst: &HeldDir, name: &OsStr, s: &Saved, bufs: &mut copy::Buffers) -> Result<bool> {
    let Ok(f) = fsr::open_entry_read(dst, name) else {
        return Ok(false);
    };
    let Ok(t) = fsr::stat_file(&f, &dst.join(name)) else {
        return Ok(false);
    };
    if fsr::kind(&t) != Kind::Regular || t.st_size as u64 != s.bytes {
        return Ok(false);
    }
    match copy::hash_file(&f, s.bytes, &dst.join(name), bufs) {
        Ok(h) => Ok(h == s.blake3),
        Err(e) if e.kind() == ErrorKind::Interrupted => Err(e),
        Err(_) => Ok(false),
    }
}

/// `--copy-to`: the target directory, held, checked, with its manifest.
pub(crate) struct CopyState {
    dir_shown: PathBuf,
    /// The manifest's path (in the state directory).
    manifest_path: PathBuf,
    dirs: Vec<HeldDir>,
    /// The target's filesystem (`st_dev`): the one a batch's syncfs syncs.
    target_dev: u64,
    /// For each of `dirs`: whether this run created it (then empty but for
    /// what this run put there).
    fresh: Vec<bool>,
    manifest: Manifest,
    /// The files written (or resumed) since the last sync, not yet claimed.
    batch: Batch,
    partial: bool,
    /// The files claimed (synced batches only).
    copied: u64,
    partial_copies: u64,
    resumed: u64,
    symlinks: u64,
    /// btrfs' data checksums, for rescue's own check of every sector read
    /// (`None`: the kernel's check only, said in the notes).
    csums: Option<verify::Csums>,
    /// Files that did not fit (ENOSPC), in walk order.
    not_fitted: Vec<String>,
    /// The read buffers, for every file of the run.
    bufs: copy::Buffers,
}

/// A batch ends at whichever comes first: this many files written, this
/// many bytes written, this long since its first file (docs/decisions.md:
/// how they were chosen).
const BATCH_FILES: u64 = 1024;
const BATCH_BYTES: u64 = 256 << 20;
const BATCH_TIME: Duration = Duration::from_secs(2);
/// Lines staged (of files not written: resumed, damaged) that end a batch.
const BATCH_LINES: u64 = 8 * BATCH_FILES;

/// The files of the batch in progress: written and linked, not yet synced,
/// their manifest lines staged (not claimed yet).
#[derive(Debug, Default)]
struct Batch {
    started: Option<Instant>,
    copied: u64,
    partial_copies: u64,
    resumed: u64,
    written_bytes: u64,
    /// The bytes of its files counted in the report's `bytes.saved`.
    saved_bytes: u64,
}

impl CopyState {
    /// Whether the batch in progress is due to end (it starts with the
    /// first line staged after the last end).
    fn batch_full(&mut self) -> bool {
        let b = &mut self.batch;
        let started = *b.started.get_or_insert_with(Instant::now);
        b.copied >= BATCH_FILES
            || b.written_bytes >= BATCH_BYTES
            || self.manifest.staged() >= BATCH_LINES
            || started.elapsed() >= BATCH_TIME
    }

    /// Ends the batch: one `syncfs` of the target (when a file was written),
    /// then its manifest lines appended and synced; from then on its files
    /// are claimed (counted as saved). When either fails, the batch is
    /// abandoned: its lines dropped, its files not counted (`saved`, the
    /// report's saved bytes, loses theirs), and the error returned.
    fn end_batch(&mut self, saved: &mut u64) -> Result<()> {
        let b = std::mem::take(&mut self.batch);
        let synced = if b.copied > 0 {
            fsr::sync_filesystem(&self.dirs[0])
        } else {
            Ok(())
        };
        match synced.and_then(|()| self.manifest.commit_batch()) {
            Ok(()) => {
                self.copied += b.copied;
                self.partial_copies += b.partial_copies;
                self.resumed += b.resumed;
                Ok(())
            }
            Err(e) => {
                self.manifest.abandon_batch();
                *saved -= b.saved_bytes.min(*saved);
                Err(e)
            }
        }
    }

    /// A file the target had no room for: not saved (its temporary file is
    /// gone), named at the end; the copy goes on with the next file.
    fn did_not_fit(
        &mut self,
        mut r: FileRecord,
        e: &Error,
        damaged: &classify::Ranges,
    ) -> FileRecord {
        self.not_fitted.push(r.path.clone());
        r.error = Some(format!("did not fit: {}", e.message()));
        if r.damaged_bytes == 0 {
            r.damaged_bytes = damaged.bytes();
            r.damaged_ranges = damaged.0.clone();
        }
        r
    }

    /// A copy committed under `saved_name`: the other name of an earlier
    /// run removed (an intact copy replaces a partial one, and the other way
    /// round), counted, and named in the file's record.
    fn record_saved(
        &mut self,
        mut r: FileRecord,
        rel: &Path,
        name: &OsStr,
        saved_name: &OsStr,
        size: u64,
        read: &copy::ReadOutcome,
    ) -> FileRecord {
        let dst = self.dirs.last().expect("the target");
        let mut other = name.to_os_string();
        if r.state == FileState::Intact {
            other.push(".partial");
        }
        // Nothing to remove in a directory this run created (no lookup).
        if other != saved_name && !self.fresh.last().copied().unwrap_or(false) {
            let _ = fsr::remove_regular(dst, &other);
        }
        self.batch.copied += 1;
        self.batch.written_bytes += read.read_bytes;
        if r.state != FileState::Intact {
            self.batch.partial_copies += 1;
        }
        let rel_saved = rel.with_file_name(saved_name);
        r.saved = Some(Saved {
            path: rel_saved.to_string_lossy().into_owned(),
            bytes: size,
            bytes_rescued: read.read_bytes,
            blake3: read.hash.clone(),
        });
        r
    }

    fn summary(&self, complete: bool) -> CopySummary {
        CopySummary {
            dir: self.dir_shown.display().to_string(),
            manifest: self.manifest_path.display().to_string(),
            partial: self.partial,
            copied: self.copied,
            partial_copies: self.partial_copies,
            resumed: self.resumed,
            symlinks: self.symlinks,
            complete,
            not_fitted: self.not_fitted.clone(),
        }
    }
}

/// Where the manifest of a copy into `target` lives: root's own directory
/// `STATE/rescue/KEY`, KEY from the target's absolute path (a resume names
/// the same target).
fn manifest_dir(state_dir: &Path, target: &Path) -> Result<HeldDir> {
    let abs = std::path::absolute(target)
        .map_err(|e| Error::usage(format!("invalid directory {}: {e}", target.display())))?;
    let key = blake3::hash(abs.as_os_str().as_bytes()).to_hex();
    let path = state_dir.join("rescue").join(&key.as_str()[..32]);
    let (held, _) = TrustedDir::create(&path, Leaf::Private, 0o700)?;
    HeldDir::open(held.path())
}

/// The refusal of a target another user owns or can write.
fn untrusted(dir: &Path, why: &Error) -> Error {
    Error::new(
        ErrorKind::Permission,
        format!(
            "refusing to copy into {}: {} (its owner, or whoever can write there, could read what rescue copies, or swap directories and files under it)",
            dir.display(),
            why.message()
        ),
    )
    .with_hint(
        "copy into a directory only root can change (install -d -o root -m 0700 DIR), or pass --allow-untrusted-target if you trust that user",
    )
}

/// Whether `dir` (or, when it does not exist yet, the nearest directory
/// above it that does) is on the filesystem being rescued.
fn on_source(dir: &Path, src_st: &Stat, fsid: &str) -> bool {
    let Ok(abs) = std::path::absolute(dir) else {
        return false;
    };
    abs.ancestors()
        .find_map(|a| HeldDir::open(a).ok())
        .is_some_and(|d| {
            d.fstat().is_ok_and(|st| st.st_dev == src_st.st_dev)
                || d.btrfs_fsid().is_ok_and(|f| f == fsid)
        })
}

/// The refusal of a target on the filesystem being rescued.
fn target_on_source(dir: &Path, fsid: &str) -> Error {
    Error::new(
        ErrorKind::WrongTarget,
        format!(
            "{} is on the filesystem being rescued ({fsid}); copy to another disk",
            dir.display()
        ),
    )
    .with_hint("choose a directory on another filesystem (a USB disk, a network share)")
}

/// A target that cannot be written because its filesystem is read-only:
/// never "remount it read-write" (that may be the degraded source).
fn read_only_target(e: Error, dir: &Path, src_st: &Stat, fsid: &str) -> Error {
    if e.kind() != ErrorKind::ReadOnly {
        return e;
    }
    if on_source(dir, src_st, fsid) {
        return target_on_source(dir, fsid);
    }
    Error::new(ErrorKind::ReadOnly, e.message().to_owned())
        .with_hint("choose a directory on a writable filesystem (a USB disk, a network share)")
}

/// A manifest that cannot be written because the state directory's
/// filesystem is read-only (it may be the degraded source, when that is
/// the root filesystem): another state directory, never a remount.
fn read_only_state(e: Error) -> Error {
    if e.kind() != ErrorKind::ReadOnly {
        return e;
    }
    Error::new(ErrorKind::ReadOnly, e.message().to_owned()).with_hint(
        "the manifest goes into btrfs-lab's state directory: give one on a writable filesystem (--state-dir DIR)",
    )
}

/// Opens (or creates) the target: root's alone, checked on every component
/// of its path (a directory another user owns or can write, sticky ones
/// included, is refused unless `--allow-untrusted-target`); held from then
/// on, and nothing in it followed through a link.
fn open_target(dir: &Path, src_st: &Stat, fsid: &str, req: &RescueRequest) -> Result<CopyState> {
    let ro = |e: Error| read_only_target(e, dir, src_st, fsid);
    let held = match TrustedDir::create(dir, Leaf::Private, 0o700) {
        Ok((t, _)) => HeldDir::open(t.path())?,
        Err(e) if e.kind() == ErrorKind::ReadOnly => return Err(ro(e)),
        Err(e) if e.kind() == ErrorKind::Permission && !req.allow_untrusted_target => {
            return Err(untrusted(dir, &e));
        }
        Err(e) if e.kind() == ErrorKind::Permission => match HeldDir::open(dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let abs = std::path::absolute(dir).map_err(|e| {
                    Error::usage(format!("invalid directory {}: {e}", dir.display()))
                })?;
                let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
                    return Err(e);
                };
                let parent = HeldDir::open(parent)?;
                fsr::make_dir(&parent, name).map_err(ro)?.0
            }
            other => other?,
        },
        Err(e) => return Err(e),
    };
    let st = held.fstat()?;
    if fsr::kind(&st) != Kind::Directory {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let same = st.st_dev == src_st.st_dev || held.btrfs_fsid().is_ok_and(|f| f == fsid);
    if same {
        return Err(target_on_source(dir, fsid));
    }
    held.check_writable().map_err(ro)?;
    let mdir = manifest_dir(&req.state_dir, dir).map_err(read_only_state)?;
    let fresh = held.names()?.is_empty();
    match manifest::existing_header(&mdir)? {
        Some(h) if h.fsid != fsid => {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!(
                    "{} holds a rescue of another filesystem ({}, manifest {})",
                    dir.display(),
                    h.fsid,
                    mdir.join(MANIFEST).display()
                ),
            )
            .with_hint("choose an empty target directory"));
        }
        Some(_) => {}
        None if !manifest::recorded(&mdir)? && !fresh => {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!(
                    "{} is not empty and no rescue into it is recorded in {}",
                    dir.display(),
                    mdir.path().display()
                ),
            )
            .with_hint(
                "choose an empty directory (or the one an earlier rescue wrote, to resume)",
            ));
        }
        None => {}
    }
    let manifest_path = mdir.join(MANIFEST);
    let manifest = Manifest::begin(
        &mdir,
        Header {
            tool: "btrfs-lab".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            fsid: fsid.to_owned(),
            mount: req.mount.display().to_string(),
        },
    )
    .map_err(read_only_state)?;
    Ok(CopyState {
        dir_shown: dir.to_path_buf(),
        manifest_path,
        dirs: vec![held],
        target_dev: st.st_dev,
        fresh: vec![fresh],
        manifest,
        batch: Batch::default(),
        partial: req.partial,
        copied: 0,
        partial_copies: 0,
        resumed: 0,
        symlinks: 0,
        csums: None,
        not_fitted: Vec::new(),
        bufs: copy::Buffers::new(),
    })
}

/// The file being copied, as a progress line names it: its path, or its
/// last [`STEP_CHARS`] characters after `…` (the line keeps its sizes,
/// rate and ETA within 80 columns).
fn step_name(path: &str) -> String {
    let n = path.chars().count();
    if n <= STEP_CHARS {
        return path.to_owned();
    }
    let tail: String = path.chars().skip(n - (STEP_CHARS - 1)).collect();
    format!("…{tail}")
}

/// See [`step_name`].
const STEP_CHARS: usize = 22;

/// A damaged file of which every byte is in a damaged range: lost.
fn lost_if_unreadable(mut r: FileRecord) -> FileRecord {
    if r.state == FileState::Damaged && r.size > 0 && r.damaged_bytes >= r.size {
        r.state = FileState::Lost;
        r.judged
            .push("every byte of it is on a missing device: nothing to save".to_owned());
    }
    r
}

struct Job<'a, 'b> {
    classifier: Classifier<'a>,
    ui: &'b dyn Ui,
    each: &'b mut dyn FnMut(&FileRecord),
    report: &'b mut RescueReport,
    limit: usize,
    copy: Option<CopyState>,
    bar: &'b dyn Progress,
    done: u64,
    as_root: bool,
    /// The extents of the file being judged, kept from file to file.
    exts: Vec<extents::Extent>,
}

fn is_stop(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::NoSpace | ErrorKind::Interrupted)
}

impl Job<'_, '_> {
    fn event(&mut self, e: Event<'_>) -> Result<()> {
        match e {
            Event::Enter { rel, subvolume, .. } => {
                self.report.walked.directories += 1;
                if subvolume {
                    self.report.walked.subvolumes += 1;
                }
                if let Some(c) = &mut self.copy
                    && !rel.as_os_str().is_empty()
                {
                    let parent = c.dirs.last().expect("the target");
                    let name = rel.file_name().unwrap_or(OsStr::new(""));
                    let (d, created) = fsr::make_dir(parent, name)?;
                    // One syncfs makes a batch durable: every copy must be
                    // on the target's filesystem (a directory this run did
                    // not create may be a mount point).
                    if !created && d.fstat()?.st_dev != c.target_dev {
                        return Err(Error::new(
                            ErrorKind::WrongTarget,
                            format!(
                                "{} is another filesystem mounted inside the target",
                                d.path().display()
                            ),
                        )
                        .with_hint(
                            "unmount it, or copy to a directory with nothing mounted below it",
                        ));
                    }
                    c.dirs.push(d);
                    c.fresh.push(created);
                }
                Ok(())
            }
            Event::Leave { rel, st } => {
                if let Some(c) = &mut self.copy
                    && !rel.as_os_str().is_empty()
                {
                    let d = c.dirs.pop().expect("a target directory");
                    c.fresh.pop();
                    fsr::apply_meta(d.fd(), st, self.as_root, d.path())?;
                }
                Ok(())
            }
            Event::File { rel, dir, name, st } => {
                signals::check()?;
                self.report.walked.files += 1;
                if self.copy.is_some() {
                    self.bar.set_message(step_name(&rel.to_string_lossy()));
                }
                let record = self.file(rel, dir, name, st)?;
                self.account(&record);
                (self.each)(&record);
                if let Some(c) = &mut self.copy {
                    c.manifest.stage(&record)?;
                    if let Some(s) = &record.saved {
                        c.batch.saved_bytes += s.bytes_rescued;
                        crate::hooks::Pause::RescueCopied
                            .here(&format!(" of {}", record.path), &|| false)?;
                    }
                    if c.batch_full() {
                        c.end_batch(&mut self.report.bytes.saved)?;
                    }
                }
                if self.copy.is_none() {
                    self.bar.set_message(step_name(&record.path));
                    self.bar.set_position(self.report.walked.files);
                }
                Ok(())
            }
            Event::Symlink { dir, name, st, rel } => {
                self.report.walked.symlinks += 1;
                if let Some(c) = &mut self.copy {
                    let dst = c.dirs.last().expect("the target");
                    match fsr::copy_symlink(dir, dst, name, st, self.as_root) {
                        Ok(()) => c.symlinks += 1,
                        Err(e) if is_stop(&e) => return Err(e),
                        Err(e) => {
                            self.report.walked.unreadable += 1;
                            self.ui.error(&Error::new(
                                e.kind(),
                                format!("{}: {}", rel.display(), e.message()),
                            ));
                        }
                    }
                }
                Ok(())
            }
            Event::Other => {
                self.report.walked.other += 1;
                Ok(())
            }
            Event::OtherFilesystem { rel } => {
                self.report.walked.other_filesystems += 1;
                self.report.notes.push(format!(
                    "{} is another filesystem mounted below MOUNT: not walked",
                    rel.display()
                ));
                Ok(())
            }
            Event::Unreadable { rel, error } => {
                self.report.walked.unreadable += 1;
                self.ui.error(&Error::new(
                    error.kind(),
                    format!("{}: {}", rel.display(), error.message()),
                ));
                Ok(())
            }
        }
    }

    fn account(&mut self, r: &FileRecord) {
        let b = &mut self.report.bytes;
        b.total += r.size;
        match r.state {
            FileState::Intact => {
                self.report.files.intact += 1;
                b.intact += r.size;
            }
            FileState::Damaged | FileState::Lost | FileState::Failed => {
                match r.state {
                    FileState::Damaged => self.report.files.damaged += 1,
                    FileState::Lost => self.report.files.lost += 1,
                    _ => self.report.files.failed += 1,
                }
                let lost = r.damaged_bytes.min(r.size);
                b.lost += lost;
                b.readable += r.size - lost;
            }
            FileState::Unknown => {
                self.report.files.unknown += 1;
                b.unknown += r.size;
            }
        }
        if let Some(s) = &r.saved {
            b.saved += s.bytes_rescued;
        }
        if r.state != FileState::Intact {
            if self.report.listed.len() < self.limit {
                self.report.listed.push(r.clone());
            } else {
                self.report.not_listed += 1;
            }
        }
    }

    /// A file an earlier run saved, unchanged since (same size, the saved
    /// copy still the one the manifest names): its old record, counted.
    fn resume(&mut self, key: &[u8], name: &OsStr, size: u64) -> Result<Option<FileRecord>> {
        let Some(c) = &mut self.copy else {
            return Ok(None);
        };
        let Some(old) = c.manifest.old.take(key) else {
            return Ok(None);
        };
        let dst = c.dirs.last().expect("the target");
        // The name it was saved under, from the name's own bytes (the
        // manifest's path is lossy for a name that is not UTF-8): NAME when
        // intact, NAME.partial otherwise.
        let mut fname = name.to_os_string();
        if old.state != FileState::Intact {
            fname.push(".partial");
        }
        if old.size == size
            && let Some(s) = &old.saved
            && same_copy(dst, &fname, s, &mut c.bufs)?
        {
            c.batch.resumed += 1;
            self.done += size;
            self.bar.set_position(self.done);
            return Ok(Some(old));
        }
        Ok(None)
    }

    /// One regular file: resumed, or judged (and read and saved); its
    /// extents in the run's own vector (no allocation per file).
    fn file(&mut self, rel: &Path, dir: &HeldDir, name: &OsStr, st: &Stat) -> Result<FileRecord> {
        let mut exts = std::mem::take(&mut self.exts);
        exts.clear();
        let r = self
            .file_with(rel, dir, name, st, &mut exts)
            .map(lost_if_unreadable);
        self.exts = exts;
        r
    }

    fn file_with(
        &mut self,
        rel: &Path,
        dir: &HeldDir,
        name: &OsStr,
        st: &Stat,
        exts: &mut Vec<extents::Extent>,
    ) -> Result<FileRecord> {
        let key = rel.as_os_str().as_bytes();
        let size = st.st_size as u64;
        let mut r = FileRecord {
            path: rel.to_string_lossy().into_owned(),
            path_hex: std::str::from_utf8(key)
                .is_err()
                .then(|| manifest::hex(key)),
            size,
            state: FileState::Unknown,
            damaged_ranges: Vec::new(),
            damaged_bytes: 0,
            judged: Vec::new(),
            saved: None,
            error: None,
        };
        if let Some(old) = self.resume(key, name, size)? {
            return Ok(old);
        }
        let src = match fsr::open_source(dir, name) {
            Ok(f) => f,
            Err(e) => {
                r.state = FileState::Failed;
                r.error = Some(e.message().to_owned());
                return Ok(r);
            }
        };
        let mut fj = self.classifier.file(size);
        let keep = self.copy.is_some();
        if let Err(e) = extents::for_each_extent(&src, size, |x| {
            if keep {
                exts.push(*x);
            }
            fj.extent(x);
        }) {
            let j = fj.finish();
            r.judged = j.judged;
            r.state = FileState::Unknown;
            r.error = Some(format!("FIEMAP failed: {}", e.desc()));
            return Ok(r);
        }
        let j = fj.finish();
        r.state = j.state();
        r.judged = j.judged.clone();
        let mut damaged = j.damaged.clone();
        let Some(c) = &mut self.copy else {
            r.damaged_bytes = damaged.bytes();
            r.damaged_ranges = damaged.0;
            return Ok(r);
        };
        let map_state = r.state;
        // A file with no byte left to read is never written (a partial
        // copy of it would be holes only).
        let wanted = match map_state {
            FileState::Intact | FileState::Unknown => true,
            FileState::Damaged | FileState::Failed => c.partial && damaged.bytes() < size,
            FileState::Lost => false,
        };
        if !wanted {
            r.damaged_bytes = damaged.bytes();
            r.damaged_ranges = damaged.0;
            self.done += size;
            self.bar.set_position(self.done);
            return Ok(r);
        }
        let holes = copy::holes_of(exts, size);
        let dst = c.dirs.last().expect("the target");
        let mut out = NewFile::create(dst, name)?;
        let bar = self.bar;
        let start = self.done;
        let mut progressed = 0u64;
        let direct = fsr::open_direct(dir, name, st);
        let read = copy::read_file(
            &src,
            direct.as_ref(),
            c.csums.as_mut().map(|s| (s, exts.as_slice())),
            size,
            &damaged,
            &holes,
            c.partial,
            &mut out as &mut dyn Sink,
            &mut |n| {
                progressed += n;
                bar.set_position(start + progressed);
            },
            &dir.join(name),
            &mut c.bufs,
        );
        self.done = start + size;
        let read = match read {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::NoSpace => {
                drop(out);
                return Ok(c.did_not_fit(r, &e, &damaged));
            }
            Err(e) if is_stop(&e) => return Err(e),
            Err(e) => {
                r.state = FileState::Failed;
                r.error = Some(e.message().to_owned());
                r.damaged_bytes = damaged.bytes();
                r.damaged_ranges = damaged.0;
                return Ok(r);
            }
        };
        for b in &read.bad.0 {
            damaged.add(b.offset, b.length);
        }
        r.state = read_back_state(map_state, &read, &mut r.judged);
        if read.stopped_early {
            r.judged
                .push("reading stopped at the first unreadable byte (no --partial)".to_owned());
        }
        r.damaged_bytes = damaged.bytes();
        r.damaged_ranges = damaged.0.clone();
        let saved_name = if r.state == FileState::Intact {
            name.to_os_string()
        } else if c.partial && read.read_bytes > 0 {
            let mut n = name.to_os_string();
            n.push(".partial");
            n
        } else {
            // Not good (or, with --partial, nothing read: holes only): the
            // temporary file is dropped, nothing is named.
            drop(out);
            if c.partial && r.state == FileState::Damaged && !read.stopped_early {
                r.state = FileState::Lost;
                r.judged
                    .push("no byte of it could be read from the disk: nothing saved".to_owned());
            }
            return Ok(r);
        };
        if read.holes > 0 {
            r.judged.push(format!(
                "sparse: {} bytes of holes, not read (holes in the copy too)",
                read.holes
            ));
        }
        match out.commit(&saved_name, size, st, self.as_root) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NoSpace => {
                return Ok(c.did_not_fit(r, &e, &Default::default()));
            }
            Err(e) if is_stop(&e) => return Err(e),
            Err(e) => {
                r.error = Some(e.message().to_owned());
                return Ok(r);
            }
        }
        Ok(c.record_saved(r, rel, name, &saved_name, size, &read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_path_in_a_progress_line_keeps_its_end() {
        assert_eq!(step_name("photos/p1.jpg"), "photos/p1.jpg");
        let long = "a/very/deep/directory/tree/of/photos/2024/IMG_1.jpg";
        let s = step_name(long);
        assert_eq!(s.chars().count(), STEP_CHARS);
        assert!(s.starts_with('…') && s.ends_with("2024/IMG_1.jpg"), "{s}");
    }

    #[test]
    fn the_remap_tree_is_refused_by_feature_or_by_a_chunk_without_stripes() {
        use btrfs_uapi::space::BlockGroupFlags as F;
        let chunk = |stripes: u16| btrfs::ChunkRecord {
            flags: F::DATA | F::RAID0,
            logical: 1 << 30,
            length: 1 << 30,
            stripe_len: 64 << 10,
            num_stripes: stripes,
            sub_stripes: 1,
            devids: (1..=u64::from(stripes)).collect(),
        };
        let plain = vec!["no_holes".to_owned(), "free_space_tree".to_owned()];
        assert_eq!(remap_in_use(&plain, &[chunk(2)]), None);
        let why = remap_in_use(&plain, &[chunk(2), chunk(0)]).unwrap();
        assert!(why.contains("1 remapped block group"), "{why}");
        // The chunk type bits themselves: a remapped data chunk that still
        // lists stripes, and the remap tree's own block group.
        for bits in [REMAPPED, METADATA_REMAP] {
            let mut c = chunk(2);
            c.flags = F::from_bits_retain(c.flags.bits() | bits);
            assert!(remap_in_use(&plain, &[c]).is_some(), "{bits:#x}");
        }
        let feat = vec!["remap_tree".to_owned()];
        assert!(
            remap_in_use(&feat, &[chunk(2)])
                .unwrap()
                .contains("remap_tree")
        );
        // doctor's oldest kernel follows: a remap-tree filesystem needs 7.0.
        assert_eq!(
            crate::model::kernel::oldest_read_write(&feat).0,
            crate::model::kernel::KernelVersion::new(7, 0)
        );
    }
}
