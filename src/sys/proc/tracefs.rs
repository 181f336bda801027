//! Per-file evidence of what an O_DIRECT write did, from three kernel
//! tracepoints counted in a private trace instance:
//!
//! - `writeback:writeback_dirty_folio` (`bdi NAME: ino=N index=M`): a folio
//!   of the file was dirtied in the page cache;
//! - `filemap:mm_filemap_add_to_page_cache` (`dev MA:MI ino HEX ... order=O`):
//!   a folio of 2^O pages was added to the page cache. With large folios
//!   (btrfs on 7.x) one dirtied folio is many pages, so this is what says
//!   how many *bytes* went through the page cache;
//! - `iomap:iomap_dio_rw_begin` (`dev MA:MI ino 0xHEX ... length 0xLEN ...
//!   dio_flags FLAGS`, kernels 6.2 and later): the write reached the
//!   direct-I/O path, and whether it was bounced (`IOMAP_DIO_BOUNCE`: the
//!   data copied into kernel pages so checksums stay true, 7.3).
//!
//! Whichever of them the kernel has are used; the writeback one is needed.
//! The kernel filters the events (backing device or superblock device,
//! inode, and for our own writes the writing thread), so only the watched
//! files' events reach the ring buffer; it is drained (trace_pipe,
//! non-blocking) as the caller goes, and overruns are counted, so a large
//! write cannot make a count silently short. Hist triggers would aggregate
//! in the kernel, but they need CONFIG_HIST_TRIGGERS, which many kernels
//! (this project's test machine included) lack.
//!
//! The instance (`instances/btrfs-lab-<pid>-<6 hex>`) is made for one run
//! and removed on drop, so on every exit path that runs destructors (errors,
//! SIGINT/SIGTERM handled as errors, panics). A SIGKILLed run leaves it: the
//! next run removes instances of ours whose pid is dead
//! ([`remove_stale`]). Only files inside the instance are written; the
//! global trace settings (tracing_on, the global events' enable and filter,
//! the global buffer) are never touched.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, mount};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;

/// Every instance we make is named `btrfs-lab-<pid>-<6 hex>`.
pub(crate) const INSTANCE_PREFIX: &str = "btrfs-lab-";
/// The dirtied-folio event, relative to an instance's `events/` (needed).
pub(crate) const EVENT: &str = "writeback/writeback_dirty_folio";
/// Folios added to the page cache, with their order (used when present).
pub(crate) const CACHE_EVENT: &str = "filemap/mm_filemap_add_to_page_cache";
/// An O_DIRECT call entering iomap's direct-I/O path (6.2 and later).
pub(crate) const DIO_EVENT: &str = "iomap/iomap_dio_rw_begin";
/// `IOMAP_DIO_BOUNCE` in `include/linux/iomap.h` of 7.2 and 7.3 (`1 << 4`;
/// Debian's linux-source-7.2 7.2.13-1 line 675, linux-source-7.3
/// 7.3.4-1~bpo13+1 line 674). Their trace format does not name it (its
/// `IOMAP_DIO_STRINGS` stop at `DIO_FSBLOCK_ALIGNED`), so it is printed as
/// the leftover `0x10`; a kernel whose format names bit 4 otherwise, or
/// names `BOUNCE`, is read by the names ([`BounceRule`]).
const DIO_BOUNCE_BIT: u32 = 1 << 4;
/// Per-CPU ring buffer of our instance, KiB (one event is ~60 bytes): up
/// to 16 MiB per CPU, 64 MiB in all ([`buffer_kb`]).
const BUFFER_KB_MAX: u64 = 16 << 10;
/// The instance's ring buffers together, KiB, at most.
const BUFFER_KB_TOTAL: u64 = 64 << 10;

/// The per-CPU buffer size for `cpus` CPUs: a program dirtying folios at
/// full speed must not overrun it between two drains, and the kernel
/// memory it takes stays bounded on many-CPU machines.
pub(crate) fn buffer_kb(cpus: u64) -> u64 {
    (BUFFER_KB_TOTAL / cpus.max(1)).clamp(1 << 10, BUFFER_KB_MAX)
}
/// Longest filter we write (the kernel accepts a page).
const FILTER_MAX: usize = 3500;

/// Where tracefs is mounted in this process's view, if anywhere.
pub(crate) fn find_tracefs(root: &SysRoot) -> Option<PathBuf> {
    crate::sys::proc::mountinfo::find_type(root, "tracefs")
}

/// Mounts tracefs at /sys/kernel/tracing in the private mount namespace of
/// this process (see [`crate::sys::proc::counters::enter_private_mount_namespace`]).
pub(crate) fn mount_private_tracefs() -> Result<PathBuf> {
    let target = PathBuf::from("/sys/kernel/tracing");
    crate::sys::proc::counters::enter_private_mount_namespace()?;
    mount("tracefs", &target, "tracefs", MountFlags::empty(), None)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot mount tracefs at", &target))?;
    Ok(target)
}

/// Whether the tracefs at `dir` has the needed event and instances.
fn usable(dir: &Path) -> std::result::Result<(), String> {
    if !dir.join("events").join(EVENT).join("format").exists() {
        return Err(format!(
            "this kernel has no {EVENT} tracepoint (or its tracefs lacks instances)"
        ));
    }
    if !dir.join("instances").is_dir() {
        return Err("this kernel's tracefs has no instances directory".into());
    }
    Ok(())
}

/// A tracefs to use: the mounted one, else (root, host, allowed) a private
/// mount, for a process that must not stay in a private mount namespace
/// (the copies of every mount it holds keep other filesystems' devices
/// busy: bench, probe-dio, doctor --deep): when tracefs is not mounted, it is mounted
/// in a private namespace only while its root is opened, and reached
/// afterwards through that descriptor (`/proc/self/fd/N`), which is
/// returned to be held as long as the path is used
/// ([`FolioTrace::hold`]). Must be called before the process starts
/// threads.
pub(crate) fn locate_held(
    root: &SysRoot,
    allow_private_mount: bool,
) -> std::result::Result<(PathBuf, Option<File>), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("the per-file tracepoint is in tracefs, which needs root".into());
    }
    if let Some(dir) = find_tracefs(root) {
        usable(&dir)?;
        return Ok((dir, None));
    }
    if !(allow_private_mount && root.is_host()) {
        return Err("tracefs is not mounted".into());
    }
    let held = crate::sys::proc::counters::with_private_ns(|| {
        let dir = mount_private_tracefs()?;
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&dir)
            .map_err(|e| Error::from_io(&e, "cannot open", &dir))
    })
    .map_err(|e| e.message().to_owned())?;
    let dir = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&held)
    ));
    usable(&dir)?;
    Ok((dir, Some(held)))
}

/// The pid an instance name of ours carries; `None` for any other name.
pub(crate) fn instance_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    let (pid, nonce) = rest.split_once('-')?;
    let ok_pid = !pid.is_empty() && pid.len() <= 10 && pid.bytes().all(|b| b.is_ascii_digit());
    let ok_nonce = nonce.len() == 6 && nonce.bytes().all(|b| b.is_ascii_hexdigit());
    if !(ok_pid && ok_nonce) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Removes the instances of ours whose pid is no longer running (a run
/// killed with SIGKILL); returns their names. Other instances, and ours of
/// live processes, are left alone.
pub(crate) fn remove_stale(tracefs: &Path, alive: impl Fn(u32) -> bool) -> Vec<String> {
    let Ok(entries) = fs::read_dir(tracefs.join("instances")) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stale = instance_pid(&name).is_some_and(|pid| !alive(pid));
        if stale && fs::remove_dir(e.path()).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

/// Files to watch on one filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watch {
    /// The backing device as the writeback tracepoint names it (`btrfs-3`).
    pub bdi: String,
    /// The superblock's device (`major`, `minor`), as /proc/self/mountinfo
    /// shows it: what the filemap and iomap tracepoints name (on btrfs not
    /// the `st_dev` of a file, which is its subvolume's).
    pub dev: (u32, u32),
    /// Inode numbers.
    pub inodes: Vec<u64>,
}

/// What the tracepoints saw of one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FileCounts {
    /// writeback_dirty_folio events.
    pub dirtied_folios: u64,
    /// Folios added to the page cache (filemap), when that event is traced.
    pub cached_folios: u64,
    /// Their pages (each folio 2^order).
    pub cached_pages: u64,
    /// O_DIRECT calls that entered the direct-I/O path (iomap).
    pub dio_calls: u64,
    /// Their bytes.
    pub dio_bytes: u64,
    /// Of those, calls the kernel bounced (`IOMAP_DIO_BOUNCE`).
    pub bounced_calls: u64,
}

/// Which of the events this kernel has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Events {
    /// filemap:mm_filemap_add_to_page_cache, with its `order` field.
    pub cache: bool,
    /// iomap:iomap_dio_rw_begin.
    pub dio: bool,
    /// How a bounced call shows in the dio event.
    pub bounce: BounceRule,
}

/// How `IOMAP_DIO_BOUNCE` shows in `iomap_dio_rw_begin`'s `dio_flags`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum BounceRule {
    /// The format names it (`...BOUNCE`).
    Named,
    /// The format does not name bit 4: it is printed as leftover hex.
    #[default]
    Bit4,
    /// The format names bit 4 as something else: bounces cannot be seen.
    Unknown,
}

impl BounceRule {
    /// From the event's `format` file.
    pub(crate) fn from_format(format: &str) -> Self {
        let flags = format.find("REC->dio_flags").map_or("", |i| &format[i..]);
        let flags = &flags[..flags.find("REC->aio").unwrap_or(flags.len())];
        if flags.contains("BOUNCE") {
            BounceRule::Named
        } else if ["(1 << 4)", "0x10)", "0x00000010"]
            .iter()
            .any(|b| flags.contains(b))
        {
            BounceRule::Unknown
        } else {
            BounceRule::Bit4
        }
    }

    /// Whether a printed `dio_flags` value (`DIO_PARTIAL|0x10`) says bounced.
    pub(crate) fn bounced(self, printed: &str) -> bool {
        printed.split('|').any(|t| match self {
            BounceRule::Named => t.contains("BOUNCE"),
            BounceRule::Bit4 => t
                .strip_prefix("0x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .is_some_and(|v| v & DIO_BOUNCE_BIT != 0),
            BounceRule::Unknown => false,
        })
    }
}

fn kernel_dev((major, minor): (u32, u32)) -> u64 {
    (u64::from(major) << 20) | u64::from(minor)
}

/// The kernel filters for the watched files, per event: the writeback
/// one by backing device (`(name == "btrfs-3" && (ino == 257 || ...)) ||
/// ...`), the filemap and iomap ones by superblock device, each prefixed
/// with `common_pid == TID &&` when only one thread's writes count.
pub(crate) fn filters_for(watch: &[Watch], tid: Option<u32>) -> Result<[String; 3]> {
    let mut parts: [Vec<String>; 3] = Default::default();
    for w in watch {
        if w.bdi.is_empty() || w.bdi.contains(['"', '\\', '\n']) || w.inodes.is_empty() {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("cannot filter the tracepoint on {:?}", w.bdi),
            ));
        }
        let any = |field: &str| {
            w.inodes
                .iter()
                .map(|i| format!("{field} == {i}"))
                .collect::<Vec<_>>()
                .join(" || ")
        };
        let dev = kernel_dev(w.dev);
        parts[0].push(format!("(name == \"{}\" && ({}))", w.bdi, any("ino")));
        parts[1].push(format!("(s_dev == {dev} && ({}))", any("i_ino")));
        parts[2].push(format!("(dev == {dev} && ({}))", any("ino")));
    }
    if parts[0].is_empty() {
        return Err(Error::new(ErrorKind::Usage, "no file to watch"));
    }
    let out = parts.map(|p| match tid {
        Some(t) => format!("common_pid == {t} && ({})", p.join(" || ")),
        None => p.join(" || "),
    });
    if out.iter().any(|f| f.len() > FILTER_MAX) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "too many files to watch at once ({}): the tracepoint filter would be too long",
                watch.iter().map(|w| w.inodes.len()).sum::<usize>()
            ),
        ));
    }
    Ok(out)
}

/// One event line of trace_pipe, as far as it matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// writeback_dirty_folio of (bdi, ino).
    Dirtied(&'a str, u64),
    /// mm_filemap_add_to_page_cache of (dev, ino), of 2^order pages.
    Cached((u32, u32), u64, u32),
    /// iomap_dio_rw_begin of (dev, ino): bytes, printed dio_flags.
    Dio((u32, u32), u64, u64, &'a str),
}

fn dev_of(text: &str) -> Option<(u32, u32)> {
    let (ma, mi) = text.split_once(':')?;
    Some((ma.parse().ok()?, mi.parse().ok()?))
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
}

/// After `key ` in `fields`, the next space-separated word.
fn word_after<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let at = fields.find(key)? + key.len();
    fields[at..].split(' ').next()
}

/// Parses one trace_pipe line of the three events.
pub(crate) fn parse_event(line: &str) -> Option<Line<'_>> {
    if let Some(i) = line.find(": writeback_dirty_folio: ") {
        return parse_line(&line[i..]).map(|(b, ino)| Line::Dirtied(b, ino));
    }
    if let Some(i) = line.find(": mm_filemap_add_to_page_cache: ") {
        let f = &line[i + 32..];
        let dev = dev_of(word_after(f, "dev ")?)?;
        let ino = hex(word_after(f, " ino ")?)?;
        let order = word_after(f, "order=")?.parse().ok()?;
        return Some(Line::Cached(dev, ino, order));
    }
    if let Some(i) = line.find(": iomap_dio_rw_begin: ") {
        let f = &line[i + 22..];
        let dev = dev_of(word_after(f, "dev ")?)?;
        let ino = hex(word_after(f, " ino ")?)?;
        let len = hex(word_after(f, " length ")?)?;
        let flags = word_after(f, " dio_flags ")?;
        return Some(Line::Dio(dev, ino, len, flags));
    }
    None
}

/// The backing device and inode of one trace_pipe line of the writeback
/// event (`...: writeback_dirty_folio: bdi btrfs-3: ino=258 index=17`).
pub(crate) fn parse_line(line: &str) -> Option<(&str, u64)> {
    let rest = &line[line.find(" bdi ")? + 5..];
    let (bdi, rest) = rest.split_once(": ino=")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((bdi, digits.parse().ok()?))
}

/// Sum of `overrun` and `dropped events` over `per_cpu/cpu*/stats` text.
pub(crate) fn lost_in_stats(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "overrun" | "dropped events")
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// A private trace instance counting, per file, dirtied folios, folios
/// added to the page cache and direct-I/O calls.
#[derive(Debug)]
pub(crate) struct FolioTrace {
    dir: PathBuf,
    /// Per-CPU buffer size asked for, KiB.
    buffer_kb: u64,
    name: String,
    pipe: Option<File>,
    pending: String,
    events: Events,
    /// Backing device name → superblock device, of every watch so far.
    bdis: HashMap<String, (u32, u32)>,
    counts: HashMap<((u32, u32), u64), FileCounts>,
    /// The tracefs root `dir` is reached through, when it is not mounted
    /// in this namespace ([`locate_held`]); dropped after the instance.
    held: Option<File>,
}

impl FolioTrace {
    /// Makes the instance `btrfs-lab-<pid>-<nonce>` under `tracefs`, with
    /// the events off.
    pub fn create(tracefs: &Path, nonce: &str) -> Result<Self> {
        let name = format!("{INSTANCE_PREFIX}{}-{nonce}", std::process::id());
        let dir = tracefs.join("instances").join(&name);
        fs::create_dir(&dir)
            .map_err(|e| Error::from_io(&e, "cannot create the trace instance", &dir))?;
        let format = |e: &str| fs::read_to_string(dir.join("events").join(e).join("format")).ok();
        let events = Events {
            cache: format(CACHE_EVENT).is_some_and(|f| f.contains("field:unsigned char order")),
            dio: format(DIO_EVENT).is_some_and(|f| f.contains("dio_flags")),
            bounce: format(DIO_EVENT).map_or(BounceRule::Unknown, |f| BounceRule::from_format(&f)),
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let t = Self {
            dir,
            buffer_kb: buffer_kb(cpus),
            name,
            pipe: None,
            pending: String::new(),
            events,
            bdis: HashMap::new(),
            counts: HashMap::new(),
            held: None,
        };
        // A bigger buffer is a convenience; the default works too.
        let _ = fs::write(t.dir.join("buffer_size_kb"), t.buffer_kb.to_string());
        Ok(t)
    }

    /// How many bytes one thread may write between two [`Self::drain`]s
    /// without overrunning its CPU's buffer: at most two events (~64 bytes
    /// each) per 4 KiB page, with a factor of two to spare, at most 64 MiB.
    pub fn bytes_between_drains(&self) -> u64 {
        (self.buffer_kb * 1024 / (2 * 64) * 4096 / 2).clamp(1 << 20, 64 << 20)
    }

    /// Keeps `root` (the tracefs root this instance's path goes through,
    /// [`locate_held`]) open as long as the instance.
    pub fn hold(&mut self, root: Option<File>) {
        self.held = root;
    }

    /// Stops counting until the next [`Self::watch`] (the events off);
    /// what was recorded until then is read and kept.
    pub fn pause(&mut self) -> Result<()> {
        for event in self.used() {
            self.control(event, "enable", "0")?;
        }
        self.drain()
    }

    /// The events this kernel has besides the writeback one.
    pub fn events(&self) -> Events {
        self.events
    }

    /// Leaves the filemap event out (before [`Self::watch`]): a program
    /// writing buffered at full speed makes it and the writeback event
    /// together more than trace_pipe can format, and events are lost; the
    /// dirtied folios alone are then the evidence.
    pub fn without_cache_event(&mut self) {
        self.events.cache = false;
    }

    /// The tracepoints used, as the report names them.
    pub fn label(&self) -> String {
        let names: Vec<String> = self.used().iter().map(|n| n.replace('/', ":")).collect();
        format!(
            "tracepoint{} {}, instance {}",
            if names.len() > 1 { "s" } else { "" },
            names.join(", "),
            self.name
        )
    }

    fn control(&self, event: &str, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join("events").join(event).join(file);
        fs::write(&path, value).map_err(|e| Error::from_io(&e, "cannot write", &path))
    }

    fn used(&self) -> Vec<&'static str> {
        let mut v = vec![EVENT];
        if self.events.cache {
            v.push(CACHE_EVENT);
        }
        if self.events.dio {
            v.push(DIO_EVENT);
        }
        v
    }

    /// Counts from now on the events of `watch`'s files, of thread `tid`
    /// only when given (replacing what was watched before; counts so far
    /// are kept).
    pub fn watch(&mut self, watch: &[Watch], tid: Option<u32>) -> Result<()> {
        self.drain()?;
        let filters = filters_for(watch, tid)?;
        for w in watch {
            self.bdis.insert(w.bdi.clone(), w.dev);
        }
        let events = [EVENT, CACHE_EVENT, DIO_EVENT];
        for (event, filter) in events.iter().zip(&filters) {
            if self.used().contains(event) {
                self.control(event, "filter", filter)?;
                self.control(event, "enable", "1")?;
            }
        }
        if self.pipe.is_none() {
            let path = self.dir.join("trace_pipe");
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path)
                .map_err(|e| Error::from_io(&e, "cannot open", &path))?;
            self.pipe = Some(f);
        }
        Ok(())
    }

    fn record(&mut self, line: &str) {
        let page_pages = |order: u32| 1u64.checked_shl(order).unwrap_or(0);
        match parse_event(line) {
            Some(Line::Dirtied(bdi, ino)) => {
                if let Some(&dev) = self.bdis.get(bdi) {
                    self.counts.entry((dev, ino)).or_default().dirtied_folios += 1;
                }
            }
            Some(Line::Cached(dev, ino, order)) => {
                let c = self.counts.entry((dev, ino)).or_default();
                c.cached_folios += 1;
                c.cached_pages += page_pages(order);
            }
            Some(Line::Dio(dev, ino, len, flags)) => {
                let bounced = self.events.bounce.bounced(flags);
                let c = self.counts.entry((dev, ino)).or_default();
                c.dio_calls += 1;
                c.dio_bytes += len;
                c.bounced_calls += u64::from(bounced);
            }
            None => {}
        }
    }

    /// Reads what the kernel has recorded so far into the counts.
    pub fn drain(&mut self) -> Result<()> {
        if self.pipe.is_none() {
            return Ok(());
        }
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let read = self.pipe.as_mut().map_or(Ok(0), |p| p.read(&mut buf));
            match read {
                Ok(0) => break,
                Ok(n) => {
                    self.pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if let Some(end) = self.pending.rfind('\n') {
                        let done: String = self.pending.drain(..=end).collect();
                        for line in done.lines() {
                            self.record(line);
                        }
                    }
                }
                Err(e) if e.kind() == IoKind::WouldBlock => break,
                Err(e) if e.kind() == IoKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::from_io(
                        &e,
                        "cannot read",
                        &self.dir.join("trace_pipe"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// What was seen of `ino` on the filesystem of superblock device `dev`
    /// so far (after a [`Self::drain`]).
    pub fn counts(&self, dev: (u32, u32), ino: u64) -> FileCounts {
        self.counts.get(&(dev, ino)).copied().unwrap_or_default()
    }

    /// Events the ring buffer lost (overwritten before they were read, or
    /// dropped): when not zero, counts are lower bounds.
    pub fn lost_events(&self) -> u64 {
        let Ok(cpus) = fs::read_dir(self.dir.join("per_cpu")) else {
            return 0;
        };
        cpus.flatten()
            .filter_map(|c| fs::read_to_string(c.path().join("stats")).ok())
            .map(|t| lost_in_stats(&t))
            .sum()
    }
}

impl Drop for FolioTrace {
    fn drop(&mut self) {
        for event in self.used() {
            let _ = self.control(event, "enable", "0");
        }
        self.pipe = None;
        // rmdir fails with EBUSY while a file of the instance is open; ours
        // is closed, so this succeeds unless someone else holds one.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => break,
            }
        }
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names() {
        assert_eq!(instance_pid("btrfs-lab-123-abcdef"), Some(123));
        for bad in [
            "btrfs-lab-0-abcdef",
            "btrfs-lab-12-abcde",
            "btrfs-lab-x1-abcdef",
            "btrfs-lab-12-abcdefg",
            "other-12-abcdef",
            "btrfs-lab--abcdef",
        ] {
            assert_eq!(instance_pid(bad), None, "{bad}");
        }
    }

    #[test]
    fn stale_instances_of_dead_pids_only() {
        let t = tempfile::tempdir().unwrap();
        let inst = t.path().join("instances");
        for n in ["btrfs-lab-7-aaaaaa", "btrfs-lab-8-bbbbbb", "user-trace"] {
            fs::create_dir_all(inst.join(n)).unwrap();
        }
        let removed = remove_stale(t.path(), |pid| pid == 8);
        assert_eq!(removed, vec!["btrfs-lab-7-aaaaaa"]);
        let mut left: Vec<String> = fs::read_dir(&inst)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, vec!["btrfs-lab-8-bbbbbb", "user-trace"]);
    }

    #[test]
    fn filters_and_lines() {
        let w = |b: &str, i: &[u64]| Watch {
            bdi: b.to_owned(),
            dev: (0, 1),
            inodes: i.to_vec(),
        };
        let first = |ws: &[Watch]| filters_for(ws, None).map(|[f, _, _]| f);
        assert_eq!(
            first(&[w("btrfs-3", &[257, 300])]).unwrap(),
            "(name == \"btrfs-3\" && (ino == 257 || ino == 300))"
        );
        let two = [w("btrfs-3", &[257]), w("7:0", &[12])];
        assert_eq!(
            first(&two).unwrap(),
            "(name == \"btrfs-3\" && (ino == 257)) || (name == \"7:0\" && (ino == 12))"
        );
        assert!(first(&[w("bad\"name", &[1])]).is_err());
        assert!(first(&[w("btrfs-3", &[])]).is_err());
        assert!(first(&[]).is_err());
        assert!(first(&[w("btrfs-3", &(1..1000).collect::<Vec<_>>())]).is_err());
        let line = "   dd-4242    [001] ..... 1781.24: writeback_dirty_folio: bdi btrfs-1131: ino=258 index=17";
        assert_eq!(parse_line(line), Some(("btrfs-1131", 258)));
        assert_eq!(parse_line("# tracer: nop"), None);
        let stats = "entries: 1280\noverrun: 3\ncommit overrun: 0\nbytes: 76800\ndropped events: 2\nread events: 0\n";
        assert_eq!(lost_in_stats(stats), 5);
    }

    #[test]
    fn buffers_are_bounded_in_all() {
        assert_eq!(buffer_kb(2), 16 << 10);
        assert_eq!(buffer_kb(8), 8 << 10);
        assert_eq!(buffer_kb(256), 1 << 10);
        assert_eq!(buffer_kb(0), 16 << 10);
    }

    #[test]
    fn the_three_events_parse_as_the_kernels_print_them() {
        // Lines as the host's 6.18 kernel printed them (a 1 MiB O_DIRECT
        // write into a NOCOW file, a buffered fallback into another).
        let dio = "              dd-15604   [000] ..... 25067.799405: iomap_dio_rw_begin: dev 0:40 ino 0x104 size 0x0 offset 0x0 length 0x100000 done_before 0x0 flags DIRECT dio_flags DIO_PARTIAL aio 0";
        assert_eq!(
            parse_event(dio),
            Some(Line::Dio((0, 40), 0x104, 1 << 20, "DIO_PARTIAL"))
        );
        let empty_flags = "kworker/u8:8-23037 [000] ..... 25067.70: iomap_dio_rw_begin: dev 254:0 ino 0x210003 size 0x80000000 offset 0xd00000 length 0x80000 done_before 0x0 flags DIRECT dio_flags  aio 1";
        assert_eq!(
            parse_event(empty_flags),
            Some(Line::Dio((254, 0), 0x210003, 0x80000, ""))
        );
        let cache = "              dd-15602   [001] ..... 25067.61: mm_filemap_add_to_page_cache: dev 0:40 ino 103 pfn=0x1a2b3 ofs=4096 order=0";
        assert_eq!(parse_event(cache), Some(Line::Cached((0, 40), 0x103, 0)));
        let large = "x-1 [000] ..... 1.0: mm_filemap_add_to_page_cache: dev 0:52 ino 101 pfn=0x200 ofs=0 order=9";
        assert_eq!(parse_event(large), Some(Line::Cached((0, 52), 0x101, 9)));
        let dirty = "   dd-4242    [001] ..... 1781.24: writeback_dirty_folio: bdi btrfs-1131: ino=258 index=17";
        assert_eq!(parse_event(dirty), Some(Line::Dirtied("btrfs-1131", 258)));
        assert_eq!(parse_event("# tracer: nop"), None);
        assert_eq!(
            parse_event("x: iomap_dio_rw_begin: dev 0:4x ino 0x1 length 0x1 dio_flags A aio 0"),
            None
        );
    }

    #[test]
    fn bounces_are_read_from_the_flags_the_format_names() {
        // 6.18's format: bit 4 unnamed, so a bounce prints as 0x10.
        let f618 = r#"print fmt: "... dio_flags %s aio %d", __print_flags(REC->dio_flags, "|", {(1 << 0), "DIO_FORCE_WAIT" }, {(1 << 1), "DIO_OVERWRITE_ONLY" }, {(1 << 2), "DIO_PARTIAL" }), REC->aio"#;
        let rule = BounceRule::from_format(f618);
        assert_eq!(rule, BounceRule::Bit4);
        assert!(rule.bounced("DIO_PARTIAL|DIO_FSBLOCK_ALIGNED|0x10"));
        assert!(rule.bounced("0x18"));
        assert!(!rule.bounced("DIO_PARTIAL|DIO_FSBLOCK_ALIGNED"));
        assert!(!rule.bounced(""));
        let named = f618.replace("}), REC->aio", "}, {(1 << 4), \"DIO_BOUNCE\" }), REC->aio");
        let rule = BounceRule::from_format(&named);
        assert_eq!(rule, BounceRule::Named);
        assert!(rule.bounced("DIO_PARTIAL|DIO_BOUNCE"));
        let other = f618.replace("}), REC->aio", "}, {(1 << 4), \"DIO_OTHER\" }), REC->aio");
        let rule = BounceRule::from_format(&other);
        assert_eq!(rule, BounceRule::Unknown);
        assert!(!rule.bounced("DIO_OTHER|0x10"));
    }

    #[test]
    fn each_event_is_filtered_by_its_own_fields() {
        let w = Watch {
            bdi: "btrfs-3".into(),
            dev: (0, 40),
            inodes: vec![257, 300],
        };
        let [dirty, cache, dio] = filters_for(std::slice::from_ref(&w), Some(77)).unwrap();
        assert_eq!(
            dirty,
            "common_pid == 77 && ((name == \"btrfs-3\" && (ino == 257 || ino == 300)))"
        );
        assert_eq!(
            cache,
            "common_pid == 77 && ((s_dev == 40 && (i_ino == 257 || i_ino == 300)))"
        );
        let [_, _, dio_any] = filters_for(
            &[Watch {
                dev: (8, 3),
                ..w.clone()
            }],
            None,
        )
        .unwrap();
        assert_eq!(
            dio_any,
            format!("(dev == {} && (ino == 257 || ino == 300))", (8 << 20) | 3)
        );
        assert!(dio.starts_with("common_pid == 77 && ((dev == 40 &&"));
    }
}
