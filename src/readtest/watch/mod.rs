//! `read-test --pid PID`: watch a running program load its model file, say
//! how it reads it, what holds it back, and which of its settings to change.
//!
//! Read-only and without ptrace: the process is identified by pid and start
//! time (`/proc/PID/stat`, so a reused pid is noticed), its files come from
//! `/proc/PID/fd` + `fdinfo` (O_DIRECT in `flags:`, positions) and
//! `/proc/PID/smaps` (mapped files and their resident bytes), its read
//! rate from `/proc/PID/io` (`rchar` vs `read_bytes`), its threads from
//! `task/TID/{stat,io}` (CPU per thread, state D per sample), the devices'
//! bytes from `/proc/diskstats`, the file's layout from FIEMAP, the ceiling
//! from `links`. The verdict is [`analysis::verdict`], pure.

pub mod analysis;
pub(crate) mod loaders;
mod members;
pub mod report;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, ErrorKind, Result};
use crate::parse::diskstats::DiskStat;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::{btrfs, extents, ioctl, pagecache, signals};
use crate::sys::proc::diskstats::{self, BlockDevice};
use crate::sys::proc::fdinfo;
use crate::sys::proc::pidfd::{self, FdKind};
use crate::sys::proc::task::{self, IoCounters, Liveness, ThreadSample};
use crate::sys::{fs::filesystem, is_root};

use analysis::{MIN_READ_BYTES, Observed, ThreadDelta};
use report::{
    ClaimedRate, DeviceLoad, DeviceWindow, MemberShare, ReadWay, SavedRun, WatchReport,
    WatchedFile, WindowEnd,
};

/// Default watch length, seconds.
pub const DEFAULT_SECONDS: u32 = 10;
/// Time between samples.
const SAMPLE: Duration = Duration::from_millis(50);
/// Shortest time between two looks at the mappings and positions.
const FOLLOW_MIN: Duration = Duration::from_millis(5);
/// Largest saved report `--saved` reads.
const MAX_SAVED: u64 = 64 << 20;

/// What to watch.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The process.
    pub pid: u32,
    /// How long to watch.
    pub seconds: u32,
    /// A saved `read-test --json` of the same file.
    pub saved: Option<PathBuf>,
    /// The loader's own figure of its rate, bytes per second (`--claimed`).
    pub claimed: Option<f64>,
    /// Where /sys and /proc are read.
    pub sysroot: SysRoot,
}

/// A file of the process: its descriptors and mappings.
struct Candidate {
    path: PathBuf,
    inode: u64,
    /// (fd, O_DIRECT).
    fds: Vec<(u32, bool)>,
    /// Mapping ranges (start, end) of this file.
    maps: Vec<(u64, u64)>,
    handle: Option<File>,
    size: u64,
    resident_before: Option<u64>,
    /// Resident bytes of each of its mappings (by start address) at the
    /// last look, and the growth summed over looks: a mapping that shrank
    /// (unmapped, and mapped again at the same address) counts from zero;
    /// one that vanished adds nothing more.
    rss_last: BTreeMap<u64, u64>,
    rss_growth: u64,
    /// Position per fd at the last sample, and the forward moves summed
    /// over samples (a rewind starts again from the start of the file).
    pos_last: BTreeMap<u32, u64>,
    pos_growth: BTreeMap<u32, u64>,
}

impl Candidate {
    fn new(path: PathBuf, inode: u64) -> Self {
        Candidate {
            path,
            inode,
            fds: Vec::new(),
            maps: Vec::new(),
            handle: None,
            size: 0,
            resident_before: None,
            rss_last: BTreeMap::new(),
            rss_growth: 0,
            pos_last: BTreeMap::new(),
            pos_growth: BTreeMap::new(),
        }
    }
}

/// One sample of the process.
struct Sample {
    at: Instant,
    wall: SystemTime,
    io: IoCounters,
    threads: Vec<ThreadSample>,
    disks: Vec<DiskStat>,
}

fn kernel_thread(pid: u32, comm: &str) -> Error {
    Error::new(
        ErrorKind::WrongTarget,
        format!("pid {pid} ({comm}) is a kernel thread: it loads no file of its own"),
    )
    .with_hint("give the pid of the program that loads the file (see `pgrep NAME`)")
}

fn other_users(pid: u32, uid: u32) -> Error {
    Error::new(
        ErrorKind::Permission,
        format!("pid {pid} belongs to uid {uid}: watching another user's process needs root"),
    )
    .with_hint(format!(
        "run it as root (sudo btrfs-lab read-test --pid {pid})"
    ))
}

/// The saved run of `--saved`.
fn load_saved(path: &Path) -> Result<crate::readtest::ReadTestReport> {
    let bytes =
        crate::sys::fs::beneath::read_input_file(path, MAX_SAVED, "saved read-test report")?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!("{} is not a `read-test --json` report: {e}", path.display()),
        )
        .with_hint("give the file `btrfs-lab read-test FILE --json > saved.json` wrote")
    })
}

/// Opens a mapped file through `/proc/PID/map_files/START-END` (root),
/// checked on an `O_PATH` descriptor before anything is opened for
/// reading: a device the process mapped is never opened
/// ([`pidfd::open_regular_via`]).
fn open_mapping(root: &SysRoot, pid: u32, start: u64, end: u64, inode: u64) -> Option<File> {
    let link = root.proc(&format!("{pid}/map_files/{start:x}-{end:x}"));
    let (f, _dev, ino) = pidfd::open_regular_via(&link).ok()??;
    (ino == inode).then_some(f)
}

/// The candidates: regular files open by descriptor, and file mappings
/// that are not code (no `x`), merged by inode and path.
fn candidates(
    root: &SysRoot,
    pid: u32,
) -> Result<(Vec<Candidate>, Vec<String>, Vec<fdinfo::SkippedFd>)> {
    let (open, skipped) = fdinfo::open_files_and_skipped(root, pid)?;
    let maps = task::file_mappings(root, pid).unwrap_or_default();
    let mapped_paths: Vec<String> = maps.iter().map(|m| m.path.clone()).collect();
    let mut by_key: BTreeMap<(u64, PathBuf), Candidate> = BTreeMap::new();
    let mut handles: Vec<(u64, PathBuf, u32, u64, u64)> = Vec::new();
    for f in &open {
        let c = by_key
            .entry((f.ino, f.path.clone()))
            .or_insert_with(|| Candidate::new(f.path.clone(), f.ino));
        c.fds.push((f.fd, f.info.direct()));
        c.pos_last.insert(f.fd, f.info.pos);
        handles.push((f.ino, f.path.clone(), f.fd, f.dev, f.ino));
    }
    for m in maps.iter().filter(|m| !m.perms.contains('x')) {
        let c = by_key
            .entry((m.inode, PathBuf::from(&m.path)))
            .or_insert_with(|| Candidate::new(PathBuf::from(&m.path), m.inode));
        c.maps.push((m.start, m.end));
        c.rss_last.insert(m.start, m.rss_bytes);
    }
    for (ino, path, fd, dev, ino2) in handles {
        if let Some(c) = by_key.get_mut(&(ino, path))
            && c.handle.is_none()
        {
            c.handle = fdinfo::reopen(pid, fd, dev, ino2).ok();
        }
    }
    let mut out: Vec<Candidate> = by_key.into_values().collect();
    for c in &mut out {
        if c.handle.is_none()
            && let Some(&(s, e)) = c.maps.first()
        {
            c.handle = open_mapping(root, pid, s, e, c.inode);
        }
        if let Some(h) = &c.handle {
            c.size = h.metadata().map(|m| m.len()).unwrap_or(0);
            if c.size >= MIN_READ_BYTES {
                c.resident_before = pagecache::resident_bytes(h, c.size, &c.path).ok();
            }
        }
    }
    Ok((out, mapped_paths, skipped))
}

fn sample(root: &SysRoot, pid: u32) -> Option<Sample> {
    let io = task::io_of(root, pid)?;
    Some(Sample {
        at: Instant::now(),
        wall: SystemTime::now(),
        io,
        threads: task::threads(root, pid),
        disks: diskstats::read_stats(root).unwrap_or_default(),
    })
}

/// Updates the candidates' mapping growth and positions from the process now.
fn follow(root: &SysRoot, pid: u32, cands: &mut [Candidate]) {
    // Unreadable (the process is exiting): nothing learnt, nothing reset.
    let Some(maps) = task::file_mappings(root, pid) else {
        return;
    };
    for c in cands.iter_mut() {
        let mut now = BTreeMap::new();
        for m in maps.iter().filter(|m| {
            m.inode == c.inode && Path::new(&m.path) == c.path && !m.perms.contains('x')
        }) {
            let before = c.rss_last.get(&m.start).copied().unwrap_or(0);
            c.rss_growth += if m.rss_bytes >= before {
                m.rss_bytes - before
            } else {
                m.rss_bytes
            };
            now.insert(m.start, m.rss_bytes);
        }
        c.rss_last = now;
        for (fd, _) in &c.fds {
            let p = root.proc(&format!("{pid}/fdinfo/{fd}"));
            if let Some(info) = root
                .read_text(&p, 64 << 10)
                .ok()
                .and_then(|t| fdinfo::parse_fdinfo(&t))
            {
                let last = c.pos_last.insert(*fd, info.pos).unwrap_or(info.pos);
                let moved = if info.pos >= last {
                    info.pos - last
                } else {
                    info.pos
                };
                *c.pos_growth.entry(*fd).or_default() += moved;
            }
        }
    }
}

fn fs_name(f: &File) -> Option<String> {
    let magic = crate::sys::kernel::measure::files::fs_magic(f)?;
    Some(
        match magic {
            0x9123_683E => "btrfs",
            0xEF53 => "ext4",
            0x5846_5342 => "xfs",
            0x0102_1994 => "tmpfs",
            0x8584_58f6 => "ramfs",
            _ => "other",
        }
        .to_owned(),
    )
}

/// The block devices of the file's filesystem (every btrfs member).
/// The members holding `f`'s bytes, most first (btrfs, root: the chunk
/// tree); `None` when they cannot be read.
fn members_of(f: &File, via: &Path, size: u64) -> Option<Vec<MemberShare>> {
    let chunks = btrfs::chunk_records(via).ok().flatten()?;
    let extents = extents::physical_extents(f, size).ok()?;
    let paths: BTreeMap<u64, String> = btrfs::devices(via)
        .unwrap_or_default()
        .into_iter()
        .map(|d| {
            (
                d.devid,
                if d.path.is_empty() {
                    "missing".to_owned()
                } else {
                    d.path
                },
            )
        })
        .collect();
    let mut out: Vec<MemberShare> = members::bytes_per_devid(&extents, &chunks)
        .into_iter()
        .map(|(devid, bytes)| MemberShare {
            devid,
            device: paths
                .get(&devid)
                .cloned()
                .unwrap_or_else(|| "missing".to_owned()),
            bytes,
        })
        .collect();
    out.sort_by_key(|m| (std::cmp::Reverse(m.bytes), m.devid));
    Some(out)
}

fn devices_of(root: &SysRoot, f: &File, fs: Option<&str>, stats: &[DiskStat]) -> Vec<BlockDevice> {
    let via = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
    if fs == Some("btrfs") {
        return btrfs::devices(&via)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| !d.path.is_empty())
            .filter_map(|d| diskstats::by_path(stats, Path::new(&d.path)))
            .collect();
    }
    let _ = root;
    f.metadata()
        .ok()
        .and_then(|m| {
            let (major, minor) = crate::sys::kernel::measure::files::dev_numbers(m.dev());
            diskstats::by_number(stats, major, minor)
        })
        .into_iter()
        .collect()
}

fn stat_of<'a>(stats: &'a [DiskStat], d: &BlockDevice) -> Option<&'a DiskStat> {
    stats
        .iter()
        .find(|s| s.major == d.major && s.minor == d.minor)
}

/// A counter summed over `devs`.
fn device_sum(stats: &[DiskStat], devs: &[BlockDevice], field: impl Fn(&DiskStat) -> u64) -> u64 {
    devs.iter()
        .filter_map(|d| stat_of(stats, d))
        .map(field)
        .sum()
}

fn device_bytes(stats: &[DiskStat], devs: &[BlockDevice]) -> u64 {
    device_sum(stats, devs, DiskStat::bytes_read)
}

/// Each device's bytes, requests and busy share between two samples.
fn device_loads(first: &Sample, last: &Sample, devs: &[BlockDevice]) -> Vec<DeviceLoad> {
    let window_ms = last.at.duration_since(first.at).as_secs_f64() * 1000.0;
    devs.iter()
        .filter_map(|d| {
            let (a, b) = (stat_of(&first.disks, d)?, stat_of(&last.disks, d)?);
            Some(DeviceLoad {
                name: d.name.clone(),
                bytes: b.bytes_read().saturating_sub(a.bytes_read()),
                requests: b.reads.saturating_sub(a.reads),
                busy_percent: if window_ms > 0.0 {
                    (100.0 * b.busy_ms.saturating_sub(a.busy_ms) as f64 / window_ms).min(100.0)
                } else {
                    0.0
                },
            })
        })
        .collect()
}

/// Largest tail of a loader's log read for the rate it printed.
const LOG_TAIL: u64 = 64 << 10;

/// The loader's own figure: `--claimed`, or the last rate it printed to
/// its standard output or error when that is a regular file (its tail:
/// through a held duplicate of a readable descriptor, or the file a
/// write-only one names, checked to be that file).
fn claimed_rate(
    root: &SysRoot,
    opts: &WatchOptions,
    share: Option<f64>,
    storage_rate: f64,
    devices: Option<&DeviceWindow>,
    notes: &mut Vec<String>,
) -> Option<ClaimedRate> {
    let make =
        |rate: f64, source: String| analysis::claimed(rate, source, share, storage_rate, devices);
    if let Some(r) = opts.claimed {
        return Some(make(r, "--claimed".to_owned()));
    }
    let (open, _) = fdinfo::open_files_and_skipped(root, opts.pid).ok()?;
    for f in open.iter().filter(|f| f.fd == 1 || f.fd == 2) {
        let shown = crate::report::text::escape_path(&f.path);
        // Readable: through a held duplicate of its descriptor. Write-only
        // (`> loader.log`): the file its descriptor names, opened as a file
        // a user placed, and only if it is that very file (device, inode);
        // never reopened through /proc.
        let tail = if f.info.readable() {
            fdinfo::reopen(opts.pid, f.fd, f.dev, f.ino)
                .ok()
                .and_then(|file| {
                    use std::os::unix::fs::FileExt;
                    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                    let start = len.saturating_sub(LOG_TAIL);
                    let mut buf = vec![0u8; (len - start) as usize];
                    let n = file.read_at(&mut buf, start).ok()?;
                    buf.truncate(n);
                    Some(buf)
                })
        } else {
            match crate::sys::fs::input::read_user_tail(&f.path, LOG_TAIL, Some((f.dev, f.ino))) {
                Ok(b) => Some(b),
                Err(e) => {
                    notes.push(format!(
                        "its output goes to {shown} (fd {}), not read ({}): give the rate it prints with --claimed",
                        f.fd,
                        e.message()
                    ));
                    None
                }
            }
        };
        let Some(buf) = tail else {
            continue;
        };
        if let Some((rate, line)) = analysis::last_printed_rate(&String::from_utf8_lossy(&buf)) {
            return Some(make(
                rate,
                format!(
                    "its log {shown} (fd {}): {}",
                    f.fd,
                    crate::report::text::escape_control(&line)
                ),
            ));
        }
    }
    None
}

fn thread_deltas(
    first: &Sample,
    last: &Sample,
    d_counts: &BTreeMap<u32, (u32, u32)>,
) -> Vec<(u32, String, ThreadDelta)> {
    let ticks = task::clock_ticks() as f64;
    last.threads
        .iter()
        .map(|t| {
            let before = first.threads.iter().find(|b| b.tid == t.tid);
            let (io0, st0) = match before {
                Some(b) => (b.io.unwrap_or_default(), b.stat),
                // Started in the window: from zero.
                None => (IoCounters::default(), task::ProcStat::default()),
            };
            let io1 = t.io.unwrap_or_default();
            let (d, n) = d_counts.get(&t.tid).copied().unwrap_or((0, 0));
            (
                t.tid,
                t.name.clone(),
                ThreadDelta {
                    read_call_bytes: io1.rchar.saturating_sub(io0.rchar),
                    storage_read_bytes: io1.read_bytes.saturating_sub(io0.read_bytes),
                    faults: (t.stat.minflt + t.stat.majflt).saturating_sub(st0.minflt + st0.majflt),
                    cpu_seconds: ((t.stat.utime + t.stat.stime)
                        .saturating_sub(st0.utime + st0.stime))
                        as f64
                        / ticks,
                    d_samples: d,
                    samples: n,
                },
            )
        })
        .collect()
}

/// `read-test --pid`: watches `opts.pid`, its seconds counted on the
/// `ui`'s progress bar.
pub fn run(opts: &WatchOptions, ui: &dyn crate::ui::Ui) -> Result<WatchReport> {
    let bar = ui.progress("read-test --pid {bar:30} {pos}/{len} s");
    let result = watch(opts, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish();
    result
}

/// Watches `opts.pid`. `tick(elapsed, total)` is called as time passes.
fn watch(opts: &WatchOptions, tick: &mut dyn FnMut(f64, f64)) -> Result<WatchReport> {
    if !(1..=3600).contains(&opts.seconds) {
        return Err(Error::usage("--seconds must be between 1 and 3600"));
    }
    let root = &opts.sysroot;
    let pid = opts.pid;
    let id = task::identity(root, pid)?;
    if id.kernel_thread {
        return Err(kernel_thread(pid, &id.comm));
    }
    if !is_root() && id.uid != crate::sys::kernel::measure::ids::real_uid() {
        return Err(other_users(pid, id.uid));
    }
    let saved_report = opts.saved.as_deref().map(load_saved).transpose()?;
    let command_line = crate::sys::proc::procs::command_of(root, pid);
    let (mut cands, mapped_paths, skipped_descriptors) = candidates(root, pid)?;
    let mut notes = descriptor_notes(&skipped_descriptors);

    let total = Duration::from_secs(u64::from(opts.seconds));
    let Some(first) = sample(root, pid) else {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("pid {pid} exited before it could be watched"),
        ));
    };
    let started_unix_ms = first
        .wall
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let (last_good, d_counts, end) = watch_window(root, &id, &first, total, &mut cands, tick)?;
    let last = last_good.unwrap_or_else(|| Sample {
        at: first.at,
        wall: first.wall,
        io: first.io,
        threads: first.threads.clone(),
        disks: first.disks.clone(),
    });
    let seconds = last.at.duration_since(first.at).as_secs_f64();
    let per_sec = |b: u64| {
        if seconds > 0.0 {
            b as f64 / seconds
        } else {
            0.0
        }
    };

    // What the process read.
    let read_calls = last.io.rchar.saturating_sub(first.io.rchar);
    let storage = last.io.read_bytes.saturating_sub(first.io.read_bytes);
    let mapped_in: u64 = cands.iter().map(|c| c.rss_growth).sum();
    let (bytes, sources) = attribute_reads(&cands, read_calls, &mut notes);
    let mapping_read = mapped_in >= MIN_READ_BYTES;
    let d = thread_deltas(&first, &last, &d_counts);
    let threads: Vec<_> = d
        .into_iter()
        .map(|(tid, name, delta)| {
            analysis::thread_activity(tid, name, &delta, seconds, mapping_read)
        })
        .collect();
    let reading_threads = threads.iter().filter(|t| t.reading).count() as u32;
    let (files, idle_files, main_handle) = watched_files(&mut cands, &bytes, &sources, &per_sec);
    let (devices, ceiling) = device_window(root, main_handle.as_ref(), (&first, &last), &per_sec);
    let saved_run = compare_saved(saved_report.as_ref(), opts, &files, &mut notes);

    let whole = |p: u32| crate::sys::proc::procs::command_line(root, p).unwrap_or_default();
    let own_line = whole(pid);
    let parents: Vec<String> = task::ancestors(root, pid, 3)
        .into_iter()
        .map(whole)
        .collect();
    let env = task::environ(root, pid, loaders::ENV_NAMES);
    let thread_names: Vec<String> = last.threads.iter().map(|t| t.name.clone()).collect();
    let loader = loaders::identify(&loaders::Signals {
        comm: &id.comm,
        command_line: &own_line,
        parents: &parents,
        mapped: &mapped_paths,
        thread_names: &thread_names,
        env: &env,
    });
    let logical = read_calls.saturating_add(mapped_in);
    let share = analysis::page_cache_share(read_calls, mapped_in, storage);
    let rate = per_sec(logical);
    let fs_members = files
        .first()
        .filter(|f| f.fs_type.as_deref() == Some("btrfs"))
        .and(devices.as_ref())
        .map(|d| d.devices.len());
    let device_read_ms = devices.as_ref().map_or(0, |d| {
        device_sum(&last.disks, &d.devices, |s| s.read_ms).saturating_sub(device_sum(
            &first.disks,
            &d.devices,
            |s| s.read_ms,
        ))
    });
    let requests = analysis::request_shape(
        last.io.syscr.saturating_sub(first.io.syscr),
        read_calls,
        devices.as_ref(),
        device_read_ms,
        seconds,
    );
    let origin = analysis::origin(logical, storage, devices.as_ref());
    let claimed = claimed_rate(
        root,
        opts,
        share,
        per_sec(storage.min(logical)),
        devices.as_ref(),
        &mut notes,
    );
    let v = analysis::verdict(&Observed {
        pid,
        command: &id.comm,
        files: &files,
        threads: &threads,
        rate,
        logical_bytes: logical,
        page_cache_share: share,
        devices: devices.as_ref(),
        ceiling: ceiling.as_ref(),
        loader: &loader,
        fs_members,
        cufile: loaders::uses_cufile(&mapped_paths),
        saved: saved_run.as_ref(),
    });
    let summary = ended_summary(v.summary, end, seconds, pid);
    Ok(WatchReport {
        pid,
        command: id.comm.clone(),
        command_line,
        started_unix_ms,
        seconds,
        window_end: end,
        summary,
        bottleneck: v.bottleneck,
        exit_code: crate::model::exit::OK.code,
        read_call_bytes: read_calls,
        storage_read_bytes: storage,
        mapped_in_bytes: mapped_in,
        rate_bytes_per_sec: rate,
        page_cache_share: share,
        reading_threads,
        threads,
        files,
        idle_files,
        devices,
        ceiling,
        known_program: loader.known.map(|k| k.name().to_owned()),
        loader: loaders::seen(&loader),
        requests: Some(requests),
        origin: Some(origin),
        claimed,
        settings: v.settings,
        traps: v.traps,
        saved_run,
        notes,
        skipped_descriptors,
    })
}

/// The notes about descriptors that were not read.
fn descriptor_notes(skipped: &[fdinfo::SkippedFd]) -> Vec<String> {
    let mut notes = Vec::new();
    let named: Vec<String> = skipped
        .iter()
        .filter(|s| s.kind == FdKind::OPath || s.path.is_absolute())
        .map(|s| format!("fd {} ({}): {}", s.fd, s.path.display(), s.kind.describe()))
        .collect();
    if !named.is_empty() {
        notes.push(format!(
            "descriptors not read (not regular files, or O_PATH): {}",
            named.join("; ")
        ));
    }
    if !is_root() {
        notes.push("not root: files the process only maps cannot be opened (map_files), so their layout and cache residency are unknown".to_owned());
    }
    notes
}

/// Per thread: (samples in D state, samples).
type DCounts = BTreeMap<u32, (u32, u32)>;

/// The watch window: mappings and positions followed often, a full sample
/// every [`SAMPLE`], until `total` passed or the process ended. Returns the
/// last good sample, each thread's D-state counts and how it ended.
fn watch_window(
    root: &SysRoot,
    id: &task::Identity,
    first: &Sample,
    total: Duration,
    cands: &mut [Candidate],
    tick: &mut dyn FnMut(f64, f64),
) -> Result<(Option<Sample>, DCounts, WindowEnd)> {
    let pid = id.pid;
    let mut last_good: Option<Sample> = None;
    let mut d_counts: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    let mut end = WindowEnd::Complete;
    let mut next_full = first.at + SAMPLE;
    loop {
        signals::check()?;
        let elapsed = first.at.elapsed();
        tick(elapsed.as_secs_f64(), total.as_secs_f64());
        // The window ends with a full sample, taken right after a look at
        // the mappings, so both end at the same moment.
        let done = elapsed >= total;
        // Mappings and positions are followed more often than the rest (a
        // loader that unmaps and maps again loses the growth since the last
        // look): every FOLLOW_MIN, or ten times what a look costs.
        let t = Instant::now();
        follow(root, pid, cands);
        let fast = (t.elapsed() * 10).clamp(FOLLOW_MIN, SAMPLE);
        let now = Instant::now();
        if now < next_full && !done {
            thread::sleep(fast.min(next_full - now).min(total.saturating_sub(elapsed)));
            continue;
        }
        next_full += SAMPLE;
        let s = sample(root, pid);
        // The sample counts only if the process is still the same one.
        match task::still(root, id) {
            Liveness::Running => {}
            Liveness::Exited => {
                end = WindowEnd::Exited;
                break;
            }
            Liveness::Reused => {
                end = WindowEnd::PidReused;
                break;
            }
        }
        let Some(s) = s else {
            end = WindowEnd::Exited;
            break;
        };
        for t in &s.threads {
            let e = d_counts.entry(t.tid).or_default();
            e.1 += 1;
            if t.stat.state == 'D' {
                e.0 += 1;
            }
        }
        last_good = Some(s);
        if done {
            break;
        }
        let elapsed = first.at.elapsed();
        if elapsed < total {
            thread::sleep(fast.min(total - elapsed));
        }
    }
    Ok((last_good, d_counts, end))
}

/// Read calls per file: all of them to the one big file open by
/// descriptor when there is one; else descriptor positions (read()), and
/// what is left to the one file whose position did not move (pread), when
/// there is exactly one. Per file (direct, buffered, mapped) bytes and
/// where the figure comes from.
fn attribute_reads(
    cands: &[Candidate],
    read_calls: u64,
    notes: &mut Vec<String>,
) -> (Vec<(u64, u64, u64)>, Vec<&'static str>) {
    let mut bytes: Vec<(u64, u64, u64)> = cands.iter().map(|c| (0, 0, c.rss_growth)).collect();
    let mut sources: Vec<&'static str> = vec!["descriptor positions"; cands.len()];
    let with_fds: Vec<usize> = cands
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.fds.is_empty() && c.size >= MIN_READ_BYTES)
        .map(|(i, _)| i)
        .collect();
    let add = |b: &mut (u64, u64, u64), c: &Candidate, n: u64| {
        if c.fds.iter().any(|(_, d)| *d) {
            b.0 += n;
        } else {
            b.1 += n;
        }
    };
    if let [only] = with_fds.as_slice() {
        add(&mut bytes[*only], &cands[*only], read_calls);
        sources[*only] = "read calls of the process (the one file it has open)";
    } else {
        let mut by_pos = 0u64;
        for &i in &with_fds {
            let moved: u64 = cands[i].pos_growth.values().sum();
            by_pos += moved;
            add(&mut bytes[i], &cands[i], moved);
        }
        let rest = read_calls.saturating_sub(by_pos);
        let still: Vec<usize> = with_fds
            .iter()
            .copied()
            .filter(|&i| bytes[i].0 + bytes[i].1 == 0)
            .collect();
        if rest >= MIN_READ_BYTES {
            if let [only] = still.as_slice() {
                add(&mut bytes[*only], &cands[*only], rest);
                sources[*only] = "read calls of the process (pread: positions do not move)";
            } else {
                notes.push(format!(
                    "{} of read calls could not be given to one file ({} open files did not move their position; pread does not)",
                    crate::parse::size::format_iec(rest),
                    still.len()
                ));
            }
        }
    }
    (bytes, sources)
}

/// The file this process read most, held, with its filesystem and data
/// profiles.
type MainHandle = (File, Option<String>, Vec<crate::model::profile::Profile>);

/// The files read in the window, most read first, with their layout,
/// residency and members; how many were idle; the main one, held.
fn watched_files(
    cands: &mut [Candidate],
    bytes: &[(u64, u64, u64)],
    sources: &[&'static str],
    per_sec: &dyn Fn(u64) -> f64,
) -> (Vec<WatchedFile>, usize, Option<MainHandle>) {
    let mut files = Vec::new();
    let mut idle_files = 0;
    let mut main_handle: Option<MainHandle> = None;
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(bytes[i].0 + bytes[i].1 + bytes[i].2));
    for i in order {
        let (dio, buf, mm) = bytes[i];
        let c = &mut cands[i];
        let n = dio + buf + mm;
        if n < MIN_READ_BYTES {
            idle_files += 1;
            continue;
        }
        let mut ways: Vec<(u64, ReadWay)> = vec![
            (dio, ReadWay::Direct),
            (buf, ReadWay::Buffered),
            (mm, ReadWay::Mmap),
        ];
        ways.retain(|(b, _)| *b > 0);
        ways.sort_by_key(|(b, _)| std::cmp::Reverse(*b));
        let (mut fs_type, mut profiles, mut nocow, mut layout, mut resident_after) =
            (None, Vec::new(), None, None, None);
        let mut held_by = None;
        if let Some(h) = &c.handle {
            let via = PathBuf::from(format!("/proc/self/fd/{}", h.as_raw_fd()));
            fs_type = fs_name(h);
            if fs_type.as_deref() == Some("btrfs") {
                profiles = btrfs::data_profiles(&via).unwrap_or_default();
                nocow = filesystem::inode_flags_of(h, &via)
                    .ok()
                    .flatten()
                    .map(|f| f.intersects(ioctl::FS_NOCOW_FL));
            }
            layout = extents::layout(h, c.size).ok();
            if fs_type.as_deref() == Some("btrfs") {
                held_by = members_of(h, &via, c.size);
            }
            resident_after = pagecache::resident_bytes(h, c.size, &c.path).ok();
        }
        let opened = c.handle.is_some();
        let source = match ways.first().map(|w| w.1) {
            Some(ReadWay::Mmap) => "resident bytes of its mappings (smaps Rss growth)",
            _ => sources[i],
        };
        if main_handle.is_none()
            && let Some(h) = c.handle.take()
        {
            main_handle = Some((h, fs_type.clone(), profiles.clone()));
        }
        files.push(WatchedFile {
            path: c.path.clone(),
            inode: c.inode,
            size_bytes: c.size,
            fs_type,
            data_profiles: profiles,
            nocow,
            fds: c.fds.iter().map(|f| f.0).collect(),
            o_direct: c.fds.iter().any(|f| f.1),
            mapped_bytes: c.maps.iter().map(|(s, e)| e - s).sum(),
            ways: ways.iter().map(|w| w.1).collect(),
            bytes_read: n,
            bytes_source: source.to_owned(),
            rate_bytes_per_sec: per_sec(n),
            resident_bytes_before: c.resident_before,
            resident_bytes_after: resident_after,
            layout,
            members: held_by,
            note: (!opened)
                .then(|| "could not be opened here: layout and residency unknown".to_owned()),
        });
    }

    (files, idle_files, main_handle)
}

/// The main file's member devices: what they read in the window, and the
/// ceiling of reading them.
fn device_window(
    root: &SysRoot,
    main_handle: Option<&MainHandle>,
    (first, last): (&Sample, &Sample),
    per_sec: &dyn Fn(u64) -> f64,
) -> (
    Option<DeviceWindow>,
    Option<crate::readtest::report::Ceiling>,
) {
    match main_handle {
        Some((h, fs, profiles)) => {
            let devs = devices_of(root, h, fs.as_deref(), &last.disks);
            let b =
                device_bytes(&last.disks, &devs).saturating_sub(device_bytes(&first.disks, &devs));
            let ceiling =
                crate::readtest::read_ceiling(root, &devs, profiles, fs.as_deref().unwrap_or(""));
            let loads = device_loads(first, last, &devs);
            (
                (!devs.is_empty()).then(|| DeviceWindow {
                    devices: devs,
                    bytes: b,
                    rate_bytes_per_sec: per_sec(b),
                    loads,
                }),
                ceiling,
            )
        }
        None => (None, None),
    }
}

/// `--saved REPORT`: the read-test run of the same file, to compare with;
/// another file's run is noted and left out.
fn compare_saved(
    saved_report: Option<&crate::readtest::ReadTestReport>,
    opts: &WatchOptions,
    files: &[WatchedFile],
    notes: &mut Vec<String>,
) -> Option<SavedRun> {
    saved_report.and_then(|r| {
        let w = r.winner.as_ref()?;
        let threads = r.methods.iter().find(|m| m.method == w.method).and_then(|m| m.threads);
        let main = files.first();
        let same = main.is_some_and(|f| {
            f.size_bytes == r.file.size_bytes && f.path.file_name() == r.file.path.file_name()
        });
        if !same {
            notes.push(format!(
                "the saved read-test run is of {} ({}), not of the file this process read: not compared",
                crate::report::text::escape_path(&r.file.path),
                crate::parse::size::format_iec(r.file.size_bytes)
            ));
            return None;
        }
        Some(SavedRun {
            report: opts.saved.clone().unwrap_or_default(),
            method: w.method,
            threads,
            rate_bytes_per_sec: w.rate_bytes_per_sec,
            loader_ratio: main.map(|f| f.rate_bytes_per_sec / w.rate_bytes_per_sec),
        })
    })
}

/// The verdict's sentence, with how the window ended early.
fn ended_summary(summary: String, end: WindowEnd, seconds: f64, pid: u32) -> String {
    let mut summary = summary;
    match end {
        WindowEnd::Complete => {}
        WindowEnd::Exited => {
            summary = format!(
                "{summary} The process exited after {seconds:.1} s: this is what was seen until then."
            );
        }
        WindowEnd::PidReused => {
            summary = format!(
                "{summary} After {seconds:.1} s pid {pid} belonged to another process (a later start time): this is what the first one did until then."
            );
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_seconds_and_missing_pids() {
        let mut opts = WatchOptions {
            pid: std::process::id(),
            seconds: 0,
            saved: None,
            claimed: None,
            sysroot: SysRoot::host(),
        };
        let mut tick = |_: f64, _: f64| {};
        assert!(matches!(
            watch(&opts, &mut tick).unwrap_err().kind(),
            ErrorKind::Usage
        ));
        opts.seconds = 1;
        opts.pid = 0;
        assert!(matches!(
            watch(&opts, &mut tick).unwrap_err().kind(),
            ErrorKind::NotFound
        ));
    }

    #[test]
    fn report_round_trips_through_json() {
        let r = WatchReport {
            pid: 7,
            command: "loader".into(),
            command_line: "loader x".into(),
            started_unix_ms: 1,
            seconds: 1.0,
            window_end: WindowEnd::Exited,
            summary: "s".into(),
            bottleneck: report::Bottleneck::Cpu,
            exit_code: 0,
            read_call_bytes: 1,
            storage_read_bytes: 2,
            mapped_in_bytes: 3,
            rate_bytes_per_sec: 4.0,
            page_cache_share: Some(0.5),
            reading_threads: 1,
            threads: vec![],
            files: vec![],
            idle_files: 0,
            devices: None,
            ceiling: None,
            known_program: None,
            loader: None,
            requests: None,
            origin: None,
            claimed: None,
            settings: vec![],
            traps: vec![],
            saved_run: None,
            notes: vec![],
            skipped_descriptors: vec![],
        };
        let back: WatchReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
