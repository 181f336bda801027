//! Storage topology from sysfs: NVMe controllers, the PCI functions from a
//! controller up to its root port, what lies beneath a block device
//! (partition → disk, device-mapper/md → their slaves, NVMe multipath head
//! → its controllers), and, for captured trees, the members and profiles of
//! a btrfs.
//!
//! The layout read here (Linux 4.x to 6.18, see
//! Documentation/ABI/testing/sysfs-bus-pci, sysfs-class-nvme and
//! sysfs-fs-btrfs):
//!
//! ```text
//! /sys/class/nvme/nvme0 -> ../../devices/pci0000:00/0000:00:01.2/0000:01:00.0/nvme/nvme0
//! /sys/class/nvme/nvme0/{model,serial,firmware_rev,transport,address}
//! /sys/class/nvme/nvme0/device -> ../../../0000:01:00.0   (the PCI function)
//! /sys/devices/pci0000:00/0000:00:01.2/{current,max}_link_{speed,width}
//! /sys/class/block/nvme0n1p1 -> ../../devices/.../nvme/nvme0/nvme0n1/nvme0n1p1
//! /sys/class/block/nvme0n1/device -> ../../nvme0
//! /sys/class/block/dm-0/slaves/nvme0n1p2 -> ...
//! /sys/fs/btrfs/<FSID>/devices/nvme0n1p2 -> ...
//! /sys/fs/btrfs/<FSID>/allocation/data/raid0/total_bytes
//! ```
//!
//! Every read goes through [`SysRoot`], so a captured tree reads like the
//! running system. Symlinks are resolved and must stay inside the prefix.

use std::fs;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::parse::mountinfo::{MountEntry, mount_containing};
use crate::parse::pcie::{
    Generation, parse_hex_id, parse_link_speed, parse_link_width, parse_pci_address,
};
use crate::sys::fs::root::SysRoot;

/// The link attributes of a PCI function (`None` where the kernel printed
/// `Unknown` or 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkAttrs {
    /// Current speed.
    pub speed: Option<Generation>,
    /// Current width (lanes).
    pub width: Option<u8>,
    /// Highest speed the function supports.
    pub(crate) max_speed: Option<Generation>,
    /// Widest width the function supports.
    pub max_width: Option<u8>,
}

/// A PCI function on the way from a controller to its root port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciFunction {
    /// `0000:01:00.0`.
    pub address: String,
    /// PCI vendor id.
    pub vendor: Option<u32>,
    /// PCI device id.
    pub device: Option<u32>,
    /// PCI class code (`0x010802` for NVMe, `0x060400` for a bridge).
    pub class: Option<u32>,
    /// Link attributes; `None` when the function has none (conventional
    /// PCI, or an integrated endpoint).
    pub link: Option<LinkAttrs>,
}

/// An NVMe controller as sysfs shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NvmeController {
    /// `nvme0`.
    pub name: String,
    /// Model number, trimmed.
    pub model: Option<String>,
    /// Serial number, trimmed.
    pub serial: Option<String>,
    /// Firmware revision.
    pub firmware: Option<String>,
    /// `pcie`, `tcp`, `rdma`, `fc`, `loop`.
    pub transport: Option<String>,
    /// The PCI functions from the controller's own (first) up to its root
    /// port (last); empty when it is not on PCI.
    pub(crate) pci_path: Vec<PciFunction>,
}

/// What kind of device a drive is: an NVMe controller, or a disk that has
/// none (which then has no PCIe link of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// An NVMe controller on PCIe.
    Nvme,
    /// An NVMe controller reached over a fabric (TCP, RDMA, FC, loop).
    NvmeFabrics,
    /// A virtio disk in a virtual machine.
    Virtio,
    /// A loop device.
    Loop,
    /// A disk behind libata (SATA, usually AHCI).
    Sata,
    /// A USB disk.
    Usb,
    /// A SCSI or SAS disk.
    Scsi,
    /// An SD card or eMMC.
    Mmc,
    /// Another virtual block device (zram, nbd, ram).
    Virtual,
    /// Anything else.
    Other,
}

/// What a block device rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockTarget {
    /// An NVMe controller (`nvme0`).
    Controller(String),
    /// A disk that is not NVMe (`vda`, `loop0`, `sda`).
    Disk {
        /// Its block device name (the whole disk, not a partition).
        name: String,
        /// What it is.
        kind: DeviceKind,
    },
}

/// A loop device followed to the filesystem that holds its backing file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoopLayer {
    /// The loop device (`loop3`).
    pub device: String,
    /// Its backing file (`loop/backing_file`), as the kernel shows it.
    pub backing_file: String,
    /// The filesystem type holding it (`ext4`), when the mount table says.
    pub fs_type: Option<String>,
    /// That filesystem's mount point.
    pub mount_point: Option<String>,
    /// The block devices of that filesystem that were followed (`vda`,
    /// every member of a btrfs); empty when none could be found (the file
    /// is in memory, deleted, or in another mount namespace).
    pub devices: Vec<String>,
}

/// What a command-line name or path refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeviceRef {
    /// A block device (`nvme0n1p2`, `dm-0`, `vda`).
    Block(String),
    /// An NVMe controller (`nvme0`).
    Controller(String),
}

/// Reads a sysfs attribute, trimmed; `None` if missing, empty or refused
/// (a link, not a regular file, larger than the cap: [`SysRoot::read_attr`]).
fn attr(root: &SysRoot, path: &Path) -> Option<String> {
    let s = root.read_attr(path).ok()?;
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// True for a name that can only mean one directory entry.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// The canonical form of `path`, if it exists and stays inside the root
/// prefix (sysfs links are relative; a captured tree must not lead out).
fn resolve(root: &SysRoot, path: &Path) -> Option<PathBuf> {
    let real = fs::canonicalize(path).ok()?;
    let prefix = fs::canonicalize(root.prefix()).ok()?;
    real.starts_with(&prefix).then_some(real)
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name().map(|n| n.to_string_lossy().into_owned())
}

fn sorted_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort_by(|a, b| natural_cmp(a, b));
    v
}

/// Orders `nvme2` before `nvme10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(s: &str) -> (&str, Option<u64>) {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(s.len() - digits);
        (head, tail.parse().ok())
    }
    split(a).cmp(&split(b)).then_with(|| a.cmp(b))
}

/// True when `name` looks like a controller (`nvme0`, not `nvme0n1`).
fn is_controller_name(name: &str) -> bool {
    name.strip_prefix("nvme")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks that a captured tree looks like one.
pub(crate) fn check_root(root: &SysRoot) -> Result<()> {
    if root.is_host() {
        return Ok(());
    }
    let prefix = root.prefix();
    if !prefix.is_dir() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("sysroot {} is not a directory", prefix.display()),
        )
        .with_hint(
            "give --sysroot (or BTRFS_LAB_SYSROOT) a directory laid out like / with sys/ in it",
        ));
    }
    if !root.sys("").is_dir() {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("sysroot {} has no sys/ directory", prefix.display()),
        )
        .with_hint("a captured tree holds sys/ (and proc/) as the running system has them"));
    }
    Ok(())
}

/// The NVMe controllers, in natural order (`nvme0`, `nvme1`, `nvme10`).
/// No `/sys/class/nvme` (no NVMe driver loaded) means none; an entry whose
/// link leads nowhere (a controller going away) is skipped.
pub(crate) fn list_controllers(root: &SysRoot) -> Vec<String> {
    sorted_entries(&root.sys("class/nvme"))
        .into_iter()
        .filter(|n| is_controller_name(n))
        .filter(|n| resolve(root, &root.sys(&format!("class/nvme/{n}"))).is_some())
        .collect()
}

/// Reads one PCI function's identity and link attributes.
pub(crate) fn read_pci_function(root: &SysRoot, dir: &Path) -> PciFunction {
    let id = |f: &str| attr(root, &dir.join(f)).and_then(|s| parse_hex_id(&s));
    let speed = attr(root, &dir.join("current_link_speed"));
    let width = attr(root, &dir.join("current_link_width"));
    let max_speed = attr(root, &dir.join("max_link_speed"));
    let max_width = attr(root, &dir.join("max_link_width"));
    let has_link = speed.is_some() || width.is_some() || max_speed.is_some() || max_width.is_some();
    PciFunction {
        address: file_name(dir).unwrap_or_default(),
        vendor: id("vendor"),
        device: id("device"),
        class: id("class"),
        link: has_link.then(|| LinkAttrs {
            speed: speed.as_deref().and_then(parse_link_speed),
            width: width.as_deref().and_then(parse_link_width),
            max_speed: max_speed.as_deref().and_then(parse_link_speed),
            max_width: max_width.as_deref().and_then(parse_link_width),
        }),
    }
}

/// The PCI functions from `function_dir` (a controller's PCI function) up
/// to the last one below the host bridge (`pci0000:00`), which is the root
/// port.
pub(crate) fn pci_path(root: &SysRoot, function_dir: &Path) -> Vec<PciFunction> {
    let mut out = Vec::new();
    let mut cur = Some(function_dir);
    while let Some(dir) = cur {
        let Some(name) = file_name(dir) else { break };
        if parse_pci_address(&name).is_none() {
            break;
        }
        out.push(read_pci_function(root, dir));
        cur = dir.parent();
    }
    out
}

/// Reads a controller: its identity, transport and PCI path.
pub(crate) fn read_controller(root: &SysRoot, name: &str) -> Result<NvmeController> {
    if !is_controller_name(name) {
        return Err(Error::usage(format!(
            "{name} is not an NVMe controller name"
        )));
    }
    let dir = root.sys(&format!("class/nvme/{name}"));
    if !dir.exists() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no NVMe controller {name}"),
        ));
    }
    let transport = attr(root, &dir.join("transport"));
    let pci_path = match resolve(root, &dir.join("device")) {
        Some(function) if transport.as_deref().is_none_or(|t| t == "pcie") => {
            pci_path(root, &function)
        }
        _ => Vec::new(),
    };
    Ok(NvmeController {
        name: name.to_owned(),
        model: attr(root, &dir.join("model")),
        serial: attr(root, &dir.join("serial")),
        firmware: attr(root, &dir.join("firmware_rev")),
        transport,
        pci_path,
    })
}

/// The controllers a disk's namespace is reached through.
fn disk_controllers(root: &SysRoot, disk_dir: &Path) -> Vec<String> {
    let Some(device) = resolve(root, &disk_dir.join("device")) else {
        return Vec::new();
    };
    let Some(device_name) = file_name(&device) else {
        return Vec::new();
    };
    if is_controller_name(&device_name) {
        return vec![device_name];
    }
    // A native-multipath head (nvme-subsysN): its paths are listed under
    // `multipath/`, each a hidden disk whose `device` is a controller.
    if device_name.starts_with("nvme-subsys") {
        let mut found: Vec<String> = sorted_entries(&disk_dir.join("multipath"))
            .iter()
            .filter_map(|p| resolve(root, &disk_dir.join("multipath").join(p).join("device")))
            .filter_map(|d| file_name(&d))
            .filter(|n| is_controller_name(n))
            .collect();
        if found.is_empty() {
            found = sorted_entries(&device)
                .into_iter()
                .filter(|n| is_controller_name(n))
                .collect();
        }
        found.dedup();
        return found;
    }
    Vec::new()
}

fn disk_kind(disk_dir: &Path, name: &str) -> DeviceKind {
    let parts: Vec<String> = disk_dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let has = |f: &dyn Fn(&str) -> bool| parts.iter().any(|p| f(p));
    let numbered = |p: &str, prefix: &str| {
        p.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if name.starts_with("loop") && has(&|p| p == "virtual") {
        DeviceKind::Loop
    } else if has(&|p| p == "virtual") {
        DeviceKind::Virtual
    } else if has(&|p| numbered(p, "virtio")) {
        DeviceKind::Virtio
    } else if has(&|p| numbered(p, "ata")) {
        DeviceKind::Sata
    } else if has(&|p| numbered(p, "usb")) {
        DeviceKind::Usb
    } else if has(&|p| numbered(p, "mmc")) {
        DeviceKind::Mmc
    } else if has(&|p| numbered(p, "host")) {
        DeviceKind::Scsi
    } else {
        DeviceKind::Other
    }
}

/// What the block device `name` rests on: a partition is followed to its
/// disk, device-mapper and md devices to their slaves (LUKS on NVMe is
/// common), an NVMe namespace to its controller(s).
pub(crate) fn block_targets(root: &SysRoot, name: &str) -> Result<Vec<BlockTarget>> {
    Ok(block_targets_traced(root, name)?.0)
}

/// [`block_targets`], and the loop devices followed on the way: a loop
/// device is followed to the block devices of the filesystem that holds
/// its backing file (`loop/backing_file`, then the mount table: the
/// filesystem's own device, or every member of a btrfs), so a btrfs on
/// loop devices names the disk behind them.
pub(crate) fn block_targets_traced(
    root: &SysRoot,
    name: &str,
) -> Result<(Vec<BlockTarget>, Vec<LoopLayer>)> {
    let mut out = Vec::new();
    let mut layers = Vec::new();
    collect_targets(root, name, 0, &mut out, &mut layers)?;
    Ok((out, layers))
}

/// The block devices of the filesystem holding `file`, with its type and
/// mount point, from the mount table under `root`.
fn filesystem_devices(root: &SysRoot, file: &str) -> (Option<MountEntry>, Vec<String>) {
    let Ok(table) = crate::sys::proc::mountinfo::mount_table(root) else {
        return (None, Vec::new());
    };
    let Some(m) = mount_containing(&table, Path::new(file)).cloned() else {
        return (None, Vec::new());
    };
    let mut devices = Vec::new();
    if m.major != 0 {
        if let Some(dev) = resolve(
            root,
            &root.sys(&format!("dev/block/{}:{}", m.major, m.minor)),
        )
        .and_then(|d| file_name(&d))
        {
            devices.push(dev);
        }
    } else if m.fs_type == "btrfs"
        && let Ok(DeviceRef::Block(b)) = device_ref(root, &m.source)
    {
        // btrfs reports an anonymous device number: its members are in
        // /sys/fs/btrfs/<fsid>/devices.
        match btrfs_fsid_of_member(root, &b) {
            Some(fsid) => devices = btrfs_members(root, &fsid),
            None => devices.push(b),
        }
    }
    (Some(m), devices)
}

fn collect_targets(
    root: &SysRoot,
    name: &str,
    depth: u32,
    out: &mut Vec<BlockTarget>,
    layers: &mut Vec<LoopLayer>,
) -> Result<()> {
    if !plain_name(name) {
        return Err(Error::usage(format!("'{name}' is not a block device name")));
    }
    if depth > 8 {
        return Err(Error::new(
            ErrorKind::State,
            format!("block device {name}: slaves nest too deeply"),
        ));
    }
    let Some(mut dir) = resolve(root, &root.sys(&format!("class/block/{name}"))) else {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no block device {name}"),
        ));
    };
    if dir.join("partition").exists() {
        dir.pop();
    }
    let disk = file_name(&dir).unwrap_or_else(|| name.to_owned());
    let slaves = sorted_entries(&dir.join("slaves"));
    if !slaves.is_empty() {
        for s in slaves {
            collect_targets(root, &s, depth + 1, out, layers)?;
        }
        return Ok(());
    }
    if let Some(backing) = attr(root, &dir.join("loop/backing_file")) {
        let file = backing.trim_end_matches(" (deleted)");
        let (mount, devices) = if depth < 8 && file.starts_with('/') && file.len() == backing.len()
        {
            filesystem_devices(root, file)
        } else {
            (None, Vec::new())
        };
        // Only devices that lead somewhere count (not the loop itself).
        let devices: Vec<String> = devices
            .into_iter()
            .filter(|d| plain_name(d) && d != &disk)
            .collect();
        layers.push(LoopLayer {
            device: disk.clone(),
            backing_file: backing.clone(),
            fs_type: mount.as_ref().map(|m| m.fs_type.clone()),
            mount_point: mount.as_ref().map(|m| m.mount_point.display().to_string()),
            devices: devices.clone(),
        });
        let mut followed = false;
        for d in &devices {
            // A device that cannot be followed leaves the loop as the target.
            followed |= collect_targets(root, d, depth + 1, out, layers).is_ok();
        }
        if followed {
            return Ok(());
        }
    }
    let controllers = disk_controllers(root, &dir);
    let targets: Vec<BlockTarget> = if controllers.is_empty() {
        vec![BlockTarget::Disk {
            kind: disk_kind(&dir, &disk),
            name: disk,
        }]
    } else {
        controllers
            .into_iter()
            .map(BlockTarget::Controller)
            .collect()
    };
    for t in targets {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(())
}

/// Turns a command-line device (`/dev/nvme0n1p2`, `nvme0n1`, `nvme0`,
/// `/dev/mapper/root`, `dm-0`) into a block device or controller name.
/// On the running system a path is resolved through its device number; in
/// a captured tree through its name.
pub(crate) fn device_ref(root: &SysRoot, arg: &str) -> Result<DeviceRef> {
    let not_found = || {
        Error::new(
            ErrorKind::NotFound,
            format!("{arg} is neither a block device nor an NVMe controller"),
        )
        .with_hint("`btrfs-lab links` with no argument lists the NVMe controllers; lsblk lists block devices")
    };
    if arg.is_empty() {
        return Err(Error::usage("an empty device name").with_hint(
            "give a device such as /dev/nvme0n1, a controller such as nvme0, or a mounted btrfs",
        ));
    }
    if root.is_host() && arg.starts_with('/') {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta =
            fs::metadata(arg).map_err(|e| Error::from_io(&e, "cannot use", Path::new(arg)))?;
        let ft = meta.file_type();
        if ft.is_block_device() {
            let (major, minor) = (
                rustix::fs::major(meta.rdev()),
                rustix::fs::minor(meta.rdev()),
            );
            let dev = resolve(root, &root.sys(&format!("dev/block/{major}:{minor}")))
                .ok_or_else(not_found)?;
            return file_name(&dev).map(DeviceRef::Block).ok_or_else(not_found);
        }
        if ft.is_char_device() {
            let name = file_name(Path::new(arg)).unwrap_or_default();
            if is_controller_name(&name) && root.sys(&format!("class/nvme/{name}")).exists() {
                return Ok(DeviceRef::Controller(name));
            }
        }
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{arg} is not a block device or an NVMe controller"),
        )
        .with_hint(
            "give a device such as /dev/nvme0n1, a controller such as nvme0, or a mounted btrfs",
        ));
    }
    let rel = arg.strip_prefix("/dev/").unwrap_or(arg);
    if let Some(dm_name) = rel.strip_prefix("mapper/") {
        return find_dm(root, dm_name)
            .map(DeviceRef::Block)
            .ok_or_else(not_found);
    }
    if !plain_name(rel) {
        return Err(not_found());
    }
    if root.sys(&format!("class/block/{rel}")).exists() {
        Ok(DeviceRef::Block(rel.to_owned()))
    } else if is_controller_name(rel) && root.sys(&format!("class/nvme/{rel}")).exists() {
        Ok(DeviceRef::Controller(rel.to_owned()))
    } else {
        Err(not_found())
    }
}

/// The `dm-N` whose `dm/name` is `dm_name`.
fn find_dm(root: &SysRoot, dm_name: &str) -> Option<String> {
    sorted_entries(&root.sys("class/block"))
        .into_iter()
        .filter(|n| n.starts_with("dm-"))
        .find(|n| {
            attr(root, &root.sys(&format!("class/block/{n}/dm/name"))).as_deref() == Some(dm_name)
        })
}

/// The fsid of the btrfs whose sysfs `devices/` lists the block device
/// `name` (captured trees, where no ioctl can ask).
pub(crate) fn btrfs_fsid_of_member(root: &SysRoot, name: &str) -> Option<String> {
    sorted_entries(&root.sys("fs/btrfs"))
        .into_iter()
        .find(|fsid| {
            root.sys(&format!("fs/btrfs/{fsid}/devices/{name}"))
                .exists()
        })
}

/// The member block devices sysfs lists for a btrfs.
pub(crate) fn btrfs_members(root: &SysRoot, fsid: &str) -> Vec<String> {
    sorted_entries(&root.sys(&format!("fs/btrfs/{fsid}/devices")))
}

/// The data profiles with allocated space, from
/// `allocation/data/<profile>/total_bytes`.
pub(crate) fn btrfs_data_profiles(root: &SysRoot, fsid: &str) -> Vec<Profile> {
    let dir = root.sys(&format!("fs/btrfs/{fsid}/allocation/data"));
    let mut v: Vec<Profile> = sorted_entries(&dir)
        .into_iter()
        .filter_map(|n| {
            let p: Profile = n.parse().ok()?;
            let total: u64 = attr(root, &dir.join(&n).join("total_bytes"))?
                .parse()
                .ok()?;
            (total > 0).then_some(p)
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["nvme10", "nvme2", "nvme1", "nvme0"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["nvme0", "nvme1", "nvme2", "nvme10"]);
        assert!(is_controller_name("nvme12"));
        assert!(!is_controller_name("nvme0n1"));
        assert!(!is_controller_name("nvme"));
        assert!(!is_controller_name("nvme-subsys0"));
    }

    #[test]
    fn symlinks_that_leave_the_tree_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let root = SysRoot::new(t.path().join("root"));
        fs::create_dir_all(root.sys("class/block")).unwrap();
        symlink("/dev", root.sys("class/block/evil")).unwrap();
        symlink("../../../../..", root.sys("class/block/up")).unwrap();
        assert_eq!(
            block_targets(&root, "evil").unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            block_targets(&root, "up").unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            block_targets(&root, "..").unwrap_err().kind(),
            ErrorKind::Usage
        );
    }

    #[test]
    fn partitions_slaves_and_multipath_heads() {
        let t = tempfile::tempdir().unwrap();
        let root = SysRoot::new(t.path());
        let sys = t.path().join("sys");
        let ctrl = sys.join("devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0");
        write(&ctrl.join("model"), "Drive\n");
        write(&ctrl.join("nvme0n1/nvme0n1p2/partition"), "2\n");
        symlink("../../nvme0", ctrl.join("nvme0n1/device")).unwrap();
        symlink("../../../0000:01:00.0", ctrl.join("device")).unwrap();
        fs::create_dir_all(sys.join("class/block")).unwrap();
        fs::create_dir_all(sys.join("class/nvme")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0",
            sys.join("class/nvme/nvme0"),
        )
        .unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme0n1/nvme0n1p2",
            sys.join("class/block/nvme0n1p2"),
        )
        .unwrap();
        // dm-0 (LUKS) on the partition.
        let dm = sys.join("devices/virtual/block/dm-0");
        write(&dm.join("dm/name"), "cryptroot\n");
        fs::create_dir_all(dm.join("slaves")).unwrap();
        symlink(
            "../../../pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme0n1/nvme0n1p2",
            dm.join("slaves/nvme0n1p2"),
        )
        .unwrap();
        symlink(
            "../../devices/virtual/block/dm-0",
            sys.join("class/block/dm-0"),
        )
        .unwrap();
        // A multipath head whose path goes through nvme0.
        let head = sys.join("devices/virtual/nvme-subsystem/nvme-subsys1/nvme1n1");
        fs::create_dir_all(head.join("multipath")).unwrap();
        symlink("../../nvme-subsys1", head.join("device")).unwrap();
        let hidden = ctrl.join("nvme1c0n1");
        fs::create_dir_all(&hidden).unwrap();
        symlink("../../nvme0", hidden.join("device")).unwrap();
        symlink(
            "../../../../../pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme1c0n1",
            head.join("multipath/nvme1c0n1"),
        )
        .unwrap();
        symlink(
            "../../devices/virtual/nvme-subsystem/nvme-subsys1/nvme1n1",
            sys.join("class/block/nvme1n1"),
        )
        .unwrap();

        // loop5 over a file on an ext4 on nvme0n1p2 (259:2); loop6 over a
        // deleted file.
        symlink(
            "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/nvme0n1/nvme0n1p2",
            {
                fs::create_dir_all(sys.join("dev/block")).unwrap();
                sys.join("dev/block/259:2")
            },
        )
        .unwrap();
        for (n, file) in [(5, "/srv/images/disk.img"), (6, "/srv/old.img (deleted)")] {
            let lp = sys.join(format!("devices/virtual/block/loop{n}"));
            write(&lp.join("loop/backing_file"), &format!("{file}\n"));
            symlink(
                format!("../../devices/virtual/block/loop{n}"),
                sys.join(format!("class/block/loop{n}")),
            )
            .unwrap();
        }
        write(
            &t.path().join("proc/self/mountinfo"),
            "27 1 254:0 / / rw - ext4 /dev/vda rw\n88 27 259:2 / /srv rw - ext4 /dev/nvme0n1p2 rw\n",
        );

        let nvme0 = vec![BlockTarget::Controller("nvme0".into())];
        let (targets, layers) = block_targets_traced(&root, "loop5").unwrap();
        assert_eq!(targets, nvme0, "the loop leads to the NVMe drive");
        assert_eq!(
            layers,
            [LoopLayer {
                device: "loop5".into(),
                backing_file: "/srv/images/disk.img".into(),
                fs_type: Some("ext4".into()),
                mount_point: Some("/srv".into()),
                devices: vec!["nvme0n1p2".into()],
            }]
        );
        // A deleted backing file is not looked up: the loop stays.
        let (targets, layers) = block_targets_traced(&root, "loop6").unwrap();
        assert_eq!(
            targets,
            [BlockTarget::Disk {
                name: "loop6".into(),
                kind: DeviceKind::Loop
            }]
        );
        assert!(layers[0].devices.is_empty() && layers[0].fs_type.is_none());
        assert_eq!(block_targets(&root, "nvme0n1p2").unwrap(), nvme0);
        assert_eq!(block_targets(&root, "dm-0").unwrap(), nvme0);
        assert_eq!(block_targets(&root, "nvme1n1").unwrap(), nvme0);
        assert_eq!(
            device_ref(&root, "/dev/mapper/cryptroot").unwrap(),
            DeviceRef::Block("dm-0".into())
        );
        assert_eq!(
            device_ref(&root, "/dev/nvme0").unwrap(),
            DeviceRef::Controller("nvme0".into())
        );
        assert_eq!(
            device_ref(&root, "nvme0n1p2").unwrap(),
            DeviceRef::Block("nvme0n1p2".into())
        );
        assert_eq!(
            device_ref(&root, "sdz").unwrap_err().kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            device_ref(&root, "/dev/../etc").unwrap_err().kind(),
            ErrorKind::NotFound
        );

        let c = read_controller(&root, "nvme0").unwrap();
        assert_eq!(c.model.as_deref(), Some("Drive"));
        assert_eq!(c.transport, None);
        assert_eq!(
            c.pci_path
                .iter()
                .map(|f| f.address.as_str())
                .collect::<Vec<_>>(),
            ["0000:01:00.0", "0000:00:01.1"]
        );
        assert!(c.pci_path[0].link.is_none());
    }

    #[test]
    fn disk_kinds_from_the_device_path() {
        let k = |p: &str, n: &str| disk_kind(Path::new(p), n);
        assert_eq!(
            k("/s/sys/devices/virtual/block/loop3", "loop3"),
            DeviceKind::Loop
        );
        assert_eq!(
            k("/s/sys/devices/virtual/block/zram0", "zram0"),
            DeviceKind::Virtual
        );
        assert_eq!(
            k(
                "/s/sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda",
                "vda"
            ),
            DeviceKind::Virtio
        );
        assert_eq!(
            k(
                "/s/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda",
                "sda"
            ),
            DeviceKind::Sata
        );
        assert_eq!(
            k(
                "/s/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdb",
                "sdb"
            ),
            DeviceKind::Usb
        );
        assert_eq!(
            k(
                "/s/sys/devices/pci0000:00/0000:00:1f.0/host2/target2:0:0/2:0:0:0/block/sdc",
                "sdc"
            ),
            DeviceKind::Scsi
        );
        assert_eq!(
            k("/s/sys/devices/platform/x/block/foo", "foo"),
            DeviceKind::Other
        );
    }
}
