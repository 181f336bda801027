//! The report of `links`: serde structs that `--json` prints and the text
//! renderer reads (shape documented in docs/json.md).

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;
use crate::parse::nvme_smart::SmartThermal;
use crate::parse::pcie::{PRACTICAL_HIGH, PRACTICAL_LOW};
pub use crate::sys::block::topology::{DeviceKind, LoopLayer};

/// A throughput ceiling: what the links carry after encoding, and the
/// practical band after protocol overhead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bandwidth {
    /// After line encoding, bytes per second.
    pub encoded_bytes_per_sec: u64,
    /// Practical estimate, low end (0.85 of encoded).
    pub practical_low_bytes_per_sec: u64,
    /// Practical estimate, high end (0.90 of encoded).
    pub practical_high_bytes_per_sec: u64,
}

impl Bandwidth {
    /// From an encoded rate in bytes per second.
    pub(crate) fn from_encoded(bytes_per_sec: f64) -> Self {
        let round = |v: f64| {
            if v.is_finite() && v > 0.0 {
                v.round() as u64
            } else {
                0
            }
        };
        Self {
            encoded_bytes_per_sec: round(bytes_per_sec),
            practical_low_bytes_per_sec: round(bytes_per_sec * PRACTICAL_LOW),
            practical_high_bytes_per_sec: round(bytes_per_sec * PRACTICAL_HIGH),
        }
    }

    /// The encoded rate as a float.
    pub fn encoded(&self) -> f64 {
        self.encoded_bytes_per_sec as f64
    }
}

/// The role of a PCI function on the way up, inferred from its position:
/// drive, then pairs of switch ports, then the root port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HopRole {
    /// The NVMe controller's own function.
    Endpoint,
    /// A switch port facing the drive.
    SwitchDownstream,
    /// A switch port facing the root port.
    SwitchUpstream,
    /// The root port, on the CPU or the chipset.
    RootPort,
    /// A bridge whose role the layout does not tell.
    Bridge,
}

impl HopRole {
    /// Words for text output.
    pub fn describe(self, chipset: bool) -> &'static str {
        match (self, chipset) {
            (HopRole::Endpoint, _) => "drive",
            (HopRole::SwitchDownstream, false) => "switch downstream port",
            (HopRole::SwitchDownstream, true) => "chipset downstream port",
            (HopRole::SwitchUpstream, false) => "switch upstream port",
            (HopRole::SwitchUpstream, true) => "chipset upstream port",
            (HopRole::RootPort, false) => "root port",
            (HopRole::RootPort, true) => "chipset root port",
            (HopRole::Bridge, _) => "bridge",
        }
    }
}

/// One PCI function between a drive and its root port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Hop {
    /// `0000:00:01.2`.
    pub address: String,
    /// Its role.
    pub role: HopRole,
    /// Part of the chipset (an AMD chipset switch, an Intel PCH root port).
    pub chipset: bool,
    /// PCI vendor id (`0x1022`).
    pub vendor_id: Option<String>,
    /// PCI device id.
    pub device_id: Option<String>,
    /// Current link generation (1-7).
    pub generation: Option<u8>,
    /// Current speed, GT/s.
    pub speed_gts: Option<f64>,
    /// Current width, lanes.
    pub width: Option<u8>,
    /// Highest generation the function supports.
    pub max_generation: Option<u8>,
    /// Highest speed, GT/s.
    pub max_speed_gts: Option<f64>,
    /// Widest width, lanes.
    pub max_width: Option<u8>,
}

/// The ceiling of one device, and the link that sets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ceiling {
    /// The bandwidth.
    #[serde(flatten)]
    pub bandwidth: Bandwidth,
    /// Generation of the limiting link.
    pub generation: u8,
    /// Width of the limiting link.
    pub width: u8,
    /// Address of the port above the limiting link (the device's own
    /// address when its own link has no port above it).
    pub limited_by: String,
    /// The limiting link, in words.
    pub limited_by_link: String,
}

use crate::model::finding::{Code, Evidence, short};
pub use crate::model::finding::{Finding, Severity};

/// The `links --json` family of short names: a finding's `kind`.
#[derive(Debug)]
pub struct LinkKinds;

impl short::Family for LinkKinds {
    const COMMAND: &'static str = "links";
    const SCHEMA_NAME: &'static str = "FindingKind";
    const ABOUT: &'static str = "What a finding is about.";
}

/// The evidence name of a device a link finding concerns.
pub(crate) const DEVICE: &str = "device";

/// A link finding as `links --json` writes it: a catalog finding whose
/// title is the message, `device` evidence the devices and command the
/// hint.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "Finding")]
#[schemars(description = "Something the links show that the user should know.")]
struct LinkFinding {
    /// The findings catalog's code (`link-degraded`; docs/findings.md).
    code: Code,
    /// What kind: the code's short name.
    kind: short::Short<LinkKinds>,
    /// How bad.
    severity: Severity,
    /// The devices it concerns (controller names).
    devices: Vec<String>,
    /// One or two sentences.
    message: String,
    /// What to do, if anything.
    hint: Option<String>,
}

/// Serde for the findings of the links report (`#[serde(with)]`).
pub(crate) mod link_findings {
    use super::*;

    pub(crate) fn serialize<S: serde::Serializer>(v: &[Finding], s: S) -> Result<S::Ok, S::Error> {
        let view: Vec<LinkFinding> = v
            .iter()
            .map(|f| LinkFinding {
                code: f.code,
                kind: short::Short::new(f.code),
                severity: f.severity,
                devices: devices(f).map(str::to_owned).collect(),
                message: f.title.clone(),
                hint: f.command.clone(),
            })
            .collect();
        view.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Finding>, D::Error> {
        let view = Vec::<LinkFinding>::deserialize(d)?;
        Ok(view
            .into_iter()
            .map(|l| Finding {
                code: l.kind.0,
                severity: l.severity,
                title: l.message,
                evidence: l
                    .devices
                    .into_iter()
                    .map(|value| Evidence {
                        name: DEVICE.to_owned(),
                        value,
                    })
                    .collect(),
                why: why(l.kind.0).to_owned(),
                command: l.hint,
            })
            .collect())
    }
}

/// A link finding of the catalog: `code` at its default severity (the
/// caller sets the one its rule decides), `message` its title, the devices
/// its `device` evidence and the hint its command (`links --json` writes
/// them back as message, devices and hint).
pub(crate) fn link_finding(
    code: Code,
    devices: Vec<String>,
    message: String,
    hint: Option<String>,
) -> Finding {
    let mut f = Finding::new(code, message, why(code));
    for d in devices {
        f = f.with_evidence(DEVICE, d);
    }
    f.command = hint;
    f
}

/// Why a link finding matters.
pub(crate) fn why(code: Code) -> &'static str {
    match code {
        Code::LinkSharedDisk => {
            "members on one drive share its bandwidth and fail together: redundancy across them is not redundancy"
        }
        _ => {
            "a PCIe link below what the drive can do, or a drive that throttles, caps the array's throughput"
        }
    }
}

/// The devices a link finding concerns.
pub fn devices(f: &Finding) -> impl Iterator<Item = &str> {
    f.evidence
        .iter()
        .filter(|e| e.name == DEVICE)
        .map(|e| e.value.as_str())
}

/// One listed device: an NVMe controller, or a disk without PCIe link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceReport {
    /// Controller name (`nvme0`), or the disk's name (`vda`).
    pub name: String,
    /// What it is.
    pub kind: DeviceKind,
    /// The block devices (given, or members of the mount) that rest on it.
    pub block_devices: Vec<String>,
    /// Model number (NVMe).
    pub model: Option<String>,
    /// Serial number (NVMe).
    pub serial: Option<String>,
    /// Firmware revision (NVMe).
    pub firmware: Option<String>,
    /// NVMe transport (`pcie`, `tcp`, ...).
    pub transport: Option<String>,
    /// The controller's PCI address.
    pub pci_address: Option<String>,
    /// From the drive's own function up to the root port.
    pub hops: Vec<Hop>,
    /// What its links carry; `null` without link information.
    pub ceiling: Option<Ceiling>,
    /// What the drive's own link could carry at its maximum speed and
    /// width (the socket it was built for).
    pub potential: Option<Bandwidth>,
    /// Findings about this device alone.
    #[serde(with = "link_findings")]
    #[schemars(with = "Vec<LinkFinding>")]
    pub findings: Vec<Finding>,
    /// Why there is no link information, when there is none.
    pub note: Option<String>,
    /// SMART thermal counters (`--thermal`).
    pub thermal: Option<SmartThermal>,
    /// Why the SMART log could not be read (`--thermal`).
    pub thermal_error: Option<String>,
    /// Loop devices between the block devices and this device: each one
    /// followed to the filesystem holding its backing file.
    pub through_loops: Vec<LoopLayer>,
}

/// The ceiling of an array for one data profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArrayCeiling {
    /// The data profile.
    pub profile: Profile,
    /// Number of member devices.
    pub members: usize,
    /// One reader, one large sequential read: the most it can get.
    pub one_reader: Option<Bandwidth>,
    /// One reader at worst (on single and RAID1 it may land on the
    /// slowest member).
    pub one_reader_low: Option<Bandwidth>,
    /// Many readers at once, the load spread evenly as btrfs spreads it.
    pub many_readers: Option<Bandwidth>,
    /// What the members could give together with the load balanced to
    /// their speeds (each at its own ceiling, shared uplinks respected).
    pub balanced: Option<Bandwidth>,
    /// `one_reader` if every drive had the link it was built for.
    pub potential: Option<Bandwidth>,
    /// Members (and shared uplinks) that hold the array below its fastest
    /// member's pace.
    pub held_back_by: Vec<String>,
    /// Members without PCIe link information (then no figures).
    pub without_link_info: Vec<String>,
    /// One or two sentences.
    pub summary: String,
}

/// One member of the array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArrayMember {
    /// As btrfs knows it (`/dev/nvme0n1p2`).
    pub device: String,
    /// Its block device (`nvme0n1p2`), or `null` for a missing device.
    pub block_device: Option<String>,
    /// The listed devices it rests on (`nvme0`).
    pub rests_on: Vec<String>,
    /// Its ceiling alone.
    pub ceiling: Option<Bandwidth>,
}

/// The array behind MOUNT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ArrayReport {
    /// The mount as given.
    pub mount: String,
    /// The filesystem UUID.
    pub fsid: Option<String>,
    /// Data profiles in use (more than one during a conversion).
    pub data_profiles: Vec<Profile>,
    /// The members.
    pub members: Vec<ArrayMember>,
    /// One ceiling per data profile.
    pub ceilings: Vec<ArrayCeiling>,
}

/// What was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Every NVMe controller.
    All,
    /// The members of a mounted btrfs.
    Mount,
    /// The named devices.
    Devices,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinksReport {
    /// Where sysfs was read (`/` or the `--sysroot` directory).
    pub sysroot: String,
    /// What was asked for.
    pub scope: Scope,
    /// The devices, in order.
    pub devices: Vec<DeviceReport>,
    /// Findings about several devices together (shared uplinks, degraded
    /// links above a switch).
    #[serde(with = "link_findings")]
    #[schemars(with = "Vec<LinkFinding>")]
    pub findings: Vec<Finding>,
    /// The array, for a mount.
    pub array: Option<ArrayReport>,
    /// One line.
    pub summary: String,
}

impl LinksReport {
    /// Every finding, the devices' and the shared ones.
    pub(crate) fn all_findings(&self) -> impl Iterator<Item = &Finding> {
        self.devices
            .iter()
            .flat_map(|d| d.findings.iter())
            .chain(self.findings.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link finding writes as `links --json` always did (kind, severity,
    /// devices, message, hint), with the catalog's `code` added.
    #[test]
    fn link_findings_keep_their_document_shape() {
        #[derive(Serialize, Deserialize)]
        struct Holder {
            #[serde(with = "link_findings")]
            findings: Vec<Finding>,
        }
        let f = link_finding(
            Code::LinkCappedByPort,
            vec!["nvme0".into(), "nvme1".into()],
            "the port is Gen3".into(),
            Some("move it".into()),
        );
        let json = serde_json::to_string(&Holder {
            findings: vec![f.clone()],
        })
        .unwrap();
        assert_eq!(
            json,
            r#"{"findings":[{"code":"link-capped-by-port","kind":"capped-by-port","severity":"warning","devices":["nvme0","nvme1"],"message":"the port is Gen3","hint":"move it"}]}"#
        );
        let back: Holder = serde_json::from_str(&json).unwrap();
        assert_eq!(back.findings, [f]);
    }
}
