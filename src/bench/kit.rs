//! The bench kit every mode uses (the suite, `--sustained`, `--small-files`,
//! `--compare-profiles`): the held target directory and the refusals
//! before anything changes, the private work directory and the sweep of
//! killed runs' leftovers, output files written beside the run, signals,
//! and the progress record.

use std::ffi::OsString;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::{report, sensors};
use crate::error::{Error, ErrorKind, Result};
use crate::parse::size::format_iec;
use crate::report::text::escape_path;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::{HeldDir, Removal, TrustedDir, identity_of};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::measure::files;
use crate::sys::{fs::filesystem, kernel::btrfs, kernel::signals};

/// The directory btrfs-lab makes under DIR starts with this.
pub const WORK_DIR_PREFIX: &str = ".btrfs-lab-bench-";
/// The test file's name in it.
pub const TEST_FILE: &str = "bench.dat";

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

impl Progress {
    /// The words after `bench` on the progress bar: the step, the run and
    /// the ETA.
    pub fn line(&self) -> String {
        let eta = format!("ETA {}m{:02}s", self.eta_secs / 60, self.eta_secs % 60);
        if self.runs == 0 {
            format!("{}  {eta}", self.what)
        } else {
            format!("{}  run {} of {}  {eta}", self.what, self.run, self.runs)
        }
    }
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
pub(crate) fn pause(secs: u64) -> Result<()> {
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
        let removal = if files::is_dir(&st) && depth > 0 {
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
        if files::is_dir(&st) {
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

impl Target {
    /// The held directory, and the report's account of the target (DIR,
    /// its mount, data profiles and members) once nothing more is read
    /// through it.
    pub(crate) fn into_held(self) -> (HeldDir, report::TargetInfo) {
        let info = self.info;
        let compression_option = compression_option(&self.mount_options);
        let target = report::TargetInfo {
            dir_bytes: crate::report::text::non_utf8_bytes(&info.dir),
            dir: info.dir,
            mount_point: info.mount.mount_point.clone(),
            fs_type: info.mount.fs_type.clone(),
            uuid: self.uuid,
            source: info.mount.source.clone(),
            mount_options: self.mount_options,
            data_profiles: self.data_profiles,
            devices: self.devices,
            devices_missing: self.devices_missing,
            compression_option,
        };
        (self.held, target)
    }
}

/// The machine a mode ran on, and the fio it ran.
pub(crate) fn system_info(
    fio: &dyn crate::sys::tools::fio::FioRunner,
    fio_path: &Path,
) -> report::SystemInfo {
    report::SystemInfo {
        kernel: crate::sys::kernel_release(),
        hostname: crate::report::envelope::hostname(),
        cpus: thread::available_parallelism().map_or(1, |n| n.get() as u32),
        fio_version: fio.version(),
        fio_path: fio_path.to_path_buf(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_says_step_run_and_eta() {
        let mut p = Progress {
            what: "fill".into(),
            run: 0,
            runs: 0,
            eta_secs: 125,
        };
        assert_eq!(p.line(), "fill  ETA 2m05s");
        p.what = "SEQ1M Q8T1 read".into();
        p.run = 2;
        p.runs = 3;
        assert_eq!(p.line(), "SEQ1M Q8T1 read  run 2 of 3  ETA 2m05s");
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
