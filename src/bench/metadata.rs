//! `bench --small-files`: the small-file storm. N empty files created over
//! directories by T threads, then `syncfs`; all of them stat'ed cold; all
//! deleted, then `syncfs`.
//!
//! Cold, by default, for the storm's own files only: the creates run in a
//! memory cgroup of the process's own ([`crate::sys::kernel::memcg`]), and
//! reclaiming it before the stat phase evicts the dentries and inodes they
//! made and nothing else of the machine's (btrfs's metadata blocks stay in
//! memory: btrfs charges them to no cgroup). `--drop-caches`
//! ([`ColdMethod::DropCaches`]) drops every filesystem's caches instead,
//! the blocks included. Without root, or without a memory cgroup, the stat
//! phase is warm, and the report says so and why. Files per second for each phase, the sync
//! times, and what each member device wrote (diskstats): the metadata
//! profile (RAID1 vs RAID1C3) shows in those bytes and times.
//!
//! Everything happens in a fresh directory (mode 0700) under DIR, removed
//! on every exit path (error, panic, signal).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::parse::size::format_iec;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::measure::atfile;
use crate::sys::{kernel::btrfs, proc::diskstats};

use super::kit::{self, WorkDir, check_stop};
use super::report::{MemberDevice, TargetInfo};

/// Default number of files (the seed's test).
pub const DEFAULT_FILES: u64 = 200_000;
/// Default threads.
pub const DEFAULT_THREADS: u32 = 4;
/// Files per directory.
pub(crate) const FILES_PER_DIR: u64 = 1000;
/// Report version.
pub(crate) const REPORT_VERSION: u32 = 1;

/// What to run.
#[derive(Debug, Clone)]
pub struct MetadataOptions {
    /// DIR.
    pub dir: PathBuf,
    /// Files to create.
    pub files: u64,
    /// Threads.
    pub threads: u32,
    /// How the stat phase is made cold.
    pub cold: ColdMethod,
    /// Where /proc and /sys are read.
    pub sysroot: SysRoot,
}

impl MetadataOptions {
    /// Defaults for DIR.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            files: DEFAULT_FILES,
            threads: DEFAULT_THREADS,
            cold: ColdMethod::OwnCgroup,
            sysroot: SysRoot::host(),
        }
    }

    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        if !(100..=100_000_000).contains(&self.files) {
            return Err(Error::usage("--files must be between 100 and 100000000"));
        }
        if !(1..=256).contains(&self.threads) {
            return Err(Error::usage("--threads must be between 1 and 256"));
        }
        Ok(())
    }

    /// Directories the files are spread over.
    pub fn dirs(&self) -> u64 {
        self.files.div_ceil(FILES_PER_DIR)
    }

    /// Free space asked for: ~2 KiB of metadata per file (inode, names,
    /// twice with a mirrored profile) and a margin.
    pub(crate) fn needed_space(&self) -> u64 {
        self.files * 2048 + (64 << 20)
    }
}

/// How the stat phase was made cold, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ColdMethod {
    /// Nothing evicted: the stat phase finds the storm's dentries and
    /// inodes in memory.
    Warm,
    /// The default (root): the storm is created in a memory cgroup of its
    /// own, reclaimed before the stat phase, which evicts the storm's
    /// dentries and inodes and nothing else; the filesystem's metadata
    /// blocks stay in memory.
    OwnCgroup,
    /// `--drop-caches` (root): sync, then `drop_caches=3`: the page,
    /// dentry and inode caches of every filesystem of the machine.
    DropCaches,
}

/// One phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Phase {
    /// `create`, `stat` or `delete`.
    pub name: String,
    /// Files handled.
    pub files: u64,
    /// Seconds for the files (without the sync).
    pub seconds: f64,
    /// Files per second (without the sync).
    pub files_per_sec: f64,
    /// Seconds `syncfs` took after it (create, delete).
    pub sync_seconds: Option<f64>,
    /// Files per second including the sync.
    pub files_per_sec_with_sync: f64,
    /// Bytes the member devices wrote during the phase and its sync.
    pub device_write_bytes: u64,
    /// The same per member device.
    pub per_member: Vec<MemberBytes>,
}

/// Bytes one member wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberBytes {
    /// Kernel name.
    pub device: String,
    /// Bytes written.
    pub write_bytes: u64,
    /// Bytes read.
    pub read_bytes: u64,
}

/// The report of `bench --small-files`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetadataReport {
    /// Format version.
    pub(crate) report_version: u32,
    /// Always `metadata`.
    pub mode: String,
    /// 0.
    pub exit_code: u8,
    /// One sentence.
    pub summary: String,
    /// Kernel release.
    pub kernel: String,
    /// The filesystem.
    pub target: TargetInfo,
    /// Its metadata profiles (btrfs).
    pub metadata_profiles: Vec<Profile>,
    /// Files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Threads.
    pub threads: u32,
    /// The storm's dentries and inodes were evicted before the stat phase.
    pub stat_cold: bool,
    /// How (`warm` when they were not).
    pub stat_cold_method: ColdMethod,
    /// One sentence: how the stat phase was made cold, or why it is warm.
    pub stat_cold_detail: String,
    /// create, stat, delete.
    pub phases: Vec<Phase>,
    /// The directory was removed.
    pub work_dir_removed: bool,
    /// Notes.
    pub notes: Vec<String>,
}

fn dir_name(d: u64) -> String {
    format!("d{d:06}")
}

fn file_name(i: u64) -> String {
    format!("f{i:09}")
}

/// [`file_name`] as a C string on the stack, for the per-file system
/// calls: no allocation, and no copy into a C string by rustix (as the C
/// reference's `snprintf` into a stack buffer). Nine digits: `--files` is
/// at most 10^8.
struct CName([u8; 11]);

impl CName {
    fn file(i: u64) -> Self {
        let mut b = *b"f000000000\0";
        let mut n = i;
        for digit in b[1..10].iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
        Self(b)
    }

    fn as_c_str(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_with_nul(&self.0).expect("one NUL, at the end")
    }
}

/// Runs `op(dir_fd, file_index)` for every file, the directories split
/// between `threads` threads; stops early (error) on a signal.
fn for_all_files(
    root: &OwnedFd,
    root_path: &Path,
    opts: &MetadataOptions,
    op: &(dyn Fn(&OwnedFd, u64) -> std::io::Result<()> + Sync),
) -> Result<u64> {
    let dirs = opts.dirs();
    let done = AtomicU64::new(0);
    let next_dir = AtomicU64::new(0);
    let failure: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
    thread::scope(|s| {
        for _ in 0..opts.threads {
            s.spawn(|| {
                loop {
                    let d = next_dir.fetch_add(1, Ordering::SeqCst);
                    if d >= dirs || check_stop().is_err() {
                        return;
                    }
                    if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                        return;
                    }
                    let name = dir_name(d);
                    let r = atfile::open_dir(root, &name, root_path).and_then(|fd| {
                        let lo = d * FILES_PER_DIR;
                        let hi = (lo + FILES_PER_DIR).min(opts.files);
                        for i in lo..hi {
                            op(&fd, i).map_err(|e| {
                                Error::from_io(
                                    &e,
                                    "cannot handle",
                                    &root_path.join(&name).join(file_name(i)),
                                )
                            })?;
                        }
                        done.fetch_add(hi - lo, Ordering::SeqCst);
                        Ok(())
                    });
                    if let Err(e) = r
                        && let Ok(mut f) = failure.lock()
                    {
                        f.get_or_insert(e);
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    check_stop()?;
    Ok(done.into_inner())
}

fn counters(devs: &[MemberDevice], root: &SysRoot) -> Vec<(u64, u64)> {
    let stats = diskstats::read_stats(root).unwrap_or_default();
    devs.iter()
        .map(|d| {
            stats
                .iter()
                .find(|s| s.major == d.major && s.minor == d.minor)
                .map_or((0, 0), |s| (s.bytes_read(), s.bytes_written()))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn phase(
    name: &str,
    files: u64,
    seconds: f64,
    sync_seconds: Option<f64>,
    devs: &[MemberDevice],
    before: &[(u64, u64)],
    after: &[(u64, u64)],
) -> Phase {
    let per_member: Vec<MemberBytes> = devs
        .iter()
        .zip(before.iter().zip(after))
        .map(|(d, (b, a))| MemberBytes {
            device: d.name.clone(),
            read_bytes: a.0.saturating_sub(b.0),
            write_bytes: a.1.saturating_sub(b.1),
        })
        .collect();
    let total = seconds + sync_seconds.unwrap_or(0.0);
    Phase {
        name: name.to_owned(),
        files,
        seconds,
        files_per_sec: files as f64 / seconds.max(1e-9),
        sync_seconds,
        files_per_sec_with_sync: files as f64 / total.max(1e-9),
        device_write_bytes: per_member.iter().map(|m| m.write_bytes).sum(),
        per_member,
    }
}

/// How the stat phase is made cold, as it turned out: the method asked
/// for, or warm and why not.
struct Cold {
    method: ColdMethod,
    detail: String,
    cgroup: Option<crate::sys::kernel::memcg::ScratchCgroup>,
}

impl Cold {
    /// The storm's own memory cgroup, made before anything is written
    /// (root only); or warm, and why.
    fn prepare(asked: ColdMethod, root_user: bool) -> Self {
        let mut cold = Self {
            method: asked,
            detail: String::new(),
            cgroup: None,
        };
        if asked == ColdMethod::OwnCgroup {
            if !root_user {
                cold.warm("warm: not root, so the storm's dentries and inodes could not be evicted (a memory cgroup of its own needs root)".to_owned());
            } else {
                match crate::sys::kernel::memcg::ScratchCgroup::create() {
                    Ok(c) => cold.cgroup = Some(c),
                    Err(why) => cold.warm(format!(
                        "warm: {why}, so the storm's dentries and inodes could not be evicted alone (--drop-caches drops the whole machine's caches instead)"
                    )),
                }
            }
        } else if asked == ColdMethod::Warm {
            cold.detail = "warm: nothing was evicted before the stat phase".to_owned();
        }
        cold
    }

    fn warm(&mut self, why: String) {
        self.method = ColdMethod::Warm;
        self.detail = why;
    }

    /// Moves into the storm's memory cgroup before the creates.
    fn enter(&mut self) {
        if let Some(c) = self.cgroup.as_mut()
            && let Err(e) = c.enter()
        {
            let why = format!(
                "warm: cannot move into the memory cgroup {} ({e}), so the storm's dentries and inodes could not be evicted alone",
                c.path().display()
            );
            self.warm(why);
            self.cgroup = None;
        }
    }

    /// After the creates: leaves the cgroup and reclaims it, or drops every
    /// cache (`--drop-caches`); says how cold the stat phase is.
    fn evict(&mut self) -> Result<()> {
        if let Some(mut c) = self.cgroup.take() {
            c.leave()
                .map_err(|e| Error::from_io(&e, "cannot leave the memory cgroup", c.path()))?;
            let before = c.kernel_charged().unwrap_or(0);
            let r = c.reclaim();
            let after = c.kernel_charged().unwrap_or(before);
            match r {
                Err(e) => self.warm(format!(
                    "warm: the memory cgroup {} could not be reclaimed ({e})",
                    c.path().display()
                )),
                Ok(()) if before > 0 && after.saturating_mul(2) > before => self.warm(format!(
                    "warm: reclaiming the storm's memory cgroup freed only {} of the {} of kernel memory charged to it, less than half: many of its dentries and inodes are still cached (the kernel's slab shrinkers leave several thousand of them; a storm of 50000 files or more is mostly evicted)",
                    format_iec(before - after),
                    format_iec(before)
                )),
                Ok(()) => {
                    self.detail = format!(
                        "cold for the storm's files alone: they were created in a memory cgroup of their own, reclaimed before the stat phase ({} of the {} of kernel memory charged to it freed: their dentries and inodes); the rest of the machine's caches were left alone, and the filesystem's metadata blocks stayed in memory (btrfs charges them to no cgroup), so the devices read little",
                        format_iec(before - after),
                        format_iec(before)
                    );
                }
            }
        }
        if self.method == ColdMethod::DropCaches {
            crate::sys::kernel::pagecache::drop_all_caches()?;
            self.detail = "cold: sync, then the kernel's page, dentry and inode caches of every filesystem of this machine were dropped (--drop-caches)".to_owned();
        }
        Ok(())
    }
}

/// The storm's work directory and what each phase is measured with.
struct Storm<'a> {
    root: &'a OwnedFd,
    path: &'a Path,
    opts: &'a MetadataOptions,
    devices: &'a [MemberDevice],
}

impl Storm<'_> {
    /// One phase: the members' counters around `work` (the files it
    /// handled), then `syncfs` when `sync`.
    fn measure(&self, name: &str, sync: bool, work: impl FnOnce() -> Result<u64>) -> Result<Phase> {
        let b = counters(self.devices, &self.opts.sysroot);
        let t = Instant::now();
        let n = work()?;
        let secs = t.elapsed().as_secs_f64();
        let sync = if sync {
            Some(atfile::timed_syncfs(self.root, self.path)?)
        } else {
            None
        };
        let a = counters(self.devices, &self.opts.sysroot);
        Ok(phase(name, n, secs, sync, self.devices, &b, &a))
    }

    /// The directories, then the files; synced.
    fn create(&self) -> Result<Phase> {
        self.measure("create", true, || {
            for d in 0..self.opts.dirs() {
                atfile::make_private_dir(self.root, dir_name(d).as_str(), self.path)?;
            }
            for_all_files(self.root, self.path, self.opts, &|fd, i| {
                atfile::create_empty(fd, CName::file(i).as_c_str())
            })
        })
    }

    /// Every file stat'ed.
    fn stat(&self) -> Result<Phase> {
        self.measure("stat", false, || {
            for_all_files(self.root, self.path, self.opts, &|fd, i| {
                atfile::stat(fd, CName::file(i).as_c_str())
            })
        })
    }

    /// The files, then the directories; synced.
    fn delete(&self) -> Result<Phase> {
        self.measure("delete", true, || {
            let n = for_all_files(self.root, self.path, self.opts, &|fd, i| {
                atfile::unlink(fd, CName::file(i).as_c_str())
            })?;
            for d in 0..self.opts.dirs() {
                atfile::remove_dir(self.root, dir_name(d).as_str(), self.path)?;
            }
            Ok(n)
        })
    }
}

/// Refuses a DIR without room for the storm.
fn check_space(opts: &MetadataOptions, info: &crate::sys::fs::filesystem::DirFs) -> Result<()> {
    let need = opts.needed_space();
    if info.available_bytes < need {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough free space in {} for {} files: the test needs about {}, {} is free",
                info.dir.display(),
                opts.files,
                format_iec(need),
                format_iec(info.available_bytes)
            ),
        )
        .with_hint("free some space or use fewer --files"));
    }
    Ok(())
}

/// The report's sentence: the three phases' rates and what the creates
/// wrote.
fn summary(opts: &MetadataOptions, phases: &[Phase], cold: bool, metadata: &[Profile]) -> String {
    let c = &phases[0];
    format!(
        "{} files by {} threads: create {:.0} files/s (sync {:.2} s), stat {:.0} files/s{}, delete {:.0} files/s (sync {:.2} s); the devices wrote {} for the creates{}",
        opts.files,
        opts.threads,
        c.files_per_sec,
        c.sync_seconds.unwrap_or(0.0),
        phases[1].files_per_sec,
        if cold { " cold" } else { " warm" },
        phases[2].files_per_sec,
        phases[2].sync_seconds.unwrap_or(0.0),
        format_iec(c.device_write_bytes),
        if metadata.is_empty() {
            String::new()
        } else {
            format!(
                " (metadata {})",
                metadata
                    .iter()
                    .map(|p| format!("{p:?}").to_lowercase())
                    .collect::<Vec<_>>()
                    .join("+")
            )
        }
    )
}

/// Runs the metadata test (see the module documentation). `progress` is
/// called with the phase's name when it starts; `started` just before the
/// work directory is made.
pub fn run(
    opts: &MetadataOptions,
    started: &mut dyn FnMut(),
    progress: &mut dyn FnMut(&str),
) -> Result<MetadataReport> {
    opts.validate()?;
    let target = kit::open_target(&opts.sysroot, &opts.dir, "--small-files creates files")?;
    check_space(opts, &target.info)?;
    let profiles = if target.is_btrfs {
        btrfs::block_group_profiles_of(target.held.fd(), &target.info.dir).ok()
    } else {
        None
    };
    let root_user = crate::sys::is_root();
    if opts.cold == ColdMethod::DropCaches && !root_user {
        return Err(Error::new(
            ErrorKind::Permission,
            "--drop-caches needs root: cannot write /proc/sys/vm/drop_caches",
        )
        .with_hint("run as root, or leave out --drop-caches"));
    }
    let mut cold = Cold::prepare(opts.cold, root_user);
    kit::install_signals()?;
    check_stop()?;

    started();
    let kit::Target {
        held,
        info,
        uuid,
        devices,
        devices_missing,
        ..
    } = target;
    let mut notes = kit::sweep_stale(&held);
    let work = WorkDir::create(held)?;
    let root: OwnedFd = work
        .dir()
        .fd()
        .try_clone_to_owned()
        .map_err(|e| Error::from_io(&e, "cannot open", work.path()))?;
    let storm = Storm {
        root: &root,
        path: work.path(),
        opts,
        devices: &devices,
    };
    progress("create");
    cold.enter();
    let mut phases = vec![storm.create()?];
    cold.evict()?;
    progress("stat");
    phases.push(storm.stat()?);
    progress("delete");
    phases.push(storm.delete()?);
    drop(root);
    notes.extend(work.remove()?);

    if !devices_missing.is_empty() {
        notes.push(format!(
            "/proc/diskstats does not show {}: their bytes are not counted",
            devices_missing.join(", ")
        ));
    }
    let metadata_profiles = profiles
        .as_ref()
        .map(|p| p.metadata.clone())
        .unwrap_or_default();
    let stat_cold = cold.method != ColdMethod::Warm;
    let summary = summary(opts, &phases, stat_cold, &metadata_profiles);
    let mount_options: Vec<String> = info.mount.options().map(str::to_owned).collect();
    Ok(MetadataReport {
        report_version: REPORT_VERSION,
        mode: "metadata".into(),
        exit_code: 0,
        summary,
        kernel: crate::sys::kernel_release(),
        target: TargetInfo {
            dir: info.dir.clone(),
            dir_bytes: crate::report::text::non_utf8_bytes(&info.dir),
            mount_point: info.mount.mount_point.clone(),
            fs_type: info.mount.fs_type.clone(),
            uuid,
            source: info.mount.source.clone(),
            compression_option: kit::compression_option(&mount_options),
            mount_options,
            data_profiles: profiles.map(|p| p.data).unwrap_or_default(),
            devices,
            devices_missing,
        },
        metadata_profiles,
        files: opts.files,
        dirs: opts.dirs(),
        threads: opts.threads,
        stat_cold,
        stat_cold_method: cold.method,
        stat_cold_detail: cold.detail,
        phases,
        work_dir_removed: true,
        notes,
    })
}

/// Runs [`run`] with its phase and file count on the `ui`'s progress bar.
pub fn measure(opts: &MetadataOptions, ui: &dyn crate::ui::Ui) -> Result<MetadataReport> {
    let bar = ui.progress("bench --small-files {msg}");
    let files = opts.files;
    let result = run(opts, &mut || {}, &mut |p| {
        bar.set_message(format!("{p} ({files} files)"))
    });
    bar.finish();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_names_are_the_file_names() {
        for i in [0, 7, 999, 1000, 123_456_789, 100_000_000] {
            assert_eq!(CName::file(i).as_c_str().to_str().unwrap(), file_name(i));
        }
    }

    #[test]
    fn options_and_layout() {
        let mut o = MetadataOptions::new("/d");
        assert!(o.validate().is_ok());
        assert_eq!(o.dirs(), 200);
        o.files = 1001;
        assert_eq!(o.dirs(), 2);
        o.files = 10;
        assert_eq!(o.validate().unwrap_err().exit_code(), 2);
        o.files = 1000;
        o.threads = 0;
        assert_eq!(o.validate().unwrap_err().exit_code(), 2);
    }

    #[test]
    fn the_storm_runs_on_a_plain_directory_and_leaves_nothing() {
        // tmpfs is refused (no device); any disk filesystem will do.
        let t = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let mut o = MetadataOptions::new(t.path());
        o.files = 2500;
        o.threads = 3;
        o.cold = ColdMethod::Warm;
        let mut seen = Vec::new();
        let r = run(&o, &mut || {}, &mut |p| seen.push(p.to_owned())).unwrap();
        assert_eq!(seen, ["create", "stat", "delete"]);
        assert_eq!(r.dirs, 3);
        let names: Vec<&str> = r.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["create", "stat", "delete"]);
        assert!(r.phases.iter().all(|p| p.files == 2500), "{r:#?}");
        assert!(r.phases[0].sync_seconds.is_some() && r.phases[1].sync_seconds.is_none());
        assert!(!r.stat_cold);
        assert_eq!(r.stat_cold_method, ColdMethod::Warm);
        assert!(r.stat_cold_detail.starts_with("warm"), "{r:#?}");
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
    }
}
