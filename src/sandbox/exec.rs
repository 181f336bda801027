//! Carrying out `sandbox up` and `down`, and reading a sandbox's live state.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::plan::{FsKind, SandboxPlan};
use super::state::{DeviceRecord, SandboxRecord, StateStore};
use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::sys::loopdev::{self, DetachOutcome, FileIdentity};
use crate::sys::root::SysRoot;
use crate::sys::{btrfs, fs as sysfs, is_root, mounts, signals, tools};

/// A sandbox that exists. Dropping it tears it down (panics included),
/// unless [`Sandbox::keep`] was called: that is what tests rely on.
#[derive(Debug)]
pub struct Sandbox {
    record: SandboxRecord,
    store: StateStore,
    armed: bool,
}

impl Sandbox {
    /// Creates the sandbox of `plan`. On any failure, or on SIGINT/SIGTERM,
    /// everything made so far is removed again before the error is returned.
    pub fn up(plan: &SandboxPlan, store: &StateStore) -> Result<Sandbox> {
        if !is_root() {
            return Err(Error::new(
                ErrorKind::Permission,
                "a sandbox needs root (loop devices and mount)",
            )
            .with_hint("run it as root, e.g. with sudo"));
        }
        let mkfs = tools::find(plan.fs.mkfs(), plan.fs.package())?;
        refuse_memory_backed(&plan.dir)?;
        let mut sandbox = Sandbox {
            record: SandboxRecord::new(plan),
            store: store.clone(),
            armed: false,
        };
        store.create(&sandbox.record)?;
        sandbox.armed = true;
        sandbox.build(plan, &mkfs)?;
        Ok(sandbox)
    }

    fn build(&mut self, plan: &SandboxPlan, mkfs: &tools::Tool) -> Result<()> {
        self.record.dir_created = prepare_dir(&plan.dir)?;
        self.save()?;
        if is_btrfs_dir(&plan.dir) {
            // Backing files on btrfs must be NOCOW, or the loop driver's
            // O_DIRECT writes to them are turned buffered by the host btrfs.
            let _ = sysfs::set_nocow_dir(&plan.dir, false);
        }
        for image in &plan.images {
            signals::check()?;
            self.record.devices.push(DeviceRecord {
                image: image.clone(),
                identity: None,
                loop_device: None,
            });
            self.save()?;
            let identity = create_sparse(image, plan.size_bytes)?;
            self.record
                .devices
                .last_mut()
                .expect("just pushed")
                .identity = Some(identity);
            self.save()?;
        }
        let root = SysRoot::host();
        for i in 0..plan.images.len() {
            signals::check()?;
            let dev = loopdev::attach(&plan.images[i], true)?;
            self.record.devices[i].loop_device = Some(dev.path.clone());
            self.save()?;
            if !loopdev::direct_io_enabled(&root, &dev)? {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "{} could not use direct I/O on {}",
                        dev.path.display(),
                        plan.images[i].display()
                    ),
                )
                .with_hint("put the sandbox on a disk filesystem that supports O_DIRECT (--dir)"));
            }
        }
        signals::check()?;
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&plan.mount_point)
            .map_err(|e| Error::from_io(&e, "cannot create mount point", &plan.mount_point))?;
        self.record.mount_point_created = true;
        self.save()?;
        let devices: Vec<PathBuf> = self.record.loop_devices().map(Path::to_path_buf).collect();
        let mut args = plan.mkfs_arguments();
        args.extend(devices.iter().map(|d| d.display().to_string()));
        mkfs.run(&args)?;
        signals::check()?;
        if plan.fs == FsKind::Btrfs {
            for d in &devices {
                btrfs::scan_device(d)?;
            }
        }
        mounts::mount_device(&devices[0], &plan.mount_point, plan.fs.name(), None)?;
        self.record.mounted = true;
        self.record.complete = true;
        self.save()?;
        Ok(())
    }

    fn save(&self) -> Result<()> {
        self.store.save(&self.record)
    }

    /// Keeps the sandbox after this value is dropped (the CLI's `up`).
    pub fn keep(mut self) -> SandboxRecord {
        self.armed = false;
        self.record.clone()
    }

    /// The record.
    pub fn record(&self) -> &SandboxRecord {
        &self.record
    }

    /// Where it is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.record.mount_point
    }

    /// Its loop devices.
    pub fn devices(&self) -> Vec<PathBuf> {
        self.record.loop_devices().map(Path::to_path_buf).collect()
    }

    /// Tears it down now, reporting what was done.
    pub fn down(mut self) -> Result<DownReport> {
        self.armed = false;
        teardown(&self.store, &self.record)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = teardown(&self.store, &self.record)
        {
            eprintln!(
                "btrfs-lab: error: could not remove sandbox {}: {}",
                self.record.name,
                e.message()
            );
        }
    }
}

fn refuse_memory_backed(dir: &Path) -> Result<()> {
    let mut probe = dir.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            return Ok(());
        }
    }
    let info = sysfs::inspect_dir(&SysRoot::host(), &probe)?;
    if sysfs::is_memory_backed(&info.mount.fs_type) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{} is on {}, which cannot back loop devices with direct I/O",
                probe.display(),
                info.mount.fs_type
            ),
        )
        .with_hint(
            "choose a directory on a disk filesystem with --dir (the default is under /var/tmp)",
        ));
    }
    Ok(())
}

fn is_btrfs_dir(dir: &Path) -> bool {
    sysfs::inspect_dir(&SysRoot::host(), dir).is_ok_and(|i| i.mount.fs_type == "btrfs")
}

/// Creates `dir` (mode 0700), or accepts an existing empty directory that
/// only root can write. Returns true if it was created.
fn prepare_dir(dir: &Path) -> Result<bool> {
    match fs::symlink_metadata(dir) {
        Ok(meta) => {
            if !meta.is_dir() {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} exists and is not a directory", dir.display()),
                ));
            }
            if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
                return Err(Error::new(
                    ErrorKind::Permission,
                    format!(
                        "{} must be owned by root and writable only by root",
                        dir.display()
                    ),
                )
                .with_hint("give a new directory with --dir; btrfs-lab creates it"));
            }
            let empty = fs::read_dir(dir)
                .map_err(|e| Error::from_io(&e, "cannot read", dir))?
                .next()
                .is_none();
            if !empty {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} is not empty", dir.display()),
                )
                .with_hint("give a new or empty directory with --dir"));
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(|e| Error::from_io(&e, "cannot create", parent))?;
            }
            fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| Error::from_io(&e, "cannot create", dir))?;
            Ok(true)
        }
        Err(e) => Err(Error::from_io(&e, "cannot use", dir)),
    }
}

fn create_sparse(image: &Path, size: u64) -> Result<FileIdentity> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(image)
        .map_err(|e| Error::from_io(&e, "cannot create backing file", image))?;
    f.set_len(size)
        .map_err(|e| Error::from_io(&e, "cannot size backing file", image))?;
    FileIdentity::of(&f).map_err(|e| Error::from_io(&e, "cannot stat", image))
}

/// What `down` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DownReport {
    /// Sandbox name.
    pub name: String,
    /// The mount point, if it was unmounted.
    pub unmounted: Option<PathBuf>,
    /// Loop devices detached.
    pub detached: Vec<PathBuf>,
    /// Files and directories deleted.
    pub removed: Vec<PathBuf>,
    /// Things deliberately left alone, with the reason.
    pub left: Vec<String>,
}

/// Removes what `record` says `up` made, and nothing else: the mount only if
/// its source is one of our loop devices, a loop device only while it is
/// bound to our backing file (same device and inode), files only at the
/// recorded paths. The record is deleted only once mount, loop devices and
/// images are gone, so a failed `down` can be retried.
pub fn teardown(store: &StateStore, record: &SandboxRecord) -> Result<DownReport> {
    let root = SysRoot::host();
    let mut report = DownReport {
        name: record.name.clone(),
        ..DownReport::default()
    };
    let ours = our_loop_devices(&root, record);
    let our_names: Vec<String> = ours.iter().map(|(d, _)| d.display().to_string()).collect();

    // 1. Unmount, if what is mounted there is ours.
    let table = mounts::mount_table(&root)?;
    let mount_point =
        fs::canonicalize(&record.mount_point).unwrap_or_else(|_| record.mount_point.clone());
    for m in table.iter().rev() {
        if m.mount_point != mount_point {
            continue;
        }
        if !mount_is_ours(m, &our_names) {
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} holds {} ({}), which this sandbox did not mount; not touching it",
                    mount_point.display(),
                    m.source,
                    m.fs_type
                ),
            ));
        }
        mounts::unmount(&mount_point)?;
        report.unmounted = Some(mount_point.clone());
    }
    // Our devices mounted somewhere else were mounted by someone else.
    let table = mounts::mount_table(&root)?;
    if let Some(m) = table.iter().find(|m| our_names.contains(&m.source)) {
        return Err(Error::new(
            ErrorKind::Busy,
            format!(
                "{} is also mounted at {}",
                m.source,
                m.mount_point.display()
            ),
        )
        .with_hint(format!(
            "unmount it first: umount {}",
            m.mount_point.display()
        )));
    }

    // 2. Forget and detach the loop devices.
    for recorded in record.loop_devices() {
        let rebound = !ours.iter().any(|(p, _)| p == recorded)
            && loopdev::backing_identity(recorded).ok().flatten().is_some();
        if rebound {
            report.left.push(format!(
                "{} now belongs to another file; left alone",
                recorded.display()
            ));
        }
    }
    for (dev, identity) in &ours {
        if record.fs == FsKind::Btrfs {
            btrfs::forget_device(dev);
        }
        match loopdev::detach_if_ours(&root, dev, *identity)? {
            DetachOutcome::Detached => report.detached.push(dev.clone()),
            DetachOutcome::AlreadyFree => {}
            DetachOutcome::NotOurs => report.left.push(format!(
                "{} now belongs to another file; left alone",
                dev.display()
            )),
        }
    }

    // 3. Delete the backing files.
    for d in &record.devices {
        match fs::symlink_metadata(&d.image) {
            Ok(meta) if meta.is_file() => {
                let same = d
                    .identity
                    .is_none_or(|id| id.dev == meta.dev() && id.ino == meta.ino());
                if same {
                    fs::remove_file(&d.image)
                        .map_err(|e| Error::from_io(&e, "cannot delete", &d.image))?;
                    report.removed.push(d.image.clone());
                } else {
                    report.left.push(format!(
                        "{} was replaced by another file; left alone",
                        d.image.display()
                    ));
                }
            }
            Ok(_) => report.left.push(format!(
                "{} is not a regular file; left alone",
                d.image.display()
            )),
            Err(_) => {}
        }
    }

    // 4. Directories, only if we created them and they are empty.
    let mut dirs = Vec::new();
    if record.mount_point_created {
        dirs.push(record.mount_point.clone());
    }
    if record.dir_created {
        dirs.push(record.dir.clone());
    }
    for dir in dirs {
        match fs::remove_dir(&dir) {
            Ok(()) => report.removed.push(dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => report.left.push(format!(
                "{} holds files btrfs-lab did not create; left in place",
                dir.display()
            )),
        }
    }
    store.remove(&record.name)?;
    Ok(report)
}

/// The mount's source is one of our loop devices; or, for a sandbox grown
/// with `device add` (which may show a newer member as the source), one of
/// our loop devices is a member of the mounted btrfs.
fn mount_is_ours(m: &crate::parse::mountinfo::MountEntry, our_names: &[String]) -> bool {
    our_names.contains(&m.source)
        || (m.fs_type == "btrfs"
            && btrfs::devices(&m.mount_point)
                .is_ok_and(|devs| devs.iter().any(|d| our_names.contains(&d.path))))
}

/// Loop devices bound to our images: the recorded ones, plus any found by
/// backing-file path (an `up` that crashed between attaching and recording).
fn our_loop_devices(root: &SysRoot, record: &SandboxRecord) -> Vec<(PathBuf, FileIdentity)> {
    let mut found = Vec::new();
    for d in &record.devices {
        let Some(identity) = d.identity else { continue };
        let mut candidates: Vec<PathBuf> = d.loop_device.iter().cloned().collect();
        candidates.extend(loopdev::find_by_backing_file(root, &d.image));
        for dev in candidates {
            let bound_to_us = loopdev::backing_identity(&dev).ok().flatten() == Some(identity);
            if bound_to_us && !found.iter().any(|(p, _)| p == &dev) {
                found.push((dev, identity));
            }
        }
    }
    found
}

/// How a recorded sandbox looks right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxStatus {
    /// Name.
    pub name: String,
    /// `up` (mounted, all devices attached), `partial`, or `down` (nothing
    /// attached or mounted; only files remain, e.g. after a reboot).
    pub state: &'static str,
    /// Filesystem.
    pub fs: FsKind,
    /// Mount point.
    pub mount_point: PathBuf,
    /// Whether it is mounted now.
    pub mounted: bool,
    /// Devices and whether each is attached to our image now.
    pub devices: Vec<DeviceStatus>,
    /// Size of each device.
    pub size_bytes: u64,
    /// Requested data profile.
    pub data: Option<Profile>,
    /// Requested metadata profile.
    pub metadata: Option<Profile>,
}

/// One device of a [`SandboxStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceStatus {
    /// Backing file.
    pub image: PathBuf,
    /// Loop device bound to it now, if any.
    pub loop_device: Option<PathBuf>,
}

/// The live status of a recorded sandbox.
pub fn status(record: &SandboxRecord) -> SandboxStatus {
    let root = SysRoot::host();
    let ours = our_loop_devices(&root, record);
    let names: Vec<String> = ours.iter().map(|(d, _)| d.display().to_string()).collect();
    let mount_point =
        fs::canonicalize(&record.mount_point).unwrap_or_else(|_| record.mount_point.clone());
    let mounted = mounts::mount_table(&root)
        .map(|t| {
            t.iter()
                .any(|m| m.mount_point == mount_point && mount_is_ours(m, &names))
        })
        .unwrap_or(false);
    let devices: Vec<DeviceStatus> = record
        .devices
        .iter()
        .map(|d| DeviceStatus {
            image: d.image.clone(),
            loop_device: ours
                .iter()
                .find(|(_, id)| Some(*id) == d.identity)
                .map(|(p, _)| p.clone()),
        })
        .collect();
    let attached = devices.iter().filter(|d| d.loop_device.is_some()).count();
    let state = if mounted && record.complete && attached == devices.len() {
        "up"
    } else if mounted || attached > 0 {
        "partial"
    } else {
        "down"
    };
    SandboxStatus {
        name: record.name.clone(),
        state,
        fs: record.fs,
        mount_point: record.mount_point.clone(),
        mounted,
        devices,
        size_bytes: record.size_bytes,
        data: record.data,
        metadata: record.metadata,
    }
}
