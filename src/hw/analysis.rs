//! Pure logic: from the PCI functions between a drive and its root port to
//! the drive's ceiling and findings, and from the members' link paths and a
//! data profile to the array's ceiling. No I/O; everything here is tested
//! on hand-built topologies.
//!
//! Terms: a *hop* is a PCI function on the way up (drive, switch ports,
//! root port). A *link* is a physical PCIe link between two hops: the
//! drive and the port above it, or a switch's upstream port and the port
//! above that. The two ports inside a switch are not linked by PCIe. A
//! link runs at what both ends support at most, and the narrowest link
//! decides what the drive can move.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{ArrayCeiling, Bandwidth, Ceiling, Finding, Hop, HopRole};
use crate::model::finding::{Code, rules};
use crate::model::profile::Profile;
use crate::parse::pcie::{Generation, format_gbps, link_bytes_per_sec, parse_pci_address};
use crate::sys::block::topology::{LinkAttrs, PciFunction};

use super::model::link_finding;

const AMD: u32 = 0x1022;
const INTEL: u32 = 0x8086;
/// Relative tolerance when comparing rates.
const EPS: f64 = 1e-9;

/// Roles by position: the drive first, the root port last, switch ports
/// (downstream, upstream) in pairs between. A layout that does not fit
/// the pattern marks the middle functions as plain bridges.
pub fn roles(path: &[PciFunction]) -> Vec<HopRole> {
    let n = path.len();
    let consistent = n.is_multiple_of(2);
    (0..n)
        .map(|i| {
            if i == 0 {
                HopRole::Endpoint
            } else if i == n - 1 {
                HopRole::RootPort
            } else if !consistent {
                HopRole::Bridge
            } else if i % 2 == 1 {
                HopRole::SwitchDownstream
            } else {
                HopRole::SwitchUpstream
            }
        })
        .collect()
}

/// Which hops belong to the chipset: an AMD switch (AMD makes no
/// stand-alone PCIe switches; its chipsets appear as one), or an Intel
/// root port at device 1Ah-1Dh of bus 0, where Intel places the PCH's
/// root ports (the CPU's are at 01h, 06h and 07h).
pub(crate) fn chipset_hops(path: &[PciFunction], roles: &[HopRole]) -> Vec<bool> {
    let mut chipset = vec![false; path.len()];
    for i in 0..path.len() {
        if roles[i] == HopRole::SwitchUpstream && path[i].vendor == Some(AMD) {
            chipset[i] = true;
            chipset[i - 1] = true;
        }
        if roles[i] == HopRole::RootPort
            && path[i].vendor == Some(INTEL)
            && parse_pci_address(&path[i].address)
                .is_some_and(|a| a.bus == 0 && (0x1a..=0x1d).contains(&a.device))
        {
            chipset[i] = true;
        }
    }
    chipset
}

/// The hops as the report shows them.
pub fn hops(path: &[PciFunction]) -> Vec<Hop> {
    let roles = roles(path);
    let chipset = chipset_hops(path, &roles);
    path.iter()
        .enumerate()
        .map(|(i, f)| {
            let l = f.link.unwrap_or_default();
            Hop {
                address: f.address.clone(),
                role: roles[i],
                chipset: chipset[i],
                vendor_id: f.vendor.map(|v| format!("{v:#06x}")),
                device_id: f.device.map(|v| format!("{v:#06x}")),
                generation: l.speed.map(Generation::number),
                speed_gts: l.speed.map(Generation::gts),
                width: l.width,
                max_generation: l.max_speed.map(Generation::number),
                max_speed_gts: l.max_speed.map(Generation::gts),
                max_width: l.max_width,
            }
        })
        .collect()
}

/// One physical link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkView {
    /// Index of the lower end (drive or switch upstream port) in the path.
    pub lower: usize,
    /// Index of the port above, if there is one.
    pub(crate) upper: Option<usize>,
    /// Current generation (from the lower end; the upper's if unknown).
    pub generation: Option<Generation>,
    /// Current width.
    pub width: Option<u8>,
    /// What the lower end supports.
    pub(crate) lower_max: (Option<Generation>, Option<u8>),
    /// What the upper end supports.
    pub(crate) upper_max: (Option<Generation>, Option<u8>),
}

impl LinkView {
    /// What the link carries after encoding.
    pub fn bytes_per_sec(&self) -> Option<f64> {
        Some(link_bytes_per_sec(self.generation?, self.width?))
    }

    /// What it would carry at the best both ends support.
    pub fn expected(&self) -> (Option<Generation>, Option<u8>) {
        let min = |a: Option<Generation>, b: Option<Generation>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        };
        let minw = |a: Option<u8>, b: Option<u8>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        };
        (
            min(self.lower_max.0, self.upper_max.0),
            minw(self.lower_max.1, self.upper_max.1),
        )
    }
}

/// The links along a path, from the drive's own upwards.
pub fn links(path: &[PciFunction]) -> Vec<LinkView> {
    let roles = roles(path);
    let attrs = |i: usize| path[i].link.unwrap_or_default();
    let mut out = Vec::new();
    for i in 0..path.len() {
        let lower_end = matches!(
            roles[i],
            HopRole::Endpoint | HopRole::SwitchUpstream | HopRole::Bridge
        );
        if !lower_end || path[i].link.is_none() {
            continue;
        }
        let upper = (i + 1 < path.len()).then_some(i + 1);
        let low: LinkAttrs = attrs(i);
        let up: LinkAttrs = upper.map(attrs).unwrap_or_default();
        out.push(LinkView {
            lower: i,
            upper,
            generation: low.speed.or(up.speed),
            width: low.width.or(up.width),
            lower_max: (low.max_speed, low.max_width),
            upper_max: (up.max_speed, up.max_width),
        });
    }
    out
}

/// `Gen4 x4`, with `?` for what is unknown.
pub(crate) fn gen_width(generation: Option<Generation>, width: Option<u8>) -> String {
    let g = generation.map_or("Gen?".to_owned(), |g| g.to_string());
    let w = width.map_or("x?".to_owned(), |w| format!("x{w}"));
    format!("{g} {w}")
}

/// A link's capacity and identity, as the array arithmetic needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LinkCap {
    /// Unique per physical link (the lower end's PCI address; a pseudo id
    /// for a chipset's DMI link).
    pub id: String,
    /// In words, with its generation and width.
    pub label: String,
    /// What it carries; `None` when unknown (an Intel chipset's DMI).
    pub bytes_per_sec: Option<f64>,
    /// Set when the upper end allows less than the lower end could run
    /// (a x16 switch card in a x8 slot).
    pub(crate) narrower_port: Option<String>,
}

/// A member of an array (or a listed device) for the arithmetic: its links
/// from its own upwards, and what its own link could carry at its best.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemberPath {
    /// Block device (array members) or controller (listed devices) name.
    pub name: String,
    /// `None` when there is no PCIe link information.
    pub links: Option<Vec<LinkCap>>,
    /// The drive's own maximum link, encoded bytes per second.
    pub potential: Option<f64>,
}

impl MemberPath {
    /// The member alone: its narrowest known link.
    pub fn alone(&self) -> Option<f64> {
        self.links
            .as_ref()?
            .iter()
            .filter_map(|l| l.bytes_per_sec)
            .min_by(f64::total_cmp)
    }
}

/// Everything about one PCIe device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceAnalysis {
    /// The hops for the report.
    pub hops: Vec<Hop>,
    /// The ceiling, when every link's state is known.
    pub ceiling: Option<Ceiling>,
    /// The drive's own maximum link.
    pub potential: Option<Bandwidth>,
    /// Findings about this device.
    pub findings: Vec<Finding>,
    /// Degraded links above the drive's own, keyed by link id, for the
    /// caller to report once for all devices below them.
    pub(crate) upstream_findings: Vec<(String, Finding)>,
    /// The links for the array arithmetic; `None` without link state.
    pub links: Option<Vec<LinkCap>>,
    /// Why there are no figures.
    pub note: Option<String>,
}

fn describe_hop(hops: &[Hop], i: usize) -> String {
    format!(
        "{} {}",
        hops[i].role.describe(hops[i].chipset),
        hops[i].address
    )
}

fn link_label(hops: &[Hop], l: &LinkView) -> String {
    match l.upper {
        Some(u) if l.lower == 0 => {
            format!("the link between the drive and {}", describe_hop(hops, u))
        }
        Some(u) => format!(
            "the link between {} and {}",
            describe_hop(hops, u),
            describe_hop(hops, l.lower)
        ),
        None => "the drive's own link".to_owned(),
    }
}

/// The differing parts of two link capabilities: `x2` vs `x4`, `Gen4` vs
/// `Gen5`, or both.
fn narrower_parts(
    port: (Option<Generation>, Option<u8>),
    other: (Option<Generation>, Option<u8>),
) -> Option<(String, String, bool, bool)> {
    let slower = matches!((port.0, other.0), (Some(p), Some(o)) if p < o);
    let narrower = matches!((port.1, other.1), (Some(p), Some(o)) if p < o);
    let fmt = |c: (Option<Generation>, Option<u8>)| match (slower, narrower) {
        (true, true) => gen_width(c.0, c.1),
        (true, false) => c.0.map_or("Gen?".into(), |g| g.to_string()),
        (false, true) => c.1.map_or("x?".into(), |w| format!("x{w}")),
        (false, false) => String::new(),
    };
    (slower || narrower).then(|| (fmt(port), fmt(other), slower, narrower))
}

const LANES_HINT: &str = "the other lanes are probably assigned to another controller (USB4, a second M.2 socket, a PCIe slot); check the BIOS lane settings, or move the drive to a socket that has all its lanes";
const SPEED_HINT: &str = "the socket is slower than the drive: move it to a socket of its generation (usually one wired to the CPU) if the board has one, and check that the BIOS does not hold this socket at a lower generation";
const DEGRADED_WIDTH_HINT: &str = "reseat the drive (dirt or a bent contact trains fewer lanes), check the BIOS lane-sharing settings (an M.2 socket may share lanes with a slot or SATA ports) and any riser or adapter in between";
const DEGRADED_SPEED_HINT: &str = "a lower speed points to signal trouble (riser, adapter, contacts) or a BIOS setting that limits the generation; some platforms also slow an idle link to save power, so check again under load";

fn join_hints(a: Option<&str>, b: Option<&str>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (Some(a), None) | (None, Some(a)) => Some(a.to_owned()),
        (None, None) => None,
    }
}

fn degraded_finding(name: &str, hops: &[Hop], l: &LinkView) -> Option<Finding> {
    let (eg, ew) = l.expected();
    let slow = matches!((l.generation, eg), (Some(c), Some(e)) if c < e);
    let narrow = matches!((l.width, ew), (Some(c), Some(e)) if c < e);
    if !slow && !narrow {
        return None;
    }
    let now = l.bytes_per_sec();
    let could = match (eg, ew) {
        (Some(g), Some(w)) => Some(link_bytes_per_sec(g, w)),
        _ => None,
    };
    let figures = match (now, could) {
        (Some(n), Some(c)) => format!(": {} instead of {}", format_gbps(n), format_gbps(c)),
        _ => String::new(),
    };
    let ends = match l.upper {
        Some(u) if l.lower == 0 => format!("the drive and {}", describe_hop(hops, u)),
        Some(u) => format!(
            "{} and {}",
            describe_hop(hops, l.lower),
            describe_hop(hops, u)
        ),
        None => "the drive".to_owned(),
    };
    let what = if l.lower == 0 {
        "the drive's link".to_owned()
    } else {
        link_label(hops, l)
    };
    Some(link_finding(
        Code::LinkDegraded,
        vec![name.to_owned()],
        format!(
            "{what} trained at {} though {ends} both support {}{figures}",
            gen_width(l.generation, l.width),
            gen_width(eg, ew)
        ),
        join_hints(
            narrow.then_some(DEGRADED_WIDTH_HINT),
            slow.then_some(DEGRADED_SPEED_HINT),
        ),
    ))
}

/// The drive's own link capped by the port above it.
fn capped_by_port(
    name: &str,
    hops: &[Hop],
    own: &LinkView,
    potential: Option<Bandwidth>,
) -> Option<Finding> {
    let u = own.upper?;
    let (port, drive, slower, narrower) = narrower_parts(own.upper_max, own.lower_max)?;
    let figures = match (own.bytes_per_sec(), potential) {
        (Some(now), Some(p)) if now + EPS < p.encoded() => format!(
            ": the link runs {}, {} instead of {}",
            gen_width(own.generation, own.width),
            format_gbps(now),
            format_gbps(p.encoded())
        ),
        _ => String::new(),
    };
    Some(link_finding(
        Code::LinkCappedByPort,
        vec![name.to_owned()],
        format!(
            "{} is {port}, the drive {drive}{figures}",
            describe_hop(hops, u)
        ),
        join_hints(narrower.then_some(LANES_HINT), slower.then_some(SPEED_HINT)),
    ))
}

/// The narrowest link on the path (every link's speed known), and the
/// finding when one above the drive is narrower than the drive's own.
fn ceiling(
    name: &str,
    path: &[PciFunction],
    hops: &[Hop],
    links: &[LinkView],
    own: &LinkView,
) -> (Ceiling, Option<Finding>) {
    let capacities: Vec<Option<f64>> = links.iter().map(LinkView::bytes_per_sec).collect();
    let (limit_index, limit) = capacities
        .iter()
        .map(|c| c.unwrap_or(f64::INFINITY))
        .enumerate()
        .fold((0, f64::INFINITY), |best, (i, c)| {
            if c + EPS < best.1 { (i, c) } else { best }
        });
    let l = &links[limit_index];
    let ceiling = Ceiling {
        bandwidth: Bandwidth::from_encoded(limit),
        generation: l.generation.map_or(0, Generation::number),
        width: l.width.unwrap_or(0),
        limited_by: path[l.upper.unwrap_or(l.lower)].address.clone(),
        limited_by_link: link_label(hops, l),
    };
    let own_bytes = capacities[0].unwrap_or(0.0);
    if limit_index == 0 || limit + EPS >= own_bytes {
        return (ceiling, None);
    }
    let hint = match narrower_parts(l.upper_max, l.lower_max) {
        Some((port, other, _, _)) => format!(
            "{} allows {port} where {} could run {other}: the slot gives the switch fewer lanes or a lower speed than it has",
            l.upper.map_or("the port above".to_owned(), |u| describe_hop(hops, u)),
            describe_hop(hops, l.lower)
        ),
        None => "the switch or chipset above the drive is wired with fewer or slower lanes than the drive; a socket on the CPU gives the drive its whole link".to_owned(),
    };
    let capped = link_finding(
        Code::LinkCappedUpstream,
        vec![name.to_owned()],
        format!(
            "{} ({}, {}) is narrower than the drive's own link ({}, {}): it limits the drive to {}",
            link_label(hops, l),
            gen_width(l.generation, l.width),
            format_gbps(limit),
            gen_width(own.generation, own.width),
            format_gbps(own_bytes),
            format_gbps(limit)
        ),
        Some(hint),
    );
    (ceiling, Some(capped))
}

/// The chipset the drive is behind (an AMD switch or an Intel PCH root
/// port), whose uplink everything on it shares.
fn behind_chipset(name: &str, hops: &[Hop], links: &[LinkView]) -> Option<Finding> {
    if let Some(up) = hops
        .iter()
        .position(|h| h.chipset && h.role == HopRole::SwitchUpstream)
    {
        let uplink = links.iter().find(|l| l.lower == up);
        let figures = uplink
            .and_then(|l| {
                Some(format!(
                    " ({}, {})",
                    gen_width(l.generation, l.width),
                    format_gbps(l.bytes_per_sec()?)
                ))
            })
            .unwrap_or_default();
        let via = uplink
            .and_then(|l| l.upper)
            .map(|u| format!(" through {}", describe_hop(hops, u)))
            .unwrap_or_default();
        return Some(link_finding(
            Code::LinkBehindChipset,
            vec![name.to_owned()],
            format!(
                "behind the chipset (AMD switch {}): its uplink{figures}{via} is shared with everything else on the chipset: USB, SATA, network and other M.2 sockets",
                hops[up].address
            ),
            Some(CHIPSET_HINT.to_owned()),
        ));
    }
    let rp = hops
        .iter()
        .position(|h| h.chipset && h.role == HopRole::RootPort)?;
    Some(link_finding(
        Code::LinkBehindChipset,
        vec![name.to_owned()],
        format!(
            "on a chipset (Intel PCH) root port {}: everything on the chipset shares its DMI link to the CPU: USB, SATA, network and other M.2 sockets",
            hops[rp].address
        ),
        Some(CHIPSET_HINT.to_owned()),
    ))
}

/// The links of the path for the array arithmetic (the chipset's DMI link
/// too, its speed unknown).
fn link_caps(path: &[PciFunction], hops: &[Hop], links: &[LinkView]) -> Vec<LinkCap> {
    let mut caps: Vec<LinkCap> = links
        .iter()
        .map(|l| LinkCap {
            id: path[l.lower].address.clone(),
            label: format!(
                "{} ({})",
                link_label(hops, l),
                gen_width(l.generation, l.width)
            ),
            bytes_per_sec: l.bytes_per_sec(),
            narrower_port: narrower_parts(l.upper_max, l.lower_max).and_then(|(p, o, _, _)| {
                Some(format!(
                    "{} could run {o}, {} allows {p}",
                    describe_hop(hops, l.lower),
                    describe_hop(hops, l.upper?)
                ))
            }),
        })
        .collect();
    if let Some(rp) = hops
        .iter()
        .position(|h| h.chipset && h.role == HopRole::RootPort)
    {
        let domain = parse_pci_address(&hops[rp].address).map_or(0, |a| a.domain);
        caps.push(LinkCap {
            id: format!("pch-dmi:{domain:04x}"),
            label: "the chipset's DMI link to the CPU".to_owned(),
            bytes_per_sec: None,
            narrower_port: None,
        });
    }
    caps
}

/// Analyses one PCIe device from its path (its own function first).
pub(crate) fn analyze_device(name: &str, path: &[PciFunction]) -> DeviceAnalysis {
    let hops = hops(path);
    let links = links(path);
    let mut out = DeviceAnalysis {
        hops: hops.clone(),
        ceiling: None,
        potential: None,
        findings: Vec::new(),
        upstream_findings: Vec::new(),
        links: None,
        note: None,
    };
    if path.is_empty() {
        out.note = Some(format!(
            "no PCIe link information for {name}: the controller is not on PCI"
        ));
        return out;
    }
    let Some(own_attrs) = path[0].link else {
        out.note = Some(format!(
            "no PCIe link information for {name}: {} is not a PCIe device (conventional PCI, as an emulated NVMe in some virtual machines)",
            path[0].address
        ));
        return out;
    };
    if let (Some(g), Some(w)) = (own_attrs.max_speed, own_attrs.max_width) {
        out.potential = Some(Bandwidth::from_encoded(link_bytes_per_sec(g, w)));
    }
    let Some(own) = links.first().filter(|l| l.lower == 0) else {
        out.note = Some(format!("no PCIe link information for {name}"));
        return out;
    };

    // The drive's own link: capped by the port above, or degraded.
    out.findings
        .extend(capped_by_port(name, &hops, own, out.potential));
    out.findings.extend(degraded_finding(name, &hops, own));

    // Links further up: degraded ones are reported once per link by the
    // caller; a narrower one limits this drive.
    for l in links.iter().skip(1) {
        if let Some(f) = degraded_finding(name, &hops, l) {
            out.upstream_findings
                .push((path[l.lower].address.clone(), f));
        }
    }

    if links.iter().all(|l| l.bytes_per_sec().is_some()) {
        let (ceiling, capped) = ceiling(name, path, &hops, &links, own);
        out.ceiling = Some(ceiling);
        out.findings.extend(capped);
    } else {
        out.note = Some(
            "the link state is unknown (the kernel reports no speed or width): the link may be down"
                .to_owned(),
        );
    }

    // The chipset, whose uplink everything on it shares.
    out.findings.extend(behind_chipset(name, &hops, &links));

    if out.ceiling.is_some() {
        out.links = Some(link_caps(path, &hops, &links));
    }
    out
}

const CHIPSET_HINT: &str = "for an array's full speed put its drives in sockets wired to the CPU; the board manual says which sockets are which";

/// Links shared by several of `members`, reported once per group of
/// members (the narrowest link of the group): oversubscribed ones as
/// warnings.
pub(crate) fn shared_uplinks(members: &[MemberPath]) -> Vec<Finding> {
    let mut by_link: BTreeMap<String, (LinkCap, BTreeSet<String>, usize)> = BTreeMap::new();
    for m in members {
        for (depth, l) in m.links.iter().flatten().enumerate() {
            by_link
                .entry(l.id.clone())
                .or_insert_with(|| (l.clone(), BTreeSet::new(), depth))
                .1
                .insert(m.name.clone());
        }
    }
    // Per group of members, keep the narrowest link (unknown capacity last).
    let mut groups: BTreeMap<Vec<String>, (LinkCap, usize)> = BTreeMap::new();
    for (l, names, depth) in by_link.into_values() {
        if names.len() < 2 {
            continue;
        }
        let key: Vec<String> = names.into_iter().collect();
        let better = |new: &LinkCap, old: &LinkCap| match (new.bytes_per_sec, old.bytes_per_sec) {
            (Some(n), Some(o)) => n + EPS < o,
            (Some(_), None) => true,
            _ => false,
        };
        match groups.get(&key) {
            Some((old, _)) if !better(&l, old) => {}
            _ => {
                groups.insert(key, (l, depth));
            }
        }
    }
    let mut groups: Vec<(Vec<String>, LinkCap, usize)> =
        groups.into_iter().map(|(k, (l, d))| (k, l, d)).collect();
    groups.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
    groups
        .into_iter()
        .map(|(names, l, _)| {
            let together: Option<f64> = names
                .iter()
                .map(|n| members.iter().find(|m| &m.name == n).and_then(MemberPath::alone))
                .sum();
            let list = names.join(", ");
            let port_note = l
                .narrower_port
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            match (l.bytes_per_sec, together) {
                (Some(cap), Some(sum)) if sum > cap * (1.0 + EPS) => link_finding(
 Code::LinkSharedUplink,
 names,
 format!(
                        "{list} share {}, {}{port_note}: their own links could move {} together, so used at once they get at most {}",
                        l.label,
                        format_gbps(cap),
                        format_gbps(sum),
                        format_gbps(cap)
                    ),
 Some("spread the drives over sockets with their own root ports, or give the switch a wider or faster slot".to_owned()),
).with_severity(rules::shared_uplink(true)),
                (Some(cap), sum) => link_finding(
 Code::LinkSharedUplink,
 names,
 format!(
                        "{list} share {}, {}{port_note}{}",
                        l.label,
                        format_gbps(cap),
                        sum.map(|s| format!(", enough for the {} their own links move together", format_gbps(s)))
                            .unwrap_or_default()
                    ),
 None,
).with_severity(rules::shared_uplink(false)),
                (None, _) => // Unknown capacity: not known to be oversubscribed.
link_finding(
 Code::LinkSharedUplink,
 names,
 format!(
                        "{list} are on the chipset and share {} with its USB, SATA and network ports; used together they may be limited by it",
                        l.label
                    ),
 Some(CHIPSET_HINT.to_owned()),
).with_severity(rules::shared_uplink(false)),
            }
        })
        .collect()
}

/// Rates of a profile for one reader (low, high) and many readers, from
/// the equal per-member share `t` and the members' own ceilings sorted
/// from fastest to slowest.
fn profile_rates(profile: Profile, t: f64, desc: &[f64]) -> (f64, f64, f64) {
    let n = desc.len();
    let nf = n as f64;
    let (fastest, slowest) = (desc[0], desc[n - 1]);
    match profile {
        Profile::Raid0 => (nf * t, nf * t, nf * t),
        Profile::Single | Profile::Dup | Profile::Raid1 | Profile::Raid1c3 | Profile::Raid1c4 => {
            (slowest, fastest, nf * t)
        }
        Profile::Raid10 => {
            // One copy of each mirrored pair is read: half the members,
            // striped, the slowest of them setting the pace.
            let k = (n / 2).max(1);
            let kf = k as f64;
            let high = (kf * desc[k - 1]).min(nf * t);
            (kf * t, high.max(kf * t), nf * t)
        }
        Profile::Raid5 | Profile::Raid6 => {
            let parity = if profile == Profile::Raid5 { 1 } else { 2 };
            let data = n.saturating_sub(parity).max(1) as f64;
            (data * t, data * t, data * t)
        }
    }
}

fn profile_label(p: Profile) -> String {
    match p {
        Profile::Single | Profile::Dup => p.name().to_owned(),
        _ => p.name().to_uppercase(),
    }
}

/// The array's ceiling for `profile` over `members`. Shared links are
/// respected: members behind one uplink split it.
pub(crate) fn array_ceiling(profile: Profile, members: &[MemberPath]) -> ArrayCeiling {
    let n = members.len();
    let unknown: Vec<String> = members
        .iter()
        .filter(|m| m.alone().is_none())
        .map(|m| m.name.clone())
        .collect();
    let label = profile_label(profile);
    if n == 0 {
        return no_figures(profile, 0, Vec::new(), format!("{label}: no members"));
    }
    if !unknown.is_empty() {
        let summary = format!(
            "no ceiling for {label}: {} {} no PCIe link information",
            unknown.join(", "),
            if unknown.len() == 1 { "has" } else { "have" }
        );
        return no_figures(profile, n, unknown, summary);
    }
    let alone: Vec<f64> = members.iter().filter_map(MemberPath::alone).collect();
    let mut desc = alone.clone();
    desc.sort_by(|a, b| b.total_cmp(a));

    // Equal share per member: each link carries `count` members' shares.
    let mut nodes: BTreeMap<&str, (Option<f64>, usize, &str)> = BTreeMap::new();
    for m in members {
        for l in m.links.iter().flatten() {
            let e = nodes
                .entry(l.id.as_str())
                .or_insert((l.bytes_per_sec, 0, l.label.as_str()));
            e.1 += 1;
        }
    }
    let share = |(cap, count, _): &(Option<f64>, usize, &str)| cap.map(|c| c / *count as f64);
    let t = nodes
        .values()
        .filter_map(share)
        .fold(f64::INFINITY, f64::min);
    let (low, high, many) = profile_rates(profile, t, &desc);

    let balanced = balanced_flow(members);
    let mut potential_desc: Vec<f64> = members.iter().filter_map(|m| m.potential).collect();
    potential_desc.sort_by(|a, b| b.total_cmp(a));
    let potential = (potential_desc.len() == n).then(|| {
        let pt = potential_desc[n - 1];
        profile_rates(profile, pt, &potential_desc).1
    });

    let mut held_back_by = Vec::new();
    if t * (1.0 + EPS) < desc[0] {
        for (m, a) in members.iter().zip(&alone) {
            if *a <= t * (1.0 + EPS) {
                held_back_by.push(m.name.clone());
            }
        }
        for v in nodes.values() {
            if v.1 >= 2 && share(v).is_some_and(|s| s <= t * (1.0 + EPS)) {
                held_back_by.push(format!("{}, shared by {} members", v.2, v.1));
            }
        }
    }

    let g = format_gbps;
    let range = |low: f64, high: f64| {
        if (high - low).abs() <= high * EPS {
            g(high)
        } else {
            format!("{:.2}-{}", low / 1e9, g(high))
        }
    };
    let mut summary = match profile {
        Profile::Raid0 if n == 1 => format!("RAID0 on one member reads at its {}", g(high)),
        Profile::Raid0 => format!(
            "RAID0 stripes every read over all {n} members, so each reads at the pace of the slowest: {n} × {} = {}",
            g(t),
            g(high)
        ),
        Profile::Single | Profile::Dup if n == 1 => {
            format!("{label} on one device reads at its {}", g(high))
        }
        Profile::Single | Profile::Dup => format!(
            "{label} keeps each chunk on one member: one reader gets one member at a time, {}; several readers on different chunks up to {}",
            range(low, high),
            g(many)
        ),
        Profile::Raid1 | Profile::Raid1c3 | Profile::Raid1c4 => format!(
            "{label} reads each block from one copy, chosen by the reader's process id (the default read policy): one reader gets one member, {}; several readers up to {}",
            range(low, high),
            g(many)
        ),
        Profile::Raid10 => format!(
            "RAID10 stripes over {} mirrored pairs and reads one copy of each: one reader {}; several readers up to {}",
            (n / 2).max(1),
            range(low, high),
            g(many)
        ),
        Profile::Raid5 | Profile::Raid6 => format!(
            "{label} stripes data over the members with parity in between: reads up to {}",
            g(high)
        ),
    };
    if !held_back_by.is_empty() {
        summary.push_str(&format!("; held back by {}", held_back_by.join(", ")));
        if let Some(b) = balanced.filter(|b| *b > many * (1.0 + EPS)) {
            summary.push_str(&format!(
                ", while balanced to their links the members could give {}",
                g(b)
            ));
        }
    }
    if let Some(p) = potential.filter(|p| *p > high * (1.0 + EPS)) {
        summary.push_str(&format!(
            ". With every drive on a link of its own at its best: {}",
            g(p)
        ));
    }
    let b = |v: f64| Some(Bandwidth::from_encoded(v));
    ArrayCeiling {
        profile,
        members: n,
        one_reader: b(high),
        one_reader_low: b(low),
        many_readers: b(many),
        balanced: balanced.and_then(b),
        potential: potential.and_then(b),
        held_back_by,
        without_link_info: Vec::new(),
        summary,
    }
}

/// What the members move together with the load spread in proportion to
/// their speeds: a flow up the tree of links, each link passing at most
/// its capacity.
fn balanced_flow(members: &[MemberPath]) -> Option<f64> {
    let mut capacity: BTreeMap<&str, Option<f64>> = BTreeMap::new();
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut direct: BTreeSet<&str> = BTreeSet::new();
    for m in members {
        let links = m.links.as_ref()?;
        direct.insert(links.first()?.id.as_str());
        for (i, l) in links.iter().enumerate() {
            capacity.insert(l.id.as_str(), l.bytes_per_sec);
            if let Some(up) = links.get(i + 1) {
                parent.insert(l.id.as_str(), up.id.as_str());
            }
        }
    }
    fn flow<'a>(
        node: &'a str,
        capacity: &BTreeMap<&'a str, Option<f64>>,
        children: &BTreeMap<&'a str, Vec<&'a str>>,
        direct: &BTreeSet<&'a str>,
    ) -> f64 {
        let below = if direct.contains(node) {
            f64::INFINITY
        } else {
            children
                .get(node)
                .map(|c| c.iter().map(|k| flow(k, capacity, children, direct)).sum())
                .unwrap_or(0.0)
        };
        capacity
            .get(node)
            .copied()
            .flatten()
            .map_or(below, |c| c.min(below))
    }
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (c, p) in &parent {
        children.entry(p).or_default().push(c);
    }
    let total: f64 = capacity
        .keys()
        .filter(|k| !parent.contains_key(*k))
        .map(|root| flow(root, &capacity, &children, &direct))
        .sum();
    total.is_finite().then_some(total)
}

fn no_figures(
    profile: Profile,
    members: usize,
    unknown: Vec<String>,
    summary: String,
) -> ArrayCeiling {
    ArrayCeiling {
        profile,
        members,
        one_reader: None,
        one_reader_low: None,
        many_readers: None,
        balanced: None,
        potential: None,
        held_back_by: Vec::new(),
        without_link_info: unknown,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::finding::Severity;

    fn g(n: u8) -> Option<Generation> {
        Generation::new(n)
    }

    /// A PCI function with link attributes (current gen/width, max gen/width).
    fn f(address: &str, vendor: u32, now: (u8, u8), max: (u8, u8)) -> PciFunction {
        PciFunction {
            address: address.to_owned(),
            vendor: Some(vendor),
            device: Some(0x1234),
            class: None,
            link: Some(LinkAttrs {
                speed: g(now.0),
                width: Some(now.1),
                max_speed: g(max.0),
                max_width: Some(max.1),
            }),
        }
    }

    fn gbps(v: f64) -> f64 {
        (v / 1e7).round() / 100.0
    }

    fn kinds(a: &DeviceAnalysis) -> Vec<Code> {
        a.findings.iter().map(|f| f.code).collect()
    }

    #[test]
    fn roles_by_position() {
        let p = |n: usize| vec![PciFunction::default(); n];
        assert_eq!(roles(&p(1)), [HopRole::Endpoint]);
        assert_eq!(roles(&p(2)), [HopRole::Endpoint, HopRole::RootPort]);
        assert_eq!(
            roles(&p(4)),
            [
                HopRole::Endpoint,
                HopRole::SwitchDownstream,
                HopRole::SwitchUpstream,
                HopRole::RootPort
            ]
        );
        assert_eq!(roles(&p(6))[3], HopRole::SwitchDownstream);
        assert_eq!(roles(&p(6))[4], HopRole::SwitchUpstream);
        // An odd chain is no PCIe switch layout: the middle is a bridge.
        assert_eq!(roles(&p(3))[1], HopRole::Bridge);
    }

    #[test]
    fn a_drive_with_its_whole_link_has_no_findings() {
        let a = analyze_device(
            "nvme0",
            &[
                f("0000:01:00.0", 0x144d, (4, 4), (4, 4)),
                f("0000:00:01.2", AMD, (4, 4), (5, 4)),
            ],
        );
        assert!(a.findings.is_empty(), "{:?}", a.findings);
        let c = a.ceiling.unwrap();
        assert_eq!(gbps(c.bandwidth.encoded()), 7.88);
        assert_eq!((c.generation, c.width), (4, 4));
        assert_eq!(c.limited_by, "0000:00:01.2");
        assert_eq!(c.bandwidth.practical_low_bytes_per_sec, 6_695_384_615);
        assert_eq!(gbps(a.potential.unwrap().encoded()), 7.88);
        assert_eq!(a.links.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_x4_drive_on_a_x2_root_port_is_capped_with_the_lane_hint() {
        let a = analyze_device(
            "nvme1",
            &[
                f("0000:02:00.0", 0x15b7, (4, 2), (4, 4)),
                f("0000:00:01.3", AMD, (4, 2), (4, 2)),
            ],
        );
        assert_eq!(kinds(&a), [Code::LinkCappedByPort]);
        let finding = &a.findings[0];
        assert_eq!(finding.severity, Severity::Warning);
        assert!(
            finding
                .title
                .contains("root port 0000:00:01.3 is x2, the drive x4"),
            "{}",
            finding.title
        );
        assert!(finding.title.contains("3.94 GB/s instead of 7.88 GB/s"));
        assert!(
            finding
                .command
                .as_ref()
                .unwrap()
                .contains("BIOS lane settings")
        );
        assert_eq!(gbps(a.ceiling.unwrap().bandwidth.encoded()), 3.94);
    }

    #[test]
    fn a_gen5_drive_in_a_gen4_slot_is_capped_by_speed() {
        let a = analyze_device(
            "nvme0",
            &[
                f("0000:01:00.0", 0xc0a9, (4, 4), (5, 4)),
                f("0000:00:06.0", INTEL, (4, 4), (4, 4)),
            ],
        );
        assert_eq!(kinds(&a), [Code::LinkCappedByPort]);
        assert!(a.findings[0].title.contains("is Gen4, the drive Gen5"));
        assert!(
            a.findings[0]
                .command
                .as_ref()
                .unwrap()
                .contains("generation")
        );
        assert_eq!(gbps(a.potential.unwrap().encoded()), 15.75);
        // 00:06.0 is a CPU root port, not the chipset.
        assert!(!a.hops[1].chipset);
    }

    #[test]
    fn a_link_below_what_both_ends_support_is_degraded() {
        let a = analyze_device(
            "nvme0",
            &[
                f("0000:01:00.0", 0x144d, (4, 1), (4, 4)),
                f("0000:00:01.1", AMD, (4, 1), (4, 4)),
            ],
        );
        assert_eq!(kinds(&a), [Code::LinkDegraded]);
        assert!(a.findings[0].title.contains("trained at Gen4 x1"));
        assert!(
            a.findings[0]
                .title
                .contains("1.97 GB/s instead of 7.88 GB/s")
        );
        assert!(a.findings[0].command.as_ref().unwrap().contains("reseat"));
        assert_eq!(gbps(a.ceiling.unwrap().bandwidth.encoded()), 1.97);

        let slow = analyze_device(
            "nvme0",
            &[
                f("0000:01:00.0", 0x144d, (3, 4), (4, 4)),
                f("0000:00:01.1", AMD, (3, 4), (4, 4)),
            ],
        );
        assert_eq!(kinds(&slow), [Code::LinkDegraded]);
        assert!(
            slow.findings[0]
                .command
                .as_ref()
                .unwrap()
                .contains("under load")
        );
        assert!(
            !slow.findings[0]
                .command
                .as_ref()
                .unwrap()
                .contains("reseat")
        );
    }

    #[test]
    fn a_narrow_uplink_above_a_switch_limits_the_drive() {
        // A Gen4 x4 drive behind a switch whose uplink trained x1 of x4.
        let path = [
            f("0000:03:00.0", 0x144d, (4, 4), (4, 4)),
            f("0000:02:01.0", 0x10b5, (4, 4), (4, 4)),
            f("0000:01:00.0", 0x10b5, (4, 1), (4, 4)),
            f("0000:00:01.1", AMD, (4, 1), (4, 4)),
        ];
        let a = analyze_device("nvme0", &path);
        assert_eq!(kinds(&a), [Code::LinkCappedUpstream]);
        let c = a.ceiling.unwrap();
        assert_eq!(gbps(c.bandwidth.encoded()), 1.97);
        assert_eq!(c.limited_by, "0000:00:01.1");
        assert!(
            c.limited_by_link
                .contains("switch upstream port 0000:01:00.0")
        );
        // The degraded uplink is handed to the caller, keyed by its lower end.
        assert_eq!(a.upstream_findings.len(), 1);
        assert_eq!(a.upstream_findings[0].0, "0000:01:00.0");
        assert_eq!(a.upstream_findings[0].1.code, Code::LinkDegraded);
        assert_eq!(a.links.unwrap().len(), 2);
    }

    #[test]
    fn chipsets_are_recognised() {
        let amd = analyze_device(
            "nvme2",
            &[
                f("0000:05:00.0", 0x144d, (4, 4), (4, 4)),
                f("0000:04:08.0", AMD, (4, 4), (4, 4)),
                f("0000:03:00.0", AMD, (4, 4), (4, 4)),
                f("0000:00:02.1", AMD, (4, 4), (4, 4)),
            ],
        );
        assert_eq!(
            amd.hops.iter().map(|h| h.chipset).collect::<Vec<_>>(),
            [false, true, true, false]
        );
        assert_eq!(kinds(&amd), [Code::LinkBehindChipset]);
        assert!(amd.findings[0].title.contains("7.88 GB/s"));
        assert_eq!(amd.findings[0].severity, Severity::Info);

        // A PLX switch is a switch, not a chipset.
        let plx = analyze_device(
            "nvme0",
            &[
                f("0000:43:00.0", 0x144d, (3, 4), (3, 4)),
                f("0000:42:08.0", 0x10b5, (3, 4), (3, 4)),
                f("0000:41:00.0", 0x10b5, (3, 8), (3, 16)),
                f("0000:40:03.1", AMD, (3, 8), (4, 8)),
            ],
        );
        assert!(plx.findings.is_empty(), "{:?}", plx.findings);
        assert!(plx.hops.iter().all(|h| !h.chipset));

        let intel = analyze_device(
            "nvme1",
            &[
                f("0000:02:00.0", 0x144d, (4, 4), (4, 4)),
                f("0000:00:1b.4", INTEL, (4, 4), (4, 4)),
            ],
        );
        assert!(intel.hops[1].chipset);
        assert_eq!(kinds(&intel), [Code::LinkBehindChipset]);
        let links = intel.links.unwrap();
        assert_eq!(links.last().unwrap().id, "pch-dmi:0000");
        assert_eq!(links.last().unwrap().bytes_per_sec, None);
    }

    #[test]
    fn missing_link_information_gives_a_note_not_figures() {
        let none = analyze_device("nvme0", &[]);
        assert!(none.note.unwrap().contains("not on PCI"));
        let conventional = analyze_device(
            "nvme1",
            &[PciFunction {
                address: "0000:00:04.0".into(),
                ..PciFunction::default()
            }],
        );
        assert!(conventional.note.unwrap().contains("not a PCIe device"));
        assert!(conventional.ceiling.is_none() && conventional.links.is_none());
        let mut down = f("0000:01:00.0", 0x144d, (4, 4), (4, 4));
        down.link = Some(LinkAttrs {
            speed: None,
            width: None,
            max_speed: g(4),
            max_width: Some(4),
        });
        let unknown = analyze_device("nvme0", &[down, f("0000:00:01.1", AMD, (4, 4), (4, 4))]);
        // The root port's view of the link stands in for the drive's.
        // Gen4 x4 at the root port: 7.88 GB/s after encoding.
        assert_eq!(gbps(unknown.ceiling.unwrap().bandwidth.encoded()), 7.88);
        let mut both_down = f("0000:00:01.1", AMD, (4, 4), (4, 4));
        both_down.link = unknown_attrs();
        let mut drive = f("0000:01:00.0", 0x144d, (4, 4), (4, 4));
        drive.link = unknown_attrs();
        let a = analyze_device("nvme0", &[drive, both_down]);
        assert!(a.ceiling.is_none());
        assert!(a.note.unwrap().contains("unknown"));
    }

    fn unknown_attrs() -> Option<LinkAttrs> {
        Some(LinkAttrs {
            speed: None,
            width: None,
            max_speed: g(4),
            max_width: Some(4),
        })
    }

    fn cap(id: &str, gbps: f64) -> LinkCap {
        LinkCap {
            id: id.to_owned(),
            label: format!("link {id}"),
            bytes_per_sec: Some(gbps * 1e9),
            narrower_port: None,
        }
    }

    fn member(name: &str, links: &[LinkCap], potential: f64) -> MemberPath {
        MemberPath {
            name: name.to_owned(),
            links: Some(links.to_vec()),
            potential: Some(potential * 1e9),
        }
    }

    fn reference() -> Vec<MemberPath> {
        vec![
            member("nvme0n1p2", &[cap("a", 7.877)], 7.877),
            member("nvme1n1", &[cap("b", 3.938)], 7.877),
            member("nvme2n1", &[cap("c", 7.877), cap("chipset", 7.877)], 7.877),
        ]
    }

    #[test]
    fn raid0_reads_at_the_slowest_members_pace() {
        let c = array_ceiling(Profile::Raid0, &reference());
        assert_eq!(gbps(c.one_reader.unwrap().encoded()), 11.81);
        assert_eq!(c.one_reader, c.one_reader_low);
        assert_eq!(c.held_back_by, ["nvme1n1"]);
        assert_eq!(gbps(c.balanced.unwrap().encoded()), 19.69);
        assert_eq!(gbps(c.potential.unwrap().encoded()), 23.63);
        assert!(
            c.summary.contains("3 × 3.94 GB/s = 11.81 GB/s"),
            "{}",
            c.summary
        );
        assert!(c.summary.contains("held back by nvme1n1"));
        // The practical band: 10.04-10.63, as the reference machine's 10.6.
        let b = c.one_reader.unwrap();
        assert_eq!(gbps(b.practical_low_bytes_per_sec as f64), 10.04);
        assert_eq!(gbps(b.practical_high_bytes_per_sec as f64), 10.63);
    }

    #[test]
    fn members_behind_one_uplink_split_it() {
        let up = cap("uplink", 7.877);
        let members: Vec<MemberPath> = (0..4)
            .map(|i| {
                member(
                    &format!("nvme{i}n1"),
                    &[cap(&format!("d{i}"), 3.938), up.clone()],
                    3.938,
                )
            })
            .collect();
        let c = array_ceiling(Profile::Raid0, &members);
        assert_eq!(gbps(c.one_reader.unwrap().encoded()), 7.88);
        assert_eq!(c.held_back_by, ["link uplink, shared by 4 members"]);
        assert_eq!(gbps(c.balanced.unwrap().encoded()), 7.88);
        assert_eq!(gbps(c.potential.unwrap().encoded()), 15.75);

        let f = shared_uplinks(&members);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(crate::hw::model::devices(&f[0]).count(), 4);
        assert!(f[0].title.contains("15.75 GB/s together"), "{}", f[0].title);

        // Two drives behind a uplink wide enough for both: worth knowing only.
        let enough = shared_uplinks(&members[..2]);
        assert_eq!(enough[0].severity, Severity::Info);
        assert!(enough[0].title.contains("enough"));
        // Nothing shared, nothing said.
        assert!(shared_uplinks(&reference()).is_empty());
    }

    #[test]
    fn two_partitions_of_one_drive_share_its_link() {
        let link = [cap("d", 7.877)];
        let c = array_ceiling(
            Profile::Raid0,
            &[
                member("nvme0n1p1", &link, 7.877),
                member("nvme0n1p2", &link, 7.877),
            ],
        );
        assert_eq!(gbps(c.one_reader.unwrap().encoded()), 7.88);
        assert_eq!(gbps(c.balanced.unwrap().encoded()), 7.88);
    }

    #[test]
    fn mirrors_and_single_read_one_member_per_reader() {
        for p in [Profile::Raid1, Profile::Raid1c3, Profile::Single] {
            let c = array_ceiling(p, &reference());
            assert_eq!(gbps(c.one_reader_low.unwrap().encoded()), 3.94, "{p}");
            assert_eq!(gbps(c.one_reader.unwrap().encoded()), 7.88, "{p}");
            assert_eq!(gbps(c.many_readers.unwrap().encoded()), 11.81, "{p}");
            assert!(c.summary.contains("3.94-7.88 GB/s"), "{}", c.summary);
        }
        let dup = array_ceiling(Profile::Dup, &reference()[..1]);
        assert_eq!(gbps(dup.one_reader.unwrap().encoded()), 7.88);
        assert!(dup.summary.contains("one device"));
    }

    #[test]
    fn raid10_raid5_raid6() {
        let four: Vec<MemberPath> = (0..4)
            .map(|i| member(&format!("m{i}"), &[cap(&format!("l{i}"), 3.938)], 3.938))
            .collect();
        let r10 = array_ceiling(Profile::Raid10, &four);
        assert_eq!(gbps(r10.one_reader.unwrap().encoded()), 7.88);
        assert_eq!(gbps(r10.many_readers.unwrap().encoded()), 15.75);
        assert_eq!(
            gbps(
                array_ceiling(Profile::Raid5, &four)
                    .one_reader
                    .unwrap()
                    .encoded()
            ),
            11.81
        );
        assert_eq!(
            gbps(
                array_ceiling(Profile::Raid6, &four)
                    .one_reader
                    .unwrap()
                    .encoded()
            ),
            7.88
        );
        assert!(
            array_ceiling(Profile::Raid10, &four)
                .held_back_by
                .is_empty()
        );
    }

    #[test]
    fn a_member_without_link_information_means_no_figures() {
        let mut members = reference();
        members.push(MemberPath {
            name: "loop0".into(),
            links: None,
            potential: None,
        });
        let c = array_ceiling(Profile::Raid0, &members);
        assert_eq!(c.one_reader, None);
        assert_eq!(c.balanced, None);
        assert_eq!(c.without_link_info, ["loop0"]);
        assert!(c.summary.contains("loop0 has no PCIe link information"));
        let none = array_ceiling(Profile::Raid0, &[]);
        assert_eq!(none.one_reader, None);
    }

    #[test]
    fn unknown_capacity_links_constrain_nothing() {
        let dmi = LinkCap {
            id: "pch-dmi:0000".into(),
            label: "the chipset's DMI link to the CPU".into(),
            bytes_per_sec: None,
            narrower_port: None,
        };
        let members = [
            member("a", &[cap("a", 7.877), dmi.clone()], 7.877),
            member("b", &[cap("b", 7.877), dmi], 7.877),
        ];
        let c = array_ceiling(Profile::Raid0, &members);
        assert_eq!(gbps(c.one_reader.unwrap().encoded()), 15.75);
        assert_eq!(gbps(c.balanced.unwrap().encoded()), 15.75);
        let f = shared_uplinks(&members);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(f[0].title.contains("DMI"));
    }

    #[test]
    fn balanced_flow_respects_nested_uplinks() {
        // a, b behind a switch (uplink 5) behind a chipset link (6) shared
        // with c; d alone.
        let members = [
            member("a", &[cap("a", 4.0), cap("sw", 5.0), cap("chip", 6.0)], 4.0),
            member("b", &[cap("b", 4.0), cap("sw", 5.0), cap("chip", 6.0)], 4.0),
            member("c", &[cap("c", 4.0), cap("chip", 6.0)], 4.0),
            member("d", &[cap("d", 4.0)], 4.0),
        ];
        let c = array_ceiling(Profile::Raid1, &members);
        assert_eq!(gbps(c.balanced.unwrap().encoded()), 10.0);
        // Equal shares: the chipset link carries three at 2 each.
        assert_eq!(gbps(c.many_readers.unwrap().encoded()), 8.0);
        let f = shared_uplinks(&members);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(
            crate::hw::model::devices(&f[0]).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            crate::hw::model::devices(&f[1]).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }
}
