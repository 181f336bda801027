//! What the hardware can carry, shared by the jobs that need it (`links`,
//! `device add`, `bench`, `read-test`, `doctor`): each NVMe drive's PCIe path
//! up to the root port and its ceiling ([`analysis`], pure), the types
//! ([`model`]), the array's ceiling for a set of block devices, and the
//! SMART thermal counters. Read through a [`SysRoot`], so captured trees
//! read like the running system.

pub mod analysis;
pub mod model;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::model::profile::Profile;
use crate::parse::nvme_smart::{SmartThermal, decode_smart_log};
use crate::sys::block::topology::{self, BlockTarget, DeviceRef, NvmeController};
use crate::sys::fs::root::{ATTR_CAP, SysRoot};
use crate::sys::kernel::nvme;

use analysis::{DeviceAnalysis, MemberPath, analyze_device, array_ceiling};
use model::{ArrayCeiling, DeviceKind};

/// Directory of a captured tree that holds SMART log pages, one 512-byte
/// file per controller (`nvme smart-log /dev/nvme0 -o binary`).
pub const CAPTURED_SMART_DIR: &str = "nvme-smart-log";

/// A device to report, and the block devices that led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Controller(String),
    Disk { name: String, kind: DeviceKind },
}

impl Entry {
    pub(crate) fn name(&self) -> &str {
        match self {
            Entry::Controller(n) | Entry::Disk { name: n, .. } => n,
        }
    }
}

impl From<BlockTarget> for Entry {
    fn from(t: BlockTarget) -> Self {
        match t {
            BlockTarget::Controller(n) => Entry::Controller(n),
            BlockTarget::Disk { name, kind } => Entry::Disk { name, kind },
        }
    }
}

/// Controllers read and analysed once.
#[derive(Default)]
pub(crate) struct Cache {
    controllers: BTreeMap<String, (NvmeController, Option<DeviceAnalysis>)>,
}

impl Cache {
    pub(crate) fn controller(
        &mut self,
        root: &SysRoot,
        name: &str,
    ) -> Result<&(NvmeController, Option<DeviceAnalysis>)> {
        if !self.controllers.contains_key(name) {
            let c = topology::read_controller(root, name)?;
            let analysis = is_pcie(&c).then(|| analyze_device(name, &c.pci_path));
            self.controllers.insert(name.to_owned(), (c, analysis));
        }
        Ok(&self.controllers[name])
    }

    /// The arithmetic's view of a block device (or controller).
    pub(crate) fn member_path(
        &mut self,
        root: &SysRoot,
        name: &str,
        targets: &[Entry],
    ) -> MemberPath {
        let mut m = MemberPath {
            name: name.to_owned(),
            links: None,
            potential: None,
        };
        if let [Entry::Controller(c)] = targets
            && let Ok((_, Some(a))) = self.controller(root, c)
        {
            m.links = a.links.clone();
            m.potential = a.potential.map(|p| p.encoded());
        }
        m
    }
}

pub(crate) fn is_pcie(c: &NvmeController) -> bool {
    c.transport.as_deref().is_none_or(|t| t == "pcie")
}

/// The SMART thermal counters of a controller: through the admin ioctl on
/// the running system, from `nvme-smart-log/<name>` in a captured tree.
pub fn read_thermal(root: &SysRoot, controller: &str) -> Result<SmartThermal> {
    let page = if root.is_host() {
        nvme::read_smart_log(&Path::new("/dev").join(controller))?.to_vec()
    } else {
        let p = root.prefix().join(CAPTURED_SMART_DIR).join(controller);
        root.read_bytes(&p, ATTR_CAP)
            .map_err(|e| Error::from_io(&e, "cannot read the captured SMART log", &p))?
    };
    decode_smart_log(&page).map_err(|e| {
        Error::new(
            e.kind(),
            format!("SMART log of {controller}: {}", e.message()),
        )
    })
}

/// The read ceiling of a btrfs array made of `devices` (block devices as
/// paths or names: `/dev/nvme0n1p2`, `nvme1n1`) with data `profile`,
/// from their PCIe links as sysfs under `root` shows them. For `device
/// add`: call it with the current members and with the new device added
/// to see the ceiling before and after.
///
/// Devices without PCIe link information (loop, virtio, SATA, NVMe over
/// fabrics) make the figures `None` and are named in `without_link_info`.
pub fn array_ceiling_for_block_devices(
    root: &SysRoot,
    devices: &[PathBuf],
    profile: Profile,
) -> Result<ArrayCeiling> {
    let mut cache = Cache::default();
    let mut members = Vec::new();
    for d in devices {
        let arg = d.to_string_lossy();
        let (name, targets) = match topology::device_ref(root, &arg)? {
            DeviceRef::Block(b) => {
                let t: Vec<Entry> = topology::block_targets(root, &b)?
                    .into_iter()
                    .map(Entry::from)
                    .collect();
                (b, t)
            }
            DeviceRef::Controller(c) => (c.clone(), vec![Entry::Controller(c)]),
        };
        members.push(cache.member_path(root, &name, &targets));
    }
    Ok(array_ceiling(profile, &members))
}
