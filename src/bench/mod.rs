//! `bench`: a CrystalDiskMark-style suite on fio whose every figure is
//! checked against what the kernel saw.
//!
//! fio does the I/O (btrfs-lab writes its job files and reads its JSON);
//! around each run btrfs-lab reads what fio cannot know: the member
//! devices' sector counters, the test file's page-cache residency, the
//! page cache dirtied by writes, the file's extents (compression, never
//! written regions), the array's PCIe ceiling and the drives' thermal
//! counters. A figure that fails a check is flagged with the reason and
//! is not given as a result.

pub mod analysis;
pub mod buffers;
pub mod cliff;
pub mod compare;
pub mod history;
pub mod html;
pub mod jobs;
pub mod members;
pub mod metadata;
pub mod metrics;
pub mod plan;
pub mod profile;
pub mod profiles;
pub mod report;
pub(crate) mod sensors;
pub mod sustained;
#[cfg(test)]
pub(crate) mod testdata;

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::hooks::Switch;
use crate::model::text::escape_path;
use crate::parse::fio::{FioJob, FioOutput};
use crate::parse::size::format_iec;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::{HeldDir, Removal, TrustedDir, identity_of};
use crate::sys::fs::root::SysRoot;
use crate::sys::tools::fio::{self, FioRunner};
use crate::sys::{fs::filesystem, kernel::btrfs, kernel::signals};

use analysis::{CheckContext, Sample};
use jobs::JobSettings;
use profile::{Direction, TestSpec};
pub use report::BenchReport;
use report::{CheckCode, FileLayout, Severity, Status, TestResult};
use sensors::Sensors;

/// Default test file size.
pub(crate) const DEFAULT_SIZE: u64 = 1 << 30;
/// Default runs per test.
pub const DEFAULT_RUNS: u32 = 5;
/// Default seconds per run.
pub const DEFAULT_DURATION: u64 = 5;
/// Smallest test file.
pub(crate) const MIN_SIZE: u64 = 16 << 20;
/// The directory btrfs-lab makes under DIR starts with this.
pub const WORK_DIR_PREFIX: &str = ".btrfs-lab-bench-";
/// The test file's name in it.
pub const TEST_FILE: &str = "bench.dat";

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// DIR: the test directory is made under it.
    pub dir: PathBuf,
    /// `default`, `nvme` or `custom`.
    pub profile: String,
    /// The tests.
    pub tests: Vec<TestSpec>,
    /// Test file size.
    pub size: u64,
    /// Runs per test.
    pub runs: u32,
    /// Seconds per run.
    pub duration_secs: u64,
    /// Seconds between runs.
    pub interval_secs: u64,
    /// Keep data checksums on the test file (no NOCOW).
    pub cow: bool,
    /// Also read each member device alone and all at once.
    pub members: bool,
    /// Also run every test as a 70/30 read/write mix (after the writes).
    pub mix: bool,
    /// `--hugepages`: reserve the huge pages the sequential tests' buffers
    /// need when too few are free (asked first), give them back after.
    pub hugepages: bool,
    /// May mount debugfs (the per-device dirtied counter) and tracefs (the
    /// test file's own dirtied pages) in a private mount namespace while
    /// they are opened (root; the process returns to its own namespace).
    pub allow_private_debugfs: bool,
    /// Where /proc and /sys are read.
    pub sysroot: SysRoot,
    /// `--state-dir`: where the settings ledger records `vm.nr_hugepages`
    /// before `--hugepages` raises it (default: btrfs-lab's state directory).
    pub state_dir: Option<PathBuf>,
}

impl BenchOptions {
    /// Defaults for DIR.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            profile: "default".into(),
            tests: profile::DEFAULT_TESTS.to_vec(),
            size: DEFAULT_SIZE,
            runs: DEFAULT_RUNS,
            duration_secs: DEFAULT_DURATION,
            interval_secs: 0,
            cow: false,
            members: false,
            mix: false,
            hugepages: false,
            allow_private_debugfs: false,
            sysroot: SysRoot::host(),
            state_dir: None,
        }
    }

    /// The file size in use: whole MiB.
    pub fn size_bytes(&self) -> u64 {
        self.size / (1 << 20) * (1 << 20)
    }

    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        if self.size_bytes() < MIN_SIZE {
            return Err(Error::usage(format!(
                "--file-size {} is too small: use {} or more",
                format_iec(self.size),
                format_iec(MIN_SIZE)
            )));
        }
        if !(1..=100).contains(&self.runs) {
            return Err(Error::usage("--rounds must be between 1 and 100"));
        }
        if !(1..=3600).contains(&self.duration_secs) {
            return Err(Error::usage(
                "--duration must be between 1 and 3600 seconds",
            ));
        }
        if self.interval_secs > 3600 {
            return Err(Error::usage("--interval must be at most 3600 seconds"));
        }
        if self.tests.is_empty() {
            return Err(Error::usage("no tests to run"));
        }
        for t in &self.tests {
            if jobs::range_per_thread(t, self.size_bytes()) == 0 {
                return Err(Error::usage(format!(
                    "--file-size {} is too small for {t}: each of its {} threads needs at least one block of its own",
                    format_iec(self.size),
                    t.threads
                )));
            }
        }
        Ok(())
    }

    /// Free space DIR needs: the file, plus a margin (with --cow the
    /// writes may allocate the file's size again before the old extents
    /// are freed).
    pub(crate) fn needed_space(&self) -> u64 {
        let size = self.size_bytes();
        let margin = (size / 10).max(64 << 20);
        if self.cow {
            2 * size + margin
        } else {
            size + margin
        }
    }
}

/// Where the bench is, for a progress display.
#[derive(Debug, Clone)]
pub struct Progress {
    /// `fill`, or the test (`SEQ1M Q8T1 read`).
    pub what: String,
    /// Run, from 1 (0 for the fill).
    pub run: u32,
    /// Runs of this test.
    pub runs: u32,
    /// Seconds left, estimated.
    pub eta_secs: u64,
}

// ---------------------------------------------------------------------
// Signals: SIGINT, SIGTERM and SIGHUP (a dropped SSH session) all stop
// the bench at the next safe point (`signals::Mode::CleanupFirst`): fio's
// process group is killed, the test directory (and the sandbox) removed,
// exit status 130. A second signal does not exit early: that would leave
// them (docs/bench.md).

pub(crate) fn install_signals() -> Result<()> {
    signals::install_mode(signals::Mode::CleanupFirst)
}

/// `Err(interrupted)` once a signal arrived.
pub(crate) fn check_stop() -> Result<()> {
    signals::check()
}

/// Sleeps `secs`, waking for a signal.
fn pause(secs: u64) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        check_stop()?;
        thread::sleep(Duration::from_millis(50));
    }
    check_stop()
}

// ---------------------------------------------------------------------
// The test directory.

/// The directory btrfs-lab made under DIR: root's alone (mode 0700), held
/// by descriptor, and removed with everything in it when dropped (errors,
/// panics and signals included). DIR may belong to another user, who can
/// rename the work directory inside DIR but cannot change what is in it:
/// every step (the test file, fio's job files, output and logs, the
/// clean-up) goes through the held descriptor, and the clean-up removes
/// only what is inside it, then the directory itself if its name in DIR is
/// still that directory (by identity).
#[derive(Debug)]
pub(crate) struct WorkDir {
    parent: HeldDir,
    name: OsString,
    identity: FileIdentity,
    dir: Option<TrustedDir>,
}

impl WorkDir {
    /// Makes a fresh private directory in the held directory `parent`
    /// (fails rather than reuse anything that exists).
    pub fn create(parent: HeldDir) -> Result<Self> {
        for _ in 0..10 {
            let name = format!(
                "{WORK_DIR_PREFIX}{}-{}{}",
                std::process::id(),
                crate::sys::fs::nonce::nonce(),
                &crate::sys::fs::nonce::nonce()[..2]
            );
            if parent.stat(&name)?.is_some() {
                continue;
            }
            let dir = parent.mkdir_private(&name, 0o700)?;
            let identity = dir.identity()?;
            return Ok(Self {
                parent,
                name: name.into(),
                identity,
                dir: Some(dir),
            });
        }
        Err(Error::new(
            ErrorKind::State,
            format!(
                "cannot find a fresh directory name in {}",
                escape_path(parent.path())
            ),
        ))
    }

    /// The held directory.
    pub fn dir(&self) -> &TrustedDir {
        self.dir.as_ref().expect("held until removed")
    }

    /// Its path when it was made (for messages; never opened again).
    pub fn path(&self) -> &Path {
        self.dir().path()
    }

    /// Removes it now. Everything in it goes, or the error says what could
    /// not; the directory itself goes too unless someone else renamed or
    /// replaced it in DIR meanwhile: then the returned note says so (the
    /// empty directory is left where they put it; the figures are still of
    /// the test file, which is checked by descriptor after every run).
    pub fn remove(mut self) -> Result<Option<String>> {
        self.remove_now()
    }

    fn remove_now(&mut self) -> Result<Option<String>> {
        let Some(dir) = self.dir.take() else {
            return Ok(None);
        };
        let shown = dir.path().to_path_buf();
        empty_tree(&dir, 2)?;
        drop(dir);
        match self.parent.remove_empty_dir(&self.name, self.identity)? {
            Removal::Removed | Removal::Absent => Ok(None),
            Removal::NotOurs => Ok(Some(format!(
                "{} was renamed or replaced by someone else while bench ran: everything in it was removed, the empty directory was left where they put it",
                escape_path(&shown)
            ))),
            Removal::NotEmpty => Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} is not empty after the clean-up; left",
                    escape_path(&shown)
                ),
            )),
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = self.remove_now();
    }
}

/// Removes everything in the private directory `dir` (nobody else can
/// change it): regular files, and directories `depth` levels down. Never
/// follows a link; anything that is neither is reported and left.
fn empty_tree(dir: &TrustedDir, depth: u32) -> Result<()> {
    for name in dir.names()? {
        let Some(st) = dir.stat(&name)? else {
            continue;
        };
        let id = identity_of(&st);
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let removal = if kind == rustix::fs::FileType::Directory && depth > 0 {
            empty_tree(&dir.open_dir(&name)?, depth - 1)?;
            dir.remove_dir(&name, id)?
        } else {
            dir.remove_file(&name, id)?
        };
        if !matches!(removal, Removal::Removed | Removal::Absent) {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} is not a file bench made; left",
                    escape_path(&dir.join(&name))
                ),
            ));
        }
    }
    Ok(())
}

/// The pid in the name of a work directory (`.btrfs-lab-bench-PID-…`, and
/// the older `.btrfs-lab-bench-meta-PID-N`).
pub(crate) fn work_dir_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(WORK_DIR_PREFIX)?;
    let rest = rest.strip_prefix("meta-").unwrap_or(rest);
    let (pid, tail) = rest.split_once('-')?;
    if pid.is_empty() || tail.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the work directories that bench runs left in `parent` when they
/// were killed (SIGKILL, a crash, a power cut): named like ours, with the
/// pid of a process that no longer runs, root's alone (so what is in them
/// is ours). Returns one note per directory removed (or left, and why).
pub(crate) fn sweep_stale(parent: &HeldDir) -> Vec<String> {
    let mut notes = Vec::new();
    let Ok(names) = parent.names() else {
        return notes;
    };
    for name in names {
        let Some(pid) = name.to_str().and_then(work_dir_pid) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let shown = parent.join(&name);
        let Ok(dir) = parent.open_private_subdir(&name) else {
            notes.push(format!(
                "{} looks like a bench work directory but is not root's alone; left alone",
                escape_path(&shown)
            ));
            continue;
        };
        let (files, bytes) = tree_size(&dir, 2);
        let r = dir
            .identity()
            .and_then(|id| empty_tree(&dir, 2).map(|()| id))
            .and_then(|id| parent.remove_empty_dir(&name, id));
        notes.push(match r {
            Ok(Removal::Removed) => format!(
                "removed {} left by a bench run that was killed (pid {pid}): {files} file(s), {}",
                escape_path(&shown),
                format_iec(bytes)
            ),
            Ok(_) => format!("{} changed while it was removed; left", escape_path(&shown)),
            Err(e) => format!("could not remove {}: {}", escape_path(&shown), e.message()),
        });
    }
    notes
}

/// Files and bytes in a private tree (for what a sweep says it removed).
fn tree_size(dir: &TrustedDir, depth: u32) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    for name in dir.names().unwrap_or_default() {
        let Ok(Some(st)) = dir.stat(&name) else {
            continue;
        };
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
            if depth > 0
                && let Ok(sub) = dir.open_dir(&name)
            {
                let (f, b) = tree_size(&sub, depth - 1);
                files += f;
                bytes += b;
            }
        } else {
            files += 1;
            bytes += st.st_blocks as u64 * 512;
        }
    }
    (files, bytes)
}

/// An output file (`--report`, `--save-jobs`) checked before the run: its
/// directory held open (only root's links followed on the way), writable,
/// and the name free. Written at the end with `O_EXCL | O_NOFOLLOW` beneath
/// the held directory: never over an existing file, never through a link.
pub struct OutputFile {
    dir: HeldDir,
    name: OsString,
}

impl OutputFile {
    /// Checks before the run that `path` can be created: its directory is
    /// held (no user's link followed) and the name is free.
    pub fn prepare(path: &Path) -> Result<Self> {
        let abs = std::path::absolute(path)
            .map_err(|e| Error::usage(format!("invalid file name {}: {e}", escape_path(path))))?;
        let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
            return Err(Error::usage(format!(
                "{} is not a file name",
                escape_path(path)
            )));
        };
        let dir = HeldDir::open(parent)?;
        dir.check_writable()?;
        let f = Self {
            dir,
            name: name.to_os_string(),
        };
        f.check_free()?;
        Ok(f)
    }

    /// Checks again, after the run, that the name is still free.
    pub fn check_free(&self) -> Result<()> {
        if self.dir.stat(&self.name)?.is_some() {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} exists; bench does not overwrite files",
                    escape_path(&self.dir.join(&self.name))
                ),
            )
            .with_hint("choose a new file name"));
        }
        Ok(())
    }

    /// The same directory, another name (FILE.html → FILE.fio).
    pub fn sibling(&self, ext: &str) -> Result<Self> {
        let name = Path::new(&self.name).with_extension(ext).into_os_string();
        Ok(Self {
            dir: HeldDir::open(self.dir.path()).and_then(|d| {
                if d.identity()? == self.dir.identity()? {
                    Ok(d)
                } else {
                    Err(Error::new(
                        ErrorKind::State,
                        format!("{} changed during the run", escape_path(self.dir.path())),
                    ))
                }
            })?,
            name,
        })
    }

    /// Writes `text` to a new file (O_EXCL) in the held directory.
    pub fn write(&self, text: &str) -> Result<()> {
        use std::io::Write;
        let path = self.dir.join(&self.name);
        let mut f = self.dir.create_new_file(&self.name, 0o644)?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::from_io(&e, "cannot write", &path))
    }
}

/// The directory a bench mode measures, opened once and held, with what
/// the checks before any change need.
#[derive(Debug)]
pub struct Target {
    /// DIR, held (only root's links were followed on the way).
    pub held: HeldDir,
    /// Its filesystem, read through the descriptor.
    pub info: filesystem::DirFs,
    /// btrfs?
    pub is_btrfs: bool,
    /// The filesystem's UUID (btrfs: the fsid, read through the descriptor).
    pub uuid: Option<String>,
    /// The mount's options.
    pub mount_options: Vec<String>,
    /// Data profiles (btrfs).
    pub data_profiles: Vec<crate::model::profile::Profile>,
    /// Member devices found in /proc/diskstats.
    pub devices: Vec<report::MemberDevice>,
    /// Members /proc/diskstats does not show.
    pub devices_missing: Vec<String>,
    /// What [`prepare`] swept (killed runs' work directories) to judge the
    /// free space: notes for the report.
    pub swept: Vec<String>,
}

/// How the sequential tests' I/O buffers are backed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Buffers {
    /// Huge pages (`iomem=mmaphuge`): the true ceiling of large I/O.
    Huge {
        /// Bytes of one.
        page_bytes: u64,
        /// How many the tests need at once.
        pages: u64,
        /// `--hugepages`: `vm.nr_hugepages` now and during the run, when
        /// more must be reserved.
        reserve: Option<(u64, u64)>,
    },
    /// Ordinary pages, and why.
    Ordinary {
        /// Why not huge pages (empty: no sequential test).
        why: String,
    },
}

/// Huge pages when enough are free, or reserved with `--hugepages`;
/// otherwise ordinary buffers and why.
pub fn buffers(opts: &BenchOptions) -> Buffers {
    let Some(hp) = crate::sys::kernel::hugepages::read(&opts.sysroot) else {
        return Buffers::Ordinary {
            why: "this kernel has no huge pages".into(),
        };
    };
    let pages = jobs::huge_pages_needed(&opts.tests, hp.page_bytes);
    if pages == 0 {
        return Buffers::Ordinary { why: String::new() };
    }
    // Pages another bench reserved for itself are not this one's.
    let available = if crate::sys::kernel::hugepages::reserved_by_another_run() {
        0
    } else {
        hp.available()
    };
    if available >= pages {
        return Buffers::Huge {
            page_bytes: hp.page_bytes,
            pages,
            reserve: None,
        };
    }
    if opts.hugepages {
        let now = opts
            .sysroot
            .read_attr(&opts.sysroot.proc("sys/vm/nr_hugepages"))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(hp.total);
        return Buffers::Huge {
            page_bytes: hp.page_bytes,
            pages,
            reserve: Some((now, now + (pages - available))),
        };
    }
    Buffers::Ordinary {
        why: format!(
            "{available} huge page{} of {} free, {pages} needed",
            if available == 1 { "" } else { "s" },
            crate::parse::size::format_iec(hp.page_bytes)
        ),
    }
}

/// The note of a run whose sequential tests used ordinary buffers, with
/// what they cost here (or why that could not be measured).
fn ordinary_buffers_note(
    why: &str,
    cost: std::result::Result<&buffers::BufferCost, &buffers::Unmeasured>,
) -> String {
    let measured = match cost {
        Ok(c) => c.describe(),
        Err(e) => format!("what that costs here could not be measured: {e}"),
    };
    format!(
        "fio's I/O buffers for the sequential tests were ordinary 4 KiB pages ({why}): large sequential figures can be below the drives' ceiling; {measured}; --hugepages reserves the huge pages they need for the run and gives them back"
    )
}

/// The UUID of the filesystem under DIR (btrfs: its fsid), for `bench
/// --history DIR`; DIR held, any filesystem, read-only ones too.
pub fn filesystem_uuid(dir: &Path) -> Result<String> {
    let held = HeldDir::open(dir)?;
    let info = filesystem::inspect_held(&SysRoot::host(), &held)?;
    if info.mount.fs_type != "btrfs" {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "{} is on {}, not btrfs: the history is kept per btrfs filesystem",
                escape_path(&info.dir),
                info.mount.fs_type
            ),
        )
        .with_hint("bench --history without DIR shows every filesystem's runs"));
    }
    btrfs::fsid_of(held.fd(), &info.dir)
}

/// Opens DIR for a bench mode and refuses, before anything changes, what
/// cannot be measured: a user's symbolic link on the way, not a directory,
/// a memory-backed filesystem, a read-only one. `what` names the mode in
/// messages ("bench writes a test file").
pub fn open_target(sysroot: &SysRoot, dir: &Path, what: &str) -> Result<Target> {
    let held = HeldDir::open(dir)?;
    let info = filesystem::inspect_held(sysroot, &held)?;
    let fs_type = info.mount.fs_type.clone();
    refuse_memory_backed(&fs_type, &info.dir)?;
    if info.read_only {
        return Err(Error::new(
            ErrorKind::ReadOnly,
            format!(
                "{} is on a read-only filesystem: {what}",
                escape_path(&info.dir)
            ),
        )
        .with_hint("remount it read-write, or give a directory on a writable filesystem"));
    }
    let is_btrfs = fs_type == "btrfs";
    let mount_options: Vec<String> = info.mount.options().map(str::to_owned).collect();
    let data_profiles = if is_btrfs {
        btrfs::block_group_profiles_of(held.fd(), &info.dir)
            .map(|p| p.data)
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let uuid = is_btrfs
        .then(|| btrfs::fsid_of(held.fd(), &info.dir).ok())
        .flatten();
    let (devices, devices_missing) = sensors::member_devices(sysroot, &held, &info.mount)?;
    Ok(Target {
        held,
        info,
        is_btrfs,
        uuid,
        mount_options,
        data_profiles,
        devices,
        devices_missing,
        swept: Vec::new(),
    })
}

// ---------------------------------------------------------------------
// The measuring loop, over a fio runner and the kernel's counters (both
// traits, so the pure tests drive it with mocks).

/// What the loop needs.
#[derive(Clone)]
pub(crate) struct SuiteConfig<'a> {
    /// The tests.
    pub tests: &'a [TestSpec],
    /// Job settings.
    pub settings: JobSettings<'a>,
    /// Runs per test.
    pub runs: u32,
    /// Seconds between runs.
    pub interval_secs: u64,
    /// Where job files go (fio's working directory).
    pub(crate) work_dir: &'a TrustedDir,
    /// The test file's identity.
    pub test_file: FileIdentity,
    /// Called after each fio run: checks that fio worked on our test file
    /// (the held file's identity, size, and for writes its mtime).
    pub verify: &'a dyn Fn(Direction) -> Result<()>,
    /// How the file is filled before the reads.
    pub fill: FillMode,
    /// Evict the test file before each read run.
    pub evict: bool,
    /// Multiply fio's claims (test hook).
    pub(crate) scale_claimed: f64,
    /// Also the 70/30 mixes.
    pub mix: bool,
}

/// How the test file gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FillMode {
    /// btrfs-lab writes it: O_DIRECT, 1 MiB writes of BLAKE3 output
    /// (fio's own buffers are a multiplicative hash chain whose low bits
    /// repeat: 1-2% compressible, enough for compress-force to compress
    /// some extents).
    Own,
    /// fio writes it (test hook: compressible data).
    Fio,
    /// Not filled (test hook: fallocated only).
    Skip,
}

/// Threads that fill the test file at once.
const FILL_WRITERS: u64 = 8;

/// Writes `size` bytes of incompressible data (BLAKE3 XOF output under a
/// random key) into the test file `name` of the held work directory (which
/// must still be the file `expected`), O_DIRECT where the filesystem
/// allows, then syncs.
pub(crate) fn fill_incompressible(
    dir: &TrustedDir,
    name: &str,
    expected: FileIdentity,
    size: u64,
) -> Result<()> {
    use crate::sys::kernel::direct_io::{AlignedBuffer, write_all_at};
    use rustix::fs::{Mode, OFlags};
    const CHUNK: usize = 1 << 20;
    let path = dir.join(name);
    let open = |direct: bool| {
        let flags = OFlags::WRONLY
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | if direct {
                OFlags::DIRECT
            } else {
                OFlags::empty()
            };
        rustix::fs::openat(dir.fd(), name, flags, Mode::empty())
    };
    let f = File::from(
        open(true)
            .or_else(|_| open(false))
            .map_err(|e| Error::from_io(&e.into(), "cannot open", &path))?,
    );
    if FileIdentity::of(&f).ok() != Some(expected) {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} is no longer the test file bench made",
                escape_path(&path)
            ),
        ));
    }
    let mut key = [0u8; 32];
    let seed = format!(
        "{}-{}-{:?}",
        std::process::id(),
        nanos_seed(),
        Instant::now()
    );
    key.copy_from_slice(blake3::hash(seed.as_bytes()).as_bytes());
    let xof = blake3::Hasher::new_keyed(&key).finalize_xof();
    // FILL_WRITERS threads, each generating and writing every
    // FILL_WRITERS-th chunk: the data is made on every core while
    // FILL_WRITERS writes are in flight, as fio's fill keeps iodepth=8.
    let chunks = size.div_ceil(CHUNK as u64);
    let next = std::sync::atomic::AtomicU64::new(0);
    let failed: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..FILL_WRITERS {
            scope.spawn(|| {
                let mut xof = xof.clone();
                let mut buf = AlignedBuffer::new(CHUNK, 4096);
                let result = (|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= chunks || failed.lock().map(|g| g.is_some()).unwrap_or(true) {
                            return Ok(());
                        }
                        check_stop()?;
                        let off = i * CHUNK as u64;
                        let n = CHUNK.min((size - off) as usize);
                        // The stream at this offset: the same bytes as one
                        // writer would have written there.
                        xof.set_position(off);
                        xof.fill(&mut buf.as_mut_slice()[..n]);
                        write_all_at(&f, &buf.as_slice()[..n], off, &path)?;
                    }
                })();
                if let Err(e) = result
                    && let Ok(mut g) = failed.lock()
                {
                    g.get_or_insert(e);
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    f.sync_all()
        .map_err(|e| Error::from_io(&e, "cannot sync", &path))
}

fn nanos_seed() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// What the loop measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// Seconds the fill took.
    pub(crate) fill_seconds: f64,
    /// Bytes the members wrote during the fill.
    pub fill_device_write_bytes: Option<u64>,
    /// Layout after the fill.
    pub layout_after_fill: Option<FileLayout>,
    /// Per test and direction, each run.
    pub samples: Vec<(TestSpec, Direction, Vec<Sample>)>,
}

fn job_of(out: &FioOutput, name: &str) -> Result<FioJob> {
    out.jobs
        .iter()
        .find(|j| j.name == name)
        .cloned()
        .ok_or_else(|| Error::new(ErrorKind::Tool, format!("fio's output has no job {name}")))
}

fn sample_of(job: &FioJob, d: Direction, scale: f64) -> Sample {
    let summed;
    let dir = match d {
        Direction::Read => &job.read,
        Direction::Write => &job.write,
        Direction::Mix => match &job.mixed {
            Some(m) => m,
            None => {
                // fio without unified reporting: the sum, no percentiles.
                summed = crate::parse::fio::FioDirection {
                    io_bytes: job.read.io_bytes + job.write.io_bytes,
                    bw_bytes: job.read.bw_bytes + job.write.bw_bytes,
                    iops: job.read.iops + job.write.iops,
                    runtime_ms: job.read.runtime_ms.max(job.write.runtime_ms),
                    lat_mean_ns: (job.read.lat_mean_ns * job.read.iops
                        + job.write.lat_mean_ns * job.write.iops)
                        / (job.read.iops + job.write.iops).max(1e-9),
                    clat_p50_ns: None,
                    clat_p99_ns: None,
                    clat_p999_ns: None,
                };
                &summed
            }
        },
    };
    let us = |ns: f64| ns / 1000.0;
    let part = |io: u64| (d == Direction::Mix).then_some((io as f64 * scale) as u64);
    Sample {
        fio_error: job.error,
        claimed_bytes: (dir.io_bytes as f64 * scale) as u64,
        claimed_read_bytes: part(job.read.io_bytes),
        claimed_write_bytes: part(job.write.io_bytes),
        seconds: dir.runtime_ms as f64 / 1000.0,
        bytes_per_sec: dir.bw_bytes * scale,
        iops: dir.iops * scale,
        lat_mean_us: us(dir.lat_mean_ns),
        clat_p50_us: dir.clat_p50_ns.map(us),
        clat_p99_us: dir.clat_p99_ns.map(us),
        clat_p999_us: dir.clat_p999_ns.map(us),
        cores_per_thread: job.cores_per_thread(),
        cpu_seconds: job.cpu_seconds(),
        ..Sample::default()
    }
}

/// Fills the file, then runs every test `runs` times (reads first), with
/// the counters read around each run.
pub(crate) fn run_suite(
    cfg: &SuiteConfig<'_>,
    fio: &mut dyn FioRunner,
    sensors: &mut dyn Sensors,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Measured> {
    let order = jobs::order(cfg.tests, cfg.mix);
    let per_run = cfg.settings.duration_secs + cfg.interval_secs;
    let total_runs = order.len() as u64 * u64::from(cfg.runs);
    let mut measured = Measured::default();
    let mut seq = 0u32;
    let mut job_name = |what: &str| {
        seq += 1;
        format!("{seq:03}-{}.fio", what.replace(' ', "-"))
    };
    if cfg.fill != FillMode::Skip {
        progress(&Progress {
            what: "fill".into(),
            run: 0,
            runs: 0,
            eta_secs: total_runs * per_run,
        });
        // Only a fio fill takes a job file (and a number).
        let name = match cfg.fill {
            FillMode::Fio => job_name("fill"),
            _ => String::new(),
        };
        fill_test_file(cfg, fio, sensors, &name, &mut measured)?;
    }
    measured.layout_after_fill = sensors.layout()?;
    let mut done = 0u64;
    for (t, d) in order {
        let mut samples = Vec::new();
        let section = t.section(d);
        for run in 1..=cfg.runs {
            check_stop()?;
            if done > 0 && cfg.interval_secs > 0 {
                pause(cfg.interval_secs)?;
            }
            progress(&Progress {
                what: format!("{t} {}", d.as_str()),
                run,
                runs: cfg.runs,
                eta_secs: (total_runs - done) * per_run,
            });
            let job = job_name(&section);
            samples.push(one_run(cfg, fio, sensors, (&t, d), &section, &job)?);
            done += 1;
        }
        measured.samples.push((t, d, samples));
    }
    Ok(measured)
}

/// Fills the test file (our own incompressible writer, or fio for
/// compressible data) and records how long it took and what the members
/// wrote.
fn fill_test_file(
    cfg: &SuiteConfig<'_>,
    fio: &mut dyn FioRunner,
    sensors: &mut dyn Sensors,
    job_name: &str,
    measured: &mut Measured,
) -> Result<()> {
    let before = sensors.device_bytes()?;
    let start = Instant::now();
    if cfg.fill == FillMode::Own {
        fill_incompressible(
            cfg.work_dir,
            cfg.settings.file,
            cfg.test_file,
            cfg.settings.size_bytes,
        )?;
    } else {
        // A size-based job: allow 1 MB/s at the least.
        let fill_limit = fio::watchdog(Duration::from_secs(cfg.settings.size_bytes >> 20));
        let out = fio.run(
            cfg.work_dir,
            job_name,
            &jobs::fill_job(&cfg.settings),
            fill_limit,
            &check_stop,
        )?;
        let job = job_of(&out, "fill")?;
        if job.error != 0 {
            return Err(Error::new(
                ErrorKind::Tool,
                format!("fio could not fill the test file (error {})", job.error),
            ));
        }
    }
    measured.fill_seconds = start.elapsed().as_secs_f64();
    let after = sensors.device_bytes()?;
    measured.fill_device_write_bytes = before.zip(after).map(|(b, a)| a.1.saturating_sub(b.1));
    Ok(())
}

/// One run of one test: the cache state before it, fio, the members'
/// bytes and the pages dirtied around it, and the test file checked after.
fn one_run(
    cfg: &SuiteConfig<'_>,
    fio: &mut dyn FioRunner,
    sensors: &mut dyn Sensors,
    (t, d): (&TestSpec, Direction),
    section: &str,
    job_name: &str,
) -> Result<Sample> {
    let limit = fio::watchdog(Duration::from_secs(cfg.settings.duration_secs));
    let resident = if d.reads() {
        if cfg.evict {
            sensors.evict()?;
        }
        sensors.resident()?
    } else {
        None
    };
    let dirty_before = if d.writes() {
        sensors.watch_file()?;
        sensors.dirtied()?
    } else {
        None
    };
    let before = sensors.device_bytes()?;
    let out = {
        // The per-file trace is read while fio runs (its buffer must not
        // overrun); `stop` is polled about every 20 ms.
        let polled = std::cell::RefCell::new(&mut *sensors);
        let stop = || {
            check_stop()?;
            if d.writes() {
                polled.borrow_mut().poll();
            }
            Ok(())
        };
        fio.run(
            cfg.work_dir,
            job_name,
            &jobs::test_job(t, d, &cfg.settings),
            limit,
            &stop,
        )?
    };
    let after = sensors.device_bytes()?;
    (cfg.verify)(d)?;
    let (dirty_after, own_dirtied) = if d.writes() {
        (sensors.dirtied()?, sensors.file_dirtied()?)
    } else {
        (None, None)
    };
    let mut s = sample_of(&job_of(&out, section)?, d, cfg.scale_claimed);
    if let Some((b, a)) = before.zip(after) {
        s.device_read_bytes = Some(a.0.saturating_sub(b.0));
        s.device_write_bytes = Some(a.1.saturating_sub(b.1));
    }
    s.resident_before_bytes = resident;
    let counted = dirty_before
        .zip(dirty_after)
        .map(|(b, a)| a.saturating_sub(b));
    // The test file's own dirtied pages when traced; else the counter.
    (s.dirtied_bytes, s.dirtied_source, s.counter_dirtied_bytes) = match own_dirtied {
        Some(own) => (Some(own), Some(report::DirtiedSource::InodeTrace), counted),
        None => (counted, counted.and(sensors.counter_source()), None),
    };
    Ok(s)
}

/// Checks every run and summarizes each test.
pub(crate) fn analyse(measured: &Measured, ctx: &CheckContext) -> Vec<TestResult> {
    measured
        .samples
        .iter()
        .map(|(t, d, samples)| {
            let runs = samples
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    analysis::run_result(i as u32 + 1, s, analysis::check_run(t, *d, s, ctx))
                })
                .collect();
            analysis::summarize(*t, *d, runs, ctx)
        })
        .collect()
}

// ---------------------------------------------------------------------
// The whole command.

pub(crate) fn refuse_memory_backed(fs_type: &str, dir: &Path) -> Result<()> {
    if filesystem::is_memory_backed(fs_type) {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "{} is on {fs_type}, which keeps files in memory: there is no device to benchmark",
                escape_path(dir)
            ),
        )
        .with_hint("give a directory on the btrfs (or other disk filesystem) to measure"));
    }
    Ok(())
}

pub(crate) fn compression_option(options: &[String]) -> Option<String> {
    options
        .iter()
        .find(|o| {
            o.starts_with("compress=")
                || o.starts_with("compress-force=")
                || *o == "compress"
                || *o == "compress-force"
        })
        .cloned()
}

/// Creates the test file `TEST_FILE` empty in the held work directory
/// (O_EXCL, no link followed, inheriting the directory's NOCOW), so fio
/// never creates or lays it out itself.
pub(crate) fn create_test_file(work: &WorkDir) -> Result<(File, FileIdentity)> {
    let f = work.dir().create_file(TEST_FILE, 0o600)?;
    let id = FileIdentity::of(&f)
        .map_err(|e| Error::from_io(&e, "cannot stat", &work.dir().join(TEST_FILE)))?;
    Ok((f, id))
}

/// Prepares the work directory's checksum mode: NOCOW unless `cow`; with
/// `cow`, a NOCOW attribute inherited from DIR is cleared.
pub(crate) fn set_dir_mode(work: &WorkDir, cow: bool, btrfs: bool) -> Result<()> {
    if !btrfs {
        return Ok(());
    }
    let f = work.dir().open_dir_file()?;
    let path = work.path();
    if !cow {
        return filesystem::set_nocow(&f, path, true);
    }
    if let Some(flags) = filesystem::inode_flags_of(&f, path)?
        && flags.intersects(crate::sys::kernel::ioctl::FS_NOCOW_FL)
    {
        filesystem::set_inode_flags_of(&f, path, flags & !crate::sys::kernel::ioctl::FS_NOCOW_FL)?;
    }
    Ok(())
}

/// Checks, after a fio run, that the test file in the work directory is
/// still the file bench made, at its size, and (after writes) that fio
/// wrote it: its mtime moved.
fn check_test_file(
    work: &TrustedDir,
    file: &File,
    expected: FileIdentity,
    size: u64,
    mtime_before: Option<(i64, i64)>,
) -> Result<()> {
    let path = work.join(TEST_FILE);
    let wrong = |why: &str| {
        Error::new(
            ErrorKind::State,
            format!(
                "{} {why}: the figures would not be of the test file; stopped",
                escape_path(&path)
            ),
        )
    };
    let st = work.stat(TEST_FILE)?.ok_or_else(|| wrong("is gone"))?;
    if identity_of(&st) != expected {
        return Err(wrong("was replaced while fio ran"));
    }
    let held =
        rustix::fs::fstat(file).map_err(|e| Error::from_io(&e.into(), "cannot stat", &path))?;
    if held.st_size as u64 != size {
        return Err(wrong(&format!(
            "has {} bytes instead of {size}",
            held.st_size
        )));
    }
    if let Some(before) = mtime_before
        && (held.st_mtime, held.st_mtime_nsec as i64) == before
    {
        return Err(wrong("was not written by fio's write run"));
    }
    Ok(())
}

/// The test file's mtime (seconds, nanoseconds).
fn mtime_of(file: &File) -> Option<(i64, i64)> {
    rustix::fs::fstat(file)
        .ok()
        .map(|st| (st.st_mtime, st.st_mtime_nsec as i64))
}

/// Checks DIR and everything the run needs before anything changes (see
/// [`open_target`]), and that the test fits.
pub fn prepare(opts: &BenchOptions) -> Result<Target> {
    opts.validate()?;
    let mut target = open_target(&opts.sysroot, &opts.dir, "bench writes a test file")?;
    let need = opts.needed_space();
    // A killed run's work directory holds its test file: swept before the
    // space is judged (and named), never counted against this run.
    if target.info.available_bytes < need {
        target.swept = sweep_stale(&target.held);
        if !target.swept.is_empty() {
            target.info = target.held.filesystem(&opts.sysroot)?;
        }
    }
    if target.info.available_bytes < need {
        let left: Vec<&String> = target
            .swept
            .iter()
            .filter(|n| !n.starts_with("removed "))
            .collect();
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough free space in {}: the test needs {} ({} test file + margin), {} is free",
                escape_path(&target.info.dir),
                format_iec(need),
                format_iec(opts.size_bytes()),
                format_iec(target.info.available_bytes)
            ) + &left.iter().map(|n| format!("; {n}")).collect::<String>(),
        )
        .with_hint("free some space or use a smaller --file-size"));
    }
    Ok(target)
}

/// Runs the bench (see the module documentation) on the target
/// [`prepare`] returned. `progress` is called at the start of the fill and
/// of each run.
pub fn run(
    opts: &BenchOptions,
    mut target: Target,
    fio: &mut dyn FioRunner,
    fio_path: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<BenchReport> {
    let started_at = crate::model::envelope::rfc3339_seconds(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    let mut sens = sensors::RealSensors::open(
        &opts.sysroot,
        &target.held,
        &target.info.mount,
        &target.devices,
        opts.allow_private_debugfs,
    )?;
    install_signals()?;
    check_stop()?;
    let ceiling = sensors::ceiling(
        &opts.sysroot,
        &target.devices,
        target.data_profiles.first().copied(),
    );
    let thermal_before = sensors::thermal_read(&opts.sysroot, &target.devices);

    // From here on the system changes: leftovers of killed runs go, and the
    // test directory is made.
    let mut notes = std::mem::take(&mut target.swept);
    notes.extend(sweep_stale(&target.held));
    let buffers = buffers(opts);
    // Given back when this drops: at the end, on an error, a panic or a
    // signal (the run then returns through here).
    let _reserved = match &buffers {
        Buffers::Huge {
            pages,
            reserve: Some((now, _)),
            ..
        } => {
            let avail =
                crate::sys::kernel::hugepages::read(&opts.sysroot).map_or(0, |h| h.available());
            let ledger = crate::sys::kernel::settings::Ledger::of(opts.state_dir.as_deref());
            let r = crate::sys::kernel::hugepages::reserve(
                &opts.sysroot,
                &ledger,
                pages.saturating_sub(avail),
            )?;
            notes.push(format!(
                "--hugepages: vm.nr_hugepages was raised from {now} to {} for the run and put back to {now} at its end",
                r.during
            ));
            Some(r)
        }
        _ => None,
    };
    let Target {
        held,
        info,
        is_btrfs,
        uuid,
        mount_options,
        data_profiles,
        devices,
        devices_missing,
        swept: _,
    } = target;
    let work = WorkDir::create(held)?;
    let (mut setup, file) = TestFileSetup::create(&work, opts, is_btrfs)?;
    if let Buffers::Huge { page_bytes, .. } = &buffers {
        setup.settings.huge_page_bytes = Some(*page_bytes);
    }
    let job_file = jobs::suite_job(&opts.tests, opts.mix, &setup.settings);
    let check_file = file
        .try_clone()
        .map_err(|e| Error::from_io(&e, "cannot open", &setup.path))?;
    sens.set_file(file, &setup.path, setup.size);
    let mtime = std::cell::Cell::new(mtime_of(&check_file));
    let verify = |d: Direction| {
        let before = d.writes().then(|| mtime.get()).flatten();
        let r = check_test_file(work.dir(), &check_file, setup.id, setup.size, before);
        mtime.set(mtime_of(&check_file));
        r
    };
    let cfg = setup.suite_config(opts, work.dir(), &verify);
    let measured = run_suite(&cfg, fio, &mut sens, progress)?;
    // Ordinary buffers for lack of huge pages: what they cost here,
    // measured once on the test file just used.
    let buffer_cost = match &buffers {
        Buffers::Ordinary { why } if !why.is_empty() => {
            let cost = if setup.fallocate_only || setup.buffered {
                Err("the test file was not written through O_DIRECT (test hook)".to_owned())
            } else {
                buffers::measure(work.dir(), TEST_FILE, setup.id, setup.size)?
            };
            notes.push(ordinary_buffers_note(why, cost.as_ref()));
            cost.ok()
        }
        _ => None,
    };
    let layout_at_end = sens.layout()?;
    let thermal_after = sensors::thermal_read(&opts.sysroot, &devices);
    let members_scaling = if opts.members {
        Some(members::scale(
            fio,
            work.dir(),
            &devices,
            &opts.sysroot,
            opts.duration_secs,
            progress,
        )?)
    } else {
        None
    };
    let counter_note = sens.counter_note.take();
    if let Some(label) = sens.trace_label() {
        notes.push(format!(
            "page_cache_write judges each write run by the page cache the test file itself dirtied ({label}), not by a counter other writers move"
        ));
    }
    notes.append(&mut sens.trace_notes);
    drop(sens);
    drop(check_file);
    let removal_note = work.remove()?;

    let fs_type = info.mount.fs_type.clone();
    let compression = compression_option(&mount_options);
    let target = report::TargetInfo {
        dir: info.dir.clone(),
        dir_bytes: crate::model::text::non_utf8_bytes(&info.dir),
        mount_point: info.mount.mount_point.clone(),
        fs_type,
        uuid,
        source: info.mount.source.clone(),
        mount_options,
        data_profiles,
        devices,
        devices_missing,
        compression_option: compression,
    };
    let finished = Finished {
        measured,
        buffer_cost,
        layout_at_end,
        thermal: sensors::thermal_delta(thermal_before, thermal_after),
        members_scaling,
        counter_note,
        removal_note,
        ceiling,
        notes,
        job_file,
        started_at,
    };
    Ok(assemble_report(
        opts, is_btrfs, target, &setup, finished, fio, fio_path,
    ))
}

/// The test file of a suite run, made and sized in the work directory.
struct TestFileSetup {
    id: FileIdentity,
    path: PathBuf,
    nocow: bool,
    size: u64,
    fallocate_only: bool,
    buffered: bool,
    settings: JobSettings<'static>,
}

impl TestFileSetup {
    /// Sets the directory's COW mode, makes the test file and sizes it;
    /// returns it open.
    fn create(work: &WorkDir, opts: &BenchOptions, is_btrfs: bool) -> Result<(Self, File)> {
        set_dir_mode(work, opts.cow, is_btrfs)?;
        let path = work.dir().join(TEST_FILE);
        let (file, id) = create_test_file(work)?;
        let nocow = is_btrfs
            && filesystem::inode_flags_of(&file, &path)?
                .is_some_and(|f| f.intersects(crate::sys::kernel::ioctl::FS_NOCOW_FL));
        let size = opts.size_bytes();
        let fallocate_only = Switch::BenchFallocateOnly.is_on();
        size_test_file(&file, &path, size, fallocate_only)?;
        let buffered = Switch::BenchBuffered.is_on();
        let settings = JobSettings {
            file: TEST_FILE,
            size_bytes: size,
            duration_secs: opts.duration_secs,
            direct: !buffered,
            compress_percentage: Switch::BenchCompressible
                .value()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
                .min(99),
            huge_page_bytes: None,
        };
        let setup = Self {
            id,
            path,
            nocow,
            size,
            fallocate_only,
            buffered,
            settings,
        };
        Ok((setup, file))
    }

    /// What the suite runs with this file.
    fn suite_config<'a>(
        &self,
        opts: &'a BenchOptions,
        work_dir: &'a TrustedDir,
        verify: &'a dyn Fn(Direction) -> Result<()>,
    ) -> SuiteConfig<'a> {
        SuiteConfig {
            tests: &opts.tests,
            settings: self.settings.clone(),
            runs: opts.runs,
            interval_secs: opts.interval_secs,
            work_dir,
            test_file: self.id,
            verify,
            fill: if self.fallocate_only {
                FillMode::Skip
            } else if self.settings.compress_percentage > 0 {
                FillMode::Fio
            } else {
                FillMode::Own
            },
            evict: !self.buffered,
            scale_claimed: Switch::BenchScaleClaimed
                .value()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1.0),
            mix: opts.mix,
        }
    }
}

/// What a suite run measured and noted, once the test directory is gone.
struct Finished {
    measured: Measured,
    buffer_cost: Option<buffers::BufferCost>,
    layout_at_end: Option<FileLayout>,
    thermal: Vec<report::ThermalInfo>,
    members_scaling: Option<report::MemberScaling>,
    counter_note: Option<String>,
    removal_note: Option<String>,
    ceiling: Option<report::CeilingInfo>,
    notes: Vec<String>,
    job_file: String,
    started_at: String,
}

/// The honesty checks over what was measured, and the report (pure).
fn assemble_report(
    opts: &BenchOptions,
    is_btrfs: bool,
    target: report::TargetInfo,
    setup: &TestFileSetup,
    f: Finished,
    fio: &mut dyn FioRunner,
    fio_path: &Path,
) -> BenchReport {
    let ctx = CheckContext {
        size_bytes: setup.size,
        devices_known: !target.devices.is_empty() && target.devices_missing.is_empty(),
        layout: f.measured.layout_after_fill,
        layout_after_writes: f.layout_at_end,
        compression_option: target.compression_option.clone(),
        ceiling_one_reader: f.ceiling.as_ref().and_then(|c| c.one_reader_bytes_per_sec),
        ceiling_many_readers: f
            .ceiling
            .as_ref()
            .and_then(|c| c.many_readers_bytes_per_sec),
        cow: opts.cow,
        write_factor: target
            .data_profiles
            .iter()
            .map(|p| f64::from(p.max_write_factor()))
            .fold(1.0, f64::max),
    };
    let results = analyse(&f.measured, &ctx);
    let mut members_scaling = f.members_scaling;
    if let Some(m) = members_scaling.as_mut() {
        m.array_bytes_per_sec = best_sequential_read(&results);
    }
    let mut notes = f.notes;
    notes.extend(f.removal_note);
    notes.extend(run_notes(
        opts,
        is_btrfs,
        &target.devices,
        &target.devices_missing,
        f.counter_note,
        f.ceiling.as_ref(),
        &f.thermal,
    ));
    let flagged = results
        .iter()
        .filter(|r| r.status == Status::Flagged)
        .count();
    let summary = summary_sentence(&results, flagged);
    let exit_code = if flagged > 0 { report::EXIT_FLAGGED } else { 0 };
    BenchReport {
        report_version: report::REPORT_VERSION,
        exit_code,
        summary,
        started_at: Some(f.started_at),
        system: system_info(fio, fio_path),
        target,
        parameters: report::Parameters {
            huge_page_buffers: setup.settings.huge_page_bytes.is_some(),
            ..parameters(opts, setup.size)
        },
        test_file: report::TestFileInfo {
            path: setup.path.clone(),
            size_bytes: setup.size,
            nocow: setup.nocow,
            fill_seconds: f.measured.fill_seconds,
            fill_device_write_bytes: f.measured.fill_device_write_bytes,
            layout_after_fill: f.measured.layout_after_fill,
            layout_at_end: f.layout_at_end,
            removed: true,
        },
        results,
        ceiling: f.ceiling,
        thermal: f.thermal,
        members_scaling,
        notes,
        job_file: f.job_file,
        history: None,
        buffer_cost: f.buffer_cost,
    }
}

/// The machine the suite ran on.
fn system_info(fio: &dyn FioRunner, fio_path: &Path) -> report::SystemInfo {
    report::SystemInfo {
        kernel: crate::sys::kernel_release(),
        hostname: crate::model::envelope::hostname(),
        cpus: thread::available_parallelism().map_or(1, |n| n.get() as u32),
        fio_version: fio.version(),
        fio_path: fio_path.to_path_buf(),
    }
}

/// What the suite was asked to run.
fn parameters(opts: &BenchOptions, size: u64) -> report::Parameters {
    report::Parameters {
        profile: opts.profile.clone(),
        tests: opts.tests.clone(),
        size_bytes: size,
        runs: opts.runs,
        duration_secs: opts.duration_secs,
        interval_secs: opts.interval_secs,
        cow: opts.cow,
        ioengine: jobs::IOENGINE.to_owned(),
        mix_read_percent: opts.mix.then_some(profile::MIX_READ_PERCENT),
        huge_page_buffers: false,
    }
}

/// Sizes the test file: full size but sparse, so that fio writes every
/// byte in the fill instead of laying the file out first; or, with the
/// test hook, allocated (never written).
fn size_test_file(
    file: &std::fs::File,
    path: &Path,
    size: u64,
    fallocate_only: bool,
) -> Result<()> {
    if !fallocate_only {
        return file
            .set_len(size)
            .map_err(|e| Error::from_io(&e, "cannot size", path));
    }
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size)
        .map_err(|e| crate::sys::kernel::errno::to_error(e, "cannot fallocate", path))
}

/// The best sequential read of the suite (what --members compares each
/// member's share with).
fn best_sequential_read(results: &[TestResult]) -> Option<f64> {
    results
        .iter()
        .filter(|r| r.direction == Direction::Read && r.test.pattern == profile::Pattern::Seq)
        .filter_map(|r| r.bytes_per_sec)
        .fold(None, |acc: Option<f64>, x| {
            Some(acc.map_or(x, |a| a.max(x)))
        })
}

/// The report's notes about how the run was made and what it could not
/// check (pure: from what the run found).
fn run_notes(
    opts: &BenchOptions,
    is_btrfs: bool,
    devices: &[report::MemberDevice],
    devices_missing: &[String],
    counter_note: Option<String>,
    ceiling: Option<&report::CeilingInfo>,
    thermal: &[report::ThermalInfo],
) -> Vec<String> {
    let mut notes = Vec::new();
    if is_btrfs && !opts.cow {
        notes.push("the test file is NOCOW (no data checksums), so O_DIRECT is direct unless the data profile keeps copies (DUP, RAID1*: buffered on 6.18 to 7.2, bounced from 7.3); --cow measures the checksummed path instead".to_owned());
    }
    if opts.cow {
        notes.push("--cow: the test file has data checksums; btrfs writes O_DIRECT to it directly before 6.15, through the page cache from 6.15 to 7.2 (the dirtied-page check shows it) and through a bounce buffer from 7.3 (no page cache, a copy: slower, not flagged); `btrfs-lab probe-dio` says which this kernel does".to_owned());
    }
    if !devices_missing.is_empty() {
        notes.push(format!(
            "/proc/diskstats does not show {}: the device cross-check could not run",
            devices_missing.join(", ")
        ));
    } else if devices.is_empty() {
        notes.push(
            "no block device counts this filesystem's I/O: the device cross-check could not run"
                .to_owned(),
        );
    }
    if let Some(why) = counter_note {
        notes.push(format!("dirtied pages: {why}"));
    }
    if let Some(c) = ceiling
        && c.one_reader_bytes_per_sec.is_none()
        && !c.without_link_info.is_empty()
    {
        notes.push(format!(
            "no PCIe link information for {}: no ceiling to check the figures against",
            c.without_link_info.join(", ")
        ));
    }
    for t in thermal {
        if t.tmt1_seconds + t.tmt2_seconds > 0 || t.transitions > 0 {
            notes.push(format!(
                "{} throttled during the bench: {} s light, {} s heavy ({} transitions); its figures are below what it gives cool",
                t.controller, t.tmt1_seconds, t.tmt2_seconds, t.transitions
            ));
        }
    }
    notes
}

fn summary_sentence(results: &[TestResult], flagged: usize) -> String {
    let best = results
        .iter()
        .filter(|r| r.direction == Direction::Read)
        .filter_map(|r| r.bytes_per_sec.map(|b| (r, b)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut s = match best {
        Some((r, b)) => format!("best read: {} at {:.1} MB/s", r.name, b / 1e6),
        None => "no read figure checked out".to_owned(),
    };
    if flagged > 0 {
        let codes: Vec<String> = {
            let mut c: Vec<CheckCode> = results
                .iter()
                .flat_map(|r| r.checks.iter())
                .filter(|c| c.severity == Severity::Flag)
                .map(|c| c.code)
                .collect();
            c.sort();
            c.dedup();
            c.iter()
                .map(|c| {
                    serde_json::to_value(c)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                })
                .collect()
        };
        s.push_str(&format!(
            "; {flagged} of {} figures flagged ({})",
            results.len(),
            codes.join(", ")
        ));
    } else {
        s.push_str(&format!(
            "; all {} figures checked against the devices",
            results.len()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::fio::{FioDirection, FioJob, FioOutput};
    use crate::sys::tools::fio::MockFio;

    const MIB: u64 = 1 << 20;

    /// Counters that move as a scripted device would.
    #[derive(Default)]
    struct MockSensors {
        read: u64,
        written: u64,
        events: Vec<String>,
        /// Bytes the "device" moves per fio run.
        per_run: u64,
        /// The run under way reads (the loop reads residency only before
        /// reads, the dirtied counter only around writes; the fill writes).
        reading: bool,
    }

    impl Sensors for MockSensors {
        fn device_bytes(&mut self) -> Result<Option<(u64, u64)>> {
            self.events.push("counters".into());
            // Each pair of reads brackets a run: advance on the second.
            let n = self.events.iter().filter(|e| *e == "counters").count();
            if n % 2 == 0 {
                if self.reading {
                    self.read += self.per_run;
                } else {
                    self.written += self.per_run;
                }
            }
            Ok(Some((self.read, self.written)))
        }
        fn evict(&mut self) -> Result<()> {
            self.events.push("evict".into());
            Ok(())
        }
        fn resident(&mut self) -> Result<Option<u64>> {
            self.reading = true;
            Ok(Some(0))
        }
        fn dirtied(&mut self) -> Result<Option<u64>> {
            self.reading = false;
            Ok(Some(0))
        }
        fn layout(&mut self) -> Result<Option<FileLayout>> {
            Ok(Some(FileLayout::default()))
        }
    }

    fn output(name: &str, d: Direction, bytes: u64) -> FioOutput {
        let dir = FioDirection {
            io_bytes: bytes,
            bw_bytes: bytes as f64,
            iops: bytes as f64 / 4096.0,
            runtime_ms: 1000,
            lat_mean_ns: 50_000.0,
            ..FioDirection::default()
        };
        FioOutput {
            version: "fio-mock".into(),
            jobs: vec![FioJob {
                name: name.into(),
                error: 0,
                read: if d == Direction::Read {
                    dir
                } else {
                    FioDirection::default()
                },
                write: if d == Direction::Write {
                    dir
                } else {
                    FioDirection::default()
                },
                mixed: None,
                usr_cpu: 5.0,
                sys_cpu: 10.0,
                job_runtime_ms: 1000,
            }],
        }
    }

    fn scripted(tests: &[TestSpec], runs: u32, bytes: u64) -> MockFio {
        let mut fio = MockFio::default();
        fio.outputs
            .push_back(output("fill", Direction::Write, 64 * MIB));
        for (t, d) in jobs::order(tests, false) {
            for _ in 0..runs {
                fio.outputs.push_back(output(&t.section(d), d, bytes));
            }
        }
        fio
    }

    fn no_check(_: Direction) -> Result<()> {
        Ok(())
    }

    /// A private work directory in a temp dir (the mock fio never looks).
    fn work_dir() -> (tempfile::TempDir, TrustedDir) {
        let t = tempfile::tempdir().unwrap();
        let w = HeldDir::open(t.path())
            .unwrap()
            .mkdir_private("w", 0o700)
            .unwrap();
        (t, w)
    }

    fn config<'a>(tests: &'a [TestSpec], dir: &'a TrustedDir, scale: f64) -> SuiteConfig<'a> {
        SuiteConfig {
            tests,
            settings: JobSettings {
                file: TEST_FILE,
                size_bytes: 64 * MIB,
                duration_secs: 1,
                direct: true,
                compress_percentage: 0,
                huge_page_bytes: None,
            },
            runs: 3,
            interval_secs: 0,
            work_dir: dir,
            test_file: FileIdentity { dev: 0, ino: 0 },
            verify: &no_check,
            fill: FillMode::Fio,
            evict: true,
            scale_claimed: scale,
            mix: false,
        }
    }

    #[test]
    fn a_mix_is_one_figure_from_fios_unified_report() {
        // tests/fixtures/bench/PROVENANCE.md: fio 3.33, rwmixread=70.
        let out = crate::parse::fio::parse_fio_json(include_str!(
            "../../tests/fixtures/bench/fio-3.33-mix-rnd.json"
        ))
        .unwrap();
        let s = sample_of(&out.jobs[0], Direction::Mix, 1.0);
        assert_eq!(s.claimed_bytes, 1_139_138_560);
        assert_eq!(s.claimed_read_bytes, Some(799_924_224));
        assert_eq!(s.claimed_write_bytes, Some(339_214_336));
        assert_eq!(s.bytes_per_sec, 569_284_637.0);
        assert_eq!(s.clat_p50_us, Some(407.552));
        assert_eq!(s.clat_p99_us, Some(1548.288));
        assert_eq!(s.clat_p999_us, Some(3686.4));
        // Without the unified report: the sum, and no percentiles.
        let mut job = out.jobs[0].clone();
        job.mixed = None;
        let s = sample_of(&job, Direction::Mix, 1.0);
        assert_eq!(s.claimed_bytes, 1_139_138_560);
        assert_eq!(s.clat_p99_us, None);
        // A read run of the same job is its read side only.
        assert_eq!(
            sample_of(&out.jobs[0], Direction::Read, 1.0).claimed_read_bytes,
            None
        );
    }

    #[test]
    fn the_suite_fills_first_reads_before_writes_and_evicts_before_reads() {
        let tests = &profile::DEFAULT_TESTS[..2];
        let (_t, w) = work_dir();
        let dir = &w;
        let mut fio = scripted(tests, 3, 100 * MIB);
        let mut sensors = MockSensors {
            per_run: 100 * MIB,
            ..MockSensors::default()
        };
        let mut seen = Vec::new();
        let m = run_suite(&config(tests, dir, 1.0), &mut fio, &mut sensors, &mut |p| {
            seen.push((p.what.clone(), p.run, p.eta_secs))
        })
        .unwrap();
        assert!(fio.jobs[0].contains("[fill]"));
        assert_eq!(fio.jobs.len(), 1 + 4 * 3);
        let sections: Vec<&str> = fio.jobs[1..]
            .iter()
            .map(|j| {
                j.lines()
                    .find(|l| l.starts_with('[') && *l != "[global]")
                    .unwrap()
            })
            .collect();
        assert!(
            sections[..6].iter().all(|s| s.ends_with("-read]")),
            "{sections:?}"
        );
        assert!(sections[6..].iter().all(|s| s.ends_with("-write]")));
        assert_eq!(sensors.events.iter().filter(|e| *e == "evict").count(), 6);
        assert_eq!(seen[0], ("fill".to_owned(), 0, 12));
        assert_eq!(seen[1], ("SEQ1M Q8T1 read".to_owned(), 1, 12));
        assert_eq!(seen.last().unwrap().2, 1);
        // Honest mock: every figure checks out.
        let results = analyse(
            &m,
            &CheckContext {
                size_bytes: 64 * MIB,
                devices_known: true,
                layout: m.layout_after_fill,
                ..CheckContext::default()
            },
        );
        assert_eq!(results.len(), 4);
        assert!(
            results.iter().all(|r| r.status == Status::Ok),
            "{results:#?}"
        );
        assert_eq!(results[0].runs[0].device_read_bytes, Some(100 * MIB));
        assert_eq!(m.fill_device_write_bytes, Some(100 * MIB));
    }

    #[test]
    fn scaled_claims_are_caught_by_the_device_counters() {
        let tests = &profile::DEFAULT_TESTS[..1];
        let (_t, w) = work_dir();
        let dir = &w;
        let mut fio = scripted(tests, 3, 100 * MIB);
        let mut sensors = MockSensors {
            per_run: 100 * MIB,
            ..MockSensors::default()
        };
        let m = run_suite(
            &config(tests, dir, 2.0),
            &mut fio,
            &mut sensors,
            &mut |_| {},
        )
        .unwrap();
        let results = analyse(
            &m,
            &CheckContext {
                size_bytes: 64 * MIB,
                devices_known: true,
                ..CheckContext::default()
            },
        );
        assert!(results.iter().all(|r| r.status == Status::Flagged));
        assert_eq!(results[0].checks[0].code, CheckCode::DeviceMismatch);
        assert_eq!(results[0].claimed_bytes_per_sec, 200.0 * MIB as f64);
    }

    #[test]
    fn options_are_validated() {
        let ok = BenchOptions::new("/x");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.needed_space(), (1 << 30) + (1 << 30) / 10);
        for bad in [
            BenchOptions {
                size: 1 << 20,
                ..ok.clone()
            },
            BenchOptions {
                runs: 0,
                ..ok.clone()
            },
            BenchOptions {
                duration_secs: 0,
                ..ok.clone()
            },
            BenchOptions {
                tests: vec![],
                ..ok.clone()
            },
            BenchOptions {
                size: 16 << 20,
                tests: vec![TestSpec::parse("SEQ1M-Q1T32").unwrap()],
                ..ok.clone()
            },
        ] {
            assert_eq!(bad.validate().unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn work_dir_is_removed_on_drop() {
        use std::fs;
        let t = tempfile::tempdir().unwrap();
        let w = WorkDir::create(HeldDir::open(t.path()).unwrap()).unwrap();
        let p = w.path().to_path_buf();
        fs::write(p.join("x"), "y").unwrap();
        fs::create_dir(p.join("d")).unwrap();
        fs::write(p.join("d/f"), "z").unwrap();
        assert_eq!(
            work_dir_pid(&p.file_name().unwrap().to_string_lossy()),
            Some(std::process::id())
        );
        assert!(
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(WORK_DIR_PREFIX)
        );
        drop(w);
        assert!(!p.exists());
        assert_eq!(fs::read_dir(t.path()).unwrap().count(), 0);
    }
}
