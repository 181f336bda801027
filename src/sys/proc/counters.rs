//! Counters of dirtied page-cache data: per backing device (debugfs
//! `bdi/<name>/stats`, BdiDirtied) or machine-wide (`/proc/vmstat`,
//! nr_dirtied).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use nix::sched::{CloneFlags, unshare};
use rustix::mount::{MountFlags, MountPropagationFlags, mount, mount_change};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::parse::counters::{bdi_dirtied_bytes, vmstat_nr_dirtied};
use crate::sys::fs::root::{SysRoot, TABLE_CAP};

/// Which counter was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CounterKind {
    /// The filesystem's own backing device (debugfs BdiDirtied).
    Bdi,
    /// The machine-wide `nr_dirtied` from /proc/vmstat.
    Vmstat,
}

/// The user's choice of counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterChoice {
    /// The per-device counter when it can be read, else vmstat.
    Auto,
    /// Only the per-device counter; fail if unavailable.
    Bdi,
    /// Only the machine-wide counter.
    Vmstat,
}

/// An open dirtied-bytes counter.
#[derive(Debug)]
pub(crate) struct DirtyCounter {
    kind: CounterKind,
    label: String,
    file: File,
    page_size: u64,
    path: PathBuf,
}

impl DirtyCounter {
    /// Which counter this is.
    pub fn kind(&self) -> CounterKind {
        self.kind
    }

    /// `bdi btrfs-1` or `/proc/vmstat nr_dirtied`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Bytes dirtied so far (monotonic).
    pub fn read_bytes(&mut self) -> Result<u64> {
        let mut text = String::new();
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| {
                (&self.file)
                    .take(TABLE_CAP as u64)
                    .read_to_string(&mut text)
            })
            .map_err(|e| Error::from_io(&e, "cannot read", &self.path))?;
        let value = match self.kind {
            CounterKind::Bdi => bdi_dirtied_bytes(&text),
            CounterKind::Vmstat => {
                vmstat_nr_dirtied(&text).map(|p| p.saturating_mul(self.page_size))
            }
        };
        value.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("{} has no dirtied counter", self.path.display()),
            )
        })
    }
}

/// The machine-wide counter.
pub(crate) fn open_vmstat(root: &SysRoot) -> Result<DirtyCounter> {
    let path = root.proc("vmstat");
    let file = root
        .open_file(&path)
        .map_err(|e| Error::from_io(&e, "cannot open", &path))?;
    let mut c = DirtyCounter {
        kind: CounterKind::Vmstat,
        label: "/proc/vmstat nr_dirtied".to_owned(),
        file,
        page_size: page_size(),
        path,
    };
    c.read_bytes()?;
    Ok(c)
}

/// The per-device counter of the backing device `bdi` under a debugfs mounted
/// at `debugfs`.
pub(crate) fn open_bdi(debugfs: &Path, bdi: &str) -> Result<DirtyCounter> {
    let path = debugfs.join("bdi").join(bdi).join("stats");
    let file = File::open(&path).map_err(|e| Error::from_io(&e, "cannot open", &path))?;
    let mut c = DirtyCounter {
        kind: CounterKind::Bdi,
        label: format!("bdi {bdi}"),
        file,
        page_size: page_size(),
        path,
    };
    c.read_bytes()?;
    Ok(c)
}

/// The system page size.
pub(crate) fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Where debugfs is mounted in this process's view, if anywhere.
pub(crate) fn find_debugfs(root: &SysRoot) -> Option<PathBuf> {
    crate::sys::proc::mountinfo::find_type(root, "debugfs")
}

/// Whether this process is in the private mount namespace of
/// [`enter_private_mount_namespace`].
static PRIVATE_NS: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Moves this process into a private mount namespace whose mounts do not
/// propagate to the rest of the system (once; later calls do nothing), so
/// what it mounts (debugfs, tracefs) vanishes when it exits. Needs root;
/// must be called before the process starts threads (the kernel refuses
/// otherwise).
pub(crate) fn enter_private_mount_namespace() -> Result<()> {
    let mut done = PRIVATE_NS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *done {
        return Ok(());
    }
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| {
        Error::from_errno(
            e,
            "cannot create a private mount namespace for",
            Path::new("/"),
        )
    })?;
    mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| {
        crate::error::Error::from_errno(e, "cannot make mounts private under", Path::new("/"))
    })?;
    *done = true;
    Ok(())
}

/// Mounts debugfs at /sys/kernel/debug in a private mount namespace of this
/// process ([`enter_private_mount_namespace`]), so nothing changes for the
/// rest of the system and the mount vanishes when the process exits.
pub(crate) fn mount_private_debugfs() -> Result<PathBuf> {
    let target = PathBuf::from("/sys/kernel/debug");
    enter_private_mount_namespace()?;
    mount("debugfs", &target, "debugfs", MountFlags::empty(), None)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot mount debugfs at", &target))?;
    Ok(target)
}

/// Runs `f` with debugfs mounted in a private mount namespace, then returns
/// this process to the mount namespace it was in (when it was not in a
/// private one already). What `f` opened stays readable (the mount is
/// detached, not gone, while a file on it is open), and the private
/// namespace, with its copies of every mount on the system, goes at once:
/// held for a whole bench, those copies kept other filesystems' devices
/// busy after their owners unmounted them. Must be called before the
/// process starts threads.
fn with_private_debugfs<T>(f: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    with_private_ns(|| mount_private_debugfs().and_then(|d| f(&d)))
}

/// Runs `f` in a private mount namespace (what it mounts there, see
/// [`mount_private_debugfs`], [`crate::sys::proc::tracefs::mount_private_tracefs`],
/// is seen by nobody else), then returns this process to the mount namespace
/// it was in, when it was not in a private one already; see
/// [`with_private_debugfs`] for why. Files `f` opened stay usable, and paths
/// through them (`/proc/self/fd/N/...`) still resolve. Must be called
/// before the process starts threads.
pub(crate) fn with_private_ns<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let already = *PRIVATE_NS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if already {
        return f();
    }
    let home = File::open("/proc/self/ns/mnt")
        .map_err(|e| Error::from_io(&e, "cannot open", Path::new("/proc/self/ns/mnt")))?;
    let result = f();
    let entered = *PRIVATE_NS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !entered {
        return result;
    }
    let back = rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&home),
        Some(rustix::thread::LinkNameSpaceType::Mount),
    );
    *PRIVATE_NS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = back.is_err();
    result
}

/// Opens the best counter allowed by `choice` for the backing device `bdi`.
/// Returns the counter and, when it is not the per-device one, why.
pub(crate) fn open_counter(
    root: &SysRoot,
    choice: CounterChoice,
    bdi: Option<&str>,
    allow_private_debugfs: bool,
) -> Result<(DirtyCounter, Option<String>)> {
    if choice == CounterChoice::Vmstat {
        return Ok((
            open_vmstat(root)?,
            Some("machine-wide counter chosen with --counter vmstat".into()),
        ));
    }
    let attempt = || -> std::result::Result<DirtyCounter, String> {
        let bdi = bdi.ok_or("the backing device of this filesystem is unknown")?;
        let debugfs = match find_debugfs(root) {
            Some(p) => p,
            None if !rustix::process::geteuid().is_root() => {
                return Err("the per-device counter is in debugfs, which needs root".into());
            }
            None if allow_private_debugfs && root.is_host() => {
                return with_private_debugfs(|d| open_bdi(d, bdi))
                    .map_err(|e| e.message().to_owned());
            }
            None => return Err("debugfs is not mounted".into()),
        };
        open_bdi(&debugfs, bdi).map_err(|e| e.message().to_owned())
    };
    match attempt() {
        Ok(c) => Ok((c, None)),
        Err(why) if choice == CounterChoice::Auto => Ok((
            open_vmstat(root)?,
            Some(format!(
                "{why}; fell back to the machine-wide counter, which other writers disturb"
            )),
        )),
        Err(why) => Err(Error::new(
            ErrorKind::Unsupported,
            format!("per-device dirty counter unavailable: {why}"),
        )
        .with_hint("run as root with debugfs available, or use --counter vmstat")),
    }
}

/// The name of the backing device (bdi) that a filesystem on the block
/// device `major:minor` writes through: the whole disk's, for a partition.
pub(crate) fn block_bdi_name(root: &SysRoot, major: u32, minor: u32) -> Option<String> {
    let dev = root.sys(&format!("dev/block/{major}:{minor}"));
    if let Ok(mut real) = fs::canonicalize(&dev) {
        if real.join("partition").exists() {
            real.pop();
        }
        if let Ok(link) = fs::read_link(real.join("bdi")) {
            return link.file_name().map(|n| n.to_string_lossy().into_owned());
        }
    }
    // Filesystems with their own bdi named after the device number (NFS, FUSE).
    let class = root.sys(&format!("class/bdi/{major}:{minor}"));
    class.exists().then(|| format!("{major}:{minor}"))
}

/// The bdi of a mounted btrfs, from `/sys/fs/btrfs/<fsid>/bdi`.
pub(crate) fn btrfs_bdi_name(root: &SysRoot, fsid: &str) -> Option<String> {
    let link = fs::read_link(root.sys(&format!("fs/btrfs/{fsid}/bdi"))).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn bdi_names_from_a_fixture_sysfs() {
        // Layout as on Linux 6.18: /sys/dev/block/M:m -> ../../devices/...,
        // partitions have a `partition` file and no bdi link, disks link
        // bdi -> ../../bdi/M:m; btrfs links /sys/fs/btrfs/<fsid>/bdi.
        let t = tempfile::tempdir().unwrap();
        let sys = t.path().join("sys");
        let disk = sys.join("devices/pci0000:00/virtio1/block/vda");
        fs::create_dir_all(disk.join("vda1")).unwrap();
        fs::write(disk.join("vda1/partition"), "1\n").unwrap();
        fs::create_dir_all(sys.join("devices/virtual/bdi/254:0")).unwrap();
        symlink("../../../../virtual/bdi/254:0", disk.join("bdi")).unwrap();
        fs::create_dir_all(sys.join("dev/block")).unwrap();
        symlink(&disk, sys.join("dev/block/254:0")).unwrap();
        symlink(disk.join("vda1"), sys.join("dev/block/254:1")).unwrap();
        fs::create_dir_all(sys.join("fs/btrfs/abcd")).unwrap();
        symlink(
            "../../../devices/virtual/bdi/btrfs-3",
            sys.join("fs/btrfs/abcd/bdi"),
        )
        .unwrap();
        fs::create_dir_all(sys.join("class/bdi/0:53")).unwrap();

        let root = SysRoot::new(t.path());
        assert_eq!(block_bdi_name(&root, 254, 0).as_deref(), Some("254:0"));
        assert_eq!(block_bdi_name(&root, 254, 1).as_deref(), Some("254:0"));
        assert_eq!(block_bdi_name(&root, 0, 53).as_deref(), Some("0:53"));
        assert_eq!(block_bdi_name(&root, 9, 9), None);
        assert_eq!(btrfs_bdi_name(&root, "abcd").as_deref(), Some("btrfs-3"));
    }

    #[test]
    fn vmstat_counter_reads_a_fixture() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("proc")).unwrap();
        fs::write(t.path().join("proc/vmstat"), "nr_dirtied 10\n").unwrap();
        let mut c = open_vmstat(&SysRoot::new(t.path())).unwrap();
        assert_eq!(c.read_bytes().unwrap(), 10 * page_size());
        assert_eq!(c.kind(), CounterKind::Vmstat);
    }
}
