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
pub mod engine;
pub mod method;
pub mod report;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};

use crate::error::{Error, ErrorKind, Result};
use crate::parse::memory::{anon_huge_bytes, mem_available_bytes};
use crate::parse::mountinfo::{MountEntry, mount_containing};
use crate::parse::size::format_iec;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::direct_io::AlignedBuffer;
use crate::sys::kernel::extents::{self, Layout};
use crate::sys::kernel::memio::{self, MappedBuffer, RingBuffer};
use crate::sys::proc::diskstats::{self, BlockDevice};
use crate::sys::{fs::filesystem, is_root, kernel::pagecache, kernel::signals, kernel_release};

use analysis::{CacheState, CheckContext, MethodSummary, Run, Situation};
use digest::{Digest, VerifyMode};
use engine::Pass;
pub use method::Method;
pub use report::ReadTestReport;
use report::{CacheInfo, Destination, DirectIo, FileInfo, Parameters};

/// Default rounds.
pub const DEFAULT_ROUNDS: u32 = 3;
/// Default worker threads of direct and direct-copy.
pub(crate) const DEFAULT_THREADS: u32 = 4;
/// Default chunk: one pread of one thread.
pub(crate) const DEFAULT_CHUNK: u64 = 8 << 20;
/// Bytes direct keeps in flight at least, when the chunk is not given:
/// less leaves a fast array idle between requests.
pub(crate) const MIN_IN_FLIGHT: u64 = 32 << 20;
/// Default destination size.
pub(crate) const DEFAULT_BUFFER: u64 = 1 << 30;
/// Alignment when the filesystem does not say (btrfs, tmpfs).
pub(crate) const DEFAULT_ALIGN: u64 = 4096;
/// Test hook: skip the eviction and its mincore check, as if both had
/// silently failed, so the suite can show that the device cross-check
/// alone catches a warm cache. Only in builds with the `test-hooks`
/// feature.
#[cfg(feature = "test-hooks")]
pub const SKIP_EVICTION_ENV: &str = "BTRFS_LAB_READ_TEST_SKIP_EVICTION";

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
    /// Destination size.
    pub buffer: u64,
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
            buffer: DEFAULT_BUFFER,
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
    pub fn max_threads(&self) -> u32 {
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

    /// The methods, without duplicates, in the given order.
    pub fn method_list(&self) -> Vec<Method> {
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
        if self.buffer < needed {
            return Err(Error::usage(format!(
                "--buffer {} is smaller than --threads × --chunk ({}): every thread needs a slot",
                format_iec(self.buffer),
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
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::EACCES | Errno::EPERM) => Error::new(
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
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if let Some(e) = not_a_file_kind(path, kind) {
        return Err(e);
    }
    // O_NONBLOCK (added by open_entry_file): a FIFO swapped in after the
    // check must not hang the open.
    let file = parent
        .open_entry_file(&name, rustix::fs::OFlags::RDONLY)
        .map_err(|e| match e.kind() {
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
    fcntl(&file, FcntlArg::F_SETFL(OFlag::empty()))
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
fn not_a_file_kind(path: &Path, kind: rustix::fs::FileType) -> Option<Error> {
    use rustix::fs::FileType;
    let message = match kind {
        FileType::RegularFile => return None,
        FileType::Directory => format!("{} is a directory, not a file", path.display()),
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
    use std::os::fd::AsRawFd;
    let again = PathBuf::from(format!("/proc/self/fd/{}", t.file.as_raw_fd()));
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&again)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
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
    fcntl(&file, FcntlArg::F_SETFL(OFlag::O_DIRECT))
        .map_err(|e| Error::from_errno(e, "cannot set the flags of", path))?;
    if t.size > 0 {
        let mut probe = AlignedBuffer::new(align as usize, align as usize);
        loop {
            match file.read_at(probe.as_mut_slice(), 0) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
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
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
            Ok(Some(format!(
                "RWF_DONTCACHE is not supported here: it needs Linux 6.14 or later and a filesystem that implements it, and {fs_type} on {} does not",
                kernel_release()
            )))
        }
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
    let (maj, min) = (
        nix::sys::stat::major(t.dev) as u32,
        nix::sys::stat::minor(t.dev) as u32,
    );
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
    let euid = nix::unistd::geteuid();
    euid.is_root()
        || euid.as_raw() == t.uid
        || rustix::fs::accessat(
            t.parent.fd(),
            t.name.as_os_str(),
            rustix::fs::Access::WRITE_OK,
            rustix::fs::AtFlags::EACCESS | rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok()
}

/// Why the cache could not be proven cold, when it could not.
fn unverifiable_reason(t: &Target, memory_backed: bool) -> Option<String> {
    if memory_backed {
        return None;
    }
    if skip_eviction_hook() {
        return Some(
            "BTRFS_LAB_READ_TEST_SKIP_EVICTION is set (a test hook): the cache was neither evicted nor checked before the runs".to_owned(),
        );
    }
    (!mincore_can_tell(t)).then(|| {
        "the cache was evicted before each run but could not be checked: mincore reports every page of a file as cached unless you own it or may write to it (Linux 5.0+); the device cross-check still guards the figures".to_owned()
    })
}

#[cfg(feature = "test-hooks")]
fn skip_eviction_hook() -> bool {
    std::env::var(SKIP_EVICTION_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Without the `test-hooks` feature the environment cannot skip anything.
#[cfg(not(feature = "test-hooks"))]
fn skip_eviction_hook() -> bool {
    false
}

/// Who asked for the run: `SUDO_UID` when sudo set it, else the real uid;
/// and whether it came from `SUDO_UID`.
fn invoking_uid() -> (u32, bool) {
    match std::env::var("SUDO_UID").ok().and_then(|v| v.parse().ok()) {
        Some(uid) => (uid, true),
        None => (rustix::process::getuid().as_raw(), false),
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
    if skip_eviction_hook() {
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
fn read_ceiling(
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

/// Runs the test. `progress` is called a few times a second during runs.
pub fn run(opts: &ReadTestOptions, progress: &mut dyn FnMut(&Progress)) -> Result<ReadTestReport> {
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

    let counts = opts.thread_counts();
    let max_threads = opts.max_threads() as usize;
    let ring_len = ring_bytes(opts.buffer, t.size, chunk);
    let bounce_len = if methods.contains(&Method::DirectCopy) {
        chunk * u64::from(opts.max_threads())
    } else {
        0
    };
    memory_check(&opts.sysroot, ring_len + bounce_len)?;
    let unverifiable = unverifiable_reason(&t, memory_backed);
    let can_verify = unverifiable.is_none();
    let available = available_memory(&opts.sysroot);
    let fits = available.map(|a| t.size + ring_len + bounce_len <= a / 4 * 3);
    let (cache_mode, cache_reason) = match opts.cache {
        Some(m) => {
            if m != CacheMode::Cold && !memory_backed {
                warm_possible(&t, path, can_verify, fits, available)?;
            }
            (m, None)
        }
        None => {
            let (m, why) = default_cache(t.size, memory_backed, can_verify, fits);
            if skip_eviction_hook() {
                (
                    m,
                    Some("the cache checks are skipped (a test hook)".to_owned()),
                )
            } else {
                (m, Some(why))
            }
        }
    };
    let situations = cache_mode.situations();
    let alloc_error = |e: std::io::Error| {
        Error::new(
            ErrorKind::NoSpace,
            format!("cannot allocate the destination buffer: {e}"),
        )
        .with_hint("use a smaller --buffer")
    };
    let mut ring =
        RingBuffer::new((ring_len / chunk) as usize, chunk as usize).map_err(alloc_error)?;
    let mut bounce: Vec<MappedBuffer> = (0..if bounce_len > 0 { max_threads } else { 0 })
        .map(|_| MappedBuffer::new(chunk as usize))
        .collect::<std::io::Result<_>>()
        .map_err(alloc_error)?;
    let huge_page_bytes = fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| anon_huge_bytes(&s, ring.address()));

    let runnable: Vec<Method> = methods
        .iter()
        .copied()
        .filter(|m| !(*m == Method::Dontcache && dontcache_unsupported.is_some()))
        .collect();
    // One unit per method and thread count; rounds rotate over the units.
    let units: Vec<(Method, u32)> = runnable
        .iter()
        .flat_map(|&m| {
            if m.is_threaded() {
                counts.iter().map(|&c| (m, c)).collect::<Vec<_>>()
            } else {
                vec![(m, 1)]
            }
        })
        .collect();
    let direct_file = direct.as_ref().ok();
    type Key = (Situation, Method, u32);
    let mut runs: BTreeMap<Key, Vec<Run>> = BTreeMap::new();
    let mut sequence = 0u32;
    for &situation in &situations {
        for round in 0..opts.rounds {
            for (method, threads) in method::round_order(&units, round as usize) {
                signals::check()?;
                let (cache, resident) = match situation {
                    Situation::Cold => {
                        make_cold(&t, path, memory_backed, opts.drop_caches, can_verify)?
                    }
                    Situation::Warm => make_warm(&t, path, memory_backed)?,
                };
                let before = if devices.is_empty() {
                    None
                } else {
                    Some(diskstats::bytes_read(&opts.sysroot, &devices)?)
                };
                let pass = Pass {
                    path,
                    size: t.size,
                    plain: &t.file,
                    direct: direct_file.filter(|_| method.uses_o_direct()),
                    threads: threads as usize,
                    align: align as usize,
                    verify: opts.verify,
                };
                let r = engine::run_pass(method, &pass, &mut ring, &mut bounce, &mut |done| {
                    progress(&Progress {
                        method,
                        threads: method.is_threaded().then_some(threads),
                        cache: situation,
                        round: round + 1,
                        rounds: opts.rounds,
                        done,
                        total: t.size,
                    });
                })?;
                let device_read_bytes = match before {
                    Some(b) => {
                        Some(diskstats::bytes_read(&opts.sysroot, &devices)?.saturating_sub(b))
                    }
                    None => None,
                };
                sequence += 1;
                runs.entry((situation, method, threads))
                    .or_default()
                    .push(Run {
                        round: round + 1,
                        sequence,
                        bytes_read: r.bytes,
                        seconds: r.seconds,
                        cpu_seconds: r.cpu_seconds,
                        device_read_bytes,
                        resident_before_bytes: resident,
                        cache,
                        digest: r.digest.hex(),
                        digest_blocks: r.digest.blocks(),
                        complete: r.digest.is_complete() && r.bytes == t.size,
                        flag: None,
                    });
            }
        }
    }

    let ctx = CheckContext {
        // Counting only some members would make honest runs look impossible.
        devices_known: !devices.is_empty() && missing_members.is_empty(),
        layout_allowance: layout.map_or(0, |l| {
            l.hole_bytes + l.unwritten_bytes + l.inline_bytes + l.encoded_bytes + l.delalloc_bytes
        }),
    };
    let direct_note = direct.as_ref().err().cloned();
    let ceiling = read_ceiling(&opts.sysroot, &devices, &data_profiles, &fs_type);
    let ceiling_rate = ceiling.as_ref().map(|c| c.bytes_per_sec as f64);
    let mut per_situation: Vec<(Situation, Vec<MethodSummary>)> = Vec::new();
    let mut sweep: Vec<MethodSummary> = Vec::new();
    let mut knees: Vec<report::Knee> = Vec::new();
    for &situation in &situations {
        let mut list = Vec::new();
        for &m in &methods {
            if m == Method::Dontcache
                && let Some(why) = &dontcache_unsupported
            {
                let mut u = analysis::unsupported(m, why.clone());
                u.cache = situation;
                list.push(u);
                continue;
            }
            let (o_direct, note) = if m.uses_o_direct() {
                (Some(direct_file.is_some()), direct_note.clone())
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
                    .and_then(|(r, c)| crate::model::rate::percent_of(r, c));
                s
            };
            if !m.is_threaded() {
                list.push(one(1));
                continue;
            }
            let rows: Vec<MethodSummary> = counts.iter().map(|&c| one(c)).collect();
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
                    knees.push(report::Knee {
                        cache: situation,
                        method: m,
                        threads: k,
                        rate_bytes_per_sec: at,
                        best_rate_bytes_per_sec: best,
                    });
                }
                sweep.extend(rows.iter().cloned());
            }
            if let Some(row) = rows.into_iter().find(|r| r.threads == Some(chosen)) {
                list.push(row);
            }
        }
        per_situation.push((situation, list));
    }
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
    let blocks = Digest::new(opts.verify, t.size).expected_blocks();
    let checksum = analysis::check_checksums(opts.verify, blocks, &all_runs);
    let verdicts: Vec<analysis::Verdict> = per_situation
        .iter()
        .map(|(sit, l)| analysis::verdict(*sit, l))
        .collect();
    let pairs: Vec<(Situation, &[MethodSummary])> = per_situation
        .iter()
        .map(|(sit, l)| (*sit, l.as_slice()))
        .collect();
    let hedge = analysis::hedge(&pairs);
    let advice = analysis::advice(&verdicts, hedge.as_ref());
    let take = |want: Situation, per: &mut Vec<(Situation, Vec<MethodSummary>)>| {
        per.iter()
            .position(|(s, _)| *s == want)
            .map(|i| per.remove(i).1)
            .unwrap_or_default()
    };
    let summaries = take(Situation::Cold, &mut per_situation);
    let warm_methods = take(Situation::Warm, &mut per_situation);
    let winner = analysis::winner(&summaries);

    let mut notes = Vec::new();
    let invoker = invoking_uid();
    let foreign = rustix::process::geteuid().is_root() && t.uid != invoker.0;
    if foreign {
        notes.push(format!(
            "{} belongs to uid {}, not to the invoking user (uid {}{}): root read it, so its size and checksum are shown to a user who may not be allowed to read it.",
            t.canonical.display(),
            t.uid,
            invoker.0,
            if invoker.1 { ", from SUDO_UID" } else { "" }
        ));
    }
    if memory_backed {
        notes.push(format!(
            "{} is on {fs_type}, which keeps files in memory: there is no device and no cold cache, so every figure is a memory copy, not a read from storage.",
            t.canonical.display()
        ));
    }
    if let Some(why) = &direct_note
        && methods.iter().any(|m| m.uses_o_direct())
    {
        notes.push(format!("{why}."));
    }
    if let Some(l) = layout {
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
    if !missing_members.is_empty() {
        notes.push(format!(
            "/proc/diskstats does not show the btrfs member{} {}: the device cross-check could not run.",
            if missing_members.len() > 1 { "s" } else { "" },
            missing_members.join(", ")
        ));
    } else if devices.is_empty() && !memory_backed {
        notes.push(format!(
            "no block device counts the reads of this {fs_type} filesystem (network or stacked?): the device cross-check could not run."
        ));
    }
    let in_flight = chunk * u64::from(opts.max_threads());
    if counts.len() > 1 && runnable.iter().any(|m| m.is_threaded()) {
        notes.push(format!(
            "the thread sweep ({}) reads {} chunks at every count, so the rows differ only in threads; the method list shows each threaded method at its knee (the fewest threads within 5% of its best).",
            counts.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            format_iec(chunk)
        ));
    }
    if let Some(why) = &cache_reason
        && cache_mode == CacheMode::Cold
        && !memory_backed
        && t.size > 0
    {
        notes.push(format!(
            "only the cold cache was measured: {why} (--cache warm|both asks for it)."
        ));
    }
    if in_flight < MIN_IN_FLIGHT && runnable.iter().any(|m| m.is_threaded()) {
        notes.push(format!(
            "direct keeps only {} in flight (--threads × --chunk): below {} a fast array may idle between requests.",
            format_iec(in_flight),
            format_iec(MIN_IN_FLIGHT)
        ));
    }
    if let Some(why) = &unverifiable {
        notes.push(format!("{why}."));
    }
    if t.size == 0 {
        notes.push(
            "the file is empty: every method read 0 bytes, so there are no rates.".to_owned(),
        );
    }

    let exit_code = if checksum.agree {
        0
    } else {
        report::EXIT_CHECKSUM_MISMATCH
    };
    let mut summary = report::summary_sentence(&verdicts, &advice, &checksum, t.size);
    if memory_backed && t.size > 0 {
        summary.push_str(&format!(
            " All from memory: {fs_type} keeps the file in RAM."
        ));
    }
    Ok(ReadTestReport {
        path: opts.path.clone(),
        exit_code,
        summary,
        kernel: kernel_release(),
        file: FileInfo {
            path: t.canonical.clone(),
            path_bytes: crate::model::text::non_utf8_bytes(&t.canonical),
            size_bytes: t.size,
            fs_type,
            mount_point: mount.mount_point.clone(),
            source: mount.source.clone(),
            memory_backed,
            data_profiles,
            devices,
            layout,
            owner_uid: t.uid,
            read_as_root_for_another_user: foreign,
        },
        parameters: Parameters {
            methods,
            rounds: opts.rounds,
            threads: opts.max_threads(),
            chunk_bytes: chunk,
            in_flight_bytes: in_flight,
            buffer_bytes: opts.buffer,
            verify: opts.verify,
            drop_caches: opts.drop_caches,
            thread_counts: counts.clone(),
            cache: cache_mode,
            cache_default_reason: cache_reason,
        },
        direct_io: DirectIo {
            used: direct_file.is_some(),
            note: direct_note,
            offset_align_bytes: dio.map_or(DEFAULT_ALIGN, |a| u64::from(a.offset)),
            memory_align_bytes: dio.map_or(DEFAULT_ALIGN, |a| u64::from(a.memory)),
            align_source: if dio.is_some() { "statx" } else { "default" }.to_owned(),
        },
        destination: Destination {
            bytes: ring.len() as u64,
            slots: ring.slots() as u64,
            huge_page_bytes,
            bounce_bytes: bounce_len,
        },
        cache: CacheInfo {
            eviction: if memory_backed {
                "none"
            } else if skip_eviction_hook() {
                "skipped"
            } else if opts.drop_caches {
                "drop-caches"
            } else {
                "fadvise"
            }
            .to_owned(),
            verified_by: (!memory_backed && can_verify).then(|| "mincore".to_owned()),
            note: unverifiable,
        },
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
    })
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
                buffer: 16 << 20,
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
            buffer: 16 << 20,
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
            crate::model::rate::percent_of(c.bytes_per_sec as f64 / 2.0, c.bytes_per_sec as f64),
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
