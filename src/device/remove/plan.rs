//! `device remove`'s plan: pure (the profiles' minimum device counts,
//! whether the data fits on the devices that stay, and the order that moves
//! the fewest bytes twice), from the facts read through the handle.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::device::preflight::{Reason, same_device};
use crate::device::started::{RemovingDevice, StartedRemove, StartedStore};
use crate::error::Result;
use crate::model::alloc::{ChunkKind, reserve};
use crate::model::profile::Profile;
use crate::model::relocate::{self, Assume, Layout, Shortfall};
use crate::model::space::BgType;
use crate::operation::state::FsState;
use crate::parse::size::format_iec;
use crate::sys::kernel::btrfs::{ChunkRecord, DevExtent, FsHandle, bg_type_of, profile_of};

/// A device to remove, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoveSpec {
    /// A btrfs device id.
    Devid(u64),
    /// `missing`: the devices that are not there.
    Missing,
    /// A block device path.
    Path(PathBuf),
}

impl RemoveSpec {
    /// A number is a devid, `missing` the missing ones, anything else a path.
    pub fn parse(s: &str) -> Self {
        if s == "missing" {
            return RemoveSpec::Missing;
        }
        match s.parse::<u64>() {
            Ok(n) => RemoveSpec::Devid(n),
            Err(_) => RemoveSpec::Path(PathBuf::from(s)),
        }
    }
}

/// One device to remove, in the order they will go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Leaving {
    /// btrfs device id.
    pub devid: u64,
    /// Path; empty when missing.
    pub path: String,
    /// Size btrfs uses on it.
    pub size: u64,
    /// Bytes of chunks on it now.
    pub allocated: u64,
    /// Bytes the plan expects to move off it at its turn (its own, and
    /// what the earlier removals are expected to put on it).
    pub expected_move: u64,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemovePlan {
    /// Mount point.
    pub mount_point: PathBuf,
    /// The devices, in the order they go.
    pub devices: Vec<Leaving>,
    /// Devices that stay.
    pub remaining: Vec<u64>,
    /// Bytes the plan expects to move in all (an estimate from the kernel's
    /// allocator: what lands on a device removed later moves twice).
    pub expected_move: u64,
    /// Of that, what moves twice.
    pub moved_twice: u64,
    /// Exactly the commands that will run, in order.
    pub commands: Vec<Vec<String>>,
    /// What the user should know.
    pub notes: Vec<String>,
    /// Why it cannot go ahead.
    pub refusals: Vec<Reason>,
    /// The replay of the relocation onto the devices that stay, chunk by
    /// chunk with the kernel's allocator rules (as `convert`'s).
    #[serde(default)]
    pub space_check: SpaceCheck,
    /// A remove of this device already runs in the kernel (its command was
    /// killed, or runs elsewhere): this run follows it instead of starting
    /// one, then goes on with the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub following: Option<u64>,
    /// Devices named that an earlier remove of this tool (on record)
    /// already took out: nothing to do for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub already_removed: Vec<AlreadyRemoved>,
    /// Usable data capacity now and on the devices that stay (the
    /// allocator model of `btrfs-lab capacity`).
    #[serde(default)]
    pub usable: crate::space::capacity::UsableChange,
}

/// A device named that is no longer a member because a remove this tool
/// started took it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AlreadyRemoved {
    /// Its devid then.
    pub devid: u64,
    /// The device as named.
    pub device: String,
}

impl RemovePlan {
    /// `nothing to do: DEVICE is no longer a member of M` when every device
    /// named is already out (by a remove on record), else `None`.
    pub fn nothing_to_do(&self) -> Option<String> {
        (self.devices.is_empty() && !self.already_removed.is_empty() && self.refusals.is_empty())
            .then(|| {
                let names: Vec<&str> = self
                    .already_removed
                    .iter()
                    .map(|a| a.device.as_str())
                    .collect();
                format!(
                    "nothing to do: {} {} no longer a member of {}",
                    names.join(", "),
                    if names.len() == 1 { "is" } else { "are" },
                    self.mount_point.display()
                )
            })
    }
}

/// What the replay of a remove's relocation says.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SpaceCheck {
    /// It fits under every assumption the replay makes.
    Fits,
    /// It fits under some assumptions and runs out under others: the
    /// kernel may stop with ENOSPC (the device stays a member).
    MayRunOut,
    /// It runs out under every assumption: refused.
    WillRunOut,
    /// Not replayed (not root, mixed block groups, a balance running,
    /// or the plan is refused for another reason).
    #[default]
    NotChecked,
}

/// What the planner reads besides the filesystem's state.
#[derive(Debug, Clone, Default)]
pub struct RemoveFacts {
    /// The chunk tree.
    pub chunks: Vec<ChunkRecord>,
    /// The device extents.
    pub dev_extents: Vec<DevExtent>,
    /// Mounted read-only.
    pub read_only: bool,
    /// Root.
    pub is_root: bool,
    /// The chunks as the replay reads them ([`crate::convert::read_layout`]).
    pub layout: Option<Layout>,
    /// The last remove this tool started on the filesystem (its record in
    /// the state directory): what ties a device that is no longer a member
    /// to a remove that finished.
    pub started: Option<StartedRemove>,
}

fn kind_of(t: BgType) -> ChunkKind {
    match t {
        BgType::Metadata | BgType::GlobalReserve => ChunkKind::Metadata,
        BgType::System => ChunkKind::System,
        _ => ChunkKind::Data,
    }
}

/// The profile with the most redundancy that `devices` devices allow,
/// never more than `p` has: what to convert to before removing (the
/// RAID1 family: RAID5/6 and RAID10 fall back to the mirror with as many
/// copies as they tolerate failures).
fn fallback(
    p: Profile,
    devices: u32,
    kind: BgType,
    kernel: crate::model::kernel::KernelVersion,
) -> Profile {
    let t = p.geometry().tolerated_failures;
    if t == 0 {
        return if p == Profile::Raid0 {
            Profile::Raid0
        } else {
            Profile::Single
        };
    }
    for q in [Profile::Raid1c4, Profile::Raid1c3, Profile::Raid1] {
        if q.geometry().tolerated_failures <= t
            && devices >= q.min_devices_on(kernel)
            && q.supported_on(kernel)
        {
            return q;
        }
    }
    if kind == BgType::Data {
        Profile::Single
    } else {
        Profile::Dup
    }
}

/// Bytes moved when `order` (indexes into `members`) goes in turn, and how
/// much of it twice; per step the bytes taken off that device. `None`: the
/// data does not fit. Pure: the kernel's allocator model places what each
/// removal relocates on the devices still there (most free first).
fn simulate(
    fs: &FsState,
    facts: &RemoveFacts,
    order: &[u64],
    tight: &mut bool,
) -> std::result::Result<(u64, u64, Vec<u64>), String> {
    // Used bytes per (type, profile), to scale chunk lengths to their data.
    let ratio = |kind: BgType, p: Profile| -> f64 {
        let (mut total, mut used) = (0u64, 0u64);
        for s in &fs.spaces {
            if crate::operation::state::matches_kind(bg_type_of(s.flags), kind)
                && profile_of(s.flags) == p
            {
                total += s.total_bytes;
                used += s.used_bytes;
            }
        }
        if total == 0 {
            1.0
        } else {
            used as f64 / total as f64
        }
    };
    let mut alloc: Vec<(u64, u64)> = fs.devices.iter().map(|d| (d.devid, d.allocated)).collect();
    let mut live: Vec<u64> = fs.devices.iter().map(|d| d.devid).collect();
    let size_of = |id: u64| {
        fs.devices
            .iter()
            .find(|d| d.devid == id)
            .map_or(0, |d| d.size)
    };
    let mut moved = 0u64;
    let mut twice = 0u64;
    let mut per_step = Vec::new();
    let mut landed: Vec<(u64, u64)> = Vec::new();
    for &gone in order {
        let own = alloc.iter().find(|a| a.0 == gone).map_or(0, |a| a.1);
        per_step.push(own);
        moved += own;
        twice += landed
            .iter()
            .filter(|l| l.0 == gone)
            .map(|l| l.1)
            .sum::<u64>();
        live.retain(|&d| d != gone);
        let mut free: Vec<u64> = live
            .iter()
            .map(|&d| size_of(d).saturating_sub(alloc.iter().find(|a| a.0 == d).map_or(0, |a| a.1)))
            .collect();
        let total: u64 = live.iter().map(|&d| size_of(d)).sum();
        // What sits on `gone`, per type and profile, scaled to its data.
        let mut groups: Vec<(BgType, Profile, u64)> = Vec::new();
        let extents_here = facts.dev_extents.iter().filter(|e| e.devid == gone);
        for e in extents_here {
            let Some(c) = facts.chunks.iter().find(|c| c.logical == e.chunk_logical) else {
                continue;
            };
            let k = bg_type_of(c.flags);
            let p = profile_of(c.flags);
            match groups.iter_mut().find(|g| g.0 == k && g.1 == p) {
                Some(g) => g.2 += c.length,
                None => groups.push((k, p, c.length)),
            }
        }
        // A relocated chunk frees its stripes on the devices that stay as
        // well (one chunk after the other, so that room is reused).
        let relocated: Vec<u64> = facts
            .chunks
            .iter()
            .filter(|c| c.devids.contains(&gone))
            .map(|c| c.logical)
            .collect();
        for e in facts
            .dev_extents
            .iter()
            .filter(|e| e.devid != gone && relocated.contains(&e.chunk_logical))
        {
            if let Some(i) = live.iter().position(|&d| d == e.devid) {
                free[i] += e.length;
                if let Some(a) = alloc.iter_mut().find(|a| a.0 == e.devid) {
                    a.1 = a.1.saturating_sub(e.length);
                }
            }
        }
        let before: Vec<u64> = free.clone();
        for (k, p, len) in groups {
            // Room left in the chunks of the same kind that stay takes
            // some of it first, as the relocation fills them before it
            // allocates new chunks.
            let kept: u64 = facts
                .chunks
                .iter()
                .filter(|c| {
                    bg_type_of(c.flags) == k
                        && profile_of(c.flags) == p
                        && c.devids.iter().all(|d| live.contains(d))
                })
                .map(|c| c.length)
                .sum();
            let r = ratio(k, p);
            let room = (kept as f64 * (1.0 - r)) as u64;
            let need = ((len as f64 * r).ceil() as u64).saturating_sub(room);
            let target = if p.stripes_on(live.len() as u32, fs.kernel).is_some() {
                p
            } else {
                fallback(p, live.len() as u32, k, fs.kernel)
            };
            // Raw bytes the data needs on the devices that stay: beyond
            // what they have unallocated, it cannot fit, whatever the
            // kernel does.
            let n = target.stripes_on(live.len() as u32, fs.kernel).unwrap_or(1);
            let raw = need.saturating_mul(u64::from(n)) / u64::from(target.data_stripes(n));
            let unallocated: u64 = free.iter().sum();
            if raw > unallocated {
                return Err(format!(
                    "the {} {} on device {gone} ({} in use, {} raw as {}) does not fit on the devices that stay ({} unallocated)",
                    k.json_name(),
                    p.name(),
                    format_iec(need),
                    format_iec(raw),
                    target.name(),
                    format_iec(unallocated)
                ));
            }
            // The chunk-by-chunk model (full-size chunks) may not fit where
            // the kernel, which allocates smaller chunks when room is
            // short, still does: said, not refused.
            if !reserve(&mut free, target, kind_of(k), need, total, fs.kernel) {
                *tight = true;
            }
        }
        for (i, &d) in live.iter().enumerate() {
            let put = before[i] - free[i];
            if let Some(a) = alloc.iter_mut().find(|a| a.0 == d) {
                a.1 += put;
            }
            if put > 0 {
                landed.push((d, put));
            }
        }
    }
    Ok((moved + twice, twice, per_step))
}

/// Every order of `ids` (up to 5 devices; more keep the given order).
fn orders(ids: &[u64]) -> Vec<Vec<u64>> {
    if ids.len() <= 1 || ids.len() > 5 {
        return vec![ids.to_vec()];
    }
    let mut out = Vec::new();
    for (i, &first) in ids.iter().enumerate() {
        let mut rest = ids.to_vec();
        rest.remove(i);
        for mut tail in orders(&rest) {
            tail.insert(0, first);
            out.push(tail);
        }
    }
    out
}

/// The devices named, resolved.
struct Named {
    /// Their devids, in the order named.
    ids: Vec<u64>,
    /// Named, but a remove on record took them out already.
    already_removed: Vec<AlreadyRemoved>,
    /// `missing` was named.
    missing_spec: bool,
}

/// Resolves the devices named to devids; what is not a member (and was
/// not removed by this tool) or is named twice is refused.
fn named(
    fs: &FsState,
    specs: &[RemoveSpec],
    facts: &RemoveFacts,
    m: &str,
    refusals: &mut Vec<Reason>,
    notes: &mut Vec<String>,
) -> Named {
    let mut ids: Vec<u64> = Vec::new();
    let mut already_removed: Vec<AlreadyRemoved> = Vec::new();
    let mut missing_spec = false;
    for s in specs {
        let found: Vec<u64> = match s {
            RemoveSpec::Devid(id) => fs
                .devices
                .iter()
                .filter(|d| d.devid == *id)
                .map(|d| d.devid)
                .collect(),
            RemoveSpec::Missing => {
                missing_spec = true;
                fs.devices
                    .iter()
                    .filter(|d| d.path.is_empty())
                    .map(|d| d.devid)
                    .collect()
            }
            RemoveSpec::Path(p) => {
                let r = crate::sys::block::blockdev::resolved(p);
                fs.devices
                    .iter()
                    .filter(|d| same_device(&d.path, &r))
                    .map(|d| d.devid)
                    .collect()
            }
        };
        if found.is_empty()
            && let Some(a) = removed_before(fs, facts, s)
        {
            notes.push(format!(
                "{} is no longer a member of {m}: a remove btrfs-lab started took it out (device {}); nothing to do for it",
                a.device, a.devid
            ));
            already_removed.push(a);
            continue;
        }
        if found.is_empty() {
            refusals.push(not_member(fs, s, m));
        }
        for id in found {
            if ids.contains(&id) {
                refusals.push(Reason::general(
                    "duplicate",
                    format!("device {id} is given twice"),
                    false,
                ));
            } else {
                ids.push(id);
            }
        }
    }
    Named {
        ids,
        already_removed,
        missing_spec,
    }
}

/// The refusal of a device named that is not a member, with the members.
fn not_member(fs: &FsState, s: &RemoveSpec, m: &str) -> Reason {
    let what = match s {
        RemoveSpec::Devid(id) => format!("device id {id} is not a device of {m}"),
        RemoveSpec::Missing => format!("no device of {m} is missing"),
        RemoveSpec::Path(p) => format!("{} is not a device of {m}", p.display()),
    };
    Reason::general(
        "not-member",
        format!("{what}; its devices: {}", crate::device::members_listed(fs)),
        false,
    )
}

/// A remove the kernel runs already: the devid this run follows (one it
/// was asked to remove), else a note or a refusal.
fn following(
    fs: &FsState,
    ids: &[u64],
    m: &str,
    refusals: &mut Vec<Reason>,
    notes: &mut Vec<String>,
) -> Option<u64> {
    // A remove the kernel runs now (its command killed, or run elsewhere):
    // the device it takes out shows a size of 0 (btrfs_shrink_device).
    let mut following = None;
    match fs.exclusive_operation.as_deref() {
        None | Some("none") => {}
        Some("device remove") => {
            match fs.devices.iter().find(|d| d.size == 0).map(|d| d.devid) {
                Some(id) if ids.contains(&id) => {
                    following = Some(id);
                    notes.push(format!(
                        "a remove of device {id} already runs in the kernel (its command was interrupted, or runs elsewhere): this run follows it to its end, then goes on"
                    ));
                }
                Some(id) => refusals.push(Reason::general(
                    "other-remove-running",
                    format!("device {id} is being removed from {m} by another command; wait until it ends, or follow it: btrfs-lab device remove {m} {id}"),
                    false,
                )),
                None if ids.is_empty() => {}
                None => notes.push(
                    "a device remove is running on this filesystem: this run waits until it ends, then goes on".to_owned(),
                ),
            }
        }
        Some(op) => refusals.push(Reason::general(
            "exclusive-operation",
            format!("another operation is running on this filesystem ({op}); wait until it ends"),
            false,
        )),
    }
    following
}

/// The refusal when a profile in use needs more devices than the `left`
/// that stay, with the convert that makes room.
fn too_few_devices(fs: &FsState, facts: &RemoveFacts, left: u32, m: &str) -> Option<Reason> {
    let mut too_few: Vec<(BgType, Profile)> = Vec::new();
    for c in &facts.chunks {
        let k = bg_type_of(c.flags);
        let p = profile_of(c.flags);
        if left > 0 && left < p.min_devices_on(fs.kernel) && !too_few.contains(&(k, p)) {
            too_few.push((k, p));
        }
    }
    if too_few.is_empty() {
        return None;
    }
    let data = too_few
        .iter()
        .find(|t| t.0 == BgType::Data)
        .map(|t| fallback(t.1, left, t.0, fs.kernel));
    let meta = too_few
        .iter()
        .find(|t| matches!(t.0, BgType::Metadata | BgType::System))
        .map(|t| fallback(t.1, left, BgType::Metadata, fs.kernel));
    let mut cmd = format!("btrfs-lab convert {m}");
    if let Some(d) = data {
        cmd.push_str(&format!(" --data {}", d.name()));
    }
    if let Some(md) = meta {
        cmd.push_str(&format!(" --metadata {}", md.name()));
    }
    let names: Vec<String> = too_few
        .iter()
        .map(|(k, p)| {
            format!(
                "{} {} needs {}",
                k.json_name(),
                p.name(),
                p.min_devices_on(fs.kernel)
            )
        })
        .collect();
    Some(Reason::general(
        "too-few-devices",
        format!(
            "{left} device(s) would stay, and {}; convert first: {cmd}",
            names.join(", ")
        ),
        false,
    ))
}

/// A removal order, the bytes it moves, those moved twice, and the
/// relocation steps of each device.
type Order = (Vec<u64>, u64, u64, Vec<u64>);

/// The order that moves the fewest bytes twice (the device the kernel
/// removes now first), and whether space is tight; refused when no order
/// fits. Without a fitting order: the devices as named.
fn best_order(
    fs: &FsState,
    facts: &RemoveFacts,
    ids: &[u64],
    following: Option<u64>,
    m: &str,
    refusals: &mut Vec<Reason>,
) -> (Order, bool) {
    let mut best: Option<Order> = None;
    let mut tight = false;
    let mut space_error = None;
    if refusals.is_empty() && !ids.is_empty() {
        // The device the kernel removes now goes first.
        for o in orders(ids)
            .into_iter()
            .filter(|o| following.is_none_or(|f| o.first() == Some(&f)))
        {
            let mut t = false;
            match simulate(fs, facts, &o, &mut t) {
                Ok((moved, twice, steps)) => {
                    if best.as_ref().is_none_or(|b| (twice, moved) < (b.2, b.1)) {
                        best = Some((o, moved, twice, steps));
                        tight = t;
                    }
                }
                Err(e) => {
                    space_error.get_or_insert(e);
                }
            }
        }
        if best.is_none() {
            refusals.push(Reason::general(
                "no-space",
                format!(
                    "{}: free space first (delete data, a filtered balance) or add a device (btrfs-lab device add {m} DEV)",
                    space_error.unwrap_or_else(|| "the data does not fit".into())
                ),
                false,
            ));
        }
    }
    let best = best.unwrap_or_else(|| (ids.to_vec(), 0, 0, vec![0; ids.len()]));
    (best, tight)
}

/// Plans removing `specs` from `fs` (pure): the run's refusals, the
/// devices named, what stays, the order and the space, the notes, the
/// commands.
pub fn plan_remove(fs: &FsState, specs: &[RemoveSpec], facts: &RemoveFacts) -> RemovePlan {
    let m = fs.mount_point.display().to_string();
    let mut refusals = run_refusals(specs, facts, &m);
    let mut notes = Vec::new();
    let Named {
        ids,
        already_removed,
        missing_spec,
    } = named(fs, specs, facts, &m, &mut refusals, &mut notes);
    let following = following(fs, &ids, &m, &mut refusals, &mut notes);
    let remaining: Vec<u64> = fs
        .devices
        .iter()
        .map(|d| d.devid)
        .filter(|d| !ids.contains(d))
        .collect();
    if !ids.is_empty() && remaining.is_empty() {
        refusals.push(Reason::general(
            "last-device",
            "a filesystem keeps at least one device: these are all of them".into(),
            false,
        ));
    }
    // Every profile in use must allow the devices that stay.
    if let Some(r) = too_few_devices(fs, facts, remaining.len() as u32, &m) {
        refusals.push(r);
    }
    // Order and space.
    let ((order, expected_move, moved_twice, steps), tight) =
        best_order(fs, facts, &ids, following, &m, &mut refusals);
    let devices = leaving(fs, &order, &steps);
    if devices.len() > 1 {
        notes.push(order_note(moved_twice));
    }
    let meta_all_leaving = meta_all_leaving(facts, &ids);
    let space_check = if refusals.is_empty() && !ids.is_empty() {
        replayed(
            fs,
            facts,
            &order,
            meta_all_leaving,
            &m,
            &mut refusals,
            &mut notes,
        )
    } else {
        SpaceCheck::NotChecked
    };
    space_notes(&mut notes, space_check, meta_all_leaving, tight);
    if devices.iter().any(|d| d.path.is_empty()) {
        notes.push("a missing device's chunks are rebuilt from their other copies; chunks without one (single, RAID0) make the remove fail: copy out what is left first (btrfs-lab rescue)".to_owned());
    }
    if !ids.is_empty() {
        notes.push("Ctrl-C stops the remove after the chunk in progress: the device stays a member, and the same command again continues".to_owned());
    }
    let commands = commands(&devices, missing_spec, &m);
    let usable = crate::space::capacity::usable_change(
        fs,
        &crate::space::capacity::Changes {
            remove: ids.clone(),
            ..Default::default()
        },
    );
    RemovePlan {
        usable,
        mount_point: fs.mount_point.clone(),
        devices,
        remaining,
        expected_move,
        moved_twice,
        commands,
        notes,
        refusals,
        space_check,
        following,
        already_removed,
    }
}

/// What refuses the run itself: no root, a filesystem mounted read-only,
/// no device named.
fn run_refusals(specs: &[RemoveSpec], facts: &RemoveFacts, m: &str) -> Vec<Reason> {
    let mut refusals = Vec::new();
    if !facts.is_root {
        refusals.push(Reason::not_root("removing a device"));
    }
    if facts.read_only {
        refusals.push(Reason::general(
            "read-only",
            format!(
                "{m} is mounted read-only; a remove relocates data: remount it read-write first"
            ),
            false,
        ));
    }
    if specs.is_empty() {
        refusals.push(Reason::general(
            "no-device",
            "give at least one device to remove".into(),
            false,
        ));
    }
    refusals
}

/// The devices that go, in `order`, each with the bytes expected to move
/// off it.
fn leaving(fs: &FsState, order: &[u64], steps: &[u64]) -> Vec<Leaving> {
    order
        .iter()
        .zip(steps.iter().chain(std::iter::repeat(&0)))
        .filter_map(|(id, step)| {
            fs.devices.iter().find(|d| d.devid == *id).map(|d| Leaving {
                devid: d.devid,
                path: d.path.clone(),
                size: d.size,
                allocated: d.allocated,
                expected_move: *step,
            })
        })
        .collect()
}

/// Why the order is the one chosen.
fn order_note(moved_twice: u64) -> String {
    if moved_twice == 0 {
        "the order is the one in which nothing moves twice (no relocated data lands on a device removed later)".to_owned()
    } else {
        format!(
            "the order is the one that moves the least twice: about {} lands on a device removed later and moves again (the kernel cannot be told to avoid it)",
            format_iec(moved_twice)
        )
    }
}

/// Every metadata chunk has a stripe on a device that goes: while the
/// last of them is relocated, metadata has room only by overcommitting
/// until a new chunk comes.
fn meta_all_leaving(facts: &RemoveFacts, ids: &[u64]) -> bool {
    let meta: Vec<&ChunkRecord> = facts
        .chunks
        .iter()
        .filter(|c| bg_type_of(c.flags) == BgType::Metadata)
        .collect();
    !meta.is_empty()
        && meta
            .iter()
            .all(|c| c.devids.iter().any(|d| ids.contains(d)))
}

/// The relocation replayed chunk by chunk onto the devices that stay (when
/// the layout could be read): fits, may run out (a note), or will run out
/// (a refusal).
fn replayed(
    fs: &FsState,
    facts: &RemoveFacts,
    order: &[u64],
    meta_all_leaving: bool,
    m: &str,
    refusals: &mut Vec<Reason>,
    notes: &mut Vec<String>,
) -> SpaceCheck {
    let Some(layout) = &facts.layout else {
        return SpaceCheck::NotChecked;
    };
    let replay = RemoveReplay::new(fs, facts, order);
    match replay.verdict(layout) {
        Ok(n) if meta_all_leaving => {
            // Measured on 6.18 (3 × 1 GiB raid1 holding 400 MiB,
            // removing the device with the one metadata chunk; the
            // replay fits): the kernel made that chunk read-only by
            // overcommitting, then failed to allocate a tree block
            // (ENOSPC in __btrfs_free_extent), aborted the transaction
            // and forced the filesystem read-only; with 100 MiB, or on
            // 1.5 GiB devices, the same remove completed. The replay
            // cannot tell these apart.
            notes.push(format!(
                    "space: may run out — the relocation of the {n} chunk(s), replayed chunk by chunk onto the devices that stay, finds room, but every metadata chunk has a copy on a device that goes: while the last of them is relocated the kernel has no metadata chunk to write to until it allocates one, and it has aborted the transaction there with ENOSPC and forced the filesystem read-only (seen on 6.18 with 3 × 1 GiB raid1 at 40% full). Nothing committed is lost then: unmount, mount, add a device (btrfs-lab device add {m} DEV), run it again. To avoid it, add a device first, or free space"
                ));
            SpaceCheck::MayRunOut
        }
        Ok(n) => {
            notes.push(format!(
                    "space: fits — the relocation of the {n} chunk(s) on the device(s) that go, replayed chunk by chunk onto the devices that stay with the kernel's allocator rules, finds room for every extent"
                ));
            SpaceCheck::Fits
        }
        Err((s, sure)) if sure => {
            refusals.push(shortfall_reason(fs, layout, &replay, &s));
            SpaceCheck::WillRunOut
        }
        Err((s, _)) => {
            notes.push(format!(
                    "space: may run out — replayed with the least favourable assumptions, {}; with others it fits. If the kernel stops with ENOSPC the device stays a member and nothing is lost: add a device (btrfs-lab device add {m} DEV) or free space, then run it again",
                    shortfall_text(&s)
                ));
            SpaceCheck::MayRunOut
        }
    }
}

/// What the space check leaves to say: every metadata chunk leaving, or
/// tight space, when no replay said it better.
fn space_notes(
    notes: &mut Vec<String>,
    space_check: SpaceCheck,
    meta_all_leaving: bool,
    tight: bool,
) {
    if meta_all_leaving && space_check == SpaceCheck::NotChecked {
        notes.push("every metadata chunk has a copy on a device that goes: relocating the last of them needs a new metadata chunk on the devices that stay at once; the kernel has aborted that with ENOSPC and forced the filesystem read-only (seen on 6.18; nothing committed is lost: unmount, mount, add a device or free space, run again)".to_owned());
    }
    // The replay says it better than the full-size-chunk estimate.
    if tight && space_check == SpaceCheck::NotChecked {
        notes.push("space is tight: the devices that stay have room for the data, but not in full-size chunks; the kernel allocates smaller ones then, and if it still runs out the remove stops with ENOSPC (the device stays a member, nothing is lost)".to_owned());
    }
}

/// `btrfs device remove DEVID|missing MOUNT`, one per device, in order.
fn commands(devices: &[Leaving], missing_spec: bool, m: &str) -> Vec<Vec<String>> {
    devices
        .iter()
        .map(|d| {
            vec![
                "btrfs".to_owned(),
                "device".to_owned(),
                "remove".to_owned(),
                if d.path.is_empty() && missing_spec {
                    "missing".to_owned()
                } else {
                    d.devid.to_string()
                },
                m.to_owned(),
            ]
        })
        .collect()
}

/// The device `spec` names, when it is not a member because the last
/// remove this tool started on `fs` (its record) took it out: the same
/// devid, or the same path and device number; and nothing of it is a
/// member now.
fn removed_before(fs: &FsState, facts: &RemoveFacts, spec: &RemoveSpec) -> Option<AlreadyRemoved> {
    let started = facts.started.as_ref().filter(|r| r.fsid == fs.fsid)?;
    let gone = |e: &&RemovingDevice| {
        !fs.devices
            .iter()
            .any(|d| d.devid == e.devid || (!e.device.path.is_empty() && d.path == e.device.path))
    };
    let (e, device) = match spec {
        RemoveSpec::Devid(id) => (
            started
                .devices
                .iter()
                .filter(gone)
                .find(|e| e.devid == *id)?,
            id.to_string(),
        ),
        RemoveSpec::Path(p) => {
            let r = crate::sys::block::blockdev::resolved(p);
            let devt = crate::sys::block::blockdev::devt_of(&r);
            (
                started
                    .devices
                    .iter()
                    .filter(gone)
                    .find(|e| e.device.is(&r, devt))?,
                p.display().to_string(),
            )
        }
        RemoveSpec::Missing => (
            started
                .devices
                .iter()
                .filter(gone)
                .find(|e| e.device.path.is_empty())?,
            String::new(),
        ),
    };
    Some(AlreadyRemoved {
        devid: e.devid,
        device: if device.is_empty() {
            format!("device {} (missing)", e.devid)
        } else {
            device
        },
    })
}

/// What [`relocate::simulate_remove`] takes for removing `order`
/// (devids) from `fs`.
struct RemoveReplay {
    gone: Vec<usize>,
    gone_bytes: u64,
    /// The chunks' logical starts in the order the kernel relocates them.
    chunks: Vec<u64>,
}

impl RemoveReplay {
    fn new(fs: &FsState, facts: &RemoveFacts, order: &[u64]) -> Self {
        let leaving = || {
            order
                .iter()
                .filter_map(|&id| fs.devices.iter().position(|d| d.devid == id))
        };
        // btrfs_shrink_device: each device's extents from the highest
        // offset down, the devices in the plan's order.
        let mut chunks: Vec<u64> = Vec::new();
        for &id in order {
            let mut here: Vec<_> = facts.dev_extents.iter().filter(|e| e.devid == id).collect();
            here.sort_by_key(|e| std::cmp::Reverse(e.offset));
            for e in here {
                if !chunks.contains(&e.chunk_logical) {
                    chunks.push(e.chunk_logical);
                }
            }
        }
        RemoveReplay {
            gone: leaving().collect(),
            gone_bytes: leaving().map(|i| fs.devices[i].size).sum(),
            chunks,
        }
    }

    fn run(&self, layout: &Layout, assume: Assume) -> std::result::Result<usize, Shortfall> {
        relocate::simulate_remove(layout, &self.gone, self.gone_bytes, &self.chunks, assume)
    }

    /// `Ok(chunks relocated)` when it fits under the least favourable
    /// assumptions, else where it runs out and whether it does under every
    /// assumption (a sure refusal).
    fn verdict(&self, layout: &Layout) -> std::result::Result<usize, (Shortfall, bool)> {
        // A refusal only where data runs out under every assumption: the
        // kernel sizes the metadata and system chunks it makes on the way
        // in ways the replay does not follow (3 × 1 GiB, single data with
        // 1100 MiB, removing device 3: the replay ran out at the system
        // chunk, the kernel made a 155 MiB metadata and a 12 MiB system
        // chunk and completed). Every data refusal tried was a real ENOSPC.
        self.run(layout, Assume::WORST).map_err(|s| {
            let sure =
                s.kind == ChunkKind::Data && !Assume::all().any(|a| self.run(layout, a).is_ok());
            (s, sure)
        })
    }

    /// The smallest device (of a few sizes) whose addition lets the replay
    /// finish, if any.
    fn device_that_fits(&self, layout: &Layout) -> Option<u64> {
        (0..8).map(|i| (256u64 << 20) << i).find(|&size| {
            let mut l = layout.clone();
            l.free.push(size);
            l.total_bytes += size;
            self.run(&l, Assume::WORST).is_ok()
        })
    }
}

/// Where the replay runs out, with the numbers.
fn shortfall_text(s: &Shortfall) -> String {
    let what = s.why(" on the devices that stay");
    format!(
        "relocating chunk {} of {} ({} {} at {}), {what}",
        s.step,
        s.steps,
        s.kind.name(),
        s.from,
        s.logical,
    )
}

/// The refusal when the replay runs out under every assumption.
fn shortfall_reason(fs: &FsState, layout: &Layout, r: &RemoveReplay, s: &Shortfall) -> Reason {
    let m = fs.mount_point.display();
    let fits_with = r.device_that_fits(layout);
    let fix = match fits_with {
        Some(size) => format!(
            "add a device of at least {} first (btrfs-lab device add {m} DEV) or delete data",
            format_iec(size)
        ),
        None => format!("add devices first (btrfs-lab device add {m} DEV) or delete data"),
    };
    Reason::general(
        "no-space-during-remove",
        format!(
            "not enough space to remove: {}; the kernel's relocation stops there with ENOSPC (and has aborted the transaction and forced the filesystem read-only when it was metadata); {fix}",
            shortfall_text(s)
        ),
        false,
    )
}

/// Reads what the planner needs through the handle.
pub fn read_facts(fs: &FsHandle, state: &FsState) -> Result<RemoveFacts> {
    Ok(RemoveFacts {
        chunks: fs.chunk_records()?.unwrap_or_default(),
        dev_extents: fs.dev_extents()?.unwrap_or_default(),
        read_only: fs.read_only(),
        is_root: crate::sys::is_root(),
        layout: crate::convert::read_layout(fs, state),
        started: None,
    })
}

/// Plans on the filesystem at `path`.
pub fn prepare(
    root: &crate::sys::fs::root::SysRoot,
    path: &Path,
    specs: &[RemoveSpec],
    store: &StartedStore,
) -> Result<(FsHandle, FsState, RemovePlan)> {
    let (fs, state) = crate::operation::state::open_state(root, path)?;
    let mut facts = read_facts(&fs, &state)?;
    facts.started = store.remove(&state.fsid);
    let plan = plan_remove(&state, specs, &facts);
    Ok((fs, state, plan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::started::DeviceAt;
    use crate::model::kernel::KernelVersion;
    use crate::operation::state::MemberDevice;
    use crate::sys::kernel::btrfs::SpaceEntry;
    use btrfs_uapi::space::BlockGroupFlags as F;

    const GIB: u64 = 1 << 30;

    /// `n` devices of 10 GiB; data RAID0 (1 GiB per device), metadata as given.
    fn fs(n: u64, meta: F) -> (FsState, RemoveFacts) {
        let devices: Vec<MemberDevice> = (1..=n)
            .map(|i| MemberDevice {
                devid: i,
                path: format!("/dev/test-none-{i}"),
                size: 10 * GIB,
                allocated: GIB + GIB / 4,
            })
            .collect();
        let all: Vec<u64> = (1..=n).collect();
        let mut chunks = vec![ChunkRecord {
            flags: F::DATA | F::RAID0,
            logical: 100 * GIB,
            length: n * GIB,
            stripe_len: 64 << 10,
            num_stripes: n as u16,
            sub_stripes: 1,
            devids: all.clone(),
        }];
        let mcopies: Vec<u64> = if meta.contains(F::RAID1C3) {
            all[..3].to_vec()
        } else {
            all[..2].to_vec()
        };
        chunks.push(ChunkRecord {
            flags: F::METADATA | meta,
            logical: 200 * GIB,
            length: GIB / 4,
            stripe_len: 64 << 10,
            num_stripes: mcopies.len() as u16,
            sub_stripes: 1,
            devids: mcopies.clone(),
        });
        let mut dev_extents = Vec::new();
        for &d in &all {
            dev_extents.push(DevExtent {
                devid: d,
                offset: GIB,
                length: GIB,
                chunk_logical: 100 * GIB,
            });
            if mcopies.contains(&d) {
                dev_extents.push(DevExtent {
                    devid: d,
                    offset: 2 * GIB,
                    length: GIB / 4,
                    chunk_logical: 200 * GIB,
                });
            }
        }
        (
            FsState {
                path: "/mnt".into(),
                mount_point: "/mnt".into(),
                fsid: "x".into(),
                devices,
                spaces: vec![
                    SpaceEntry {
                        flags: F::DATA | F::RAID0,
                        total_bytes: n * GIB,
                        used_bytes: n * GIB / 2,
                    },
                    SpaceEntry {
                        flags: F::METADATA | meta,
                        total_bytes: GIB / 4,
                        used_bytes: 1 << 20,
                    },
                ],
                exclusive_operation: Some("none".into()),
                balance: None,
                kernel: KernelVersion::new(6, 18),
                features: Vec::new(),
                device_errors: Vec::new(),
            },
            RemoveFacts {
                chunks,
                dev_extents,
                read_only: false,
                is_root: true,
                layout: None,
                started: None,
            },
        )
    }

    #[test]
    fn raid1c3_needs_three_and_the_refusal_names_the_convert() {
        let (f, x) = fs(3, F::RAID1C3);
        let p = plan_remove(&f, &[RemoveSpec::Devid(3)], &x);
        assert_eq!(p.refusals.len(), 1, "{:?}", p.refusals);
        assert_eq!(p.refusals[0].code, "too-few-devices");
        assert!(
            p.refusals[0].message.contains("metadata raid1c3 needs 3"),
            "{}",
            p.refusals[0].message
        );
        assert!(
            p.refusals[0]
                .message
                .contains("btrfs-lab convert /mnt --metadata raid1"),
            "{}",
            p.refusals[0].message
        );
        let (f, x) = fs(4, F::RAID1C3);
        let p = plan_remove(&f, &[RemoveSpec::Devid(4)], &x);
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(
            p.commands,
            vec![vec!["btrfs", "device", "remove", "4", "/mnt"]]
        );
    }

    #[test]
    fn two_devices_in_the_order_that_moves_least_twice() {
        let (f, x) = fs(4, F::RAID1);
        let p = plan_remove(&f, &[RemoveSpec::Devid(3), RemoveSpec::Devid(1)], &x);
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(p.devices.len(), 2);
        assert_eq!(p.remaining, [2, 4]);
        // Device 1 holds metadata too: whichever order, the plan's choice
        // moves no more twice than the other order would.
        let other: Vec<u64> = p.devices.iter().rev().map(|d| d.devid).collect();
        let (_, twice_other, _) = simulate(&f, &x, &other, &mut false).unwrap();
        assert!(p.moved_twice <= twice_other);
        assert!(p.expected_move >= 2 * GIB);
    }

    #[test]
    fn a_running_remove_is_followed_and_a_finished_one_has_nothing_to_do() {
        // The kernel removes device 4 now (its size reads 0): followed, first.
        let (mut f, x) = fs(4, F::RAID1);
        f.exclusive_operation = Some("device remove".into());
        f.devices[3].size = 0;
        let p = plan_remove(&f, &[RemoveSpec::Devid(3), RemoveSpec::Devid(4)], &x);
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(p.following, Some(4));
        assert_eq!(p.devices[0].devid, 4);
        // Another device's remove runs: refused, named.
        let p = plan_remove(&f, &[RemoveSpec::Devid(2)], &x);
        assert_eq!(p.refusals[0].code, "other-remove-running");
        assert!(p.refusals[0].message.contains("device 4 is being removed"));

        // Device 4 is gone. With the record of the remove this tool
        // started: nothing to do; without it: not a member.
        let (mut f, mut x) = fs(4, F::RAID1);
        f.devices.retain(|d| d.devid != 4);
        let p = plan_remove(&f, &[RemoveSpec::Devid(4)], &x);
        assert_eq!(p.refusals[0].code, "not-member");
        assert_eq!(p.nothing_to_do(), None);
        x.started = Some(StartedRemove {
            fsid: "x".into(),
            devices: vec![RemovingDevice {
                devid: 4,
                device: DeviceAt {
                    path: "/dev/test-none-4".into(),
                    devt: None,
                },
            }],
            started_unix: 1,
        });
        let p = plan_remove(&f, &[RemoveSpec::Devid(4)], &x);
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert!(p.devices.is_empty() && p.commands.is_empty());
        assert_eq!(
            p.nothing_to_do().as_deref(),
            Some("nothing to do: 4 is no longer a member of /mnt")
        );
        // Another device named with it is removed; 4 is said to be done.
        let p = plan_remove(&f, &[RemoveSpec::Devid(4), RemoveSpec::Devid(3)], &x);
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(p.devices.len(), 1);
        assert_eq!(p.nothing_to_do(), None);
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("4 is no longer a member"))
        );
        // A devid never removed by us is still refused.
        let p = plan_remove(&f, &[RemoveSpec::Devid(9)], &x);
        assert_eq!(p.refusals[0].code, "not-member");
    }

    #[test]
    fn refusals_for_bad_names_and_space() {
        let (f, x) = fs(3, F::RAID1);
        let p = plan_remove(&f, &[RemoveSpec::Devid(9), RemoveSpec::Missing], &x);
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["not-member", "not-member"]);
        assert!(p.refusals[0].message.contains("1 /dev/test-none-1"));
        let p = plan_remove(
            &f,
            &[
                RemoveSpec::Devid(1),
                RemoveSpec::Devid(2),
                RemoveSpec::Devid(3),
            ],
            &x,
        );
        assert!(p.refusals.iter().any(|r| r.code == "last-device"));
        // Full devices: the data on the one removed does not fit.
        let (mut f, mut x) = fs(3, F::RAID1);
        for d in &mut f.devices {
            d.size = GIB + GIB / 4;
        }
        for s in &mut f.spaces {
            s.used_bytes = s.total_bytes;
        }
        x.is_root = true;
        let p = plan_remove(&f, &[RemoveSpec::Devid(2)], &x);
        assert_eq!(p.refusals[0].code, "no-space", "{:?}", p.refusals);
    }
}
