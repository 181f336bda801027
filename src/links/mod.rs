//! `links`: the PCIe link of each NVMe drive, walked up to its root port,
//! what it can carry, what holds it back, and the ceiling of an array.
//!
//! Everything is read from sysfs through a [`SysRoot`] (so captured trees
//! read like the running system), except the members of a mounted btrfs
//! on the running system (btrfs ioctls) and the SMART log (the NVMe admin
//! ioctl; a captured tree carries it as `nvme-smart-log/<controller>`).
//! The arithmetic and the report types are shared ([`crate::hw`]): device
//! add, bench and read-test use the same ceilings.

pub use crate::hw::{analysis, model};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::sys::block::topology::{self, DeviceRef, LoopLayer};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs;
use crate::sys::proc::mountinfo;

pub use crate::hw::CAPTURED_SMART_DIR;
use crate::hw::analysis::{MemberPath, array_ceiling, shared_uplinks};
use crate::hw::{Cache, Entry, is_pcie};
pub use crate::hw::{array_ceiling_for_block_devices, read_thermal};
pub use model::{
    ArrayCeiling, ArrayMember, ArrayReport, Bandwidth, DeviceKind, DeviceReport, Finding,
    LinksReport, Scope, Severity,
};

/// What `links` looks at.
#[derive(Debug, Clone)]
pub struct LinksOptions {
    /// Where sysfs and procfs are read.
    pub sysroot: SysRoot,
    /// Nothing (every NVMe controller), one mounted btrfs, or devices.
    pub targets: Vec<String>,
    /// Read the SMART thermal counters too.
    pub thermal: bool,
}

fn disk_note(kind: DeviceKind, name: &str) -> String {
    let what = match kind {
        DeviceKind::Virtio => {
            "a virtio disk (a virtual machine's; the host's storage sets the ceiling)".to_owned()
        }
        DeviceKind::Loop => "a loop device (a file on another filesystem)".to_owned(),
        DeviceKind::Sata => {
            "a SATA disk (behind AHCI); a SATA III link carries at most 0.6 GB/s".to_owned()
        }
        DeviceKind::Usb => "a USB disk".to_owned(),
        DeviceKind::Scsi => "a SCSI or SAS disk".to_owned(),
        DeviceKind::Mmc => "an SD card or eMMC".to_owned(),
        DeviceKind::Virtual => "a virtual block device".to_owned(),
        DeviceKind::Nvme | DeviceKind::NvmeFabrics | DeviceKind::Other => {
            "not an NVMe drive".to_owned()
        }
    };
    format!("no PCIe link information for {name}: {what}")
}

/// Is `target` a mount (a directory on the running system; a mount point
/// of the captured mount table otherwise)?
fn is_mount(root: &SysRoot, target: &str) -> bool {
    if root.is_host() {
        return Path::new(target).is_dir();
    }
    let Ok(table) = mountinfo::mount_table(root) else {
        return false;
    };
    mountinfo::at_mount_point(&table, &normalize(target)).is_some()
}

/// `/mnt/x/` and `/mnt//x` as `/mnt/x`, without touching the filesystem.
fn normalize(p: &str) -> PathBuf {
    Path::new(p).components().collect()
}

/// The members of a mounted btrfs: (device as btrfs names it, block
/// device name), its fsid and data profiles.
struct MountInfo {
    fsid: Option<String>,
    profiles: Vec<Profile>,
    members: Vec<(String, Option<String>)>,
}

fn read_mount(root: &SysRoot, mount: &str) -> Result<MountInfo> {
    if root.is_host() {
        let path = Path::new(mount);
        let devices = btrfs::devices(path).map_err(|e| {
            if e.kind() == ErrorKind::WrongTarget {
                e.with_hint("links MOUNT needs a mounted btrfs; name a device (/dev/nvme0n1) to see its drive")
            } else {
                e
            }
        })?;
        let profiles = btrfs::data_profiles(path)?;
        let fsid = btrfs::fsid(path).ok();
        let members = devices
            .into_iter()
            .map(|d| {
                let shown = d.path;
                let block = if shown.is_empty() {
                    None
                } else {
                    match topology::device_ref(root, &shown) {
                        Ok(DeviceRef::Block(b)) => Some(b),
                        _ => None,
                    }
                };
                let shown = if shown.is_empty() {
                    format!("devid {} (missing)", d.devid)
                } else {
                    shown
                };
                (shown, block)
            })
            .collect();
        return Ok(MountInfo {
            fsid,
            profiles,
            members,
        });
    }
    let table = mountinfo::mount_table(root)?;
    let entry = mountinfo::at_mount_point(&table, &normalize(mount))
        .cloned()
        .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("{mount} is not mounted")))?;
    if entry.fs_type != "btrfs" {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "{mount} is not on a btrfs filesystem (it is on {})",
                entry.fs_type
            ),
        ));
    }
    let source = match topology::device_ref(root, &entry.source)? {
        DeviceRef::Block(b) => b,
        DeviceRef::Controller(c) => c,
    };
    let fsid = topology::btrfs_fsid_of_member(root, &source).ok_or_else(|| {
        Error::new(
            ErrorKind::State,
            format!("no /sys/fs/btrfs/<fsid>/devices/{source} in the captured tree for {mount}"),
        )
    })?;
    let members = topology::btrfs_members(root, &fsid)
        .into_iter()
        .map(|b| (format!("/dev/{b}"), Some(b)))
        .collect();
    Ok(MountInfo {
        profiles: topology::btrfs_data_profiles(root, &fsid),
        fsid: Some(fsid),
        members,
    })
}

/// A link finding as `doctor --deep` reports it: its devices in one
/// `devices` figure, its command its hint or `links --thermal MOUNT`.
pub(crate) fn catalog_finding(l: &Finding, mount: &str) -> Finding {
    let devices: Vec<&str> = model::devices(l).collect();
    let mut f = Finding {
        evidence: Vec::new(),
        ..l.clone()
    }
    .with_evidence("devices", devices.join(", "));
    if f.command.is_none() {
        f.command = Some(crate::sys::tools::display_argv(&[
            "btrfs-lab",
            "links",
            "--thermal",
            mount,
        ]));
    }
    f
}

/// What to list, and which block devices (and loop layers) led to each
/// entry, in the order first seen.
#[derive(Default)]
struct Entries(Vec<(Entry, Vec<String>, Vec<LoopLayer>)>);

impl Entries {
    fn add(&mut self, e: Entry, block: Option<&str>, layers: &[LoopLayer]) {
        let i = match self.0.iter().position(|(x, _, _)| *x == e) {
            Some(i) => i,
            None => {
                self.0.push((e, Vec::new(), Vec::new()));
                self.0.len() - 1
            }
        };
        let (_, blocks, known) = &mut self.0[i];
        if let Some(b) = block
            && !blocks.iter().any(|x| x == b)
        {
            blocks.push(b.to_owned());
        }
        for l in layers {
            if !known.contains(l) {
                known.push(l.clone());
            }
        }
    }

    /// The devices a block device rests on.
    fn add_block(&mut self, root: &SysRoot, b: &str) -> Result<()> {
        let (targets, layers) = topology::block_targets_traced(root, b)?;
        for t in targets {
            self.add(t.into(), Some(b), &layers);
        }
        Ok(())
    }
}

/// The scope of the targets, the entries to list, and the mount with its
/// members when a mount was given.
type Gathered = (Scope, Entries, Option<(String, MountInfo)>);

/// Reads the targets: [`Gathered`].
fn gather(root: &SysRoot, opts: &LinksOptions) -> Result<Gathered> {
    let mut entries = Entries::default();
    if let Some(m) = opts.targets.iter().find(|t| is_mount(root, t)) {
        if opts.targets.len() > 1 {
            return Err(Error::usage(format!(
                "{m} is a mount: give one mounted btrfs, or devices, not both"
            ))
            .with_hint("btrfs-lab links MOUNT lists a btrfs's members; btrfs-lab links DEVICE... the named devices"));
        }
        let info = read_mount(root, m)?;
        for b in info.members.iter().filter_map(|(_, b)| b.as_deref()) {
            entries.add_block(root, b)?;
        }
        return Ok((Scope::Mount, entries, Some((m.clone(), info))));
    }
    if opts.targets.is_empty() {
        for c in topology::list_controllers(root) {
            entries.add(Entry::Controller(c), None, &[]);
        }
        return Ok((Scope::All, entries, None));
    }
    for t in &opts.targets {
        if !root.is_host() && t.starts_with('/') && !t.starts_with("/dev/") {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "{t} is not a mount point of the captured tree ({})",
                    mountinfo::table_path(root, mountinfo::Of::This).display()
                ),
            )
            .with_hint("give the mount point as the captured mountinfo lists it, or a device"));
        }
        match topology::device_ref(root, t)? {
            DeviceRef::Controller(c) => entries.add(Entry::Controller(c), None, &[]),
            DeviceRef::Block(b) => entries.add_block(root, &b)?,
        }
    }
    Ok((Scope::Devices, entries, None))
}

/// A device's report with nothing read yet.
fn bare_report(
    name: &str,
    kind: DeviceKind,
    blocks: &[String],
    layers: &[LoopLayer],
) -> DeviceReport {
    DeviceReport {
        name: name.to_owned(),
        kind,
        block_devices: blocks.to_vec(),
        model: None,
        serial: None,
        firmware: None,
        transport: None,
        pci_address: None,
        hops: Vec::new(),
        ceiling: None,
        potential: None,
        findings: Vec::new(),
        note: None,
        thermal: None,
        thermal_error: None,
        through_loops: layers.to_vec(),
    }
}

/// The devices' reports; the findings above them (upstream links, with
/// the link they are about) and the arithmetic's paths go to `upstream`
/// and `paths`.
fn device_reports(
    root: &SysRoot,
    cache: &mut Cache,
    entries: &Entries,
    upstream: &mut Vec<(String, Finding)>,
    paths: &mut Vec<MemberPath>,
) -> Result<Vec<DeviceReport>> {
    let mut devices = Vec::new();
    for (entry, blocks, layers) in &entries.0 {
        let report = match entry {
            Entry::Controller(name) => {
                let (c, analysis) = cache.controller(root, name)?;
                let kind = if is_pcie(c) {
                    DeviceKind::Nvme
                } else {
                    DeviceKind::NvmeFabrics
                };
                let mut r = bare_report(name, kind, blocks, layers);
                r.model = c.model.clone();
                r.serial = c.serial.clone();
                r.firmware = c.firmware.clone();
                r.transport = c.transport.clone();
                r.pci_address = c.pci_path.first().map(|f| f.address.clone());
                match analysis {
                    Some(a) => {
                        r.hops = a.hops.clone();
                        r.ceiling = a.ceiling.clone();
                        r.potential = a.potential;
                        r.findings = a.findings.clone();
                        r.note = a.note.clone();
                        upstream.extend(a.upstream_findings.iter().cloned());
                        paths.push(MemberPath {
                            name: name.clone(),
                            links: a.links.clone(),
                            potential: a.potential.map(|p| p.encoded()),
                        });
                    }
                    None => {
                        r.note = Some(format!(
                            "no PCIe link information for {name}: NVMe over fabrics ({}); the network or fabric sets the ceiling",
                            c.transport.as_deref().unwrap_or("unknown transport")
                        ));
                    }
                }
                r
            }
            Entry::Disk { name, kind } => {
                let mut r = bare_report(name, *kind, blocks, layers);
                r.note = Some(disk_note(*kind, name));
                r
            }
        };
        devices.push(report);
    }
    Ok(devices)
}

/// The NVMe devices' thermal counters (`--thermal`).
fn read_thermals(root: &SysRoot, devices: &mut [DeviceReport]) -> Result<()> {
    for d in devices
        .iter_mut()
        .filter(|d| matches!(d.kind, DeviceKind::Nvme | DeviceKind::NvmeFabrics))
    {
        match read_thermal(root, &d.name) {
            Ok(t) => d.thermal = Some(t),
            // Without the privilege no drive will answer: say so once.
            Err(e) if e.kind() == ErrorKind::Permission => return Err(e),
            Err(e) => d.thermal_error = Some(e.message().to_owned()),
        }
    }
    Ok(())
}

/// Degraded links above a switch: once per link, with every device below.
fn merge_upstream(upstream: Vec<(String, Finding)>) -> Vec<Finding> {
    let mut findings: Vec<Finding> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (link, f) in upstream {
        match seen.get(&link) {
            Some(&i) => findings[i].evidence.extend(f.evidence),
            None => {
                seen.insert(link, findings.len());
                findings.push(f);
            }
        }
    }
    findings
}

/// A mounted btrfs's members and the ceilings of its data profiles.
fn array_report(
    root: &SysRoot,
    cache: &mut Cache,
    mount: String,
    info: MountInfo,
) -> Result<ArrayReport> {
    let mut members = Vec::new();
    let mut arithmetic = Vec::new();
    for (shown, block) in &info.members {
        let targets: Vec<Entry> = match block {
            Some(b) => topology::block_targets(root, b)?
                .into_iter()
                .map(Entry::from)
                .collect(),
            None => Vec::new(),
        };
        let name = block.clone().unwrap_or_else(|| shown.clone());
        let path = cache.member_path(root, &name, &targets);
        members.push(ArrayMember {
            device: shown.clone(),
            block_device: block.clone(),
            rests_on: targets.iter().map(|t| t.name().to_owned()).collect(),
            ceiling: path.alone().map(Bandwidth::from_encoded),
        });
        arithmetic.push(path);
    }
    let ceilings = info
        .profiles
        .iter()
        .map(|p| array_ceiling(*p, &arithmetic))
        .collect();
    Ok(ArrayReport {
        mount,
        fsid: info.fsid,
        data_profiles: info.profiles,
        members,
        ceilings,
    })
}

/// `2 NVMe controllers, 1 other device without PCIe link information (vda),
/// no warnings`.
fn summary(devices: &[DeviceReport], findings: &[Finding]) -> String {
    if devices.is_empty() {
        return "no NVMe controllers found".to_owned();
    }
    let nvme = devices
        .iter()
        .filter(|d| matches!(d.kind, DeviceKind::Nvme | DeviceKind::NvmeFabrics))
        .count();
    let others: Vec<&str> = devices
        .iter()
        .filter(|d| !matches!(d.kind, DeviceKind::Nvme | DeviceKind::NvmeFabrics))
        .map(|d| d.name.as_str())
        .collect();
    let warnings = devices
        .iter()
        .flat_map(|d| d.findings.iter())
        .chain(findings.iter())
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let mut parts = Vec::new();
    if nvme > 0 || others.is_empty() {
        parts.push(plural(nvme, "NVMe controller"));
    }
    if !others.is_empty() {
        parts.push(format!(
            "{} without PCIe link information ({})",
            plural(others.len(), "other device"),
            others.join(", ")
        ));
    }
    parts.push(match warnings {
        0 => "no warnings".to_owned(),
        n => plural(n, "warning"),
    });
    parts.join(", ")
}

/// Looks at the links (see the module documentation).
pub fn run(opts: &LinksOptions) -> Result<LinksReport> {
    let root = &opts.sysroot;
    topology::check_root(root)?;
    let mut cache = Cache::default();
    let (scope, entries, mount) = gather(root, opts)?;
    let mut upstream = Vec::new();
    let mut paths = Vec::new();
    let mut devices = device_reports(root, &mut cache, &entries, &mut upstream, &mut paths)?;
    if opts.thermal {
        read_thermals(root, &mut devices)?;
    }
    // Findings about several devices: degraded links above a switch (once
    // per link), shared uplinks.
    let mut findings = merge_upstream(upstream);
    findings.extend(shared_uplinks(&paths));
    let array = match mount {
        Some((m, info)) => Some(array_report(root, &mut cache, m, info)?),
        None => None,
    };
    if let Some(a) = &array {
        findings.extend(shared_disks(&a.members, &a.data_profiles));
    }
    Ok(LinksReport {
        sysroot: root.prefix().display().to_string(),
        scope,
        summary: summary(&devices, &findings),
        devices,
        findings,
        array,
    })
}

/// Members that rest on the same drives (every loop device of a test array
/// on one disk, two partitions of one NVMe drive): they share its bandwidth
/// and fail together, so a redundant profile is not redundant there.
fn shared_disks(members: &[ArrayMember], profiles: &[Profile]) -> Vec<Finding> {
    let mut groups: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for m in members {
        if m.rests_on.is_empty() {
            continue;
        }
        let mut key = m.rests_on.clone();
        key.sort();
        key.dedup();
        let name = m.block_device.clone().unwrap_or_else(|| m.device.clone());
        groups.entry(key).or_default().push(name);
    }
    let redundant: Vec<&Profile> = profiles
        .iter()
        .filter(|p| p.tolerated_failures() > 0)
        .collect();
    groups
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(drives, names)| {
            let one = if drives.len() == 1 {
                format!("one drive ({})", drives[0])
            } else {
                format!("the same drives ({})", drives.join(", "))
            };
            let mut message = format!(
                "{} are {one}: they share its bandwidth and fail together",
                names.join(", ")
            );
            if let Some(p) = redundant.first() {
                message.push_str(&format!(
                    "; {}'s copies of the data are all on it, so losing it loses every copy",
                    p.name()
                ));
            }
            crate::hw::model::link_finding(
 crate::model::finding::Code::LinkSharedDisk,
 names,
 message,
 Some(
                    "give each member its own drive for redundancy or bandwidth (a test array on loop devices is fine as it is)"
                        .to_owned(),
                ),
).with_severity(crate::model::finding::rules::shared_disk(
                    !redundant.is_empty(),
                ))
        })
        .collect()
}

fn plural(n: usize, what: &str) -> String {
    crate::report::text::count(n as u64, what, &format!("{what}s"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(block: &str, on: &[&str]) -> ArrayMember {
        ArrayMember {
            device: format!("/dev/{block}"),
            block_device: Some(block.to_owned()),
            rests_on: on.iter().map(|s| (*s).to_owned()).collect(),
            ceiling: None,
        }
    }

    #[test]
    fn members_on_one_drive_are_named_and_a_warning_when_copies_are_lost() {
        let members = [
            member("nvme0n1p1", &["nvme0"]),
            member("nvme0n1p2", &["nvme0"]),
            member("nvme1n1", &["nvme1"]),
            member("loop7", &[]),
        ];
        let f = shared_disks(&members, &[Profile::Raid1]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            crate::hw::model::devices(&f[0]).collect::<Vec<_>>(),
            ["nvme0n1p1", "nvme0n1p2"]
        );
        assert!(
            f[0].title
                .starts_with("nvme0n1p1, nvme0n1p2 are one drive (nvme0)")
                && f[0]
                    .title
                    .contains("raid1's copies of the data are all on it"),
            "{}",
            f[0].title
        );
        // Striping over one drive loses nothing more: worth knowing only.
        let f = shared_disks(&members, &[Profile::Raid0]);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(!f[0].title.contains("copies"), "{}", f[0].title);
        // Every member on its own drive, or unknown: nothing said.
        assert!(shared_disks(&members[2..], &[Profile::Raid1]).is_empty());
    }
}
