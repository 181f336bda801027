//! `read-test`: which way of reading a big file is fastest on this machine,
//! for this file, with a cold cache, and can the figures be trusted?
//!
//! Each method reads the whole file into a destination buffer (a ring when
//! the file is larger), round after round in a rotating order. Before every
//! run the file is evicted from the page cache and mincore proves it; around
//! every run the file's block devices' read counters are taken, so a figure
//! the devices cannot explain is flagged instead of reported. A checksum of
//! what each method read shows they all read the same bytes.

pub mod analysis;
pub mod digest;
pub(crate) mod engine;
pub mod method;
mod plan;
pub mod report;
pub mod watch;
mod widths;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::hooks::Switch;
use crate::parse::memory::{anon_huge_bytes, mem_available_bytes};
use crate::parse::mountinfo::{MountEntry, mount_containing};
use crate::parse::size::format_iec;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::scratch::{self as at, EntryKind};
use crate::sys::kernel::direct_io::AlignedBuffer;
use crate::sys::kernel::errno::Meaning;
use crate::sys::kernel::extents::{self, Layout};
use crate::sys::kernel::hugepages;
use crate::sys::kernel::memio::{self, MappedBuffer, RingBuffer};
use crate::sys::proc::diskstats::{self, BlockDevice};
use crate::sys::{fs::filesystem, is_root, kernel::pagecache, kernel::signals, kernel_release};

use analysis::{CacheState, CheckContext, MethodSummary, Run, Situation};
use digest::{Digest, VerifyMode};
use engine::Pass;
pub use method::Method;
pub use report::ReadTestReport;
use report::{Backing, CacheInfo, Destination, DirectIo, FileInfo, Parameters};

/// Default rounds.
pub const DEFAULT_ROUNDS: u32 = 3;
/// Default worker threads of direct and direct-copy.
pub(crate) const DEFAULT_THREADS: u32 = 4;
/// Default chunk: one pread of one thread.
pub(crate) const DEFAULT_CHUNK: u64 = 8 << 20;
/// Bytes direct keeps in flight at least, when the chunk is not given:
/// less leaves a fast array idle between requests.
pub(crate) const MIN_IN_FLIGHT: u64 = 32 << 20;
/// The default destination is a ring of this many slots per reader thread:
/// one being read into while the thread's previous chunk is checked, so no
/// thread waits for another's slot, and nothing is mapped or prefaulted
/// that the reads will not touch (threads × chunk × 2: 64 MiB by default).
pub(crate) const RING_SLOTS_PER_THREAD: u64 = 2;
/// Alignment when the filesystem does not say (btrfs, tmpfs).
pub(crate) const DEFAULT_ALIGN: u64 = 4096;

const MIN_CHUNK: u64 = 64 << 10;
const MAX_CHUNK: u64 = 256 << 20;
const MAX_THREADS: u32 = 64;
const MAX_ROUNDS: u32 = 50;
const EVICT_ATTEMPTS: u32 = 3;
const MAX_SWEEP: usize = 8;

/// Which cache situations to measure.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Evicted before every run.
    Cold,
    /// The whole file in the page cache before every run.
    Warm,
    /// Both, cold first.
    Both,
}

impl CacheMode {
    /// The name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Cold => "cold",
            CacheMode::Warm => "warm",
            CacheMode::Both => "both",
        }
    }

    /// The situations it measures, in order.
    pub fn situations(self) -> Vec<Situation> {
        match self {
            CacheMode::Cold => vec![Situation::Cold],
            CacheMode::Warm => vec![Situation::Warm],
            CacheMode::Both => vec![Situation::Cold, Situation::Warm],
        }
    }
}

/// The cache mode to use when none is given, and why. `fits`: the file
/// and the destination fit in three quarters of the available memory.
pub(crate) fn default_cache(
    size: u64,
    memory_backed: bool,
    can_verify: bool,
    fits: Option<bool>,
) -> (CacheMode, String) {
    if memory_backed {
        return (
            CacheMode::Cold,
            "the file lives in memory: cold and warm are the same".to_owned(),
        );
    }
    if size == 0 {
        return (CacheMode::Cold, "the file is empty".to_owned());
    }
    if !can_verify {
        return (
            CacheMode::Cold,
            "mincore cannot tell this user whether the file is resident, so a warm cache could not be verified".to_owned(),
        );
    }
    match fits {
        Some(true) => (
            CacheMode::Both,
            "the file fits in the available memory, so it may well be cached when it is loaded again".to_owned(),
        ),
        Some(false) => (
            CacheMode::Cold,
            "the file does not fit in the available memory, so it cannot stay cached".to_owned(),
        ),
        None => (
            CacheMode::Cold,
            "the available memory is unknown (no MemAvailable in /proc/meminfo)".to_owned(),
        ),
    }
}

/// What to read and how.
#[derive(Debug, Clone)]
pub struct ReadTestOptions {
    /// The file.
    pub path: PathBuf,
    /// Methods, in the order of the first round (duplicates ignored).
    pub methods: Vec<Method>,
    /// Rounds.
    pub rounds: u32,
    /// Threads of direct and direct-copy: one count, or several to sweep
    /// (each count is run every round).
    pub threads: Vec<u32>,
    /// Cold, warm or both; `None`: both when the file fits in memory
    /// (and mincore can tell), cold otherwise.
    pub cache: Option<CacheMode>,
    /// Chunk size; `None`: 8 MiB, raised so threads × chunk ≥ 32 MiB.
    pub chunk: Option<u64>,
    /// Destination size; `None`: [`RING_SLOTS_PER_THREAD`] slots of one
    /// chunk per thread of the largest count.
    pub buffer: Option<u64>,
    /// Also drop the whole page cache before each run (root).
    pub drop_caches: bool,
    /// Checksum mode.
    pub verify: VerifyMode,
    /// Where /proc and /sys are read.
    pub sysroot: SysRoot,
}

impl ReadTestOptions {
    /// Defaults for `path`: every method.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            methods: Method::ALL.to_vec(),
            rounds: DEFAULT_ROUNDS,
            threads: vec![DEFAULT_THREADS],
            cache: None,
            chunk: None,
            buffer: None,
            drop_caches: false,
            verify: VerifyMode::Sampled,
            sysroot: SysRoot::host(),
        }
    }

    /// The thread counts, without duplicates, smallest first.
    pub fn thread_counts(&self) -> Vec<u32> {
        let mut v = self.threads.clone();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The largest thread count.
    pub(crate) fn max_threads(&self) -> u32 {
        self.threads
            .iter()
            .copied()
            .max()
            .unwrap_or(DEFAULT_THREADS)
    }

    /// The chunk size in use (one for the whole sweep: the default is
    /// sized for the largest thread count).
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk.unwrap_or_else(|| {
            let per_thread = MIN_IN_FLIGHT.div_ceil(u64::from(self.max_threads().max(1)));
            DEFAULT_CHUNK.max(per_thread.div_ceil(1 << 20) << 20)
        })
    }

    /// The destination's size: `--buffer`, or two chunks per thread.
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer.unwrap_or_else(|| {
            self.chunk_bytes() * u64::from(self.max_threads().max(1)) * RING_SLOTS_PER_THREAD
        })
    }

    /// The methods, without duplicates, in the given order.
    pub(crate) fn method_list(&self) -> Vec<Method> {
        let mut seen = Vec::new();
        for m in &self.methods {
            if !seen.contains(m) {
                seen.push(*m);
            }
        }
        seen
    }

    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        if self.methods.is_empty() {
            return Err(Error::usage("--methods is empty")
                .with_hint("name one or more of: direct, direct-copy, buffered, dontcache, mmap"));
        }
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            return Err(Error::usage(format!(
                "--rounds must be between 1 and {MAX_ROUNDS}"
            )));
        }
        if self.threads.is_empty() || self.threads.iter().any(|t| !(1..=MAX_THREADS).contains(t)) {
            return Err(
                Error::usage(format!("--threads must be between 1 and {MAX_THREADS}")).with_hint(
                    "give one count (--threads 4) or a list to sweep (--threads 1,2,4,8,16)",
                ),
            );
        }
        if self.thread_counts().len() > MAX_SWEEP {
            return Err(Error::usage(format!(
                "--threads lists {} counts: at most {MAX_SWEEP}",
                self.thread_counts().len()
            )));
        }
        let chunk = self.chunk_bytes();
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) || !chunk.is_multiple_of(DEFAULT_ALIGN) {
            return Err(Error::usage(format!(
                "--chunk {} is invalid: use a multiple of 4KiB between 64KiB and 256MiB",
                format_iec(chunk)
            )));
        }
        let needed = chunk * u64::from(self.max_threads());
        let buffer = self.buffer_bytes();
        if buffer < needed {
            return Err(Error::usage(format!(
                "--buffer {} is smaller than --threads × --chunk ({}): every thread needs a slot",
                format_iec(buffer),
                format_iec(needed)
            ))
            .with_hint(format!(
                "use --buffer {} or more (twice that keeps threads from waiting on each other)",
                format_iec(needed)
            )));
        }
        Ok(())
    }
}

/// Bytes of the destination ring: the buffer, or the file rounded up to
/// whole chunks when it is smaller; always whole chunks, at least one.
pub(crate) fn ring_bytes(buffer: u64, size: u64, chunk: u64) -> u64 {
    let want = buffer.min(size.div_ceil(chunk) * chunk);
    (want / chunk).max(1) * chunk
}

/// Where a run is, for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// The method running.
    pub method: Method,
    /// Its threads (direct, direct-copy).
    pub threads: Option<u32>,
    /// Cold or warm.
    pub cache: Situation,
    /// Round, from 1.
    pub round: u32,
    /// Rounds in all.
    pub rounds: u32,
    /// Bytes read so far in this run.
    pub done: u64,
    /// The file's size.
    pub total: u64,
}

/// The file, open and checked.
struct Target {
    file: File,
    /// The path of the file as opened (for messages and the report; never
    /// opened again).
    canonical: PathBuf,
    /// Its directory, held.
    parent: HeldDir,
    /// Its name there.
    name: std::ffi::OsString,
    size: u64,
    dev: u64,
    ino: u64,
    uid: u32,
}

fn open_error(e: &std::io::Error, path: &Path) -> Error {
    match e.raw_os_error().map(Meaning::of) {
        Some(Meaning::Permission) => Error::new(
            ErrorKind::Permission,
            format!("cannot read {}: permission denied", path.display()),
        )
        .with_hint("read-test only reads the file: run it as a user who may read it"),
        _ => Error::from_io(e, "cannot read", path),
    }
}

fn not_a_file(path: &Path, meta: &fs::Metadata) -> Option<Error> {
    let what = if meta.is_dir() {
        "a directory"
    } else if meta.is_file() {
        return None;
    } else {
        "not a regular file"
    };
    let message = if meta.is_dir() {
        format!("{} is {what}, not a file", path.display())
    } else {
        format!("{} is {what}", path.display())
    };
    Some(
        Error::new(ErrorKind::WrongTarget, message)
            .with_hint("give the path of the file to read (a model file, a disk image)"),
    )
}

/// Opens the file for reading, once: its directory is held
/// ([`HeldDir::resolve_entry`]) and a symbolic link is followed only if root
/// (or the running user) owns it (model caches link their files; another
/// user's link is refused with the reason). The name is opened beneath the
/// held directory without following a link; non-regular files are refused
/// before the open (by `lstat` there) and again after it.
fn open_target(path: &Path) -> Result<Target> {
    let resolved = HeldDir::resolve_entry(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => {
            let new = Error::new(
                ErrorKind::NotFound,
                format!("cannot read {}: no such file or directory", path.display()),
            );
            match e.hint() {
                Some(h) => new.with_hint(h),
                None => new,
            }
        }
        _ => e,
    })?;
    let Some((parent, name, st)) = resolved else {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is a directory, not a file", path.display()),
        )
        .with_hint("give the path of the file to read (a model file, a disk image)"));
    };
    if let Some(e) = not_a_file_kind(path, at::kind_of(&st)) {
        return Err(e);
    }
    // O_NONBLOCK (added by open_entry_file): a FIFO swapped in after the
    // check must not hang the open.
    let file = at::open_read_entry(&parent, &name).map_err(|e| match e.kind() {
        ErrorKind::Permission => Error::new(
            ErrorKind::Permission,
            format!("cannot read {}: permission denied", path.display()),
        )
        .with_hint("read-test only reads the file: run it as a user who may read it"),
        _ => e,
    })?;
    let meta = file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", path))?;
    if let Some(e) = not_a_file(path, &meta) {
        return Err(e);
    }
    at::clear_status_flags(&file)
        .map_err(|e| Error::from_errno(e, "cannot set the flags of", path))?;
    let canonical = parent.join(&name);
    Ok(Target {
        file,
        canonical,
        parent,
        name,
        size: meta.len(),
        dev: meta.dev(),
        ino: meta.ino(),
        uid: meta.uid(),
    })
}

/// [`not_a_file`] from an `lstat` (a link was resolved before).
fn not_a_file_kind(path: &Path, kind: EntryKind) -> Option<Error> {
    let message = match kind {
        EntryKind::File => return None,
        EntryKind::Dir => format!("{} is a directory, not a file", path.display()),
        _ => format!("{} is not a regular file", path.display()),
    };
    Some(
        Error::new(ErrorKind::WrongTarget, message)
            .with_hint("give the path of the file to read (a model file, a disk image)"),
    )
}

/// Opens the same file again with O_DIRECT, if that works here and means
/// something. `Err(reason)` says why direct and direct-copy will read
/// through the page cache instead.
fn open_direct(
    t: &Target,
    path: &Path,
    mount: &MountEntry,
    align: u64,
) -> Result<std::result::Result<File, String>> {
    let fallback = "direct and direct-copy read through the page cache instead";
    // The same open file, reopened through its descriptor (/proc/self/fd):
    // no name is resolved again.
    let file = match at::reopen_direct(&t.file) {
        Ok(f) => f,
        Err(e) if at::is_invalid(&e) => {
            return Ok(Err(format!(
                "O_DIRECT unsupported here: {} refused to open the file with O_DIRECT (EINVAL); {fallback}",
                mount.fs_type
            )));
        }
        Err(e) => return Err(open_error(&e, path)),
    };
    if filesystem::is_memory_backed(&mount.fs_type) {
        return Ok(Err(format!(
            "O_DIRECT is not meaningful on {}: the file lives in memory (Linux 6.6+ accepts O_DIRECT there and copies from memory); {fallback}",
            mount.fs_type
        )));
    }
    let meta = file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", path))?;
    if (meta.dev(), meta.ino()) != (t.dev, t.ino) {
        return Err(Error::new(
            ErrorKind::State,
            format!("{} was replaced while read-test opened it", path.display()),
        )
        .with_hint("run read-test on a file nothing else is changing"));
    }
    at::set_direct_flag(&file)
        .map_err(|e| Error::from_errno(e, "cannot set the flags of", path))?;
    if t.size > 0 {
        let mut probe = AlignedBuffer::new(align as usize, align as usize);
        loop {
            match file.read_at(probe.as_mut_slice(), 0) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if at::is_invalid(&e) => {
                    return Ok(Err(format!(
                        "O_DIRECT unsupported here: the first O_DIRECT read failed (EINVAL) with {align}-byte alignment; {fallback}"
                    )));
                }
                Err(e) => return Err(Error::from_io(&e, "cannot read", path)),
            }
        }
    }
    Ok(Ok(file))
}

/// Whether `preadv2(RWF_DONTCACHE)` works on this file.
fn dontcache_support(t: &Target, path: &Path, fs_type: &str) -> Result<Option<String>> {
    let mut probe = [0u8; 4096];
    match memio::pread_dontcache(&t.file, &mut probe, 0) {
        Ok(_) => Ok(None),
        Err(e) if at::is_unsupported(&e) => Ok(Some(format!(
            "RWF_DONTCACHE is not supported here: it needs Linux 6.14 or later and a filesystem that implements it, and {fs_type} on {} does not",
            kernel_release()
        ))),
        Err(e) => Err(Error::from_io(&e, "cannot read", path)),
    }
}

/// The block devices whose reads count for this file: every member of a
/// btrfs, else the filesystem's own device. Empty when no device counts
/// them (tmpfs, network and stacked filesystems). The second list names
/// btrfs members that /proc/diskstats does not show.
fn file_devices(
    root: &SysRoot,
    t: &Target,
    fs_type: &str,
) -> Result<(Vec<BlockDevice>, Vec<String>)> {
    let stats = diskstats::read_stats(root)?;
    if fs_type == "btrfs" {
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for d in t.parent.btrfs_devices()? {
            // A missing device has no path.
            if d.path.is_empty() {
                continue;
            }
            match diskstats::by_path(&stats, Path::new(&d.path)) {
                Some(found_dev) => found.push(found_dev),
                None => missing.push(d.path),
            }
        }
        return Ok((found, missing));
    }
    let (maj, min) = at::major_minor(t.dev);
    Ok((
        diskstats::by_number(&stats, maj, min).into_iter().collect(),
        Vec::new(),
    ))
}

/// True when mincore tells this process the truth about the file's cache.
/// Since Linux 5.0 it reports every page of a file mapping as resident
/// unless the caller owns the file or may write to it (a side-channel
/// guard), so an unprivileged reader of someone else's file cannot verify.
fn mincore_can_tell(t: &Target) -> bool {
    crate::sys::is_root() || crate::sys::euid() == t.uid || at::may_write_at(t.parent.fd(), &t.name)
}

/// Why the cache could not be proven cold, when it could not.
fn unverifiable_reason(t: &Target, memory_backed: bool) -> Option<String> {
    if memory_backed {
        return None;
    }
    if Switch::ReadTestSkipEviction.is_on() {
        return Some(format!(
            "{} is set (a test hook): the cache was neither evicted nor checked before the runs",
            Switch::ReadTestSkipEviction.env()
        ));
    }
    (!mincore_can_tell(t)).then(|| {
        "the cache was evicted before each run but could not be checked: mincore reports every page of a file as cached unless you own it or may write to it (Linux 5.0+); the device cross-check still guards the figures".to_owned()
    })
}

/// Who asked for the run: `SUDO_UID` when sudo set it, else the real uid;
/// and whether it came from `SUDO_UID`.
fn invoking_uid() -> (u32, bool) {
    match std::env::var("SUDO_UID").ok().and_then(|v| v.parse().ok()) {
        Some(uid) => (uid, true),
        None => (crate::sys::uid(), false),
    }
}

/// Makes the file's cache cold and proves it: fsync + DONTNEED (and
/// drop_caches with `--drop-caches`), then mincore; tried a few times.
fn make_cold(
    t: &Target,
    path: &Path,
    memory_backed: bool,
    drop_caches: bool,
    can_verify: bool,
) -> Result<(CacheState, Option<u64>)> {
    if memory_backed {
        return Ok((CacheState::Memory, Some(t.size)));
    }
    if Switch::ReadTestSkipEviction.is_on() {
        return Ok((CacheState::Unverified, None));
    }
    let mut resident = 0;
    for attempt in 0..EVICT_ATTEMPTS {
        signals::check()?;
        pagecache::evict(&t.file, path)?;
        if drop_caches {
            pagecache::drop_all_caches()?;
        }
        if !can_verify {
            return Ok((CacheState::Unverified, None));
        }
        resident = pagecache::resident_bytes(&t.file, t.size, path)?;
        if resident == 0 {
            return Ok((CacheState::Cold, Some(0)));
        }
        thread::sleep(Duration::from_millis(100 * u64::from(attempt + 1)));
    }
    Ok((CacheState::Warm, Some(resident)))
}

/// Reads the whole file into the page cache and proves with mincore that
/// every page is there; tried a few times. `Partial` when pages keep
/// being evicted (memory pressure).
fn make_warm(t: &Target, path: &Path, memory_backed: bool) -> Result<(CacheState, Option<u64>)> {
    if memory_backed {
        return Ok((CacheState::Memory, Some(t.size)));
    }
    let mut resident = 0;
    for _ in 0..EVICT_ATTEMPTS {
        signals::check()?;
        resident = pagecache::resident_bytes(&t.file, t.size, path)?;
        if resident >= t.size {
            return Ok((CacheState::Resident, Some(resident)));
        }
        pagecache::load(&t.file, t.size, path)?;
    }
    resident = resident.max(pagecache::resident_bytes(&t.file, t.size, path)?);
    if resident >= t.size {
        Ok((CacheState::Resident, Some(resident)))
    } else {
        Ok((CacheState::Partial, Some(resident)))
    }
}

/// MemAvailable, if /proc/meminfo says.
fn available_memory(root: &SysRoot) -> Option<u64> {
    let text = root.read_table(&root.proc("meminfo")).ok()?;
    mem_available_bytes(&text)
}

/// Refuses `--cache warm|both` when a warm cache cannot be made or proven.
fn warm_possible(
    t: &Target,
    path: &Path,
    can_verify: bool,
    fits: Option<bool>,
    available: Option<u64>,
) -> Result<()> {
    if !can_verify {
        return Err(Error::new(
            ErrorKind::Permission,
            format!(
                "cannot verify a warm cache for {}: mincore reports every page as cached unless you own the file or may write to it",
                path.display()
            ),
        )
        .with_hint("run as the file's owner or root, or use --cache cold"));
    }
    if fits == Some(false) {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "{} ({}) does not fit in the available memory ({}) with the destination: a warm cache cannot hold it",
                path.display(),
                format_iec(t.size),
                format_iec(available.unwrap_or(0))
            ),
        )
        .with_hint("use --cache cold, or a smaller --buffer"));
    }
    Ok(())
}

/// The read ceiling `links` computes for the file's devices (one reader,
/// the data profile), when it knows one (PCIe NVMe members).
pub(crate) fn read_ceiling(
    root: &SysRoot,
    devices: &[BlockDevice],
    profiles: &[crate::model::profile::Profile],
    fs_type: &str,
) -> Option<report::Ceiling> {
    if devices.is_empty() {
        return None;
    }
    let profile = if fs_type == "btrfs" {
        *profiles.first()?
    } else {
        crate::model::profile::Profile::Single
    };
    let paths: Vec<PathBuf> = devices.iter().map(|d| PathBuf::from(&d.name)).collect();
    let c = crate::hw::array_ceiling_for_block_devices(root, &paths, profile).ok()?;
    let b = c.one_reader?;
    (b.encoded_bytes_per_sec > 0).then_some(report::Ceiling {
        bytes_per_sec: b.encoded_bytes_per_sec,
        practical_high_bytes_per_sec: b.practical_high_bytes_per_sec,
        profile,
        summary: c.summary,
    })
}

fn memory_check(root: &SysRoot, need: u64) -> Result<()> {
    let Ok(text) = root.read_table(&root.proc("meminfo")) else {
        return Ok(());
    };
    let Some(available) = mem_available_bytes(&text) else {
        return Ok(());
    };
    if need > available / 2 {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough memory: the destination needs {}, and only {} is available",
                format_iec(need),
                format_iec(available)
            ),
        )
        .with_hint("use a smaller --buffer: it is reused as a ring, so it can be much smaller than the file"));
    }
    Ok(())
}

/// `read-test FILE`: runs the test, each run's bytes on the `ui`'s meter
/// with the cache, round and method as its step (no JSON Lines records:
/// `--json` is one document).
pub fn run(opts: &ReadTestOptions, ui: &dyn crate::ui::Ui) -> Result<ReadTestReport> {
    use crate::ui::Progress as _;
    let bar = crate::ui::TrackedBar::new(ui, "read-test", "read-test")
        .records(false)
        .log_lines(false);
    let result = test(opts, &mut |p| {
        let who = match p.threads {
            Some(t) => format!("{}×{t}", p.method),
            None => p.method.to_string(),
        };
        bar.set_message(format!("{} {}/{} {who}", p.cache.name(), p.round, p.rounds));
        bar.set_length(p.total);
        bar.set_position(p.done);
    });
    bar.finish();
    result
}

/// Runs the test. `progress` is called a few times a second during runs.
/// It reads what it needs about the file ([`inspect`]), plans
/// ([`plan::plan`], pure), chooses the cache ([`choose_cache`]), executes
/// the plan ([`execute`]), then summarizes ([`summarize`]) and reports.
fn test(opts: &ReadTestOptions, progress: &mut dyn FnMut(&Progress)) -> Result<ReadTestReport> {
    opts.validate()?;
    if opts.drop_caches && !is_root() {
        return Err(Error::new(
            ErrorKind::Permission,
            "--drop-caches needs root: it writes /proc/sys/vm/drop_caches",
        )
        .with_hint(
            "run as root, or leave out --drop-caches (the file's own pages are still evicted)",
        ));
    }
    let found = inspect(opts)?;
    let plan = plan::plan(opts, found.t.size, found.dontcache_unsupported.is_none());
    memory_check(&opts.sysroot, plan.ring_len + plan.bounce_len)?;
    let cache = choose_cache(opts, &found, &plan)?;
    let plan = plan.with_cache(cache.mode);
    let measured = execute(opts, &found, &plan, &cache, progress)?;
    let summarized = summarize(opts, &found, &plan, measured.runs);
    let notes = notes(&found, &plan, &cache);
    Ok(report(
        opts,
        found,
        plan,
        cache,
        measured.destination,
        summarized,
        notes,
    ))
}

/// What was read about the file before anything is measured.
struct Found {
    t: Target,
    mount: MountEntry,
    fs_type: String,
    memory_backed: bool,
    devices: Vec<BlockDevice>,
    missing_members: Vec<String>,
    data_profiles: Vec<crate::model::profile::Profile>,
    layout: Option<Layout>,
    /// How wide the chunks holding it are (btrfs, root).
    widths: Option<report::StripeWidths>,
    dio: Option<memio::DioAlign>,
    align: u64,
    /// The O_DIRECT handle, or why there is none.
    direct: std::result::Result<File, String>,
    dontcache_unsupported: Option<String>,
}

/// Opens the file and reads what the plan and the checks need: its mount,
/// devices, profiles, extents, O_DIRECT alignment and handle, and whether
/// dontcache works on it. Refuses a chunk the alignment does not divide.
fn inspect(opts: &ReadTestOptions) -> Result<Found> {
    let methods = opts.method_list();
    let path = opts.path.as_path();
    let t = open_target(path)?;
    let table = crate::sys::proc::mountinfo::mount_table(&opts.sysroot)?;
    let mount = mount_containing(&table, &t.canonical)
        .cloned()
        .ok_or_else(|| {
            Error::new(
                ErrorKind::State,
                format!("no mount contains {}", t.canonical.display()),
            )
        })?;
    let fs_type = mount.fs_type.clone();
    let memory_backed = filesystem::is_memory_backed(&fs_type);
    let (devices, missing_members) = file_devices(&opts.sysroot, &t, &fs_type)?;
    let data_profiles = if fs_type == "btrfs" {
        t.parent.btrfs_data_profiles()?
    } else {
        Vec::new()
    };
    let layout: Option<Layout> = extents::layout(&t.file, t.size).ok();
    let widths = if fs_type == "btrfs" && is_root() {
        file_widths(&t)
    } else {
        None
    };
    let dio = memio::dio_alignment(&t.file);
    let align = dio
        .map_or(DEFAULT_ALIGN, |a| u64::from(a.offset.max(a.memory)))
        .max(512);
    let chunk = opts.chunk_bytes();
    if !chunk.is_multiple_of(align) {
        return Err(Error::usage(format!(
            "--chunk {} is not a multiple of the O_DIRECT alignment of {} ({align} bytes)",
            format_iec(chunk),
            path.display()
        )));
    }
    let direct = if methods.iter().any(|m| m.uses_o_direct()) {
        open_direct(&t, path, &mount, align)?
    } else {
        Err("direct and direct-copy were not run".to_owned())
    };
    let dontcache_unsupported = if methods.contains(&Method::Dontcache) {
        dontcache_support(&t, path, &fs_type)?
    } else {
        None
    };
    Ok(Found {
        t,
        mount,
        fs_type,
        memory_backed,
        devices,
        missing_members,
        data_profiles,
        layout,
        widths,
        dio,
        align,
        direct,
        dontcache_unsupported,
    })
}

/// How wide the chunks holding the file are striped against the array's
/// full width (the chunk tree: root only); `None` when it cannot be read.
fn file_widths(t: &Target) -> Option<report::StripeWidths> {
    let chunks = crate::sys::kernel::btrfs::chunk_records_of(t.parent.fd(), &t.canonical)
        .ok()
        .flatten()?;
    let extents = extents::physical_extents(&t.file, t.size).ok()?;
    let present = t
        .parent
        .btrfs_devices()
        .ok()?
        .iter()
        .filter(|d| !d.path.is_empty())
        .count();
    let kernel = crate::model::kernel::KernelVersion::parse(&kernel_release())?;
    widths::stripe_widths(&extents, &chunks, u32::try_from(present).ok()?, kernel)
}

/// The cache measured, and what could be proven about it.
struct CacheChoice {
    mode: CacheMode,
    /// Why the default was chosen (no `--cache`).
    reason: Option<String>,
    /// Why mincore cannot prove the cache cold, when it cannot.
    unverifiable: Option<String>,
}

/// `--cache` as given (refused when a warm cache cannot be made or proven),
/// or the default for this file.
fn choose_cache(opts: &ReadTestOptions, f: &Found, plan: &plan::Plan) -> Result<CacheChoice> {
    let unverifiable = unverifiable_reason(&f.t, f.memory_backed);
    let can_verify = unverifiable.is_none();
    let available = available_memory(&opts.sysroot);
    let fits = available.map(|a| f.t.size + plan.ring_len + plan.bounce_len <= a / 4 * 3);
    let (mode, reason) = match opts.cache {
        Some(m) => {
            if m != CacheMode::Cold && !f.memory_backed {
                warm_possible(&f.t, &opts.path, can_verify, fits, available)?;
            }
            (m, None)
        }
        None => {
            let (m, why) = default_cache(f.t.size, f.memory_backed, can_verify, fits);
            if Switch::ReadTestSkipEviction.is_on() {
                (
                    m,
                    Some("the cache checks are skipped (a test hook)".to_owned()),
                )
            } else {
                (m, Some(why))
            }
        }
    };
    Ok(CacheChoice {
        mode,
        reason,
        unverifiable,
    })
}

type RunKey = (Situation, Method, u32);

/// The size of the kernel's huge pages when its pool has enough free now
/// for a destination of `len` bytes (and no other btrfs-lab run holds them
/// reserved for itself): the ring then lives there, as fio's
/// `iomem=mmaphuge` buffers do. Read from this machine, never a sysroot:
/// the mapping is made here.
fn huge_page_pool(len: u64) -> Option<usize> {
    let pool = hugepages::read(&SysRoot::host())?;
    if pool.page_bytes == 0 || hugepages::reserved_by_another_run() {
        return None;
    }
    let need = len.div_ceil(pool.page_bytes);
    (pool.available() >= need).then(|| usize::try_from(pool.page_bytes).ok())?
}

/// What the runs measured, and the destination they read into.
struct Measured {
    runs: BTreeMap<RunKey, Vec<Run>>,
    destination: Destination,
}

/// Carries out the plan: the destination ring and bounce buffers, then
/// every step with the cache made cold (or warm) first and the devices'
/// counters read around it.
fn execute(
    opts: &ReadTestOptions,
    f: &Found,
    plan: &plan::Plan,
    cache: &CacheChoice,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Measured> {
    let (t, path, chunk) = (&f.t, opts.path.as_path(), plan.chunk);
    let can_verify = cache.unverifiable.is_none();
    let alloc_error = |e: std::io::Error| {
        Error::new(
            ErrorKind::NoSpace,
            format!("cannot allocate the destination buffer: {e}"),
        )
        .with_hint("use a smaller --buffer")
    };
    let mapping = std::time::Instant::now();
    let mut ring = RingBuffer::with_pool(
        (plan.ring_len / chunk) as usize,
        chunk as usize,
        huge_page_pool(plan.ring_len),
    )
    .map_err(alloc_error)?;
    let mut bounce: Vec<MappedBuffer> = (0..plan.bounce_buffers)
        .map(|_| MappedBuffer::new(chunk as usize))
        .collect::<std::io::Result<_>>()
        .map_err(alloc_error)?;
    let prefault_seconds = mapping.elapsed().as_secs_f64();
    let (backing, huge_page_bytes) = match ring.backing() {
        memio::Backing::Hugetlb => (Backing::HugePagePool, Some(ring.mapped_len() as u64)),
        memio::Backing::Transparent | memio::Backing::Base => (
            Backing::TransparentHugePages,
            fs::read_to_string("/proc/self/smaps")
                .ok()
                .and_then(|s| anon_huge_bytes(&s, ring.address())),
        ),
    };
    let read_devices = || -> Result<Option<u64>> {
        if f.devices.is_empty() {
            Ok(None)
        } else {
            diskstats::bytes_read(&opts.sysroot, &f.devices).map(Some)
        }
    };
    let mut runs: BTreeMap<RunKey, Vec<Run>> = BTreeMap::new();
    for (i, step) in plan.steps().into_iter().enumerate() {
        let plan::Step {
            situation,
            round,
            method,
            threads,
        } = step;
        signals::check()?;
        let (cache_state, resident) = match situation {
            Situation::Cold => make_cold(t, path, f.memory_backed, opts.drop_caches, can_verify)?,
            Situation::Warm => make_warm(t, path, f.memory_backed)?,
        };
        let before = read_devices()?;
        let pass = Pass {
            path,
            size: t.size,
            plain: &t.file,
            direct: f.direct.as_ref().ok().filter(|_| method.uses_o_direct()),
            threads: threads as usize,
            align: f.align as usize,
            verify: opts.verify,
        };
        let r = engine::run_pass(method, &pass, &mut ring, &mut bounce, &mut |done| {
            progress(&Progress {
                method,
                threads: method.is_threaded().then_some(threads),
                cache: situation,
                round: round + 1,
                rounds: plan.rounds,
                done,
                total: t.size,
            });
        })?;
        let device_read_bytes = match before {
            Some(b) => read_devices()?.map(|a| a.saturating_sub(b)),
            None => None,
        };
        runs.entry((situation, method, threads))
            .or_default()
            .push(Run {
                round: round + 1,
                sequence: i as u32 + 1,
                bytes_read: r.bytes,
                seconds: r.seconds,
                cpu_seconds: r.cpu_seconds,
                device_read_bytes,
                resident_before_bytes: resident,
                cache: cache_state,
                digest: r.digest.hex(),
                digest_blocks: r.digest.blocks(),
                complete: r.digest.is_complete() && r.bytes == t.size,
                flag: None,
            });
    }
    Ok(Measured {
        runs,
        destination: Destination {
            bytes: ring.len() as u64,
            slots: ring.slots() as u64,
            backing,
            huge_page_bytes,
            prefault_seconds,
            bounce_bytes: plan.bounce_len,
        },
    })
}

/// The runs summarized: per situation the method list (threaded methods at
/// their knee), the thread sweep, the knees, and what they add up to.
struct Summarized {
    per_situation: Vec<(Situation, Vec<MethodSummary>)>,
    sweep: Vec<MethodSummary>,
    knees: Vec<report::Knee>,
    ceiling: Option<report::Ceiling>,
}

fn summarize(
    opts: &ReadTestOptions,
    f: &Found,
    plan: &plan::Plan,
    mut runs: BTreeMap<RunKey, Vec<Run>>,
) -> Summarized {
    let ctx = CheckContext {
        // Counting only some members would make honest runs look impossible.
        devices_known: !f.devices.is_empty() && f.missing_members.is_empty(),
        layout_allowance: f.layout.map_or(0, |l| {
            l.hole_bytes + l.unwritten_bytes + l.inline_bytes + l.encoded_bytes + l.delalloc_bytes
        }),
    };
    let direct_note = f.direct.as_ref().err().cloned();
    let ceiling = read_ceiling(&opts.sysroot, &f.devices, &f.data_profiles, &f.fs_type);
    let ceiling_rate = ceiling.as_ref().map(|c| c.bytes_per_sec as f64);
    let mut out = Summarized {
        per_situation: Vec::new(),
        sweep: Vec::new(),
        knees: Vec::new(),
        ceiling,
    };
    for situation in plan.situations() {
        let mut list = Vec::new();
        for &m in &plan.methods {
            if m == Method::Dontcache
                && let Some(why) = &f.dontcache_unsupported
            {
                let mut u = analysis::unsupported(m, why.clone());
                u.cache = situation;
                list.push(u);
                continue;
            }
            let (o_direct, note) = if m.uses_o_direct() {
                (Some(f.direct.is_ok()), direct_note.clone())
            } else {
                (None, None)
            };
            let mut one = |threads: u32| {
                let mut s = analysis::summarize(
                    m,
                    runs.remove(&(situation, m, threads)).unwrap_or_default(),
                    o_direct,
                    note.clone(),
                    &ctx,
                );
                s.cache = situation;
                s.threads = m.is_threaded().then_some(threads);
                s.percent_of_ceiling = s
                    .rate_bytes_per_sec_median
                    .zip(ceiling_rate)
                    .and_then(|(r, c)| crate::report::rate::percent_of(r, c));
                s
            };
            if !m.is_threaded() {
                list.push(one(1));
                continue;
            }
            let rows: Vec<MethodSummary> = plan.counts.iter().map(|&c| one(c)).collect();
            if let Some(row) = at_the_knee(situation, m, &plan.counts, rows, &mut out) {
                list.push(row);
            }
        }
        out.per_situation.push((situation, list));
    }
    out
}

/// Of a threaded method's rows (one per thread count), the one at its knee
/// (the fewest threads within 5% of its best; the largest count without
/// one); a sweep's rows and knee go into `out`.
fn at_the_knee(
    situation: Situation,
    m: Method,
    counts: &[u32],
    rows: Vec<MethodSummary>,
    out: &mut Summarized,
) -> Option<MethodSummary> {
    let medians: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| r.status == analysis::Status::Ok)
        .filter_map(|r| {
            r.rate_bytes_per_sec_median
                .map(|x| (r.threads.unwrap_or(1), x))
        })
        .collect();
    let knee = analysis::knee(&medians);
    let chosen = knee.unwrap_or(counts[counts.len() - 1]);
    if counts.len() > 1 {
        if let Some(k) = knee {
            let best = medians.iter().map(|(_, r)| *r).fold(0.0, f64::max);
            let at = medians.iter().find(|(c, _)| *c == k).map_or(0.0, |x| x.1);
            out.knees.push(report::Knee {
                cache: situation,
                method: m,
                threads: k,
                rate_bytes_per_sec: at,
                best_rate_bytes_per_sec: best,
            });
        }
        out.sweep.extend(rows.iter().cloned());
    }
    rows.into_iter().find(|r| r.threads == Some(chosen))
}

/// The notes of the report: what the figures mean here and what could not
/// be checked.
fn notes(f: &Found, plan: &plan::Plan, cache: &CacheChoice) -> Vec<String> {
    let (t, fs_type) = (&f.t, &f.fs_type);
    let mut notes = Vec::new();
    let invoker = invoking_uid();
    if read_for_another_user(t) {
        notes.push(format!(
            "{} belongs to uid {}, not to the invoking user (uid {}{}): root read it, so its size and checksum are shown to a user who may not be allowed to read it.",
            t.canonical.display(),
            t.uid,
            invoker.0,
            if invoker.1 { ", from SUDO_UID" } else { "" }
        ));
    }
    if f.memory_backed {
        notes.push(format!(
            "{} is on {fs_type}, which keeps files in memory: there is no device and no cold cache, so every figure is a memory copy, not a read from storage.",
            t.canonical.display()
        ));
    }
    if let Err(why) = &f.direct
        && plan.methods.iter().any(|m| m.uses_o_direct())
    {
        notes.push(format!("{why}."));
    }
    if let Some(l) = f.layout {
        if l.encoded_bytes > 0 {
            notes.push(format!(
                "{} of the file ({:.0}%) is in compressed extents: btrfs serves O_DIRECT reads of them through the page cache, decompressing, so direct cannot bypass the cache there, and the devices move fewer bytes than are read.",
                format_iec(l.encoded_bytes),
                100.0 * l.encoded_bytes as f64 / t.size.max(1) as f64
            ));
        }
        let zeros = l.hole_bytes + l.unwritten_bytes;
        if zeros > 0 {
            notes.push(format!(
                "{} of the file is holes or unwritten extents: they read as zeros without device I/O, so they measure memory, not the devices.",
                format_iec(zeros)
            ));
        }
    }
    if let Some(n) = f
        .widths
        .as_ref()
        .and_then(|w| widths::note(w, t.size, &f.mount.mount_point))
    {
        notes.push(n);
    }
    if !f.missing_members.is_empty() {
        notes.push(format!(
            "/proc/diskstats does not show the btrfs member{} {}: the device cross-check could not run.",
            if f.missing_members.len() > 1 { "s" } else { "" },
            f.missing_members.join(", ")
        ));
    } else if f.devices.is_empty() && !f.memory_backed {
        notes.push(format!(
            "no block device counts the reads of this {fs_type} filesystem (network or stacked?): the device cross-check could not run."
        ));
    }
    notes.extend(parameter_notes(plan, cache, f.memory_backed, t.size));
    notes
}

/// The notes about the plan and the cache.
fn parameter_notes(
    plan: &plan::Plan,
    cache: &CacheChoice,
    memory_backed: bool,
    size: u64,
) -> Vec<String> {
    let mut notes = Vec::new();
    if plan.counts.len() > 1 && plan.any_threaded() {
        // With one method the headline says what the knee is
        // (report::sweep_verdict): not said twice.
        let knee = if plan.runnable.len() == 1 {
            "its knee"
        } else {
            "its knee (the fewest threads within 5% of its best)"
        };
        notes.push(format!(
            "the thread sweep ({}) reads {} chunks at every count, so the rows differ only in threads; the method list shows each threaded method at {knee}.",
            plan.counts.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            format_iec(plan.chunk)
        ));
    }
    if let Some(why) = &cache.reason
        && cache.mode == CacheMode::Cold
        && !memory_backed
        && size > 0
    {
        notes.push(format!(
            "only the cold cache was measured: {why} (--cache warm|both asks for it)."
        ));
    }
    if plan.in_flight < MIN_IN_FLIGHT && plan.any_threaded() {
        notes.push(format!(
            "direct keeps only {} in flight (--threads × --chunk): below {} a fast array may idle between requests.",
            format_iec(plan.in_flight),
            format_iec(MIN_IN_FLIGHT)
        ));
    }
    if let Some(why) = &cache.unverifiable {
        notes.push(format!("{why}."));
    }
    if size == 0 {
        notes.push(
            "the file is empty: every method read 0 bytes, so there are no rates.".to_owned(),
        );
    }
    notes
}

/// Root read a file another user owns.
fn read_for_another_user(t: &Target) -> bool {
    crate::sys::is_root() && t.uid != invoking_uid().0
}

/// The report: the summaries judged (checksums, verdicts, advice, winner)
/// and everything that was read, planned and measured.
fn report(
    opts: &ReadTestOptions,
    f: Found,
    plan: plan::Plan,
    cache: CacheChoice,
    destination: Destination,
    s: Summarized,
    notes: Vec<String>,
) -> ReadTestReport {
    let Summarized {
        mut per_situation,
        sweep,
        knees,
        ceiling,
    } = s;
    let all_runs: Vec<MethodSummary> = per_situation
        .iter()
        .flat_map(|(_, l)| l.iter().cloned())
        .chain(
            sweep
                .iter()
                .filter(|row| {
                    // Rows not already in a method list.
                    !per_situation.iter().any(|(sit, l)| {
                        *sit == row.cache
                            && l.iter()
                                .any(|m| m.method == row.method && m.threads == row.threads)
                    })
                })
                .cloned(),
        )
        .collect();
    let blocks = Digest::new(opts.verify, f.t.size).expected_blocks();
    let checksum = analysis::check_checksums(opts.verify, blocks, &all_runs);
    let verdicts: Vec<analysis::Verdict> = per_situation
        .iter()
        .map(|(sit, l)| {
            let mut v = analysis::verdict(*sit, l);
            report::sweep_verdict(&mut v, &knees);
            v
        })
        .collect();
    let pairs: Vec<(Situation, &[MethodSummary])> = per_situation
        .iter()
        .map(|(sit, l)| (*sit, l.as_slice()))
        .collect();
    let hedge = analysis::hedge(&pairs);
    let advice = analysis::advice(&verdicts, hedge.as_ref());
    let mut take = |want: Situation| {
        per_situation
            .iter()
            .position(|(s, _)| *s == want)
            .map(|i| per_situation.remove(i).1)
            .unwrap_or_default()
    };
    let summaries = take(Situation::Cold);
    let warm_methods = take(Situation::Warm);
    let winner = analysis::winner(&summaries);
    let exit_code = if checksum.agree {
        crate::model::exit::OK.code
    } else {
        crate::model::exit::CHECKSUM_MISMATCH.code
    };
    let mut summary = report::summary_sentence(&verdicts, &advice, &checksum, f.t.size);
    if f.memory_backed && f.t.size > 0 {
        summary.push_str(&format!(
            " All from memory: {} keeps the file in RAM.",
            f.fs_type
        ));
    }
    ReadTestReport {
        path: opts.path.clone(),
        exit_code,
        summary,
        kernel: kernel_release(),
        file: file_info(&f),
        parameters: parameters(opts, plan, &cache),
        direct_io: direct_io(&f),
        destination,
        cache: cache_info(opts, &f, cache),
        methods: summaries,
        winner,
        checksum,
        notes,
        warm_methods,
        sweep,
        knees,
        verdicts,
        hedge,
        advice,
        ceiling,
    }
}

/// What was asked and planned, for the report.
fn parameters(opts: &ReadTestOptions, plan: plan::Plan, cache: &CacheChoice) -> Parameters {
    Parameters {
        methods: plan.methods,
        rounds: opts.rounds,
        threads: opts.max_threads(),
        chunk_bytes: plan.chunk,
        in_flight_bytes: plan.in_flight,
        buffer_bytes: opts.buffer_bytes(),
        verify: opts.verify,
        drop_caches: opts.drop_caches,
        thread_counts: plan.counts,
        cache: cache.mode,
        cache_default_reason: cache.reason.clone(),
    }
}

/// Whether O_DIRECT was used, and its alignment.
fn direct_io(f: &Found) -> DirectIo {
    DirectIo {
        used: f.direct.is_ok(),
        note: f.direct.as_ref().err().cloned(),
        offset_align_bytes: f.dio.map_or(DEFAULT_ALIGN, |a| u64::from(a.offset)),
        memory_align_bytes: f.dio.map_or(DEFAULT_ALIGN, |a| u64::from(a.memory)),
        align_source: if f.dio.is_some() { "statx" } else { "default" }.to_owned(),
    }
}

/// How the cache was made cold, and how that was proven.
fn cache_info(opts: &ReadTestOptions, f: &Found, cache: CacheChoice) -> CacheInfo {
    CacheInfo {
        eviction: if f.memory_backed {
            "none"
        } else if Switch::ReadTestSkipEviction.is_on() {
            "skipped"
        } else if opts.drop_caches {
            "drop-caches"
        } else {
            "fadvise"
        }
        .to_owned(),
        verified_by: (!f.memory_backed && cache.unverifiable.is_none())
            .then(|| memio::residency_source(&f.t.file).to_owned()),
        note: cache.unverifiable,
    }
}

/// The file and where it lives, for the report.
fn file_info(f: &Found) -> FileInfo {
    FileInfo {
        path: f.t.canonical.clone(),
        path_bytes: crate::report::text::non_utf8_bytes(&f.t.canonical),
        size_bytes: f.t.size,
        fs_type: f.fs_type.clone(),
        mount_point: f.mount.mount_point.clone(),
        source: f.mount.source.clone(),
        memory_backed: f.memory_backed,
        data_profiles: f.data_profiles.clone(),
        devices: f.devices.clone(),
        layout: f.layout,
        stripe_widths: f.widths.clone(),
        owner_uid: f.t.uid,
        read_as_root_for_another_user: read_for_another_user(&f.t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_defaults_keep_32_mib_in_flight() {
        let mut o = ReadTestOptions::new("/x");
        assert_eq!(o.chunk_bytes(), 8 << 20);
        o.threads = vec![2];
        assert_eq!(o.chunk_bytes(), 16 << 20);
        o.threads = vec![3];
        assert_eq!(o.chunk_bytes(), 11 << 20);
        // A sweep reads one chunk size, sized for its largest count.
        o.threads = vec![4, 1, 2];
        assert_eq!(o.chunk_bytes(), 8 << 20);
        assert_eq!(o.thread_counts(), vec![1, 2, 4]);
        o.threads = vec![16];
        assert_eq!(o.chunk_bytes(), 8 << 20);
        o.chunk = Some(1 << 20);
        assert_eq!(o.chunk_bytes(), 1 << 20);
    }

    #[test]
    fn options_are_validated() {
        let ok = ReadTestOptions::new("/x");
        assert!(ok.validate().is_ok());
        let bad = [
            ReadTestOptions {
                rounds: 0,
                ..ok.clone()
            },
            ReadTestOptions {
                threads: vec![0],
                ..ok.clone()
            },
            ReadTestOptions {
                threads: vec![1, 65],
                ..ok.clone()
            },
            ReadTestOptions {
                threads: vec![],
                ..ok.clone()
            },
            ReadTestOptions {
                threads: (1..=9).collect(),
                ..ok.clone()
            },
            ReadTestOptions {
                chunk: Some(1_000_000),
                ..ok.clone()
            },
            ReadTestOptions {
                chunk: Some(4096),
                ..ok.clone()
            },
            ReadTestOptions {
                buffer: Some(16 << 20),
                ..ok.clone()
            },
            ReadTestOptions {
                methods: vec![],
                ..ok.clone()
            },
        ];
        for b in bad {
            assert_eq!(b.validate().unwrap_err().exit_code(), 2, "{b:?}");
        }
        let e = ReadTestOptions {
            buffer: Some(16 << 20),
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(
            e.message().contains("every thread needs a slot"),
            "{}",
            e.message()
        );
        let dup = ReadTestOptions {
            methods: vec![Method::Mmap, Method::Direct, Method::Mmap],
            ..ok
        };
        assert_eq!(dup.method_list(), vec![Method::Mmap, Method::Direct]);
    }

    #[test]
    fn the_ceiling_comes_from_links_for_nvme_members_only() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/links/reference");
        let root = SysRoot::new(&fixture);
        let dev = |name: &str| BlockDevice {
            name: name.into(),
            major: 259,
            minor: 0,
            path: None,
        };
        let members = [dev("nvme0n1p2"), dev("nvme1n1"), dev("nvme2n1")];
        let raid0 = [crate::model::profile::Profile::Raid0];
        let c = read_ceiling(&root, &members, &raid0, "btrfs").unwrap();
        // RAID0 at the x2 member's pace: 3 × 3.94 GB/s.
        assert_eq!(c.profile, raid0[0]);
        assert!(
            (c.bytes_per_sec as f64 / 1e9 - 11.815).abs() < 0.01,
            "{c:?}"
        );
        assert_eq!(
            crate::report::rate::percent_of(c.bytes_per_sec as f64 / 2.0, c.bytes_per_sec as f64),
            Some(50.0)
        );
        // One drive on ext4: its own link, Gen4 x4.
        let one = read_ceiling(&root, &members[..1], &[], "ext4").unwrap();
        assert!(
            (one.bytes_per_sec as f64 / 1e9 - 7.877).abs() < 0.01,
            "{one:?}"
        );
        // No devices (tmpfs), or none that links knows: no ceiling.
        assert!(read_ceiling(&root, &[], &raid0, "btrfs").is_none());
        assert!(read_ceiling(&root, &[dev("loop0")], &raid0, "btrfs").is_none());
    }

    #[test]
    fn ring_is_whole_chunks_and_no_larger_than_needed() {
        const M: u64 = 1 << 20;
        assert_eq!(ring_bytes(1024 * M, 80 << 30, 8 * M), 1024 * M);
        assert_eq!(ring_bytes(1024 * M, 10 * M + 1, 8 * M), 16 * M);
        assert_eq!(ring_bytes(1024 * M, 0, 8 * M), 8 * M);
        assert_eq!(ring_bytes(100 * M, 1 << 30, 8 * M), 96 * M);
    }
}
