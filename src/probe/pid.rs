//! `probe-dio --pid PID`: is a running program's O_DIRECT really direct?
//!
//! Nothing is written. The files the process has open for writing are read
//! from `/proc/PID/fd` and `/proc/PID/fdinfo` (the octal `flags:` tell
//! O_DIRECT; each descriptor is taken with `pidfd_getfd`, never reopened
//! by name: `sys::proc::pidfd`), and for N seconds a private trace instance counts the folios
//! each of them dirties (tracepoint `writeback:writeback_dirty_folio`,
//! filtered in the kernel by backing device and inode). A file opened with
//! O_DIRECT that dirtied folios went through the page cache: a fallback,
//! whose reason (checksums, profile, compression) comes from the file's
//! filesystem; one that changed (size, mtime, descriptor position) without
//! dirtying any was written directly; one that did neither was idle.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::parse::mountinfo::MountEntry;
use crate::sys::fs::root::SysRoot;
use crate::sys::proc::counters::{self, page_size};
use crate::sys::proc::fdinfo::{self, OpenFile, SkippedFd};
use crate::sys::proc::mountinfo;
use crate::sys::proc::tracefs::{self, FolioTrace};
use crate::sys::{fs::filesystem, kernel::btrfs, kernel::ioctl, kernel::signals};

/// Default watch length, seconds.
pub const DEFAULT_SECONDS: u32 = 10;

/// What to watch.
#[derive(Debug, Clone)]
pub struct PidOptions {
    /// The process.
    pub pid: u32,
    /// How long to watch.
    pub seconds: u32,
    /// May mount tracefs in a private mount namespace of this process.
    pub allow_private_mounts: bool,
    /// Where /sys and /proc are read.
    pub sysroot: SysRoot,
}

/// What one file did while it was watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FileVerdict {
    /// Opened with O_DIRECT, written, and no page-cache folio dirtied.
    Direct,
    /// Opened with O_DIRECT, written without dirtying the page cache, but
    /// the kernel bounced the writes (copied them into its own pages).
    DirectBounced,
    /// Opened with O_DIRECT, yet its writes dirtied page-cache folios.
    BufferedFallback,
    /// Opened without O_DIRECT: buffered by the program's choice.
    BufferedByChoice,
    /// Opened with O_DIRECT, not written while watched.
    Idle,
    /// Could not be watched (the reason is in `note`).
    Unknown,
}

impl FileVerdict {
    /// The name used in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FileVerdict::Direct => "direct",
            FileVerdict::DirectBounced => "direct-bounced",
            FileVerdict::BufferedFallback => "buffered-fallback",
            FileVerdict::BufferedByChoice => "buffered-by-choice",
            FileVerdict::Idle => "idle",
            FileVerdict::Unknown => "unknown",
        }
    }
}

/// Why btrfs buffers O_DIRECT writes to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FallbackReason {
    /// The data profile keeps several copies (DUP, RAID1, ...).
    Profile,
    /// The file carries data checksums (not NOCOW, no nodatasum).
    Checksums,
    /// The file may be compressed (mount option or attribute).
    Compression,
}

/// How the file's writes were seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Activity {
    /// Size before and after.
    pub(crate) size_before: u64,
    /// Size after.
    pub(crate) size_after: u64,
    /// The modification time changed.
    pub mtime_changed: bool,
    /// A descriptor's position moved (sequential write calls).
    pub(crate) position_moved: bool,
}

impl Activity {
    /// Anything says the file was written.
    pub fn written(&self) -> bool {
        self.size_before != self.size_after || self.mtime_changed || self.position_moved
    }
}

/// One file the process has open for writing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PidFile {
    /// The path (as /proc/PID/fd shows it, in the process's mount view).
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The exact bytes of `path` (an array of 0-255), present only when
    /// they are not UTF-8 (`path` then shows U+FFFD in their place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// Its descriptors in the process.
    pub fds: Vec<u32>,
    /// Opened with O_DIRECT (by at least one descriptor).
    pub o_direct: bool,
    /// Some descriptors with O_DIRECT, some without.
    pub(crate) mixed_flags: bool,
    /// Device (`major:minor`) and inode.
    pub device: String,
    /// Inode number.
    pub inode: u64,
    /// Filesystem type.
    pub fs_type: String,
    /// Backing device, as the tracepoint names it.
    pub bdi: Option<String>,
    /// btrfs data profiles (empty elsewhere).
    pub data_profiles: Vec<Profile>,
    /// NOCOW attribute (btrfs; null elsewhere).
    pub nocow: Option<bool>,
    /// Mount options that change data writes.
    pub mount_options: Vec<String>,
    /// Folios of this file dirtied while watched (null: not watched).
    pub dirtied_folios: Option<u64>,
    /// The dirtied folios at the page size: with large folios (btrfs on
    /// 7.x) one folio is many pages, so this is a lower bound.
    pub dirtied_bytes: Option<u64>,
    /// O_DIRECT calls (reads or writes) of this file that entered the
    /// kernel's direct-I/O path (iomap tracepoint; null: not traced).
    #[serde(default)]
    pub direct_calls: Option<u64>,
    /// Of those, writes the kernel bounced through its own pages (null: not
    /// traced, or this kernel's trace cannot show it).
    #[serde(default)]
    pub bounced_calls: Option<u64>,
    /// Bytes the process wrote to this file, when that is known: the
    /// process's write calls (`wchar`), attributed only when this is the
    /// one file of the process that changed.
    pub bytes_written: Option<u64>,
    /// How the writes were seen.
    pub activity: Activity,
    /// The verdict.
    pub verdict: FileVerdict,
    /// Why it fell back, for `buffered-fallback` on btrfs.
    pub reasons: Vec<FallbackReason>,
    /// Anything else worth saying.
    pub note: Option<String>,
}

/// `probe-dio --pid` result (docs/json.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PidReport {
    /// The process.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// Seconds watched.
    pub seconds: f64,
    /// One sentence.
    pub summary: String,
    /// 3 when an O_DIRECT file fell back to buffered writes, else 6 when one was bounced, else 0.
    pub exit_code: u8,
    /// What was read: the tracepoint and the instance.
    pub evidence: String,
    /// The process's write calls while watched (`wchar` of /proc/PID/io):
    /// per process, not per file.
    pub process_write_call_bytes: Option<u64>,
    /// Bytes the process caused to be sent to storage (`write_bytes`),
    /// per process.
    pub process_storage_write_bytes: Option<u64>,
    /// Files open for writing.
    pub files: Vec<PidFile>,
    /// Regular files open read-only (not watched: they dirty nothing).
    pub read_only_files: usize,
    /// Events the trace buffer lost (0: the counts are complete).
    pub lost_events: u64,
    /// Trace instances of killed runs (dead pids) that were removed.
    pub removed_trace_instances: Vec<String>,
    /// Descriptors that are not regular files (FIFOs, devices, sockets)
    /// or were opened with `O_PATH`: named, never opened nor read.
    #[serde(default)]
    pub skipped_descriptors: Vec<SkippedFd>,
}

/// A file being watched, with what we hold to look at it.
struct Watched {
    file: PidFile,
    handle: Option<File>,
    mtime_before: (i64, i64),
    positions: Vec<(u32, u64)>,
    /// The tracepoint watches it ([`choose_watched`]).
    traced: bool,
    /// Its filesystem's superblock device, as the filemap and iomap
    /// tracepoints name it (mountinfo's `major:minor`).
    sb_dev: Option<(u32, u32)>,
}

fn mtime(m: &std::fs::Metadata) -> (i64, i64) {
    (m.mtime(), m.mtime_nsec())
}

/// The reasons btrfs buffers O_DIRECT writes to this file.
pub(crate) fn fallback_reasons(
    profiles: &[Profile],
    nocow: bool,
    compressed_attr: bool,
    mount_options: &[String],
) -> Vec<FallbackReason> {
    let mut r = Vec::new();
    if profiles.iter().any(|p| p.duplicates_data()) {
        r.push(FallbackReason::Profile);
    }
    let no_sums = mount_options
        .iter()
        .any(|o| o == "nodatasum" || o == "nodatacow");
    if !nocow && !no_sums {
        r.push(FallbackReason::Checksums);
        if compressed_attr || mount_options.iter().any(|o| o.starts_with("compress")) {
            r.push(FallbackReason::Compression);
        }
    }
    r
}

/// The verdict for one file from what was seen: folios dirtied, writes
/// bounced (null: not traced).
pub(crate) fn file_verdict(
    o_direct: bool,
    folios: Option<u64>,
    bounced: Option<u64>,
    activity: &Activity,
) -> FileVerdict {
    match (o_direct, folios) {
        (false, _) => FileVerdict::BufferedByChoice,
        (true, None) => FileVerdict::Unknown,
        (true, Some(n)) if n > 0 => FileVerdict::BufferedFallback,
        (true, Some(_)) if bounced.unwrap_or(0) > 0 => FileVerdict::DirectBounced,
        (true, Some(_)) if activity.written() => FileVerdict::Direct,
        (true, Some(_)) => FileVerdict::Idle,
    }
}

fn describe(root: &SysRoot, pid: u32, group: &[OpenFile], mounts: &[MountEntry]) -> Watched {
    let first = &group[0];
    let o_direct = group.iter().any(|f| f.info.direct());
    let mixed = o_direct && group.iter().any(|f| !f.info.direct());
    let mount = first
        .info
        .mnt_id
        .and_then(|id| mountinfo::by_id(mounts, id).cloned());
    let mut note = None;
    let handle = match fdinfo::reopen(pid, first.fd, first.dev, first.ino) {
        Ok(f) => Some(f),
        Err(e) => {
            note = Some(e.message().to_owned());
            None
        }
    };
    let fs_type = mount.as_ref().map_or("?".to_owned(), |m| m.fs_type.clone());
    let mount_options = mount
        .as_ref()
        .map(|m| crate::parse::mountinfo::relevant_mount_options(m.options()))
        .unwrap_or_default();
    let (mut bdi, mut profiles, mut nocow, mut compressed) = (None, Vec::new(), None, false);
    if let Some(h) = &handle {
        let via = PathBuf::from(format!("/proc/self/fd/{}", h.as_raw_fd()));
        if fs_type == "btrfs" {
            if let Ok(fsid) = btrfs::fsid(&via) {
                bdi = counters::btrfs_bdi_name(root, &fsid);
            }
            profiles = btrfs::data_profiles(&via).unwrap_or_default();
        } else if let Some(m) = &mount {
            bdi = counters::block_bdi_name(root, m.major, m.minor);
        }
        if let Ok(Some(flags)) = filesystem::inode_flags_of(h, &via) {
            if fs_type == "btrfs" {
                nocow = Some(flags.intersects(ioctl::FS_NOCOW_FL));
            }
            compressed = flags.intersects(ioctl::FS_COMPR_FL);
        }
    }
    if bdi.is_none() && note.is_none() {
        note = Some(format!(
            "the backing device of its filesystem ({fs_type}) is unknown, so it was not watched"
        ));
    }
    let meta = handle.as_ref().and_then(|h| h.metadata().ok());
    let size = meta.as_ref().map_or(0, |m| m.len());
    let reasons_if_fallback = if fs_type == "btrfs" {
        fallback_reasons(&profiles, nocow == Some(true), compressed, &mount_options)
    } else {
        Vec::new()
    };
    Watched {
        traced: false,
        sb_dev: mount.as_ref().map(|m| (m.major, m.minor)),
        mtime_before: meta.as_ref().map_or((0, 0), mtime),
        positions: group.iter().map(|f| (f.fd, f.info.pos)).collect(),
        handle,
        file: PidFile {
            path: first.path.clone(),
            path_bytes: crate::report::text::non_utf8_bytes(&first.path),
            fds: group.iter().map(|f| f.fd).collect(),
            o_direct,
            mixed_flags: mixed,
            device: fdinfo::dev_name(first.dev),
            inode: first.ino,
            fs_type,
            bdi,
            data_profiles: profiles,
            nocow,
            mount_options,
            dirtied_folios: None,
            dirtied_bytes: None,
            direct_calls: None,
            bounced_calls: None,
            bytes_written: None,
            activity: Activity {
                size_before: size,
                size_after: size,
                mtime_changed: false,
                position_moved: false,
            },
            verdict: FileVerdict::Unknown,
            reasons: reasons_if_fallback,
            note,
        },
    }
}

/// The files `pid` has open for writing, described as `--pid` describes
/// them (nothing watched), each with its btrfs UUID (`apps`: which
/// filesystem its O_DIRECT writes go to).
pub(crate) fn open_for_writing(root: &SysRoot, pid: u32) -> Result<Vec<(PidFile, Option<String>)>> {
    let open = fdinfo::open_files(root, pid)?;
    let mut groups: BTreeMap<(u64, u64), Vec<OpenFile>> = BTreeMap::new();
    for f in open.into_iter().filter(|f| f.info.writable()) {
        groups.entry((f.dev, f.ino)).or_default().push(f);
    }
    let mounts = mountinfo::mount_table_of(root, mountinfo::Of::Pid(pid)).unwrap_or_default();
    Ok(groups
        .values()
        .map(|g| {
            let w = describe(root, pid, g, &mounts);
            let fsid = w
                .handle
                .as_ref()
                .filter(|_| w.file.fs_type == "btrfs")
                .and_then(|h| {
                    btrfs::fsid(&PathBuf::from(format!("/proc/self/fd/{}", h.as_raw_fd()))).ok()
                });
            (w.file, fsid)
        })
        .collect())
}

/// Room for the tracepoint filter (the kernel's limit is a page; tracefs
/// refuses longer filters, `sys::proc::tracefs::filter_for`).
const FILTER_BUDGET: usize = 3400;

/// Which files the tracepoint watches: all of them when the filter has
/// room, else the files opened with O_DIRECT first (their verdict depends on
/// it; a file without O_DIRECT is buffered by choice whatever it dirties),
/// then the largest, as many as fit. Bounded work: one pass over the files,
/// the length of the filter counted as it grows. The others get a note.
/// Returns the watch list and how many files were left out.
fn choose_watched(watched: &mut [Watched]) -> (Vec<tracefs::Watch>, usize) {
    let mut order: Vec<usize> = (0..watched.len())
        .filter(|&i| {
            let w = &watched[i];
            w.file.bdi.is_some() && w.handle.is_some() && w.sb_dev.is_some()
        })
        .collect();
    order.sort_by_key(|&i| {
        let f = &watched[i].file;
        (!f.o_direct, std::cmp::Reverse(f.activity.size_before))
    });
    let mut watch: BTreeMap<(String, (u32, u32)), Vec<u64>> = BTreeMap::new();
    let mut len = 0usize;
    let mut left_out = 0;
    for i in order {
        let f = &watched[i].file;
        let key = (
            f.bdi.clone().unwrap_or_default(),
            watched[i].sb_dev.unwrap_or_default(),
        );
        let bdi = &key.0;
        // `(name == "BDI" && (ino == N || ...)) || ...`, counted with the
        // longest field name of the three filters (`i_ino`).
        let add = format!("i_ino == {}", f.inode).len()
            + match watch.get(&key) {
                Some(_) => 4,
                None => format!("(name == \"{bdi}\" && ())").len() + 4,
            };
        if len + add > FILTER_BUDGET {
            left_out += 1;
            let n = "not watched: the tracepoint filter was full (files opened with O_DIRECT first, then the largest)";
            let w = &mut watched[i];
            w.file.note = Some(
                w.file
                    .note
                    .take()
                    .map_or(n.to_owned(), |m| format!("{m}; {n}")),
            );
            continue;
        }
        len += add;
        watch.entry(key).or_default().push(f.inode);
        watched[i].traced = true;
    }
    let watch = watch
        .into_iter()
        .map(|((bdi, dev), inodes)| tracefs::Watch { bdi, dev, inodes })
        .collect();
    (watch, left_out)
}

fn not_root() -> Error {
    Error::new(
        ErrorKind::Permission,
        "probe-dio --pid needs root: the per-file evidence is read from tracefs",
    )
    .with_hint("run it as root (sudo btrfs-lab probe-dio --pid PID)")
}

/// `probe-dio --pid`: watches `opts.pid`, its seconds counted on the
/// `ui`'s progress bar.
pub fn run(opts: &PidOptions, ui: &dyn crate::ui::Ui) -> Result<PidReport> {
    let bar = ui.progress("probe-dio --pid {bar:30} {pos}/{len} s");
    let result = watch(opts, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish();
    result
}

/// Watches `opts.pid`. `tick(elapsed, total)` is called as time passes.
fn watch(opts: &PidOptions, tick: &mut dyn FnMut(f64, f64)) -> Result<PidReport> {
    if !(1..=3600).contains(&opts.seconds) {
        return Err(Error::usage("--seconds must be between 1 and 3600"));
    }
    let pid = opts.pid;
    if pid == 0 || !opts.sysroot.proc(&pid.to_string()).exists() {
        return Err(
            Error::new(ErrorKind::NotFound, format!("no process with pid {pid}"))
                .with_hint("give the pid of a running process (see `pgrep NAME`)"),
        );
    }
    if !crate::sys::is_root() {
        return Err(not_root());
    }
    let (open, skipped_descriptors) = fdinfo::open_files_and_skipped(&opts.sysroot, pid)?;
    let command = fdinfo::comm(&opts.sysroot, pid);
    let read_only_files = open.iter().filter(|f| !f.info.writable()).count();
    let mut groups: BTreeMap<(u64, u64), Vec<OpenFile>> = BTreeMap::new();
    for f in open.into_iter().filter(|f| f.info.writable()) {
        groups.entry((f.dev, f.ino)).or_default().push(f);
    }
    let mounts =
        mountinfo::mount_table_of(&opts.sysroot, mountinfo::Of::Pid(pid)).unwrap_or_default();
    let mut watched: Vec<Watched> = groups
        .values()
        .map(|g| describe(&opts.sysroot, pid, g, &mounts))
        .collect();

    let (trace, why, removed) = super::open_trace(&opts.sysroot, opts.allow_private_mounts);
    let Some(mut trace) = trace else {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "cannot watch pid {pid}: the per-file tracepoint is unavailable: {}",
                why.unwrap_or_default()
            ),
        )
        .with_hint(
            "run as root on a kernel with tracefs and the writeback_dirty_folio tracepoint",
        ));
    };
    // Files of a running program may be rewritten in place (pages already
    // cached: dirtied, never added), so the dirtied folios are the evidence
    // here, and the filemap event would only double the events to format.
    trace.without_cache_event();
    let evidence = trace.label();
    let (watch, unwatched) = choose_watched(&mut watched);
    let io_before = fdinfo::process_io(&opts.sysroot, pid);
    if !watch.is_empty() {
        trace.watch(&watch, None)?;
    }
    let seconds = watch_window(&mut trace, opts.seconds, tick)?;
    let io_after = fdinfo::process_io(&opts.sysroot, pid);
    let lost = trace.lost_events();
    record_trace_counts(&trace, &mut watched);
    drop(trace);

    judge_files(&opts.sysroot, pid, &mut watched);
    let write_calls = match (io_before, io_after) {
        (Some((w0, _)), Some((w1, _))) => Some(w1.saturating_sub(w0)),
        _ => None,
    };
    let storage = match (io_before, io_after) {
        (Some((_, s0)), Some((_, s1))) => Some(s1.saturating_sub(s0)),
        _ => None,
    };
    let changed: Vec<usize> = watched
        .iter()
        .enumerate()
        .filter(|(_, w)| w.file.activity.written() || w.file.dirtied_folios.unwrap_or(0) > 0)
        .map(|(i, _)| i)
        .collect();
    if let ([only], Some(b)) = (changed.as_slice(), write_calls) {
        watched[*only].file.bytes_written = Some(b);
    }
    let traced = watched.iter().filter(|w| w.traced).count();
    let files: Vec<PidFile> = watched.into_iter().map(|w| w.file).collect();
    let fallbacks = count_verdict(&files, FileVerdict::BufferedFallback);
    let bounced = count_verdict(&files, FileVerdict::DirectBounced);
    let summary = summary(pid, &command, seconds, &files, (traced, unwatched));
    Ok(PidReport {
        pid,
        command,
        seconds,
        summary,
        exit_code: if fallbacks > 0 {
            crate::model::exit::BUFFERED_FALLBACK.code
        } else if bounced > 0 {
            crate::model::exit::DIRECT_BOUNCED.code
        } else {
            crate::model::exit::OK.code
        },
        evidence,
        process_write_call_bytes: write_calls,
        process_storage_write_bytes: storage,
        files,
        read_only_files,
        lost_events: lost,
        removed_trace_instances: removed,
        skipped_descriptors,
    })
}

/// The watch window: the trace drained often (a program dirtying folios
/// at full speed fills the ring buffer in well under a second) for
/// `seconds`; returns the seconds watched.
fn watch_window(
    trace: &mut FolioTrace,
    seconds: u32,
    tick: &mut dyn FnMut(f64, f64),
) -> Result<f64> {
    let start = Instant::now();
    let total = Duration::from_secs(u64::from(seconds));
    while start.elapsed() < total {
        signals::check()?;
        trace.drain()?;
        tick(start.elapsed().as_secs_f64(), total.as_secs_f64());
        // Drained often: a program dirtying folios at full speed fills
        // the ring buffer in well under a second.
        thread::sleep(Duration::from_millis(10).min(total.saturating_sub(start.elapsed())));
    }
    trace.drain()?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(seconds)
}

/// Each traced file's dirtied folios and direct/bounced calls.
fn record_trace_counts(trace: &FolioTrace, watched: &mut [Watched]) {
    let page = page_size();
    for w in watched.iter_mut() {
        if let (Some(dev), Some(_), true) = (w.sb_dev, &w.handle, w.traced) {
            let c = trace.counts(dev, w.file.inode);
            let events = trace.events();
            w.file.dirtied_folios = Some(c.dirtied_folios);
            w.file.dirtied_bytes = Some(
                c.dirtied_folios
                    .saturating_mul(page)
                    .max(c.cached_pages.saturating_mul(page)),
            );
            w.file.direct_calls = events.dio.then_some(c.dio_calls);
            w.file.bounced_calls = (events.dio && events.bounce != tracefs::BounceRule::Unknown)
                .then_some(c.bounced_calls);
        }
    }
}

/// After the window: what each file did (size, mtime, positions) and its
/// verdict, with the notes that explain it.
fn judge_files(root: &SysRoot, pid: u32, watched: &mut [Watched]) {
    let now = fdinfo::open_files(root, pid).unwrap_or_default();
    for w in watched.iter_mut() {
        let f = &mut w.file;
        if let Some(meta) = w.handle.as_ref().and_then(|h| h.metadata().ok()) {
            f.activity.size_after = meta.len();
            f.activity.mtime_changed = mtime(&meta) != w.mtime_before;
        }
        f.activity.position_moved = w.positions.iter().any(|(fd, pos)| {
            now.iter().any(|o| {
                o.fd == *fd
                    && o.ino == f.inode
                    && fdinfo::dev_name(o.dev) == f.device
                    && o.info.pos != *pos
            })
        });
        f.verdict = file_verdict(f.o_direct, f.dirtied_folios, f.bounced_calls, &f.activity);
        if f.verdict != FileVerdict::BufferedFallback {
            f.reasons.clear();
        } else if f.reasons.is_empty() && f.fs_type == "btrfs" {
            f.note = Some("btrfs buffered it for a reason this tool does not know".into());
        }
        if f.mixed_flags {
            let n = "some descriptors have O_DIRECT, some do not: folios dirtied through the others count too";
            f.note = Some(f.note.take().map_or(n.to_owned(), |m| format!("{m}; {n}")));
        }
    }
}

fn count_verdict(files: &[PidFile], verdict: FileVerdict) -> usize {
    files.iter().filter(|f| f.verdict == verdict).count()
}

/// The report's sentence; `(traced, unwatched)`: files the tracepoint
/// filter held, and those it could not.
fn summary(
    pid: u32,
    command: &str,
    seconds: f64,
    files: &[PidFile],
    (traced, unwatched): (usize, usize),
) -> String {
    let direct_files = files.iter().filter(|f| f.o_direct).count();
    let fallbacks = count_verdict(files, FileVerdict::BufferedFallback);
    let bounced = count_verdict(files, FileVerdict::DirectBounced);
    let summary = if files.is_empty() {
        format!("pid {pid} ({command}) has no regular file open for writing.")
    } else if direct_files == 0 {
        format!(
            "pid {pid} ({command}) has no file open with O_DIRECT: its {} file(s) open for writing are buffered by choice.",
            files.len()
        )
    } else if fallbacks > 0 {
        format!(
            "{fallbacks} of the {direct_files} file(s) pid {pid} ({command}) opened with O_DIRECT went through the page cache."
        )
    } else if bounced > 0 {
        format!(
            "No file pid {pid} ({command}) opened with O_DIRECT dirtied the page cache in {seconds:.0} s; the kernel bounced the writes of {bounced} of them (a copy into its own pages, checksums kept)."
        )
    } else {
        format!(
            "No file pid {pid} ({command}) opened with O_DIRECT dirtied the page cache in {seconds:.0} s."
        )
    };
    if unwatched > 0 {
        format!(
            "{summary} {} of the {} file(s) open for writing were watched (the tracepoint filter holds only so many: files opened with O_DIRECT first, then the largest); the others are marked not watched.",
            traced,
            files.len()
        )
    } else {
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(written: bool) -> Activity {
        Activity {
            size_before: 0,
            size_after: 0,
            mtime_changed: written,
            position_moved: false,
        }
    }

    #[test]
    fn verdicts_per_file() {
        use FileVerdict::*;
        assert_eq!(file_verdict(true, Some(0), None, &act(true)), Direct);
        assert_eq!(file_verdict(true, Some(0), Some(0), &act(true)), Direct);
        assert_eq!(
            file_verdict(true, Some(0), Some(9), &act(true)),
            DirectBounced
        );
        assert_eq!(file_verdict(true, Some(0), None, &act(false)), Idle);
        assert_eq!(
            file_verdict(true, Some(12), Some(9), &act(true)),
            BufferedFallback
        );
        assert_eq!(
            file_verdict(false, Some(12), None, &act(true)),
            BufferedByChoice
        );
        assert_eq!(file_verdict(true, None, None, &act(true)), Unknown);
        let grown = Activity {
            size_before: 1,
            size_after: 2,
            mtime_changed: false,
            position_moved: false,
        };
        assert!(grown.written());
    }

    #[test]
    fn reasons_for_a_fallback() {
        use FallbackReason::{Checksums, Compression};
        let profile = FallbackReason::Profile;
        let none: Vec<String> = vec![];
        assert_eq!(
            fallback_reasons(&[Profile::Single], false, false, &none),
            vec![Checksums]
        );
        assert!(fallback_reasons(&[Profile::Single], true, false, &none).is_empty());
        assert_eq!(
            fallback_reasons(&[Profile::Dup], true, false, &none),
            vec![profile]
        );
        assert_eq!(
            fallback_reasons(&[Profile::Raid1], false, false, &["compress=zstd".into()]),
            vec![profile, Checksums, Compression]
        );
        assert!(
            fallback_reasons(&[Profile::Single], false, true, &["nodatasum".into()]).is_empty()
        );
    }

    #[test]
    fn report_round_trips_through_json() {
        let r = PidReport {
            pid: 7,
            command: "db".into(),
            seconds: 1.0,
            summary: "s".into(),
            exit_code: 0,
            evidence: "e".into(),
            process_write_call_bytes: Some(1),
            process_storage_write_bytes: None,
            files: vec![],
            read_only_files: 2,
            lost_events: 0,
            removed_trace_instances: vec![],
            skipped_descriptors: vec![],
        };
        let back: PidReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
