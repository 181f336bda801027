//! Loop devices: attach a backing file with direct I/O, verify, detach only
//! what is ours.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::ioctl;

/// Identity of a backing file: the (st_dev, st_ino) pair the loop driver
/// reports, so a detach can prove the device is still bound to our file.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub struct FileIdentity {
    /// `st_dev` of the backing file.
    pub dev: u64,
    /// `st_ino` of the backing file.
    pub ino: u64,
}

impl FileIdentity {
    /// The identity of an open file.
    pub fn of(file: &File) -> std::io::Result<Self> {
        let meta = file.metadata()?;
        Ok(Self {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// A bound loop device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub path: PathBuf,
    /// N.
    pub index: u32,
}

/// What `detach` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachOutcome {
    /// It was bound to our file and is now free.
    Detached,
    /// It was already free (or gone).
    AlreadyFree,
    /// It is bound to some other file: left alone.
    NotOurs,
}

const ATTACH_ATTEMPTS: u32 = 32;

/// A loop device's current binding: the backing file's identity and the
/// disk sequence number of this attachment (Linux 5.15+; a re-attach of
/// the same device, even to the same file, gets a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding {
    /// Backing file identity.
    pub identity: FileIdentity,
    /// `BLKGETDISKSEQ`, when the kernel has it.
    pub diskseq: Option<u64>,
}

/// A loop device `attach_file` bound, still held open and still set to
/// detach by itself on last close: if we die before [`Attached::keep`], the
/// kernel frees it, so a crash between attach and record leaks nothing.
#[derive(Debug)]
pub struct Attached {
    /// The device.
    pub device: LoopDevice,
    /// What it is bound to (verified to be the file we passed).
    pub(crate) binding: Binding,
    node: File,
}

impl Attached {
    /// Clears autoclear: the device now stays until detached. Call once the
    /// device is recorded.
    pub fn keep(self) -> Result<LoopDevice> {
        let mut info = ioctl::loop_get_status64(self.node.as_fd())
            .map_err(|e| Error::from_errno(e, "cannot read loop status of", &self.device.path))?;
        info.lo_flags &= !ioctl::LO_FLAGS_AUTOCLEAR;
        ioctl::loop_set_status64(self.node.as_fd(), &info)
            .map_err(|e| Error::from_errno(e, "cannot set loop flags of", &self.device.path))?;
        Ok(self.device)
    }
}

/// Binds `image` to a free loop device with direct I/O requested, retrying
/// when another process races us for the same free device. Opens `image` by
/// path (O_NOFOLLOW): for a file an attacker cannot swap, use
/// [`attach_file`] with the descriptor that created it.
pub fn attach(image: &Path, direct_io: bool) -> Result<LoopDevice> {
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(image)
        .map_err(|e| Error::from_io(&e, "cannot open backing file", image))?;
    attach_file(&backing, image, direct_io)?.keep()
}

/// Binds the open file `backing` (shown as `name`) to a free loop device,
/// then checks that the device's backing file is `backing` (same device and
/// inode); if not, detaches it again and fails.
pub fn attach_file(backing: &File, name: &Path, direct_io: bool) -> Result<Attached> {
    let want = FileIdentity::of(backing).map_err(|e| Error::from_io(&e, "cannot stat", name))?;
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/loop-control")
        .map_err(|e| {
            Error::from_io(&e, "cannot open", Path::new("/dev/loop-control"))
                .with_hint("the loop driver is needed: modprobe loop (as root)")
        })?;
    let mut flags = ioctl::LO_FLAGS_AUTOCLEAR;
    if direct_io {
        flags |= ioctl::LO_FLAGS_DIRECT_IO;
    }
    let file_name = name.as_os_str().as_encoded_bytes();
    let mut last = Errno::EBUSY;
    for _ in 0..ATTACH_ATTEMPTS {
        let index = ioctl::loop_ctl_get_free(control.as_fd()).map_err(|e| {
            Error::from_errno(
                e,
                "cannot find a free loop device via",
                Path::new("/dev/loop-control"),
            )
        })?;
        let path = PathBuf::from(format!("/dev/loop{index}"));
        let node = match open_loop_node(&path) {
            Ok(f) => f,
            Err(e) => {
                last = e;
                continue;
            }
        };
        match ioctl::loop_configure(node.as_fd(), backing.as_fd(), flags, file_name) {
            Ok(()) => {}
            // Somebody else bound it between GET_FREE and CONFIGURE.
            Err(Errno::EBUSY) => {
                last = Errno::EBUSY;
                continue;
            }
            Err(e) => return Err(Error::from_errno(e, "cannot attach", name)),
        }
        let binding = binding_of(&node, &path)?;
        if binding.map(|b| b.identity) != Some(want) {
            // Not what we bound: with autoclear set, closing frees it if it
            // was ours; never clear a binding we did not make.
            return Err(Error::new(
                ErrorKind::State,
                format!(
                    "{} is not bound to {} after attaching it; refusing to use it",
                    path.display(),
                    name.display()
                ),
            ));
        }
        let binding = binding.expect("checked");
        return Ok(Attached {
            device: LoopDevice { path, index },
            binding,
            node,
        });
    }
    Err(
        Error::from_errno(last, "cannot attach a loop device for", name)
            .with_hint("all loop devices are busy; detach unused ones with losetup -d"),
    )
}

/// The binding of an open loop device node; `None` when it is free.
fn binding_of(node: &File, path: &Path) -> Result<Option<Binding>> {
    match ioctl::loop_get_status64(node.as_fd()) {
        Ok(info) => Ok(Some(Binding {
            identity: FileIdentity {
                dev: info.lo_device,
                ino: info.lo_inode,
            },
            diskseq: ioctl::blk_get_diskseq(node.as_fd()).ok(),
        })),
        Err(Errno::ENXIO) => Ok(None),
        Err(e) => Err(Error::from_errno(e, "cannot read loop status of", path)),
    }
}

/// The current binding of the loop device at `dev`; `None` when free or absent.
pub(crate) fn binding(dev: &Path) -> Result<Option<Binding>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(dev)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::from_io(&e, "cannot open", dev)),
    };
    binding_of(&file, dev)
}

/// Whether `found` is the binding recorded as `identity` (+ `diskseq` when
/// one was recorded and the kernel reports one).
pub(crate) fn same_binding(found: Binding, identity: FileIdentity, diskseq: Option<u64>) -> bool {
    found.identity == identity
        && match (diskseq, found.diskseq) {
            (Some(want), Some(have)) => want == have,
            (Some(_), None) => false,
            (None, _) => true,
        }
}

fn open_loop_node(path: &Path) -> std::result::Result<File, Errno> {
    // devtmpfs creates the node when LOOP_CTL_GET_FREE adds a device, but
    // give udev-managed /dev a moment.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(crate::sys::kernel::errno::of_io(&e)),
        }
    }
}

/// The backing file identity of a bound loop device, `None` when free.
pub fn backing_identity(dev: &Path) -> Result<Option<FileIdentity>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dev)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::from_io(&e, "cannot open", dev)),
    };
    match ioctl::loop_get_status64(file.as_fd()) {
        Ok(info) => Ok(Some(FileIdentity {
            dev: info.lo_device,
            ino: info.lo_inode,
        })),
        Err(Errno::ENXIO) => Ok(None),
        Err(e) => Err(Error::from_errno(e, "cannot read loop status of", dev)),
    }
}

/// Detaches `dev` if, and only if, it is bound to the file `ours`.
/// Waits until the kernel has really released it.
pub fn detach_if_ours(root: &SysRoot, dev: &Path, ours: FileIdentity) -> Result<DetachOutcome> {
    detach_exact(root, dev, ours, None)
}

/// Detaches `dev` if, and only if, it is bound to the file `ours` and (when
/// `diskseq` is given) is still the very attachment that was recorded. The
/// check and the detach use the same open descriptor of the device.
pub(crate) fn detach_exact(
    root: &SysRoot,
    dev: &Path,
    ours: FileIdentity,
    diskseq: Option<u64>,
) -> Result<DetachOutcome> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(dev)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(DetachOutcome::AlreadyFree);
        }
        Err(e) => return Err(Error::from_io(&e, "cannot open", dev)),
    };
    match binding_of(&file, dev)? {
        None => return Ok(DetachOutcome::AlreadyFree),
        Some(b) if !same_binding(b, ours, diskseq) => return Ok(DetachOutcome::NotOurs),
        Some(_) => {}
    }
    match ioctl::loop_clr_fd(file.as_fd()) {
        Ok(()) | Err(Errno::ENXIO) => {}
        Err(e) => return Err(Error::from_errno(e, "cannot detach", dev)),
    }
    drop(file);
    // With other openers the kernel defers the detach to their last close.
    let deadline = Instant::now() + Duration::from_secs(10);
    let index = loop_index(dev);
    while Instant::now() < deadline {
        let bound = match index {
            Some(n) => root
                .sys(&format!("block/loop{n}/loop/backing_file"))
                .exists(),
            None => backing_identity(dev)?.is_some(),
        };
        if !bound {
            return Ok(DetachOutcome::Detached);
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err(Error::new(
        ErrorKind::Busy,
        format!(
            "{} is still in use by another process; it will detach when released",
            dev.display()
        ),
    )
    .with_hint(format!(
        "see which process holds it: fuser -v {}",
        dev.display()
    )))
}

/// N of `/dev/loopN`.
pub(crate) fn loop_index(dev: &Path) -> Option<u32> {
    dev.file_name()?
        .to_str()?
        .strip_prefix("loop")?
        .parse()
        .ok()
}

/// Whether the loop driver really does direct I/O on the backing file
/// (it silently keeps buffered I/O when the backing filesystem cannot).
pub(crate) fn direct_io_enabled(root: &SysRoot, dev: &LoopDevice) -> Result<bool> {
    let p = root.sys(&format!("block/loop{}/loop/dio", dev.index));
    let text = fs::read_to_string(&p).map_err(|e| Error::from_io(&e, "cannot read", &p))?;
    Ok(text.trim() == "1")
}

/// Loop devices whose backing file path is `image` (as sysfs reports it,
/// including the " (deleted)" suffix the kernel adds for unlinked files).
pub(crate) fn find_by_backing_file(root: &SysRoot, image: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(root.sys("block")) else {
        return Vec::new();
    };
    let want = image.as_os_str().to_string_lossy().into_owned();
    let deleted = format!("{want} (deleted)");
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("loop")?.parse::<u32>().ok()?;
            let backing = fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            let backing = backing.trim_end_matches('\n');
            (backing == want || backing == deleted).then(|| PathBuf::from(format!("/dev/{name}")))
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_index_parses_only_loop_nodes() {
        assert_eq!(loop_index(Path::new("/dev/loop12")), Some(12));
        assert_eq!(loop_index(Path::new("/dev/sda")), None);
        assert_eq!(loop_index(Path::new("/dev/loop-control")), None);
    }

    #[test]
    fn find_by_backing_file_reads_a_fixture_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        for (n, backing) in [
            (0, "/var/tmp/a.img\n"),
            (3, "/var/tmp/b.img (deleted)\n"),
            (5, "/other\n"),
        ] {
            let d = dir.path().join(format!("sys/block/loop{n}/loop"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("backing_file"), backing).unwrap();
        }
        fs::create_dir_all(dir.path().join("sys/block/sda")).unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(
            find_by_backing_file(&root, Path::new("/var/tmp/a.img")),
            vec![PathBuf::from("/dev/loop0")]
        );
        assert_eq!(
            find_by_backing_file(&root, Path::new("/var/tmp/b.img")),
            vec![PathBuf::from("/dev/loop3")]
        );
        assert!(find_by_backing_file(&root, Path::new("/nope")).is_empty());
    }
}
